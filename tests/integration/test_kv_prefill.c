/* SPDX-License-Identifier: MIT */
/*
 * Prefill in one call, prefill in uneven chunks (COMMIT between chunks) and
 * token-by-token decode of the same tokens give the same ATTEND outputs, bit
 * for bit (the host backend computes every query on its own, so batching must
 * not change a bit), and each matches a double-precision reference. Cyclic
 * groups take chunks of at most max_step_tokens (one call of that many is the
 * "one call" there) and run past their ring several times.
 *
 * Then every sequence decodes on, token by token, until the windows have
 * dropped blocks: GET_TABLE must show exactly the null entries docs/design.md
 * gives (swa, chunked, rswa), and ATTEND must still match the reference
 * computed on the full, never-dropped KV the test keeps itself.
 *
 * Tolerances (outputs are convex combinations of V values in [-1, 1]):
 *   f32 output:      |out - ref| <= TOL_F32 = 1e-5
 *   f16/bf16 output: |out - ref| <= TOL_F32 + 1 ulp(ref) in the output dtype
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvref.h"

/* ---- the pools and the three ways through them ---- */

#define KV_HEADS 2
#define LAYERS 2
#define BS 4
#define MAX_GROUPS 4
#define MAX_HD 32
#define MAX_Q_HEADS (KV_HEADS * 4)
#define MAX_LEN 48
#define MAX_CHUNKS 8
#define NMODES 3

enum { MODE_ONE_CALL, MODE_CHUNKS, MODE_TOKENS };
static const char *const mode_name[NMODES] = { "one call", "chunks", "token by token" };

struct pool_def {
	const char *name;
	const char *groups_word;
	const char *step_word;
	uint32_t ngroups;
	uint32_t kind[MAX_GROUPS], param[MAX_GROUPS];
	uint32_t dtype, head_dim, max_step;
	bool q_f32;
	uint32_t ratio; /* q_heads / kv_heads */
	float scale, softcap;
	uint32_t prompt, total, prefix;
	/* Prefill chunk sizes of MODE_ONE_CALL and MODE_CHUNKS (0 ends); MODE_TOKENS takes 1s. */
	uint32_t chunks[2][MAX_CHUNKS];
};

static const struct pool_def pools[] = {
	{
		.name = "lin32", .groups_word = "groups=full swa:6 rswa:5 chunked:8",
		.step_word = "max_step_tokens=1", .ngroups = 4,
		.kind = { KVP_KIND_FULL, KVP_KIND_SWA, KVP_KIND_RSWA, KVP_KIND_CHUNKED },
		.param = { 0, 6, 5, 8 }, .dtype = KVP_DTYPE_F32, .head_dim = 16, .max_step = 0,
		.q_f32 = true, .ratio = 2, .scale = 0.5f, .softcap = 0,
		.prompt = 29, .total = 45, .prefix = 6,
		.chunks = { { 29 }, { 5, 7, 4, 8, 5 } },
	},
	{
		.name = "linbf16", .groups_word = "groups=chunked:6 rswa:9 swa:9 full",
		.step_word = "max_step_tokens=1", .ngroups = 4,
		.kind = { KVP_KIND_CHUNKED, KVP_KIND_RSWA, KVP_KIND_SWA, KVP_KIND_FULL },
		.param = { 6, 9, 9, 0 }, .dtype = KVP_DTYPE_BF16, .head_dim = 32, .max_step = 0,
		.q_f32 = false, .ratio = 4, .scale = 0.35f, .softcap = 1.25f,
		.prompt = 26, .total = 44, .prefix = 8,
		.chunks = { { 26 }, { 3, 9, 1, 6, 7 } },
	},
	{
		.name = "cyc16", .groups_word = "groups=cyclic:5 cyclic:6 full swa:6",
		.step_word = "max_step_tokens=8", .ngroups = 4,
		.kind = { KVP_KIND_CYCLIC, KVP_KIND_CYCLIC, KVP_KIND_FULL, KVP_KIND_SWA },
		.param = { 5, 6, 0, 6 }, .dtype = KVP_DTYPE_F16, .head_dim = 16, .max_step = 8,
		.q_f32 = false, .ratio = 1, .scale = 0.5f, .softcap = 1.25f,
		.prompt = 24, .total = 40, .prefix = 0,
		.chunks = { { 8, 8, 8 }, { 3, 5, 8, 1, 7 } },
	},
};

struct seq {
	uint64_t h;
	uint32_t mode, ntokens, computed, allocated;
};

