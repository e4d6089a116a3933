/* SPDX-License-Identifier: MIT */
/*
 * Sequence handles and attachment: another client's handle and a closed
 * handle get -EBADF (and touch nothing), a connection attached to no pool gets
 * -ENODEV for every pool operation, ATTACH with sequences open gets -EBUSY, and
 * no handle ever comes back, however often its slot is reused.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

union lists {
	struct kvp_block_lists l;
	uint8_t bytes[sizeof(struct kvp_block_lists) + 64 * sizeof(uint32_t)];
};

/* Every per-sequence operation with @h on @c must give @err. */
static void all_seq_ops_fail(struct kvp_client *c, uint64_t h, int err)
{
	static const uint32_t tok[2] = { 7, 8 };
	union lists lb;
	uint32_t hit = 12345;

	CHECK_EQ(kvp_append(c, h, tok, 2), err);
	CHECK_EQ(kvp_lookup(c, h, NULL, 0), err);
	CHECK_EQ(kvp_lookup(c, h, &lb.l, sizeof(lb)), err);
	CHECK_EQ(kvp_alloc(c, h, 4, 0, false, &hit, NULL, 0), err);
	CHECK_EQ(kvp_alloc(c, h, 4, 0, true, &hit, NULL, 0), err);
	CHECK_EQ(hit, 12345);
	CHECK_EQ(kvp_commit(c, h, 1), err);
	CHECK_EQ(kvp_free(c, h), err);
	CHECK_EQ(kvp_get_table(c, h, &lb.l, sizeof(lb)), err);
	CHECK_EQ(kvp_seq_close(c, h), err);
}

static void pool_stats(struct kvp_client *c, uint32_t free_, uint32_t used, uint32_t cached)
{
	struct kvp_pool_stats st;

	CHECK_EQ(kvp_pool_stats(c, &st), 0);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_cached, cached);
}

/* The table of (@c, @h) must be exactly @ids[0..n). */
static void table_is(struct kvp_client *c, uint64_t h, const uint32_t *ids, uint32_t n)
{
	union lists lb;

	memset(&lb, 0, sizeof(lb));
	CHECK_EQ(kvp_get_table(c, h, &lb.l, sizeof(lb)),
		 sizeof(struct kvp_block_lists) + n * sizeof(uint32_t));
	CHECK_EQ(lb.l.num_groups, 1);
	CHECK_EQ(lb.l.counts[0], n);
	for (uint32_t i = 0; i < n; i++)
		CHECK_EQ(lb.l.ids[i], ids[i]);
}

/* Where handles_never_repeat() stages its token: above what the blocking calls use. */
#define IN_OFF 65536u

/* Closes @h and opens a 1-token sequence in one submission; returns the new handle. */
static uint64_t close_then_open(struct kvp_client *c, uint64_t h)
{
	struct kvp_sqe *sqe;
	struct kvp_cqe *cqe;
	uint64_t handle = 0;

	sqe = kvp_get_sqe(c);
	CHECK(sqe != NULL);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_SEQ_CLOSE, .handle = h, .user_data = 1 };
	sqe = kvp_get_sqe(c);
	CHECK(sqe != NULL);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_SEQ_OPEN, .addr = IN_OFF, .len = 1, .user_data = 2 };
	CHECK_EQ(kvp_submit(c), 2);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK_EQ(cqe->res, 0);
		if (cqe->user_data == 2)
			handle = cqe->aux;
		kvp_cqe_seen(c, cqe);
	}
	CHECK(handle != 0);
	return handle;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * A slot's generation has 16 bits and a freed slot is the next one used: one
 * sequence opened and closed 2^16 + 1 times would get its first handle again
 * if the generation wrapped. Every handle must differ, and the first stay stale.
 */
