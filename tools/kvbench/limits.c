/* SPDX-License-Identifier: MIT */
/*
 * kvbench limits: what this machine allows two processes, with no kvpool in
 * between: a busy-polled shared-memory round trip, and a sleep/wake round trip
 * by the mechanisms kvpool's sleep mode uses (the client rings an eventfd the
 * sleeping side waits for in epoll; the answer wakes a futex). Every kvpool
 * transport figure should be read against these.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvbench.h"

struct pingpong {
	_Alignas(64) uint64_t ping;
	_Alignas(64) uint64_t pong;
};

/*
 * As kvbench rtt places its client and daemon: the first core and the last.
 * A wake-up across cores costs several times one on the same core; left to
 * the scheduler, the figure would say where it put the two.
 */
static void pin_to(int which)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t set;

	if (n < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(which ? n - 1 : 0, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void unpin(void)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; c++)
		CPU_SET(c, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

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
	pin_to(0);
	child = fork();
	if (child == 0) {
		pin_to(1);
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
	unpin();
	bench_percentiles(samples, iters, out);
	free(samples);
	munmap(pp, sizeof(*pp));
	return 0;
}

/*
 * The wake-up round trip of kvpool's sleep mode: the client writes the
 * doorbell eventfd, which the daemon's side waits for in epoll_wait (as its
 * event loop does); the answer is a store and FUTEX_WAKE on a shared word the
 * client sleeps on in FUTEX_WAIT (as on the CQ tail).
 */
static int wake_rtt(unsigned iters, struct bench_pct *out)
{
	uint32_t *word = mmap(NULL, sizeof(*word), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			      -1, 0);
	int bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	uint64_t *samples = calloc(iters, sizeof(*samples)), v = 1;
	pid_t child;

	if (word == MAP_FAILED || bell < 0 || ep < 0 || !samples ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, bell, &ev))
		return -ENOMEM;
	pin_to(0);
	child = fork();
	if (child == 0) {
		pin_to(1);
		for (uint32_t i = 1; i <= iters; i++) {
			while (epoll_wait(ep, &ev, 1, -1) != 1)
				;
			if (read(bell, &v, sizeof(v)) != sizeof(v))
				_exit(1);
			__atomic_store_n(word, i, __ATOMIC_RELEASE);
			syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0);
		}
		_exit(0);
	}
	for (uint32_t i = 1; i <= iters; i++) {
		uint64_t start = bench_now_ns();

		if (write(bell, &v, sizeof(v)) != sizeof(v))
			break;
		while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != i)
			syscall(SYS_futex, word, FUTEX_WAIT, i - 1, NULL, NULL, 0);
		samples[i - 1] = bench_now_ns() - start;
	}
	waitpid(child, NULL, 0);
	unpin();
	bench_percentiles(samples, iters, out);
	free(samples);
	close(ep);
	close(bell);
	munmap(word, sizeof(*word));
	return 0;
}

int bench_measure_limits(struct bench_limits *l)
{
	/* A discarded first pass: the cores' clocks ramp up under the first spinning. */
	return ring_rtt(200000, &l->ring) ?: ring_rtt(200000, &l->ring) ?:
	       wake_rtt(20000, &l->wake);
}

void bench_print_limits(const struct bench_limits *l, bool json)
{
	const struct { const char *limit, *mechanism, *text; const struct bench_pct *p; } rows[] = {
		{ "ring", BENCH_RING_MECHANISM, "limit: shared-memory ring round trip (spin)", &l->ring },
		{ "wake", BENCH_WAKE_MECHANISM, "limit: sleep/wake round trip (" BENCH_WAKE_MECHANISM ")",
		  &l->wake },
	};

	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		json_object *j;

		if (!json) {
			printf("%-58s median %9.0f ns  p99 %9.0f ns\n", rows[i].text,
			       (double)rows[i].p->median, (double)rows[i].p->p99);
			continue;
		}
		j = bench_json_row();
		json_object_object_add(j, "limit", json_object_new_string(rows[i].limit));
		json_object_object_add(j, "mechanism", json_object_new_string(rows[i].mechanism));
		json_object_object_add(j, "median_ns", json_object_new_int64((int64_t)rows[i].p->median));
		json_object_object_add(j, "p99_ns", json_object_new_int64((int64_t)rows[i].p->p99));
		bench_json_line(j);
	}
}

int bench_limits(int argc, char **argv)
{
	struct bench_limits l;
	bool json = argc == 2 && !strcmp(argv[1], "--json");
	int ret;

	if (argc > 1 && !json) {
		fprintf(stderr, "kvbench limits: bad argument '%s'\n", argv[1]);
		return 2;
	}
	if (!json)
		bench_print_machine();
	ret = bench_measure_limits(&l);
	if (ret) {
		fprintf(stderr, "kvbench limits: %s\n", strerror(-ret));
		return 1;
	}
	bench_print_limits(&l, json);
	return 0;
}
