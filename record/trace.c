//go:build ignore

/* trace.c: the generic programs of `probekit trace`.
 *
 * trace_usdt is attached to USDT locations and sends one record per hit
 * with every argument the location's spec describes; the user-space side
 * knows which location fired from the usdt cookie (bpf_usdt_cookie) it
 * gave that location.
 *
 * trace_func is attached to function entries (uprobes), return sites and
 * uretprobes. Its BPF cookie describes the probe (FUNC_COOKIE_*): the
 * tool's probe index, which registers to send (a calling convention's
 * argument registers, or the return register) and which of them to read
 * as strings. A uprobe's context (pt_regs) is readable only at constant
 * offsets, so each register set is a fixed list of field reads, chosen by
 * a switch on the cookie: no table of offsets, no variable context access.
 * bpf_get_attach_cookie needs Linux 5.15 (7adfc6c9b315) for perf-event
 * uprobes; before, the same description is found in a table keyed by the
 * probed address (func_ips, see func_cookie).
 *
 * A record is as long as what it carries (a header, the values, the
 * user stack with --stack, the strings), so that a burst of hits fits in the ring: a 4-argument hit is
 * 88 bytes. It is built in a per-CPU buffer and copied into the ring with
 * bpf_ringbuf_output, whose size may vary (bpf_ringbuf_reserve wants a
 * constant). The reader is not woken per record: it polls, and is woken
 * when the unread data passes a threshold. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
/* Arguments read without the spec where every site agrees on them
 * (usdt.SetSameArgs). */
#define PROBEKIT_USDT_SAME_ARGS
#include "usdt.bpf.h"
#include "stack.bpf.h"
#include "unwind.bpf.h"
#include "python.bpf.h"
#include "faultstr.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* At most TRACE_MAX_VALS values per record (a USDT probe has at most 12
 * arguments; a function probe sends at most 9 argument registers, Go's on
 * x86-64, or its return register). At most TRACE_MAX_STRS of them are also read as
 * NUL-terminated strings, each truncated to TRACE_STR_LEN - 1 bytes. */
#define TRACE_MAX_VALS BPF_USDT_MAX_ARG_CNT
#define TRACE_MAX_STRS 4
#define TRACE_STR_LEN 96

/* What a record's values are. */
enum event_kind {
	EVENT_USDT = 0,		/* the probe's arguments, in order */
	EVENT_UPROBE = 1,	/* a function's argument registers, in order */
	EVENT_URETPROBE = 2,	/* a function's return register */
};

/* The BPF cookie of a trace_func probe: bits 0-31 the tool's probe index
 * (sent as the record's cookie), 32-39 the register set (enum
 * func_regs), 40-47 the record's kind, 48-59 the string mask (bit n: read
 * value n as a string too). Keep in sync with FuncCookie in
 * traceprog.go. */
#define FUNC_COOKIE_REGS_SHIFT 32
#define FUNC_COOKIE_KIND_SHIFT 40
#define FUNC_COOKIE_STRS_SHIFT 48

/* Which registers a function probe sends. */
enum func_regs {
	FUNC_REGS_C = 0,	/* the C calling convention's argument registers */
	FUNC_REGS_GO = 1,	/* Go's register ABI (ABIInternal) argument registers */
	FUNC_REGS_RET = 2,	/* the (first) return register, C and Go alike */
};

/* The registers, by field of the uapi pt_regs of each architecture.
 * x86-64: the System V psABI passes integer arguments in rdi, rsi, rdx,
 * rcx, r8, r9 and returns in rax; Go's ABIInternal (Go 1.17) passes them
 * in rax, rbx, rcx, rdi, rsi, r8, r9, r10, r11 and returns first in rax.
 * arm64: AAPCS64 passes x0-x7 and returns in x0; Go (1.18) passes x0-x15
 * and returns first in x0, of which the first 8 are sent. The uprobe
 * context on arm64 is struct user_pt_regs. */
#if defined(__TARGET_ARCH_x86)
#define FUNC_C_NREGS 6
#define FUNC_GO_NREGS 9
#define FUNC_C_REGS(r, v) do {							\
	v[0] = r->rdi; v[1] = r->rsi; v[2] = r->rdx;				\
	v[3] = r->rcx; v[4] = r->r8; v[5] = r->r9;				\
} while (0)
#define FUNC_GO_REGS(r, v) do {							\
	v[0] = r->rax; v[1] = r->rbx; v[2] = r->rcx; v[3] = r->rdi;		\
	v[4] = r->rsi; v[5] = r->r8; v[6] = r->r9; v[7] = r->r10;		\
	v[8] = r->r11;								\
} while (0)
#define FUNC_RET_REG(r) (r->rax)
typedef struct pt_regs func_regs_t;
#elif defined(__TARGET_ARCH_arm64)
#define FUNC_C_NREGS 8
#define FUNC_GO_NREGS 8
#define FUNC_C_REGS(r, v) do {							\
	v[0] = r->regs[0]; v[1] = r->regs[1]; v[2] = r->regs[2];		\
	v[3] = r->regs[3]; v[4] = r->regs[4]; v[5] = r->regs[5];		\
	v[6] = r->regs[6]; v[7] = r->regs[7];					\
} while (0)
#define FUNC_GO_REGS(r, v) FUNC_C_REGS(r, v)
#define FUNC_RET_REG(r) (r->regs[0])
typedef struct user_pt_regs func_regs_t;
#else
#error "trace.c: function registers are defined for x86 and arm64 only"
#endif

/* One hit: this header, then nvals 8-byte values, then nframes 8-byte
 * user stack frames (innermost first), then ninterp 16-byte interpreter
 * frames (struct probekit_interp_frame, innermost first: the CFI walk's
 * stacks only), then nstrs strings, each with its NUL, back to back. Keep in sync with Event in traceprog.go
 * (checked by a test). */
struct event {
	__u64 cookie;	/* the tool's index: bpf_usdt_cookie, or a function
			 * probe's from its BPF cookie */
	__u32 pid;	/* thread group id, in the initial PID namespace */
	__u32 tid;
	__s32 arg_cnt;	/* bpf_usdt_arg_cnt, negative when no spec was found;
			 * nvals for a function probe */
	__u32 errors;	/* bit n: value n could not be read; it is 0 */
	/* Bit n: value n was read as a string too, the k-th string for the
	 * k-th such value. A failed string read sends "" and sets the
	 * errors bit. */
	__u16 str_args;
	/* TRACE_STACK_CFI: the thread's interpreter frames after the native
	 * ones (at most PROBEKIT_INTERP_MAX_FRAMES), and why their walk
	 * ended (PROBEKIT_INTERP_STOP_*, 0 without the walk). */
	__u8 ninterp;
	__u8 interp_stop;
	__u8 kind;	/* enum event_kind */
	__u8 nvals;
	__u8 nstrs;
	__u8 nframes;	/* at most PROBEKIT_STACK_MAX_DEPTH */
	__u64 time_ns;	/* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	char comm[16];	/* bpf_get_current_comm */
	__s64 vals[];
};

#define TRACE_STACK_BYTES (8 * PROBEKIT_STACK_MAX_DEPTH)
#define TRACE_INTERP_BYTES (sizeof(struct probekit_interp_frame) * PROBEKIT_INTERP_MAX_FRAMES)
/* PROBEKIT_STACK_MAX_DEPTH is one less than a power of two: a mask. */
#define TRACE_STACK_MASK PROBEKIT_STACK_MAX_DEPTH
_Static_assert((TRACE_STACK_MASK & (TRACE_STACK_MASK + 1)) == 0, "stack depth is not 2^k - 1");
#define TRACE_EVENT_MAX (sizeof(struct event) + 8 * TRACE_MAX_VALS + TRACE_STACK_BYTES + TRACE_INTERP_BYTES + \
			 TRACE_MAX_STRS * TRACE_STR_LEN)

/* Whether records carry the thread's user stack (probekit trace --stack):
 * 0 no, TRACE_STACK_FRAMES the kernel's frame-pointer walk,
 * TRACE_STACK_COPY a copy of the stack top with the registers (struct
 * probekit_stack_copy, for package unwind), after the strings. Set
 * before load. */
#define TRACE_STACK_FRAMES 1
#define TRACE_STACK_COPY 2
/* TRACE_STACK_CFI: the walk of unwind.bpf.h (CFI where the object has
 * rows, frame records where not, frame by frame); the walk's end
 * (PROBEKIT_CFI_STOP_*) is in bits TRACE_STOP_SHIFT.. of errors. */
