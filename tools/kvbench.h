/* SPDX-License-Identifier: MIT */
#ifndef KVPOOL_KVBENCH_H
#define KVPOOL_KVBENCH_H

#include <stdint.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Prints the machine line every benchmark starts with (cores, CPU model). */
void bench_print_machine(void);

int bench_core(int argc, char **argv);

#endif
