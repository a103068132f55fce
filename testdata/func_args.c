/* func_args: the C fixture of probekit trace's function probes. Calls
 * with known arguments and results, made as soon as it starts, so that a
 * trace that launches it sees every one; then it exits 0.
 *
 *   func_args N     N rounds; round r (0 <= r < N) calls
 *                     sum6(r, -2, 300, -40000, 5000000000, -6000000000)
 *                         returns r - 1000039702
 *                     count_char("probekit-func-args", '-')
 *                         returns 2
 *                     malloc(4242 + r), then free (libc)
 *
 * noipa keeps GCC from specialising the functions for their constant
 * arguments (a .constprop clone would take fewer registers) or inlining
 * them; keep() makes each block used, so the malloc/free pair is not
 * removed. The string count_char reads is on the stack, whose page is
 * present: a BPF program cannot fault in a page of .rodata that the
 * process has not touched yet.
 */
#include <stdlib.h>

__attribute__((noipa)) long sum6(long a, long b, long c, long d, long e, long f)
{
	return a + b + c + d + e + f;
}

__attribute__((noipa)) int count_char(const char *s, int c)
{
	int n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}

__attribute__((noipa)) void keep(void *p)
{
	*(volatile char *)p = 1;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 1;
	char text[] = "probekit-func-args";

	for (long r = 0; r < rounds; r++) {
		void *p;

		sum6(r, -2, 300, -40000, 5000000000L, -6000000000L);
		count_char(text, '-');
		p = malloc(4242 + r);
		if (!p)
			return 1;
		keep(p);
		free(p);
	}
	return 0;
}
