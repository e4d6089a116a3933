/* SPDX-License-Identifier: MIT */
/*
 * The daemon's log line and its clock: kept out of main.c so that what links
 * the daemon without its main (the fuzzers) logs and tells time as it does.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "kvpoold.h"

void kvpd_logf(const char *fmt, ...)
{
	va_list ap;

	fputs("kvpoold: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

uint64_t kvpd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
