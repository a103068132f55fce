/* usdt_lib_user: loads libusdt_lib.so and has its own sample:shared.
 *
 *   shared    fires the executable's sample:shared (first argument 1),
 *             then the library's (first argument 2)
 *   libonly   the library's sample:libonly
 */
#include <sys/sdt.h>

#include "fixture_driver.h"

void usdt_lib_fire_shared(long round, int verbose);
void usdt_lib_fire_libonly(long round, int verbose);

static int fire(const char *probe, long r, int verbose)
{
	if (!strcmp(probe, "shared")) {
		STAP_PROBE2(sample, shared, 1, r);
		if (verbose)
			printf("hit shared 1 %ld\n", r);
		usdt_lib_fire_shared(r, verbose);
	} else if (!strcmp(probe, "libonly")) {
		usdt_lib_fire_libonly(r, verbose);
	} else {
		return -1;
	}
	return 0;
}
