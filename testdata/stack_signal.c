/* stack_signal: the signal-frame fixture of the stack tests, driven by
 * fixture_driver.h's commands: main -> run -> fire -> raise (libc), and
 * the SIGUSR1 that raise sends runs handler -> in_handler on the same
 * stack, above the kernel's signal frame and glibc's __restore_rt. Built
 * without frame pointers, inlining or tail calls (as stack_chain_nofp).
 *
 *   signal    one raise(SIGUSR1) per round */
#include <signal.h>

#include "fixture_driver.h"

volatile long stack_signal_sink;

__attribute__((noinline)) void in_handler(long r)
{
	stack_signal_sink += r;
}

static __attribute__((noinline)) void handler(int sig)
{
	in_handler(sig);
	stack_signal_sink += 1;
}

static __attribute__((noinline)) int fire(const char *probe, long r, int verbose)
{
	struct sigaction sa = { .sa_handler = handler };

	if (strcmp(probe, "signal"))
		return -1;
	/* Every round, so that raise has one call site. */
	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	if (verbose)
		printf("hit signal %ld\n", r);
	return 0;
}
