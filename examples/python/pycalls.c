//go:build ignore

/* pycalls.c: the BPF side of examples/python.
 *
 * Two programs, one per CPython probe:
 *
 *   python:function__entry(const char *filename, const char *funcname, int lineno)
 *   python:function__return(const char *filename, const char *funcname, int lineno)
 *
 * Each copies the two strings out of the interpreter into a ring buffer
 * event. Each thread's stack of open calls is kept here, in BPF maps, not
 * in Go: a hit that finds the ring buffer full loses its printed line but
 * not its place in the stack, so the depths and latencies of the lines
 * that do get through stay right, and returns that match no entry are
 * dropped before they take ring buffer space. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include "usdt.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* String room in an event. Longer names are cut (and still NUL-ended):
 * 128 bytes hold the paths of the standard library's modules, 64 any
 * function name one would read in a trace. */
#define FILENAME_LEN 128
#define FUNCNAME_LEN 64

/* Threads followed at once; LRU maps forget the threads that exit with
 * calls still open (a killed process never returns from them). */
#define MAX_THREADS 16384
/* Open calls remembered at once, over every thread. */
#define MAX_OPEN_CALLS (16 * MAX_THREADS)

enum call_kind {
	CALL_ENTRY = 0,
	CALL_RETURN = 1,
};

/* One entry or return. Keep in sync with the Go side (bpf2go generates
 * pycallsEvent from this struct). */
struct event {
	/* Return only: nanoseconds since the matching entry. */
	__u64 latency_ns;
	__u32 pid;	/* thread group id, in the initial PID namespace */
	__u32 tid;
	/* Calls of this thread open around this one: 0 for the outermost
	 * call seen. An entry and its return have the same depth. */
	__u32 depth;
	__s32 lineno;
	__u8 kind;		/* enum call_kind */
	__u8 entry_seen;	/* return only: always 1 (unmatched returns are dropped) */
	unsigned char filename[FILENAME_LEN];
	unsigned char funcname[FUNCNAME_LEN];
};

/* 8 MiB: about 36,000 events between two reads by Go. Python makes
 * millions of calls a second in a tight loop; what does not fit is
 * counted in lost, and the tracer says how many. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
	__type(value, struct event); /* for bpf2go's -type event */
} events SEC(".maps");

/* Events that did not fit in the ring buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* tid -> number of open calls (the depth of the next entry). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, __u32);
} depths SEC(".maps");

/* An open call: when it began, and the code it runs, as the addresses of
 * the filename and funcname strings (the UTF-8 buffers of the code
 * object's co_filename and co_name, which live as long as the code). */
struct open_call {
	__u64 start_ns;
	__u64 filename;
	__u64 funcname;
};

/* (tid, depth) -> the call open at that depth. A thread runs one Python
 * call stack, so this pair names exactly one call. */
struct call_key {
	__u32 tid;
	__u32 depth;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_OPEN_CALLS);
	__type(key, struct call_key);
	__type(value, struct open_call);
} starts SEC(".maps");

/* CPython 3.11 fires function__return whether or not tracing is on, but
 * function__entry only while a trace or profile function is set: so the
 * interpreter's start-up code and the profile function itself (which runs
 * with tracing suspended) make returns without entries. They are dropped
 * here, before they cost ring buffer space. */

static __always_inline void submit(__u8 kind, __u32 depth, __u64 latency_ns, __u8 entry_seen,
				   const char *filename, const char *funcname, int lineno)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &zero);

		if (n)
			(*n)++; /* per-CPU: no other writer */
		return;
	}
	e->latency_ns = latency_ns;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->depth = depth;
	e->lineno = lineno;
	e->kind = kind;
	e->entry_seen = entry_seen;
	/* The strings are the interpreter's UTF-8 buffers of the code
	 * object's co_filename and co_name. A failed read leaves "". */
	if (bpf_probe_read_user_str(e->filename, sizeof(e->filename), filename) < 0)
		e->filename[0] = 0;
	if (bpf_probe_read_user_str(e->funcname, sizeof(e->funcname), funcname) < 0)
		e->funcname[0] = 0;
	bpf_ringbuf_submit(e, 0);
}

SEC("usdt")
int BPF_USDT(on_entry, const char *filename, const char *funcname, int lineno)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 depth = 0, next;
	__u32 *open = bpf_map_lookup_elem(&depths, &tid);
	struct call_key key;
	struct open_call call = {
		.start_ns = bpf_ktime_get_ns(),
		.filename = (__u64)filename,
		.funcname = (__u64)funcname,
	};

	if (open)
		depth = *open;
	key.tid = tid;
	key.depth = depth;
	bpf_map_update_elem(&starts, &key, &call, BPF_ANY);
	next = depth + 1;
	bpf_map_update_elem(&depths, &tid, &next, BPF_ANY);

	submit(CALL_ENTRY, depth, 0, 0, filename, funcname, lineno);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_return, const char *filename, const char *funcname, int lineno)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *open = bpf_map_lookup_elem(&depths, &tid);
	__u32 depth = open ? *open : 0;
	struct call_key key = { .tid = tid, .depth = depth - 1 };
	struct open_call *call;
	__u64 latency;

	/* The innermost open call returns when the code matches. Otherwise
	 * this return belongs to a call nested in it (or to a thread with no
	 * open call) whose entry was not seen: it leaves the stack as is. */
	call = open && depth > 0 ? bpf_map_lookup_elem(&starts, &key) : NULL;
	if (!open || !call || call->filename != (__u64)filename || call->funcname != (__u64)funcname)
		return 0;
	latency = bpf_ktime_get_ns() - call->start_ns;
	bpf_map_delete_elem(&starts, &key);
	*open = key.depth; /* the map value, updated in place */
	submit(CALL_RETURN, key.depth, latency, 1, filename, funcname, lineno);
	return 0;
}