static void handles_never_repeat(const struct daemon *d)
{
	enum { CYCLES = (1 << 16) + 1 };
	static const uint32_t prompt[1] = { 77 };
	struct kvp_client *c = connect_or_die(d, "p", "", false);
	uint64_t *handles = calloc(CYCLES, sizeof(*handles));

	CHECK(handles != NULL);
	memcpy((uint8_t *)kvp_arena(c, NULL) + IN_OFF, prompt, sizeof(prompt));
	CHECK_EQ(kvp_seq_open(c, prompt, 1, NULL, 0, -1, &handles[0]), 0);
	for (uint32_t i = 1; i < CYCLES; i++)
		handles[i] = close_then_open(c, handles[i - 1]);
	CHECK_EQ(kvp_lookup(c, handles[0], NULL, 0), -EBADF);
	CHECK_EQ(kvp_lookup(c, handles[CYCLES - 1], NULL, 0), 0);
	CHECK_EQ(kvp_seq_close(c, handles[CYCLES - 1]), 0);
	qsort(handles, CYCLES, sizeof(*handles), cmp_u64);
	for (uint32_t i = 1; i < CYCLES; i++)
		CHECK(handles[i] != handles[i - 1]);
	free(handles);
	kvp_close(c);
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=32", "block_size=4", "groups=full", NULL };
	static const uint32_t prompt[10] = { 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 };
	static const uint32_t a_ids[3] = { 1, 2, 3 };
	struct daemon d;
	struct kvp_client *a, *b, *none, *admin_none;
	uint64_t ha, ha2, hb;
	uint32_t hit;
	char why[256];

	watchdog_start("test_handles", 30);

	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	create_pool_or_die(&d, "p", pool_kv);
	create_pool_or_die(&d, "q", pool_kv);

	a = connect_or_die(&d, "p", "", false);
	b = connect_or_die(&d, "p", "", false);

	/* A: 10 tokens in blocks 1..3, 2 full blocks published. */
	CHECK_EQ(kvp_seq_open(a, prompt, 10, NULL, 0, -1, &ha), 0);
	CHECK_EQ(kvp_alloc(a, ha, 10, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 0);
	CHECK_EQ(kvp_commit(a, ha, 10), 0);
	table_is(a, ha, a_ids, 3);
	pool_stats(a, 28, 3, 2);

	/* B, with no sequence of its own, cannot use A's handle for anything. */
	all_seq_ops_fail(b, ha, -EBADF);
	table_is(a, ha, a_ids, 3);
	pool_stats(b, 28, 3, 2);
	/* Neither can it use handles it never got: slot 0 of other generations, other slots. */
	all_seq_ops_fail(b, 0, -EBADF);
	all_seq_ops_fail(b, ha + (1ull << 32), -EBADF);
	all_seq_ops_fail(b, ha + 1, -EBADF);
	all_seq_ops_fail(b, ~0ull, -EBADF);
	/* A itself: only ha names a sequence. */
	all_seq_ops_fail(a, 0, -EBADF);
	all_seq_ops_fail(a, ha + (1ull << 32), -EBADF);
	all_seq_ops_fail(a, ha - (1ull << 32), -EBADF);
	all_seq_ops_fail(a, ha + 1, -EBADF);
	all_seq_ops_fail(a, (uint32_t)ha | (uint64_t)UINT32_MAX << 32, -EBADF);
	all_seq_ops_fail(a, ha | 0xffffffffull, -EBADF);
	table_is(a, ha, a_ids, 3);

	/* B opens a sequence of its own that shares A's first block. */
	CHECK_EQ(kvp_seq_open(b, prompt, 6, NULL, 0, -1, &hb), 0);
	CHECK_EQ(kvp_alloc(b, hb, 2, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 4);
	CHECK_EQ(kvp_commit(b, hb, 6), 0);
	pool_stats(a, 27, 4, 2);
	CHECK_EQ(kvp_seq_close(b, hb), 0);
	all_seq_ops_fail(b, hb, -EBADF);
	all_seq_ops_fail(b, ha, -EBADF);
	table_is(a, ha, a_ids, 3);
	pool_stats(a, 28, 3, 2);

	/* ATTACH with a sequence open: -EBUSY, whatever the target; an unknown pool: -ENODEV. */
	CHECK_EQ(kvp_attach(a, "q"), -EBUSY);
	CHECK_EQ(kvp_attach(a, "p"), -EBUSY);
	CHECK_EQ(kvp_attach(a, ""), -EBUSY);
	CHECK_EQ(kvp_attach(a, "nosuch"), -ENODEV);
	/* ... and nothing changed: still attached to p with the sequence intact. */
	table_is(a, ha, a_ids, 3);
	pool_stats(a, 28, 3, 2);

	/* A closed handle: -EBADF for everything, a second close included. */
	CHECK_EQ(kvp_seq_close(a, ha), 0);
	all_seq_ops_fail(a, ha, -EBADF);
	pool_stats(a, 31, 0, 2);

	/* The slot is reused under a new generation: the old handle stays dead. */
	CHECK_EQ(kvp_seq_open(a, prompt, 10, NULL, 0, -1, &ha2), 0);
	CHECK(ha2 != ha);
	CHECK_EQ(ha2 & 0xffffff, ha & 0xffffff); /* same slot (low 24 bits), new generation */
	all_seq_ops_fail(a, ha, -EBADF);
	CHECK_EQ(kvp_alloc(a, ha2, 2, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 8);
	pool_stats(a, 28, 3, 2);
	CHECK_EQ(kvp_attach(a, "q"), -EBUSY);
	CHECK_EQ(kvp_seq_close(a, ha2), 0);
	all_seq_ops_fail(a, ha2, -EBADF);
	pool_stats(a, 31, 0, 2);

	/* No sequence open: ATTACH moves A to q, where its old handles mean nothing either. */
	CHECK_EQ(kvp_attach(a, "q"), 0);
	pool_stats(a, 31, 0, 0);
	all_seq_ops_fail(a, ha, -EBADF);
	all_seq_ops_fail(a, ha2, -EBADF);
	CHECK_EQ(kvp_seq_open(a, prompt, 10, NULL, 0, -1, &ha), 0);
	CHECK_EQ(kvp_lookup(a, ha, NULL, 0), 0);
	CHECK_EQ(kvp_seq_close(a, ha), 0);

	/* Detached (ATTACH ""): every pool operation is -ENODEV; NOP and STATS still work. */
	CHECK_EQ(kvp_attach(a, ""), 0);
	none = connect_or_die(&d, "", "", false);
	admin_none = connect_or_die(&d, "", "", true);
	{
		struct kvp_client *cs[] = { a, none, admin_none };

		for (unsigned i = 0; i < 3; i++) {
			struct kvp_client *c = cs[i];
			struct kvp_pool_stats st;
			uint8_t stats[4096];
			uint64_t h = 42;

			CHECK_EQ(kvp_seq_open(c, prompt, 10, NULL, 0, -1, &h), -ENODEV);
			CHECK_EQ(h, 42);
			all_seq_ops_fail(c, ha, -ENODEV);
			all_seq_ops_fail(c, 0, -ENODEV);
			CHECK_EQ(kvp_pool_stats(c, &st), -ENODEV);
			CHECK_EQ(kvp_nop(c), 0);
			CHECK(kvp_stats(c, stats, sizeof(stats)) > 0);
		}
	}
	/* The admin pool operations need a pool too. */
	{
		uint32_t ids[4] = { 1, 2, 3, 4 };

		CHECK_EQ(kvp_evict(admin_none, ids, 1), -ENODEV);
		CHECK_EQ(kvp_reset(admin_none), -ENODEV);
		CHECK_EQ(kvp_dump_freeq(admin_none, ids, 4), -ENODEV);
		CHECK_EQ(kvp_check(admin_none, why, sizeof(why)), -ENODEV);
	}
	/* A connection that asked for a pool that does not exist is refused at setup. */
	{
		struct kvp_connect_opts o = { .socket_path = d.socket, .pool = "nosuch" };
		struct kvp_client *c = NULL;

		CHECK_EQ(kvp_connect(&o, &c), -ENODEV);
		CHECK(c == NULL);
	}
	/* Attaching later makes them work. */
	CHECK_EQ(kvp_attach(none, "p"), 0);
	pool_stats(none, 31, 0, 2);
	CHECK_EQ(kvp_seq_open(none, prompt, 10, NULL, 0, -1, &ha), 0);
	CHECK_EQ(kvp_lookup(none, ha, NULL, 0), 8);
	CHECK_EQ(kvp_seq_close(none, ha), 0);
	CHECK_EQ(kvp_attach(admin_none, "p"), 0);
	CHECK_EQ(kvp_check(admin_none, why, sizeof(why)), 0);

	kvp_close(a);
	kvp_close(b);
	kvp_close(none);
	kvp_close(admin_none);
	handles_never_repeat(&d);
	{
		struct kvp_pool_stats st;

		check_pool_or_die(&d, "p", &st);
		CHECK_EQ(st.blocks_free, 31);
		CHECK_EQ(st.blocks_used, 0);
		CHECK_EQ(st.blocks_cached, 2);
	}
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
