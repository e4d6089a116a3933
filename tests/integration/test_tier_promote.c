/* SPDX-License-Identifier: MIT */
/*
 * ALLOC promoting blocks from a host pool's tier (#38; docs/tiers.md), what
 * the Python tests cannot see through a binding that waits for each call:
 *   - an ALLOC whose hit comes up from the tier completes later, with
 *     KVP_CQE_F_TIER and the hit in aux; requests on its sequence taken
 *     meanwhile (LOOKUP, SEQ_CLOSE, WRITE_KV, in the same submission) get
 *     -EBUSY, and work once it completed;
 *   - a client killed right after submitting such an ALLOC loses nothing but
 *     its own blocks: the promotion runs to its end, the pool's invariants
 *     hold, no block stays in use, and the next client hits the promoted
 *     blocks in the pool with A's KV, bit for bit.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define HD 8
#define PROMPT 17 /* 4 full blocks of 4 */
#define SLOT (2u * 2 * 4 * HD * 4) /* K and V, 2 layers, 4 tokens, 1 kv head, f32 */

static struct daemon dmn;

static float val(uint32_t layer, uint32_t pos, uint32_t d, uint32_t kv)
{
	return (float)(layer * 1000 + pos * 10 + d) + (kv ? 0.5f : 0.25f);
}

static uint64_t open_seq(struct kvp_client *c, uint32_t first, uint32_t n)
{
	uint32_t tokens[64];
	uint64_t h;

	for (uint32_t i = 0; i < n; i++)
		tokens[i] = first + i;
	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	return h;
}