#define TRACE_STACK_CFI 3
volatile const __u32 probekit_trace_stack = 0;

/* Bits 24..26 of a record's errors: why its CFI walk ended
 * (PROBEKIT_CFI_STOP_*, 0 without the walk); bits 16..23: how many of
 * its steps fell back to frame records (no CFI row for the frame),
 * bit 23 set when the last step tried was one. Values are at most
 * TRACE_MAX_VALS, below bit 16. */
#define TRACE_STOP_SHIFT 24
#define TRACE_FP_SHIFT 16

/* TRACE_STACK_COPY: how many pages of the stack the copy reads at most
 * (1 to PROBEKIT_STACK_COPY_PAGES). Set before load. */
volatile const __u32 probekit_trace_copy_pages = PROBEKIT_STACK_COPY_PAGES;

/* Bit 31 of a record's errors: a struct probekit_stack_copy follows the
 * strings, right after the last one's NUL (unaligned: x86-64 and arm64
 * load and store at any address). */
#define TRACE_HAS_COPY (1u << 31)
#define TRACE_RECORD_MAX (TRACE_EVENT_MAX + 8 + sizeof(struct probekit_stack_copy))

/* The CFI walk of a record's stack, as a global function (Linux 5.6):
 * verified once for its calls, and taken out of the program before load
 * when records carry no such stack (record.go's dropCFIWalk). Walks into
 * unwind.bpf.h's per-CPU scratch record; returns its frames | the
 * walk's stop << 8 | its frame-record steps << 16 | the last step's being
 * one << 23, or a negative error. */
__attribute__((noinline)) long trace_cfi_frames(struct pt_regs *ctx, int at_entry)
{
	if (probekit_trace_stack != TRACE_STACK_CFI || !ctx)
		return -95; /* EOPNOTSUPP */
	struct probekit_cfi_stack *s = probekit_cfi_user_stack(ctx, at_entry);

	if (!s)
		return -14; /* EFAULT */
	return (s->n & 0xff) | ((s->stop & 7) << 8) | ((s->fp_frames & 0x7f) << 16) |
	       ((s->fp_frames >> 31) << 23);
}

/* A stack of the CFI walk with the thread's interpreter frames
 * (python.bpf.h): the value of cfi_stacks. Package record reads it
 * (decodeWalked): the native part as bpfunwind.DecodeStack, the
 * interpreter part after it. */
struct trace_stack {
	struct probekit_cfi_stack cfi;
	struct probekit_interp_stack interp;
};

/* Where trace_usdt_interp and trace_func_interp leave this CPU's hit's
 * interpreter frames for the program they tail-call: stamp is the
 * thread's bpf_get_current_pid_tgid, cleared when read. */
struct trace_interp_scratch {
	__u64 stamp;
	struct trace_stack st;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct trace_interp_scratch);
} trace_stack_scratch SEC(".maps");

/* Whether a KEY_STACK_CFI part is in the key spec: without one the walk
 * below is dead code the verifier never explores. Set before load. */
volatile const __u32 probekit_trace_key_cfi = 0;

/* The interpreter walk (python.bpf.h) into trace_stack_scratch, as a
 * global function (Linux 5.6) without arguments. It runs in programs of
 * its own, trace_usdt_interp and trace_func_interp, which then
 * tail-call trace_usdt or trace_func (trace_progs): the walk's
 * verification (its bounded loops over threads and frames) then does
 * not count against the million instructions the trace programs may
 * take, which the walk inside them once went over. package record loads them only for a CFI
 * stack with an interpreter map (LoadSpecOptions). A process that runs
 * no known interpreter costs one lookup of probekit_py_procs. */
__attribute__((noinline)) int trace_interp_frames(void)
{
	__u32 zero = 0;
	struct trace_interp_scratch *w = bpf_map_lookup_elem(&trace_stack_scratch, &zero);

	if (!w)
		return 0;
	w->stamp = 0;
	probekit_py_user_stack(&w->st.interp);
	w->stamp = bpf_get_current_pid_tgid();
	return 0;
}

/* The trace programs by index: 0 trace_usdt, 1 trace_func (record's
 * tailUSDT, tailFunc). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} trace_progs SEC(".maps");

/* This hit's interpreter frames, walked by the program that tail-called
 * this one, or NULL (none walked: no interpreter map, another thread's). */
static __always_inline struct trace_interp_scratch *interp_walked(void)
{
	__u32 zero = 0;
	struct trace_interp_scratch *w = bpf_map_lookup_elem(&trace_stack_scratch, &zero);

	if (!w || w->stamp != bpf_get_current_pid_tgid())
		return 0;
	w->stamp = 0;
	return w;
}

/* Set before load when records carry interpreter frames (LoadSpecOptions
 * with an interpreter map): without it add_interp is dead code, which the
 * verifier does not walk. With it, Debian's 5.10 verifier went past its
 * 1,000,000 processed instructions on the printed CFI stack of the
 * function program. */
volatile const __u32 probekit_trace_interp = 0;

/* Appends the hit's interpreter frames at off in e (at most
 * TRACE_INTERP_BYTES) and returns the offset after them. */
static __always_inline __u32 add_interp(struct event *e, __u32 off)
{
	struct trace_interp_scratch *w;
	__u32 n;

	e->ninterp = 0;
	e->interp_stop = 0;
	if (!probekit_trace_interp)
		return off;
	w = interp_walked();
	if (!w)
		return off;
	e->interp_stop = w->st.interp.stop & 0xff;
	n = w->st.interp.n;
	if (n > PROBEKIT_INTERP_MAX_FRAMES)
		n = PROBEKIT_INTERP_MAX_FRAMES;
	asm volatile("" : "+r"(n));
	n &= 2 * PROBEKIT_INTERP_MAX_FRAMES - 1;
	if (n == 0 || n > PROBEKIT_INTERP_MAX_FRAMES ||
	    bpf_probe_read_kernel((char *)e + off, n * sizeof(struct probekit_interp_frame), w->st.interp.f))
		return off;
	e->ninterp = n;
	return off + n * sizeof(struct probekit_interp_frame);
}

/* Puts the user stack at off in e when probekit_trace_stack is set
 * (at_entry: the probe is at a function's first instruction, see
 * stack.bpf.h) and returns the offset after it. */
static __always_inline __u32 add_stack(struct pt_regs *ctx, struct event *e, __u32 off, int at_entry)
{
	long n;

	e->nframes = 0;
	e->ninterp = 0;
	e->interp_stop = 0;
	/* off > ... is never true (off <= header + values): it tells the
	 * verifier the stack stays in e. */
	if (off > sizeof(*e) + 8 * TRACE_MAX_VALS)
		return off;
	if (probekit_trace_stack == TRACE_STACK_CFI) {
		__u32 zero = 0;
		long r = trace_cfi_frames(ctx, at_entry);
		struct probekit_cfi_stack *s;

		if (r < 0)
			return off;
		s = bpf_map_lookup_elem(&probekit_cfi_scratch, &zero);
		if (!s)
			return off;
		e->errors |= ((r >> 8) & 7) << TRACE_STOP_SHIFT | ((r >> 16) & 0xff) << TRACE_FP_SHIFT;
		n = r & 0xff;
		if (n > PROBEKIT_STACK_MAX_DEPTH)
			n = PROBEKIT_STACK_MAX_DEPTH;
		asm volatile("" : "+r"(n));
		n &= TRACE_STACK_MASK;
		if (n == 0 || bpf_probe_read_kernel((char *)e + off, n * 8, s->pcs))
			return off;
		e->nframes = n;
		return add_interp(e, off + 8 * n);
	}
	if (probekit_trace_stack != TRACE_STACK_FRAMES)
		return off;
	n = probekit_user_stack(ctx, (__u64 *)((char *)e + off), TRACE_STACK_BYTES, at_entry);
	if (n <= 0)
		return off;
	if (n > PROBEKIT_STACK_MAX_DEPTH)
		n = PROBEKIT_STACK_MAX_DEPTH;
	/* The mask changes no value of 1..127, but gives n a bound older
	 * verifiers keep: Linux 6.1's followed the n < 0 path of
	 * bpf_get_stack's result into this code with contradictory bounds
	 * (umin > umax), lost the record's offset and refused the string
	 * reads after it ("R1 unbounded memory access"). The barrier keeps
	 * clang from dropping the mask as redundant. */
	asm volatile("" : "+r"(n));
	n &= TRACE_STACK_MASK;
	e->nframes = n;
	return off + 8 * n;
}

