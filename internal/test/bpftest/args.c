//go:build ignore

/* args.c: reads everything usdt.bpf.h offers on each hit, for the kernel
 * tests of the header and of the Go spec encoder.
 *
 * Built twice (gen.go): against usdt.bpf.h's libbpf 1.7 layout (Args) and,
 * with PROBEKIT_TEST_PRE17, against the pre-1.7 layout (ArgsPre17).
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#ifdef PROBEKIT_TEST_PRE17
#include "usdt_pre17.h"
#endif
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* One more than the maximum, to see -ENOENT at n = 12. */
#define N_QUERIED (BPF_USDT_MAX_ARG_CNT + 1)

/* One hit as the program saw it. */
struct hit {
	__u64 cookie;	/* bpf_usdt_cookie */
	__u64 ip;	/* PT_REGS_IP: the probe's runtime address? */
	__u32 pid;	/* tgid */
	__s32 arg_cnt;	/* bpf_usdt_arg_cnt */
	__s32 size_ret[N_QUERIED]; /* bpf_usdt_arg_size(n) */
	__s32 arg_ret[N_QUERIED];  /* bpf_usdt_arg(n) result */
	__s64 arg_val[N_QUERIED];  /* bpf_usdt_arg(n) value */
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
	__type(value, struct hit);
} hits SEC(".maps");

SEC("usdt")
int args_reader(struct pt_regs *ctx)
{
	struct hit *h = bpf_ringbuf_reserve(&hits, sizeof(*h), 0);

	if (!h)
		return 0;
	h->cookie = bpf_usdt_cookie(ctx);
	h->ip = PT_REGS_IP(ctx);
	h->pid = bpf_get_current_pid_tgid() >> 32;
	h->arg_cnt = bpf_usdt_arg_cnt(ctx);
#pragma unroll
	for (int n = 0; n < N_QUERIED; n++) {
		long v = 12345; /* bpf_usdt_arg must overwrite it, even on error */

		h->size_ret[n] = bpf_usdt_arg_size(ctx, n);
		h->arg_ret[n] = bpf_usdt_arg(ctx, n, &v);
		h->arg_val[n] = v;
	}
	bpf_ringbuf_submit(h, 0);
	return 0;
}

/* The same record from BPF_USDT's named arguments: arg_val[n] is argument
 * n as the macro passed it (0 when it could not be read), arg_cnt and
 * cookie as above; the other fields stay 0. */
SEC("usdt")
int BPF_USDT(args_macro, long a0, long a1, long a2, long a3, long a4, long a5,
	     long a6, long a7, long a8, long a9, long a10, long a11)
{
	struct hit *h = bpf_ringbuf_reserve(&hits, sizeof(*h), 0);

	if (!h)
		return 0;
	__builtin_memset(h, 0, sizeof(*h));
	h->cookie = bpf_usdt_cookie(ctx);
	h->ip = PT_REGS_IP(ctx);
	h->pid = bpf_get_current_pid_tgid() >> 32;
	h->arg_cnt = bpf_usdt_arg_cnt(ctx);
	h->arg_val[0] = a0;
	h->arg_val[1] = a1;
	h->arg_val[2] = a2;
	h->arg_val[3] = a3;
	h->arg_val[4] = a4;
	h->arg_val[5] = a5;
	h->arg_val[6] = a6;
	h->arg_val[7] = a7;
	h->arg_val[8] = a8;
	h->arg_val[9] = a9;
	h->arg_val[10] = a10;
	h->arg_val[11] = a11;
	bpf_ringbuf_submit(h, 0);
	return 0;
}
