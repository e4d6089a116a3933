/* SPDX-License-Identifier: MIT */
/* The shared-mapping scenario of map_shared.h, on a host or a cuda pool. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cudatest.h"
#include "kvref.h"
#include "map_shared.h"

#define G 2
#define L 2
#define QH 4 /* GQA 2 */
#define W 8  /* group 1's window */
#define DT KVP_DTYPE_F16
#define PROMPT 14 /* 3 full blocks and 2 tokens */
#define MORE 6
#define MAXPOS (PROMPT + MORE)
#define SEED 0x6d6170ull
#define SCALE 0.35355339f
#define PER_POS (L * KVH * HD * 2) /* elements of one position in one group */

static struct daemon *dmnp;
static bool on_cuda;

/* One f16 element through a mapping: the host's memory, or the device's through the driver. */
static void put16(uint8_t *at, uint16_t v)
{
	if (on_cuda)
		CHECK_EQ(cu.htod((uintptr_t)at, &v, sizeof(v)), 0);
	else
		memcpy(at, &v, sizeof(v));
}

static uint16_t get16(const uint8_t *at)
{
	uint16_t v;

	if (on_cuda)
		CHECK_EQ(cu.dtoh(&v, (uintptr_t)at, sizeof(v)), 0);
	else
		memcpy(&v, at, sizeof(v));
	return v;
}
static const struct mask masks[G] = { { KVP_KIND_FULL, 0, 0 }, { KVP_KIND_SWA, W, 0 } };
/* The KV as the pool stores it, in double: [group][layer][kv head][pos][K, V][dim]. */
static double refkv[G][L][KVH][MAXPOS][2][HD];

union lists {
	struct kvp_block_lists l;
	uint8_t bytes[sizeof(struct kvp_block_lists) + NBLOCKS * sizeof(uint32_t)];
};

/* Element @i of one position's PER_POS: K or V (@w), dim, kv head, layer; its value. */
static float split(uint32_t g, uint32_t p, uint32_t i, uint32_t *w, uint32_t *d, uint32_t *h,
		   uint32_t *l)
{
	*w = i % 2;
	*d = i / 2 % HD;
	*h = i / 2 / HD % KVH;
	*l = i / 2 / HD / KVH;
	return val(SEED, *w, g, *l, p, *h, *d);
}

static void fill_ref(void)
{
	for (uint32_t g = 0; g < G; g++)
		for (uint32_t p = 0; p < MAXPOS; p++)
			for (uint32_t i = 0, w, d, h, l; i < PER_POS; i++) {
				float v = split(g, p, i, &w, &d, &h, &l);

				refkv[g][l][h][p][w][d] = as_stored(DT, v);
			}
}

static void prompt_tokens(uint32_t *t, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++)
		t[i - from] = 1000 + i;
}

struct kvp_client *map_connect_ns(const char *pool, bool pool_map)
{
	char why[KVP_REASON_MAX] = "";
	struct kvp_connect_opts o = { .socket_path = dmnp->socket, .pool = pool, .namespace_ = NS,
				      .pool_map = pool_map, .why = why, .why_len = sizeof(why) };
	struct kvp_client *c;
	int ret = kvp_connect(&o, &c);

	if (ret) {
		fprintf(stderr, "connect to %s in %s: %s: %s\n", pool, NS, strerror(-ret), why);
		exit(1);
	}
	CHECK_EQ(!!(kvp_features(c) & KVP_FEAT_POOL_MAP), pool_map);
	return c;
}

/* The block of position @p in group @g of @l (lists that start at position 0); 0: a null. */
static uint32_t block_at(const struct kvp_block_lists *l, uint32_t g, uint32_t p)
{
	uint32_t off = 0;

	for (uint32_t i = 0; i < g; i++)
		off += l->counts[i];
	CHECK(p / BS < l->counts[g]);
	return l->ids[off + p / BS];
}

/* @l written as "ids of group 0 | ids of group 1" is @want. */
static void expect_lists(const struct kvp_block_lists *l, const char *want)
{
	char got[256] = "";
	size_t n = 0;

	CHECK_EQ(l->num_groups, G);
	for (uint32_t g = 0, k = 0; g < G; g++)
		for (uint32_t i = 0; i < l->counts[g] && n < 200; i++, k++)
			n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%u",
					      i ? " " : g ? " | " : "", l->ids[k]);
	if (strcmp(got, want)) {
		fprintf(stderr, "block lists \"%s\", expected \"%s\"\n", got, want);
		exit(1);
	}
}

static void get_table(struct kvp_client *c, uint64_t h, union lists *b)
{
	CHECK(kvp_get_table(c, h, &b->l, sizeof(*b)) > 0);
}

