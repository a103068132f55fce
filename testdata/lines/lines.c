/* DWARF line tables and inlined frames: built with -g -O2 (DWARF 4 and 5)
 * by build.sh. inner is inlined into mid, mid into outer, scale (from a
 * header) into inner; leaf is not inlined. */
#include <stdio.h>
#include <stdlib.h>
#include "lines_inline.h"

volatile int sink;

__attribute__((noinline)) int leaf(int x)
{
	sink = x;
	return x + 1;
}

static inline __attribute__((always_inline)) int inner(int x)
{
	int y = scale(x);
	return leaf(y) * 2;
}

static inline __attribute__((always_inline)) int mid(int x)
{
	int r = inner(x + 1);
	return r + leaf(r);
}

__attribute__((noinline)) int outer(int x)
{
	int a = mid(x);
	sink = a;
	return a + mid(a);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1;
	printf("%d\n", outer(n));
	return 0;
}