/* Outputs by mode, group, layer, position: [q_heads][head_dim] in the query dtype. */
static uint8_t outs[NMODES][MAX_GROUPS][LAYERS][MAX_LEN][MAX_Q_HEADS * MAX_HD * 4];
/* K and V as stored, decoded: [group][layer][pos][kv head][K, V][dim]. */
static double kv_table[MAX_GROUPS][LAYERS][MAX_LEN][KV_HEADS][2][MAX_HD];

static struct daemon dmn;
static double worst[3];

static uint32_t qdtype(const struct pool_def *p)
{
	return p->q_f32 ? KVP_DTYPE_F32 : p->dtype;
}

static size_t q_row_bytes(const struct pool_def *p)
{
	return (size_t)KV_HEADS * p->ratio * p->head_dim * dtype_size(qdtype(p));
}

static uint64_t pool_seed(const struct pool_def *p)
{
	return mix((uint64_t)p->dtype << 8 | p->head_dim);
}

static void create_pool(const struct pool_def *p)
{
	char dtype[32], hd[32];
	const char *kv[] = { "blocks=256", "block_size=4", p->groups_word, "kv_heads=2", hd, dtype,
			     "layers_per_group=2", p->step_word, NULL };

	snprintf(dtype, sizeof(dtype), "dtype=%s",
		 p->dtype == KVP_DTYPE_F32 ? "f32" : p->dtype == KVP_DTYPE_F16 ? "f16" : "bf16");
	snprintf(hd, sizeof(hd), "head_dim=%u", p->head_dim);
	create_pool_or_die(&dmn, p->name, kv);
}

static void write_kv(struct kvp_client *c, const struct pool_def *p, const struct seq *s,
		     uint32_t count)
{
	static uint8_t k[MAX_LEN * KV_HEADS * MAX_HD * 4], v[sizeof(k)];
	uint32_t hd = p->head_dim;

	for (uint32_t g = 0; g < p->ngroups; g++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			for (uint32_t t = 0; t < count; t++)
				for (uint32_t kh = 0; kh < KV_HEADS; kh++)
					for (uint32_t d = 0; d < hd; d++) {
						size_t i = ((size_t)t * KV_HEADS + kh) * hd + d;
						uint32_t pos = s->computed + t;

						store_elem(k, p->dtype, i, val(pool_seed(p), WHICH_K, g, l, pos, kh, d));
						store_elem(v, p->dtype, i, val(pool_seed(p), WHICH_V, g, l, pos, kh, d));
					}
			CHECK_EQ(kvp_write_kv(c, s->h, g, l, s->computed, count, k, v), 0);
		}
	}
}

static void fill_q(const struct pool_def *p, uint32_t g, uint32_t l, uint32_t first,
		   uint32_t count, uint8_t *q)
{
	uint32_t hd = p->head_dim, qh_n = KV_HEADS * p->ratio;

	for (uint32_t t = 0; t < count; t++)
		for (uint32_t qh = 0; qh < qh_n; qh++)
			for (uint32_t d = 0; d < hd; d++)
				store_elem(q, qdtype(p), ((size_t)t * qh_n + qh) * hd + d,
					   val(pool_seed(p), WHICH_Q, g, l, first + t, qh, d));
}

/* ATTEND of positions computed .. computed + count - 1 of each listed sequence, in every group and layer. */
static void attend(struct kvp_client *c, const struct pool_def *p, struct seq *const *seqs,
		   uint32_t nseqs, uint32_t count)
{
	static uint8_t q[NMODES][MAX_LEN * MAX_Q_HEADS * MAX_HD * 4];
	static uint8_t out[NMODES][sizeof(q[0])];
	size_t row = q_row_bytes(p);

	for (uint32_t g = 0; g < p->ngroups; g++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			struct kvp_attend_req reqs[NMODES];

			for (uint32_t i = 0; i < nseqs; i++) {
				fill_q(p, g, l, seqs[i]->computed, count, q[i]);
				memset(out[i], 0xee, count * row);
				reqs[i] = (struct kvp_attend_req){ .handle = seqs[i]->h,
								   .first_pos = seqs[i]->computed,
								   .count = count, .q = q[i], .out = out[i] };
			}
			CHECK_EQ(kvp_attend(c, g, l, KV_HEADS * p->ratio, p->scale, p->softcap, p->q_f32,
					    reqs, nseqs), 0);
			for (uint32_t i = 0; i < nseqs; i++)
				for (uint32_t t = 0; t < count; t++)
					memcpy(outs[seqs[i]->mode][g][l][seqs[i]->computed + t], out[i] + t * row,
					       row);
		}
	}
}

