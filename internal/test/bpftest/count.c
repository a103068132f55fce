//go:build ignore

/* count.c: per-hit cost baselines. count_hits only counts; count_args4
 * also reads four arguments through usdt.bpf.h. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void add(__u64 n)
{
	__u32 key = 0;
	__u64 *v = bpf_map_lookup_elem(&counts, &key);

	if (v)
		__sync_fetch_and_add(v, n);
}

SEC("usdt")
int count_hits(struct pt_regs *ctx)
{
	add(1);
	return 0;
}

/* Adds 1 per hit, plus nothing: the arguments are summed into a value the
 * verifier cannot drop, but only their count reaches the map. */
SEC("usdt")
int BPF_USDT(count_args4, long a, long b, long c, long d)
{
	volatile long sink = a + b + c + d;

	(void)sink;
	add(1);
	return 0;
}
