/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Faulting string reads for uprobe programs.
 *
 *   long n = probekit_read_user_str(dst, size, src, fault);
 *
 * is bpf_probe_read_user_str(dst, size, src), which never faults: a
 * string in a page the process has not touched yet (a literal in .rodata
 * at a function's first call, a page swapped out) reads as an error.
 * With fault non-zero, a failed read faults the string's first page in
 * with bpf_copy_from_user (Linux 5.10, 07be4c4a3e7a; sleepable programs
 * only), and the next page, which a string shorter than a page may
 * reach, and is tried again. Pass a volatile const set before load: the program is then
 * loaded sleepable (BPF_F_SLEEPABLE; uprobe programs since Linux 6.0,
 * 8c7dcb84e3b7 and 64ad7556c75e; uprobe_multi ones since 6.6) or, with
 * the constant 0, the helper call is dead code that the verifier does
 * not check. */
#ifndef PROBEKIT_FAULTSTR_BPF_H
#define PROBEKIT_FAULTSTR_BPF_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The smallest page size of the architectures built for: a string of
 * fewer than this many bytes spans at most two pages of any size. */
#define PROBEKIT_MIN_PAGE 4096

/* A failed fault is no error (the next page may not exist, and a string
 * ending before it does not need it): the second read says what could
 * be read. No branch on either fault's result: each doubles the states
 * the verifier explores per string, which took a program with the
 * whole-stack walk past Linux 6.1's 1,000,000 processed instructions
 * (E2BIG). */
static __always_inline long probekit_read_user_str(void *dst, __u32 size, const void *src, __u32 fault)
{
	long len = bpf_probe_read_user_str(dst, size, src);
	char c;

	if (len > 0 || !fault)
		return len;
	bpf_copy_from_user(&c, 1, src);
	bpf_copy_from_user(&c, 1, (const void *)(((__u64)src | (PROBEKIT_MIN_PAGE - 1)) + 1));
	return bpf_probe_read_user_str(dst, size, src);
}

#endif
