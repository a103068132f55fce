/* The semaphore-gated probe of usdt_sample, in its own translation unit:
 * sys/sdt.h records a semaphore for every probe of a unit compiled with
 * _SDT_HAS_SEMAPHORES, and the other probes must have none. */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <sys/sdt.h>

/* The counter a tracer raises; the name is fixed by sys/sdt.h. */
__extension__ unsigned short sample_sema_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));

int sample_sema_fire(long round, int verbose)
{
	if (sample_sema_semaphore) {
		/* An "expensive" argument only computed when enabled. */
		long cost = round * 3 + 1;
		STAP_PROBE2(sample, sema, round, cost);
		if (verbose)
			printf("hit sema %ld %ld\n", round, cost);
		return 1;
	}
	if (verbose)
		printf("skip sema\n");
	return 0;
}