/* The start gate (probekit trace: every probe of a trace starts at one
 * instant). With probekit_trace_gated set before load, the programs
 * ignore every hit until user space sets probekit_trace_armed, once the
 * trace's probes are all attached: attaching takes one link after the
 * other, and a hit of the first probe before the last one is attached
 * would be counted against a probe that could not yet fire (a function's
 * entries without its returns). probekit_trace_armed is in .bss, which
 * user space writes through its memory mapping (BPF_F_MMAPABLE, Linux
 * 5.5); it is only ever set, never cleared. Without the gate (the
 * default) the check is dead code the verifier drops. */
volatile const __u32 probekit_trace_gated = 0;
volatile __u32 probekit_trace_armed;

static __always_inline int trace_armed(void)
{
	return !probekit_trace_gated || probekit_trace_armed;
}

/* Bit n: read USDT argument n as a pointer to a string. Set before load.
 * (A function probe's mask is in its cookie.) */
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
	__u64 buf[TRACE_RECORD_MAX / 8];
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

/* Faulting string reads: set before load (SetFaultingStrings) when the
 * programs are loaded sleepable (BPF_F_SLEEPABLE: uprobe programs since
 * Linux 6.0, 8c7dcb84e3b7 and 64ad7556c75e; uprobe_multi ones since the
 * link's first release, 6.6). bpf_probe_read_user_str never faults: a
 * string in a page the process has not touched yet (a literal in .rodata
 * at a function's first call) reads as an error. With this set, a failed
 * read faults the string's pages in with bpf_copy_from_user (Linux 5.10,
 * 07be4c4a3e7a; sleepable programs only) and is tried again. Without it
 * the helper call is dead code, which the verifier does not check. */
volatile const __u32 probekit_trace_fault_strs = 0;

/* bpf_probe_read_user_str, retried after faulting the string's pages in
 * when probekit_trace_fault_strs is set (faultstr.bpf.h). */
static __always_inline long read_user_str(void *dst, __u32 size, const void *src)
{
	return probekit_read_user_str(dst, size, src, probekit_trace_fault_strs);
}

/* Reads value n of e as a string at off for each bit n of mask, and
 * returns the record's length. */
static __always_inline __u32 read_strs(struct event *e, __u32 nvals, __u32 mask, __u32 off)
{
	__u32 errors = e->errors, str_args = 0, nstrs = 0;

#pragma unroll
	for (int n = 0; n < TRACE_MAX_VALS; n++) {
		long len;

		/* off > ... is never true (off <= header + values + stack + 3
		 * strings here): it tells the verifier the read stays in e. */
		if (n >= nvals || !((mask >> n) & 1) || nstrs >= TRACE_MAX_STRS ||
		    off > TRACE_EVENT_MAX - TRACE_STR_LEN)
			continue;
		len = read_user_str((char *)e + off, TRACE_STR_LEN, (void *)e->vals[n]);
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

/* Fills e (TRACE_EVENT_MAX bytes) for a USDT hit and returns the
 * record's length. */
static __noinline __u32 fill_usdt(struct pt_regs *ctx, struct event *e)
{
	__u64 id = bpf_get_current_pid_tgid();
	/* One spec id for the count, the cookie and every argument
	 * (bpf_usdt_arg_cnt, bpf_usdt_cookie and bpf_usdt_arg would find it
	 * each). */
	int spec_id = __bpf_usdt_spec_id(ctx);
	struct __bpf_usdt_spec *spec = spec_id < 0 ? NULL : bpf_map_lookup_elem(&__bpf_usdt_specs, &spec_id);
	int cnt = spec ? spec->arg_cnt : -ESRCH;
	__u32 nvals = cnt < 0 ? 0 : cnt > TRACE_MAX_VALS ? TRACE_MAX_VALS : cnt;
	__u32 errors = 0;

	e->cookie = spec ? spec->usdt_cookie : 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->arg_cnt = cnt;
	e->kind = EVENT_USDT;
	e->nvals = nvals;
#pragma unroll
	for (int n = 0; n < TRACE_MAX_VALS; n++) {
		long v = 0, err;

		if (n >= nvals)
			continue;
		/* Without a branch: an error is negative, its sign bit the
		 * error bit. A branch here gives the verifier a state per
		 * combination of errors so far (2^12), which Linux 6.1's did
		 * not prune: over 1,000,000 instructions with the wakeup
		 * flags live across the fill. */
		err = __probekit_usdt_arg_id(ctx, spec_id, n, &v);
		errors |= (__u32)((__u64)err >> 63) << n;
		e->vals[n] = v;
	}
	e->errors = errors;
	return read_strs(e, nvals, probekit_trace_str_mask, add_stack(ctx, e, sizeof(*e) + 8 * nvals, 0));
}

/* Each register set is read by a function of its own: inlined into one
 * switch, clang merges the cases' loads into one load from ctx plus an
 * offset it computes, and the verifier refuses a load through a modified
 * context pointer. Each returns the number of values it stored. */
static __noinline __u32 read_c_regs(struct pt_regs *ctx, __s64 *v)
{
	const func_regs_t *r = (const func_regs_t *)ctx;

	FUNC_C_REGS(r, v);
	return FUNC_C_NREGS;
}

static __noinline __u32 read_go_regs(struct pt_regs *ctx, __s64 *v)
{
	const func_regs_t *r = (const func_regs_t *)ctx;

	FUNC_GO_REGS(r, v);
	return FUNC_GO_NREGS;
}

static __noinline __u32 read_ret_reg(struct pt_regs *ctx, __s64 *v)
{
	const func_regs_t *r = (const func_regs_t *)ctx;

	v[0] = FUNC_RET_REG(r);
	return 1;
}

/* Without BPF cookies (before Linux 5.15: probekit_usdt_have_cookie
 * false) a function probe's cookie is found by where the probe hit. At a
 * uprobe the instruction pointer is the probed instruction's address
 * (handle_swbp in kernel/events/uprobes.c sets it back to the breakpoint
 * before the handlers run). The key's tgid is the process for a file
 * whose runtime address depends on the process (PIE executables, shared
 * libraries), 0 for one that runs at its link-time addresses. Package
 * uprobe fills the map (Options.AddressTable); keep struct func_ip_key in
 * sync with uprobe.AddressKey. A uretprobe's address is the caller's
 * return address, which names no function: without cookies package
 * uprobe probes the return instructions instead. */
struct func_ip_key {
	__u32 tgid;	/* as bpf_get_current_pid_tgid reports it; 0: any */
	__u32 pad;
	__u64 ip;
};

/* libc.so.6:* is about 2,600 sites: room for that in a few dozen
 * processes. Not preallocated: only the entries written cost memory. */
#define FUNC_MAX_IPS 65536

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FUNC_MAX_IPS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct func_ip_key);
	__type(value, __u64);
} func_ips SEC(".maps");

/* The probe's FUNC_COOKIE_* description: its BPF cookie, or its entry of
 * func_ips; 0 (no probe: FuncCookie is never 0) when it has none. */
static __always_inline __u64 func_cookie(struct pt_regs *ctx)
{
	struct func_ip_key k = {};
	__u64 *c;

	if (probekit_usdt_have_cookie)
		return bpf_get_attach_cookie(ctx);
	k.tgid = bpf_get_current_pid_tgid() >> 32;
	k.ip = PT_REGS_IP(ctx);
	c = bpf_map_lookup_elem(&func_ips, &k);
	if (!c) {
		k.tgid = 0;
		c = bpf_map_lookup_elem(&func_ips, &k);
	}
	return c ? *c : 0;
}

/* Fills e (TRACE_EVENT_MAX bytes) for a function probe's hit, as its
 * cookie describes, and returns the record's length. */