/* A's prompt with its KV, committed and closed; then another prompt takes the pool's 8 blocks. */
static void evict_to_tier(struct kvp_client *c, struct kvp_client *admin)
{
	float k[PROMPT * HD], v[PROMPT * HD];
	uint64_t a = open_seq(c, 100, PROMPT), other;

	CHECK_EQ(kvp_alloc(c, a, PROMPT, 0, false, NULL, NULL, 0), 0);
	for (uint32_t layer = 0; layer < 2; layer++) {
		for (uint32_t p = 0; p < PROMPT; p++)
			for (uint32_t d = 0; d < HD; d++) {
				k[p * HD + d] = val(layer, p, d, 0);
				v[p * HD + d] = val(layer, p, d, 1);
			}
		CHECK_EQ(kvp_write_kv(c, a, 0, layer, 0, PROMPT, k, v), 0);
	}
	CHECK_EQ(kvp_commit(c, a, PROMPT), 0);
	CHECK_EQ(kvp_seq_close(c, a), 0);
	CHECK_EQ(kvp_pool_sync(admin, "t"), 0);
	other = open_seq(c, 5000, 32);
	CHECK_EQ(kvp_alloc(c, other, 32, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_seq_close(c, other), 0);
	CHECK_EQ(kvp_pool_sync(admin, "t"), 0);
}

/* A's rows of positions 0..15 in @h's blocks, both layers. */
static void check_rows(struct kvp_client *c, uint64_t h)
{
	float k[16 * HD], v[16 * HD];

	for (uint32_t layer = 0; layer < 2; layer++) {
		CHECK_EQ(kvp_read_kv(c, h, 0, layer, 0, 16, k, v), 0);
		for (uint32_t p = 0; p < 16; p++)
			for (uint32_t d = 0; d < HD; d++) {
				CHECK(k[p * HD + d] == val(layer, p, d, 0));
				CHECK(v[p * HD + d] == val(layer, p, d, 1));
			}
	}
}

static void busy_meanwhile(struct kvp_client *c, struct kvp_client *admin)
{
	static const int8_t ops[] = { KVP_OP_ALLOC, KVP_OP_LOOKUP, KVP_OP_WRITE_KV,
				      KVP_OP_SEQ_CLOSE };
	float kv[HD] = { 0 };
	int32_t res[4] = { 1, 1, 1, 1 };
	uint32_t flags = 0, aux = 0;
	uint64_t b;

	evict_to_tier(c, admin);
	b = open_seq(c, 100, PROMPT);
	for (unsigned i = 0; i < 4; i++) {
		struct kvp_sqe *sqe = kvp_get_sqe(c);

		CHECK(sqe != NULL);
		if (ops[i] == KVP_OP_ALLOC)
			kvp_prep_alloc(sqe, b, 1, 0, true);
		else if (ops[i] == KVP_OP_WRITE_KV)
			kvp_prep_kv(sqe, KVP_OP_WRITE_KV, b, 0, 0, 16, 1, 0, 0);
		else
			kvp_prep_handle_op(sqe, (uint8_t)ops[i], b, 0);
		sqe->user_data = i;
	}
	memcpy(kvp_arena(c, NULL), kv, sizeof(kv));
	memcpy((char *)kvp_arena(c, NULL) + sizeof(kv), kv, sizeof(kv));
	CHECK_EQ(kvp_submit(c), 4);
	for (unsigned n = 0; n < 4; n++) {
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK(cqe->user_data < 4);
		res[cqe->user_data] = cqe->res;
		if (cqe->user_data == 0) {
			flags = cqe->flags;
			aux = (uint32_t)cqe->aux;
			/* Everything after it in the submission was taken before it completed. */
			CHECK_EQ(n, 3);
		}
		kvp_cqe_seen(c, cqe);
	}
	CHECK_EQ(res[0], 0);
	CHECK_EQ(aux, 16);
	CHECK(flags & KVP_CQE_F_TIER);
	CHECK_EQ(res[1], -EBUSY);
	CHECK_EQ(res[2], -EBUSY);
	CHECK_EQ(res[3], -EBUSY);
	CHECK_EQ(kvp_lookup(c, b, NULL, 0), 16);
	check_rows(c, b);
	CHECK_EQ(kvp_seq_close(c, b), 0);
}

/* The child: A's prompt promoted, and gone before the ALLOC completes. */
static int promote_and_die(void *arg)
{
	struct kvp_client *c = connect_or_die(&dmn, "t", "", false);
	uint64_t h = open_seq(c, 100, PROMPT);
	struct kvp_sqe *sqe = kvp_get_sqe(c);

	(void)arg;
	kvp_prep_alloc(sqe, h, 1, 0, true);
	CHECK_EQ(kvp_submit(c), 1);
	_exit(0);
}

static void death_meanwhile(struct kvp_client *c, struct kvp_client *admin)
{
	struct kvp_pool_stats st;
	uint32_t hit = 0;
	uint64_t h;

	evict_to_tier(c, admin);
	CHECK_EQ(wait_child(fork_child(promote_and_die, NULL)), 0);
	/* Its teardown and its promotion's end: the pool has no block in use left. */
	for (int i = 0; i < 500; i++) {
		CHECK_EQ(kvp_pool_sync(admin, "t"), 0);
		check_pool_or_die(&dmn, "t", &st);
		if (st.blocks_used == 0)
			break;
		usleep(10000);
	}
	CHECK_EQ(st.blocks_used, 0);
	h = open_seq(c, 100, PROMPT);
	CHECK_EQ(kvp_alloc(c, h, 1, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 16);
	check_rows(c, h);
	CHECK_EQ(kvp_seq_close(c, h), 0);
}

int main(void)
{
	static const char *const geometry[] = { "blocks=9", "block_size=4", "groups=full",
						"kv_heads=1", "head_dim=8", "dtype=f32",
						"layers_per_group=2", NULL };
	struct kvp_client *admin, *c;

	watchdog_start("test_tier_promote", 60);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	admin = connect_or_die(&dmn, "", "", true);
	create_tiered_pool_or_die(admin, "t", geometry, 64 * SLOT);
	c = connect_or_die(&dmn, "t", "", false);
	busy_meanwhile(c, admin);
	death_meanwhile(c, admin);
	kvp_close(c);
	kvp_close(admin);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("ok: an ALLOC's promotion: -EBUSY on its sequence meanwhile; its client's death "
	       "loses nothing\n");
	return 0;
}
