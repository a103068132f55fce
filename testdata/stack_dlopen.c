/* stack_dlopen: the stack tests' case of a library loaded after the
 * start: on its first round "dl" dlopens libstack_mid.so (built without
 * frame pointers, next to this program), then each round calls its
 * mid_call, which calls leaf back: main -> run -> fire -> mid_call ->
 * leaf. Built with frame pointers, no inlining and no tail calls (as
 * stack_chain).
 *
 *   dl        one call of mid_call (which calls leaf once) per round */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <unistd.h>

#include "fixture_driver.h"

volatile long stack_dlopen_sink;

__attribute__((noinline)) void leaf(long r)
{
	stack_dlopen_sink += r;
}

static void (*mid_call)(void (*)(long), long);

static __attribute__((noinline)) int fire(const char *probe, long r, int verbose)
{
	if (strcmp(probe, "dl"))
		return -1;
	if (!mid_call) {
		char exe[PATH_MAX], lib[PATH_MAX + 32];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

		if (n < 0)
			return -1;
		exe[n] = 0;
		snprintf(lib, sizeof(lib), "%s/libstack_mid.so", dirname(exe));
		void *h = dlopen(lib, RTLD_NOW);

		if (!h || !(mid_call = (void (*)(void (*)(long), long))dlsym(h, "mid_call")))
			return -1;
	}
	mid_call(leaf, 1);
	stack_dlopen_sink += 1;
	if (verbose)
		printf("hit dl %ld\n", r);
	return 0;
}

