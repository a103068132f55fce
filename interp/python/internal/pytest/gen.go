// Package pytest holds the BPF program of package interp/python's kernel
// tests (pytest.c), over usdt/bpf/python.bpf.h.
//
// The objects are committed; `make generate` rebuilds them. The arm64
// object is a compile test of python.bpf.h for arm64.
package pytest

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 Pytest pytest.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../../../../usdt/bpf -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 Pytest pytest.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -I../../../../usdt/bpf -Wall -Werror
