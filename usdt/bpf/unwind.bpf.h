/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* unwind.bpf.h: the user stack of the thread that hit a uprobe or a USDT
 * probe, unwound inside BPF from call-frame information, for x86-64 code
 * built with or without frame pointers. Package bpfunwind (Go)
 * builds the tables from each object's .eh_frame and fills the maps this
 * header declares; it owns them, and the program's collection takes them
 * through ebpf.CollectionOptions.MapReplacements (Tables.Replacements).
 *
 *   struct probekit_cfi_stack *s = probekit_cfi_user_stack(ctx, at_entry);
 *   if (s) ... s->pcs[0 .. s->n) ...
 *
 * walks the stack into this CPU's scratch record: pcs innermost first,
 * the instruction pointer, then one return address per caller (runtime
 * addresses, as stack.bpf.h's probekit_user_stack gives them), and why
 * the walk ended (s->stop, PROBEKIT_CFI_STOP_*). at_entry says the probe
 * is on a function's first instruction (uprobe:FUNC): it matters only
 * where the function's object has no CFI (Go code, JIT code), whose
 * first step then takes the return address at the stack pointer.
 *
 *   PROBEKIT_CFI_COUNT_MAPS(stacks, counts, 10240);
 *   probekit_cfi_count_user_stack(ctx, &stacks, &counts, at_entry, value);
 *
 * counts the hit, and adds value to a sum, under (pid, stack), with no
 * event per hit (bpfunwind.ReadCounts reads the maps back);
 * probekit_cfi_stack_id stores the stack alone and returns its id, for a
 * program with keys of its own.
 *
 * Per frame: the mapping holding the address (a binary search of the
 * process's executable mappings), the object's row (a binary search of
 * its sorted rows), then CFA = rsp or rbp + offset, the return address at
 * CFA - 8 and, where the row says so, the caller's rbp at CFA + n: one to
 * two bpf_probe_read_user calls. An address no row covers (an object
 * without CFI, JIT code, the vDSO, a gap between FDEs) is stepped by its
 * frame record (saved rbp at rbp, return address at rbp + 8). The walk
 * ends at an undefined return address (_start, thread start routines),
 * at a zero or unreadable one, where the stack pointer does not grow, at
 * a row it cannot compute (a CFA in another register), or at
 * PROBEKIT_CFI_MAX_FRAMES. A signal trampoline's row (glibc's
 * __restore_rt) takes the interrupted rip, rsp and rbp from the
 * sigcontext the kernel saved on the stack.
 *
 * The loop is bounded (Linux 5.3 verifies bounded loops), which every
 * supported kernel runs; the scratch record is a per-CPU array value:
 * a uprobe program is not re-entered on its CPU (trace_call_bpf skips a
 * program while bpf_prog_active is held there).
 *
 * Needs struct pt_regs (vmlinux.h, or <linux/ptrace.h>), libbpf's
 * <bpf/bpf_helpers.h> before it, and __TARGET_ARCH_x86; on other
 * architectures probekit_cfi_user_stack returns NULL. Keep the structs in
 * sync with package bpfunwind. */
#ifndef __PROBEKIT_UNWIND_BPF_H__
#define __PROBEKIT_UNWIND_BPF_H__

#ifndef PROBEKIT_CFI_MAX_FRAMES
#define PROBEKIT_CFI_MAX_FRAMES 127
#endif
/* Executable mappings per process (bpfunwind.MaxMappings). */
#define PROBEKIT_CFI_MAX_MAPPINGS 256
/* Binary search steps: enough for 2^24 rows of one object. */
#define PROBEKIT_CFI_ROW_STEPS 25

/* Row kinds (bpfunwind's kind*). */
#define PROBEKIT_CFI_RSP 0	 /* CFA = rsp + cfa_off */
#define PROBEKIT_CFI_RBP 1	 /* CFA = rbp + cfa_off */
#define PROBEKIT_CFI_PLT 2	 /* CFA = rsp + 8, + 8 if (rip & 15) >= cfa_off */
#define PROBEKIT_CFI_FP 3	 /* no CFI here: the frame record at rbp */
#define PROBEKIT_CFI_OUTERMOST 4 /* the return address is undefined */
#define PROBEKIT_CFI_UNSUPPORTED 5
#define PROBEKIT_CFI_SIGNAL 6	 /* a signal trampoline: the sigcontext at rsp + 40 */

/* Why a walk ended (probekit_cfi_stack.stop; bpfunwind.Stop). */
#define PROBEKIT_CFI_STOP_OUTERMOST 1	/* undefined or zero return address */
#define PROBEKIT_CFI_STOP_READ 2	/* a read of the stack failed */
#define PROBEKIT_CFI_STOP_UNSUPPORTED 3 /* a row it cannot compute */
#define PROBEKIT_CFI_STOP_NO_PROGRESS 4 /* the stack pointer did not grow */
#define PROBEKIT_CFI_STOP_DEPTH 5	/* PROBEKIT_CFI_MAX_FRAMES */

/* One row: from link-time address pc to the next row's. rbp_off is where
 * the caller's rbp is saved, in 8-byte units from the CFA; 0 leaves rbp
 * as it is. */
struct probekit_cfi_row {
	__u32 pc;
	__s16 cfa_off;
	__u8 kind;
	__s8 rbp_off;
};

/* An object's rows: probekit_cfi_rows[first .. first + count). */
struct probekit_cfi_object {
	__u32 first;
	__u32 count;
};

/* One executable mapping: object 0 has no rows (walked by frame
 * pointers); link-time address = runtime address - bias. */
struct probekit_cfi_mapping {
	__u64 start;
	__u64 end;
	__u64 bias;
	__u32 object;
	__u32 pad;
};

/* A process's executable mappings, sorted by start. */
struct probekit_cfi_process {
	__u32 n;
	__u32 pad;
	struct probekit_cfi_mapping m[PROBEKIT_CFI_MAX_MAPPINGS];
};

struct probekit_cfi_stack {
	__u32 n;    /* frames in pcs */
	__u32 stop; /* PROBEKIT_CFI_STOP_* */
	__u64 pcs[PROBEKIT_CFI_MAX_FRAMES];
	/* The walk's state: the frame's registers, the process. */
	__u64 pc, sp, bp;
	__u32 pid;
	__u32 at_entry;
	__u32 exact; /* pc is an interrupted instruction, not a return address */
	/* Steps taken by frame records (no row covered the frame), with
	 * PROBEKIT_CFI_FP_LAST set when the last step tried was one. */
	__u32 fp_frames;
};

#define PROBEKIT_CFI_FP_LAST (1u << 31)

/* Sizes are the Go side's: it creates the maps. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32); /* pid (tgid) */
	__type(value, struct probekit_cfi_process);
} probekit_cfi_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probekit_cfi_object);
} probekit_cfi_objects SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probekit_cfi_row);
} probekit_cfi_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probekit_cfi_stack);
} probekit_cfi_scratch SEC(".maps");

