/* The command loop shared by probekit's fixture programs.
 *
 * A kernel test starts a fixture, attaches, then drives it over stdin so
 * that every hit happens after the attach:
 *
 *   fixture prints   "ready PID"
 *   test writes      "fire PROBE N"   fixture fires PROBE N times, printing
 *                                     "hit PROBE V1 V2 ..." per hit (the
 *                                     values passed, as the signed 64-bit
 *                                     value bpf_usdt_arg() yields) or
 *                                     "skip PROBE" when a semaphore gated it
 *                                     off, then "done"
 *   test writes      "loop PROBE N"   same without per-hit output, "done"
 *   test writes      "quit" (or EOF)  fixture exits 0
 *
 * With arguments "--loop PROBE N" it fires without reading stdin and exits
 * (overhead measurements).
 *
 * The including program defines fire(probe, round, verbose), returning
 * 0 when it knows the probe, -1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fire(const char *probe, long round, int verbose);

/* report prints one hit line; values are cast by the caller. */
static __attribute__((unused)) void
report(const char *probe, int n, const long long *v)
{
	printf("hit %s", probe);
	for (int i = 0; i < n; i++)
		printf(" %lld", v[i]);
	printf("\n");
}

static int run(const char *probe, long n, int verbose)
{
	for (long r = 0; r < n; r++)
		if (fire(probe, r, verbose) < 0)
			return -1;
	return 0;
}

int main(int argc, char **argv)
{
	char line[256], probe[128];
	long n;

	if (argc == 4 && strcmp(argv[1], "--loop") == 0)
		return run(argv[2], atol(argv[3]), 0) < 0 ? 2 : 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d\n", (int)getpid());
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "quit", 4) == 0)
			break;
		if (sscanf(line, "fire %127s %ld", probe, &n) == 2) {
			if (run(probe, n, 1) < 0)
				printf("error unknown probe %s\n", probe);
		} else if (sscanf(line, "loop %127s %ld", probe, &n) == 2) {
			if (run(probe, n, 0) < 0)
				printf("error unknown probe %s\n", probe);
		} else {
			printf("error bad command\n");
		}
		printf("done\n");
	}
	return 0;
}
