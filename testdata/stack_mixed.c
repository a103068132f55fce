/* stack_mixed: the mixed-code fixture of the stack tests, driven by
 * fixture_driver.h's commands: main -> run -> fire -> mid_call
 * (libstack_mid.so, built without frame pointers) -> leaf, once per
 * round. This file is built with frame pointers, no inlining and no tail
 * calls (as stack_chain), so that its frames have frame records and the
 * library's between them has none.
 *
 *   mixed     one call of mid_call (which calls leaf once) per round */
#include "fixture_driver.h"

void mid_call(void (*fn)(long), long n);

volatile long stack_mixed_sink;

__attribute__((noinline)) void leaf(long r)
{
	stack_mixed_sink += r;
}

static __attribute__((noinline)) int fire(const char *probe, long r, int verbose)
{
	if (strcmp(probe, "mixed"))
		return -1;
	mid_call(leaf, 1);
	if (verbose)
		printf("hit mixed %ld\n", r);
	return 0;
}
