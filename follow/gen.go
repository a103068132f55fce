package follow

// The objects are committed; `make generate` rebuilds them (clang-19,
// libbpf-dev for bpf/bpf_helpers.h).
//
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 watch watch.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 watch watch.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -Wall -Werror
