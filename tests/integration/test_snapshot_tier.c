/* SPDX-License-Identifier: MIT */
/*
 * Window snapshots' copies as a client's ring sees them (docs/design.md,
 * cyclic groups), what the binding's waiting calls cannot show:
 *   - a COMMIT that makes a snapshot completes at once with
 *     KVP_CQE_F_SNAPSHOT, and the entries on its sequence submitted with it
 *     (ALLOC, LOOKUP) wait in the SQ until the copy is back, then succeed:
 *     none gets -EBUSY, and the LOOKUP already sees the snapshot;
 *   - an ALLOC whose hit is partly in the pool's tier (the full group's
 *     blocks) and partly a snapshot (the cyclic group's) completes once both
 *     copies are back, with KVP_CQE_F_TIER and KVP_CQE_F_SNAPSHOT; entries on
 *     its sequence taken meanwhile get -EBUSY; its rows are A's, bit for bit.
 *   - a snapshot the pool lost is hit from the tier like any block: an
 *     ALLOC whose whole hit is there gets the full group's blocks promoted
 *     and the snapshot promoted straight into its ring (KVP_CQE_F_TIER and
 *     KVP_CQE_F_SNAPSHOT), rows A's bit for bit; the tier keeps the
 *     snapshot's entry (the pool never caches it from a ring), so a next
 *     sequence finds it there again.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"

#define HD 8
#define PROMPT 17 /* the prompt's end: 16, 4 blocks of 4 */
#define WINDOW 5  /* min(W-1, 16) = 4 tokens: one snapshot block (block 3) */
#define SLOT (2u * 2 * 4 * HD * 4) /* K and V, 2 layers, 4 tokens, 1 kv head, f32 */

static struct daemon dmn;

static float val(uint32_t group, uint32_t layer, uint32_t pos, uint32_t d, uint32_t kv)
{
	return (float)(group * 10000 + layer * 1000 + pos * 10 + d) + (kv ? 0.5f : 0.25f);
}

static uint64_t open_seq(struct kvp_client *c, uint32_t first, uint32_t n)
{
	uint32_t tokens[128];
	uint64_t h;

	for (uint32_t i = 0; i < n; i++)
		tokens[i] = first + i;
	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	return h;
}

static void write_rows(struct kvp_client *c, uint64_t h, uint32_t first, uint32_t n)
{
	float k[4 * HD], v[4 * HD];

	for (uint32_t g = 0; g < 2; g++)
		for (uint32_t layer = 0; layer < 2; layer++) {
			for (uint32_t p = 0; p < n; p++)
				for (uint32_t d = 0; d < HD; d++) {
					k[p * HD + d] = val(g, layer, first + p, d, 0);
					v[p * HD + d] = val(g, layer, first + p, d, 1);
				}
			CHECK_EQ(kvp_write_kv(c, h, g, layer, first, n, k, v), 0);
		}
}

/* Positions [from, to) computed in steps of 4 (the pool's max_step_tokens), committed. */
static void compute(struct kvp_client *c, uint64_t h, uint32_t from, uint32_t to)
{
	for (uint32_t at = from; at < to; at += 4) {
		uint32_t n = to - at < 4 ? to - at : 4;

		CHECK_EQ(kvp_alloc(c, h, n, 0, false, NULL, NULL, 0), 0);
		write_rows(c, h, at, n);
		CHECK_EQ(kvp_commit(c, h, at + n), 0);
	}
}

/* Positions [first, first + n) of group @g in @h, both layers: A's rows. */
static void check_rows(struct kvp_client *c, uint64_t h, uint32_t g, uint32_t first, uint32_t n)
{
	float k[16 * HD], v[16 * HD];

	for (uint32_t layer = 0; layer < 2; layer++) {
		CHECK_EQ(kvp_read_kv(c, h, g, layer, first, n, k, v), 0);
		for (uint32_t p = 0; p < n; p++)
			for (uint32_t d = 0; d < HD; d++) {
				CHECK(k[p * HD + d] == val(g, layer, first + p, d, 0));
				CHECK(v[p * HD + d] == val(g, layer, first + p, d, 1));
			}
	}
}

