//go:build ignore

/* stacktest.c: the BPF programs of stack.bpf.h's tests. Each hit sends
 * its thread's user stack: stack_entry for a probe at a function's first
 * instruction (at_entry), stack_site for a USDT site, stack_plain for a
 * uprobe without at_entry (what bpf_get_stack alone gives); stack_copy
 * sends the frame-pointer walk and the copied stack top together;
 * stack_count counts hits by stack in the kernel (at_entry);
 * stack_bare and stack_copy_only are the benchmarks' floor and copy. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "usdt.bpf.h"
#include "stack.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct stack_event {
	__u32 pid;
	__u32 tid;
	__s64 nframes; /* probekit_user_stack's result */
	__u64 frames[PROBEKIT_STACK_MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 23); /* 500 stack copies */
} stacks SEC(".maps");

static __always_inline int send(struct pt_regs *ctx, int at_entry)
{
	struct stack_event *e = bpf_ringbuf_reserve(&stacks, sizeof(*e), 0);
	__u64 id = bpf_get_current_pid_tgid();

	if (!e)
		return 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->nframes = probekit_user_stack(ctx, e->frames, sizeof(e->frames), at_entry);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("uprobe")
int stack_entry(struct pt_regs *ctx)
{
	return send(ctx, 1);
}

SEC("usdt")
int stack_site(struct pt_regs *ctx)
{
	return send(ctx, 0);
}

SEC("uprobe")
int stack_plain(struct pt_regs *ctx)
{
	return send(ctx, 0);
}

struct copy_event {
	__u32 pid;
	__u32 tid;
	__s64 nframes; /* probekit_user_stack's result (frame pointers) */
	__s64 copied;  /* probekit_copy_stack's result */
	__u64 frames[PROBEKIT_STACK_MAX_DEPTH];
	struct probekit_stack_copy copy;
};

SEC("uprobe")
int stack_copy(struct pt_regs *ctx)
{
	struct copy_event *e = bpf_ringbuf_reserve(&stacks, sizeof(*e), 0);
	__u64 id = bpf_get_current_pid_tgid();

	if (!e)
		return 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->nframes = probekit_user_stack(ctx, e->frames, sizeof(e->frames), 1);
	e->copied = probekit_copy_stack(ctx, &e->copy);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

PROBEKIT_STACK_COUNT_MAPS(stack_ids, stack_counts, 1024);

SEC("uprobe")
int stack_count(struct pt_regs *ctx)
{
	probekit_count_user_stack(ctx, &stack_ids, &stack_counts, 1, 1);
	return 0;
}

/* The benchmarks' floor: a uprobe program that does nothing. */
SEC("uprobe")
int stack_bare(struct pt_regs *ctx)
{
	return 0;
}

/* The copy alone, without the frame-pointer walk: what user-space
 * unwinding costs a hit on the BPF side. */
SEC("uprobe")
int stack_copy_only(struct pt_regs *ctx)
{
	struct probekit_stack_copy *c = bpf_ringbuf_reserve(&stacks, sizeof(*c), 0);

	if (!c)
		return 0;
	probekit_copy_stack(ctx, c);
	bpf_ringbuf_submit(c, 0);
	return 0;
}

/* The copy of at most 1 and 2 pages (probekit_copy_stack_pages): what
 * a smaller window saves. */
SEC("uprobe")
int stack_copy_1page(struct pt_regs *ctx)
{
	struct probekit_stack_copy *c = bpf_ringbuf_reserve(&stacks, sizeof(*c), 0);

	if (!c)
		return 0;
	probekit_copy_stack_pages(ctx, c, 1);
	bpf_ringbuf_submit(c, 0);
	return 0;
}

SEC("uprobe")
int stack_copy_2pages(struct pt_regs *ctx)
{
	struct probekit_stack_copy *c = bpf_ringbuf_reserve(&stacks, sizeof(*c), 0);

	if (!c)
		return 0;
	probekit_copy_stack_pages(ctx, c, 2);
	bpf_ringbuf_submit(c, 0);
	return 0;
}
