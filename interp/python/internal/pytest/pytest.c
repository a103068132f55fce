//go:build ignore

/* pytest.c: the BPF programs of package interp/python's kernel tests:
 * py_stack sends, at each hit, the hitting thread's Python frames as
 * python.bpf.h reads them, and its native stack as unwind.bpf.h walks
 * it (the eval-loop frames there are the runs the Python frames' flags
 * end). */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include "usdt.bpf.h"
#include "stack.bpf.h"
#include "unwind.bpf.h"
#include "python.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} events SEC(".maps");

struct py_event {
	__u32 pid;
	__u32 tid;
	struct probekit_interp_stack stack;
	struct probekit_cfi_stack native;
};

SEC("uprobe")
int py_stack(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct py_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e)
		return 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	probekit_py_user_stack(&e->stack);
	struct probekit_cfi_stack *n = probekit_cfi_user_stack(ctx, 1);

	if (!n || bpf_probe_read_kernel(&e->native, sizeof(e->native), n))
		e->native.n = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* Benchmarks: py_walk walks the Python frames into a per-CPU scratch
 * value and drops them; bare does nothing. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probekit_interp_stack);
} py_scratch SEC(".maps");

volatile __u64 frames_seen;

SEC("uprobe")
int py_walk(struct pt_regs *ctx)
{
	__u32 zero = 0;
	struct probekit_interp_stack *s = bpf_map_lookup_elem(&py_scratch, &zero);

	if (s)
		frames_seen += probekit_py_user_stack(s);
	return 0;
}

SEC("uprobe")
int bare(struct pt_regs *ctx)
{
	return 0;
}
