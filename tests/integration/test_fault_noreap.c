/* SPDX-License-Identifier: MIT */
/*
 * Flow control: a client that submits and never reaps. The daemon posts
 * exactly cq_entries completions and then stops taking entries (the rest stay
 * in the SQ); 100000 more attempts to submit cost the daemon no memory; once
 * the client reaps, every remaining entry completes, in order.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "../../lib/client.h"

#define ATTEMPTS 100000

/* The doorbell, rung whether or not the daemon sleeps. */
static void ring_doorbell(struct kvp_client *c)
{
	uint64_t one = 1;

	CHECK_EQ(write(c->bell, &one, sizeof(one)), sizeof(one));
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t cq_ready(struct kvp_client *c)
{
	return __atomic_load_n(c->cq_tail, __ATOMIC_ACQUIRE) - *c->cq_head;
}

static uint32_t sq_pending(struct kvp_client *c)
{
	return *c->sq_tail - __atomic_load_n(c->sq_head, __ATOMIC_ACQUIRE);
}

/* Waits (at most 3 s) until @n completions are ready on @c. */
static void wait_ready(struct kvp_client *c, uint32_t n)
{
	uint64_t deadline = now_ns() + 3000000000ull;

	while (cq_ready(c) < n)
		CHECK(now_ns() < deadline);
	CHECK_EQ(cq_ready(c), n);
}

/* Queues @n NOPs numbered from *next and publishes them. */
static void submit_nops(struct kvp_client *c, uint32_t n, uint64_t *next)
{
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_sqe *sqe = kvp_get_sqe(c);

		CHECK(sqe != NULL);
		sqe->opcode = KVP_OP_NOP;
		sqe->user_data = (*next)++;
	}
	CHECK_EQ(kvp_submit(c), n);
}

/*
 * Two round trips on another connection: the daemon serves every ring once per
 * loop turn, so once the second one completes it has looked at @c's ring again
 * after everything the caller published before.
 */
static void barrier(struct kvp_client *other)
{
	CHECK_EQ(kvp_nop(other), 0);
	CHECK_EQ(kvp_nop(other), 0);
}

/* Reaps @n completions, expecting NOPs numbered from *next. */
static void reap(struct kvp_client *c, uint32_t n, uint64_t *next)
{
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_peek_cqe(c, &cqe), 0);
		CHECK_EQ(cqe->user_data, *next);
		CHECK_EQ(cqe->res, 0);
		CHECK_EQ(cqe->flags, 0);
		(*next)++;
		kvp_cqe_seen(c, cqe);
	}
}

int main(void)
{
	struct daemon d;
	struct kvp_connect_opts o = { .sq_entries = 64 };
	struct kvp_client *c, *other;
	uint64_t submitted = 0, reaped = 0;
	uint32_t sqn, cqn;
	long rss0, rss1;

	watchdog_start("test_fault_noreap", 30);

	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	o.socket_path = d.socket;
	CHECK_EQ(kvp_connect(&o, &c), 0);
	other = connect_or_die(&d, "", "", false);
	sqn = c->sq_entries;
	cqn = c->cq_entries;
	CHECK_EQ(sqn, 64);
	CHECK_EQ(cqn, 128); /* the default: twice the SQ */

	/* A full SQ, taken and completed; then another: the CQ is exactly full. */
	submit_nops(c, sqn, &submitted);
	wait_ready(c, sqn);
	submit_nops(c, sqn, &submitted);
	wait_ready(c, cqn);
	/* A third SQ's worth: no room for its completions, so it stays in the SQ. */
	submit_nops(c, sqn, &submitted);
	barrier(other);
	CHECK_EQ(cq_ready(c), cqn);
	CHECK_EQ(sq_pending(c), sqn);
	CHECK(kvp_get_sqe(c) == NULL);

	/* Keep trying: the SQ has no room, the doorbell rings every time. */
	rss0 = daemon_rss_kib(&d);
	CHECK(rss0 > 0);
	for (unsigned i = 0; i < ATTEMPTS; i++) {
		CHECK(kvp_get_sqe(c) == NULL);
		CHECK_EQ(kvp_submit(c), 0);
		ring_doorbell(c);
	}
	barrier(other);
	rss1 = daemon_rss_kib(&d);
	CHECK(rss1 > 0);
	fprintf(stderr, "daemon RSS %ld KiB -> %ld KiB over %u refused submissions\n", rss0, rss1,
		ATTEMPTS);
	CHECK(rss1 - rss0 < 1024);
	CHECK_EQ(cq_ready(c), cqn);
	CHECK_EQ(sq_pending(c), sqn);
	/* The blocking calls refuse to run with requests of ours in flight. */
	CHECK_EQ(kvp_nop(c), -EBUSY);

	/* Reap everything: the SQ's entries complete in order, and nothing is left. */
	reap(c, cqn, &reaped);
	ring_doorbell(c);
	wait_ready(c, sqn);
	CHECK_EQ(sq_pending(c), 0);
	reap(c, sqn, &reaped);
	CHECK_EQ(reaped, submitted);
	CHECK_EQ(reaped, cqn + sqn);
	barrier(other);
	CHECK_EQ(cq_ready(c), 0);

	/* And the connection is as good as new. */
	CHECK_EQ(kvp_nop(c), 0);
	submit_nops(c, sqn, &submitted);
	wait_ready(c, sqn);
	reap(c, sqn, &reaped);
	CHECK_EQ(kvp_nop(c), 0);

	kvp_close(c);
	kvp_close(other);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
