/* SPDX-License-Identifier: MIT */
/*
 * Pool layouts (block and layer) as an engine that maps a pool sees them: it
 * runs its own kernels on the strides POOL_LAYOUT reports, so a stride off by
 * anything corrupts its KV silently. So every number is checked exactly, and
 * every byte the daemon writes where those numbers put it. For f32, f16 and
 * bf16, in both layouts, 2 groups x 2 layers, 2 kv heads, blocks of 4 tokens:
 *   a. POOL_LAYOUT: the header, and each layer's piece, offsets and strides
 *      equal daemon/pools/pools.c's rule (set_strides, written out again below);
 *      the one memfd piece is the KV rounded up to whole 2 MiB pages (the
 *      host backend's mapping, huge pages or not); a buffer one byte short
 *      (or none) gets the size needed and is left untouched;
 *   b. WRITE_KV of distinct values to every group and layer of two sequences
 *      that together hold every block of the pool (ids 1 .. blocks - 1: both
 *      ends), then READ_KV returns them bit for bit;
 *   c. the mapping holds them bit for bit at k/v + b * block_stride +
 *      t * token_stride + h * head_stride + d * dtype size (b from GET_TABLE),
 *      and the whole KV area holds nothing else (a fresh pool is zeroed), so
 *      WRITE_KV writes exactly where the layout says;
 *   d. new KV written through the mapping past the computed count and then
 *      COMMITted (a mapped pool takes the client's word) is what READ_KV
 *      returns, and ATTEND over it (GQA 2, a full and a swa group) matches
 *      the double reference: f32 within TOL_F32, f16/bf16 within TOL_F32 + 1
 *      ulp of the output dtype (kvref.h);
 *   e. the same KV and queries give the same ATTEND output in both layouts,
 *      bit for bit: the kernels walk strides, and a layout must not change
 *      which numbers they add in which order.
 */
#include <stdlib.h>
#include <string.h>

#include "kvref.h"

#define BLOCKS 13        /* ids 1..12: the null block 0 is never handed out */
#define BS 4
#define GROUPS 2
#define LAYERS 2
#define KVH 2
#define QH (2 * KVH)     /* GQA 2 */
#define MAX_HD 16
#define MAX_LEN 18
#define NSEQ 2
#define SWA_W 16         /* wide enough that no block drops below MAX_LEN tokens */
#define Q_COUNT 4
#define SCALE 0.35f
#define HUGE_PAGE (2ull << 20)

/* Sequence lengths: 2 groups x (5 + 1) blocks = every block of the pool. */
static const uint32_t seq_len[NSEQ] = { 18, 4 };
/* Computed counts before the mapped writes: mid-block, so that a block holds both kinds. */
static const uint32_t seq_commit[NSEQ] = { 11, 2 };
/* Queries: the last ones of A (the swa group's window cuts keys 0 and 1 there), all of B. */
static const uint32_t q_first[NSEQ] = { MAX_LEN - Q_COUNT, 0 };
static const struct mask masks[GROUPS] = { { KVP_KIND_FULL, 0, 0 }, { KVP_KIND_SWA, SWA_W, 0 } };

enum { PHASE_WRITE_KV, PHASE_MAPPED, PHASE_Q };

struct dtype_case {
	const char *word; /* dtype=... */
	uint32_t dtype, head_dim;
	uint32_t qdt; /* the queries' and outputs' dtype: f32, or the pool's */
};

static const struct dtype_case cases[] = {
	{ "f32", KVP_DTYPE_F32, 16, KVP_DTYPE_F32 },
	{ "f16", KVP_DTYPE_F16, 8, KVP_DTYPE_F16 },
	{ "bf16", KVP_DTYPE_BF16, 16, KVP_DTYPE_BF16 },
};

