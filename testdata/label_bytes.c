/* label_bytes: a USDT string argument that is not valid UTF-8, for the
 * exporter's label values (exporter/labels_test.go builds it).
 *
 *   label:str  (const char *s, long round): "bad" passes "ok\xff\xfebad",
 *              "good" passes "good"
 *
 * Driven over stdin as fixture_driver.h says. */
#include <string.h>
#include <sys/sdt.h>

#include "fixture_driver.h"

static const char bad[] = "ok\xff\xfe" "bad";
static const char good[] = "good";

static int fire(const char *probe, long r, int verbose)
{
	const char *s;

	if (!strcmp(probe, "bad"))
		s = bad;
	else if (!strcmp(probe, "good"))
		s = good;
	else
		return -1;
	__asm__ __volatile__("" : "+r"(s));
	STAP_PROBE2(label, str, s, r);
	if (verbose) {
		long long v[] = {(long long)r};
		report(probe, 1, v);
	}
	return 0;
}
