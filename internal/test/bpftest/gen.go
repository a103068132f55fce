package bpftest

// The objects are committed; `make generate` rebuilds them (clang-19,
// libbpf-dev for bpf/bpf_helpers.h, the x86-64 uapi headers for
// asm/ptrace.h).
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -type hit Args args.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../../../usdt/bpf -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -type hit ArgsPre17 args.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../../../usdt/bpf -DPROBEKIT_TEST_PRE17 -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 Count count.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../../../usdt/bpf -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target s390x Layout layout.c -- -I/usr/include -I/usr/s390x-linux-gnu/include -I../../../usdt/bpf -Wall -Werror