/* Element (block @b, token @t, kv head @h, dim @d) of K (@w 0) or V (@w 1) of layer @l. */
uint8_t *map_elem(const struct kvp_pool_map *m, uint32_t w, uint32_t l, uint32_t b, uint32_t t,
		  uint32_t h, uint32_t d)
{
	const struct kvp_map_layer *e = &m->layers[l];

	return (w ? e->v : e->k) + b * e->block_stride + t * e->token_stride +
	       h * e->head_stride + d * dtype_size(DT);
}

/* The layout this pool must report: one memfd, [num_blocks][block_size][kv_heads][head_dim]. */
void map_check(const struct kvp_pool_map *m)
{
	const uint64_t row = HD * 2, kv = (uint64_t)KVH * BS * row;

	CHECK_EQ(m->layout.mem_kind, on_cuda ? KVP_MEM_CUDA : KVP_MEM_HOST_MEMFD);
	CHECK_EQ(m->layout.layout, KVP_LAYOUT_LAYER);
	CHECK_EQ(m->layout.num_layers, L);
	CHECK_EQ(m->layout.num_blocks, NBLOCKS);
	CHECK_EQ(m->layout.dtype, DT);
	CHECK_EQ(m->num_pieces, 1);
	CHECK((m->cuda != NULL) == on_cuda);
	CHECK(m->piece_bytes[0] >= 2 * L * NBLOCKS * kv);
	for (uint32_t l = 0; l < L; l++) {
		CHECK_EQ(m->layers[l].block_stride, kv);
		CHECK_EQ(m->layers[l].token_stride, KVH * row);
		CHECK_EQ(m->layers[l].head_stride, row);
		CHECK_EQ(m->layers[l].k - (uint8_t *)m->piece[0], 2 * l * NBLOCKS * kv);
		CHECK_EQ(m->layers[l].v - m->layers[l].k, NBLOCKS * kv);
	}
}

/* K and V of positions [from, to) of every group and layer, stored through @m at @t's blocks. */
static void write_through(const struct kvp_pool_map *m, const struct kvp_block_lists *t,
			  uint32_t from, uint32_t to)
{
	for (uint32_t g = 0; g < G; g++)
		for (uint32_t p = from; p < to; p++) {
			uint32_t b = block_at(t, g, p);

			CHECK(b != 0);
			for (uint32_t i = 0, w, d, h, l; i < PER_POS; i++) {
				float v = split(g, p, i, &w, &d, &h, &l);

				uint16_t x;

				store_elem(&x, DT, 0, v);
				put16(map_elem(m, w, l, b, p % BS, h, d), x);
			}
		}
}

/* Compares, bit for bit, what @m holds at @t's non-null blocks; returns the positions compared. */
static uint32_t check_through(const struct kvp_pool_map *m, const struct kvp_block_lists *t,
			      uint32_t g, uint32_t from, uint32_t to)
{
	uint32_t seen = 0;

	for (uint32_t p = from; p < to; p++) {
		uint32_t b = block_at(t, g, p);

		if (!b)
			continue;
		for (uint32_t i = 0, w, d, h, l; i < PER_POS; i++) {
			uint16_t want;

			store_elem(&want, DT, 0, split(g, p, i, &w, &d, &h, &l));
			CHECK_EQ(get16(map_elem(m, w, l, b, p % BS, h, d)), want);
		}
		seen++;
	}
	return seen;
}

/* One query row of an ATTEND's output against the double reference. */
static void check_row(uint32_t g, uint32_t l, uint32_t pos, uint32_t qh, const float *q,
		      const float *o)
{
	const struct ref_kv kv = { &refkv[g][l][qh / (QH / KVH)][0][0][0], 2 * HD, HD };
	double qd[HD], ref[HD];

	for (uint32_t d = 0; d < HD; d++)
		qd[d] = q[d];
	ref_attend(&masks[g], pos, qd, HD, SCALE, 0, &kv, ref);
	for (uint32_t d = 0; d < HD; d++) {
		double err = o[d] - ref[d];

		if (!(err <= TOL_F32 && err >= -TOL_F32)) {
			fprintf(stderr, "group %u layer %u pos %u q head %u dim %u: %.9g, "
				"reference %.9g\n", g, l, pos, qh, d, (double)o[d], ref[d]);
			exit(1);
		}
	}
}

