//go:build ignore

/* pytest.c: the BPF program of package interp/python's kernel tests:
 * py_stack sends, at each hit, the hitting thread's Python frames as
 * python.bpf.h reads them. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
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
	bpf_ringbuf_submit(e, 0);
	return 0;
}
