/* SPDX-License-Identifier: MIT */
/*
 * A cuda pool's host-memory tier (#38; docs/tiers.md). Without a GPU it exits
 * 77 with the reason. With one:
 *   - A writes KV for 4 full blocks of a cuda pool of 8 and closes; another
 *     prompt takes all 8 blocks; after POOL_SYNC the tier holds A's 4 (copied
 *     from device memory by the plugin's TIER_DOWN);
 *   - B with A's prompt hits 64 tokens, 4 blocks promoted (TIER_UP), and
 *     READ_KV gives A's rows back bit for bit, both layers, K and V.
 */
#include <errno.h>
#include <string.h>

#include "cudatest.h"
#include "harness.h"

#define BS 16
#define HD 64
#define KVH 2
#define ROW (KVH * HD) /* bf16 elements of one token */
#define SLOT (2u * 2 * BS * ROW * 2) /* K and V, 2 layers, bf16 */

static struct daemon dmn;

static uint16_t val(uint32_t layer, uint32_t pos, uint32_t e, uint32_t kv)
{
	return (uint16_t)(pos * 257 + e * 7 + layer * 9001 + kv * 31 + 1);
}

static void fill(uint16_t *k, uint16_t *v, uint32_t layer, uint32_t n)
{
	for (uint32_t p = 0; p < n; p++)
		for (uint32_t e = 0; e < ROW; e++) {
			k[p * ROW + e] = val(layer, p, e, 0);
			v[p * ROW + e] = val(layer, p, e, 1);
		}
}

static uint64_t open_seq(struct kvp_client *c, uint32_t first, uint32_t n)
{
	static uint32_t tokens[128];
	uint64_t h;

	for (uint32_t i = 0; i < n; i++)
		tokens[i] = first + i;
	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	return h;
}

static const struct kvp_stats_tier *tier_row(struct kvp_stats_view *v, struct kvp_client *m)
{
	CHECK_EQ(kvp_stats_view_take(m, v), 0);
	KVP_STATS_FOR_EACH_POOL(v, p)
		if (!strcmp(p->name, "t"))
			return kvp_stats_tier_of(v, p);
	return NULL;
}

int main(void)
{
	static const char *const geometry[] = { "blocks=9", "block_size=16", "groups=full",
						"kv_heads=2", "head_dim=64", "dtype=bf16",
						"layers_per_group=2", "backend=cuda", NULL };
	static uint16_t k[65 * ROW], v[65 * ROW], back[2][64 * ROW];
	struct kvp_stats_view view = { 0 };
	const struct kvp_stats_tier *t;
	struct kvp_client *admin, *c;
	uint64_t a, other, b;
	uint32_t hit = 0;

	watchdog_start("test_cuda_tier", 120);
	cuda_need_gpu("test_cuda_tier");
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	admin = connect_or_die(&dmn, "", "", true);
	create_tiered_pool_or_die(admin, "t", geometry, 64 * SLOT);
	c = connect_or_die(&dmn, "t", "", false);

	a = open_seq(c, 1000, 65);
	CHECK_EQ(kvp_alloc(c, a, 65, 0, false, NULL, NULL, 0), 0);
	for (uint32_t layer = 0; layer < 2; layer++) {
		fill(k, v, layer, 65);
		CHECK_EQ(kvp_write_kv(c, a, 0, layer, 0, 65, k, v), 0);
	}
	CHECK_EQ(kvp_commit(c, a, 65), 0);
	CHECK_EQ(kvp_seq_close(c, a), 0);
	CHECK_EQ(kvp_pool_sync(admin, "t"), 0);
	other = open_seq(c, 5000, 128);
	CHECK_EQ(kvp_alloc(c, other, 128, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_seq_close(c, other), 0);
	CHECK_EQ(kvp_pool_sync(admin, "t"), 0);
	t = tier_row(&view, admin);
	CHECK(t != NULL);
	CHECK_EQ(t->held, 4);
	CHECK_EQ(t->abandoned, 0);

	b = open_seq(c, 1000, 65);
	CHECK_EQ(kvp_alloc(c, b, 1, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, 64);
	for (uint32_t layer = 0; layer < 2; layer++) {
		fill(k, v, layer, 64);
		CHECK_EQ(kvp_read_kv(c, b, 0, layer, 0, 64, back[0], back[1]), 0);
		CHECK(!memcmp(back[0], k, sizeof(back[0])) && !memcmp(back[1], v, sizeof(back[1])));
	}
	t = tier_row(&view, admin);
	CHECK_EQ(t->promoted, 4);
	CHECK_EQ(t->read_failures, 0);
	/* Small copies: their rate is the plugin's latency per job as much as the bus's. */
	printf("tier copies: down %.2f GB/s (%llu bytes in %llu us), "
	       "up %.2f GB/s (%llu bytes in %llu us)\n",
	       t->ns_down ? (double)t->bytes_down / (double)t->ns_down : 0.0,
	       (unsigned long long)t->bytes_down, (unsigned long long)t->ns_down / 1000,
	       t->ns_up ? (double)t->bytes_up / (double)t->ns_up : 0.0,
	       (unsigned long long)t->bytes_up, (unsigned long long)t->ns_up / 1000);
	kvp_stats_view_release(&view);
	CHECK_EQ(kvp_seq_close(c, b), 0);
	kvp_close(c);
	kvp_close(admin);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("ok: a cuda pool's blocks down to its tier and back, bit for bit\n");
	return 0;
}
