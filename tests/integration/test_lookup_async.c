/* SPDX-License-Identifier: MIT */
/*
 * Lookups that do not wait (kvp_lookup_start / _poll / _drop) beside the
 * ring level: their completions are set aside wherever the CQ is read, so a
 * caller's own entries come back to it in order, a blocking call goes on
 * while lookups are out (but not while a ring-level entry of the caller's is),
 * a poll that finds the caller's completion next returns at once, a dropped
 * lookup's answer is reaped and forgotten, and 64 is the most out at once.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"

static const uint32_t prompt[10] = { 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 };

static void nop_entry(struct kvp_client *c, uint64_t user_data)
{
	struct kvp_sqe *sqe = kvp_get_sqe(c);

	CHECK(sqe != NULL);
	sqe->opcode = KVP_OP_NOP;
	sqe->user_data = user_data;
	CHECK_EQ(kvp_submit(c), 1);
}

/* The caller's next completion must be @user_data's. */
static void reap_mine(struct kvp_client *c, uint64_t user_data)
{
	struct kvp_cqe *cqe;

	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK_EQ(cqe->user_data, user_data);
	CHECK_EQ(cqe->res, 0);
	kvp_cqe_seen(c, cqe);
}

static uint64_t open_seq(struct kvp_client *c, const uint32_t *tokens, uint32_t n)
{
	uint64_t h;

	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	return h;
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=300", "block_size=4", "groups=full", NULL };
	static const uint32_t other[9] = { 90, 91, 92, 93, 94, 95, 96, 97, 98 };
	uint64_t h1, h2, h3, t1, t2, t3, tickets[KVP_LOOKUPS_MAX], handles[KVP_LOOKUPS_MAX + 1];
	struct kvp_client *c;
	struct daemon d;
	uint64_t start;
	uint32_t hit;

	watchdog_start("test_lookup_async", 60);
	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	create_pool_or_die(&d, "p", pool_kv);
	c = connect_or_die(&d, "p", "", false);

	/* 8 tokens of the prompt cached: a hit of 8 for a sequence of it. */
	h1 = open_seq(c, prompt, 10);
	CHECK_EQ(kvp_alloc(c, h1, 10, 0, false, &hit, NULL, 0), 0);
	CHECK_EQ(kvp_commit(c, h1, 10), 0);
	CHECK_EQ(kvp_seq_close(c, h1), 0);
	h1 = open_seq(c, prompt, 10);
	h2 = open_seq(c, other, 9);
	h3 = open_seq(c, prompt, 10);

	/* Lookups out, the caller's NOPs between them: the NOPs come back, in order. */
	CHECK_EQ(kvp_lookup_start(c, h1, &t1), 0);
	nop_entry(c, 7);
	CHECK_EQ(kvp_lookup_start(c, h2, &t2), 0);
	nop_entry(c, 8);
	CHECK_EQ(kvp_lookup_start(c, h3, &t3), 0);
	CHECK(t1 != t2 && t2 != t3);
	/* With the caller's NOPs unreaped, blocking calls refuse; lookups alone do not stop them. */
	CHECK_EQ(kvp_nop(c), -EBUSY);
	/* A poll stops at the caller's completion instead of waiting a second for it. */
	start = test_now_ns();
	CHECK_EQ(kvp_lookup_poll(c, t2, 1000000000ull), -EINPROGRESS);
	CHECK(test_now_ns() - start < 500000000ull);
	reap_mine(c, 7);
	reap_mine(c, 8);
	CHECK_EQ(kvp_nop(c), 0);
	CHECK_EQ(kvp_lookup_poll(c, t3, 1000000000ull), 8);
	CHECK_EQ(kvp_lookup_poll(c, t2, 0), 0);
	CHECK_EQ(kvp_lookup_poll(c, t1, 0), 8);
	CHECK_EQ(kvp_lookup_poll(c, t1, 0), -ENOENT); /* spent */
	CHECK_EQ(kvp_lookup_poll(c, 12345, 0), -ENOENT);

	/* A sequence the daemon holds for a lookup refuses others until it is answered. */
	CHECK_EQ(kvp_lookup_start(c, h1, &t1), 0);
	CHECK_EQ(kvp_lookup_poll(c, t1, 1000000000ull), 8);
	CHECK_EQ(kvp_lookup(c, h1, NULL, 0), 8);

	/* Dropped: its answer reaped by the next call and forgotten. */
	CHECK_EQ(kvp_lookup_start(c, h3, &t3), 0);
	kvp_lookup_drop(c, t3);
	CHECK_EQ(kvp_nop(c), 0);
	CHECK_EQ(kvp_lookup_poll(c, t3, 0), -ENOENT);

	/* 64 out at once; the 65th waits for one of them. */
	for (unsigned i = 0; i <= KVP_LOOKUPS_MAX; i++)
		handles[i] = open_seq(c, i % 2 ? prompt : other, i % 2 ? 10 : 9);
	for (unsigned i = 0; i < KVP_LOOKUPS_MAX; i++)
		CHECK_EQ(kvp_lookup_start(c, handles[i], &tickets[i]), 0);
	CHECK_EQ(kvp_lookup_start(c, handles[KVP_LOOKUPS_MAX], &t1), -EAGAIN);
	CHECK_EQ(kvp_lookup_poll(c, tickets[0], 1000000000ull), 0);
	CHECK_EQ(kvp_lookup_start(c, handles[KVP_LOOKUPS_MAX], &tickets[0]), 0);
	for (unsigned i = 1; i < KVP_LOOKUPS_MAX; i++)
		CHECK_EQ(kvp_lookup_poll(c, tickets[i], 1000000000ull), i % 2 ? 8 : 0);
	CHECK_EQ(kvp_lookup_poll(c, tickets[0], 1000000000ull), 0);

	kvp_close(c);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
