/* SPDX-License-Identifier: MIT */
#ifndef KVPOOL_KVBENCH_H
#define KVPOOL_KVBENCH_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A figure rounded to @decimals places, printed as such (json-c would print all 17 digits). */
json_object *bench_json_fixed(double v, int decimals);
/* A decimal @s (digits only: no sign, blank or base) in [min, max]: 0, else -EINVAL. */
int bench_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* A JSON row with what every row carries: "cores", the online cores. */
json_object *bench_json_row(void);
/* Prints @o as one line of JSON and drops it. */
int bench_json_line(json_object *o);

/*
 * A benchmark's usage error: "kvbench NAME: " @fmt (one %s, @arg), then where
 * the help is, on stderr; returns 2 (the exit status).
 */
int bench_usage_error(const char *name, const char *fmt, const char *arg);

/* Prints the machine line every benchmark starts with (cores, CPU model). */
void bench_print_machine(void);

struct bench_pct {
	uint64_t median, p99;
};
/* Sorts @samples. */
void bench_percentiles(uint64_t *samples, size_t n, struct bench_pct *out);

/* What the limits measure (the "mechanism" of their JSON rows). */
#define BENCH_RING_MECHANISM "shared memory, both sides spinning"
#define BENCH_WAKE_MECHANISM "eventfd into epoll_wait, futex back"

struct bench_limits {
	struct bench_pct ring, wake;
};
int bench_measure_limits(struct bench_limits *l);
/* Text lines, or JSON rows: limit (ring|wake), mechanism, median_ns, p99_ns, cores. */
void bench_print_limits(const struct bench_limits *l, bool json);

/* daemon.c: a kvpoold of the benchmark's own. */
struct bench_daemon {
	int pid;
	char dir[32];
	char socket[64];
	char log[64];  /* set before the start: its log there, at level info (else -q) */
};
void bench_default_daemon(char *out, size_t len);
/* @given (--daemon), else bench_default_daemon's. */
void bench_daemon_path(const char *given, char *out, size_t len);
/* @event_loop: kvpoold's --event-loop, NULL for its default; @cpu: pinned there, or -1. */
int bench_daemon_start(struct bench_daemon *d, const char *bin, unsigned spin_us,
		       const char *event_loop, int cpu);
void bench_daemon_stop(struct bench_daemon *d);
/*
 * Destroys pool @name and its disk tier's file, waiting up to 2 s for the
 * daemon to see the clients that used it go (-EBUSY until then): 0 or -errno.
 */
struct kvp_client;
int bench_pool_drop(struct kvp_client *admin, const char *name);
/*
 * A prompt of @n tokens stored on @c's pool: opened, allocated without the
 * cache, @kv (@chunk tokens of K, the same as V) written over every position
 * of each of @layers layers of group 0, committed, closed. 0 or -errno.
 */
int bench_store(struct kvp_client *c, const uint32_t *tokens, uint32_t n, uint32_t layers,
		uint32_t chunk, const void *kv);

int bench_core(int argc, char **argv);
int bench_attend(int argc, char **argv);
/* A row filter's value @arg of option @opt: one of @allowed, else -EINVAL, said with @note. */
int bench_pick(const char *opt, const char *arg, const unsigned *allowed, unsigned n,
	       const char *note, unsigned *out);
/* attend --backend cuda (attend_cuda.c) */
int bench_attend_cuda(int argc, char **argv);
int bench_overhead(int argc, char **argv);
int bench_limits(int argc, char **argv);
int bench_rtt(int argc, char **argv);
int bench_capacity(int argc, char **argv);
/* tier_disk.c: kvbench tier-disk */
int bench_tier_disk(int argc, char **argv);
/* restart.c: kvbench restart. */
int bench_restart(int argc, char **argv);
/* events.c: kvbench events */
int bench_events(int argc, char **argv);
int bench_load(int argc, char **argv);
/* replay.c: kvbench replay TRACE. */
int bench_replay(int argc, char **argv);

#endif
