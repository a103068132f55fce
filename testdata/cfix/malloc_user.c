/* malloc_user: the C fixture for uprobe tests on libc's malloc and free.
 *
 * It mallocs known sizes on command, so a test can attach first, then
 * look for exactly those sizes among whatever else the process allocates:
 *
 *   fixture prints   "ready PID"
 *   test writes      "malloc SIZE N"  N blocks of SIZE bytes are allocated,
 *                                     touched, then freed; one line
 *                                     "ptr 0xADDR" per block (printed
 *                                     before any block is freed), then
 *                                     "done"
 *   test writes      "quit" (or EOF)  exit 0
 *
 * Built with -fcf-protection so that its own functions start with ENDBR64,
 * which the return-site scanner must step over (tests compare it with
 * objdump). classify() has several return paths for the same reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BLOCKS 4096

__attribute__((noinline)) int classify(long v)
{
	if (v < 0)
		return -1;
	if (v == 0)
		return 0;
	if (v > 1000)
		return 2;
	return 1;
}

static void *blocks[MAX_BLOCKS];

__attribute__((noinline)) int alloc_round(size_t size, long n)
{
	if (n < 0 || n > MAX_BLOCKS)
		return -1;
	for (long i = 0; i < n; i++) {
		blocks[i] = malloc(size);
		if (blocks[i] == NULL)
			return -1;
		memset(blocks[i], 0xa5, size);
	}
	/* Print every pointer before freeing any, so that no two blocks of a
	 * round share an address and each "ptr" line names one free(). */
	for (long i = 0; i < n; i++)
		printf("ptr %p\n", blocks[i]);
	for (long i = 0; i < n; i++)
		free(blocks[i]);
	return classify(n);
}

int main(void)
{
	char line[256];
	long size, n;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d\n", (int)getpid());
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "quit", 4) == 0)
			break;
		if (sscanf(line, "malloc %ld %ld", &size, &n) == 2 && size >= 0) {
			if (alloc_round((size_t)size, n) < 0)
				printf("error allocation failed\n");
		} else {
			printf("error bad command\n");
		}
		printf("done\n");
	}
	return 0;
}
