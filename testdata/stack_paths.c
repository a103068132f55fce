/* stack_paths: the fixture of the stack-counting tests, which launch it
 * and count its stacks until it exits (right after its last hit).
 *
 *   stack_paths HOT COLD   main -> hot -> emit -> leaf, HOT times, then
 *                          main -> cold -> emit -> leaf, COLD times
 *   stack_paths mixed N    main -> mid_call (libstack_mid.so, built
 *                          without frame pointers) -> leaf, N times
 *
 * then writes "done\n" with write(2) and exits. Built with frame
 * pointers, no inlining and no tail calls (as stack_chain), so that the
 * kernel's frame-pointer walk sees every frame of this file; each loop
 * calls from one call site, so each path is one distinct stack. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void mid_call(void (*fn)(long), long n);

volatile long stack_paths_sink;

__attribute__((noinline)) void leaf(long r)
{
	stack_paths_sink += r;
}

__attribute__((noinline)) void emit(long r)
{
	leaf(r);
	stack_paths_sink += 1;
}

__attribute__((noinline)) void hot(long n)
{
	for (long i = 0; i < n; i++)
		emit(i);
	stack_paths_sink += 2;
}

__attribute__((noinline)) void cold(long n)
{
	for (long i = 0; i < n; i++)
		emit(i);
	stack_paths_sink += 3;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "mixed") == 0) {
		mid_call(leaf, atol(argv[2]));
	} else if (argc == 3) {
		hot(atol(argv[1]));
		cold(atol(argv[2]));
	} else {
		return 2;
	}
	if (write(1, "done\n", 5) != 5)
		return 1;
	return 0;
}