/* One pool's run: what the test knows it holds, and what ATTEND gave. */
struct pool_run {
	const struct dtype_case *dc;
	uint32_t layout;
	char name[32];
	struct kvp_client *c;
	struct kvp_pool_map map;
	uint64_t h[NSEQ];
	uint32_t ids[NSEQ][GROUPS][MAX_LEN / BS + 1];
	/* K and V as WRITE_KV takes them: [pos][kv head][head_dim] in the pool dtype. */
	uint8_t kv[NSEQ][GROUPS][LAYERS][2][MAX_LEN * KVH * MAX_HD * 4];
	uint8_t out[NSEQ][GROUPS][LAYERS][Q_COUNT * QH * MAX_HD * 4];
};

static struct daemon dmn;

static size_t row_bytes(const struct dtype_case *dc)
{
	return dc->head_dim * dtype_size(dc->dtype);
}

/* K (or V) of one layer of one block: every kv head, every token. */
static uint64_t array_bytes(const struct dtype_case *dc)
{
	return (uint64_t)KVH * BS * row_bytes(dc);
}

static uint64_t kv_bytes(const struct dtype_case *dc)
{
	return 2 * LAYERS * BLOCKS * array_bytes(dc);
}

/* set_strides (daemon/pools/pools.c) and the layouts' shapes in uapi/kvpool.h, from first principles. */
static struct kvp_kv_layer_layout expected_layer(const struct dtype_case *dc, uint32_t layout,
						 uint32_t l)
{
	uint64_t row = row_bytes(dc), array = array_bytes(dc);
	struct kvp_kv_layer_layout e = { .k_piece = 0, .v_piece = 0 };

	if (layout == KVP_LAYOUT_BLOCK) { /* slot b: per layer K then V, each [kvh][bs][hd] */
		e.block_stride = 2 * LAYERS * array;
		e.token_stride = row;
		e.head_stride = BS * row;
		e.k_off = l * 2 * array;
		e.v_off = e.k_off + array;
	} else { /* per layer a K then a V array, each [blocks][bs][kvh][hd] */
		e.block_stride = array;
		e.token_stride = KVH * row;
		e.head_stride = row;
		e.k_off = l * 2 * BLOCKS * array;
		e.v_off = e.k_off + BLOCKS * array;
	}
	return e;
}

static uint64_t seed_of(const struct pool_run *r, uint32_t s, uint32_t phase)
{
	return (uint64_t)r->dc->dtype << 32 | s << 8 | phase; /* not the layout: e. compares them */
}

static struct kvp_client *connect_ns1(const char *pool, bool admin)
{
	char why[KVP_REASON_MAX];
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = pool, .namespace_ = "ns1",
				      .admin = admin, .pool_map = true, .why = why,
				      .why_len = sizeof(why) };
	struct kvp_client *c;
	int ret = kvp_connect(&o, &c);

	if (ret) {
		fprintf(stderr, "connect to pool %s in ns1: %s: %s\n", pool, strerror(-ret), why);
		exit(1);
	}
	return c;
}

static void create_pool(const struct pool_run *r)
{
	char dtype[32], hd[32], blocks[32];
	const char *kv[] = { blocks, "block_size=4", "groups=full swa:16", "kv_heads=2", hd, dtype,
			     "layers_per_group=2", "namespace=ns1",
			     r->layout == KVP_LAYOUT_BLOCK ? "layout=block" : "layout=layer", NULL };

	snprintf(blocks, sizeof(blocks), "blocks=%u", BLOCKS);
	snprintf(dtype, sizeof(dtype), "dtype=%s", r->dc->word);
	snprintf(hd, sizeof(hd), "head_dim=%u", r->dc->head_dim);
	create_pool_or_die(&dmn, r->name, kv);
}

