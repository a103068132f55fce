/* recurse: the fixture of the exporter's latency pairing. USDT probes
 * around a recursive function, each level with a known time of its own.
 *
 *   nest   one call of nest(3) per round: nest(d) fires recurse:enter(d),
 *          calls nest(d - 1) when d > 0, sleeps 50 ms, fires
 *          recurse:leave(d). Level d lasts (d + 1) * 50 ms: 50, 100, 150
 *          and 200 ms.
 *   deep   one call of deep(69) per round: 70 levels of recurse:enter
 *          and recurse:leave, no sleep.
 *
 * noipa keeps GCC from turning the recursion into a loop or inlining it.
 */
#include <sys/sdt.h>
#include <time.h>

#include "fixture_driver.h"

volatile long recurse_sink;

__attribute__((noipa)) void nest(long d)
{
	struct timespec ts = {0, 50 * 1000 * 1000};

	STAP_PROBE1(recurse, enter, d);
	if (d > 0)
		nest(d - 1);
	while (nanosleep(&ts, &ts))
		;
	STAP_PROBE1(recurse, leave, d);
}

__attribute__((noipa)) void deep(long d)
{
	STAP_PROBE1(recurse, enter, d);
	if (d > 0)
		deep(d - 1);
	recurse_sink += d;
	STAP_PROBE1(recurse, leave, d);
}

static int fire(const char *probe, long r, int verbose)
{
	(void)r;
	if (!strcmp(probe, "nest"))
		nest(3);
	else if (!strcmp(probe, "deep"))
		deep(69);
	else
		return -1;
	if (verbose)
		printf("hit %s\n", probe);
	return 0;
}
