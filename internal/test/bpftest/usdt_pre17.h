/*
 * usdt_pre17.h: the spec layout of libbpf before 1.7 (v0.8 to v1.6), for
 * testing that probekit's Go side fills objects built against it.
 *
 * Include it before usdt.bpf.h. Arg spec 16 bytes, spec 208 bytes:
 * val_off at 0, a full 4-byte enum arg_type at 8, reg_off at 12,
 * arg_signed at 14, arg_bitshift at 15; usdt_cookie at 192, arg_cnt at 200.
 * There is no index register, so SIB operands are unavailable.
 */
#ifndef __PROBEKIT_USDT_PRE17_H__
#define __PROBEKIT_USDT_PRE17_H__

#ifdef PROBEKIT_USDT_SPEC_DEFINED
#error "usdt_pre17.h must come before usdt.bpf.h"
#endif
#define PROBEKIT_USDT_SPEC_DEFINED
#define PROBEKIT_USDT_NO_SIB

enum __bpf_usdt_arg_type {
	BPF_USDT_ARG_CONST,
	BPF_USDT_ARG_REG,
	BPF_USDT_ARG_REG_DEREF,
	BPF_USDT_ARG_SIB,
	BPF_USDT_ARG_UNAVAILABLE, /* probekit's; a 4-byte field holds it */
};

struct __bpf_usdt_arg_spec {
	__u64 val_off;
	enum __bpf_usdt_arg_type arg_type;
	short reg_off;
	_Bool arg_signed;
	char arg_bitshift;
};

struct __bpf_usdt_spec {
	struct __bpf_usdt_arg_spec args[12];
	__u64 usdt_cookie;
	short arg_cnt;
};

#endif /* __PROBEKIT_USDT_PRE17_H__ */
