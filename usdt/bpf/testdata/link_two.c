/* link_two.c: the second unit of TestLinkedUnits (see link_one.c). It
 * declares the header's maps extern, to be resolved to link_one.c's.
 * two_loop stores the four arguments of sample:loop. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#define PROBEKIT_USDT_EXTERN_MAPS
#include "usdt.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, long);
} two_vals SEC(".maps");

SEC("usdt")
int two_loop(struct pt_regs *ctx)
{
	long v;

	for (__u32 i = 0; i < 4; i++) {
		__u32 k = i;

		if (bpf_usdt_arg(ctx, i, &v))
			v = -1000 - i;
		bpf_map_update_elem(&two_vals, &k, &v, BPF_ANY);
	}
	__u32 k = 4;
	v = bpf_usdt_arg_cnt(ctx);
	bpf_map_update_elem(&two_vals, &k, &v, BPF_ANY);
	return 0;
}