static void alloc(struct kvp_client *c, struct seq *s, uint32_t count)
{
	if (s->computed + count > s->ntokens) { /* decode: the tokens come first */
		uint32_t tokens[MAX_LEN], add = s->computed + count - s->ntokens;

		for (uint32_t t = 0; t < add; t++)
			tokens[t] = 100 * s->mode + s->ntokens + t + 1;
		CHECK_EQ(kvp_append(c, s->h, tokens, add), 0);
		s->ntokens += add;
	}
	CHECK_EQ(kvp_alloc(c, s->h, count, 0, false, NULL, NULL, 0), 0);
	if (s->computed + count > s->allocated)
		s->allocated = s->computed + count;
}

static void commit(struct kvp_client *c, struct seq *s, uint32_t count)
{
	s->computed += count;
	CHECK_EQ(kvp_commit(c, s->h, s->computed), 0);
}

static uint32_t cdiv(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

/* Whether design.md's rules drop table position @b of a group once @n tokens are computed. */
static bool dropped(const struct pool_def *p, uint32_t g, uint32_t n, uint32_t b)
{
	uint32_t w = p->param[g], skipped;

	switch (p->kind[g]) {
	case KVP_KIND_SWA:
		skipped = n + 1 > w ? n + 1 - w : 0;
		return b < skipped / BS;
	case KVP_KIND_CHUNKED:
		return b < n / w * w / BS;
	case KVP_KIND_RSWA: {
		uint32_t hi = n > w && n - w > p->prefix ? n - w : p->prefix;

		return b >= cdiv(p->prefix, BS) && b < hi / BS;
	}
	}
	return false; /* full, cyclic */
}

/* GET_TABLE: the length the allocation gives, nulls exactly where the windows dropped. Returns
 * the groups that have a null entry, as a bit mask. */
static uint32_t check_table(struct kvp_client *c, const struct pool_def *p, const struct seq *s)
{
	union {
		struct kvp_block_lists l;
		uint8_t bytes[sizeof(struct kvp_block_lists) + MAX_GROUPS * MAX_LEN * 4];
	} buf;
	uint32_t with_nulls = 0, off = 0;
	int ret = kvp_get_table(c, s->h, &buf.l, sizeof(buf));

	CHECK(ret > 0);
	CHECK_EQ(buf.l.num_groups, p->ngroups);
	for (uint32_t g = 0; g < p->ngroups; g++) {
		uint32_t len = cdiv(s->allocated, BS);

		if (p->kind[g] == KVP_KIND_CYCLIC) {
			uint32_t ring = cdiv(p->param[g] - 1 + p->max_step, BS);

			len = len < ring ? len : ring;
		}
		CHECK_EQ(buf.l.counts[g], len);
		for (uint32_t b = 0; b < len; b++) {
			bool null = buf.l.ids[off + b] == 0;

			if (null != dropped(p, g, s->computed, b)) {
				fprintf(stderr, "pool %s %s group %u, %u computed: table entry %u is %u\n",
					p->name, mode_name[s->mode], g, s->computed, b, buf.l.ids[off + b]);
				exit(1);
			}
			with_nulls |= (uint32_t)null << g;
		}
		off += len;
	}
	return with_nulls;
}

/* softmax(scale q.K^T, capped) V over the positions the group's mask lets query @i see. */
static void reference(const struct pool_def *p, uint32_t g, uint32_t l, uint32_t i, uint32_t kh,
		      const double *q, double *out)
{
	const struct mask m = { p->kind[g], p->param[g], p->prefix };
	const struct ref_kv kv = { &kv_table[g][l][0][kh][WHICH_K][0], KV_HEADS * 2 * MAX_HD,
				   MAX_HD };

	ref_attend(&m, i, q, p->head_dim, (double)p->scale, p->softcap, &kv, out);
}

static void verify(const struct pool_def *p)
{
	uint32_t hd = p->head_dim, qh_n = KV_HEADS * p->ratio, qdt = qdtype(p);
	size_t row = q_row_bytes(p);
	uint8_t q[MAX_Q_HEADS * MAX_HD * 4];

	for (uint32_t g = 0; g < p->ngroups; g++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			for (uint32_t pos = 0; pos < p->total; pos++) {
				fill_q(p, g, l, pos, 1, q);
				for (uint32_t m = 1; m < NMODES; m++) {
					if (memcmp(outs[m][g][l][pos], outs[MODE_ONE_CALL][g][l][pos], row)) {
						fprintf(stderr, "pool %s group %u layer %u position %u: %s and %s "
							"outputs differ\n", p->name, g, l, pos, mode_name[m],
							mode_name[MODE_ONE_CALL]);
						exit(1);
					}
				}
				for (uint32_t qh = 0; qh < qh_n; qh++) {
					double qd[MAX_HD], ref[MAX_HD];

					for (uint32_t d = 0; d < hd; d++)
						qd[d] = load_elem(q, qdt, (size_t)qh * hd + d);
					reference(p, g, l, pos, qh / p->ratio, qd, ref);
					for (uint32_t d = 0; d < hd; d++) {
						double o = load_elem(outs[MODE_ONE_CALL][g][l][pos], qdt,
								     (size_t)qh * hd + d);
						double err = o > ref[d] ? o - ref[d] : ref[d] - o;
						double tol = TOL_F32 + (qdt == KVP_DTYPE_F32 ? 0 : ulp_of(qdt, ref[d]));

						if (!(err <= tol)) {
							fprintf(stderr, "pool %s group %u layer %u position %u q head %u "
								"dim %u: out %.9g, reference %.9g, |diff| %.3g > %.3g\n",
								p->name, g, l, pos, qh, d, o, ref[d], err, tol);
							exit(1);
						}
						if (err / tol > worst[qdt])
							worst[qdt] = err / tol;
					}
				}
			}
		}
	}
}

