// Package regtest holds the BPF program of usdt.bpf.h's register-read
// kernel test: reg_slots reads every slot of the uprobe context twice,
// through the header's switch of constant-offset loads and through
// bpf_probe_read_kernel at the same offset, so that a test can compare
// them slot by slot.
//
// The objects are committed; `make generate` rebuilds them. The arm64
// object is the compile test of the switch's arm64 slots; only the
// x86-64 one runs here.
package regtest

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 Regtest regtest.c -- -I/usr/include -I/usr/include/x86_64-linux-gnu -I../.. -Wall -Werror
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target arm64 Regtest regtest.c -- -I/usr/include -I/usr/aarch64-linux-gnu/include -I../.. -Wall -Werror
