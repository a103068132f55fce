//go:build ignore

/* export.c: the programs of `probekit export`'s metrics.
 *
 * The metrics loaded together share one collection: export_usdt for
 * USDT probes, export_func for function entries and returns, and the
 * maps. Each metric has an index; its shape (kind, value, buckets,
 * labels, max_series) is its entry in the array metrics. Each attached
 * probe has a site index, its cookie (the usdt cookie of its locations;
 * bits 0-31 of a function probe's BPF cookie), and the metrics it
 * updates are its entry in sites, each with its role. So the metrics on
 * one probe share its program and its link, and a hit updates each of
 * them in turn.
 *
 * Nothing is sent per hit: a hit adds to its series in the per-CPU hash
 * series, keyed by metric and label values, which the exporter reads
 * when it is scraped. A metric holds at most max_series series: the
 * series it added (inserted) less those the exporter evicted (evicted);
 * a hit of a new series past that adds to the metric's entry of other,
 * whose count is also the number of hits folded.
 *
 * A latency histogram has a start probe (role ROLE_START) and an end
 * probe (ROLE_END), paired per thread as a stack, so that nested and
 * recursive calls each end their own start: the start pushes the time
 * and the series key, the end pops them and adds the interval in
 * nanoseconds. A thread's depth is in depths; the frames below
 * MAX_DEPTH in starts, by thread, metric and depth. Deeper starts are
 * counted (LOST_DEPTH) but not kept, and their ends only pop the depth.
 *
 * An end closes the latest open start of its identity: with a metric's
 * match (up to MATCH_N argument indexes, the same for the start and the
 * end USDT probes: Python's function__entry and function__return give
 * the file and the function as arguments 0 and 1, the line, which
 * differs, as 2) each start keeps its values of those arguments, and an
 * end pops the latest start whose values equal its own. Starts above it
 * never got their ends (LOST_ABANDONED); an end that matches no start is
 * counted (LOST_NO_START) and changes nothing: CPython 3.11 fires
 * function__return without function__entry for the sys.setprofile
 * callback, which would otherwise close the function the callback runs
 * in. Without match every start matches: the latest. The tracer's
 * record/trace.c pairs its --latency the same way. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_tracing.h>
#include "usdt.bpf.h"
#include "faultstr.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define MAX_BOUNDS 32	/* MaxBuckets in config.go */
#define MAX_LABELS 4	/* MaxLabels in config.go */
#define LABEL_STR_LEN 64	/* LabelStrLen in prog.go */
#define MAX_ARGS BPF_USDT_MAX_ARG_CNT
#define MAX_DEPTH 64	/* MaxDepth in prog.go */
#define MAX_SITE_METRICS 256	/* MaxSiteMetrics in prog.go */
#define MATCH_N 2	/* record.MaxLatencyMatch */
/* In a sites entry: the metric's role at the site (ROLE_END), above its
 * index. */
#define SITE_END (1u << 31)
/* Label sources other than an argument, in label_args (LabelPID,
 * LabelComm in prog.go). */
#define LABEL_PID 0x10000
#define LABEL_COMM 0x10001

/* bpf_tracing.h names five argument registers; the sixth is r9 on x86-64
 * (System V psABI) and x5 on arm64 (AAPCS64). A global function's context
 * argument has the type the kernel gives a kprobe's context,
 * bpf_user_pt_regs_t: struct pt_regs on x86-64, struct user_pt_regs on
 * arm64. */
#if defined(__TARGET_ARCH_x86)
#define PARM6(ctx) (((const struct pt_regs *)(ctx))->r9)
typedef struct pt_regs ctx_regs;
#elif defined(__TARGET_ARCH_arm64)
#define PARM6(ctx) (((const struct user_pt_regs *)(ctx))->regs[5])
typedef struct user_pt_regs ctx_regs;
#else
#error "export.c: argument registers are defined for x86 and arm64 only"
#endif

enum metric_kind {
	KIND_COUNTER = 0,
	KIND_HIST = 1,	/* of an argument (value_arg) */
	KIND_LATENCY = 2,	/* of the time from a start to an end hit */
};

enum role {
	ROLE_START = 0,	/* or the one probe of a counter or a histogram */
	ROLE_END = 1,
};

/* Where a hit's arguments are (bit 32 of a function probe's cookie). */
enum args_from {
	ARGS_USDT = 0,	/* the USDT spec: bpf_usdt_arg */
	ARGS_C = 1,	/* argument registers: rdi, rsi, rdx, rcx, r8, r9; x0-x5 */
	ARGS_RET = 2,	/* the return register, value 0 */
};