static void run_pool(const struct pool_def *p)
{
	struct kvp_client *c = connect_or_die(&dmn, p->name, "", false);
	struct seq seqs[NMODES], *all[NMODES];
	struct kvp_pool_stats st;
	uint32_t tokens[MAX_LEN], windowed = 0;

	CHECK(p->total <= MAX_LEN && p->ngroups <= MAX_GROUPS && p->head_dim <= MAX_HD);
	for (uint32_t g = 0; g < p->ngroups; g++)
		for (uint32_t l = 0; l < LAYERS; l++)
			for (uint32_t pos = 0; pos < p->total; pos++)
				for (uint32_t kh = 0; kh < KV_HEADS; kh++)
					for (uint32_t w = WHICH_K; w <= WHICH_V; w++)
						for (uint32_t d = 0; d < p->head_dim; d++)
							kv_table[g][l][pos][kh][w][d] = as_stored(
								p->dtype, val(pool_seed(p), w, g, l, pos, kh, d));
	memset(outs, 0, sizeof(outs));

	/* Prefill: the same prompt three ways, each its own sequence (tokens differ: no cache hits). */
	for (uint32_t m = 0; m < NMODES; m++) {
		struct seq *s = &seqs[m];
		uint32_t n = 0;

		all[m] = s;
		*s = (struct seq){ .mode = m, .ntokens = p->prompt };
		for (uint32_t t = 0; t < p->prompt; t++)
			tokens[t] = 100 * m + t + 1;
		CHECK_EQ(kvp_seq_open(c, tokens, p->prompt, NULL, 0, p->prefix, &s->h), 0);
		for (uint32_t k = 0; s->computed < p->prompt; k++) {
			uint32_t count = m == MODE_TOKENS ? 1 : p->chunks[m][k];

			CHECK(count > 0 && (!p->max_step || count <= p->max_step));
			alloc(c, s, count);
			write_kv(c, p, s, count);
			attend(c, p, &s, 1, count);
			commit(c, s, count);
			n++;
		}
		CHECK(m != MODE_ONE_CALL || p->max_step || n == 1);
		check_table(c, p, s);
	}
	/* Decode on, the three together in each ATTEND, until the windows dropped blocks. */
	while (seqs[0].computed < p->total) {
		for (uint32_t m = 0; m < NMODES; m++) {
			alloc(c, &seqs[m], 1);
			write_kv(c, p, &seqs[m], 1);
		}
		attend(c, p, all, NMODES, 1);
		for (uint32_t m = 0; m < NMODES; m++)
			commit(c, &seqs[m], 1);
	}
	/* A test of dropping must see drops: by now every swa, rswa and chunked group has some. */
	for (uint32_t g = 0; g < p->ngroups; g++)
		if (p->kind[g] != KVP_KIND_FULL && p->kind[g] != KVP_KIND_CYCLIC)
			windowed |= 1u << g;
	for (uint32_t m = 0; m < NMODES; m++)
		CHECK_EQ(check_table(c, p, &seqs[m]), windowed);
	verify(p);

	for (uint32_t m = 0; m < NMODES; m++)
		CHECK_EQ(kvp_seq_close(c, seqs[m].h), 0);
	kvp_close(c);
	check_pool_or_die(&dmn, p->name, &st);
	CHECK_EQ(st.blocks_used, 0);
}

int main(void)
{
	watchdog_start("test_kv_prefill", 30);
	self_check();

	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	for (uint32_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++)
		create_pool(&pools[i]);
	for (uint32_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++)
		run_pool(&pools[i]);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("test_kv_prefill: worst |error| / tolerance: f32 %.3f, f16 %.3f, bf16 %.3f\n",
	       worst[KVP_DTYPE_F32], worst[KVP_DTYPE_F16], worst[KVP_DTYPE_BF16]);
	return 0;
}
