/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* python.bpf.h: the CPython frames of the thread that hit a probe, read
 * inside BPF from the interpreter's own structures, for CPython 3.8 to
 * 3.14. Package interp/python (Go) finds the interpreter of a process,
 * its version and struct offsets (from its DWARF, its _Py_DebugOffsets or
 * a table of released versions) and fills probekit_py_procs, keyed by
 * the process's PID as the kernel's root namespace sees it (tgid); it
 * owns the map, and the program's collection takes it through
 * ebpf.CollectionOptions.MapReplacements (python.Tables.Replacements).
 *
 *   struct probekit_interp_stack *s = ...; (a map value or ring buffer
 *   record: it is 520 bytes, too large for the BPF stack)
 *   int n = probekit_py_user_stack(s);
 *
 * fills s->f[0 .. n) with the thread's Python frames, innermost first,
 * each as (code object address, instruction offset, flags) for
 * interp/python's Interpreter.Name to name in user space, and says in
 * s->stop why the walk ended (PROBEKIT_INTERP_STOP_*).
 *
 * The thread's PyThreadState is found whether the thread holds the GIL
 * or not: the thread pointer of the current task (x86-64
 * task_struct.thread.fsbase; the offset comes from vmlinux BTF through
 * the map value) is what pthread_self() returns on x86-64 glibc and
 * musl, and CPython stores pthread_self() in PyThreadState.thread_id
 * (PyThread_get_thread_ident). On arm64 the thread pointer is
 * thread.uw.tp_value, but glibc's pthread_self() is below it by
 * sizeof(struct pthread), so no state matches there (stop NO_THREAD). The walk checks
 * the GIL holder first where the runtime records it (3.8 to 3.11:
 * _PyRuntime.gilstate.tstate_current), then walks
 * _PyRuntime.interpreters.head, each interpreter's thread list and
 * `next`, at most PROBEKIT_PY_MAX_THREADS states in all.
 *
 * The frame chain by version (mode, set by Go):
 *   3.8-3.10  tstate->frame, PyFrameObject: f_back, f_code, f_lasti (an
 *             int: bytes in 3.8-3.9, code units in 3.10); each Python
 *             frame runs in its own _PyEval_EvalFrameDefault, so every
 *             frame ends a run (FlagRunEnd).
 *   3.11      tstate->cframe->current_frame, _PyInterpreterFrame:
 *             previous, f_code, prev_instr; is_entry ends a run.
 *   3.12      as 3.11, but is_entry is gone: each eval-loop call links
 *             a shim frame owned by the C stack (owner ==
 *             FRAME_OWNED_BY_CSTACK) into the chain; it is skipped, and
 *             the frame before it ends a run.
 *   3.13      tstate->current_frame; f_executable, instr_ptr.
 *   3.14      as 3.13, with f_executable a tagged _PyStackRef (low bits
 *             cleared); the shim's owner is named
 *             FRAME_OWNED_BY_INTERPRETER (same value).
 * The outermost frame of the chain always ends a run.
 *
 * f[i].instr is the byte offset, from the start of the code's bytecode,
 * of the instruction executing: 3.11-3.12 prev_instr -
 * &co_code_adaptive, 3.13+ instr_ptr - &co_code_adaptive, before 3.11
 * f_lasti in bytes (f_lasti * 2 in 3.10). An offset before the first
 * instruction (a frame not started) wraps to a large value; Name then
 * gives the function's first line.
 *
 * Each frame is one bpf_probe_read_user of its fields' bytes into a
 * per-CPU scratch buffer (probekit_py_scratch), each thread state
 * examined one more.
 *
 * Reads fail soft: a failed read of a frame records it with
 * PROBEKIT_INTERP_FLAG_BAD and ends the Python part (stop READ), never
 * the program. Loops are bounded (Linux 5.3), no helper newer than
 * bpf_probe_read_kernel/_user (5.5) is used.
 *
 * The function is static __noinline, a BPF-to-BPF call verified at its
 * call site: a global function taking a pointer to memory needs Linux
 * 5.12 ("bpf: Support pointers in global func args"), and 5.10 is
 * supported.
 *
 * Needs libbpf's <bpf/bpf_helpers.h> before it. Keep the structs in sync
 * with package interp (Raw) and interp/python (Tables). */
