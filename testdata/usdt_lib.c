/* libusdt_lib.so: a shared library whose probe sample:shared also exists
 * in the program that loads it (usdt_lib_user.c), so a tracer must tell
 * the two objects apart. */
#include <stdio.h>
#include <sys/sdt.h>

void usdt_lib_fire_shared(long round, int verbose)
{
	/* The first argument says which object fired: 2 = library. */
	STAP_PROBE2(sample, shared, 2, round);
	if (verbose)
		printf("hit shared 2 %ld\n", round);
}

void usdt_lib_fire_libonly(long round, int verbose)
{
	STAP_PROBE1(sample, libonly, round * 7);
	if (verbose)
		printf("hit libonly %ld\n", round * 7);
}