/* Reasons a hit is not counted (errors map, NUM_LOST per metric). */
enum lost {
	LOST_VALUE = 0,	/* the value or a label could not be read */
	LOST_FULL = 1,	/* no room in series nor starts */
	LOST_NO_START = 2,	/* an end without a start on its thread */
	LOST_DEPTH = 3,	/* a start nested deeper than MAX_DEPTH */
	LOST_ABANDONED = 4,	/* a start whose end never came: a later end
				 * closed a start below it */
	NUM_LOST = 5,
};

/* A metric's shape. */
struct metric {
	__u32 kind;
	__u32 value_arg;
	__u32 nbounds;
	__u32 nlabels;
	__u32 label_args[MAX_LABELS];
	/* Bit i: label i is a string (at most one bit). */
	__u32 label_strs;
	__u32 max_series;
	/* A latency's identity arguments: bits 0-3 the first's index + 1,
	 * 4-7 the second's (0: none). */
	__u32 match;
	__u32 pad;
	/* Upper bounds, included, increasing (values; nanoseconds for a
	 * latency). */
	__s64 bounds[MAX_BOUNDS];
};

/* The metrics a site updates, in order. */
struct site {
	__u32 n;
	__u32 pad;
	__u32 metrics[MAX_SITE_METRICS];	/* index | SITE_END */
};

struct series_key {
	__u32 metric;
	__u32 pad;
	__s64 nums[MAX_LABELS];
	char str[LABEL_STR_LEN];
};

struct series {
	__u64 count;
	__s64 sum;
	__u64 buckets[MAX_BOUNDS + 1];	/* not cumulative; the last is +Inf */
};

/* The sizes of these maps are set before load: metrics, inserted,
 * evicted and other by the number of metrics, errors NUM_LOST times
 * that, sites by the number of sites, series by the metrics'
 * max_series. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct metric);
} metrics SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct site);
} sites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct series_key);
	__type(value, struct series);
} series SEC(".maps");

/* Series a metric added; only the programs write it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} inserted SEC(".maps");

/* Series of a metric the exporter evicted; only the exporter writes it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} evicted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct series);
} other SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NUM_LOST);
	__type(key, __u32);
	__type(value, __u64);
} errors SEC(".maps");

struct start {
	__u64 ns;
	__s64 ident[MATCH_N];	/* the start's identity arguments */
	struct series_key key;
};

struct depth_key {
	__u64 tid;
	__u32 metric;
	__u32 pad;
};

struct frame_key {
	__u64 tid;
	__u32 metric;
	__u32 depth;
};

/* Latency: a thread's open starts, by thread, metric and depth. LRU: a
 * thread that exits between start and end leaves entries that newer
 * ones push out. Sized 1 when no metric is a latency. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct frame_key);
	__type(value, struct start);
} starts SEC(".maps");

/* Latency: the number of open starts of a thread, those past MAX_DEPTH
 * included. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct depth_key);
	__type(value, __u32);
} depths SEC(".maps");

static const struct series zero_series;

static __always_inline void lose_n(__u32 metric, __u32 why, __u64 count)
{
	__u32 k = metric * NUM_LOST + why;
	__u64 *n = bpf_map_lookup_elem(&errors, &k);

	if (n)
		__sync_fetch_and_add(n, count);
}

static __always_inline void lose(__u32 metric, __u32 why)
{
	lose_n(metric, why, 1);
}

/* Argument n (0-based) of a function probe, from the context's
 * registers. The index is only known at run time, and the verifier
 * refuses a load at a computed context offset: the registers are loaded
 * by constant fields first, each held in a register by an empty asm (or
 * clang may sink the loads into the cases and merge them into one at a
 * computed offset), then one is chosen. */
static __always_inline int func_arg(ctx_regs *ctx, __u32 from, __u32 n, __s64 *v)
{
	__s64 r0, r1, r2, r3, r4, r5;

	if (from == ARGS_RET) {
		if (n != 0)
			return -1;
		r0 = PT_REGS_RC(ctx);
		asm volatile("" : "+r"(r0));
		*v = r0;
		return 0;
	}
	r0 = PT_REGS_PARM1(ctx);
	r1 = PT_REGS_PARM2(ctx);
	r2 = PT_REGS_PARM3(ctx);
	r3 = PT_REGS_PARM4(ctx);
	r4 = PT_REGS_PARM5(ctx);
	r5 = PARM6(ctx);
	asm volatile("" : "+r"(r0), "+r"(r1), "+r"(r2), "+r"(r3), "+r"(r4), "+r"(r5));
	switch (n) {
	case 0: *v = r0; break;
	case 1: *v = r1; break;
	case 2: *v = r2; break;
	case 3: *v = r3; break;
	case 4: *v = r4; break;
	case 5: *v = r5; break;
	default: return -1;
	}
	return 0;
}

