/*
 * usdt.bpf.h: probekit's BPF-side USDT API.
 *
 * Source-compatible with the BPF side of libbpf's USDT support: a program
 * written against libbpf's <bpf/usdt.bpf.h> builds against this header by
 * changing the include, and uses the same names:
 *
 *   BPF_USDT(name, args...)                 named arguments, 0 on error
 *   int  bpf_usdt_arg_cnt(ctx)              argument count, or -ESRCH
 *   int  bpf_usdt_arg_size(ctx, n)          size in bytes of argument n
 *   int  bpf_usdt_arg(ctx, n, long *res)    value of argument n
 *   long bpf_usdt_cookie(ctx)               the attach call's 64-bit cookie
 *
 * and the same maps (__bpf_usdt_specs, __bpf_usdt_ip_to_spec_id) with
 * libbpf 1.7's spec layout, which probekit's Go side fills in. The Go side
 * reads the layout from the object's BTF, so objects built against the
 * pre-1.7 layout load too.
 *
 * Differences from libbpf's header, each deliberate:
 *
 * - The maps are global, not weak: cilium/ebpf (v0.22) refuses an
 *   instruction that refers to a weak map ("unsupported binding:
 *   STB_WEAK"). Several units that include this header link into one
 *   object (bpftool gen object, libbpf's static linker) when every unit
 *   but one defines PROBEKIT_USDT_EXTERN_MAPS before the include: those
 *   units declare the maps extern, the linker resolves them to the one
 *   unit's definitions, and the linked object's maps are global, which
 *   cilium/ebpf loads. Without it the link fails with "conflicting
 *   non-weak symbol (__bpf_usdt_specs)". libbpf's header makes its maps
 *   weak, so that every unit defines them and no define is needed.
 * - Whether the spec id comes from the BPF cookie or from the IP map is the
 *   global constant probekit_usdt_have_cookie, which the loader sets in
 *   .rodata before loading (CollectionSpec.Variables), instead of libbpf's
 *   kconfig extern LINUX_HAS_BPF_COOKIE, which cilium/ebpf cannot fill.
 *   The constant is frozen at load, so the verifier only walks the branch
 *   in use; a kernel without bpf_get_attach_cookie (< 5.15) loads the
 *   program with the constant false.
 * - The IP map (kernels without cookies) is keyed by process and address
 *   (struct __probekit_usdt_ip_key), libbpf's by address alone: a PIE or
 *   a shared library runs at another address in each process, and two
 *   processes' sites must not collide. The Go side fills either layout.
 * - Helpers are static __always_inline. The argument fetch is two global
 *   functions (__probekit_usdt_arg_value, __probekit_usdt_arg_error), so
 *   that older verifiers check it once (see bpf_usdt_arg), and the header
 *   defines an empty struct bpf_user_pt_regs_t for their context
 *   argument. They are weak, as are the constants the Go side sets
 *   (probekit_usdt_have_cookie, __probekit_usdt_same): each unit that
 *   includes the header defines them, and a static linker keeps one
 *   definition of each. They are not hidden, as libbpf's weak functions
 *   are: the verifier checks a global function on its own only when its
 *   BTF linkage is global, and cilium/ebpf lists a hidden variable in no
 *   CollectionSpec.Variables.
 * - Memory operands read exactly the argument's size. libbpf reads 8 bytes
 *   whatever the size, which faults for a small argument in the last bytes
 *   of a mapped page.
 * - An argument the Go side cannot express on this kernel (an xmm register,
 *   an unknown symbol, SIB on a pre-1.7 layout) has arg_type
 *   BPF_USDT_ARG_UNAVAILABLE: bpf_usdt_arg returns -EINVAL for that
 *   argument only, where libbpf fails the whole attach.
 *
 * Before including this header, define struct pt_regs (vmlinux.h, or
 * <linux/bpf.h> and <linux/ptrace.h> from the target's uapi headers) and
 * __TARGET_ARCH_<arch>, which bpf2go's -target defines. probekit builds
 * its objects for x86-64 (__TARGET_ARCH_x86) and arm64 (__TARGET_ARCH_arm64).
 *
 * The spec structs are internal: only probekit's Go side writes them.
 */