/* Submits @n entries already prepared; their results by user_data, and who completed first. */
static void run_batch(struct kvp_client *c, unsigned n, int32_t *res, uint32_t *flags,
		      uint64_t *aux, unsigned *order)
{
	CHECK_EQ(kvp_submit(c), (int)n);
	for (unsigned i = 0; i < n; i++) {
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK(cqe->user_data < n);
		res[cqe->user_data] = cqe->res;
		flags[cqe->user_data] = cqe->flags;
		aux[cqe->user_data] = cqe->aux;
		order[i] = (unsigned)cqe->user_data;
		kvp_cqe_seen(c, cqe);
	}
}

/* A computes its prompt; its COMMIT of 16 goes with an ALLOC and a LOOKUP on it. */
static void commit_then_wait(struct kvp_client *c, uint64_t a)
{
	int32_t res[3];
	uint32_t flags[3];
	uint64_t aux[3];
	unsigned order[3];
	struct kvp_sqe *sqe;

	compute(c, a, 0, 12);
	CHECK_EQ(kvp_alloc(c, a, 4, 0, false, NULL, NULL, 0), 0);
	write_rows(c, a, 12, 4);
	sqe = kvp_get_sqe(c);
	kvp_prep_handle_op(sqe, KVP_OP_COMMIT, a, 16);
	sqe->user_data = 0;
	sqe = kvp_get_sqe(c);
	kvp_prep_alloc(sqe, a, 1, 0, false);
	sqe->user_data = 1;
	sqe = kvp_get_sqe(c);
	kvp_prep_handle_op(sqe, KVP_OP_LOOKUP, a, 0);
	sqe->user_data = 2;
	run_batch(c, 3, res, flags, aux, order);
	CHECK_EQ(res[0], 0);
	CHECK(flags[0] & KVP_CQE_F_SNAPSHOT);
	CHECK_EQ(order[0], 0);
	CHECK_EQ(res[1], 0);
	CHECK(!(flags[1] & KVP_CQE_F_SNAPSHOT));
	CHECK_EQ(res[2], 16); /* the snapshot already cached: the whole prompt's end hits */
	write_rows(c, a, 16, 1);
	CHECK_EQ(kvp_commit(c, a, PROMPT), 0);
}

