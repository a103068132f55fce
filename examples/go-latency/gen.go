package main

// The BPF objects are committed; `make generate` (or `go generate` here)
// rebuilds them with clang-19 and libbpf-dev's bpf/bpf_helpers.h, for
// x86-64 and arm64 (libc6-dev-arm64-cross provides arm64's asm/ptrace.h).
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 golat golat.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 golat golat.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -Wall -Werror
