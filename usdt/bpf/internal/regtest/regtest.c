//go:build ignore

/* regtest.c: reg_slots stores, at each hit, every slot of the uprobe
 * context as usdt.bpf.h's __probekit_usdt_read_reg reads it and as
 * bpf_probe_read_kernel reads it, with each read's result. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
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
