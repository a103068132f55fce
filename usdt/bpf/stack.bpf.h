/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* stack.bpf.h: the user stack of the thread that hit a uprobe or a USDT
 * probe, for probekit's users (package bpf's DecodeStack reads it on the
 * Go side; package symbolize names the frames).
 *
 *   __u64 frames[PROBEKIT_STACK_MAX_DEPTH];
 *   long n = probekit_user_stack(ctx, frames, sizeof(frames), at_entry);
 *
 * fills frames innermost first: the instruction pointer, then one return
 * address per caller, and returns the number of frames (negative: the
 * error of bpf_get_stack). size is a constant multiple of 8, at least 16.
 *
 * The kernel walks the frame-pointer chain (bpf_get_stack with
 * BPF_F_USER_STACK, Linux 4.18). At the first instruction of a function
 * the callee has not yet pushed its frame: the chain starts at the
 * caller's frame record, whose return address is the caller's caller's,
 * so the caller itself is missing. Pass at_entry = 1 for a probe on a
 * function's first instruction (uprobe:FUNC, not a USDT site or a
 * uretprobe) and the helper inserts the caller as the second frame: the
 * return address the call instruction left at the stack pointer (x86-64)
 * or in the link register x30 (arm64). Linux 6.11 (cfa7f3d2c526, "perf,x86:
 * avoid missing caller address in stack traces captured in uprobe") does
 * the same on x86-64 when the probed instruction is push %rbp or endbr64;
 * the helper sees that the kernel's second frame already is the return
 * address and does not add it twice. (A function probed at entry that
 * was called from itself, at the same call site as its own caller, looks
 * the same: one of those two equal frames is then missing.)
 *
 * Go code always keeps frame pointers (amd64 since Go 1.7, arm64 since
 * 1.12). C and C++ built without them (-fomit-frame-pointer, the default
 * of GCC and Clang at -O1 and above on x86-64) use the frame-pointer
 * register for data: the stack is then the instruction pointer, the
 * caller when at_entry, and after it frames that are wrong (whatever
 * that register held, read as a frame record) or none at all (the walk
 * stops at the first address it cannot read). Build with
 * -fno-omit-frame-pointer (and -mno-omit-leaf-frame-pointer) for full
 * stacks; Fedora and Ubuntu 24.04 build their packages so.
 *
 * Needs struct pt_regs and __TARGET_ARCH_x86 or __TARGET_ARCH_arm64 (as
 * usdt.bpf.h does) and libbpf's <bpf/bpf_helpers.h> before it. On other
 * architectures at_entry adds nothing. */
#ifndef __PROBEKIT_STACK_BPF_H__
#define __PROBEKIT_STACK_BPF_H__

/* The kernel's default perf_event_max_stack (kernel.perf_event_max_stack
 * sysctl): bpf_get_stack returns at most that many frames. Keep in sync
 * with MaxStackDepth in bpf.go. */
#define PROBEKIT_STACK_MAX_DEPTH 127

/* Reads the return address of a function stopped at its first
 * instruction into *ret; returns 0, or a negative error. */
static __always_inline long __probekit_stack_return_address(void *ctx, __u64 *ret)
{
#if defined(__TARGET_ARCH_x86)
	/* The call instruction pushed it: it is at the stack pointer, sp in
	 * the kernel's struct pt_regs (vmlinux.h), rsp in the uapi one. */
#if defined(__VMLINUX_H__)
	__u64 sp = ((const struct pt_regs *)ctx)->sp;
#else
	__u64 sp = ((const struct pt_regs *)ctx)->rsp;
#endif
	return bpf_probe_read_user(ret, sizeof(*ret), (const void *)sp);
#elif defined(__TARGET_ARCH_arm64)
	/* bl put it in x30, the link register; the uprobe context of
	 * arm64 is struct user_pt_regs. */
	*ret = ((const struct user_pt_regs *)ctx)->regs[30];
	return 0;
#else
	return -95; /* EOPNOTSUPP */
#endif
}

/* Whether the kernel's walk puts the caller second itself at a
 * function's first instruction (push %rbp or endbr64 there, x86-64):
 * 0 not known, 1 it does not, 2 it does. Set before load (package
 * attach's Prepare, from a probe of the running kernel). Not known, the
 * walk's second frame is compared with the return address: in direct
 * recursion they are equal when the kernel did not add it, and a frame
 * is lost. */
volatile const __u32 probekit_stack_entry_caller = 0;

/* probekit_user_stack fills buf (size bytes) with the current thread's
 * user stack and returns its number of frames; see the top of the file.
 * size must be a constant the verifier sees. */
static __always_inline long probekit_user_stack(void *ctx, __u64 *buf, __u32 size, int at_entry)
{
	__u64 ret = 0;
	long n;

	if (!at_entry || __probekit_stack_return_address(ctx, &ret) || !ret) {
		n = bpf_get_stack(ctx, buf, size, BPF_F_USER_STACK);
		return n < 0 ? n : n / 8;
	}
	/* One slot left free at the front for the instruction pointer, so
	 * that the caller goes in second place without moving the rest. */
	n = bpf_get_stack(ctx, buf + 1, size - 8, BPF_F_USER_STACK);
	if (n < 8)
		return n < 0 ? n : 0;
	buf[0] = buf[1];
	if (n >= 16 && buf[2] == ret && probekit_stack_entry_caller != 1) {
		/* The kernel put the caller second itself: buf[1..n/8] is
		 * IP, caller, the rest; move the caller and the rest down. */
		for (__u32 j = 1; j < PROBEKIT_STACK_MAX_DEPTH; j++) {
			if (j >= n / 8 || (j + 2) * 8 > size)
				break;
			__u64 f = buf[j + 1];

			/* Keeps clang from making the loop a memmove call,
			 * which BPF has not. */
			asm volatile("" : "+r"(f));
			buf[j] = f;
		}
		return n / 8;
	}
	buf[1] = ret;
	return n / 8 + 1;
}

/* --- Stacks without frame pointers: copy the stack top ---------------
 *
 *   struct probekit_stack_copy *c = bpf_ringbuf_reserve(&rb, sizeof(*c), 0);
 *   long n = probekit_copy_stack(ctx, c);
 *
 * copies the registers rip, rsp and rbp and the top of the user stack
 * for package unwind to walk in user space with each object's call-frame
 * information (bpf.DecodeStackCopy reads it back). The copy starts at
 * rsp's page: data[i] is the byte at base + i, and the bytes from rsp to
 * base + size are the stack (size is a multiple of 4096; bytes below rsp
 * in the first page are not read). The pages are read one at a time,
 * each with one bpf_probe_read_user (Linux 5.5), so a stack whose end
 * is nearer than PROBEKIT_STACK_COPY_PAGES pages still gives the pages
 * it has. Returns the bytes copied from rsp, or a negative error when
 * not even rsp's page could be read. x86-64 only (pages are 4 KiB).
 *
 * The destination must be map memory (a ring buffer record or a per-CPU
 * array value): the BPF stack is 512 bytes. Define
 * PROBEKIT_STACK_COPY_PAGES before the include to copy more or less; 4
 * pages (12-16 KiB from rsp) hold the frames of most C programs. */
#ifndef PROBEKIT_STACK_COPY_PAGES
#define PROBEKIT_STACK_COPY_PAGES 4
#endif
#define PROBEKIT_STACK_COPY_SIZE (PROBEKIT_STACK_COPY_PAGES * 4096)

struct probekit_stack_copy {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 base; /* sp rounded down to its page: the address of data[0] */
	__u32 size; /* bytes of data read, from base */
	__u32 pad;
	__u8 data[PROBEKIT_STACK_COPY_SIZE];
};

/* probekit_copy_stack_pages is probekit_copy_stack reading at most pages
 * pages (1 to PROBEKIT_STACK_COPY_PAGES; a value set before load, say):
 * fewer pages cost less per hit (each page is one read of 4 KiB) and
 * hold fewer frames. */
static __always_inline long probekit_copy_stack_pages(void *ctx, struct probekit_stack_copy *c, __u32 pages)
{
#if defined(__TARGET_ARCH_x86)
#if defined(__VMLINUX_H__)
	const struct pt_regs *r = ctx;
	__u64 sp = r->sp;
	c->ip = r->ip;
	c->bp = r->bp;
#else
	const struct pt_regs *r = ctx;
	__u64 sp = r->rsp;
	c->ip = r->rip;
	c->bp = r->rbp;
#endif
	__u64 in = sp & 4095;

	c->sp = sp;
	c->base = sp - in;
	c->size = 0;
	/* in is at most 4095 and the read at most 4096 - in: both bounds
	 * are what the verifier checks against data's size. */
	if (bpf_probe_read_user(c->data + in, 4096 - in, (const void *)sp))
		return -14; /* EFAULT */
	c->size = 4096;
	for (__u32 i = 1; i < PROBEKIT_STACK_COPY_PAGES; i++) {
		if (i >= pages)
			break;
		if (bpf_probe_read_user(c->data + i * 4096, 4096, (const void *)(c->base + i * 4096)))
			break;
		c->size += 4096;
	}
	return c->size - in;
#else
	return -95; /* EOPNOTSUPP */
#endif
}

static __always_inline long probekit_copy_stack(void *ctx, struct probekit_stack_copy *c)
{
	return probekit_copy_stack_pages(ctx, c, PROBEKIT_STACK_COPY_PAGES);
}

/* --- Stacks counted in the kernel -------------------------------------
 *
 *   PROBEKIT_STACK_COUNT_MAPS(stacks, counts, 10240);
 *   ...
 *   probekit_count_user_stack(ctx, &stacks, &counts, at_entry, value);
 *
 * counts a hit, and adds value to a sum, under the thread's process and
 * user stack, with no event per hit: the kernel's frame-pointer walk
 * (bpf_get_stackid with BPF_F_USER_STACK, Linux 4.6) stores each
 * distinct stack once in a BPF_MAP_TYPE_STACK_TRACE map and returns its
 * id; counts maps (pid, id, caller) to a struct probekit_stack_count.
 * With at_entry, the caller (the return address at the stack pointer,
 * see probekit_user_stack) is part of the key, since the kernel's walk
 * misses it there; bpf.ReadStackCounts puts it back in second place.
 * Returns 0, or a negative error (of bpf_get_stackid: -EEXIST/-ENOMEM
 * when the stack map is full, -EFAULT for an unreadable stack). */
struct probekit_stack_key {
	__u32 pid;
	__s32 stackid;
	__u64 caller; /* 0 without at_entry */
};

struct probekit_stack_count {
	__u64 count;
	__u64 sum;
};

#define PROBEKIT_STACK_COUNT_MAPS(stacks_name, counts_name, entries)           \
	struct {                                                              \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                       \
		__uint(max_entries, entries);                                 \
		__uint(key_size, sizeof(__u32));                              \
		__uint(value_size, PROBEKIT_STACK_MAX_DEPTH * sizeof(__u64)); \
	} stacks_name SEC(".maps");                                           \
	struct {                                                              \
		__uint(type, BPF_MAP_TYPE_HASH);                              \
		__uint(max_entries, entries);                                 \
		__type(key, struct probekit_stack_key);                      \
		__type(value, struct probekit_stack_count);                  \
	} counts_name SEC(".maps")

static __always_inline long probekit_count_user_stack(void *ctx, void *stacks, void *counts, int at_entry, __u64 value)
{
	struct probekit_stack_key k = {};
	struct probekit_stack_count *c, one = { 1, value };
	long id;

	id = bpf_get_stackid(ctx, stacks, BPF_F_USER_STACK);
	if (id < 0)
		return id;
	k.pid = bpf_get_current_pid_tgid() >> 32;
	k.stackid = id;
	if (at_entry && __probekit_stack_return_address(ctx, &k.caller))
		k.caller = 0;
	c = bpf_map_lookup_elem(counts, &k);
	if (c) {
		__sync_fetch_and_add(&c->count, 1);
		__sync_fetch_and_add(&c->sum, value);
		return 0;
	}
	if (bpf_map_update_elem(counts, &k, &one, BPF_NOEXIST) == 0)
		return 0;
	/* Another CPU inserted the key meanwhile. */
	c = bpf_map_lookup_elem(counts, &k);
	if (!c)
		return -12; /* ENOMEM: the map is full */
	__sync_fetch_and_add(&c->count, 1);
	__sync_fetch_and_add(&c->sum, value);
	return 0;
}

#endif /* __PROBEKIT_STACK_BPF_H__ */