/* ATTEND of queries [from, to) of group @g, every layer, f32 Q and output. */
static void check_attend(struct kvp_client *c, uint64_t hd, uint32_t g, uint32_t from, uint32_t to)
{
	static float q[MAXPOS * QH * HD], out[MAXPOS * QH * HD];
	struct kvp_attend_req r = { .handle = hd, .first_pos = from, .count = to - from,
				    .q = q, .out = out };

	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t i = 0; i < (to - from) * QH * HD; i++)
			q[i] = val(SEED, WHICH_Q, g, l, from + i / (QH * HD), i / HD % QH, i % HD);
		memset(out, 0xee, sizeof(out));
		CHECK_EQ(kvp_attend(c, g, l, QH, SCALE, 0, true, &r, 1), 0);
		for (uint32_t row = 0; row < (to - from) * QH; row++)
			check_row(g, l, from + row / QH, row % QH, q + row * HD, out + row * HD);
	}
}

void map_expect_stats(struct kvp_client *adm, uint32_t free_, uint32_t used, uint32_t cached)
{
	struct kvp_pool_stats st;
	char why[256];

	CHECK_EQ(kvp_check(adm, why, sizeof(why)), 0);
	CHECK_EQ(kvp_pool_stats(adm, &st), 0);
	CHECK_EQ(st.blocks_total, NBLOCKS);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_cached, cached);
}

/*
 * A: the prompt's KV through its mapping (blocks 1-4 full, 5-8 swa), committed, and a
 * second sequence of 6 tokens never committed (9-10, 11-12); then it attends over its
 * prompt, again and again, until it is killed.
 */
static int a_main(void *arg)
{
	static float q[PROMPT * QH * HD], out[PROMPT * QH * HD];
	struct kvp_client *c = map_connect_ns(POOL, true);
	struct kvp_pool_map m;
	uint32_t tok[PROMPT], hit = 99;
	union lists b;
	uint64_t h, h2;

	(void)arg;
	if (on_cuda)
		cuda_use_device();
	prompt_tokens(tok, 0, PROMPT);
	CHECK_EQ(kvp_seq_open(c, tok, PROMPT, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, PROMPT, 0, true, &hit, &b.l, sizeof(b)), 0);
	CHECK_EQ(hit, 0);
	expect_lists(&b.l, "1 2 3 4 | 5 6 7 8");
	/* Nothing written and the pool not mapped yet: the daemon's own check refuses. */
	CHECK_EQ(kvp_commit(c, h, PROMPT), -ENODATA);
	CHECK_EQ(kvp_map_pool(c, &m), 0);
	map_check(&m);
	write_through(&m, &b.l, 0, PROMPT);
	CHECK_EQ(kvp_commit(c, h, PROMPT), 0);

	for (uint32_t i = 0; i < 6; i++)
		tok[i] = 5000 + i;
	CHECK_EQ(kvp_seq_open(c, tok, 6, NULL, 0, -1, &h2), 0);
	CHECK_EQ(kvp_alloc(c, h2, 6, 0, true, &hit, &b.l, sizeof(b)), 0);
	expect_lists(&b.l, "9 10 | 11 12");
	printf("ready\n");
	fflush(stdout);
	for (uint32_t i = 0; i < PROMPT * QH * HD; i++)
		q[i] = val(SEED, WHICH_Q, 0, 0, i / (QH * HD), i / HD % QH, i % HD);
	for (;;) {
		struct kvp_attend_req r = { .handle = h, .first_pos = 0, .count = PROMPT, .q = q,
					    .out = out };

		CHECK_EQ(kvp_attend(c, 0, 0, QH, SCALE, 0, true, &r, 1), 0);
	}
}

/* B's prompt positions, read through @m and attended through the daemon. */
static void b_check_prompt(struct kvp_client *c, const struct kvp_pool_map *m, uint64_t h)
{
	float q[QH * HD] = { 0 }, out[QH * HD];
	struct kvp_attend_req r = { .handle = h, .first_pos = 10, .count = 1, .q = q, .out = out };
	union lists t;

	get_table(c, h, &t);
	expect_lists(&t.l, "1 2 3 13 | 0 6 7 14");
	/* Group 1's block 0 is a null: positions 4..11 only. */
	CHECK_EQ(check_through(m, &t.l, 0, 0, 12), 12);
	CHECK_EQ(check_through(m, &t.l, 1, 0, 12), 8);
	check_attend(c, h, 0, 0, PROMPT);
	/* swa 8: query i needs keys i-7..i, and B has none below 4: 11.. only. */
	check_attend(c, h, 1, 11, PROMPT);
	CHECK_EQ(kvp_attend(c, 1, 0, QH, SCALE, 0, true, &r, 1), -ENODATA);
}

