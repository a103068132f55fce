//go:build ignore

/* regtest.c: reg_slots stores, at each hit, every slot of the uprobe
 * context as usdt.bpf.h's __probekit_usdt_read_reg reads it and as
 * bpf_probe_read_kernel reads it, with each read's result. same_args
 * stores, at each hit, every argument as __probekit_usdt_same_arg reads
 * it (when it does) and as bpf_usdt_arg reads it from the spec. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#define PROBEKIT_USDT_SAME_ARGS
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct reg_slots {
	__u64 nslots;	/* __PROBEKIT_USDT_CTX_SLOTS */
	__u64 hits;
	__u64 fast[__PROBEKIT_USDT_CTX_SLOTS];
	__s64 fast_err[__PROBEKIT_USDT_CTX_SLOTS];
	__u64 helper[__PROBEKIT_USDT_CTX_SLOTS];
	__s64 helper_err[__PROBEKIT_USDT_CTX_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct reg_slots);
} slots SEC(".maps");

SEC("uprobe")
int reg_slots(struct pt_regs *ctx)
{
	__u32 key = 0;
	struct reg_slots *s = bpf_map_lookup_elem(&slots, &key);

	if (!s)
		return 0;
	s->nslots = __PROBEKIT_USDT_CTX_SLOTS;
	s->hits++;
	for (__u32 i = 0; i < __PROBEKIT_USDT_CTX_SLOTS; i++) {
		unsigned long v = 0;
		long off = 8 * i;

		/* off unknown to the compiler: the switch is not folded. */
		__probekit_usdt_barrier(off);
		s->fast_err[i] = __probekit_usdt_read_reg(&v, ctx, off);
		s->fast[i] = v;
		v = 0;
		s->helper_err[i] = bpf_probe_read_kernel(&v, sizeof(v), (const void *)ctx + off);
		s->helper[i] = v;
	}
	return 0;
}

#define SAME_MAX_HITS 32

struct same_hit {
	__u32 fast;	/* bit n: argument n read without the spec */
	__u32 __pad;
	__s64 fast_val[BPF_USDT_MAX_ARG_CNT];
	__s64 spec_val[BPF_USDT_MAX_ARG_CNT];
	__s64 spec_err[BPF_USDT_MAX_ARG_CNT];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SAME_MAX_HITS);
	__type(key, __u32);
	__type(value, struct same_hit);
} same_hits SEC(".maps");

/* The hits stored: same_hits[0, same_n). The test's hits come one at
 * a time, from one thread. */
__u32 same_n = 0;

SEC("usdt")
int same_args(struct pt_regs *ctx)
{
	__u32 key = same_n;
	struct same_hit *h = bpf_map_lookup_elem(&same_hits, &key);

	same_n = key + 1;
	if (!h)
		return 0;
	h->fast = 0;
#pragma unroll
	for (__u32 n = 0; n < BPF_USDT_MAX_ARG_CNT; n++) {
		long v = 0;

		if (__probekit_usdt_same_arg(ctx, n, &v))
			h->fast |= 1u << n;
		h->fast_val[n] = v;
		v = 0;
		h->spec_err[n] = bpf_usdt_arg(ctx, n, &v);
		h->spec_val[n] = v;
	}
	return 0;
}
