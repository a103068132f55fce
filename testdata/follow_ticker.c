/* follow_ticker: fires follow:tick every 100 microseconds for the number
 * of milliseconds given as its argument, then prints how many times it
 * fired. package follow's benchmarks count the hits a tracer missed in
 * processes of a given lifetime. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/sdt.h>

static long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	long life_ms = argc > 1 ? atol(argv[1]) : 10;
	long end = now_us() + life_ms * 1000, n = 0;
	struct timespec gap = {0, 100 * 1000};

	do {
		STAP_PROBE1(follow, tick, n);
		n++;
		nanosleep(&gap, NULL);
	} while (now_us() < end);
	printf("%ld\n", n);
	return 0;
}