static __noinline __u32 fill_func(struct pt_regs *ctx, struct event *e)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 cookie = func_cookie(ctx);
	__u32 nvals;

	switch ((cookie >> FUNC_COOKIE_REGS_SHIFT) & 0xff) {
	case FUNC_REGS_C:
		nvals = read_c_regs(ctx, e->vals);
		break;
	case FUNC_REGS_GO:
		nvals = read_go_regs(ctx, e->vals);
		break;
	case FUNC_REGS_RET:
		nvals = read_ret_reg(ctx, e->vals);
		break;
	default:
		nvals = 0;
	}
	e->cookie = (__u32)cookie;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->arg_cnt = nvals;
	e->errors = 0;
	e->kind = (cookie >> FUNC_COOKIE_KIND_SHIFT) & 0xff;
	e->nvals = nvals;
	/* An entry probe is at the function's first instruction (on Go,
	 * after its stack check, which moves no stack pointer). */
	return read_strs(e, nvals, (cookie >> FUNC_COOKIE_STRS_SHIFT) & 0xfff,
			 add_stack(ctx, e, sizeof(*e) + 8 * nvals, e->kind == EVENT_UPROBE));
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

/* What a hit does: send a record (TRACE_EVENTS), or add to its probe's
 * count (TRACE_COUNT) or to a bucket of its probe's histogram
 * (TRACE_HIST) in a map the reader reads at the end, with nothing sent
 * per hit. Set before load: the verifier then drops the other modes'
 * code. */
enum trace_mode {
	TRACE_EVENTS = 0,
	TRACE_COUNT = 1,
	TRACE_HIST = 2,
	TRACE_LATENCY = 3,	/* see "Latency" below */
};

volatile const __u32 probekit_trace_mode = TRACE_EVENTS;

/* TRACE_HIST: the value counted, by number (0-based) among the values a
 * record would carry; a uretprobe's return value is value 0. A hit
 * without that value adds nothing and counts in dropped. Set before
 * load. */
volatile const __u32 probekit_trace_hist_val = 0;

/* The counters of the aggregating modes (counts, hist, keyed) are one
 * value for all CPUs, added to atomically, not per-CPU values: a per-CPU
 * value is in the per-CPU area, away from the map's own memory, and
 * reaching it cost a hit more than the atomic add does (in
 * BenchmarkTraceCount's prog-ns, about 80 of a --count hit's 260 ns on a
 * 2-CPU virtual machine). Hits of the same key on two CPUs at once share
 * the value's cache line. */

/* TRACE_COUNT: hits per probe index. 8192 probes is 64 KiB;
 * uprobe:libc.so.6:* is about 2,600 probes. Keep in sync with MaxCounted
 * in record.go. */
#define TRACE_MAX_COUNTED 8192

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TRACE_MAX_COUNTED);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* TRACE_HIST: hits per (probe index, log2 bucket). Bucket 0
 * holds negative values, 1 zero, k + 2 the values in [2^k, 2^(k+1)) for
 * k from 0 to 62: 65 buckets (NumBuckets in traceprog.go).
 * A value rarely spans more than 20 buckets: 4096 entries hold a few
 * hundred probes; a hit that finds the map full counts in dropped. */
#define TRACE_HIST_ENTRIES 4096

struct hist_key {
	__u32 probe;
	__u32 bucket;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TRACE_HIST_ENTRIES);
	__type(key, struct hist_key);
	__type(value, __u64);
} hist SEC(".maps");

static __always_inline __u32 hist_bucket(__s64 v)
{
	__u64 u = v;
	__u32 k = 0;

	if (v < 0)
		return 0;
	if (v == 0)
		return 1;
	if (u >> 32) { u >>= 32; k += 32; }
	if (u >> 16) { u >>= 16; k += 16; }
	if (u >> 8) { u >>= 8; k += 8; }
	if (u >> 4) { u >>= 4; k += 4; }
	if (u >> 2) { u >>= 2; k += 2; }
	if (u >> 1) k += 1;
	return k + 2;
}

/* Value want of a function probe's registers (the one a histogram
 * counts, a key part);
 * returns 0 when there is none. */
static __noinline int func_hist_val_n(struct pt_regs *ctx, __u64 cookie, __u32 want, __s64 *v)
{
	__s64 vals[TRACE_MAX_VALS] = {};
	__u32 n, nvals;

	switch ((cookie >> FUNC_COOKIE_REGS_SHIFT) & 0xff) {
	case FUNC_REGS_C:
		nvals = read_c_regs(ctx, vals);
		break;
	case FUNC_REGS_GO:
		nvals = read_go_regs(ctx, vals);
		break;
	case FUNC_REGS_RET:
		nvals = read_ret_reg(ctx, vals);
		break;
	default:
		return 0;
	}
	if (want >= nvals)
		return 0;
	/* vals[want] by constant offsets: a variable-offset stack read is
	 * refused when want is not a constant (a filter term's). */
#pragma unroll
	for (n = 0; n < TRACE_MAX_VALS; n++) {
		if (n == want) {
			*v = vals[n];
			return 1;
		}
	}
	return 0;
}

/* ---- Keyed aggregation (probekit trace --by): counts and histograms
 * per key tuple, in one hash. ---- */

/* At most TRACE_MAX_KEYS key parts, of which one string, read up to
 * TRACE_KEY_STR_LEN - 1 bytes. */
#define TRACE_MAX_KEYS 4
#define TRACE_KEY_STR_LEN 64
#define TRACE_COMM_LEN 16

/* What a key part is (byte n of probekit_trace_key_spec: kind << 4 |
 * value number). Keep in sync with KeyKind in record.go. */
enum key_kind {
	KEY_NONE = 0,
	KEY_ARG = 1,	/* value N as a number */
	KEY_STR = 2,	/* value N as a pointer to a string */
	KEY_PID = 3,
	KEY_TID = 4,
	KEY_COMM = 5,
	KEY_PROBE = 6,	/* the probe index */
	KEY_STACK = 7,	/* the user stack: an id in stack_traces, its pid, and
			 * at a function's entry its caller (see stack.bpf.h) */
	KEY_STACK_CFI = 8, /* the user stack unwound from CFI (unwind.bpf.h):
			    * its id in cfi_stacks as the part's number, and
			    * its pid */
};

/* Byte n: key part n, 0 past the last. 0: no keys (counts and hist).
 * Set before load. */
volatile const __u64 probekit_trace_key_spec = 0;

/* Keep in sync with aggKey in keys.go. The keyed map's key is the
 * first bytes of it, up to the last field the parts use (SetKeys sets
 * the map's key size; the hash and compare of a lookup are over those
 * bytes only): the fields are in the order of the parts that fill
 * them, the short and frequent first. */
struct agg_key {
	__u32 probe;	/* the probe index with a KEY_PROBE part, else 0 */
	__u32 bucket;	/* the log2 bucket in TRACE_HIST, else 0 */
	char comm[TRACE_COMM_LEN];
	__s64 nums[TRACE_MAX_KEYS];	/* part n's number (arg, pid, tid) */
	char str[TRACE_KEY_STR_LEN];
	/* KEY_STACK: bpf_get_stackid's id (negative: its error, the stack
	 * unread), the process whose addresses they are, and the return
	 * address at the stack pointer of a probe at a function's entry,
	 * which the kernel's frame-pointer walk misses (0 otherwise). */
	__s32 stack;
	__u32 stack_pid;
	__u64 caller;
};

/* TRACE_COUNT and TRACE_HIST with keys: hits per key. A hit
 * that finds the map full counts in key_overflow. */
#define TRACE_KEYED_ENTRIES 10240

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TRACE_KEYED_ENTRIES);
	__type(key, struct agg_key);
	__type(value, __u64);
} keyed SEC(".maps");

/* KEY_STACK: the distinct user stacks, by the kernel's frame-pointer
 * walk (bpf_get_stackid with BPF_F_USER_STACK, Linux 4.6). One entry
 * here; sized before load when a key has a stack (record.SetKeys): the
 * map is preallocated, 1 KiB per entry. */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, PROBEKIT_STACK_MAX_DEPTH * sizeof(__u64));
} stack_traces SEC(".maps");

/* KEY_STACK_CFI: the distinct stacks of unwind.bpf.h's walk, by id (a
 * 63-bit hash of the frames). One entry here; sized before load
 * (record.SetKeys), allocated as stacks come. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct trace_stack);
} cfi_stacks SEC(".maps");

/* The walk and its store, as a global function (Linux 5.6): verified once
 * for all its calls and, on kernels that verify every global function
 * whether called or not, cut short by the constant when no key wants it.
 * Returns the stack's id, or a negative error. */