#ifndef __PROBEKIT_PYTHON_BPF_H__
#define __PROBEKIT_PYTHON_BPF_H__

/* Frames kept per stack: deeper Python stacks keep their innermost 32,
 * those nearest the hit (stop DEPTH). The ceiling bounds the record
 * (520 bytes) and the walk's time (one user read per frame). */
#define PROBEKIT_INTERP_MAX_FRAMES 32
/* Chain links followed per stack, shim frames (3.12+) included: two per
 * Python frame at worst, when every frame was called from C. */
#define PROBEKIT_PY_MAX_LINKS (2 * PROBEKIT_INTERP_MAX_FRAMES)
/* Thread states examined to find the current thread's: the GIL holder
 * first, then the interpreters' thread lists in order. A process with
 * more live Python threads finds those past the ceiling as "no thread
 * state". */
#define PROBEKIT_PY_MAX_THREADS 256

/* interp.FlagRunEnd, interp.FlagBad. */
#define PROBEKIT_INTERP_FLAG_RUN_END (1u << 0)
#define PROBEKIT_INTERP_FLAG_BAD (1u << 1)

/* Why a walk ended (probekit_interp_stack.stop; python.Stop). */
#define PROBEKIT_INTERP_STOP_END 1	 /* the outermost frame was read */
#define PROBEKIT_INTERP_STOP_DEPTH 2	 /* PROBEKIT_INTERP_MAX_FRAMES */
#define PROBEKIT_INTERP_STOP_READ 3	 /* a read failed (last frame FLAG_BAD) */
#define PROBEKIT_INTERP_STOP_NO_THREAD 4 /* no thread state is this thread's */
#define PROBEKIT_INTERP_STOP_NO_PROCESS 5 /* the process is not in the map */
#define PROBEKIT_INTERP_STOP_NO_FRAME 6	 /* the thread runs no Python code */

/* Chain modes (python.mode*). */
#define PROBEKIT_PY_MODE_FRAMEOBJ 1 /* 3.8-3.10 */
#define PROBEKIT_PY_MODE_ENTRY 2    /* 3.11: is_entry */
#define PROBEKIT_PY_MODE_SHIM 3	    /* 3.12+: shim frames owned by the C stack */

/* The first owner value of a frame that runs no code: 3.12-3.13's
 * FRAME_OWNED_BY_CSTACK (3) is the shim each eval-loop call links in;
 * 3.14 calls the same value FRAME_OWNED_BY_INTERPRETER; CPython's main
 * branch adds FRAME_OWNED_BY_THREAD_STATE (4), a sentinel base frame.
 * Frames owned by the thread (0), a generator (1) or a frame object (2)
 * run code. */
#define PROBEKIT_PY_OWNED_BY_CSTACK 3

struct probekit_interp_frame {
	__u64 code;  /* the code object's address */
	__u32 instr; /* byte offset of the instruction executing */
	__u32 flags; /* PROBEKIT_INTERP_FLAG_* */
};

struct probekit_interp_stack {
	__u32 n;    /* frames in f */
	__u32 stop; /* PROBEKIT_INTERP_STOP_* */
	struct probekit_interp_frame f[PROBEKIT_INTERP_MAX_FRAMES];
};

/* One process's interpreter: addresses are the process's, offsets are
 * bytes from the start of the struct named; -1 for a field the version
 * has not. */
struct probekit_py_proc {
	__u64 runtime;	      /* &_PyRuntime */
	__u32 version;	      /* major << 8 | minor */
	__u32 mode;	      /* PROBEKIT_PY_MODE_* */
	__s32 task_tp;	      /* task_struct: the thread pointer (BTF) */
	__s32 rt_interp_head; /* _PyRuntime.interpreters.head */
	__s32 rt_gil_holder;  /* _PyRuntime.gilstate.tstate_current, -1 */
	__s32 is_next;	      /* PyInterpreterState.next */
	__s32 is_threads;     /* PyInterpreterState.threads.head (tstate_head) */
	__s32 ts_next;	      /* PyThreadState.next */
	__s32 ts_thread_id;   /* PyThreadState.thread_id */
	__s32 ts_frame;	      /* frame / cframe / current_frame */
	__s32 cf_current;     /* _PyCFrame.current_frame, -1 */
	__s32 fr_code;	      /* f_code / f_executable */
	__s32 fr_previous;    /* previous / f_back */
	__s32 fr_instr;	      /* prev_instr / instr_ptr / f_lasti */
	__s32 fr_entry;	      /* is_entry (3.11) / owner (3.12+), -1 */
	__s32 co_code;	      /* PyCodeObject.co_code_adaptive (3.11+) */
	__u32 lasti_unit;     /* bytes per f_lasti unit (3.8-3.10) */
	__u32 code_tag;	      /* low bits of f_executable to clear (3.14) */
	__u32 fr_read;	      /* bytes of a frame read at once: its fields' end */
	__u32 ts_read;	      /* bytes of a thread state read at once */
};

