/* latency: the fixture of probekit trace --latency. Each level of a
 * recursion lasts a known time, so that its latency falls in a known
 * log2 bucket of nanoseconds.
 *
 *   rec    one call of lat_rec(3) per round: 4 levels, lat_rec(d) fires
 *          lat:start(d), calls lat_rec(d - 1) when d > 0, sleeps, fires
 *          lat:done(d). Level d lasts 1.125 * 2^(23 + d) ns at least
 *          (9.4, 18.9, 37.7 and 75.5 ms): nanosleep never returns
 *          early, and the level stays in bucket [2^(23 + d),
 *          2^(24 + d)) unless its wakeups come 7.3 ms late or more.
 *          lat_rec is a function of its own (noipa), for uprobe
 *          latency; the USDT pair nests 4 deep.
 *   deep   one call of lat_deep(39) per round: 40 nested levels of
 *          lat:start and lat:done without sleeping (deeper than a
 *          32-frame stack).
 *   orphan lat:done alone, once per round: an end without a start.
 *   pair   lat:start(round) then lat:done(round), nothing between: the
 *          benchmark's hit pair.
 *   fn     one call of lat_fn(round), which returns at once: the
 *          benchmark's function latency.
 *
 * noipa keeps GCC from turning the recursion into a loop or inlining it.
 *
 * On a loaded machine a sleeping thread of the default policy wakes
 * late by tens of milliseconds (seen at a load average of 28 on two
 * cores), which moves levels to the next bucket. So the fixture asks for
 * SCHED_FIFO and a 1 ns timer slack (root only; without them it runs as
 * it is): a FIFO thread runs as soon as its timer fires.
 */
#include <sched.h>
#include <sys/prctl.h>
#include <sys/sdt.h>
#include <time.h>

#include "fixture_driver.h"

volatile long lat_sink;

static void sleep_ns(long ns)
{
	struct timespec ts = {ns / 1000000000, ns % 1000000000};

	while (nanosleep(&ts, &ts))
		;
}

__attribute__((constructor)) static void realtime(void)
{
	struct sched_param sp = {.sched_priority = 10};

	sched_setscheduler(0, SCHED_FIFO, &sp);
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

/* Level d's own sleep: level 0 sleeps all its 1.125 * 2^23 ns; level
 * d > 0 adds 1.125 * 2^(23 + d) - 1.125 * 2^(22 + d) = 1.125 * 2^(22 + d)
 * = 9 * 2^(19 + d) to its callee's time. */
__attribute__((noipa)) void lat_rec(long d)
{
	long own = d == 0 ? 9L << 20 : 9L << (19 + d);

	STAP_PROBE1(lat, start, d);
	if (d > 0)
		lat_rec(d - 1);
	sleep_ns(own);
	STAP_PROBE1(lat, done, d);
}

__attribute__((noipa)) void lat_deep(long d)
{
	STAP_PROBE1(lat, start, d);
	if (d > 0)
		lat_deep(d - 1);
	lat_sink += d;
	STAP_PROBE1(lat, done, d);
}

__attribute__((noipa)) long lat_fn(long r)
{
	lat_sink += r;
	return r;
}

static int fire(const char *probe, long r, int verbose)
{
	if (!strcmp(probe, "rec"))
		lat_rec(3);
	else if (!strcmp(probe, "deep"))
		lat_deep(39);
	else if (!strcmp(probe, "orphan"))
		STAP_PROBE1(lat, done, r);
	else if (!strcmp(probe, "pair")) {
		STAP_PROBE1(lat, start, r);
		STAP_PROBE1(lat, done, r);
	} else if (!strcmp(probe, "fn"))
		lat_fn(r);
	else
		return -1;
	if (verbose)
		printf("hit %s %ld\n", probe, r);
	return 0;
}