__attribute__((noinline)) __s64 trace_cfi_stack_id(struct pt_regs *ctx, int at_entry)
{
	__u32 zero = 0;
	/* FNV-1a's offset basis and prime (64-bit), a word at a time, as
	 * unwind.bpf.h's probekit_cfi_stack_id, over the native frames and
	 * then the interpreter frames: two hits with the same native stack
	 * in different Python functions count apart. */
	__u64 h = 0xcbf29ce484222325ULL;
	struct probekit_cfi_stack *s;
	struct trace_interp_scratch *w;
	__u32 n, ni;

	if (!probekit_trace_key_cfi || !ctx)
		return -95; /* EOPNOTSUPP */
	s = probekit_cfi_user_stack(ctx, at_entry);
	if (!s)
		return -14; /* EFAULT */
	for (__u32 i = 0; i < PROBEKIT_CFI_MAX_FRAMES; i++) {
		if (i >= s->n)
			break;
		h = (h ^ s->pcs[i]) * 0x100000001b3ULL;
	}
	h = (h ^ s->n) * 0x100000001b3ULL;
	n = s->n;
	w = interp_walked();
	if (!w) {
		w = bpf_map_lookup_elem(&trace_stack_scratch, &zero);
		if (!w)
			return -14;
		w->st.interp.n = 0;
		w->st.interp.stop = 0;
	}
	ni = w->st.interp.n;
	for (__u32 i = 0; i < PROBEKIT_INTERP_MAX_FRAMES; i++) {
		if (i >= ni)
			break;
		h = (h ^ w->st.interp.f[i].code) * 0x100000001b3ULL;
		h = (h ^ ((__u64)w->st.interp.f[i].instr << 32 | w->st.interp.f[i].flags)) * 0x100000001b3ULL;
	}
	h = (h ^ ni) * 0x100000001b3ULL;
	h &= ~(1ULL << 63);
	if (bpf_map_lookup_elem(&cfi_stacks, &h))
		return h;
	/* A new stack: its native part joins the interpreter part in the
	 * scratch (the frames walked, not the rest of the 1 KiB). */
	if (n > PROBEKIT_CFI_MAX_FRAMES)
		n = PROBEKIT_CFI_MAX_FRAMES;
	w->st.cfi.n = n;
	w->st.cfi.stop = s->stop;
	if (n && bpf_probe_read_kernel(w->st.cfi.pcs, n * 8, s->pcs))
		return -14;
	long err = bpf_map_update_elem(&cfi_stacks, &h, &w->st, BPF_NOEXIST);

	if (err && err != -17 /* EEXIST: another CPU stored it */)
		return -12; /* ENOMEM */
	return h;
}

/* Hits not counted because keyed was full. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} key_overflow SEC(".maps");

/* Value n of a hit, of a function probe (func, with its cookie) or a
 * USDT location; returns 0 when there is none. */
static __noinline int hit_val(struct pt_regs *ctx, int func, __u64 cookie, __u32 n, __s64 *v)
{
	long l = 0;

	if (func)
		return func_hist_val_n(ctx, cookie, n, v);
	if (n >= TRACE_MAX_VALS)
		return 0;
	if (!__probekit_usdt_same_arg(ctx, n, &l) && bpf_usdt_arg(ctx, n, &l))
		return 0;
	*v = l;
	return 1;
}

/* Fills k from the key spec; returns 0 when a part's value is missing. */
static __always_inline int fill_key(struct pt_regs *ctx, int func, __u64 cookie, __u32 probe, struct agg_key *k)
{
	__u64 spec = probekit_trace_key_spec;
	__s64 v;

#pragma unroll
	for (int i = 0; i < TRACE_MAX_KEYS; i++) {
		__u32 part = (spec >> (8 * i)) & 0xff, n = part & 0xf;

		switch (part >> 4) {
		case KEY_ARG:
			if (!hit_val(ctx, func, cookie, n, &v))
				return 0;
			k->nums[i] = v;
			break;
		case KEY_STR:
			if (!hit_val(ctx, func, cookie, n, &v))
				return 0;
			if (read_user_str(k->str, sizeof(k->str), (void *)v) < 0)
				k->str[0] = 0;
			break;
		case KEY_PID:
			k->nums[i] = bpf_get_current_pid_tgid() >> 32;
			break;
		case KEY_TID:
			k->nums[i] = (__u32)bpf_get_current_pid_tgid();
			break;
		case KEY_COMM:
			bpf_get_current_comm(k->comm, sizeof(k->comm));
			break;
		case KEY_PROBE:
			k->probe = probe;
			break;
		case KEY_STACK:
			k->stack = bpf_get_stackid(ctx, &stack_traces, BPF_F_USER_STACK);
			k->stack_pid = bpf_get_current_pid_tgid() >> 32;
			/* A uprobe's entry probe (the kind in its cookie) is at
			 * the function's first instruction. */
			if (func && ((cookie >> FUNC_COOKIE_KIND_SHIFT) & 0xff) == EVENT_UPROBE &&
			    __probekit_stack_return_address(ctx, &k->caller))
				k->caller = 0;
			break;
		case KEY_STACK_CFI:
			k->nums[i] = trace_cfi_stack_id(ctx, func && ((cookie >> FUNC_COOKIE_KIND_SHIFT) & 0xff) == EVENT_UPROBE);
			k->stack_pid = bpf_get_current_pid_tgid() >> 32;
			break;
		}
	}
	return 1;
}

static __always_inline void key_full(void)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&key_overflow, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* Adds a hit to its key's count (bucket: 0, or the histogram's). */
static __noinline int aggregate_keyed(struct pt_regs *ctx, int func, __u64 cookie, __u32 probe, __s32 bucket)
{
	struct agg_key k;
	__u64 one = 1, *n;

	__builtin_memset(&k, 0, sizeof(k));
	if (!fill_key(ctx, func, cookie, probe, &k)) {
		count_lost();
		return 0;
	}
	k.bucket = bucket;
	n = bpf_map_lookup_elem(&keyed, &k);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return 0;
	}
	if (bpf_map_update_elem(&keyed, &k, &one, BPF_NOEXIST)) {
		n = bpf_map_lookup_elem(&keyed, &k);
		if (n)
			__sync_fetch_and_add(n, 1);
		else
			key_full();
	}
	return 0;
}

/* ---- End of keyed aggregation. ---- */

/* Whether a key part is the probe index. Only then does a keyed hit of
 * a USDT location need its spec (a function probe's index is in its
 * cookie); the verifier folds this to a constant. */
static __always_inline int key_has_probe(void)
{
	__u64 spec = probekit_trace_key_spec;

#pragma unroll
	for (int i = 0; i < TRACE_MAX_KEYS; i++)
		if (((spec >> (8 * i + 4)) & 0xf) == KEY_PROBE)
			return 1;
	return 0;
}

/* 1 + the probe index of every USDT hit, when it is known before load
 * (record.SetUSDTProbe: one site); 0: each hit's index is its spec's
 * cookie. Known, a counted hit reads no spec and calls no helper. */
volatile const __u32 probekit_trace_usdt_probe = 0;

/* Counts a hit in counts or hist; nothing goes to the ring. cookie: a
 * function probe's (func), unused for a USDT location. */
static __always_inline int aggregate(struct pt_regs *ctx, int func, __u64 cookie)
{
	struct __bpf_usdt_spec *spec;
	struct hist_key key;
	__u64 one = 1, *n;
	__u32 probe = 0;
	__s64 v = 0;
	int ok;

	if (func) {
		probe = (__u32)cookie;
	} else if (probekit_trace_usdt_probe) {
		probe = probekit_trace_usdt_probe - 1;
	} else if (!probekit_trace_key_spec || key_has_probe()) {
		spec = __bpf_usdt_spec(ctx);
		if (!spec)
			return 0;
		probe = (__u32)spec->usdt_cookie;
	}
	if (probekit_trace_key_spec && probekit_trace_mode == TRACE_COUNT)
		return aggregate_keyed(ctx, func, cookie, probe, 0);
	if (probekit_trace_mode == TRACE_COUNT) {
		n = bpf_map_lookup_elem(&counts, &probe);
		if (n)
			__sync_fetch_and_add(n, 1);
		else
			count_lost();
		return 0;
	}
	if (func)
		ok = func_hist_val_n(ctx, cookie, probekit_trace_hist_val, &v);
	else
		ok = !bpf_usdt_arg(ctx, probekit_trace_hist_val, (long *)&v);
	if (!ok) {
		count_lost();
		return 0;
	}
	if (probekit_trace_key_spec)
		return aggregate_keyed(ctx, func, cookie, probe, hist_bucket(v));
	key.probe = probe;
	key.bucket = hist_bucket(v);
	n = bpf_map_lookup_elem(&hist, &key);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return 0;
	}
	/* A program on another CPU, or one that preempted this one, may
	 * have added the key since the lookup: then add to its entry. */
	if (bpf_map_update_elem(&hist, &key, &one, BPF_NOEXIST)) {
		n = bpf_map_lookup_elem(&hist, &key);
		if (n)
			__sync_fetch_and_add(n, 1);
		else
			count_lost();
	}
	return 0;
}

