//go:build ignore

/* export.c: the program of one `probekit export` metric.
 *
 * Each metric is its own collection: export_usdt for USDT probes,
 * export_func for function entries and returns, the metric's shape in
 * constants set before load (so the verifier drops the code of the other
 * shapes), and its own maps. Nothing is sent per hit: a hit adds to its
 * series in the per-CPU hash series, which the exporter reads when it is
 * scraped.
 *
 * A series is the values of the metric's labels (read from arguments at
 * the hit). series holds at most as many as the configuration allows;
 * a hit of a new series once it is full adds to the one series of other,
 * whose count is also the number of hits folded.
 *
 * A latency histogram has a start probe (role ROLE_START) and an end
 * probe (ROLE_END), paired per thread as a stack, so that nested and
 * recursive calls each end their own start: the start pushes the time
 * and the series key, the end pops them and adds the interval in
 * nanoseconds. A thread's depth is in depths; the frames below
 * MAX_DEPTH in starts, by thread and depth. Deeper starts are counted
 * (LOST_DEPTH) but not kept, and their ends only pop the depth.
 * A USDT location's role is its usdt cookie; a function probe's is bit 0
 * of its BPF cookie (the other bits are the register set, FUNC_REGS_*). */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_tracing.h>
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define MAX_BOUNDS 32	/* MaxBuckets in config.go */
#define MAX_LABELS 4	/* MaxLabels in config.go */
#define LABEL_STR_LEN 64	/* LabelStrLen in prog.go */
#define MAX_ARGS BPF_USDT_MAX_ARG_CNT
#define FUNC_NREGS 6	/* the C calling convention's argument registers */
#define MAX_DEPTH 64	/* MaxDepth in prog.go */
/* Label sources other than an argument, in pk_label_args (LabelPID,
 * LabelComm in prog.go). */
#define LABEL_PID 0x10000
#define LABEL_COMM 0x10001

/* bpf_tracing.h names five argument registers; the sixth is r9 on x86-64
 * (System V psABI) and x5 on arm64 (AAPCS64). */
#if defined(__TARGET_ARCH_x86)
#define PARM6(ctx) (((const struct pt_regs *)(ctx))->r9)
#elif defined(__TARGET_ARCH_arm64)
#define PARM6(ctx) (((const struct user_pt_regs *)(ctx))->regs[5])
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

enum func_regs {
	FUNC_REGS_C = 0,	/* argument registers: rdi, rsi, rdx, rcx, r8, r9; x0-x5 */
	FUNC_REGS_RET = 1,	/* the return register, value 0 */
};

/* Reasons a hit is not counted (errors map). */
enum lost {
	LOST_VALUE = 0,	/* the value or a label could not be read */
	LOST_FULL = 1,	/* no room in series nor starts */
	LOST_NO_START = 2,	/* an end without a start on its thread */
	LOST_DEPTH = 3,	/* a start nested deeper than MAX_DEPTH */
	NUM_LOST = 4,
};

volatile const __u32 pk_kind = KIND_COUNTER;
volatile const __u32 pk_value_arg = 0;
volatile const __u32 pk_nbounds = 0;
/* Upper bounds, included, increasing (values; nanoseconds for a latency). */
volatile const __s64 pk_bounds[MAX_BOUNDS] = {};
volatile const __u32 pk_nlabels = 0;
volatile const __u32 pk_label_args[MAX_LABELS] = {};
/* Bit i: label i is a string (at most one bit). */
volatile const __u32 pk_label_strs = 0;

struct series_key {
	__s64 nums[MAX_LABELS];
	char str[LABEL_STR_LEN];
};

struct series {
	__u64 count;
	__s64 sum;
	__u64 buckets[MAX_BOUNDS + 1];	/* not cumulative; the last is +Inf */
};

/* The size is the metric's max_series, set before load. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct series_key);
	__type(value, struct series);
} series SEC(".maps");

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
	struct series_key key;
};

struct frame_key {
	__u64 tid;
	__u32 depth;
	__u32 pad;
};

/* Latency: a thread's open starts, by thread and depth. LRU: a thread
 * that exits between start and end leaves entries that newer ones push
 * out. */
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
	__type(key, __u64);
	__type(value, __u32);
} depths SEC(".maps");

static const struct series zero_series;

