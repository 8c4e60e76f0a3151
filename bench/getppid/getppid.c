// getppid: the cost of a system call no tracer follows. Times N getppid(2)
// calls (raw syscalls: the C library may cache nothing here, but the
// system call is made either way) and prints nanoseconds per call. make
// bench runs it with and without fspair_exporter and libbpf-tools loaded:
// a syscall tracepoint enabled anywhere slows every such call on the host.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 5000000;
	struct timespec a, b;

	if (n <= 0) {
		fprintf(stderr, "usage: getppid [calls > 0]\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
