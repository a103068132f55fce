/* strings: the fixture of probekit's string arguments (docs/strings.md).
 * Run as
 *
 *   strings N    N rounds; round r (0 <= r < N):
 *                  drops its mapping of cold_label's page
 *                  (MADV_DONTNEED), so that no page table maps it, then
 *                  calls cold(r, cold_label)           returns r + 1
 *                  calls raw(r, text)                  returns r + 2
 *                    text = "x\x1b[2Jy\xffz", on the stack
 *
 * then exits 0. Its comm is "c\x1b[2Jm\xff\nz" (prctl PR_SET_NAME).
 *
 * cold_label is a string literal alone in its .rodata page: at each call
 * of cold the page is in the page cache (the file is) but not mapped in
 * the process, which is the state of a literal at a function's first
 * call. A non-faulting read of it (bpf_probe_read_user_str) fails; cold
 * then touches it, which maps it again. noipa keeps GCC from inlining
 * the calls or dropping the arguments. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#define PAGE 4096

volatile long sink;

static const char cold_label[PAGE] __attribute__((aligned(PAGE))) = "cold-rodata";

__attribute__((noipa)) int cold(int r, const char *label)
{
	sink += label[0];
	return r + 1;
}

__attribute__((noipa)) int raw(int r, const char *text)
{
	sink += text[0];
	return r + 2;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 1;
	char text[] = "x\x1b[2Jy\xffz";

	prctl(PR_SET_NAME, (unsigned long)"c\x1b[2Jm\xff\nz", 0, 0, 0);
	for (long r = 0; r < rounds; r++) {
		madvise((void *)((uintptr_t)cold_label & ~(uintptr_t)(PAGE - 1)), PAGE, MADV_DONTNEED);
		cold(r, cold_label);
		raw(r, text);
	}
	return 0;
}
