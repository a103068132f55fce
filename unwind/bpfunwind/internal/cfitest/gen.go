// Package cfitest holds the BPF programs of package bpfunwind's tests
// and benchmarks (cfitest.c), over unwind.bpf.h and stack.bpf.h.
//
// The object is committed; `make generate` rebuilds it.
package cfitest

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 Cfitest cfitest.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../../../../usdt/bpf -Wall -Werror
