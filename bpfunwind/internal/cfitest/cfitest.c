//go:build ignore

/* cfitest.c: the BPF programs of package bpfunwind's tests and
 * benchmarks. cfi_count counts hits by CFI-unwound stack in the kernel;
 * cfi_stack sends each hit's CFI-unwound stack with a copy of the stack
 * top (stack.bpf.h) for package unwind to walk the same hit in user
 * space; the benchmark programs walk and drop: cfi_walk (unwind.bpf.h)
 * against fp_walk (bpf_get_stack, the kernel's frame-pointer walk), and
 * fp_count (stack.bpf.h's count) against cfi_count; bare does nothing;
 * cfi_count_usdt is cfi_count for a USDT site. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "usdt.bpf.h"
#include "stack.bpf.h"
#include "unwind.bpf.h"

char LICENSE[] SEC("license") = "GPL";

PROBEKIT_CFI_COUNT_MAPS(cfi_stacks, cfi_counts, 1024);

SEC("uprobe")
int cfi_count(struct pt_regs *ctx)
{
	probekit_cfi_count_user_stack(ctx, &cfi_stacks, &cfi_counts, 1, 1);
	return 0;
}

/* The same at a USDT site (not a function's entry). */
SEC("usdt")
int cfi_count_usdt(struct pt_regs *ctx)
{
	probekit_cfi_count_user_stack(ctx, &cfi_stacks, &cfi_counts, 0, 1);
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

struct cfi_event {
	struct probekit_cfi_stack stack;
	struct probekit_stack_copy copy;
};

SEC("uprobe")
int cfi_stack(struct pt_regs *ctx)
{
	struct cfi_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	struct probekit_cfi_stack *s;

	if (!e)
		return 0;
	s = probekit_cfi_user_stack(ctx, 1);
	if (!s || bpf_probe_read_kernel(&e->stack, sizeof(e->stack), s)) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	probekit_copy_stack(ctx, &e->copy);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* Benchmarks. */
volatile __u64 frames_seen;

SEC("uprobe")
int cfi_walk(struct pt_regs *ctx)
{
	struct probekit_cfi_stack *s = probekit_cfi_user_stack(ctx, 1);

	if (s)
		frames_seen += s->n;
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probekit_cfi_stack);
} fp_scratch SEC(".maps");

SEC("uprobe")
int fp_walk(struct pt_regs *ctx)
{
	__u32 zero = 0;
	struct probekit_cfi_stack *s = bpf_map_lookup_elem(&fp_scratch, &zero);

	if (!s)
		return 0;
	long n = probekit_user_stack(ctx, s->pcs, sizeof(s->pcs), 1);

	if (n > 0)
		frames_seen += n;
	return 0;
}

PROBEKIT_STACK_COUNT_MAPS(fp_ids, fp_counts, 1024);

SEC("uprobe")
int fp_count(struct pt_regs *ctx)
{
	probekit_count_user_stack(ctx, &fp_ids, &fp_counts, 1, 1);
	return 0;
}

SEC("uprobe")
int bare(struct pt_regs *ctx)
{
	return 0;
}
