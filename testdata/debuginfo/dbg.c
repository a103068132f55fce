/* dbg: the C fixture of the debuginfo tests, built with -g -O2 and then
 * split: its debug file (objcopy --only-keep-debug) holds the DWARF and
 * the full .symtab, the stripped program only .dynsym.
 *
 * scale_static is a static function, kept out of line: it exists only in
 * .symtab, so a stripped build names it only through its debug file.
 * add_inline is always inlined into compute.
 *
 *   fixture prints   "ready PID"
 *   test writes      "run N"          compute(N) is called; prints "result R"
 *   test writes      "quit" (or EOF)  exit 0
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline __attribute__((always_inline)) int add_inline(int a, int b)
{
	return a + b * 3;
}

__attribute__((noinline)) static int scale_static(int v)
{
	__asm__ volatile("" ::: "memory");
	return v * 7 + 1;
}

__attribute__((noinline)) int compute(int n)
{
	int r = 0;
	for (int i = 0; i < n; i++)
		r = add_inline(r, scale_static(i));
	return r;
}

int main(void)
{
	char line[128];
	int n;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d\n", (int)getpid());
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "quit", 4) == 0)
			break;
		if (sscanf(line, "run %d", &n) == 1)
			printf("result %d\n", compute(n));
		else
			printf("error bad command\n");
	}
	return 0;
}