/* ---- Filters (probekit trace --filter): a table of terms evaluated
 * before a hit is sent or counted. The table is a constant set before
 * load: the verifier knows each term's field, operator and operands,
 * and drops the code that no term takes; a hit reads only what its terms
 * compare, and no map for the terms. ---- */

/* At most TRACE_MAX_TERMS terms; strings compared over at most
 * TRACE_KEY_STR_LEN - 1 bytes. */
#define TRACE_MAX_TERMS 8

/* What a term compares (keep in sync with FilterField in record.go). */
enum filter_field {
	FILTER_ARG = 0,		/* value N */
	FILTER_STR = 1,		/* value N read as a string */
	FILTER_PID = 2,
	FILTER_TID = 3,
	FILTER_COMM = 4,
};

enum filter_op {
	FILTER_EQ = 0,
	FILTER_NE = 1,
	FILTER_LT = 2,
	FILTER_LE = 3,
	FILTER_GT = 4,
	FILTER_GE = 5,
	FILTER_PREFIX = 6,	/* strings: the first len bytes are str */
	FILTER_NOT_PREFIX = 7,
};

/* One comparison. Terms are in order; a term with or_after ends a group
 * of terms joined by &&, and the groups are joined by || (the last term
 * has it set). Keep in sync with FilterTerm in record.go. */
struct filter_term {
	__u8 field;
	__u8 op;
	__u8 val;	/* the value number of FILTER_ARG and FILTER_STR */
	__u8 or_after;
	__u32 len;	/* the length of str, below TRACE_KEY_STR_LEN */
	__s64 num;
	char str[TRACE_KEY_STR_LEN];
};

/* How many terms of probekit_trace_terms apply; 0: every hit passes.
 * Set before load. */
volatile const __u32 probekit_trace_nterms = 0;

/* The terms. Set before load. */
volatile const struct filter_term probekit_trace_terms[TRACE_MAX_TERMS] = {};

/* Set by the loader when it compiled the terms into instructions at the
 * entry of trace_usdt (record's compileUSDTFilter: every term reads a
 * value at one place at every site, or the pid or tid); trace_usdt then
 * skips filter_pass. */
volatile const __u32 probekit_trace_usdt_filtered = 0;

/* The same for trace_func (compileFuncFilter). */
volatile const __u32 probekit_trace_func_filtered = 0;

/* 1 + the FUNC_REGS_* of every function site's cookie, when the caller
 * knows it before load (record.SetFuncRegs); read by the loader only,
 * which then compiles the filter without reading the cookie. */
volatile const __u32 probekit_trace_func_regs = 0;

/* Whether v op num holds, for a number's operator (FILTER_EQ to
 * FILTER_GE); 0 for any other. */
static __always_inline int filter_cmp(__s64 v, __u32 op, __s64 num)
{
	switch (op) {
	case FILTER_EQ: return v == num;
	case FILTER_NE: return v != num;
	case FILTER_LT: return v < num;
	case FILTER_LE: return v <= num;
	case FILTER_GT: return v > num;
	case FILTER_GE: return v >= num;
	}
	return 0;
}

/* Whether the hit satisfies t. A value that cannot be read satisfies no
 * term. */
static __noinline int filter_term_ok(struct pt_regs *ctx, int func, __u64 cookie,
				     const volatile struct filter_term *t)
{
	char buf[TRACE_KEY_STR_LEN] = {};
	__s64 v = 0;
	__u32 len;
	int eq = 1;

	switch (t->field) {
	case FILTER_ARG:
		if (!hit_val(ctx, func, cookie, t->val, &v))
			return 0;
		break;
	case FILTER_PID:
		v = bpf_get_current_pid_tgid() >> 32;
		break;
	case FILTER_TID:
		v = (__u32)bpf_get_current_pid_tgid();
		break;
	case FILTER_STR:
		if (!hit_val(ctx, func, cookie, t->val, &v))
			return 0;
		if (read_user_str(buf, sizeof(buf), (void *)v) < 0)
			return 0;
		goto str;
	case FILTER_COMM:
		if (bpf_get_current_comm(buf, TRACE_COMM_LEN))
			return 0;
		goto str;
	default:
		return 0;
	}
	return filter_cmp(v, t->op, t->num);
str:
	len = t->len;
	for (__u32 j = 0; j < TRACE_KEY_STR_LEN - 1; j++) {
		if (j >= len)
			break;
		if (buf[j] != t->str[j]) {
			eq = 0;
			break;
		}
	}
	if (eq && len < TRACE_KEY_STR_LEN && (t->op == FILTER_EQ || t->op == FILTER_NE))
		eq = buf[len & (TRACE_KEY_STR_LEN - 1)] == 0;
	switch (t->op) {
	case FILTER_EQ:
	case FILTER_PREFIX:
		return eq;
	case FILTER_NE:
	case FILTER_NOT_PREFIX:
		return !eq;
	}
	return 0;
}

/* Whether argument n of a USDT hit whose spec id is id compares with num
 * as op says; a value that cannot be read satisfies no term. The
 * FILTER_ARG term of a USDT hit, in one call where filter_term_ok,
 * hit_val and bpf_usdt_arg made three levels (BenchmarkTraceCount on a
 * 2-CPU virtual machine, bpf stats: a hit that the term drops took about
 * 155 ns that way, about 140 ns this way; this function inlined into the
 * program measured no faster). Global, so that it is verified once on
 * its own, like usdt.bpf.h's argument fetch, whose context pointer type
 * it takes (scalars and that pointer only, for Linux 5.10). */
__attribute__((noinline)) int probekit_trace_usdt_arg_term(struct bpf_user_pt_regs_t *uctx, int id,
							   __u64 n, __u32 op, __s64 num)
{
	long v;

	if (__probekit_usdt_arg_of((struct pt_regs *)uctx, id, n, &v))
		return 0;
	return filter_cmp(v, op, num);
}

/* Whether the hit passes the filter: all terms of some group hold.
 * cookie: a function probe's BPF cookie. Inlined: a USDT argument term
 * is one call (probekit_trace_usdt_arg_term), the others one call of
 * filter_term_ok. */
static __always_inline int filter_pass(struct pt_regs *ctx, int func, __u64 cookie)
{
	/* A USDT hit's spec id, found at its first argument term. */
	int group = 1, id = 0, have_id = 0;

	/* Unrolled: each term is at a constant offset, which the verifier
	 * needs to know its contents. */
#pragma unroll
	for (__u32 i = 0; i < TRACE_MAX_TERMS; i++) {
		const volatile struct filter_term *t = &probekit_trace_terms[i];

		if (i >= probekit_trace_nterms)
			break;
		if (group && !func && t->field == FILTER_ARG) {
			long v;

			/* Where every site has the argument at one place: no
			 * spec id, no call. */
			if (__probekit_usdt_same_arg(ctx, t->val, &v)) {
				group = filter_cmp(v, t->op, t->num);
				goto next;
			}
			if (!have_id) {
				id = __bpf_usdt_spec_id(ctx);
				have_id = 1;
			}
			group = probekit_trace_usdt_arg_term((struct bpf_user_pt_regs_t *)ctx, id, t->val,
							     t->op, t->num);
		} else if (group)
			group = filter_term_ok(ctx, func, cookie, t);
next:
		if (t->or_after) {
			if (group)
				return 1;
			group = 1;
		}
	}
	return 0;
}

/* ---- End of filters. ---- */

