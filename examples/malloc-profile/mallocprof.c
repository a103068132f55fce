//go:build ignore

/* mallocprof.c: counts malloc's calls and bytes by user stack, in the
 * kernel (stack.bpf.h's probekit_count_user_stack). */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "stack.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

PROBEKIT_STACK_COUNT_MAPS(stacks, counts, 16384);

SEC("uprobe")
int malloc_stack(struct pt_regs *ctx)
{
#if defined(__TARGET_ARCH_x86)
	__u64 size = ctx->rdi;
#else
	__u64 size = ((struct user_pt_regs *)ctx)->regs[0];
#endif
	/* At malloc's first instruction: at_entry keeps its caller. */
	probekit_count_user_stack(ctx, &stacks, &counts, 1, size);
	return 0;
}