/* B, after A's death: 6 more tokens on A's freed blocks, through the mapping. */
static void b_more(struct kvp_client *c, const struct kvp_pool_map *m, uint64_t h)
{
	uint32_t tok[MORE], hit = 99;
	union lists b;

	prompt_tokens(tok, PROMPT, MAXPOS);
	CHECK_EQ(kvp_append(c, h, tok, MORE), 0);
	CHECK_EQ(kvp_alloc(c, h, MORE, 0, false, &hit, &b.l, sizeof(b)), 0);
	/* One block a group, popped from the run of A's unhashed blocks now at the head. */
	CHECK(b.l.counts[0] == 1 && b.l.counts[1] == 1 && b.l.ids[0] != b.l.ids[1]);
	for (uint32_t g = 0; g < G; g++)
		CHECK(b.l.ids[g] == 4 || b.l.ids[g] == 8 || (b.l.ids[g] >= 9 && b.l.ids[g] <= 12));
	get_table(c, h, &b);
	CHECK(b.l.counts[0] == 5 && b.l.counts[1] == 5);
	write_through(m, &b.l, PROMPT, MAXPOS);
	CHECK_EQ(kvp_commit(c, h, MAXPOS), 0);
	/* COMMIT 20 dropped swa positions 0..11 (skipped 13): group 1 holds 12.. now. */
	get_table(c, h, &b);
	CHECK(block_at(&b.l, 1, 11) == 0 && block_at(&b.l, 1, 12) == 14);
	CHECK_EQ(check_through(m, &b.l, 0, 0, MAXPOS), MAXPOS);
	CHECK_EQ(check_through(m, &b.l, 1, 0, MAXPOS), 8);
	check_attend(c, h, 0, 0, MAXPOS);
	check_attend(c, h, 1, 19, MAXPOS);
}

/* Parts 1 and 2: the parent is B. */
void map_shared_prefix(struct kvp_client *adm)
{
	struct kvp_client *c;
	struct kvp_pool_map m;
	uint32_t tok[PROMPT], hit = 99;
	struct kvp_pool_stats st;
	union lists b;
	uint64_t h, deadline;
	pid_t a;

	fflush(NULL);
	a = fork_child_ready(a_main, NULL);
	/* A: 4 + 4 + 2 + 2 blocks, swa block 5 dropped at its commit; 3 + 3 published. */
	map_expect_stats(adm, 12, 11, 6);

	c = map_connect_ns(POOL, true);
	prompt_tokens(tok, 0, PROMPT);
	CHECK_EQ(kvp_seq_open(c, tok, PROMPT, NULL, 0, -1, &h), 0);
	/* M = 13: blocks 0..2 of group 0; group 1 needs 2 (cdiv(W - 1, BS)) below block 3. */
	CHECK_EQ(kvp_lookup(c, h, &b.l, sizeof(b)), 12);
	expect_lists(&b.l, "1 2 3 | 0 6 7");
	CHECK_EQ(kvp_alloc(c, h, 2, 0, true, &hit, &b.l, sizeof(b)), 0);
	CHECK_EQ(hit, 12);
	expect_lists(&b.l, "13 | 14");
	map_expect_stats(adm, 10, 13, 6);

	if (on_cuda) /* after A's fork: CUDA does not survive one */
		cuda_use_device();
	CHECK_EQ(kvp_map_pool(c, &m), 0);
	map_check(&m);
	get_table(c, h, &b);
	write_through(&m, &b.l, 12, PROMPT);
	CHECK_EQ(kvp_commit(c, h, PROMPT), 0);
	b_check_prompt(c, &m, h);
	map_expect_stats(adm, 10, 13, 6);

	/* A dies holding both sequences and its mapping: its 6 blocks of its own come back. */
	CHECK_EQ(kill(a, SIGKILL), 0);
	CHECK_EQ(wait_child(a), 128 + SIGKILL);
	deadline = test_now_ns() + 5000000000ull;
	do {
		CHECK_EQ(kvp_pool_stats(c, &st), 0);
	} while (st.blocks_used != 7 && test_now_ns() < deadline && !usleep(1000));
	map_expect_stats(adm, 16, 7, 6);
	b_check_prompt(c, &m, h);

	b_more(c, &m, h);
	/* Blocks 3 and 4 published in both groups; swa 6 and 7 dropped (free, cached). */
	map_expect_stats(adm, 16, 7, 10);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_unmap_pool(&m);
	CHECK(m.layers == NULL && m.num_pieces == 0);
	kvp_close(c);
	map_expect_stats(adm, NBLOCKS - 1, 0, 10);
}

void map_shared_init(struct daemon *d, bool cuda)
{
	dmnp = d;
	on_cuda = cuda;
	self_check();
	fill_ref();
}
