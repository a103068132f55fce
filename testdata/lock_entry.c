/* lock_entry: functions for uprobe's skipping of sites the kernel refuses.
 * probe_locked starts with a lock-prefixed instruction, which x86-64
 * uprobes refuse to probe (arch_uprobe_analyze_insn: the lock prefix is
 * not allowed); probe_plain_a and probe_plain_b take probes.
 * probe_plain_a_alias is another name of probe_plain_a: a glob over
 * both probes that address once.
 *
 *   lock_entry N    calls each of the three N times, then exits 0
 */
#include <stdlib.h>

__attribute__((naked, noinline)) void probe_locked(long *p __attribute__((unused)))
{
	__asm__ volatile("lock incq (%rdi)\n\tret\n");
}

__attribute__((noipa)) long probe_plain_a(long x)
{
	return x + 1;
}

long probe_plain_a_alias(long x) __attribute__((alias("probe_plain_a")));

__attribute__((noipa)) long probe_plain_b(long x)
{
	return x * 2;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1, v = 0;

	for (long i = 0; i < n; i++) {
		probe_locked(&v);
		v = probe_plain_b(probe_plain_a(v)) & 0xffff;
	}
	return v < 0;
}
