// Command probekit lists and traces the USDT probes of programs.
//
//	probekit list [--json] TARGET [GLOB]
//	probekit list [--json] -p PID [GLOB]
//	probekit trace [--json] [-p PID] [-n COUNT] [--str N,...] TARGET:PROVIDER:NAME... [-- CMD ARGS...]
//
// list prints every USDT probe of TARGET (a path, a program found on PATH,
// or a library name such as libc.so.6 found in the library directories):
// per probe its locations with address, file offset and semaphore, and each
// argument decoded for the file's architecture. GLOB ("python:function__*",
// "*:gc__*", or a bare name pattern) keeps the matching probes. With
// --json the output is one JSON document (numbers as integers, fields that
// do not apply omitted). With -p PID it lists the probes of every object
// the process has mapped — its executable and shared libraries, opened
// through the process's root when it runs in a container — each under the
// path the process knows it by: {"pid", "objects": [{"path", "host_path",
// "machine", "probes": [...]}]}.
//
// trace attaches a generic BPF program to every location of the named
// probes (globs allowed in PROVIDER and NAME) and prints each hit with its
// arguments, signed or unsigned as the probe's argument spec says:
//
//	PID/TID provider:name @ADDRESS [ARG ...]
//
// or, with --json, one object per line: {"provider", "name", "pid", "tid",
// "address", "args"}, where address is the link-time address of the
// location that fired and args are JSON integers (null for an argument
// the program could not read). --str 1,2 prints those arguments (counted
// from 1) as the NUL-terminated strings they point to (at most 4, each up
// to 95 bytes). With -- CMD, probekit launches CMD stopped right after
// exec, attaches (filtered to its PID), lets it run, and exits when it
// exits, after printing every event; a bare CMD name prefers an ELF binary
// on PATH over a wrapper script. -p PID traces one running process until it exits; -n
// COUNT exits after COUNT hits. Without -p or CMD every process running
// TARGET is traced until interrupted.
//
// Note that CPython 3.11 fires function__entry and function__return only
// while a trace or profile function is set (sys.setprofile).
//
// Exit status: 0 on success, 1 when a target is missing, not ELF, has no
// probes or none matching, or when tracing is not permitted (root is
// needed), 2 on a usage error.
package main
