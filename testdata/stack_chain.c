/* stack_chain: the C fixture of the stack tests: a known call chain
 * main -> run -> fire -> chain_a -> chain_b -> chain_c -> chain_end,
 * built as a PIE with frame pointers (-fno-omit-frame-pointer), no
 * inlining (-fno-inline) and no tail calls (-fno-optimize-sibling-calls),
 * so that every function but the leaf chain_end keeps its frame (GCC
 * omits a leaf's): chain_c starts with push %rbp, chain_end does not.
 * chain_c fires the USDT probe stack:leaf, inside its frame.
 *
 *   chain     one call of chain_a per round (fixture_driver.h)
 */
#include <sys/sdt.h>

#include "fixture_driver.h"

/* Each adds to a global so that the calls stay (no pure-function
 * folding) and each call is followed by more code. */
volatile long stack_chain_sink;

__attribute__((noinline)) void chain_end(long r)
{
	stack_chain_sink += r;
}

__attribute__((noinline)) void chain_c(long r)
{
	STAP_PROBE1(stack, leaf, r);
	chain_end(r);
	stack_chain_sink += 3;
}

__attribute__((noinline)) void chain_b(long r)
{
	chain_c(r);
	stack_chain_sink += 1;
}

__attribute__((noinline)) void chain_a(long r)
{
	chain_b(r);
	stack_chain_sink += 2;
}

static __attribute__((noinline)) int fire(const char *probe, long r, int verbose)
{
	if (strcmp(probe, "chain"))
		return -1;
	chain_a(r);
	if (verbose)
		printf("hit chain %ld\n", r);
	return 0;
}