#ifndef __PROBEKIT_USDT_BPF_H__
#define __PROBEKIT_USDT_BPF_H__

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* Error codes, as the generic Linux errno values (asm-generic/errno-base.h,
 * the same on every architecture), so that no libc header is needed. */
#ifndef ENOENT
#define ENOENT 2
#endif
#ifndef ESRCH
#define ESRCH 3
#endif
#ifndef EINVAL
#define EINVAL 22
#endif

/* Number of distinct argument specs the program can use at once. The Go
 * side sizes its spec id allocator from the map, so this may be changed. */
#ifndef BPF_USDT_MAX_SPEC_CNT
#define BPF_USDT_MAX_SPEC_CNT 256
#endif

/* Number of probe sites the IP map can hold when BPF cookies are not
 * available (kernels before 5.15); unused otherwise. */
#ifndef BPF_USDT_MAX_IP_CNT
#define BPF_USDT_MAX_IP_CNT (4 * BPF_USDT_MAX_SPEC_CNT)
#endif

/* sys/sdt.h defines up to STAP_PROBE12. */
#define BPF_USDT_MAX_ARG_CNT 12

/* A test or compatibility header may provide its own spec types (the
 * pre-1.7 layout) by defining PROBEKIT_USDT_SPEC_DEFINED first: then it
 * defines enum __bpf_usdt_arg_type with the BPF_USDT_ARG_* values below,
 * struct __bpf_usdt_arg_spec and struct __bpf_usdt_spec, and
 * PROBEKIT_USDT_NO_SIB when its arg spec has no index register. */
#ifndef PROBEKIT_USDT_SPEC_DEFINED
#define PROBEKIT_USDT_SPEC_DEFINED

/* Where an argument lives; the values are libbpf's, plus one. */
enum __bpf_usdt_arg_type {
	BPF_USDT_ARG_CONST,	/* val_off */
	BPF_USDT_ARG_REG,	/* the register at reg_off in pt_regs */
	BPF_USDT_ARG_REG_DEREF,	/* memory at reg + val_off */
	BPF_USDT_ARG_SIB,	/* memory at reg + (idx << scale_bitshift) + val_off */
	/* probekit: the argument cannot be read; bpf_usdt_arg returns -EINVAL. */
	BPF_USDT_ARG_UNAVAILABLE,
};

/* libbpf 1.7 arg spec: 24 bytes on either byte order, reg_off at 14. The
 * bitfields do not sit at the same bytes on both (arg_type is byte 8 on
 * little-endian, byte 12 on big-endian); the Go side places them from the
 * object's BTF. */
struct __bpf_usdt_arg_spec {
	/* CONST: the value; REG_DEREF and SIB: the displacement. */
	__u64 val_off;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	enum __bpf_usdt_arg_type arg_type: 8;
	/* SIB index register: offset in pt_regs (< 4096). */
	__u16 idx_reg_off: 12;
	/* SIB scale as log2: 0..3. */
	__u16 scale_bitshift: 4;
	__u8 __reserved: 8;
#else
	__u8 __reserved: 8;
	__u16 idx_reg_off: 12;
	__u16 scale_bitshift: 4;
	enum __bpf_usdt_arg_type arg_type: 8;
#endif
	/* REG, REG_DEREF, SIB: offset of the (base) register in pt_regs. */
	short reg_off;
	/* Sign-extend (true) or zero-extend the value to 64 bits. */
	_Bool arg_signed;
	/* 64 - 8 * size: the shift that truncates the value to its size. */
	char arg_bitshift;
};

/* libbpf 1.7 spec: 304 bytes. */
struct __bpf_usdt_spec {
	struct __bpf_usdt_arg_spec args[BPF_USDT_MAX_ARG_CNT];
	__u64 usdt_cookie;
	short arg_cnt;
};
#endif /* PROBEKIT_USDT_SPEC_DEFINED */

/* Declared extern in a unit that defines PROBEKIT_USDT_EXTERN_MAPS, to be
 * linked with one unit that defines them (see the top of this file). */
#ifdef PROBEKIT_USDT_EXTERN_MAPS
#define __PROBEKIT_USDT_MAP extern
#else
#define __PROBEKIT_USDT_MAP
#endif

