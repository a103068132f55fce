//go:build ignore

/* mallocprof.c: counts malloc's calls and bytes by user stack, in the
 * kernel. On x86-64 the stack is unwound from the objects' call-frame
 * information (unwind.bpf.h's probekit_cfi_count_user_stack, with the
 * tables package bpfunwind fills), whole through code without frame
 * pointers; elsewhere by frame pointers (stack.bpf.h's
 * probekit_count_user_stack). */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "stack.bpf.h"
#include "unwind.bpf.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#if defined(__TARGET_ARCH_x86)
PROBEKIT_CFI_COUNT_MAPS(stacks, counts, 16384);
#else
PROBEKIT_STACK_COUNT_MAPS(stacks, counts, 16384);
#endif

SEC("uprobe")
int malloc_stack(struct pt_regs *ctx)
{
	/* At malloc's first instruction (at_entry 1); the size is its first
	 * argument. */
#if defined(__TARGET_ARCH_x86)
	probekit_cfi_count_user_stack(ctx, &stacks, &counts, 1, ctx->rdi);
#else
	probekit_count_user_stack(ctx, &stacks, &counts, 1, ((struct user_pt_regs *)ctx)->regs[0]);
#endif
	return 0;
}