int main(void)
{
	static const char *const geometry[] = { "blocks=24", "block_size=4", "groups=full cyclic:5",
						"kv_heads=1", "head_dim=8", "dtype=f32",
						"layers_per_group=2", "max_step_tokens=4", NULL };
	uint8_t buf[sizeof(struct kvp_block_lists) + 64 * sizeof(uint32_t)];
	struct kvp_block_lists *lists = (struct kvp_block_lists *)buf;
	struct kvp_client *admin, *c, *pool_admin;
	int32_t res[3];
	uint32_t flags[3];
	uint64_t aux[3], a, b, other, x;
	unsigned order[3];
	struct kvp_sqe *sqe;

	watchdog_start("test_snapshot_tier", 60);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	admin = connect_or_die(&dmn, "", "", true);
	create_tiered_pool_or_die(admin, "st", geometry, 64 * SLOT);
	c = connect_or_die(&dmn, "st", "", false);
	pool_admin = connect_or_die(&dmn, "st", "", true);

	a = open_seq(c, 100, PROMPT);
	commit_then_wait(c, a);
	CHECK_EQ(kvp_seq_close(c, a), 0);
	/*
	 * Another prompt takes the whole pool: A's blocks, its snapshot's too, go
	 * to the tier ahead of their eviction. X computes A's prompt again,
	 * leaving a snapshot in the pool; its full blocks are evicted by hand,
	 * their keys still in the tier.
	 */
	CHECK_EQ(kvp_pool_sync(admin, "st"), 0);
	other = open_seq(c, 5000, 84);
	compute(c, other, 0, 84);
	CHECK_EQ(kvp_seq_close(c, other), 0);
	CHECK_EQ(kvp_pool_sync(admin, "st"), 0);
	x = open_seq(c, 100, 16);
	compute(c, x, 0, 16);
	CHECK_EQ(kvp_seq_close(c, x), 0);
	b = open_seq(c, 100, PROMPT + 1);
	CHECK_EQ(kvp_lookup(c, b, lists, sizeof(buf)), 16);
	CHECK_EQ(lists->counts[0], 4);
	CHECK_EQ(lists->counts[1], 1);
	for (unsigned i = 0; i < 4; i++)
		CHECK(lists->ids[i] != KVP_BLOCK_TIER);
	CHECK_EQ(kvp_evict(pool_admin, lists->ids, 4), 4);
	CHECK_EQ(kvp_lookup(c, b, lists, sizeof(buf)), 16);
	for (unsigned i = 0; i < 4; i++)
		CHECK_EQ(lists->ids[i], KVP_BLOCK_TIER);
	CHECK(lists->ids[4] != KVP_BLOCK_TIER && lists->ids[4] != 0);

	/* Both copies for one ALLOC; LOOKUP and WRITE_KV on it meanwhile: -EBUSY. */
	sqe = kvp_get_sqe(c);
	kvp_prep_alloc(sqe, b, 1, 0, true);
	sqe->user_data = 0;
	sqe = kvp_get_sqe(c);
	kvp_prep_handle_op(sqe, KVP_OP_LOOKUP, b, 0);
	sqe->user_data = 1;
	sqe = kvp_get_sqe(c);
	kvp_prep_kv(sqe, KVP_OP_WRITE_KV, b, 0, 0, 16, 1, 0, 0);
	sqe->user_data = 2;
	memset(kvp_arena(c, NULL), 0, 2 * HD * sizeof(float));
	run_batch(c, 3, res, flags, aux, order);
	CHECK_EQ(res[0], 0);
	CHECK_EQ(aux[0], 16);
	CHECK(flags[0] & KVP_CQE_F_TIER);
	CHECK(flags[0] & KVP_CQE_F_SNAPSHOT);
	CHECK_EQ(order[2], 0);
	CHECK_EQ(res[1], -EBUSY);
	CHECK_EQ(res[2], -EBUSY);
	check_rows(c, b, 0, 0, 16);
	check_rows(c, b, 1, 16 - (WINDOW - 1), WINDOW - 1);
	CHECK_EQ(kvp_read_kv(c, b, 1, 0, 16 - WINDOW, 1, buf, buf + HD * 4), -ENODATA);
	CHECK_EQ(kvp_seq_close(c, b), 0);

	/*
	 * Another flush: now the tier alone holds A's prefix, its snapshot too. As
	 * before the first: the copies down of what B let go are back first.
	 */
	CHECK_EQ(kvp_pool_sync(admin, "st"), 0);
	other = open_seq(c, 9000, 84);
	compute(c, other, 0, 84);
	CHECK_EQ(kvp_seq_close(c, other), 0);
	CHECK_EQ(kvp_pool_sync(admin, "st"), 0);
	for (unsigned round = 0; round < 2; round++) {
		b = open_seq(c, 100, PROMPT + 1);
		CHECK_EQ(kvp_lookup(c, b, lists, sizeof(buf)), 16);
		CHECK_EQ(lists->counts[1], 1);
		/* The second time the full group's blocks are the pool's again, promoted. */
		for (unsigned i = 0; i < 4; i++)
			CHECK_EQ(lists->ids[i] == KVP_BLOCK_TIER, round == 0);
		CHECK_EQ(lists->ids[4], KVP_BLOCK_TIER);
		sqe = kvp_get_sqe(c);
		kvp_prep_alloc(sqe, b, 1, 0, true);
		sqe->user_data = 0;
		run_batch(c, 1, res, flags, aux, order);
		CHECK_EQ(res[0], 0);
		CHECK_EQ(aux[0], 16);
		CHECK_EQ(flags[0], KVP_CQE_F_TIER | KVP_CQE_F_SNAPSHOT);
		check_rows(c, b, 0, 0, 16);
		check_rows(c, b, 1, 16 - (WINDOW - 1), WINDOW - 1);
		CHECK_EQ(kvp_read_kv(c, b, 1, 0, 16 - WINDOW, 1, buf, buf + HD * 4), -ENODATA);
		CHECK_EQ(kvp_seq_close(c, b), 0);
	}

	kvp_close(pool_admin);
	kvp_close(c);
	kvp_close(admin);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("ok: a COMMIT's snapshot copy holds its sequence's next entries back; an ALLOC "
	       "waits for the tier's and the snapshot's copies both; a snapshot only the tier "
	       "holds is promoted into the ring, twice\n");
	return 0;
}
