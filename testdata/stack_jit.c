/* stack_jit: a JIT-like frame in a stack, for probekit's stack walk.
 * Run as
 *
 *   stack_jit N    calls N times main -> run_jit -> jit_trampoline -> leaf
 *
 * then exits 0, leaving /tmp/perf-PID.map (a JIT's perf map) behind.
 *
 * jit_trampoline is machine code copied into an anonymous executable
 * mapping, as a JIT emits it: no ELF file, no CFI, and a frame record
 * (push %rbp; mov %rsp,%rbp), as V8 and HotSpot with
 * -XX:+PreserveFramePointer keep one. It is named in /tmp/perf-PID.map,
 * one "START SIZE NAME" line in hex (the format of perf's
 * tools/perf/Documentation/jit-interface.txt). The C code is built
 * without frame pointers: a walk through it uses CFI, through the
 * trampoline frame records. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

volatile long sink;

__attribute__((noipa)) void leaf(void)
{
	sink++;
}

typedef void (*jit_fn)(void (*callee)(void));

/* x86-64: push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret. */
static const unsigned char trampoline[] = { 0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3 };

__attribute__((noipa)) void run_jit(jit_fn f)
{
	f(leaf);
	sink++; /* no tail call: run_jit stays on the stack */
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1;
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *code = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char path[64];
	FILE *map;

	if (code == MAP_FAILED)
		return 1;
	memcpy(code, trampoline, sizeof(trampoline));
	if (mprotect(code, page, PROT_READ | PROT_EXEC))
		return 1;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	map = fopen(path, "w");
	if (!map)
		return 1;
	fprintf(map, "%lx %zx jit_trampoline\n", (unsigned long)code, sizeof(trampoline));
	fclose(map);
	for (long i = 0; i < n; i++)
		run_jit((jit_fn)code);
	return 0;
}
