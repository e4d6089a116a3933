/* SPDX-License-Identifier: MIT */
/*
 * Another client's handle gets -EBADF (docs/protocol.md "Handles", seqs.c),
 * also when the client using it has sequences of its own open. Handles are
 * client tag (24 bits) | slot generation (16) | slot (24) in a per-client
 * table, so two clients' first handles differ only in the tag and name the
 * same slot: this checks the documented promise in that case, and that a
 * foreign handle never reaches the other client's sequence.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

union lists {
	struct kvp_block_lists l;
	uint8_t bytes[sizeof(struct kvp_block_lists) + 64 * sizeof(uint32_t)];
};

static uint32_t table_len(struct kvp_client *c, uint64_t h)
{
	union lists lb;

	memset(&lb, 0, sizeof(lb));
	CHECK(kvp_get_table(c, h, &lb.l, sizeof(lb)) > 0);
	return lb.l.counts[0];
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=32", "block_size=4", "groups=full", NULL };
	static const uint32_t pa[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	static const uint32_t pb[4] = { 9, 10, 11, 12 };
	struct daemon d;
	struct kvp_client *a, *b;
	struct kvp_pool_stats st;
	union lists lb;
	uint64_t ha, hb;

	watchdog_start("test_handles_foreign", 30);

	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	create_pool_or_die(&d, "p", pool_kv);
	a = connect_or_die(&d, "p", "", false);
	b = connect_or_die(&d, "p", "", false);

	CHECK_EQ(kvp_seq_open(a, pa, 8, NULL, 0, -1, &ha), 0);
	CHECK_EQ(kvp_alloc(a, ha, 8, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_seq_open(b, pb, 4, NULL, 0, -1, &hb), 0);
	CHECK_EQ(kvp_alloc(b, hb, 4, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(table_len(a, ha), 2);
	CHECK_EQ(table_len(b, hb), 1);

	/* B uses A's handle: documented as -EBADF. */
	CHECK_EQ(kvp_get_table(b, ha, &lb.l, sizeof(lb)), -EBADF);
	CHECK_EQ(kvp_free(b, ha), -EBADF);
	CHECK_EQ(kvp_seq_close(b, ha), -EBADF);
	/* Whatever B did, A's sequence and B's own are as they were. */
	CHECK_EQ(table_len(a, ha), 2);
	CHECK_EQ(table_len(b, hb), 1);
	CHECK_EQ(kvp_seq_close(b, hb), 0);
	CHECK_EQ(kvp_seq_close(a, ha), 0);

	kvp_close(a);
	kvp_close(b);
	check_pool_or_die(&d, "p", &st);
	CHECK_EQ(st.blocks_used, 0);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
