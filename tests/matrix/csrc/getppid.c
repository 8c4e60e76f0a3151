/*
 * getppid: the cost of an unrelated system call, the tax a tracer puts on
 * every system call of the machine (a program on raw_syscalls or on the
 * syscall entry runs for this one too). Calls getppid(2) N times (argv[1],
 * default 1000000) through syscall(2), so no C library caching can skip the
 * kernel, and prints the mean nanoseconds per call.
 *
 * Built static (gcc -static) for the busybox guests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	struct timespec a, b;

	if (n <= 0) {
		fprintf(stderr, "usage: getppid [CALLS>0]\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