/* ---- Latency (probekit trace --latency): the time from a start hit to
 * its end hit, paired per thread as a stack, counted in log2 buckets of
 * nanoseconds. ----
 *
 * A probe's role is bit 63 of its cookie (the usdt cookie of a USDT
 * location, the BPF cookie of a function probe): set, its hits are ends
 * (TRACE_LAT_END, LatencyEnd in record.go). A start pushes a frame on its
 * thread's stack: the start's probe index, whether the filter dropped it,
 * and the time, read last so that the program's own work is not timed.
 * An end reads the time first, pops the latest frame and adds the interval
 * to the start's probe (hist) or key (keyed) in the bucket of the
 * interval. So a nested or recursive start is ended by its own end.
 *
 * An end closes a start of its own identity: with probekit_trace_lat_match
 * (up to two argument indexes, the same for START and END: Python's
 * function__entry and function__return give the file and the function
 * name as arguments 0 and 1, and the line, which differs, as 2) each
 * frame keeps the start's values of those arguments, and an end pops the
 * latest frame whose values equal its own. Frames above it are starts
 * whose ends never came (LAT_LOST_ABANDONED); an end that matches no
 * frame is counted (LAT_LOST_NO_START) and changes nothing: CPython 3.11
 * fires function__return without function__entry for the sys.setprofile
 * callback, which would otherwise close the function the callback runs
 * in. Without the constant every frame matches: the latest start. A
 * function probe has no identity arguments (a return has only its
 * return value), and needs none: its returns come in its calls' order.
 *
 * The filter is evaluated at the start, with the start's values; a
 * dropped start still pushes a frame (marked), so that its end pops it
 * and the frames below stay paired. Keys are filled at the start too (the
 * values of the start's probe: a function's arguments at its entry) and
 * kept in lat_keys by thread and depth until the end.
 *
 * A thread's stack keeps TRACE_LAT_MAX_DEPTH frames; a start deeper than
 * that is counted (LAT_LOST_DEPTH) and only deepens the stack, and its
 * end only pops it. An end on an empty stack is counted
 * (LAT_LOST_NO_START). Stacks are in an LRU hash: a thread that exits
 * between a start and its end leaves a stack that newer threads push
 * out.
 *
 * A function probe whose cookie has TRACE_LAT_GOROUTINE (Go code) pairs
 * per goroutine instead of per thread: the scheduler moves a goroutine
 * between threads (at a preemption, a blocking call), so its end may run
 * on another thread than its start. The goroutine is its g pointer, which
 * Go's register ABI keeps in a register (r14 on x86-64, x28 on arm64:
 * ABIInternal, Go 1.17 and 1.18) at a function's entry and at its
 * returns; g pointers of two processes can be equal, so the stack's key
 * is the process and the thread or goroutine. */

#define TRACE_LAT_MAX_DEPTH 32	/* MaxLatencyDepth in record.go */
#define TRACE_LAT_DEPTH_MASK (TRACE_LAT_MAX_DEPTH - 1)
_Static_assert((TRACE_LAT_MAX_DEPTH & TRACE_LAT_DEPTH_MASK) == 0, "latency depth is not a power of two");
#define TRACE_LAT_END (1ull << 63)
#define TRACE_LAT_GOROUTINE (1ull << 62)

/* The g register of Go's ABIInternal (see above). */
#if defined(__TARGET_ARCH_x86)
#define FUNC_G_REG(r) (r->r14)
#elif defined(__TARGET_ARCH_arm64)
#define FUNC_G_REG(r) (r->regs[28])
#endif

/* Why a latency hit was not timed (LatencyLost in record.go). */
enum lat_lost {
	LAT_LOST_DEPTH = 0,	/* a start deeper than TRACE_LAT_MAX_DEPTH */
	LAT_LOST_NO_START = 1,	/* an end on an empty stack */
	LAT_LOST_FULL = 2,	/* no room for the thread's stack or key */
	LAT_LOST_ABANDONED = 3,	/* a start whose end never came: a later end
				 * closed a start below it */
	LAT_NUM_LOST = 4,
};

/* The arguments identifying a START and its END (USDT probes only): bits
 * 0-3 the first's index + 1, 4-7 the second's (0: none). Set before
 * load (SetLatencyMatch in latency.go). */
volatile const __u32 probekit_trace_lat_match = 0;
#define TRACE_LAT_MATCH_N 2

struct lat_frame {
	__u64 ns;	/* bpf_ktime_get_ns at the start */
	__u32 probe;	/* the start's probe index */
	__u32 skip;	/* the filter dropped the start, or its key is missing */
	__s64 ident[TRACE_LAT_MATCH_N];	/* the start's identity arguments */
};

struct lat_stack {
	__u32 depth;	/* open starts, those past TRACE_LAT_MAX_DEPTH included */
	__u32 pad;
	struct lat_frame frames[TRACE_LAT_MAX_DEPTH];
};

/* Whose stack: a thread (id) or a goroutine (its g pointer) of process
 * tgid. */
struct lat_owner {
	__u64 id;
	__u32 tgid;
	__u32 pad;
};

/* A latency hit: whose stack, and its identity arguments (0 where none
 * or unreadable). */
struct lat_hit {
	struct lat_owner o;
	__s64 ident[TRACE_LAT_MATCH_N];
};

/* Threads' (and goroutines') stacks, by owner. One entry here: SetMode(ModeLatency)
 * sizes it (LatencyThreads in record.go), so that the other modes, which
 * reference it in code the verifier drops, do not allocate it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct lat_owner);
	__type(value, struct lat_stack);
} lat_stacks SEC(".maps");

struct lat_key_id {
	__u64 id;
	__u32 tgid;
	__u32 depth;
};

/* With keys: the key of each open frame, filled at its start. Sized by
 * LoadSpec when the mode is ModeLatency and keys are set. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct lat_key_id);
	__type(value, struct agg_key);
} lat_keys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LAT_NUM_LOST);
	__type(key, __u32);
	__type(value, __u64);
} lat_lost SEC(".maps");

/* A new thread's stack (larger than the BPF stack: a map value) and a
 * new frame's key. */
static const struct lat_stack lat_empty_stack;
static const struct agg_key lat_empty_key;

static __always_inline void lat_lose_n(__u32 why, __u64 count)
{
	__u64 *n = bpf_map_lookup_elem(&lat_lost, &why);

	if (n)
		*n += count;	/* per CPU, and a CPU runs one thread at a time */
}

static __always_inline void lat_lose(__u32 why)
{
	lat_lose_n(why, 1);
}

/* Adds one to key's entry of map, creating it; returns 0 when the map
 * is full. */
static __always_inline int lat_bump(void *map, void *key)
{
	__u64 one = 1, *n = bpf_map_lookup_elem(map, key);

	if (n) {
		__sync_fetch_and_add(n, 1);
		return 1;
	}
	/* A program on another CPU, or one that preempted this one, may
	 * have added the key since the lookup: NOEXIST fails then, and the
	 * lookup finds its entry. */
	if (!bpf_map_update_elem(map, key, &one, BPF_NOEXIST))
		return 1;
	n = bpf_map_lookup_elem(map, key);
	if (!n)
		return 0;
	__sync_fetch_and_add(n, 1);
	return 1;
}

static __noinline int lat_start(struct pt_regs *ctx, int func, __u64 cookie, __u32 probe, struct lat_hit *h)
{
	struct lat_owner *o = &h->o;
	struct lat_stack *s = bpf_map_lookup_elem(&lat_stacks, o);
	struct lat_key_id kid = {.id = o->id, .tgid = o->tgid};
	struct lat_frame *f;
	struct agg_key *k;
	__u32 d;

	if (!s) {
		bpf_map_update_elem(&lat_stacks, o, &lat_empty_stack, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&lat_stacks, o);
		if (!s) {
			lat_lose(LAT_LOST_FULL);
			return 0;
		}
	}
	d = s->depth++;
	if (d >= TRACE_LAT_MAX_DEPTH) {
		lat_lose(LAT_LOST_DEPTH);
		return 0;
	}
	f = &s->frames[d & TRACE_LAT_DEPTH_MASK];
	f->probe = probe;
	f->ident[0] = h->ident[0];
	f->ident[1] = h->ident[1];
	f->skip = probekit_trace_nterms && !filter_pass(ctx, func, cookie);
	if (!f->skip && probekit_trace_key_spec) {
		kid.depth = d;
		/* Zeroed: fill_key sets only its parts' fields. */
		bpf_map_update_elem(&lat_keys, &kid, &lat_empty_key, BPF_ANY);
		k = bpf_map_lookup_elem(&lat_keys, &kid);
		if (!k) {
			lat_lose(LAT_LOST_FULL);
			f->skip = 1;
		} else if (!fill_key(ctx, func, cookie, probe, k)) {
			count_lost();
			f->skip = 1;
		}
	}
	f->ns = bpf_ktime_get_ns();
	return 0;
}

