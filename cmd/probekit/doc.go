// Command probekit lists and traces the USDT probes and the functions of
// programs.
//
//	probekit list [--json] TARGET [GLOB]
//	probekit list [--json] -p PID [GLOB]
//	probekit list --functions [--params] [--json] [-p PID] TARGET [GLOB]
//	probekit trace [--json] [--time] [-o FILE] [-p PID] [-f] [-n COUNT] [--str N,...] [--ring-size SIZE] [--stack[=fp] | --count [--stack [--folded] [--pprof FILE]] | --hist N|ret | --latency] [--by KEY,... [--top N]] [-i SECONDS] [--filter EXPR] PROBE... [-- CMD ARGS...]
//	probekit symbolize [--json] [-C] [--cache-dir DIR | --no-cache] (-p PID | -e FILE) [ADDR...]
//	probekit cflags [-o DIR]
//	probekit export --config FILE [--listen ADDR]
//
//	PROBE := [usdt:]TARGET:PROVIDER:NAME | uprobe:TARGET:FUNC | uretprobe:TARGET:FUNC
//
// TARGET is a path, a program found on PATH, or a library name such as
// libc.so.6 found in the library directories; with -p PID (or a launched
// CMD) it is found as that process sees it: a path inside its root (a
// container's file, not the host's), a bare name among the objects it
// maps, then in its program and library directories.
//
// list prints every USDT probe of TARGET: per probe its locations with
// address, file offset and semaphore, and each argument decoded for the
// file's architecture. GLOB ("python:function__*", "*:gc__*", or a bare
// name pattern) keeps the matching probes. With --json the output is one
// JSON document (numbers as integers, fields that do not apply omitted).
// With -p PID it lists the probes of every object the process has mapped
// — its executable and shared libraries, opened through the process's
// root when it runs in a container — each under the path the process
// knows it by: {"pid", "objects": [{"path", "host_path", "machine",
// "probes": [...]}]}. TARGET '*' lists every object mapped by a process
// of the host, once per file, with the PIDs that map it; processes it
// cannot read (another user's, when not root) are counted and said, on
// stderr or in the error, and in JSON as "unreadable_processes". With
// --functions it lists the functions uprobes attach to (from .symtab,
// .dynsym and Go's .gopclntab), as nm -n does; --params adds each
// function's signature from DWARF ("long mix(int i, const char *s)",
// "func main.emit(i int, name string) int"; "signature" in JSON).
//
// trace attaches generic BPF programs to the probes named and prints each
// hit. A USDT probe (globs allowed in PROVIDER and NAME) is attached at
// every location, and a hit shows its arguments, signed or unsigned as
// the probe's argument spec says:
//
//	PID/TID provider:name @ADDRESS [ARG ...]
//
// uprobe:TARGET:FUNC attaches at the entry of the function FUNC names: a
// C name, a versioned one (malloc@@GLIBC_2.2.5, memcpy@GLIBC_2.2.5), a
// mangled C++ name, a Go name (main.(*Server).Handle), or a glob over
// them (uv_fs_*: one probe per address, aliases sharing it). A hit shows
// the argument registers of the function's calling convention, as signed
// 64-bit integers (the program knows no types or counts): rdi, rsi, rdx,
// rcx, r8, r9 for C on x86-64, x0-x7 on arm64; for Go functions, Go's
// register ABI (ABIInternal, Go 1.17 on x86-64 and 1.18 on arm64): rax,
// rbx, rcx, rdi, rsi, r8, r9, r10, r11 on x86-64, x0-x7 on arm64.
// uretprobe:TARGET:FUNC shows the value the function returns (rax or x0;
// for Go its first result). On a Go program it probes each return
// instruction instead of using a kernel uretprobe, which crashes Go
// programs when the runtime moves a stack; elsewhere it is a uretprobe.
//
//	PID/TID uprobe:FUNC @ADDRESS [ARG ...]
//	PID/TID uretprobe:FUNC @ADDRESS = RET
//
// When DWARF describes the function (the file's own, or its debug file
// found by build ID or .gnu_debuglink under /usr/lib/debug or beside
// it), a hit names its parameters instead, with their values read by
// type from the registers DWARF locates them in at the entry (for C -O0,
// where the convention puts them): integers by size and sign, an
// enumeration by its enumerator's name (its number when none has it), char
// pointers and Go strings as strings (no --str needed; at most 4 per
// hit), other pointers in hex, a struct pointer with its type, a small
// struct passed in registers by its members; a parameter on the stack or
// in a floating-point register is named with its type and "not shown".
// A uretprobe prints the result by its type (a char pointer or a Go
// string as a string). With --json the raw "args" stay and "params":
// [{"name", "type", "value"}] follows them (value null when not shown;
// an enumeration's value stays a number, with "enumerator": its name);
// a uretprobe adds "return": {"type", "value"} beside "ret". Probes
// matching more than 256 functions print raw registers. The registers
// the BPF program reads are those of pt_regs: a floating-point
// register is not among them, and the stack is not read.
//
//	PID/TID uprobe:emit @0x13a0 emit(i=0, name="x")
//	PID/TID uretprobe:label @0x1440 = "even"
//
// ADDRESS is the link-time address of the USDT location or of the
// function. --time starts each line with the hit's time (the wall clock,
// to the nanosecond) and the thread's command name. With --json each hit
// is one object per line, with "kind" first: {"kind":"usdt", "provider",
// "name", "pid", "tid", "comm", "time_ns", "time", "address", "args"},
// {"kind":"uprobe", "function", "pid", "tid", ..., "args"} or
// {"kind":"uretprobe", "function", "pid", "tid", ..., "ret"}; "time_ns"
// is the kernel's CLOCK_MONOTONIC when the probe fired
// (bpf_ktime_get_ns), "time" the same instant on the wall clock (RFC
// 3339, UTC), "comm" the thread's command name;
// values are JSON integers (null for an argument the program could not
// read). --str 1,2 prints those arguments (counted from 1) of USDT and
// uprobe hits as the NUL-terminated strings they point to (at most 4,
// each up to 95 bytes); a return value is read as one only by its DWARF
// type. USDT and
// function probes mix freely in one trace, sharing one ring buffer of
// --ring-size bytes (a power of two, 16M by default). Hits reach the
// output within about 100 ms, and in chunks while a burst lasts.
//
// --stack adds the user stack of each hit (up to 127 frames), symbolized
// in its process, innermost first, one frame per line indented under the
// hit:
//
//	3598/3598 uprobe:chain_end @0x1310 [0 ...]
//	    0x56176b477310 chain_end+0x0 (/path/stack_chain)
//	    0x56176b47733a chain_c+0xa (/path/stack_chain)
//	    ...
//
// and in --json as "stack": [{"address", "function", "offset", "object"},
// ...] ("function" is "" when unknown). The stack is whole: the BPF
// program walks it (package bpfunwind, x86-64) with the call-frame
// information (.eh_frame) of each object where it has one, and by frame
// records where it has none (JIT code, hand-written assembly), frame by
// frame, down to _start: C and C++ built without frame pointers
// (-fomit-frame-pointer, the default at -O2; Debian's libc and
// python3.11) included. It walks every process the trace reaches: -p
// PID, a launched command, -f descendants, and host-wide, where a
// process is added to the walk's tables at its first hit (that hit, and
// any before its tables are loaded, is walked by frame pointers, marked,
// and counted in a note at the end). A stack cut short ends with a line
// "[truncated: REASON]" (in --json, "truncated": REASON): no unwind
// information for an object, unreadable stack memory, the depth limit.
// --stack=fp takes the kernel's frame-pointer walk instead: cheaper, and
// short in code without frame pointers (it cannot tell why it stopped,
// except at the depth limit). docs/stacks.md has the costs.
//
// Frames are named from the tables of the files a process maps, read
// while it runs: for -p PID at the start; for a launched CMD at the start
// and again while it is stopped at each exec and at its exit, before its
// memory goes (ptrace's exit stop); for the processes of -f the same;
// for other processes at their first hit. So a launched or followed
// process that exits right after its hits is named in full, libraries it
// mapped after the exec included. Return addresses are named at the call
// instruction (the byte before), as addr2line names the return address
// minus one; the printed address and offset are the return address's.
//
// --count --stack (or --by stack, which combines with other keys) counts
// in the kernel by user stack (the whole stack, as --stack walks it) and
// the process: bpftrace's @[ustack] = count(). Each distinct stack is printed with its count
// (and the other keys as NAME=VALUE), most frequent first, --top N of
// them:
//
//	# probekit trace --count --stack uprobe:./stack_paths:leaf -- ./stack_paths 1000 300
//	1000
//	    0x55ccd1772200 leaf+0x0 (/path/stack_paths)
//	    0x55ccd1772229 emit+0x9 (/path/stack_paths)
//	    0x55ccd177225c hot+0x1c (/path/stack_paths)
//	    ...
//
//	300
//	    ...
//
// With --json a line per stack, {"key":{"stack":[frames as --stack
// prints them]},"count":N}. --folded prints instead the folded format of
// flamegraph.pl, speedscope and inferno, a line per call path, outermost
// first (inlined calls each a name of their own):
//
//	__libc_start_call_main;main;cold;emit;leaf 300
//	__libc_start_call_main;main;hot;emit;leaf 1000
//
// and --pprof FILE writes the counts as a pprof profile (go tool pprof,
// Pyroscope, Parca): a sample per stack valued by its hits, locations
// with function, file and line (from DWARF where the object or its debug
// file has it) and inlined frames as lines, mappings with the objects'
// build IDs. 10,240 distinct stacks are kept (a map of about 10 MiB,
// allocated only with a stack key); a hit whose stack finds it full is
// counted under no stack. Measured against bpftrace 0.17 on the same
// target in one run (BenchmarkTraceStackCount), a hit counted by
// --stack=fp costs 0.93 to 1.05 times bpftrace's @[ustack] = count()
// (three runs), which misses the caller at a function's entry.
//
// --count --stack counts by the same whole stacks, walked inside the
// BPF program, still with no event per hit (--count --stack=fp: the
// kernel's frame-pointer walk):
//
//	# probekit trace --count --stack --folded uprobe:./stack_chain_nofp:chain_end -- ./stack_chain_nofp --loop chain 5
//	_start;__libc_start_main_impl;__libc_start_call_main;main;run;fire;chain_a;chain_b;chain_c;chain_end 5
//
// The walk knows the objects of the processes it was given, read for
// -p PID at the start, for a launched command at its exec stop and again
// at its program's entry point (its shared libraries mapped, none of its
// code run), for -f the same for each process of the tree, for a target
// "*" or a glob at each change of the link map, and host-wide for each
// process whose stacks were counted, at the next second; and every
// process again each second, which also frees the tables of those that
// exited. A library a process maps otherwise unseen (dlopen without -f
// or a glob) is walked by frame pointers until that refresh. A counted
// stack cut short has the marker as its outermost frame
// ("[truncated: REASON]") in the table, in --folded and in --pprof.
//
// --count and --hist count in the kernel instead of sending each hit to
// probekit: a hit adds 1 to its probe's slot of a map (atomically), and
// nothing else happens until probekit reads the maps at exit (and every
// -i SECONDS, printing the totals so far). --count prints the hits of
// each probe by name (a USDT probe's locations add up; each function a
// glob matches is a probe of its own):
//
//	COUNT  PROBE
//	 5000  sample:loop
//	    3  uprobe:malloc
//
// --hist N builds a log2 histogram of argument N (from 1) of each USDT
// or uprobe probe, --hist ret of the value each uretprobe returns, drawn
// as bpftrace draws hist(): a line per bucket from the lowest to the
// highest with hits, (..., 0) for negative values, [0], [1], then
// [2, 4), [4, 8), ... [1K, 2K) with K, M, G for powers of 1024:
//
//	uprobe:malloc
//	[4K, 8K)                3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//
// With --json, --count prints {"probe", "count"} per probe and --hist
// {"probe", "buckets": [{"low", "high", "count"}, ...]} with the buckets
// that have hits, low included and high excluded. A hit whose value
// cannot be read is not counted (probekit says how many at exit). Up to
// 8192 probe sites are counted; a histogram map holds 4096 (probe,
// bucket) pairs.
//
// --by KEY[,KEY...] counts (or draws a histogram) per key tuple instead
// of per probe, in the kernel: a hash keyed by the tuple, read at
// exit. KEY is arg N or str N (argument N from 1, as a number or as the
// string it points to, up to 63 bytes; at most one str key), ret (a
// uretprobe's value), pid, tid, comm, probe (the probe's name) or func
// (the function's name, one per function a glob matches; a USDT probe's
// name) or stack (the user stack, see --count --stack). Up to 4 keys; "--by str 2" and "--by str2" are the same. The
// keys are printed sorted by count, the most first, --top N of them:
//
//	# probekit trace --count --by str 2 /usr/bin/python3.11:python:function__entry -- python3.11 fib.py
//	COUNT  STR2
//	 1973  fib
//	    7  hello
//
// and with --json as {"key": {"str2": "fib"}, "count": 1973} (or
// {"key", "buckets"}). The map holds 10240 keys; hits of further keys
// are not counted, and probekit says how many at exit.
//
// --filter EXPR drops, in the kernel, every hit for which EXPR does not
// hold, before it is sent or counted. EXPR compares argN, strN (N from
// 1), ret, pid, tid or comm with a constant: numbers (decimal, 0x hex,
// negative) with == != < <= > >=, strings ("...", with \" and \\) with
// == and !=, and a string ending in * with == and != matches a prefix
// (comm == "post*"). Comparisons join with && and ||, && first, up to 8
// of them, without parentheses. A value that cannot be read (a string
// pointer that faults, an argument the probe lacks) makes its comparison
// false. A bad EXPR is refused with the column of the fault:
//
//	probekit trace: --filter "arg1 > 4096 & pid == 1": column 13: want && or ||
//
// The filter is a table of compiled comparisons in a BPF map, evaluated
// by one loop of the programs; no BPF code is generated.
//
// --latency draws a log2 histogram of nanoseconds between a start hit and
// its end hit on the same thread, paired in the kernel: with one probe,
// uprobe:TARGET:FUNC, from each entry of FUNC to its return (a uretprobe,
// or return-site probes on Go); with two, --latency START END (USDT or
// function probes, such as PostgreSQL's query__start and query__done),
// from each START hit to the END hit that closes it. A thread's open
// starts (a goroutine's, for functions of Go code, which Go moves between
// threads) are a stack, so nested and recursive calls are each timed from
// their own start; up to 32 are kept per thread, and deeper starts, and
// ends with no open start (begun before the trace), are counted and said
// at exit. The histograms are per start probe, drawn as --hist draws
// them, with --json {"probe": START, "end": END, "buckets": [...]}:
//
//	# probekit trace --latency uprobe:testdata/bin/latency:lat_rec -- testdata/bin/latency --loop rec 3
//	uprobe:lat_rec -> return (ns)
//	[8M, 16M)               3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//	[16M, 32M)              3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
//	...
//
// --filter and --by are taken at the start: argN, strN and the keys arg
// N and str N read START's arguments (a function's at its entry; ret only
// when START is a uretprobe), probe and func name START. A start the
// filter drops is not timed, and still closes at its own end. --top,
// -i, -p, -f, -- CMD and "*" or glob targets work as with --hist.
//
// With -- CMD, probekit launches CMD stopped right after exec, attaches
// every probe (filtered to its PID), lets it run, and exits when it
// exits, after printing every event; a bare CMD name prefers an ELF
// binary on PATH over a wrapper script, and a CMD that fails (a non-zero
// exit, a signal) makes the trace fail after its hits. -p PID traces one
// running process until it exits; -n COUNT exits after COUNT hits (-n 0
// is refused: without -n there is no limit). A trace that ends before
// its CMD (-n, a signal, an error) ends CMD: SIGTERM, then SIGKILL a
// second later; with -f, CMD's descendants run on. -o
// FILE writes the output to FILE instead of standard output. With -f,
// each attach and release ("attach PID FILE PROBE (N sites)") goes to
// standard error, apart from the hits; with --json it is an object
// ({"kind":"attach", "pid", "file", "probe", "sites"}) among them. A
// launched CMD that is not the target program, traced without -f, can
// only have run it in a child: when no hit came, probekit says so ("not
// followed: add -f"). --count, --hist, --latency and --by take TARGET "*" and globs
// as the hits do.
// Without -p or CMD every process running TARGET is traced until
// interrupted; on a kernel without BPF cookies (before Linux 5.15) each
// such process is attached as it maps TARGET, with an attach line per
// process as with -f.
//
// Note that CPython 3.11 fires function__entry and function__return only
// while a trace or profile function is set (sys.setprofile).
//
// symbolize names addresses, as addr2line -f does, for processes and Go
// too: with -p PID, runtime addresses of that process (executables and
// shared libraries through its maps, inside its container, JIT code
// through /tmp/perf-PID.map, the vDSO); with -e FILE, link-time addresses
// of the file. Addresses come from the arguments or stdin, one per line,
// hex with or without 0x; -C demangles C++ names; --json prints one
// {"address", "function", "offset", "object"} per address in input order
// ("function" is "" when unknown), with "file" and "line" for Go code.
// What an object's DWARF gives every address is kept by build ID in a
// line index under --cache-dir (default $PROBEKIT_CACHE_DIR, else
// systemd's $CACHE_DIRECTORY, else $XDG_CACHE_HOME/probekit, else
// ~/.cache/probekit; without any, none: docs/privileges.md), written by the
// first run that reads that DWARF and read by the next ones instead of
// it; --no-cache reads the DWARF every time (package symbolize, "Line
// index cache").
//
// export serves Prometheus metrics on /metrics (default 127.0.0.1:9435)
// from a YAML file naming, per metric, a PROBE and what to count there: a
// counter of hits, a histogram of an argument (value: N, from 1, or ret)
// or of the latency from the probe to an end probe on the same thread,
// and labels read from arguments (at most max_series value combinations;
// the rest count under "other"). The metrics of a config share one BPF
// collection that aggregates in per-CPU maps, read at scrape time: no
// event per hit. A
// probe on a named TARGET is attached by path, in every process that maps
// the file, those started later included; a USDT probe whose TARGET is *
// or a glob ('*:python:function__entry') follows every process on the host
// (package follow): new binaries, new copies of a file and containers are
// attached as they start, and probekit_export_metric_sites lists the
// files attached now. Configuration errors name the file's line and
// field and exit 1; a metric that fails to attach is logged and reported
// by probekit_export_metric_attached and
// probekit_export_attach_errors_total while the others work. SIGHUP
// reloads the file (unchanged metrics keep their counts), SIGTERM
// detaches. examples/exporter has configurations for PostgreSQL and
// Python. export runs a second executable, probekit-export
// (./cmd/probekit-export), found next to probekit or on PATH, so that
// the other subcommands do not load its Prometheus and YAML libraries.
//
// cflags writes the BPF-side headers this probekit embeds (usdt.bpf.h,
// stack.bpf.h) and prints the -I flag that finds them, for clang or
// bpf2go.
//
// Exit status: 0 on success, 1 when a target is missing, not ELF, has no
// probes or functions or none matching, when tracing is not permitted
// (root is needed), or when the launched CMD failed, 2 on a usage error.
package main
