/* mini: the fixture of the MiniDebugInfo tests, built -O2 without debug
 * information, stripped, with a .gnu_debugdata section as Fedora's
 * find-debuginfo makes it: an xz-compressed ELF file whose .symtab holds
 * the functions .dynsym lacks. mini_static is one: a stripped build names
 * it only through that section.
 *
 *   mini    fire: mini_static(round) once per round (fixture_driver.h)
 */
#include "../fixture_driver.h"

volatile long mini_sink;

__attribute__((noinline)) static long mini_static(long r)
{
	__asm__ volatile("" ::: "memory");
	mini_sink += r;
	return r * 3;
}

static int fire(const char *probe, long r, int verbose)
{
	if (strcmp(probe, "mini"))
		return -1;
	long v = mini_static(r);
	if (verbose)
		printf("hit mini %ld %ld\n", r, v);
	return 0;
}
