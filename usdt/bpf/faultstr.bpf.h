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
 * only), and the next page when size reaches past it, and is tried
 * again. Pass a volatile const set before load: the program is then
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

static __always_inline long probekit_read_user_str(void *dst, __u32 size, const void *src, __u32 fault)
{
	long len = bpf_probe_read_user_str(dst, size, src);
	__u64 next = ((__u64)src | (PROBEKIT_MIN_PAGE - 1)) + 1;
	char c;

	if (len > 0 || !fault)
		return len;
	if (bpf_copy_from_user(&c, 1, src))
		return len;
	/* The string may end before the next page, which may not exist:
	 * its failure is no error. */
	if (next - (__u64)src < size)
		bpf_copy_from_user(&c, 1, (const void *)next);
	return bpf_probe_read_user_str(dst, size, src);
}

#endif
