package exporter

// The objects are committed; `make generate` rebuilds them (clang-19,
// libbpf-dev for bpf/bpf_helpers.h and bpf/bpf_tracing.h, the uapi headers
// of each target for asm/ptrace.h).
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 export export.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../usdt/bpf -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 export export.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -I../usdt/bpf -Wall -Werror
