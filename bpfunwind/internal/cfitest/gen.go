// Package cfitest holds the BPF programs of package bpfunwind's tests
// and benchmarks (cfitest.c), over unwind.bpf.h and stack.bpf.h.
//
// The objects are committed; `make generate` rebuilds them. The arm64
// object is a compile test (unwind.bpf.h walks x86-64 stacks only;
// there probekit_cfi_user_stack returns NULL), so that the tests build
// for arm64.
package cfitest

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 Cfitest cfitest.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../../../usdt/bpf -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 Cfitest cfitest.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -I../../../usdt/bpf -Wall -Werror