/* spec id -> spec, filled by the Go side. */
__PROBEKIT_USDT_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BPF_USDT_MAX_SPEC_CNT);
	__type(key, int);
	__type(value, struct __bpf_usdt_spec);
} __bpf_usdt_specs SEC(".maps");

/* The key of the IP map: the runtime address of a probe site in a
 * process (tgid as bpf_get_current_pid_tgid reports it), or in every
 * process (tgid 0) for a file that runs at its link-time addresses. A
 * position-independent file (PIE executable, shared library) runs at
 * other addresses in each process; keyed by process, one process's
 * sites never collide with another's. (libbpf keys the map by the
 * address alone; the Go side reads the key's size and fills either.) */
struct __probekit_usdt_ip_key {
	__u32 tgid;
	__u32 __pad;
	long ip;
};

/* Probe site -> spec id; used only when probekit_usdt_have_cookie is
 * false. */
__PROBEKIT_USDT_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BPF_USDT_MAX_IP_CNT);
	__type(key, struct __probekit_usdt_ip_key);
	__type(value, __u32);
} __bpf_usdt_ip_to_spec_id SEC(".maps");

/* True: the spec id is the BPF cookie of the uprobe (kernel 5.15+). False:
 * it is looked up by the probe's runtime address in the IP map. Global and
 * not hidden, so that it appears in CollectionSpec.Variables; the Go side
 * sets it before loading. */
__weak volatile const _Bool probekit_usdt_have_cookie = 1;

/* Keeps the compiler from merging two bounds checks of x into one the
 * verifier cannot follow. */
#define __probekit_usdt_barrier(x) asm volatile("" : "+r"(x))

static __always_inline int __bpf_usdt_spec_id(struct pt_regs *ctx)
{
	if (probekit_usdt_have_cookie)
		return (int)bpf_get_attach_cookie(ctx);

	/* At a uprobe the instruction pointer is the probed address
	 * (handle_swbp sets it back to the breakpoint). */
	struct __probekit_usdt_ip_key k = {
		.tgid = bpf_get_current_pid_tgid() >> 32,
		.ip = PT_REGS_IP(ctx),
	};
	__u32 *id = bpf_map_lookup_elem(&__bpf_usdt_ip_to_spec_id, &k);

	if (!id) {
		k.tgid = 0;
		id = bpf_map_lookup_elem(&__bpf_usdt_ip_to_spec_id, &k);
	}
	return id ? (int)*id : -ESRCH;
}

static __always_inline struct __bpf_usdt_spec *__bpf_usdt_spec(struct pt_regs *ctx)
{
	int id = __bpf_usdt_spec_id(ctx);

	if (id < 0)
		return NULL;
	return bpf_map_lookup_elem(&__bpf_usdt_specs, &id);
}

/* The number of arguments of the probe that fired, or -ESRCH when no spec
 * is known for it. */
static __always_inline int bpf_usdt_arg_cnt(struct pt_regs *ctx)
{
	struct __bpf_usdt_spec *spec = __bpf_usdt_spec(ctx);

	if (!spec)
		return -ESRCH;
	return spec->arg_cnt;
}

/* The size in bytes that arg_bitshift (64 - 8 * size) stands for, or
 * -EINVAL for a value no size gives. */
static __always_inline int __probekit_usdt_size(int bitshift)
{
	switch (bitshift) {
	case 0:
		return 8;
	case 32:
		return 4;
	case 48:
		return 2;
	case 56:
		return 1;
	}
	return -EINVAL;
}

/* The size in bytes (1, 2, 4 or 8) of argument arg_num, -ESRCH without a
 * spec, -ENOENT past the last argument. */
static __always_inline int bpf_usdt_arg_size(struct pt_regs *ctx, __u64 arg_num)
{
	struct __bpf_usdt_spec *spec = __bpf_usdt_spec(ctx);

	if (!spec)
		return -ESRCH;
	if (arg_num >= BPF_USDT_MAX_ARG_CNT)
		return -ENOENT;
	__probekit_usdt_barrier(arg_num);
	if (arg_num >= spec->arg_cnt)
		return -ENOENT;
	return __probekit_usdt_size(spec->args[arg_num].arg_bitshift);
}

/* Reads size bytes of user memory at addr, zero-extended. Exactly size
 * bytes: never past the argument's end. */
