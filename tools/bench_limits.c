/* SPDX-License-Identifier: MIT */
/*
 * kvbench limits: what this machine allows two processes, with no kvpool in
 * between: a busy-polled shared-memory round trip and an eventfd sleep/wake
 * round trip. Every kvpool transport figure should be read against these.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvbench.h"

struct pingpong {
	_Alignas(64) uint64_t ping;
	_Alignas(64) uint64_t pong;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void bench_percentiles(uint64_t *samples, size_t n, struct bench_pct *out)
{
	qsort(samples, n, sizeof(*samples), cmp_u64);
	out->median = samples[n / 2];
	out->p99 = samples[n * 99 / 100];
}

static int ring_rtt(unsigned iters, struct bench_pct *out)
{
	struct pingpong *pp = mmap(NULL, sizeof(*pp), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t *samples = calloc(iters, sizeof(*samples));
	pid_t child;

	if (pp == MAP_FAILED || !samples)
		return -ENOMEM;
	child = fork();
	if (child == 0) {
		for (uint64_t i = 1; i <= iters; i++) {
			while (__atomic_load_n(&pp->ping, __ATOMIC_ACQUIRE) != i)
				;
			__atomic_store_n(&pp->pong, i, __ATOMIC_RELEASE);
		}
		_exit(0);
	}
	for (uint64_t i = 1; i <= iters; i++) {
		uint64_t start = bench_now_ns();

		__atomic_store_n(&pp->ping, i, __ATOMIC_RELEASE);
		while (__atomic_load_n(&pp->pong, __ATOMIC_ACQUIRE) != i)
			;
		samples[i - 1] = bench_now_ns() - start;
	}
	waitpid(child, NULL, 0);
	bench_percentiles(samples, iters, out);
	free(samples);
	munmap(pp, sizeof(*pp));
	return 0;
}

static int eventfd_rtt(unsigned iters, struct bench_pct *out)
{
	int to_child = eventfd(0, EFD_CLOEXEC), to_parent = eventfd(0, EFD_CLOEXEC);
	uint64_t *samples = calloc(iters, sizeof(*samples)), v = 1;
	pid_t child;

	if (to_child < 0 || to_parent < 0 || !samples)
		return -ENOMEM;
	child = fork();
	if (child == 0) {
		for (unsigned i = 0; i < iters; i++)
			if (read(to_child, &v, sizeof(v)) != sizeof(v) ||
			    write(to_parent, &v, sizeof(v)) != sizeof(v))
				_exit(1);
		_exit(0);
	}
	for (unsigned i = 0; i < iters; i++) {
		uint64_t start = bench_now_ns();

		if (write(to_child, &v, sizeof(v)) != sizeof(v) ||
		    read(to_parent, &v, sizeof(v)) != sizeof(v))
			break;
		samples[i] = bench_now_ns() - start;
	}
	waitpid(child, NULL, 0);
	bench_percentiles(samples, iters, out);
	free(samples);
	close(to_child);
	close(to_parent);
	return 0;
}

int bench_measure_limits(struct bench_limits *l)
{
	/* A discarded first pass: the cores' clocks ramp up under the first spinning. */
	return ring_rtt(200000, &l->ring) ?: ring_rtt(200000, &l->ring) ?:
	       eventfd_rtt(20000, &l->eventfd);
}

void bench_print_limits(const struct bench_limits *l)
{
	printf("%-44s median %9.0f ns  p99 %9.0f ns\n", "limit: shared-memory ring round trip (spin)",
	       (double)l->ring.median, (double)l->ring.p99);
	printf("%-44s median %9.0f ns  p99 %9.0f ns\n", "limit: eventfd sleep/wake round trip",
	       (double)l->eventfd.median, (double)l->eventfd.p99);
}

int bench_limits(int argc, char **argv)
{
	struct bench_limits l;
	int ret;

	(void)argv;
	if (argc > 1) {
		fputs("kvbench limits: takes no arguments\n", stderr);
		return 2;
	}
	bench_print_machine();
	ret = bench_measure_limits(&l);
	if (ret) {
		fprintf(stderr, "kvbench limits: %s\n", strerror(-ret));
		return 1;
	}
	bench_print_limits(&l);
	return 0;
}
