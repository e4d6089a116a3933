/* SPDX-License-Identifier: MIT */
/*
 * A client that fills its CQ and leaves entries in its SQ, then stops (never
 * reaps): it "stalls itself" (docs/protocol.md, flow control), and must not
 * stall the daemon's CPU either. The daemon has nothing it can do for that
 * client until it reaps, so it should go to sleep like an idle daemon does
 * instead of spinning on the blocked ring. Measured as the daemon's CPU time
 * over a fixed window: here the sleep is the measurement, not a
 * synchronisation.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "../../lib/client.h"

#define WINDOW_MS 300

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The daemon's user + system CPU time, in milliseconds. */
static long cpu_ms(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	CHECK(f != NULL);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Fields after the command name (which may hold spaces): state is field 3. */
	p = strrchr(buf, ')');
	CHECK(p != NULL);
	CHECK_EQ(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st), 2);
	return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* CPU milliseconds the daemon uses over WINDOW_MS of wall time. */
static long cpu_over_window(pid_t pid)
{
	struct timespec w = { .tv_sec = 0, .tv_nsec = WINDOW_MS * 1000000L };
	long before = cpu_ms(pid);

	while (nanosleep(&w, &w) && errno == EINTR)
		;
	return cpu_ms(pid) - before;
}

static void submit_nops(struct kvp_client *c, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_sqe *sqe = kvp_get_sqe(c);

		CHECK(sqe != NULL);
		sqe->opcode = KVP_OP_NOP;
	}
	CHECK_EQ(kvp_submit(c), n);
}

static void wait_ready(struct kvp_client *c, uint32_t n)
{
	uint64_t deadline = now_ns() + 3000000000ull;

	while (__atomic_load_n(c->cq_tail, __ATOMIC_ACQUIRE) - *c->cq_head < n)
		CHECK(now_ns() < deadline);
}

int main(void)
{
	struct daemon d;
	struct kvp_client *c, *other;
	long idle, blocked;

	watchdog_start("test_fault_noreap_idle", 30);

	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	c = connect_or_die(&d, "", "", false);
	other = connect_or_die(&d, "", "", false);
	CHECK_EQ(kvp_nop(c), 0);

	/* Baseline: two connected, quiet clients. */
	idle = cpu_over_window(d.pid);

	/* CQ full (two SQs' worth completed), a third SQ's worth waiting behind it. */
	submit_nops(c, c->sq_entries);
	wait_ready(c, c->sq_entries);
	submit_nops(c, c->sq_entries);
	wait_ready(c, c->cq_entries);
	submit_nops(c, c->sq_entries);
	CHECK_EQ(kvp_nop(other), 0);
	CHECK_EQ(kvp_nop(other), 0);
	CHECK_EQ(*c->sq_tail - __atomic_load_n(c->sq_head, __ATOMIC_ACQUIRE), c->sq_entries);

	blocked = cpu_over_window(d.pid);
	fprintf(stderr, "daemon CPU over %d ms: %ld ms idle, %ld ms with a blocked ring\n",
		WINDOW_MS, idle, blocked);
	CHECK(idle < WINDOW_MS / 10);
	CHECK(blocked < WINDOW_MS / 10);

	kvp_close(c);
	kvp_close(other);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