/* The scratch buffer a frame or a thread state is read into with one
 * bpf_probe_read_user, its fields then taken from it: one read per frame
 * rather than one per field (each read costs a fixed setup). 256 bytes
 * hold 3.8's PyThreadState up to thread_id (184) and every version's
 * frame fields (3.13's owner ends at 71). */
#define PROBEKIT_PY_READ 256

struct probekit_py_scratch {
	__u8 b[PROBEKIT_PY_READ];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probekit_py_scratch);
} probekit_py_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* python.Tables sizes it */
	__type(key, __u32);	/* pid (tgid) */
	__type(value, struct probekit_py_proc);
} probekit_py_procs SEC(".maps");

/* Reads len bytes (Go bounds them by PROBEKIT_PY_READ) at addr into b. */
static __always_inline int __probekit_py_read(__u8 *b, __u32 len, __u64 addr)
{
	if (len < 8 || len > PROBEKIT_PY_READ)
		return -1;
	return bpf_probe_read_user(b, len, (const void *)addr);
}

/* The field at off of what b holds (0 out of it). */
static __always_inline __u64 __probekit_py_u64(const __u8 *b, __s32 off)
{
	__u32 o = (__u32)off;

	if (o > PROBEKIT_PY_READ - 8)
		return 0;
	return *(const __u64 *)(b + o);
}

static __always_inline __u8 __probekit_py_u8(const __u8 *b, __s32 off)
{
	__u32 o = (__u32)off;

	if (o > PROBEKIT_PY_READ - 1)
		return 0;
	return b[o];
}

/* The current thread's PyThreadState, or 0. */
static __always_inline __u64 __probekit_py_tstate(const struct probekit_py_proc *p, __u8 *b)
{
	__u64 tp = 0, ts = 0, is = 0, id = 0;
	__u64 task = bpf_get_current_task();

	if (p->task_tp <= 0 || bpf_probe_read_kernel(&tp, 8, (const void *)(task + p->task_tp)) || !tp)
		return 0;
	if (p->rt_gil_holder >= 0 &&
	    !bpf_probe_read_user(&ts, 8, (const void *)(p->runtime + p->rt_gil_holder)) && ts &&
	    !bpf_probe_read_user(&id, 8, (const void *)(ts + p->ts_thread_id)) && id == tp)
		return ts;
	if (bpf_probe_read_user(&is, 8, (const void *)(p->runtime + p->rt_interp_head)) || !is)
		return 0;
	if (bpf_probe_read_user(&ts, 8, (const void *)(is + p->is_threads)))
		return 0;
	for (int i = 0; i < PROBEKIT_PY_MAX_THREADS; i++) {
		if (!ts) {
			/* This interpreter's list ended: the next one's. */
			if (bpf_probe_read_user(&is, 8, (const void *)(is + p->is_next)) || !is ||
			    bpf_probe_read_user(&ts, 8, (const void *)(is + p->is_threads)))
				return 0;
			continue;
		}
		if (__probekit_py_read(b, p->ts_read, ts))
			return 0;
		if (__probekit_py_u64(b, p->ts_thread_id) == tp)
			return ts;
		ts = __probekit_py_u64(b, p->ts_next);
	}
	return 0;
}

/* One link of the chain at fr: records its frame in s (or skips a shim)
 * and returns the next frame out, 0 at the end or after a failed read. The
 * frame count lives in s->n, memory the verifier does not track, so that
 * the states of the loop's iterations do not multiply with it. */