static __always_inline long __probekit_usdt_read_user(unsigned long *val, unsigned long addr,
						      int size)
{
	long err;

	switch (size) {
	case 1: {
		__u8 v;

		err = bpf_probe_read_user(&v, sizeof(v), (const void *)addr);
		*val = v;
		return err;
	}
	case 2: {
		__u16 v;

		err = bpf_probe_read_user(&v, sizeof(v), (const void *)addr);
		*val = v;
		return err;
	}
	case 4: {
		__u32 v;

		err = bpf_probe_read_user(&v, sizeof(v), (const void *)addr);
		*val = v;
		return err;
	}
	case 8: {
		__u64 v;

		err = bpf_probe_read_user(&v, sizeof(v), (const void *)addr);
		*val = v;
		return err;
	}
	}
	return -EINVAL;
}

/* The number of 8-byte slots of the uprobe context that the Go side's
 * register offsets name: x86-64's struct pt_regs (21 slots, r15 to ss) and
 * arm64's struct user_pt_regs (34 slots: regs[31], sp, pc, pstate), each
 * of the target's uapi <asm/ptrace.h>. Other targets read every register
 * through bpf_probe_read_kernel. */
#if defined(__TARGET_ARCH_x86)
#define __PROBEKIT_USDT_CTX_SLOTS 21
_Static_assert(sizeof(struct pt_regs) >= 8 * __PROBEKIT_USDT_CTX_SLOTS, "pt_regs is smaller than 21 slots");
#elif defined(__TARGET_ARCH_arm64)
#define __PROBEKIT_USDT_CTX_SLOTS 34
_Static_assert(sizeof(struct user_pt_regs) == 8 * __PROBEKIT_USDT_CTX_SLOTS, "user_pt_regs is not 34 slots");
#endif

#ifdef __PROBEKIT_USDT_CTX_SLOTS
/* One slot of the context, by constant offset. An assembly load, whose
 * offset is an immediate: the compiler must not merge the switch's loads
 * into one through a computed pointer (ctx + offset), which the verifier
 * refuses ("dereference of modified ctx ptr"); clang 19 did that for
 * plain and volatile loads alike. */
#define __probekit_usdt_slot(n)							\
	case 8 * (n):								\
		if ((n) < __PROBEKIT_USDT_CTX_SLOTS) {				\
			asm volatile("%0 = *(u64 *)(%1 + %2)"			\
				     : "=r"(*val) : "r"(ctx), "i"(8 * (n)));	\
			return 0;						\
		}								\
		break
#endif

/* Reads the pt_regs slot at off. A uprobe's context is readable only at
 * constant offsets (kprobe_prog_is_valid_access), so the slot is picked
 * by a switch of direct loads, each at its own constant offset: a few
 * compares and one load, where a read at a computed offset is a call of
 * bpf_probe_read_kernel. An offset outside the switch (unaligned, past
 * the slots, or a target without a list) still goes through
 * bpf_probe_read_kernel. */
static __always_inline long __probekit_usdt_read_reg(unsigned long *val, struct pt_regs *ctx,
						     long off)
{
#ifdef __PROBEKIT_USDT_CTX_SLOTS
	switch (off) {
	__probekit_usdt_slot(0); __probekit_usdt_slot(1); __probekit_usdt_slot(2);
	__probekit_usdt_slot(3); __probekit_usdt_slot(4); __probekit_usdt_slot(5);
	__probekit_usdt_slot(6); __probekit_usdt_slot(7); __probekit_usdt_slot(8);
	__probekit_usdt_slot(9); __probekit_usdt_slot(10); __probekit_usdt_slot(11);
	__probekit_usdt_slot(12); __probekit_usdt_slot(13); __probekit_usdt_slot(14);
	__probekit_usdt_slot(15); __probekit_usdt_slot(16); __probekit_usdt_slot(17);
	__probekit_usdt_slot(18); __probekit_usdt_slot(19); __probekit_usdt_slot(20);
	__probekit_usdt_slot(21); __probekit_usdt_slot(22); __probekit_usdt_slot(23);
	__probekit_usdt_slot(24); __probekit_usdt_slot(25); __probekit_usdt_slot(26);
	__probekit_usdt_slot(27); __probekit_usdt_slot(28); __probekit_usdt_slot(29);
	__probekit_usdt_slot(30); __probekit_usdt_slot(31); __probekit_usdt_slot(32);
	__probekit_usdt_slot(33);
	}
#endif
	return bpf_probe_read_kernel(val, sizeof(*val), (const void *)ctx + off);
}

