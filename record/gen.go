package record

// The objects are committed; `make generate` rebuilds them (clang-19,
// libbpf-dev for bpf/bpf_helpers.h, the uapi headers of each target for
// asm/ptrace.h: the host's for x86-64, libc6-dev-arm64-cross for arm64).
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -type event trace trace.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../usdt/bpf -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 -type event trace trace.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -I../usdt/bpf -Wall -Werror
