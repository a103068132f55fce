package main

// example is one command line of a subcommand's --help, and the
// question it answers.
type example struct{ cmd, what string }

// examples are the --help examples of each subcommand.
var examples = map[string][]example{
	"list": {
		{"list /usr/bin/python3.11", "which USDT probes python3.11 has, where, and where each argument is"},
		{"list python3.11 'python:gc__*'", "python3.11's garbage collector probes, the program found on PATH"},
		{"list -p PID", "the probes of every object process PID has mapped, shared libraries included"},
		{"list '*' 'python:*'", "every file mapped by any process on the host that has python:* probes"},
		{"list --functions /usr/bin/python3.11 'PyObject_*'", "the functions a uprobe can attach to, as nm lists them"},
		{"list --functions --params ./prog", "each function's signature from DWARF, for uprobe arguments"},
		{"list --json /usr/bin/python3.11", "the same as one JSON document"},
	},
	"trace": {
		{"trace /usr/bin/python3.11:python:function__entry -- python3.11 app.py", "each Python call of app.py, with its file, function and line"},
		{"trace --count --by 'str 2' /usr/bin/python3.11:python:function__entry -- python3.11 app.py", "how often each function is called, counted in the kernel"},
		{"trace --hist 1 uprobe:libc.so.6:malloc -p PID", "the sizes process PID asks malloc for, as a log2 histogram"},
		{"trace --latency uprobe:./prog:handle -- ./prog", "how long each call of handle takes, entry to return"},
		{"trace --count --stack --folded uprobe:libc.so.6:write -p PID", "which call stacks write, for a flame graph"},
		{"trace --count --stack --pprof write.pprof uprobe:libc.so.6:write -p PID", "the same as a pprof profile (go tool pprof write.pprof)"},
		{"trace -f '*:python:function__entry' -p PID", "the calls of PID and of every process it starts from now on"},
		{"trace --filter 'arg1 > 4096' uprobe:libc.so.6:malloc -p PID", "only the large allocations, filtered in the kernel"},
		{"trace '*:python:gc__start'", "every Python garbage collection on the host, in processes started later too"},
	},
	"symbolize": {
		{"symbolize -e /usr/lib/x86_64-linux-gnu/libc.so.6 0xd54e4", "which function and line holds a link-time address, as addr2line does"},
		{"symbolize -p PID 0x7f3a2c4d54e4", "which function of process PID holds a runtime address"},
		{"symbolize -C -e ./prog < addrs.txt", "the functions of a list of addresses, C++ and Rust names demangled"},
		{"symbolize --json -e ./prog 0x1139", "the frames (inlined ones too) as JSON"},
		{"symbolize --no-cache -e ./prog 0x1139", "without reading or writing the line index cache"},
	},
	"cflags": {
		{"cflags", "the -I flags that compile a BPF program including usdt.bpf.h"},
		{"cflags -o include", "the headers written to ./include"},
		{"cflags -target arm64", "the flags for a BPF program built for arm64 hosts"},
		{"cflags | xargs clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -c prog.bpf.c", "a BPF object with USDT argument fetching built in"},
		{"cflags -o include && go run github.com/cilium/ebpf/cmd/bpf2go -cflags \"$(probekit cflags -o include)\" prog prog.bpf.c", "the same through bpf2go"},
	},
}
