/* libstack_mid.so: a library built without frame pointers
 * (-fomit-frame-pointer) between stack_paths's main and its leaf: the
 * mixed-code case of the stack tests. mid_call keeps a frame of its own
 * (it saves registers and calls in a loop) without a frame record. */
volatile long stack_mid_sink;

__attribute__((noinline)) void mid_call(void (*fn)(long), long n)
{
	for (long i = 0; i < n; i++) {
		fn(i);
		stack_mid_sink += i;
	}
}
