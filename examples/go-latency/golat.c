//go:build ignore

/* golat.c: the BPF side of examples/go-latency.
 *
 *   on_entry   a uprobe at the Go function's first instruction;
 *   on_return  a uprobe on each of its RET instructions (uprobe.Return on
 *              a Go binary), run just before the RET.
 *
 * An entry and its return are paired by goroutine and by the frame's
 * distance from the top of the goroutine's stack: the call key. Within one
 * goroutine that distance tells recursive calls apart, and it survives the
 * runtime moving the stack (copystack keeps every frame's distance from
 * stack.hi), where the stack pointer itself does not. At the first
 * instruction the stack pointer points at the return address the CALL
 * pushed; just before the RET the frame is gone and it points there
 * again, so both probes compute the same distance.
 *
 * Each return adds the call's latency to a log2 histogram. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* Calls open at once over all goroutines: a server's goroutines, times
 * the recursion depth of the function. LRU forgets calls that never
 * return (a panic unwinds past the RET). */
#define MAX_OPEN_CALLS 65536
/* Slot 0 counts latencies of 0, slot i > 0 those in [2^(i-1), 2^i). */
#define HIST_SLOTS 65

/* Offset of stack.hi in the runtime's g (runtime/runtime2.go): the stack
 * bounds (lo, hi) come first, and the compiler's prologues read
 * stackguard0 right after them, at 16 on 64-bit targets, so this layout
 * is part of the toolchain's contract. */
#define G_STACK_HI 8

enum counter {
	COUNT_RETURNS = 0,	/* every return: one per call */
	COUNT_MATCHED = 1,	/* returns whose entry was seen: the histogram's total */
	COUNT_ENTRIES = 2,	/* entry hits, restarts after a stack growth included */
	COUNT_RESTARTS = 3,	/* entries that found their call already open */
	COUNT_SUM = 4,		/* sum of the matched latencies, in ns */
	COUNTERS = 5,
};

struct call_key {
	__u64 g;	/* the goroutine's runtime.g */
	__u64 depth;	/* g.stack.hi - stack pointer */
};

struct open_call {
	__u64 start_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_OPEN_CALLS);
	__type(key, struct call_key);
	__type(value, struct open_call);
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HIST_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

#if defined(__TARGET_ARCH_x86)
/* Go's ABIInternal on amd64 keeps the current g in R14. */
#define GO_G(ctx) ((ctx)->r14)
#define SP(ctx) ((ctx)->rsp)
#elif defined(__TARGET_ARCH_arm64)
/* On arm64 it is R28. */
#define GO_G(ctx) (((struct user_pt_regs *)(ctx))->regs[28])
#define SP(ctx) (((struct user_pt_regs *)(ctx))->sp)
#else
#error "golat.c: build with bpf2go -target amd64 or arm64"
#endif

static __always_inline void count(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counts, &which);

	if (v)
		*v += n; /* per-CPU: no other writer */
}

/* call_key_of fills key for the frame about to run or return; false if
 * g cannot be read (not Go code). */
static __always_inline int call_key_of(struct pt_regs *ctx, struct call_key *key)
{
	__u64 hi;
	__u64 g = GO_G(ctx);

	if (!g || bpf_probe_read_user(&hi, sizeof(hi), (void *)(g + G_STACK_HI)) < 0)
		return 0;
	key->g = g;
	key->depth = hi - SP(ctx);
	return 1;
}

/* log2_slot returns the histogram slot of v: 0 for 0, else 1 + floor(log2(v)). */
static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 r = 0;

	if (!v)
		return 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r + 1;
}

SEC("uprobe")
int on_entry(struct pt_regs *ctx)
{
	struct call_key key = {};
	struct open_call call;

	if (!call_key_of(ctx, &key))
		return 0;
	count(COUNT_ENTRIES, 1);
	/* A call already open at this key is this call restarting from its
	 * first instruction: its prologue called runtime.morestack, which
	 * grew (copied) the stack or, with the same stack, let the
	 * scheduler preempt the goroutine. The first entry's time stands:
	 * the caller waited for that too. (A call that never returned, a
	 * panic having unwound it, would be taken for a restart of the next
	 * call at the same depth of the same goroutine.) */
	if (bpf_map_lookup_elem(&starts, &key)) {
		count(COUNT_RESTARTS, 1);
		return 0;
	}
	call.start_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&starts, &key, &call, BPF_NOEXIST);
	return 0;
}

SEC("uprobe")
int on_return(struct pt_regs *ctx)
{
	struct call_key key = {};
	struct open_call *open;
	__u64 delta;
	__u32 slot;

	if (!call_key_of(ctx, &key))
		return 0;
	count(COUNT_RETURNS, 1);
	open = bpf_map_lookup_elem(&starts, &key);
	if (!open)
		return 0; /* entered before the probes were attached */
	delta = bpf_ktime_get_ns() - open->start_ns;
	bpf_map_delete_elem(&starts, &key);
	slot = log2_slot(delta);
	if (slot < HIST_SLOTS) {
		__u64 *v = bpf_map_lookup_elem(&hist, &slot);

		if (v)
			*v += 1;
	}
	count(COUNT_MATCHED, 1);
	count(COUNT_SUM, delta);
	return 0;
}