/* The mapping holding addr, or NULL. */
static __always_inline const struct probekit_cfi_mapping *
__probekit_cfi_mapping(const struct probekit_cfi_process *p, __u64 addr)
{
	__u32 lo = 0, hi = p->n;

	if (hi > PROBEKIT_CFI_MAX_MAPPINGS)
		hi = PROBEKIT_CFI_MAX_MAPPINGS;
	/* The last mapping starting at or below addr: 9 halvings of 256. */
	for (int k = 0; k < 9; k++) {
		if (lo >= hi)
			break;
		__u32 mid = (lo + hi) / 2;

		if (mid >= PROBEKIT_CFI_MAX_MAPPINGS)
			return 0;
		if (p->m[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || lo > PROBEKIT_CFI_MAX_MAPPINGS)
		return 0;
	const struct probekit_cfi_mapping *m = &p->m[lo - 1];

	return addr < m->end ? m : 0;
}

/* The row of link-time address rel in object o, or NULL. */
static __always_inline const struct probekit_cfi_row *
__probekit_cfi_row(const struct probekit_cfi_object *o, __u64 rel)
{
	__u32 lo = 0, hi = o->count, first = o->first;

	for (int k = 0; k < PROBEKIT_CFI_ROW_STEPS; k++) {
		if (lo >= hi)
			break;
		__u32 mid = lo + (hi - lo) / 2, idx = first + mid;
		const struct probekit_cfi_row *r = bpf_map_lookup_elem(&probekit_cfi_rows, &idx);

		if (!r)
			return 0;
		if (r->pc <= rel)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return 0;
	__u32 idx = first + lo - 1;

	return bpf_map_lookup_elem(&probekit_cfi_rows, &idx);
}

/* One step from the frame at *pc (frame i): the caller's pc, sp and bp;
 * returns 0, or a PROBEKIT_CFI_STOP_*. */
static __always_inline int __probekit_cfi_step(const struct probekit_cfi_process *p, __u32 i, int at_entry,
					       __u64 *pc, __u64 *sp, __u64 *bp, __u32 *exact, __u32 *fp_frames)
{
	/* A return address is looked up at the call: it may be the first
	 * byte of the next function. The first frame's address, and one a
	 * signal interrupted, are instructions themselves. */
	__u64 look = i && !*exact ? *pc - 1 : *pc;
	__u8 kind = PROBEKIT_CFI_FP;
	__s64 cfa_off = 0, rbp_off = 0;
	__u64 cfa, ra = 0, nbp = *bp;

	if (p) {
		/* Keeps clang from computing &p->m before the test, which the
		 * verifier refuses on a pointer that may be NULL. */
		asm volatile("" : "+r"(p));
		const struct probekit_cfi_mapping *m = __probekit_cfi_mapping(p, look);

		if (m && m->object) {
			__u32 id = m->object;
			__u64 rel = look - m->bias;
			const struct probekit_cfi_object *o = bpf_map_lookup_elem(&probekit_cfi_objects, &id);

			if (o && rel < (1ULL << 32)) {
				const struct probekit_cfi_row *r = __probekit_cfi_row(o, rel);

				if (r) {
					kind = r->kind;
					cfa_off = r->cfa_off;
					rbp_off = r->rbp_off;
				}
			}
		}
	}
	if (kind == PROBEKIT_CFI_FP)
		*fp_frames = (*fp_frames + 1) | PROBEKIT_CFI_FP_LAST;
	else
		*fp_frames &= ~PROBEKIT_CFI_FP_LAST;
	switch (kind) {
	case PROBEKIT_CFI_RSP:
		cfa = *sp + cfa_off;
		break;
	case PROBEKIT_CFI_RBP:
		cfa = *bp + cfa_off;
		break;
	case PROBEKIT_CFI_PLT:
		cfa = *sp + 8 + ((__s64)(*pc & 15) >= cfa_off ? 8 : 0);
		break;
	case PROBEKIT_CFI_FP:
		if (i == 0 && at_entry) {
			/* The call has just pushed the return address; rbp is
			 * still the caller's. */
			if (bpf_probe_read_user(&ra, 8, (const void *)*sp))
				return PROBEKIT_CFI_STOP_READ;
			cfa = *sp + 8;
			break;
		}
		/* A zero rbp ends the chain (the psABI's outermost frame;
		 * Go's goroutines start so). */
		if (!*bp)
			return PROBEKIT_CFI_STOP_OUTERMOST;
		if (bpf_probe_read_user(&nbp, 8, (const void *)*bp) ||
		    bpf_probe_read_user(&ra, 8, (const void *)(*bp + 8)))
			return PROBEKIT_CFI_STOP_READ;
		cfa = *bp + 16;
		break;
	case PROBEKIT_CFI_SIGNAL: {
		/* The handler returned into the trampoline with rsp at the
		 * ucontext of the kernel's rt_sigframe (arch/x86/include/
		 * asm/sigframe.h): uc_flags, uc_link and uc_stack (40 bytes),
		 * then uc_mcontext, a struct sigcontext (uapi asm/sigcontext.h)
		 * holding the interrupted rbp at +80, rsp at +120, rip at +128.
		 * The interrupted rsp need not be above the handler's (an
		 * alternate signal stack): no progress check. */
		__u64 sc = *sp + 40, nsp = 0;

		if (bpf_probe_read_user(&nbp, 8, (const void *)(sc + 80)) ||
		    bpf_probe_read_user(&nsp, 8, (const void *)(sc + 120)) ||
		    bpf_probe_read_user(&ra, 8, (const void *)(sc + 128)))
			return PROBEKIT_CFI_STOP_READ;
		if (!ra)
			return PROBEKIT_CFI_STOP_OUTERMOST;
		*pc = ra;
		*sp = nsp;
		*bp = nbp;
		*exact = 1;
		return 0;
	}
	case PROBEKIT_CFI_OUTERMOST:
		return PROBEKIT_CFI_STOP_OUTERMOST;
	default:
		return PROBEKIT_CFI_STOP_UNSUPPORTED;
	}
	if (kind != PROBEKIT_CFI_FP) {
		if (bpf_probe_read_user(&ra, 8, (const void *)(cfa - 8)))
			return PROBEKIT_CFI_STOP_READ;
		if (rbp_off && bpf_probe_read_user(&nbp, 8, (const void *)(cfa + rbp_off * 8)))
			return PROBEKIT_CFI_STOP_READ;
	}
	if (!ra)
		return PROBEKIT_CFI_STOP_OUTERMOST;
	if (cfa <= *sp)
		return PROBEKIT_CFI_STOP_NO_PROGRESS;
	*pc = ra;
	*sp = cfa;
	*bp = nbp;
	*exact = 0;
	return 0;
}

/* probekit_cfi_step steps the walk in this CPU's scratch record from
 * frame i to its caller; returns 0, or a PROBEKIT_CFI_STOP_*. A global
 * function (Linux 5.6, 51c39bb1d5d1): the verifier checks its body once,
 * not once per frame, which a walk of 127 frames of two binary searches
 * would need (over its 1M instructions). Its arguments are scalars, as
 * 5.10 wants them. */
__attribute__((noinline)) int probekit_cfi_step(__u32 i)
{
	__u32 zero = 0;
	struct probekit_cfi_stack *s = bpf_map_lookup_elem(&probekit_cfi_scratch, &zero);

	if (!s)
		return PROBEKIT_CFI_STOP_READ;
	const struct probekit_cfi_process *p = bpf_map_lookup_elem(&probekit_cfi_procs, &s->pid);

	return __probekit_cfi_step(p, i, s->at_entry, &s->pc, &s->sp, &s->bp, &s->exact, &s->fp_frames);
}

/* probekit_cfi_user_stack walks the current thread's user stack into
 * this CPU's scratch record and returns it, or NULL (no scratch, or not
 * x86-64); see the top of the file. */
static __always_inline struct probekit_cfi_stack *probekit_cfi_user_stack(void *ctx, int at_entry)
{
#if defined(__TARGET_ARCH_x86)
	__u32 zero = 0;
	struct probekit_cfi_stack *s = bpf_map_lookup_elem(&probekit_cfi_scratch, &zero);
	const struct pt_regs *r = ctx;

	if (!s)
		return 0;
#if defined(__VMLINUX_H__)
	s->pc = r->ip;
	s->sp = r->sp;
	s->bp = r->bp;
#else
	s->pc = r->rip;
	s->sp = r->rsp;
	s->bp = r->rbp;
#endif
	s->pid = bpf_get_current_pid_tgid() >> 32;
	s->at_entry = at_entry;
	s->exact = 0;
	s->fp_frames = 0;
	s->n = 0;
	s->stop = PROBEKIT_CFI_STOP_DEPTH;
	for (__u32 i = 0; i < PROBEKIT_CFI_MAX_FRAMES; i++) {
		s->pcs[i] = s->pc;
		s->n = i + 1;
		if (i + 1 == PROBEKIT_CFI_MAX_FRAMES)
			break;
		int stop = probekit_cfi_step(i);

		if (stop) {
			s->stop = stop;
			break;
		}
	}
	return s;
#else
	return 0;
#endif
}

/* --- Stacks counted in the kernel ------------------------------------- */

/* A stack's id is a 63-bit hash of its frames: stacks maps it to the
 * frames (struct probekit_cfi_stack), counts maps (pid, id) to a count
 * and a sum. */
struct probekit_cfi_count_key {
	__u32 pid;
	__u32 pad;
	__u64 id;
};

struct probekit_cfi_count {
	__u64 count;
	__u64 sum;
};

#define PROBEKIT_CFI_COUNT_MAPS(stacks_name, counts_name, entries) \
	struct {                                                   \
		__uint(type, BPF_MAP_TYPE_HASH);                   \
		__uint(max_entries, entries);                      \
		__type(key, __u64);                                \
		__type(value, struct probekit_cfi_stack);          \
	} stacks_name SEC(".maps");                                \
	struct {                                                   \
		__uint(type, BPF_MAP_TYPE_HASH);                   \
		__uint(max_entries, entries);                      \
		__type(key, struct probekit_cfi_count_key);        \
		__type(value, struct probekit_cfi_count);          \
	} counts_name SEC(".maps")

/* probekit_cfi_stack_id walks the stack, stores it in stacks (a map of
 * PROBEKIT_CFI_COUNT_MAPS) unless it is there, and returns its id (>= 0),
 * or a negative error: -EFAULT without a walk, -ENOMEM when stacks is
 * full. */
static __always_inline __s64 probekit_cfi_stack_id(void *ctx, void *stacks, int at_entry)
{
	struct probekit_cfi_stack *s = probekit_cfi_user_stack(ctx, at_entry);
	/* FNV-1a's offset basis and prime (64-bit), a word at a time. */
	__u64 h = 0xcbf29ce484222325ULL;

	if (!s)
		return -14; /* EFAULT */
	for (__u32 i = 0; i < PROBEKIT_CFI_MAX_FRAMES; i++) {
		if (i >= s->n)
			break;
		h = (h ^ s->pcs[i]) * 0x100000001b3ULL;
	}
	h = (h ^ s->n) * 0x100000001b3ULL;
	h &= ~(1ULL << 63);
	if (bpf_map_lookup_elem(stacks, &h))
		return h;
	long err = bpf_map_update_elem(stacks, &h, s, BPF_NOEXIST);

	if (err && err != -17 /* EEXIST: another CPU stored it */)
		return -12; /* ENOMEM */
	return h;
}

/* probekit_cfi_count_user_stack counts a hit, and adds value to a sum,
 * under the thread's process and CFI-unwound user stack. Returns 0, or a
 * negative error (of probekit_cfi_stack_id; -ENOMEM when counts is
 * full). */
static __always_inline long probekit_cfi_count_user_stack(void *ctx, void *stacks, void *counts, int at_entry,
							  __u64 value)
{
	struct probekit_cfi_count_key k = {};
	struct probekit_cfi_count *c, one = { 1, value };
	__s64 id = probekit_cfi_stack_id(ctx, stacks, at_entry);

	if (id < 0)
		return id;
	k.pid = bpf_get_current_pid_tgid() >> 32;
	k.id = id;
	c = bpf_map_lookup_elem(counts, &k);
	if (!c) {
		if (bpf_map_update_elem(counts, &k, &one, BPF_NOEXIST) == 0)
			return 0;
		/* Another CPU inserted the key meanwhile. */
		c = bpf_map_lookup_elem(counts, &k);
		if (!c)
			return -12; /* ENOMEM */
	}
	__sync_fetch_and_add(&c->count, 1);
	__sync_fetch_and_add(&c->sum, value);
	return 0;
}

#endif /* __PROBEKIT_UNWIND_BPF_H__ */