/* The argument fetch behind bpf_usdt_arg, for the probe whose spec id
 * (__bpf_usdt_spec_id) is id; see bpf_usdt_arg. */
static __always_inline int __probekit_usdt_arg_of(struct pt_regs *ctx, int id, __u64 arg_num, long *res)
{
	struct __bpf_usdt_spec *spec;
	struct __bpf_usdt_arg_spec *arg;
	unsigned long val;
	int size, shift;
	long err;

	*res = 0;

	if (id < 0)
		return -ESRCH;
	spec = bpf_map_lookup_elem(&__bpf_usdt_specs, &id);
	if (!spec)
		return -ESRCH;
	if (arg_num >= BPF_USDT_MAX_ARG_CNT)
		return -ENOENT;
	__probekit_usdt_barrier(arg_num);
	if (arg_num >= spec->arg_cnt)
		return -ENOENT;

	arg = &spec->args[arg_num];
	shift = arg->arg_bitshift;
	size = __probekit_usdt_size(shift);
	if (size < 0)
		return size;

	switch (arg->arg_type) {
	case BPF_USDT_ARG_CONST:
		val = arg->val_off;
		break;
	case BPF_USDT_ARG_REG:
		err = __probekit_usdt_read_reg(&val, ctx, arg->reg_off);
		if (err)
			return err;
		break;
	case BPF_USDT_ARG_REG_DEREF:
		err = __probekit_usdt_read_reg(&val, ctx, arg->reg_off);
		if (err)
			return err;
		err = __probekit_usdt_read_user(&val, val + arg->val_off, size);
		if (err)
			return err;
		break;
#ifndef PROBEKIT_USDT_NO_SIB
	case BPF_USDT_ARG_SIB: {
		unsigned long idx;

		err = __probekit_usdt_read_reg(&val, ctx, arg->reg_off);
		if (err)
			return err;
		err = __probekit_usdt_read_reg(&idx, ctx, arg->idx_reg_off);
		if (err)
			return err;
		err = __probekit_usdt_read_user(&val, val + (idx << arg->scale_bitshift) + arg->val_off,
						size);
		if (err)
			return err;
		break;
	}
#endif
	default:
		/* BPF_USDT_ARG_UNAVAILABLE, or a kind this header does not know. */
		return -EINVAL;
	}

	/* Keep the low size bytes, then extend: e.g. 0x81 as -1@ gives -127. */
	val <<= shift;
	if (arg->arg_signed)
		*res = (long)val >> shift;
	else
		*res = val >> shift;
	return 0;
}

#ifdef PROBEKIT_USDT_SAME_ARGS
/* Where each argument is at every site the program will be attached to,
 * when they all agree: a program that defines PROBEKIT_USDT_SAME_ARGS
 * before including this header gets it; the Go side sets it before load
 * (usdt.SetSameArgs) from the sites it resolves, and the Attacher
 * refuses a site that disagrees with it. Bit n of mask says that every
 * site has argument n in one register, or as one constant: spec.args[n].
 * A constant (.rodata): the verifier knows it, keeps one load of the
 * register, and a hit reads neither the spec nor this table. */
struct __probekit_usdt_same_args {
	__u32 mask;
	__u32 __pad;
	struct __bpf_usdt_spec spec;
};
__weak volatile const struct __probekit_usdt_same_args __probekit_usdt_same = {};

/* Argument arg_num from __probekit_usdt_same when every site agrees on
 * it: 1 with *res set as bpf_usdt_arg sets it. 0 when the spec must be
 * read instead (the sites differ, the argument is in memory, or nothing
 * set the table). It calls no helper and reads no map: what a filter or
 * a key on an argument needs per hit, where the spec path costs
 * bpf_get_attach_cookie and a spec lookup. */
