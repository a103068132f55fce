//go:build ignore

/* watch.c: tells package follow when a process execs, exits, or loads
 * objects (ld.so's _dl_debug_state, which glibc's dynamic linker calls
 * after each change of the link map: startup, dlopen, dlclose; it is the
 * breakpoint debuggers use, see <link.h> struct r_debug). */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

enum watch_kind {
	WATCH_EXEC = 1,
	WATCH_EXIT = 2,
	WATCH_MAP = 3,
};

struct watch_event {
	__u32 pid;  /* tgid */
	__u32 kind; /* enum watch_kind */
};

/* Every process, or only those in followed. */
volatile const __u32 watch_all = 0;

/* Stop the thread at each link-map change (SIGSTOP, sent by the kernel:
 * si_code SI_KERNEL), so that its tracer attaches the objects it just
 * mapped before they run. Only for processes under ptrace (followed). */
volatile const __u32 stop_on_map = 0;

#define SIGSTOP 19

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} watch_events SEC(".maps");

/* The processes followed when watch_all is 0 (a process tree: the size
 * bounds the tree). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} followed SEC(".maps");

/* Events the ring had no room for: user space rescans when it grows. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} watch_lost SEC(".maps");

static __always_inline int send(__u32 kind, int leader_only)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, key = 0;
	struct watch_event *e;
	__u64 *lost;

	if (leader_only && (__u32)id != tgid)
		return 0;
	if (!watch_all && !bpf_map_lookup_elem(&followed, &tgid))
		return 0;
	e = bpf_ringbuf_reserve(&watch_events, sizeof(*e), 0);
	if (!e) {
		lost = bpf_map_lookup_elem(&watch_lost, &key);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return 0;
	}
	e->pid = tgid;
	e->kind = kind;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("raw_tracepoint/sched_process_exec")
int watch_exec(void *ctx)
{
	return send(WATCH_EXEC, 0);
}

SEC("raw_tracepoint/sched_process_exit")
int watch_exit(void *ctx)
{
	return send(WATCH_EXIT, 1);
}

SEC("uprobe")
int watch_map(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (stop_on_map && bpf_map_lookup_elem(&followed, &tgid)) {
		bpf_send_signal_thread(SIGSTOP);
		return 0;
	}
	return send(WATCH_MAP, 0);
}