static void check_layout(const struct pool_run *r)
{
	union {
		struct kvp_kv_layout h;
		uint8_t b[512];
	} buf;
	const struct dtype_case *dc = r->dc;
	size_t need = sizeof(struct kvp_kv_layout) + LAYERS * sizeof(struct kvp_kv_layer_layout) +
		      sizeof(uint64_t);
	uint64_t total = (kv_bytes(dc) + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE, piece;

	memset(&buf, 0xa5, sizeof(buf));
	CHECK_EQ(kvp_pool_layout(r->c, NULL, 0), need);
	CHECK_EQ(kvp_pool_layout(r->c, buf.b, need - 1), need);
	for (size_t i = 0; i < sizeof(buf); i++)
		CHECK_EQ(buf.b[i], 0xa5);
	CHECK_EQ(kvp_pool_layout(r->c, buf.b, sizeof(buf)), need);
	CHECK_EQ(buf.h.mem_kind, KVP_MEM_HOST_MEMFD);
	CHECK_EQ(buf.h.layout, r->layout);
	CHECK_EQ(buf.h.total_bytes, total);
	CHECK_EQ(buf.h.num_pieces, 1);
	CHECK_EQ(buf.h.num_layers, LAYERS);
	CHECK(buf.h.num_blocks == BLOCKS && buf.h.block_size == BS && buf.h.kv_heads == KVH &&
	      buf.h.head_dim == dc->head_dim && buf.h.dtype == dc->dtype && buf.h.device == 0);
	CHECK(buf.h.resv[0] == 0 && buf.h.resv[1] == 0);
	for (uint32_t l = 0; l < LAYERS; l++) {
		struct kvp_kv_layer_layout e, x = expected_layer(dc, r->layout, l);

		memcpy(&e, buf.b + sizeof(buf.h) + l * sizeof(e), sizeof(e));
		CHECK(e.k_piece == 0 && e.v_piece == 0);
		CHECK_EQ(e.k_off, x.k_off);
		CHECK_EQ(e.v_off, x.v_off);
		CHECK_EQ(e.block_stride, x.block_stride);
		CHECK_EQ(e.token_stride, x.token_stride);
		CHECK_EQ(e.head_stride, x.head_stride);
	}
	memcpy(&piece, buf.b + sizeof(buf.h) + LAYERS * sizeof(struct kvp_kv_layer_layout),
	       sizeof(piece));
	CHECK_EQ(piece, total);
}

/* kvp_map_pool's pointers are the piece plus the reported offsets, its strides the reported ones. */
static void map_pool(struct pool_run *r)
{
	int ret = kvp_map_pool(r->c, &r->map);

	if (ret) {
		fprintf(stderr, "%s: kvp_map_pool: %s: %s\n", r->name, strerror(-ret), r->map.why);
		exit(1);
	}
	CHECK_EQ(r->map.num_pieces, 1);
	CHECK_EQ(r->map.piece_bytes[0], r->map.layout.total_bytes);
	CHECK(r->map.cuda == NULL);
	for (uint32_t l = 0; l < LAYERS; l++) {
		struct kvp_kv_layer_layout x = expected_layer(r->dc, r->layout, l);
		const struct kvp_map_layer *m = &r->map.layers[l];

		CHECK(m->k == (uint8_t *)r->map.piece[0] + x.k_off &&
		      m->v == (uint8_t *)r->map.piece[0] + x.v_off);
		CHECK(m->block_stride == x.block_stride && m->token_stride == x.token_stride &&
		      m->head_stride == x.head_stride);
	}
}

/* Two sequences, all their slots allocated: between them, every block of the pool once. */
static void open_seqs(struct pool_run *r)
{
	union {
		struct kvp_block_lists l;
		uint8_t b[sizeof(struct kvp_block_lists) + BLOCKS * 4];
	} t;
	bool seen[BLOCKS] = { false };

	for (uint32_t s = 0; s < NSEQ; s++) {
		uint32_t tokens[MAX_LEN], off = 0;

		for (uint32_t i = 0; i < seq_len[s]; i++)
			tokens[i] = 1000 * (s + 1) + i;
		CHECK_EQ(kvp_seq_open(r->c, tokens, seq_len[s], NULL, 0, -1, &r->h[s]), 0);
		CHECK_EQ(kvp_alloc(r->c, r->h[s], seq_len[s], 0, false, NULL, NULL, 0), 0);
		CHECK(kvp_get_table(r->c, r->h[s], &t.l, sizeof(t)) > 0);
		CHECK_EQ(t.l.num_groups, GROUPS);
		for (uint32_t g = 0; g < GROUPS; g++) {
			CHECK_EQ(t.l.counts[g], (seq_len[s] + BS - 1) / BS);
			for (uint32_t b = 0; b < t.l.counts[g]; b++) {
				uint32_t id = t.l.ids[off + b];

				CHECK(id > 0 && id < BLOCKS && !seen[id]);
				seen[id] = true;
				r->ids[s][g][b] = id;
			}
			off += t.l.counts[g];
		}
	}
	for (uint32_t id = 1; id < BLOCKS; id++)
		CHECK(seen[id]);
}

/* One row (head_dim elements) of K (w = WHICH_K) or V of sequence s, group g, layer l. */
struct row_id {
	uint32_t s, g, l, w, pos, h;
};

typedef void row_fn(struct pool_run *r, const struct row_id *x, void *arg);

/* @fn on every row of sequence @s from position @first on, in every group and layer. */
static void each_row(struct pool_run *r, uint32_t s, uint32_t first, row_fn *fn, void *arg)
{
	struct row_id x = { .s = s };

	for (x.g = 0; x.g < GROUPS; x.g++)
		for (x.l = 0; x.l < LAYERS; x.l++)
			for (x.w = WHICH_K; x.w <= WHICH_V; x.w++)
				for (x.pos = first; x.pos < seq_len[s]; x.pos++)
					for (x.h = 0; x.h < KVH; x.h++)
						fn(r, &x, arg);
}

/* The row as the test keeps it, in WRITE_KV's order. */
static uint8_t *known_row(struct pool_run *r, const struct row_id *x)
{
	return r->kv[x->s][x->g][x->l][x->w] + ((size_t)x->pos * KVH + x->h) * row_bytes(r->dc);
}

/* The row in the mapping, by the map's strides; its elements lie d * dtype size apart. */
static uint8_t *mapped_row(const struct pool_run *r, const struct row_id *x)
{
	const struct kvp_map_layer *m = &r->map.layers[x->l];
	uint32_t b = r->ids[x->s][x->g][x->pos / BS];

	return (x->w ? m->v : m->k) + b * m->block_stride + (x->pos % BS) * m->token_stride +
	       x->h * m->head_stride;
}

static void make_row(struct pool_run *r, const struct row_id *x, void *phase)
{
	for (uint32_t d = 0; d < r->dc->head_dim; d++)
		store_elem(known_row(r, x), r->dc->dtype, d,
			   val(seed_of(r, x->s, *(uint32_t *)phase), x->w, x->g, x->l, x->pos, x->h, d));
}

static void write_mapped_row(struct pool_run *r, const struct row_id *x, void *arg)
{
	(void)arg;
	memcpy(mapped_row(r, x), known_row(r, x), row_bytes(r->dc));
}

static void check_mapped_row(struct pool_run *r, const struct row_id *x, void *when)
{
	if (memcmp(mapped_row(r, x), known_row(r, x), row_bytes(r->dc))) {
		fprintf(stderr, "%s %s: seq %u group %u layer %u %s pos %u head %u differs in the "
			"mapping\n", r->name, (const char *)when, x->s, x->g, x->l, x->w ? "V" : "K",
			x->pos, x->h);
		exit(1);
	}
}

/* Where set_strides' rule, not the map, puts the row: into the image @img. */
static void place_row(struct pool_run *r, const struct row_id *x, void *img)
{
	struct kvp_kv_layer_layout e = expected_layer(r->dc, r->layout, x->l);
	uint64_t off = (x->w ? e.v_off : e.k_off) + r->ids[x->s][x->g][x->pos / BS] * e.block_stride +
		       x->pos % BS * e.token_stride + x->h * e.head_stride;

	CHECK(off + row_bytes(r->dc) <= kv_bytes(r->dc));
	memcpy((uint8_t *)img + off, known_row(r, x), row_bytes(r->dc));
}

static void write_kv(struct pool_run *r, uint32_t s)
{
	for (uint32_t g = 0; g < GROUPS; g++)
		for (uint32_t l = 0; l < LAYERS; l++)
			CHECK_EQ(kvp_write_kv(r->c, r->h[s], g, l, 0, seq_len[s],
					      r->kv[s][g][l][WHICH_K], r->kv[s][g][l][WHICH_V]), 0);
}

/* READ_KV and the mapping both hold what the test knows, bit for bit, in every group and layer. */
static void check_kv(struct pool_run *r, const char *when)
{
	size_t row = row_bytes(r->dc);

	for (uint32_t s = 0; s < NSEQ; s++) {
		for (uint32_t g = 0; g < GROUPS; g++)
			for (uint32_t l = 0; l < LAYERS; l++) {
				uint8_t k[sizeof(r->kv[0][0][0][0])], v[sizeof(k)];

				CHECK_EQ(kvp_read_kv(r->c, r->h[s], g, l, 0, seq_len[s], k, v), 0);
				CHECK(!memcmp(k, r->kv[s][g][l][WHICH_K], seq_len[s] * KVH * row));
				CHECK(!memcmp(v, r->kv[s][g][l][WHICH_V], seq_len[s] * KVH * row));
			}
		each_row(r, s, 0, check_mapped_row, (void *)when);
	}
}

/* The whole KV area as the rule places the known rows, zeros elsewhere: no stray byte anywhere. */
static void check_image(struct pool_run *r, const char *when)
{
	uint64_t bytes = kv_bytes(r->dc);
	uint8_t *img = calloc(1, bytes), *mem = r->map.piece[0];

	CHECK(img != NULL && bytes <= r->map.piece_bytes[0]);
	for (uint32_t s = 0; s < NSEQ; s++)
		each_row(r, s, 0, place_row, img);
	for (uint64_t i = 0; i < bytes; i++)
		if (img[i] != mem[i]) {
			fprintf(stderr, "%s %s: KV byte %llu is %#x, expected %#x\n", r->name, when,
				(unsigned long long)i, mem[i], img[i]);
			exit(1);
		}
	free(img);
}

/* Query position q_first[s] + t against the double reference over the known KV. */
static void check_attend(struct pool_run *r, uint32_t s, uint32_t g, uint32_t l,
			 const uint8_t *q, uint32_t t)
{
	uint32_t hd = r->dc->head_dim, qdt = r->dc->qdt, pos = q_first[s] + t;

	for (uint32_t qh = 0; qh < QH; qh++) {
		double kv[MAX_LEN][2][MAX_HD], qd[MAX_HD], ref[MAX_HD];
		const struct ref_kv rk = { &kv[0][0][0], 2 * MAX_HD, MAX_HD };
		uint32_t kvh = qh / (QH / KVH);
		size_t qi = ((size_t)t * QH + qh) * hd;

		for (struct row_id x = { s, g, l, WHICH_K, 0, kvh }; x.pos <= pos; x.pos++)
			for (x.w = WHICH_K; x.w <= WHICH_V; x.w++)
				for (uint32_t d = 0; d < hd; d++)
					kv[x.pos][x.w][d] = load_elem(known_row(r, &x), r->dc->dtype, d);
		for (uint32_t d = 0; d < hd; d++)
			qd[d] = load_elem(q, qdt, qi + d);
		ref_attend(&masks[g], pos, qd, hd, SCALE, 0, &rk, ref);
		for (uint32_t d = 0; d < hd; d++) {
			double o = load_elem(r->out[s][g][l], qdt, qi + d), err = o - ref[d];
			double tol = TOL_F32 + (qdt == KVP_DTYPE_F32 ? 0 : ulp_of(qdt, ref[d]));

			if (!(err <= tol && -err <= tol)) {
				fprintf(stderr, "%s: seq %u group %u layer %u pos %u q head %u dim %u: "
					"out %.9g, reference %.9g\n", r->name, s, g, l, pos, qh, d, o,
					ref[d]);
				exit(1);
			}
		}
	}
}

/* One ATTEND per (group, layer), both sequences in it. */
static void attend(struct pool_run *r)
{
	uint32_t hd = r->dc->head_dim, qdt = r->dc->qdt;
	uint8_t q[NSEQ][Q_COUNT * QH * MAX_HD * 4];

	for (uint32_t g = 0; g < GROUPS; g++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			struct kvp_attend_req req[NSEQ];

			for (uint32_t s = 0; s < NSEQ; s++) {
				for (uint32_t t = 0; t < Q_COUNT; t++)
					for (uint32_t qh = 0; qh < QH; qh++)
						for (uint32_t d = 0; d < hd; d++)
							store_elem(q[s], qdt, ((size_t)t * QH + qh) * hd + d,
								   val(seed_of(r, s, PHASE_Q), WHICH_Q, g, l,
								       q_first[s] + t, qh, d));
				memset(r->out[s][g][l], 0xee, sizeof(r->out[s][g][l]));
				req[s] = (struct kvp_attend_req){ .handle = r->h[s], .first_pos = q_first[s],
								  .count = Q_COUNT, .q = q[s],
								  .out = r->out[s][g][l] };
			}
			CHECK_EQ(kvp_attend(r->c, g, l, QH, SCALE, 0, qdt == KVP_DTYPE_F32, req, NSEQ), 0);
			for (uint32_t s = 0; s < NSEQ; s++)
				for (uint32_t t = 0; t < Q_COUNT; t++)
					check_attend(r, s, g, l, q[s], t);
		}
}

/* The sequences closed, the pool's invariants hold and nothing is left in use. */
static void finish(struct pool_run *r)
{
	struct kvp_client *adm;
	struct kvp_pool_stats st;
	char why[256];

	for (uint32_t s = 0; s < NSEQ; s++)
		CHECK_EQ(kvp_seq_close(r->c, r->h[s]), 0);
	kvp_unmap_pool(&r->map);
	kvp_close(r->c);
	adm = connect_ns1(r->name, true);
	if (kvp_check(adm, why, sizeof(why))) {
		fprintf(stderr, "%s: invariants broken: %s\n", r->name, why);
		exit(1);
	}
	CHECK_EQ(kvp_pool_stats(adm, &st), 0);
	CHECK_EQ(st.blocks_used, 0);
	kvp_close(adm);
}

static void run_pool(struct pool_run *r)
{
	create_pool(r);
	r->c = connect_ns1(r->name, false);
	check_layout(r);
	map_pool(r);
	open_seqs(r);
	for (uint32_t s = 0, phase = PHASE_WRITE_KV; s < NSEQ; s++) {
		each_row(r, s, 0, make_row, &phase);
		write_kv(r, s);
	}
	check_kv(r, "after WRITE_KV");
	check_image(r, "after WRITE_KV");
	for (uint32_t s = 0, phase = PHASE_MAPPED; s < NSEQ; s++) {
		CHECK_EQ(kvp_commit(r->c, r->h[s], seq_commit[s]), 0);
		each_row(r, s, seq_commit[s], make_row, &phase);
		each_row(r, s, seq_commit[s], write_mapped_row, NULL);
		CHECK_EQ(kvp_commit(r->c, r->h[s], seq_len[s]), 0);
	}
	check_kv(r, "after mapped writes");
	check_image(r, "after mapped writes");
	attend(r);
	finish(r);
}

int main(void)
{
	static const uint32_t layouts[2] = { KVP_LAYOUT_BLOCK, KVP_LAYOUT_LAYER };

	watchdog_start("test_pool_layouts", 30);
	self_check();
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pool_run *r[2];

		for (uint32_t k = 0; k < 2; k++) {
			r[k] = calloc(1, sizeof(*r[k]));
			CHECK(r[k] != NULL);
			r[k]->dc = &cases[i];
			r[k]->layout = layouts[k];
			snprintf(r[k]->name, sizeof(r[k]->name), "%s-%s", cases[i].word,
				 k ? "layer" : "block");
			run_pool(r[k]);
		}
		if (memcmp(r[0]->out, r[1]->out, sizeof(r[0]->out))) {
			fprintf(stderr, "%s: ATTEND differs between the block and layer layouts\n",
				cases[i].word);
			exit(1);
		}
		free(r[0]);
		free(r[1]);
	}
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
