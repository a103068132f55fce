/* follow_fork: forks N children (argument 1, default 2000) that all stay
 * alive until the last one is started, then each fires follow:hit K times
 * (argument 2, default 1) with its index and exits. The parent reaps them
 * and prints N*K, the hits fired. A tracer that follows the tree has N
 * live processes at once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/sdt.h>
#include <sys/wait.h>

/* child waits until every write end of the gate is closed, then fires. */
static int child(long index, long k, int gate)
{
	char c;
	long j;

	while (read(gate, &c, 1) < 0 && errno == EINTR)
		;
	for (j = 0; j < k; j++)
		STAP_PROBE1(follow, hit, index);
	return 0;
}

int main(int argc, char **argv)
{
	long n, k, i;
	int gate[2], status, bad = 0;

	n = argc > 1 ? atol(argv[1]) : 2000;
	k = argc > 2 ? atol(argv[2]) : 1;
	if (pipe(gate) != 0) {
		perror("pipe");
		return 2;
	}
	for (i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			perror("fork");
			return 2;
		}
		if (pid == 0) {
			close(gate[1]);
			_exit(child(i, k, gate[0]));
		}
	}
	close(gate[1]);
	close(gate[0]);
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			bad++;
	printf("%ld\n", n * k);
	return bad != 0;
}
