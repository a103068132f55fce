/* params: the C fixture of probekit's named arguments (DWARF formal
 * parameters at a function's entry). Run as
 *
 *   params N     N rounds; round r (0 <= r < N) calls
 *                  emit(r, "x")                              returns r + 1
 *                  mix(r, -5000000000, 4000000000u, &pt, "probekit-params", &pt)
 *                      pt = {3, -4}                          returns r + 7
 *                  byval(pt, big, 2.5, buf)  big = {10, 20, 30}
 *                                                            returns 66
 *                  label(r)                                  returns "even" or "odd"
 *                  shapes(twice, argv, &grid, 200, GREEN, &w, 77, &vs, 1, 0.5f)
 *                                                            returns 81
 *
 * then exits 0. noipa keeps GCC from specialising a function for its
 * constant arguments, dropping an unused parameter or inlining a call:
 * the functions keep the System V calling convention their DWARF
 * describes. The strings are on the stack, whose page is present (a BPF
 * program cannot fault in a .rodata page the process has not touched);
 * label's results are in .rodata, read by the program before it returns
 * one. */
#include <stdlib.h>
#include <string.h>

struct point {
	int x, y;
};

/* More than 16 bytes: passed in memory, on the caller's stack. */
struct big {
	long a, b, c;
};

volatile long sink;

__attribute__((noipa)) int emit(int i, const char *name)
{
	sink += name[0];
	return i + 1;
}

__attribute__((noipa)) long mix(int i, long l, unsigned int u, void *p, const char *s, struct point *pt)
{
	sink += l + u + s[0] + (long)p;
	return i + pt->x - pt->y;
}

__attribute__((noipa)) long byval(struct point pt, struct big b, double d, char *buf)
{
	sink += b.a + b.b + (long)d + buf[0];
	return pt.x + b.c + (long)(d * 10) + 8;
}

static const char *const labels[] = {"even", "odd"};

__attribute__((noipa)) const char *label(unsigned long r)
{
	const char *s = labels[r & 1];

	sink += s[0];
	return s;
}

enum color { RED, GREEN };
union word {
	int i;
	float f;
};
typedef unsigned long ulong_t;

/* Types to spell, and more integer parameters than registers: n, vs and
 * ok are passed on the stack. */
__attribute__((noipa)) int shapes(int (*fn)(int), char *const *argv, int (*grid)[4], unsigned char c,
				  enum color col, union word *w, ulong_t n, const volatile short *vs, _Bool ok, float f)
{
	sink += (long)argv + (*grid)[1] + c + w->i + *vs + (long)f;
	return fn(col) + (int)n + ok + 1;
}

__attribute__((noipa)) int twice(int v)
{
	return 2 * v;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 1;
	char x[] = "x";
	char text[] = "probekit-params";
	char buf[] = "buffer";
	struct point pt = {3, -4};
	struct big big = {10, 20, 30};
	int grid[4] = {1, 2, 3, 4};
	union word w = {.i = 5};
	volatile short vs = 9;

	sink += labels[0][0] + labels[1][0];
	for (long r = 0; r < rounds; r++) {
		emit(r, x);
		mix(r, -5000000000L, 4000000000u, &pt, text, &pt);
		byval(pt, big, 2.5, buf);
		label(r);
		shapes(twice, argv, &grid, 200, GREEN, &w, 77, &vs, 1, 0.5f);
	}
	return 0;
}
