// Package stacktest holds the BPF programs of stack.bpf.h's kernel tests:
// stack_entry (a probe at a function's first instruction) and stack_site
// (a USDT site) send each hit's user stack as a stack_event.
//
// The objects are committed; `make generate` rebuilds them. The arm64
// object is the compile test of stack.bpf.h's arm64 branch (the link
// register); only the x86-64 one runs here.
package stacktest

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 Stacktest stacktest.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../.. -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 Stacktest stacktest.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -I../.. -Wall -Werror
