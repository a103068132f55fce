/* arm64_chain: the arm64 fixture of package unwind's tests, built
 * -static -O2 -fomit-frame-pointer -fno-inline
 * -fno-optimize-sibling-calls and run under qemu-aarch64 in user mode.
 * The call chain main -> chain_a -> chain_b -> chain_c -> probe_point
 * stops at probe_point's first instruction with the registers a uprobe
 * on it would see: pc, sp, x29 and x30 (the link register, holding
 * the return address into chain_c, not yet stored). probe_point
 * records them, then calls dump, which writes them and the stack from
 * the recorded sp up to the environment strings' pointers (above
 * _start's frame) to standard output:
 *
 *   pc, sp, x29, x30 (8 bytes each, little-endian), length (8 bytes),
 *   then length bytes of stack.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

uint64_t captured[4];
volatile long arm64_chain_sink;

void probe_point(long r);

/* probe_point's first instructions store the registers without
 * touching sp, x29 or x30; then it saves its frame record and calls
 * dump. Its CFI is given by hand: the CFA is sp at entry (no rule for
 * x30, which holds the return address) until the stp. */
__asm__(
	".text\n"
	".global probe_point\n"
	".type probe_point, %function\n"
	"probe_point:\n"
	".cfi_startproc\n"
	"adrp x9, captured\n"
	"add x9, x9, :lo12:captured\n"
	"adr x10, probe_point\n"
	"str x10, [x9]\n"
	"mov x10, sp\n"
	"str x10, [x9, 8]\n"
	"str x29, [x9, 16]\n"
	"str x30, [x9, 24]\n"
	"stp x29, x30, [sp, -16]!\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset 29, -16\n"
	".cfi_offset 30, -8\n"
	"bl dump\n"
	"ldp x29, x30, [sp], 16\n"
	".cfi_restore 30\n"
	".cfi_restore 29\n"
	".cfi_def_cfa_offset 0\n"
	"ret\n"
	".cfi_endproc\n"
	".size probe_point, .-probe_point\n");

static void put(const void *p, size_t n)
{
	const char *b = p;
	while (n > 0) {
		ssize_t w = write(1, b, n);
		if (w <= 0)
			_exit(3);
		b += w;
		n -= (size_t)w;
	}
}

void dump(void)
{
	uint64_t sp = captured[1];
	uint64_t top = (uint64_t)(uintptr_t)environ;
	uint64_t n = top > sp ? top - sp : 0;
	if (n > 65536)
		n = 65536;
	put(captured, sizeof(captured));
	put(&n, sizeof(n));
	put((const void *)(uintptr_t)sp, n);
}

__attribute__((noinline)) void chain_c(long r)
{
	probe_point(r);
	arm64_chain_sink += 3;
}

__attribute__((noinline)) void chain_b(long r)
{
	chain_c(r);
	arm64_chain_sink += 1;
}

__attribute__((noinline)) void chain_a(long r)
{
	chain_b(r);
	arm64_chain_sink += 2;
}

int main(int argc, char **argv)
{
	(void)argv;
	chain_a(argc);
	return 0;
}
