//go:build ignore

/* trace.c: the generic program of `probekit trace`. Attached to any USDT
 * location, it sends one record per hit with every argument the spec
 * describes; the user-space side knows which location fired from the usdt
 * cookie (bpf_usdt_cookie) it gave that location.
 *
 * A record is as long as what it carries (a header, the values, the
 * strings), so that a burst of hits fits in the ring: a 4-argument hit is
 * 64 bytes. It is built in a per-CPU buffer and copied into the ring with
 * bpf_ringbuf_output, whose size may vary (bpf_ringbuf_reserve wants a
 * constant). The reader is not woken per record: it polls, and is woken
 * when the unread data passes a threshold. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* At most TRACE_MAX_VALS values per record (a USDT probe has at most 12
 * arguments; a function probe will send up to 8 argument registers and a
 * return value). At most TRACE_MAX_STRS of them are also read as
 * NUL-terminated strings, each truncated to TRACE_STR_LEN - 1 bytes. */
#define TRACE_MAX_VALS BPF_USDT_MAX_ARG_CNT
#define TRACE_MAX_STRS 4
#define TRACE_STR_LEN 96

/* What a record's values are. */
enum event_kind {
	EVENT_USDT = 0, /* the probe's arguments, in order */
};

/* One hit: this header, then nvals 8-byte values, then nstrs strings, each
 * with its NUL, back to back. Keep in sync with Event in traceprog.go
 * (checked by a test). */
struct event {
	__u64 cookie;	/* bpf_usdt_cookie: the tool's location index */
	__u32 pid;	/* thread group id, in the initial PID namespace */
	__u32 tid;
	__s32 arg_cnt;	/* bpf_usdt_arg_cnt, negative when no spec was found */
	__u32 errors;	/* bit n: value n could not be read; it is 0 */
	/* Bit n: value n was read as a string too, the k-th string for the
	 * k-th such value. A failed string read sends "" and sets the
	 * errors bit. */
	__u32 str_args;
	__u8 kind;	/* enum event_kind */
	__u8 nvals;
	__u8 nstrs;
	__u8 pad;
	__s64 vals[];
};

#define TRACE_EVENT_MAX (sizeof(struct event) + 8 * TRACE_MAX_VALS + TRACE_MAX_STRS * TRACE_STR_LEN)

/* Bit n: read argument n as a pointer to a string. Set before load. */
volatile const __u32 probekit_trace_str_mask = 0;

/* The reader is woken when this many bytes are unread; below, it finds
 * the records when it polls. 0: wake it as the kernel decides by default,
 * when it has read everything before the new record, which costs the
 * traced thread a wakeup for most records of a burst. Set before load. */
volatile const __u64 probekit_trace_wakeup_bytes = 0;

/* Forced wakeups of one CPU are this far apart at least: one is enough to
 * get the reader going, and each costs the traced thread an interrupt. */
#define TRACE_WAKEUP_GAP_NS 1000000

/* The size is set before load (probekit trace --ring-size). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024);
} events SEC(".maps");

/* Records lost because the ring buffer was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

/* Where a CPU builds its record. */
struct scratch {
	/* Programs using buf now: a uprobe_multi program runs with
	 * migration disabled but may be preempted, and the thread that
	 * preempts it may hit a probe on the same CPU. */
	__u64 users;
	__u64 last_wakeup; /* bpf_ktime_get_ns of the last forced wakeup */
	__u64 buf[TRACE_EVENT_MAX / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch SEC(".maps");

static __always_inline void count_lost(void)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&dropped, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* Fills e (TRACE_EVENT_MAX bytes) and returns the record's length. */
static __noinline __u32 fill(struct pt_regs *ctx, struct event *e)
{
	__u64 id = bpf_get_current_pid_tgid();
	/* One spec lookup for the count and the cookie (bpf_usdt_arg_cnt and
	 * bpf_usdt_cookie would make one each). */
	struct __bpf_usdt_spec *spec = __bpf_usdt_spec(ctx);
	int cnt = spec ? spec->arg_cnt : -ESRCH;
	__u32 nvals = cnt < 0 ? 0 : cnt > TRACE_MAX_VALS ? TRACE_MAX_VALS : cnt;
	__u32 off = sizeof(*e) + 8 * nvals;
	__u32 errors = 0, str_args = 0, nstrs = 0;

	e->cookie = spec ? spec->usdt_cookie : 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->arg_cnt = cnt;
	e->kind = EVENT_USDT;
	e->nvals = nvals;
	e->pad = 0;
#pragma unroll
	for (int n = 0; n < TRACE_MAX_VALS; n++) {
		long v = 0, len;

		if (n >= nvals)
			continue;
		if (bpf_usdt_arg(ctx, n, &v))
			errors |= 1u << n;
		e->vals[n] = v;
		/* off > ... is never true (off <= header + values + 3
		 * strings here): it tells the verifier the read stays in e. */
		if (!((probekit_trace_str_mask >> n) & 1) || nstrs >= TRACE_MAX_STRS ||
		    off > TRACE_EVENT_MAX - TRACE_STR_LEN)
			continue;
		len = bpf_probe_read_user_str((char *)e + off, TRACE_STR_LEN, (void *)v);
		if (len <= 0 || len > TRACE_STR_LEN) {
			((char *)e)[off] = 0;
			len = 1;
			errors |= 1u << n;
		}
		str_args |= 1u << n;
		nstrs++;
		off += len;
	}
	e->errors = errors;
	e->str_args = str_args;
	e->nstrs = nstrs;
	return off;
}

/* BPF_RB_NO_WAKEUP, or BPF_RB_FORCE_WAKEUP when the reader has
 * probekit_trace_wakeup_bytes to read and this CPU has not woken it
 * lately. */
static __always_inline __u64 wakeup_flags(struct scratch *s)
{
	__u64 now;

	if (!probekit_trace_wakeup_bytes)
		return 0;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) < probekit_trace_wakeup_bytes)
		return BPF_RB_NO_WAKEUP;
	now = bpf_ktime_get_ns();
	if (now - s->last_wakeup < TRACE_WAKEUP_GAP_NS)
		return BPF_RB_NO_WAKEUP;
	s->last_wakeup = now;
	return BPF_RB_FORCE_WAKEUP;
}

SEC("usdt")
int trace_usdt(struct pt_regs *ctx)
{
	__u32 key = 0, size;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &key);
	struct event *e;
	__u64 flags;

	if (!s)
		return 0;
	flags = wakeup_flags(s);
	/* Atomic, so that of two programs racing for buf on this CPU at most
	 * one reads 1 (each adds before it reads). */
	__sync_fetch_and_add(&s->users, 1);
	if (*(volatile __u64 *)&s->users == 1) {
		size = fill(ctx, (struct event *)s->buf);
		if (size > TRACE_EVENT_MAX)
			size = TRACE_EVENT_MAX;
		if (bpf_ringbuf_output(&events, s->buf, size, flags))
			count_lost();
		__sync_fetch_and_add(&s->users, -1);
		return 0;
	}
	__sync_fetch_and_add(&s->users, -1);
	/* buf is taken: build a record of the largest size in the ring itself
	 * (its unused tail is sent too; the reader ignores it). */
	e = bpf_ringbuf_reserve(&events, TRACE_EVENT_MAX, 0);
	if (!e) {
		count_lost();
		return 0;
	}
	fill(ctx, e);
	bpf_ringbuf_submit(e, flags);
	return 0;
}