static __always_inline int __probekit_usdt_same_arg(struct pt_regs *ctx, __u64 arg_num, long *res)
{
	/* volatile: clang must read the table, not fold its initializer. */
	const volatile struct __bpf_usdt_arg_spec *arg;
	unsigned long val;
	int shift;

	if (arg_num >= BPF_USDT_MAX_ARG_CNT)
		return 0;
	__probekit_usdt_barrier(arg_num);
	if (!(__probekit_usdt_same.mask & (1u << arg_num)))
		return 0;
	arg = &__probekit_usdt_same.spec.args[arg_num];
	shift = arg->arg_bitshift;
	if (__probekit_usdt_size(shift) < 0)
		return 0;
	switch (arg->arg_type) {
	case BPF_USDT_ARG_CONST:
		val = arg->val_off;
		break;
	case BPF_USDT_ARG_REG:
		if (__probekit_usdt_read_reg(&val, ctx, arg->reg_off))
			return 0;
		break;
	default:
		return 0;
	}
	val <<= shift;
	if (arg->arg_signed)
		*res = (long)val >> shift;
	else
		*res = val >> shift;
	return 1;
}
#endif /* PROBEKIT_USDT_SAME_ARGS */

/* The argument fetch runs in two global functions (Linux 5.6). The verifier checks a global function once, on its own,
 * with its arguments unknown, and a caller sees only its scalar result;
 * inlined, each fetch's branches (spec found or not, argument kind, size,
 * read error) multiply with the next fetch's wherever the verifier cannot
 * prune them, and a 12-argument BPF_USDT program went past the 1,000,000
 * instructions Linux 5.10's and 6.1's verifiers process (6.18's needed
 * 7,000). On Linux 5.10 a global function's arguments are a context
 * pointer or scalars, nothing else, and the context pointer is recognised
 * by the name of the struct it points to, which must be the program
 * type's context name: bpf_user_pt_regs_t for kprobe programs (later
 * kernels also resolve that typedef to struct pt_regs). Hence this
 * empty struct; it does not clash with the typedef bpf_user_pt_regs_t of
 * <asm/bpf_perf_event.h> and vmlinux.h (struct tags and typedef names are
 * apart in C). The functions are global and not hidden, and weak, so that
 * several units that include this header link into one object. */
struct bpf_user_pt_regs_t {};

/* Argument arg_num's value, of the probe whose spec id is id, as
 * bpf_usdt_arg stores it; 0 on error. The spec id is an argument so that
 * a program reading several arguments finds it once per hit (with
 * bpf_get_attach_cookie, or two lookups in the IP map), not once per
 * argument. */
__attribute__((noinline)) __weak long __probekit_usdt_arg_value(struct bpf_user_pt_regs_t *uctx, int id,
								 __u64 arg_num)
{
	long v;

	if (__probekit_usdt_arg_of((struct pt_regs *)uctx, id, arg_num, &v))
		return 0;
	return v;
}

/* bpf_usdt_arg's result for argument arg_num of the probe whose spec id
 * is id: 0 or a negative error. */
__attribute__((noinline)) __weak int __probekit_usdt_arg_error(struct bpf_user_pt_regs_t *uctx, int id,
								__u64 arg_num)
{
	long v;

	return __probekit_usdt_arg_of((struct pt_regs *)uctx, id, arg_num, &v);
}

/* bpf_usdt_arg of the probe whose spec id (__bpf_usdt_spec_id) is id. */
static __always_inline int __probekit_usdt_arg_id(struct pt_regs *ctx, int id, __u64 arg_num, long *res)
{
	long v = __probekit_usdt_arg_value((struct bpf_user_pt_regs_t *)ctx, id, arg_num);

	*res = v;
	if (v)
		return 0;
	return __probekit_usdt_arg_error((struct bpf_user_pt_regs_t *)ctx, id, arg_num);
}

/* Stores the value of argument arg_num in *res, truncated to its size and
 * sign- or zero-extended, and returns 0. On error *res is 0 and the result
 * is -ESRCH (no spec for this probe), -ENOENT (arg_num past the last
 * argument), -EINVAL (an argument probekit could not express, or an
 * unknown kind) or the error of the memory read. A value that is not 0
 * cannot be an error's, so only a 0 costs a second call, for the error. */
static __always_inline int bpf_usdt_arg(struct pt_regs *ctx, __u64 arg_num, long *res)
{
	return __probekit_usdt_arg_id(ctx, __bpf_usdt_spec_id(ctx), arg_num, res);
}

