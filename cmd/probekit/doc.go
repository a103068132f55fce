// Command probekit lists and traces the USDT probes of programs.
//
//	probekit list [--json] TARGET [GLOB]
//
// list prints every USDT probe of TARGET (a path, a program found on PATH,
// or a library name such as libc.so.6 found in the library directories):
// per probe its locations with address, file offset and semaphore, and each
// argument decoded for the file's architecture. GLOB ("python:function__*",
// "*:gc__*", or a bare name pattern) keeps the matching probes. With
// --json the output is one JSON document (numbers as integers, fields that
// do not apply omitted).
//
// Exit status: 0 on success, 1 when the target is missing, not ELF, has no
// probes or none matching GLOB, 2 on a usage error.
package main
