//go:build ignore

/* nodefs.c: the BPF side of examples/node-fs.
 *
 * Two programs for every traced libuv function uv_fs_X(loop, req, ...):
 *
 *   on_entry   a uprobe at the function's first instruction: copies the
 *              arguments after loop and req into a per-thread slot;
 *   on_return  a uretprobe: adds the return value and the time taken and
 *              sends the slot to user space through a ring buffer.
 *
 * One entry program serves every function: the Go side passes, in the
 * attach cookie of each, which arguments are strings and where the
 * callback is, so the layouts live in one table in main.go. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

/* Room for one path. Longer paths are cut (still NUL-ended). */
#define PATH_LEN 256
/* uv_buf_t entries summed for read and write: Node passes one buffer to
 * uv_fs_read and uv_fs_write, fs.writev a few more. */
#define MAX_BUFS 8
/* Threads in a uv_fs_* call at once: the event loop and libuv's worker
 * pool make a handful per process. */
#define MAX_THREADS 4096

/* The attach cookie (set by Go, see cookieOf in main.go). */
#define COOKIE_CB_ARG(c)	((c) & 0xff)		/* 1-based index of the uv_fs_cb argument */
#define COOKIE_STR3		(1ULL << 8)		/* argument 3 is a path */
#define COOKIE_STR4		(1ULL << 9)		/* argument 4 is a path */
#define COOKIE_BUFS4		(1ULL << 10)		/* argument 4 is uv_buf_t[argument 5] */
#define COOKIE_FUNC(c)		((__u16)((c) >> 32))	/* index into main.go's table */

/* One call. Keep in sync with the Go side (bpf2go generates nodefsEvent
 * from this struct). */
struct event {
	__u64 start_ns;
	__u64 latency_ns;
	__s64 ret;		/* the int uv_fs_X returned */
	__u64 args[4];		/* arguments 3 to 6, as the registers held them */
	__u64 bytes;		/* COOKIE_BUFS4: the sum of the buffers' lengths */
	__u32 pid;		/* thread group id, in the initial PID namespace */
	__u32 tid;
	__u16 func;		/* COOKIE_FUNC */
	__u8 async;		/* a callback was given: ret only says queued or not */
	__u8 pad;
	unsigned char path[PATH_LEN];	/* COOKIE_STR3 */
	unsigned char path2[PATH_LEN];	/* COOKIE_STR4 */
};

struct uv_buf {
	__u64 base;
	__u64 len;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
	__type(value, struct event); /* for bpf2go's -type event */
} events SEC(".maps");

/* Events that did not fit in the ring buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* tid -> the call it is in. uv_fs_* functions do not call each other, so
 * one slot per thread is enough; LRU forgets a thread killed inside one. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct event);
} calls SEC(".maps");

/* An event is larger than the 512-byte BPF stack: it is built here. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event);
} scratch SEC(".maps");

/* ARGS_3_TO_6 fills a[0..3] with arguments 3 to 6 of a function at its
 * first instruction, by the C calling convention of the target; ARG7 is
 * the seventh. Each register is a fixed field: the verifier refuses a
 * context access at a computed offset. */
#if defined(__TARGET_ARCH_x86)
/* System V AMD64: rdi, rsi, rdx, rcx, r8, r9, then the stack, where the
 * 7th argument is the first slot above the return address. */
#define ARGS_3_TO_6(ctx, a) do { \
	(a)[0] = (ctx)->rdx; (a)[1] = (ctx)->rcx; (a)[2] = (ctx)->r8; (a)[3] = (ctx)->r9; \
} while (0)
static __always_inline __u64 arg7(struct pt_regs *ctx)
{
	__u64 v = 0;

	bpf_probe_read_user(&v, sizeof(v), (void *)(ctx->rsp + 8));
	return v;
}
#define RETURN_VALUE(ctx) ((ctx)->rax)
#elif defined(__TARGET_ARCH_arm64)
/* AAPCS64: eight arguments in x0-x7, the result in x0. */
#define REGS(ctx) ((struct user_pt_regs *)(ctx))
#define ARGS_3_TO_6(ctx, a) do { \
	(a)[0] = REGS(ctx)->regs[2]; (a)[1] = REGS(ctx)->regs[3]; \
	(a)[2] = REGS(ctx)->regs[4]; (a)[3] = REGS(ctx)->regs[5]; \
} while (0)
static __always_inline __u64 arg7(struct pt_regs *ctx)
{
	return REGS(ctx)->regs[6];
}
#define RETURN_VALUE(ctx) (REGS(ctx)->regs[0])
#else
#error "nodefs.c: build with bpf2go -target amd64 or arm64"
#endif

SEC("uprobe")
int on_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, zero = 0;
	struct event *e = bpf_map_lookup_elem(&scratch, &zero);
	int cb = COOKIE_CB_ARG(cookie);

	if (!e)
		return 0;
	e->start_ns = bpf_ktime_get_ns();
	e->latency_ns = 0;
	e->ret = 0;
	e->pid = id >> 32;
	e->tid = tid;
	e->func = COOKIE_FUNC(cookie);
	ARGS_3_TO_6(ctx, e->args);
	/* The callback argument: NULL makes the call synchronous. */
	if (cb >= 3 && cb <= 6)
		e->async = e->args[cb - 3] != 0;
	else
		e->async = cb == 7 && arg7(ctx) != 0;
	e->bytes = 0;
	e->path[0] = 0;
	e->path2[0] = 0;
	if ((cookie & COOKIE_STR3) && bpf_probe_read_user_str(e->path, sizeof(e->path), (void *)e->args[0]) < 0)
		e->path[0] = 0;
	if ((cookie & COOKIE_STR4) && bpf_probe_read_user_str(e->path2, sizeof(e->path2), (void *)e->args[1]) < 0)
		e->path2[0] = 0;
	if (cookie & COOKIE_BUFS4) {
		struct uv_buf b;
		__u32 n = (__u32)e->args[2];

		for (int i = 0; i < MAX_BUFS; i++) {
			if (i >= n)
				break;
			if (bpf_probe_read_user(&b, sizeof(b), (void *)(e->args[1] + i * sizeof(b))) < 0)
				break;
			e->bytes += b.len;
		}
	}
	bpf_map_update_elem(&calls, &tid, e, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int on_return(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct event *e = bpf_map_lookup_elem(&calls, &tid);

	if (!e)
		return 0; /* entered before the probes were attached */
	e->ret = (__s32)RETURN_VALUE(ctx); /* every uv_fs_* returns int */
	e->latency_ns = bpf_ktime_get_ns() - e->start_ns;
	if (bpf_ringbuf_output(&events, e, sizeof(*e), 0) < 0) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &zero);

		if (n)
			(*n)++; /* per-CPU: no other writer */
	}
	bpf_map_delete_elem(&calls, &tid);
	return 0;
}