static __always_inline __u64 __probekit_py_link(const struct probekit_py_proc *p,
						struct probekit_interp_stack *s, __u8 *b, __u64 fr)
{
	__u64 code = 0, prev, ip;
	__u8 entry = 0;
	__u32 n = s->n, flags = 0;
	struct probekit_interp_frame *f;

	if (n >= PROBEKIT_INTERP_MAX_FRAMES) {
		s->stop = PROBEKIT_INTERP_STOP_DEPTH;
		return 0;
	}
	if (__probekit_py_read(b, p->fr_read, fr))
		goto bad;
	prev = __probekit_py_u64(b, p->fr_previous);
	if (p->fr_entry >= 0)
		entry = __probekit_py_u8(b, p->fr_entry);
	if (p->mode == PROBEKIT_PY_MODE_SHIM && entry >= PROBEKIT_PY_OWNED_BY_CSTACK) {
		/* A shim: the frame before it ends its run. */
		if (n > 0)
			s->f[(n - 1) & (PROBEKIT_INTERP_MAX_FRAMES - 1)].flags |= PROBEKIT_INTERP_FLAG_RUN_END;
		return prev;
	}
	code = __probekit_py_u64(b, p->fr_code) & ~(__u64)p->code_tag;
	ip = __probekit_py_u64(b, p->fr_instr);
	if (p->mode == PROBEKIT_PY_MODE_FRAMEOBJ) {
		/* f_lasti, an int: the low half on a little-endian target. */
		ip = (__u64)(__s64)(__s32)ip * p->lasti_unit;
		flags = PROBEKIT_INTERP_FLAG_RUN_END;
	} else {
		ip -= code + p->co_code;
		if (p->mode == PROBEKIT_PY_MODE_ENTRY && entry)
			flags = PROBEKIT_INTERP_FLAG_RUN_END;
	}
	if (!prev)
		flags |= PROBEKIT_INTERP_FLAG_RUN_END; /* the outermost frame */
	f = &s->f[n & (PROBEKIT_INTERP_MAX_FRAMES - 1)];
	f->code = code;
	f->instr = (__u32)ip;
	f->flags = flags;
	s->n = n + 1;
	return prev;
bad:
	f = &s->f[n & (PROBEKIT_INTERP_MAX_FRAMES - 1)];
	f->code = 0;
	f->instr = 0;
	f->flags = PROBEKIT_INTERP_FLAG_BAD | PROBEKIT_INTERP_FLAG_RUN_END;
	s->n = n + 1;
	s->stop = PROBEKIT_INTERP_STOP_READ;
	return 0;
}

static __noinline int probekit_py_user_stack(struct probekit_interp_stack *s)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	const struct probekit_py_proc *p;
	struct probekit_py_scratch *sc;
	__u64 ts, fr = 0;
	__u32 zero = 0;

	if (!s)
		return 0;
	s->n = 0;
	s->stop = PROBEKIT_INTERP_STOP_NO_PROCESS;
	p = bpf_map_lookup_elem(&probekit_py_procs, &pid);
	sc = bpf_map_lookup_elem(&probekit_py_scratch, &zero);
	if (!p || !sc)
		return 0;
	ts = __probekit_py_tstate(p, sc->b);
	if (!ts) {
		s->stop = PROBEKIT_INTERP_STOP_NO_THREAD;
		return 0;
	}
	s->stop = PROBEKIT_INTERP_STOP_NO_FRAME;
	if (bpf_probe_read_user(&fr, 8, (const void *)(ts + p->ts_frame)))
		return 0;
	if (p->cf_current >= 0 && fr && bpf_probe_read_user(&fr, 8, (const void *)(fr + p->cf_current)))
		return 0;
	if (!fr)
		return 0;
	s->stop = PROBEKIT_INTERP_STOP_END;
	for (int i = 0; i < PROBEKIT_PY_MAX_LINKS && fr; i++)
		fr = __probekit_py_link(p, s, sc->b, fr);
	if (fr && s->stop == PROBEKIT_INTERP_STOP_END)
		s->stop = PROBEKIT_INTERP_STOP_DEPTH;
	return s->n;
}

#endif /* __PROBEKIT_PYTHON_BPF_H__ */
