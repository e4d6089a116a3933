/* SPDX-License-Identifier: MIT */
/*
 * The charging rule, read from the stats page: a client is charged once for
 * each distinct block its sequences hold; a block two of its own sequences
 * share counts once, one shared with another client counts for both. And the
 * page itself is read-only for its readers.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "../../lib/client.h"
#include "harness.h"

static char page[1 << 20];

static const struct kvp_stats_client *clients_of(struct kvp_client *reader, uint32_t *n)
{
	const struct kvp_stats_page *pg = (const void *)page;

	CHECK(kvp_stats_snapshot(reader, page, sizeof(page)) > 0);
	*n = pg->max_clients;
	return (const void *)(page + pg->clients_off);
}

/* Client ids grow with each connection: the newest one is the largest. */
static uint32_t newest_client(struct kvp_client *reader)
{
	uint32_t n, id = 0;
	const struct kvp_stats_client *c = clients_of(reader, &n);

	for (uint32_t i = 0; i < n; i++)
		if (c[i].in_use && c[i].client_id > id)
			id = c[i].client_id;
	return id;
}

static uint64_t charge_of(struct kvp_client *reader, uint32_t id)
{
	uint32_t n;
	const struct kvp_stats_client *c = clients_of(reader, &n);

	for (uint32_t i = 0; i < n; i++)
		if (c[i].in_use && c[i].client_id == id)
			return c[i].blocks_held;
	CHECK(!"client not in the stats page");
	return 0;
}

int main(void)
{
	const char *kv[] = { "blocks=64", "block_size=4", "groups=full", NULL };
	struct kvp_connect_opts ro = { .stats_page = true };
	uint32_t prompt[12], other[12];
	struct kvp_client *a, *b, *reader;
	uint64_t a1, a2, b1;
	uint32_t ida, idb;
	uint32_t hit;
	struct daemon d;

	for (unsigned i = 0; i < 12; i++) {
		prompt[i] = i;
		other[i] = i < 8 ? i : 100 + i; /* shares the first two blocks */
	}
	CHECK_EQ(daemon_start(&d, NULL), 0);
	create_pool_or_die(&d, "p", kv);
	ro.socket_path = d.socket;
	CHECK_EQ(kvp_connect(&ro, &reader), 0);
	/* The page is sealed F_SEAL_FUTURE_WRITE: no reader can make its mapping writable. */
	CHECK(mprotect(reader->stats_map, 4096, PROT_READ | PROT_WRITE) != 0);
	CHECK_EQ(errno, EACCES);
	a = connect_or_die(&d, "p", "", false);
	ida = newest_client(reader);
	b = connect_or_die(&d, "p", "", false);
	idb = newest_client(reader);
	CHECK(ida != idb);

	/* A's first sequence: 3 blocks, committed, so they can be hit. */
	CHECK_EQ(kvp_seq_open(a, prompt, 12, NULL, 0, -1, &a1), 0);
	CHECK_EQ(kvp_alloc(a, a1, 12, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(kvp_commit(a, a1, 12), 0);
	CHECK_EQ(charge_of(reader, ida), 3);

	/* A's second sequence hits 2 of them (M = 11: 2 full blocks) and takes 1 more. */
	CHECK_EQ(kvp_seq_open(a, other, 12, NULL, 0, -1, &a2), 0);
	CHECK_EQ(kvp_alloc(a, a2, 4, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 8);
	CHECK_EQ(charge_of(reader, ida), 4); /* 3 + 1 new: the 2 shared count once */

	/* B hits the same 2 blocks: charged for them too, and for its own third. */
	CHECK_EQ(kvp_seq_open(b, other, 12, NULL, 0, -1, &b1), 0);
	CHECK_EQ(kvp_alloc(b, b1, 4, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 8);
	CHECK_EQ(charge_of(reader, idb), 3);
	CHECK_EQ(charge_of(reader, ida), 4);

	/* Closing A's first sequence: its third block goes, the 2 shared stay with a2. */
	CHECK_EQ(kvp_seq_close(a, a1), 0);
	CHECK_EQ(charge_of(reader, ida), 3); /* a2: the 2 shared blocks and its own */
	CHECK_EQ(kvp_seq_close(a, a2), 0);
	CHECK_EQ(charge_of(reader, ida), 0);
	CHECK_EQ(charge_of(reader, idb), 3);
	/* A preemption and a fresh admission without the cache: 3 new blocks. */
	CHECK_EQ(kvp_free(b, b1), 0);
	CHECK_EQ(charge_of(reader, idb), 0);
	CHECK_EQ(kvp_alloc(b, b1, 12, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(charge_of(reader, idb), 3);

	kvp_close(a);
	kvp_close(b);
	kvp_close(reader);
	check_pool_or_die(&d, "p", NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