/* Argument n (0-based): USDT through its spec, a function's from its
 * registers. */
static __always_inline int arg(ctx_regs *ctx, __u32 from, __u32 n, __s64 *v)
{
	if (from != ARGS_USDT)
		return func_arg(ctx, from, n, v);
	return bpf_usdt_arg((struct pt_regs *)ctx, n, (long *)v);
}

/* Set before load where the kernel runs sleepable uprobe programs
 * (exporter's faultingStrings): a string label in a page the process has
 * not touched yet is read after faulting it in (faultstr.bpf.h), not
 * lost as unreadable. */
volatile const __u32 probekit_export_fault_strs = 0;

/* Fills key from the labels' sources; returns non-zero when one could
 * not be read. */
static __always_inline int make_key(ctx_regs *ctx, __u32 from, const struct metric *m, struct series_key *key)
{
	__s64 v;

#pragma unroll
	for (int i = 0; i < MAX_LABELS; i++) {
		if (i >= m->nlabels)
			continue;
		if (m->label_args[i] == LABEL_PID) {
			key->nums[i] = bpf_get_current_pid_tgid() >> 32;
			continue;
		}
		if (m->label_args[i] == LABEL_COMM) {
			bpf_get_current_comm(key->str, sizeof(key->str) < 16 ? sizeof(key->str) : 16);
			continue;
		}
		if (arg(ctx, from, m->label_args[i], &v))
			return -1;
		if ((m->label_strs >> i) & 1) {
			if (probekit_read_user_str(key->str, sizeof(key->str), (void *)v, probekit_export_fault_strs) < 0)
				return -1;
		} else {
			key->nums[i] = v;
		}
	}
	return 0;
}

/* Adds one hit of value v to key's series (or to the metric's other). */
static __always_inline void add(const struct metric *m, struct series_key *key, __s64 v)
{
	__u32 id = key->metric, b = 0;
	struct series *s = bpf_map_lookup_elem(&series, key);

	if (!s) {
		__u64 *ins = bpf_map_lookup_elem(&inserted, &id);
		__u64 *ev = bpf_map_lookup_elem(&evicted, &id);

		/* A program on another CPU may add a series between the
		 * check and the insert: the metric then holds one more than
		 * max_series for a while; the map holds as many more as
		 * there are CPUs. */
		if (ins && ev && *ins - *ev < m->max_series) {
			/* A program that preempted this one on this CPU may
			 * have added the key since the lookup: NOEXIST fails
			 * then, and the lookup finds its entry. */
			if (!bpf_map_update_elem(&series, key, &zero_series, BPF_NOEXIST))
				__sync_fetch_and_add(ins, 1);
			s = bpf_map_lookup_elem(&series, key);
		}
	}
	if (!s)
		s = bpf_map_lookup_elem(&other, &id);
	if (!s) {
		lose(id, LOST_FULL);
		return;
	}
	__sync_fetch_and_add(&s->count, 1);
	if (m->kind == KIND_COUNTER)
		return;
	__sync_fetch_and_add(&s->sum, v);
#pragma unroll
	for (int i = 0; i < MAX_BOUNDS; i++) {
		if (i < m->nbounds && v > m->bounds[i])
			b = i + 1;
	}
	if (b > MAX_BOUNDS)
		b = MAX_BOUNDS;
	__sync_fetch_and_add(&s->buckets[b], 1);
}

/* ident reads a hit's identity arguments (see match; 0 where none or
 * unreadable). */
static __always_inline void ident(ctx_regs *ctx, __u32 from, const struct metric *m, __s64 *id)
{
#pragma unroll
	for (int i = 0; i < MATCH_N; i++) {
		__u32 n = (m->match >> (4 * i)) & 0xf;
		__s64 v = 0;

		id[i] = 0;
		if (n && !arg(ctx, from, n - 1, &v))
			id[i] = v;
	}
}

/* end pops the thread's latest start of metric id with the end's
 * identity and adds its interval. */
