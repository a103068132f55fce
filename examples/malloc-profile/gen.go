package main

// The BPF objects are committed; `make generate` (or `go generate` here)
// rebuilds them with clang-19 and libbpf-dev's bpf/bpf_helpers.h.
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 mallocprof mallocprof.c -- -D__TARGET_ARCH_x86 -I/usr/include -I/usr/include/x86_64-linux-gnu -I../../usdt/bpf -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 mallocprof mallocprof.c -- -D__TARGET_ARCH_arm64 -I/usr/include -I/usr/aarch64-linux-gnu/include -I../../usdt/bpf -Wall -Werror
