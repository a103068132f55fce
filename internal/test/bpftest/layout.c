//go:build ignore

/* layout.c: the smallest program that makes the compiler emit usdt.bpf.h's
 * spec types and maps, built for a big-endian target so that the Go
 * encoder's bitfield placement is checked against clang's on both byte
 * orders (usdt/spec_test.go). Never loaded on x86-64. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("usdt")
int layout(struct pt_regs *ctx)
{
	long v;

	bpf_usdt_arg(ctx, 0, &v);
	return bpf_usdt_arg_cnt(ctx) + v;
}