static __always_inline void end(ctx_regs *ctx, __u32 from, const struct metric *m, __u32 id, __u64 tid)
{
	struct depth_key dk = {.tid = tid, .metric = id};
	struct frame_key fk = {.tid = tid, .metric = id};
	struct series_key key = {};
	struct start *sp = NULL;
	__s64 idv[MATCH_N];
	__u32 *d = bpf_map_lookup_elem(&depths, &dk);
	__u64 now = bpf_ktime_get_ns();
	__u32 top;

	if (!d || *d == 0) {
		lose(id, LOST_NO_START);
		return;
	}
	top = *d;
	if (top > MAX_DEPTH) {
		/* The latest start was counted in LOST_DEPTH and kept
		 * nothing to match. */
		*d = top - 1;
		return;
	}
	ident(ctx, from, m, idv);
	for (__u32 j = 0; j < MAX_DEPTH; j++) {
		struct start *g;

		if (j >= top)
			break;
		fk.depth = top - 1 - j;
		g = bpf_map_lookup_elem(&starts, &fk);
		if (g && g->ident[0] == idv[0] && g->ident[1] == idv[1]) {
			sp = g;
			break;
		}
		if (!m->match)
			break;	/* the latest start, or none kept */
	}
	if (!sp) {
		lose(id, LOST_NO_START);
		if (!m->match)
			*d = top - 1;
		return;
	}
	if (top - 1 > fk.depth)
		lose_n(id, LOST_ABANDONED, top - 1 - fk.depth);
	*d = fk.depth;
	__builtin_memcpy(&key, &sp->key, sizeof(key));
	now -= sp->ns;
	bpf_map_delete_elem(&starts, &fk);
	add(m, &key, now);
}

/* start pushes a start of key, with its identity idv, on the thread's
 * stack of its metric. */
static __always_inline void start(__u64 tid, struct series_key *key, const __s64 *idv)
{
	struct depth_key dk = {.tid = tid, .metric = key->metric};
	struct frame_key fk = {.tid = tid, .metric = key->metric};
	struct start st = {};
	__u32 one = 1;
	__u32 *d = bpf_map_lookup_elem(&depths, &dk);

	if (!d) {
		if (bpf_map_update_elem(&depths, &dk, &one, BPF_ANY)) {
			lose(key->metric, LOST_FULL);
			return;
		}
		fk.depth = 0;
	} else {
		fk.depth = (*d)++;
	}
	if (fk.depth >= MAX_DEPTH) {
		lose(key->metric, LOST_DEPTH);
		return;
	}
	__builtin_memcpy(&st.key, key, sizeof(st.key));
	st.ident[0] = idv[0];
	st.ident[1] = idv[1];
	st.ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&starts, &fk, &st, BPF_ANY))
		lose(key->metric, LOST_FULL);
}

/* update is one hit for one metric of the site (entry: its index and
 * role). A global function: the verifier checks it once, not once per
 * metric of a site. */
__noinline int update(ctx_regs *ctx, __u32 entry, __u32 from)
{
	__u32 id = entry & ~SITE_END;
	struct metric *m = bpf_map_lookup_elem(&metrics, &id);
	struct series_key key = {.metric = id};
	__u64 tid = bpf_get_current_pid_tgid();
	__s64 v = 0;

	if (!m || !ctx)
		return 0;
	if (m->kind == KIND_LATENCY && (entry & SITE_END)) {
		end(ctx, from, m, id, tid);
		return 0;
	}
	if (make_key(ctx, from, m, &key)) {
		lose(id, LOST_VALUE);
		return 0;
	}
	if (m->kind == KIND_LATENCY) {
		__s64 idv[MATCH_N];

		ident(ctx, from, m, idv);
		start(tid, &key, idv);
		return 0;
	}
	if (m->kind == KIND_HIST && arg(ctx, from, m->value_arg, &v)) {
		lose(id, LOST_VALUE);
		return 0;
	}
	add(m, &key, v);
	return 0;
}

/* hit updates each metric of site in turn. */
static __always_inline int hit(ctx_regs *ctx, __u32 site, __u32 from)
{
	struct site *s = bpf_map_lookup_elem(&sites, &site);

	if (!s)
		return 0;
	for (__u32 i = 0; i < MAX_SITE_METRICS; i++) {
		if (i >= s->n)
			break;
		update(ctx, s->metrics[i], from);
	}
	return 0;
}

SEC("usdt")
int export_usdt(struct pt_regs *ctx)
{
	return hit((ctx_regs *)ctx, bpf_usdt_cookie(ctx), ARGS_USDT);
}

/* Attached as a uprobe (entry or return site) or a uretprobe. */
SEC("uprobe")
int export_func(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);

	return hit((ctx_regs *)ctx, (__u32)cookie, (__u32)(cookie >> 32));
}
