/* link_one.c and link_two.c: two units that both include usdt.bpf.h,
 * linked into one object by `bpftool gen object` (TestLinkedUnits).
 * This unit defines the header's maps; link_two.c declares them extern.
 * one_consts stores the five arguments of sample:consts. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 6);
	__type(key, __u32);
	__type(value, long);
} one_vals SEC(".maps");

static __always_inline void put(__u32 k, long v)
{
	bpf_map_update_elem(&one_vals, &k, &v, BPF_ANY);
}

SEC("usdt")
int BPF_USDT(one_consts, long a, long b, long c, long d, long e)
{
	put(0, a);
	put(1, b);
	put(2, c);
	put(3, d);
	put(4, e);
	put(5, bpf_usdt_arg_cnt(ctx));
	return 0;
}
