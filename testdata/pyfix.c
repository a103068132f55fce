/* pyfix.c: the library Python calls through ctypes in the tests of
 * package interp/python (and the stack tests that put Python frames
 * among native ones). pyfix_hit is the probed function; pyfix_call
 * calls back into Python, for a C -> Python -> C stack. */
__attribute__((noinline)) int pyfix_hit(int x)
{
	__asm__ volatile("" : : : "memory");
	return x + 1;
}

__attribute__((noinline)) int pyfix_call(int (*cb)(int), int x)
{
	int r = cb(x);

	__asm__ volatile("" : : : "memory");
	return r + 1;
}
