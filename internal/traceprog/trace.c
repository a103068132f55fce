//go:build ignore

/* trace.c: the generic program of `probekit trace`. Attached to any USDT
 * location, it sends one event per hit with every argument the spec
 * describes; the user-space side knows which location fired from the usdt
 * cookie (bpf_usdt_cookie) it gave that location. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Arguments read as NUL-terminated strings (probekit trace --str): at most
 * TRACE_MAX_STRS per hit, each truncated to TRACE_STR_LEN - 1 bytes. */
#define TRACE_MAX_STRS 4
#define TRACE_STR_LEN 96

/* One hit. Keep in sync with Event in traceprog.go (checked by a test). */
struct event {
	__u64 cookie;	/* bpf_usdt_cookie: the tool's location index */
	__u32 pid;	/* thread group id, in the initial PID namespace */
	__u32 tid;
	__s32 arg_cnt;	/* bpf_usdt_arg_cnt, negative when no spec was found */
	__u32 errors;	/* bit n: bpf_usdt_arg(n) failed; args[n] is 0 */
	__s64 args[BPF_USDT_MAX_ARG_CNT];
	/* Bit n: args[n] was read as a string, into strs[k] for the k-th
	 * such argument. A failed string read sets the errors bit too. */
	__u32 str_args;
	__u32 pad;
	char strs[TRACE_MAX_STRS][TRACE_STR_LEN];
};

/* Bit n: read argument n as a pointer to a string. Set before load. */
volatile const __u32 probekit_trace_str_mask = 0;

/* 1 MiB: about 2000 events of 512 bytes between two reads. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
	__type(value, struct event);
} events SEC(".maps");

/* Events lost because the ring buffer was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

SEC("usdt")
int trace_usdt(struct pt_regs *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	__u64 id = bpf_get_current_pid_tgid();

	if (!e) {
		__u32 key = 0;
		__u64 *n = bpf_map_lookup_elem(&dropped, &key);

		if (n)
			__sync_fetch_and_add(n, 1);
		return 0;
	}
	e->cookie = bpf_usdt_cookie(ctx);
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->arg_cnt = bpf_usdt_arg_cnt(ctx);
	e->errors = 0;
	e->str_args = 0;
	e->pad = 0;
	int k = 0;
#pragma unroll
	for (int n = 0; n < BPF_USDT_MAX_ARG_CNT; n++) {
		long v = 0;

		if (n < e->arg_cnt && bpf_usdt_arg(ctx, n, &v))
			e->errors |= 1u << n;
		e->args[n] = v;
		if (n < e->arg_cnt && (probekit_trace_str_mask >> n) & 1 && k < TRACE_MAX_STRS) {
			char *dst = e->strs[k & (TRACE_MAX_STRS - 1)];

			e->str_args |= 1u << n;
			if (bpf_probe_read_user_str(dst, TRACE_STR_LEN, (void *)v) < 0) {
				dst[0] = 0;
				e->errors |= 1u << n;
			}
			k++;
		}
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}