static __noinline int lat_end(struct lat_hit *h)
{
	__u64 now = bpf_ktime_get_ns();
	struct lat_owner *o = &h->o;
	struct lat_stack *s = bpf_map_lookup_elem(&lat_stacks, o);
	struct lat_key_id kid = {.id = o->id, .tgid = o->tgid};
	struct hist_key hk;
	struct agg_key k, *sk;
	struct lat_frame *f = NULL;
	__u32 top, d = 0;

	if (!s || s->depth == 0) {
		lat_lose(LAT_LOST_NO_START);
		return 0;
	}
	top = s->depth;
	if (top > TRACE_LAT_MAX_DEPTH) {
		/* The latest start was counted in LAT_LOST_DEPTH, and kept
		 * nothing to match. */
		s->depth--;
		return 0;
	}
	/* The latest frame of the end's identity. */
	for (__u32 j = 0; j < TRACE_LAT_MAX_DEPTH; j++) {
		struct lat_frame *g;

		if (j >= top)
			break;
		d = top - 1 - j;
		g = &s->frames[d & TRACE_LAT_DEPTH_MASK];
		if (g->ident[0] == h->ident[0] && g->ident[1] == h->ident[1]) {
			f = g;
			break;
		}
	}
	if (!f) {
		lat_lose(LAT_LOST_NO_START);
		return 0;
	}
	if (top - 1 > d)
		lat_lose_n(LAT_LOST_ABANDONED, top - 1 - d);
	s->depth = d;
	if (f->skip)
		return 0;
	now -= f->ns;
	if (!probekit_trace_key_spec) {
		hk.probe = f->probe;
		hk.bucket = hist_bucket(now);
		if (!lat_bump(&hist, &hk))
			count_lost();
		return 0;
	}
	kid.depth = d;
	sk = bpf_map_lookup_elem(&lat_keys, &kid);
	if (!sk) {
		lat_lose(LAT_LOST_FULL);
		return 0;
	}
	__builtin_memcpy(&k, sk, sizeof(k));
	k.bucket = hist_bucket(now);
	if (!lat_bump(&keyed, &k))
		key_full();
	return 0;
}

/* A hit in TRACE_LATENCY. cookie: a function probe's BPF cookie (func),
 * unused for a USDT location, whose cookie is in its spec. */
static __noinline __u64 read_g_reg(struct pt_regs *ctx)
{
	const func_regs_t *r = (const func_regs_t *)ctx;

	return FUNC_G_REG(r);
}

/* Reads a USDT hit's identity arguments into h (see
 * probekit_trace_lat_match). */
static __always_inline void lat_ident(struct pt_regs *ctx, struct lat_hit *h)
{
#pragma unroll
	for (int i = 0; i < TRACE_LAT_MATCH_N; i++) {
		__u32 n = (probekit_trace_lat_match >> (4 * i)) & 0xf;
		__s64 v = 0;

		if (n && hit_val(ctx, 0, 0, n - 1, &v))
			h->ident[i] = v;
	}
}

static __always_inline int latency_hit(struct pt_regs *ctx, int func, __u64 cookie)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct lat_hit h = {.o = {.id = (__u32)id, .tgid = id >> 32}};
	struct __bpf_usdt_spec *spec;

	if (!func) {
		spec = __bpf_usdt_spec(ctx);
		if (!spec)
			return 0;
		if (probekit_trace_lat_match)
			lat_ident(ctx, &h);
		if (spec->usdt_cookie & TRACE_LAT_END)
			return lat_end(&h);
		return lat_start(ctx, 0, 0, (__u32)spec->usdt_cookie, &h);
	}
	if (cookie & TRACE_LAT_GOROUTINE)
		h.o.id = read_g_reg(ctx);
	if (cookie & TRACE_LAT_END)
		return lat_end(&h);
	return lat_start(ctx, 1, cookie, (__u32)cookie, &h);
}

/* ---- End of latency. ---- */

/* Sets the hit's context in e: the time and the command name. */
static __always_inline void add_context(struct event *e)
{
	e->time_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

/* TRACE_STACK_COPY: appends the stack copy to the record of off bytes
 * in e (TRACE_RECORD_MAX bytes) and returns the record's length; sets
 * TRACE_HAS_COPY. A stack whose first page cannot be read adds
 * nothing. */
static __noinline __u32 add_copy(struct pt_regs *ctx, struct event *e, __u32 off)
{
	struct probekit_stack_copy *c;
	__u32 size;

	/* Never true (off <= TRACE_EVENT_MAX): tells the verifier the copy
	 * stays in e. */
	if (off > TRACE_EVENT_MAX)
		return off;
	c = (struct probekit_stack_copy *)((char *)e + off);
	if (probekit_copy_stack_pages(ctx, c, probekit_trace_copy_pages) < 0)
		return off;
	size = c->size;
	if (size > PROBEKIT_STACK_COPY_SIZE)
		size = PROBEKIT_STACK_COPY_SIZE;
	e->errors |= TRACE_HAS_COPY;
	return off + sizeof(*c) - PROBEKIT_STACK_COPY_SIZE + size;
}

/* Sends one record, built by fill_func (func) or fill_usdt. */
static __always_inline int submit(struct pt_regs *ctx, int func)
{
	__u32 key = 0, size;
	struct scratch *s = bpf_map_lookup_elem(&scratch, &key);
	struct event *e;
	__u64 flags;

	if (!s)
		return 0;
	/* Atomic, so that of two programs racing for buf on this CPU at most
	 * one reads 1 (each adds before it reads). */
	__sync_fetch_and_add(&s->users, 1);
	if (*(volatile __u64 *)&s->users == 1) {
		e = (struct event *)s->buf;
		size = func ? fill_func(ctx, e) : fill_usdt(ctx, e);
		add_context(e);
		if (size > TRACE_EVENT_MAX)
			size = TRACE_EVENT_MAX;
		if (probekit_trace_stack == TRACE_STACK_COPY)
			size = add_copy(ctx, e, size);
		if (size > TRACE_RECORD_MAX)
			size = TRACE_RECORD_MAX;
		/* The wakeup flags once the record is built, never live across
		 * the fill: the verifier walks the fill once per value they
		 * may have, and Linux 6.1's did not prune those walks (with
		 * the whole-stack walk and faulting strings, the sleepable
		 * function program went past 1,000,000 instructions). */
		flags = wakeup_flags(s);
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
	if (func)
		fill_func(ctx, e);
	else
		fill_usdt(ctx, e);
	add_context(e);
	bpf_ringbuf_submit(e, wakeup_flags(s));
	return 0;
}

SEC("usdt")
int trace_usdt(struct pt_regs *ctx)
{
	if (!trace_armed())
		return 0;
	/* Before the filter: a latency's end is never filtered, its start
	 * is (lat_start). */
	if (probekit_trace_mode == TRACE_LATENCY)
		return latency_hit(ctx, 0, 0);
	if (probekit_trace_nterms && !probekit_trace_usdt_filtered && !filter_pass(ctx, 0, 0))
		return 0;
	if (probekit_trace_mode != TRACE_EVENTS)
		return aggregate(ctx, 0, 0);
	return submit(ctx, 0);
}

/* Attached as a uprobe (entry or return site) or a uretprobe. */
SEC("uprobe")
int trace_func(struct pt_regs *ctx)
{
	__u64 cookie;

	if (!trace_armed())
		return 0;
	cookie = func_cookie(ctx);
	/* Without cookies: a site not in func_ips (yet, or any more). */
	if (!cookie)
		return 0;
	if (probekit_trace_mode == TRACE_LATENCY)
		return latency_hit(ctx, 1, cookie);
	if (probekit_trace_nterms && !probekit_trace_func_filtered && !filter_pass(ctx, 1, cookie))
		return 0;
	if (probekit_trace_mode != TRACE_EVENTS)
		return aggregate(ctx, 1, cookie);
	return submit(ctx, 1);
}

/* The interpreter walk, then the trace program (see trace_interp_frames). */
SEC("usdt")
int trace_usdt_interp(struct pt_regs *ctx)
{
	trace_interp_frames();
	bpf_tail_call(ctx, &trace_progs, 0);
	return 0;
}

SEC("uprobe")
int trace_func_interp(struct pt_regs *ctx)
{
	trace_interp_frames();
	bpf_tail_call(ctx, &trace_progs, 1);
	return 0;
}