/* The 64-bit cookie the attach call gave this probe (not the BPF cookie,
 * which carries the spec id), or 0 without a spec. */
static __always_inline long bpf_usdt_cookie(struct pt_regs *ctx)
{
	struct __bpf_usdt_spec *spec = __bpf_usdt_spec(ctx);

	return spec ? spec->usdt_cookie : 0;
}

/* BPF_USDT(name, type1 a1, ...) defines the program name(struct pt_regs
 * *ctx) whose body sees up to 12 named arguments fetched with bpf_usdt_arg
 * (an argument that cannot be read is 0) as well as ctx:
 *
 *	SEC("usdt")
 *	int BPF_USDT(on_query, const char *sql, long len) { ... }
 */
#define __probekit_usdt_cat(a, b) a##b
#define __probekit_usdt_xcat(a, b) __probekit_usdt_cat(a, b)
#define __probekit_usdt_nth(_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, n, ...) n
#define __probekit_usdt_narg(...) \
	__probekit_usdt_nth(_, ##__VA_ARGS__, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)

/* The n-th argument as the body's parameter expects it; void * converts to
 * integers and pointers alike (with -Wint-conversion silenced). */
#define __probekit_usdt_get(n) \
	((void *)__probekit_usdt_arg_value((struct bpf_user_pt_regs_t *)ctx, __probekit_usdt_id, n))

#define __probekit_usdt_args0() ctx
#define __probekit_usdt_args1(a) __probekit_usdt_args0(), __probekit_usdt_get(0)
#define __probekit_usdt_args2(a, ...) __probekit_usdt_args1(__VA_ARGS__), __probekit_usdt_get(1)
#define __probekit_usdt_args3(a, ...) __probekit_usdt_args2(__VA_ARGS__), __probekit_usdt_get(2)
#define __probekit_usdt_args4(a, ...) __probekit_usdt_args3(__VA_ARGS__), __probekit_usdt_get(3)
#define __probekit_usdt_args5(a, ...) __probekit_usdt_args4(__VA_ARGS__), __probekit_usdt_get(4)
#define __probekit_usdt_args6(a, ...) __probekit_usdt_args5(__VA_ARGS__), __probekit_usdt_get(5)
#define __probekit_usdt_args7(a, ...) __probekit_usdt_args6(__VA_ARGS__), __probekit_usdt_get(6)
#define __probekit_usdt_args8(a, ...) __probekit_usdt_args7(__VA_ARGS__), __probekit_usdt_get(7)
#define __probekit_usdt_args9(a, ...) __probekit_usdt_args8(__VA_ARGS__), __probekit_usdt_get(8)
#define __probekit_usdt_args10(a, ...) __probekit_usdt_args9(__VA_ARGS__), __probekit_usdt_get(9)
#define __probekit_usdt_args11(a, ...) __probekit_usdt_args10(__VA_ARGS__), __probekit_usdt_get(10)
#define __probekit_usdt_args12(a, ...) __probekit_usdt_args11(__VA_ARGS__), __probekit_usdt_get(11)
#define __probekit_usdt_args(...) \
	__probekit_usdt_xcat(__probekit_usdt_args, __probekit_usdt_narg(__VA_ARGS__))(__VA_ARGS__)

#define BPF_USDT(name, args...)							\
name(struct pt_regs *ctx);							\
static __always_inline typeof(name(0))						\
__probekit_usdt_body_##name(struct pt_regs *ctx, ##args);			\
typeof(name(0)) name(struct pt_regs *ctx)					\
{										\
	/* One spec id per hit, for every argument. */				\
	int __probekit_usdt_id = __bpf_usdt_spec_id(ctx);			\
										\
	(void)__probekit_usdt_id;						\
	_Pragma("GCC diagnostic push")						\
	_Pragma("GCC diagnostic ignored \"-Wint-conversion\"")			\
	return __probekit_usdt_body_##name(__probekit_usdt_args(args));		\
	_Pragma("GCC diagnostic pop")						\
}										\
static __always_inline typeof(name(0))						\
__probekit_usdt_body_##name(struct pt_regs *ctx, ##args)

#endif /* __PROBEKIT_USDT_BPF_H__ */