static __always_inline void lose(__u32 why)
{
	__u64 *n = bpf_map_lookup_elem(&errors, &why);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* The context's registers cannot be read at a variable offset: they are
 * read into v, by constant fields, in a function of their own (inlined,
 * clang may merge the loads into one at a computed offset, which the
 * verifier refuses). */
static __noinline void read_regs(struct pt_regs *ctx, __s64 *v)
{
	v[0] = PT_REGS_PARM1(ctx);
	v[1] = PT_REGS_PARM2(ctx);
	v[2] = PT_REGS_PARM3(ctx);
	v[3] = PT_REGS_PARM4(ctx);
	v[4] = PT_REGS_PARM5(ctx);
	v[5] = PARM6(ctx);
}

static __noinline void read_ret(struct pt_regs *ctx, __s64 *v)
{
	v[0] = PT_REGS_RC(ctx);
}

/* Argument n (0-based): USDT through its spec, a function's from regs. */
static __always_inline int arg(struct pt_regs *ctx, const __s64 *regs, __u32 n, __s64 *v)
{
	if (regs) {
		if (n >= FUNC_NREGS)
			return -1;
		*v = regs[n];
		return 0;
	}
	return bpf_usdt_arg(ctx, n, (long *)v);
}

/* Fills key from the labels' arguments; returns non-zero when one could
 * not be read. */
static __always_inline int make_key(struct pt_regs *ctx, const __s64 *regs, struct series_key *key)
{
	__s64 v;

#pragma unroll
	for (int i = 0; i < MAX_LABELS; i++) {
		if (i >= pk_nlabels)
			continue;
		if (pk_label_args[i] == LABEL_PID) {
			key->nums[i] = bpf_get_current_pid_tgid() >> 32;
			continue;
		}
		if (pk_label_args[i] == LABEL_COMM) {
			bpf_get_current_comm(key->str, sizeof(key->str) < 16 ? sizeof(key->str) : 16);
			continue;
		}
		if (arg(ctx, regs, pk_label_args[i], &v))
			return -1;
		if ((pk_label_strs >> i) & 1) {
			if (bpf_probe_read_user_str(key->str, sizeof(key->str), (void *)v) < 0)
				return -1;
		} else {
			key->nums[i] = v;
		}
	}
	return 0;
}

/* Adds one hit of value v to key's series (or to other). */
static __always_inline void add(struct series_key *key, __s64 v)
{
	struct series *s = bpf_map_lookup_elem(&series, key);
	__u32 zero = 0, b = 0;

	if (!s) {
		/* A program that preempted this one on this CPU may have added
		 * the key since the lookup: NOEXIST fails then, and the lookup
		 * finds its entry. */
		bpf_map_update_elem(&series, key, &zero_series, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&series, key);
	}
	if (!s)
		s = bpf_map_lookup_elem(&other, &zero);
	if (!s) {
		lose(LOST_FULL);
		return;
	}
	__sync_fetch_and_add(&s->count, 1);
	if (pk_kind == KIND_COUNTER)
		return;
	__sync_fetch_and_add(&s->sum, v);
#pragma unroll
	for (int i = 0; i < MAX_BOUNDS; i++) {
		if (i < pk_nbounds && v > pk_bounds[i])
			b = i + 1;
	}
	if (b > MAX_BOUNDS)
		b = MAX_BOUNDS;
	__sync_fetch_and_add(&s->buckets[b], 1);
}

/* end pops the thread's latest start and adds its interval. */
static __always_inline void end(__u64 tid)
{
	struct frame_key fk = {.tid = tid};
	struct series_key key = {};
	struct start *sp;
	__u32 *d = bpf_map_lookup_elem(&depths, &tid);
	__u64 now = bpf_ktime_get_ns();

	if (!d || *d == 0) {
		lose(LOST_NO_START);
		return;
	}
	fk.depth = --*d;
	if (fk.depth >= MAX_DEPTH)
		return;	/* its start was counted in LOST_DEPTH */
	sp = bpf_map_lookup_elem(&starts, &fk);
	if (!sp) {
		lose(LOST_NO_START);
		return;
	}
	__builtin_memcpy(&key, &sp->key, sizeof(key));
	now -= sp->ns;
	bpf_map_delete_elem(&starts, &fk);
	add(&key, now);
}

/* start pushes a start of key on the thread's stack. */
static __always_inline void start(__u64 tid, struct series_key *key)
{
	struct frame_key fk = {.tid = tid};
	struct start st = {};
	__u32 one = 1;
	__u32 *d = bpf_map_lookup_elem(&depths, &tid);

	if (!d) {
		if (bpf_map_update_elem(&depths, &tid, &one, BPF_ANY)) {
			lose(LOST_FULL);
			return;
		}
		fk.depth = 0;
	} else {
		fk.depth = (*d)++;
	}
	if (fk.depth >= MAX_DEPTH) {
		lose(LOST_DEPTH);
		return;
	}
	__builtin_memcpy(&st.key, key, sizeof(st.key));
	st.ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&starts, &fk, &st, BPF_ANY))
		lose(LOST_FULL);
}

static __always_inline int hit(struct pt_regs *ctx, const __s64 *regs, __u32 role)
{
	struct series_key key = {};
	__u64 tid = bpf_get_current_pid_tgid();
	__s64 v = 0;

	if (pk_kind == KIND_LATENCY && role == ROLE_END) {
		end(tid);
		return 0;
	}
	if (make_key(ctx, regs, &key)) {
		lose(LOST_VALUE);
		return 0;
	}
	if (pk_kind == KIND_LATENCY) {
		start(tid, &key);
		return 0;
	}
	if (pk_kind == KIND_HIST && arg(ctx, regs, pk_value_arg, &v)) {
		lose(LOST_VALUE);
		return 0;
	}
	add(&key, v);
	return 0;
}

SEC("usdt")
int export_usdt(struct pt_regs *ctx)
{
	return hit(ctx, 0, bpf_usdt_cookie(ctx) & 1);
}

/* Attached as a uprobe (entry or return site) or a uretprobe. */
SEC("uprobe")
int export_func(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__s64 regs[FUNC_NREGS] = {};

	if ((cookie >> 8) == FUNC_REGS_RET)
		read_ret(ctx, regs);
	else
		read_regs(ctx, regs);
	return hit(ctx, regs, cookie & 1);
}
