/* SPDX-License-Identifier: MIT */
/*
 * ATTEND on the GPU against the host backend's ATTEND on the same inputs,
 * through one daemon: each geometry twice, a host pool and a cuda pool, the
 * same sequences in both, the same K and V written to both (WRITE_KV), and
 * every ATTEND sent to both with the same queries.
 *
 *   - hybrid pools of every mask kind (full, swa, rswa with the prompt as its
 *     prefix, chunked, cyclic), in bf16 (head_dim 128: the tensor-core kernels),
 *     f16 (head_dim 64) and f32 (head_dim 40: the SIMT kernels);
 *   - GQA 1, 4 and 8, q in the pool dtype and in f32, softcap on and off,
 *     rotating so that every group meets every combination;
 *   - prompts that end on a block boundary and inside a block, prefilled in
 *     chunks of max_step_tokens, then decode steps: batches mixing prefill
 *     and decode entries, contexts ending at every offset within a block;
 *   - long contexts (8 kv heads, GQA 8, up to 6000 tokens) that the GPU
 *     splits across thread blocks and merges by log-sum-exp.
 *
 * Tolerances, the GPU's output against the host's: f32 outputs 4e-5; f16 and
 * bf16 outputs 4e-5 + 1 ulp of the host's value (each backend is within about
 * 1e-5 of the exact result before rounding once to the output dtype: the
 * values are convex combinations of V in [-1, 1]).
 */
#include <errno.h>
#include <string.h>

#include "cudatest.h"
#include "kvref.h"

#define MAX_SEQS 4
#define MAX_STEP 32
#define MAX_HD 128
#define MAX_Q_HEADS 64
#define TOL 4e-5

struct pool_def {
	const char *name;
	uint32_t dtype, head_dim, kv_heads, block_size, max_step;
	const char *groups;
	uint32_t ngroups;
	uint32_t prompts[MAX_SEQS], nseqs, decode_steps;
	bool attend_prefill; /* the prefill chunks too, not only the decode steps */
};

static const struct pool_def pools[] = {
	{ "bf16", KVP_DTYPE_BF16, 128, 2, 16, 32, "groups=full swa:40 rswa:24 chunked:32 cyclic:20", 5,
	  { 48, 37, 1, 100 }, 4, 20, true },
	{ "f16", KVP_DTYPE_F16, 64, 1, 8, 16, "groups=full swa:17 rswa:9 chunked:8 cyclic:6", 5,
	  { 16, 13, 40, 3 }, 4, 12, true },
	{ "f32", KVP_DTYPE_F32, 40, 2, 4, 4, "groups=full cyclic:5", 2, { 8, 6, 1 }, 3, 9, true },
	/* the host's side of a 6000-token prefill is minutes of CPU: its decode steps only */
	{ "long", KVP_DTYPE_BF16, 128, 8, 16, 32, "groups=full", 1, { 6000, 4099, 2048 }, 3, 2,
	  false },
};

struct seq {
	uint64_t h[2]; /* in the host pool, in the cuda pool */
	uint32_t prompt, ntokens, computed, step;
};

static struct daemon dmn;
static uint64_t n_attends, n_values;
static double worst;

static void create_pools(const struct pool_def *p)
{
	char name[32], dtype[32], hd[32], kvh[32], bs[32], step[32];
	const char *kv[] = { "blocks=4096", bs, p->groups, kvh, hd, dtype, "layers_per_group=1",
			     step, NULL, NULL };

	snprintf(dtype, sizeof(dtype), "dtype=%s",
		 p->dtype == KVP_DTYPE_F32 ? "f32" : p->dtype == KVP_DTYPE_F16 ? "f16" : "bf16");
	snprintf(hd, sizeof(hd), "head_dim=%u", p->head_dim);
	snprintf(kvh, sizeof(kvh), "kv_heads=%u", p->kv_heads);
	snprintf(bs, sizeof(bs), "block_size=%u", p->block_size);
	snprintf(step, sizeof(step), "max_step_tokens=%u", p->max_step);
	snprintf(name, sizeof(name), "h-%s", p->name);
	create_pool_or_die(&dmn, name, kv);
	kv[8] = "backend=cuda";
	snprintf(name, sizeof(name), "c-%s", p->name);
	create_pool_or_die(&dmn, name, kv);
}

/* The step's K and V of sequence @si in group @g, written to both pools. */
static void write_step(struct kvp_client *c[2], const struct pool_def *p, const struct seq *s,
		       uint32_t si, uint32_t g)
{
	static uint8_t k[MAX_STEP * 8 * MAX_HD * 4], v[sizeof(k)];
	uint32_t hd = p->head_dim;

	for (uint32_t t = 0; t < s->step; t++)
		for (uint32_t kh = 0; kh < p->kv_heads; kh++)
			for (uint32_t d = 0; d < hd; d++) {
				size_t i = ((size_t)t * p->kv_heads + kh) * hd + d;

				store_elem(k, p->dtype, i, val(si, WHICH_K, g, 0, s->computed + t, kh, d));
				store_elem(v, p->dtype, i, val(si, WHICH_V, g, 0, s->computed + t, kh, d));
			}
	for (int b = 0; b < 2; b++)
		CHECK_EQ(kvp_write_kv(c[b], s->h[b], g, 0, s->computed, s->step, k, v), 0);
}

/* One ATTEND of every active sequence's step in group @g, on both pools, compared. */
static void attend_step(struct kvp_client *c[2], const struct pool_def *p, const struct seq *seqs,
			uint32_t g, uint32_t gqa, bool q_f32, float softcap, uint32_t round)
{
	static uint8_t qbuf[MAX_SEQS][MAX_STEP * MAX_Q_HEADS * MAX_HD * 4];
	static uint8_t out[2][MAX_SEQS][MAX_STEP * MAX_Q_HEADS * MAX_HD * 4];
	uint32_t q_heads = p->kv_heads * gqa, qdt = q_f32 ? KVP_DTYPE_F32 : p->dtype, n = 0;
	float scale = 1.0f / (float)p->head_dim * 11.0f; /* sharp enough that masks matter */
	struct kvp_attend_req reqs[2][MAX_SEQS];
	uint32_t order[MAX_SEQS];

	for (uint32_t si = 0; si < p->nseqs; si++) {
		const struct seq *s = &seqs[si];
		size_t bytes = (size_t)s->step * q_heads * p->head_dim * dtype_size(qdt);

		if (!s->step || (!p->attend_prefill && s->computed < s->prompt))
			continue;
		for (size_t i = 0; i < (size_t)s->step * q_heads * p->head_dim; i++)
			store_elem(qbuf[si], qdt, i, val(si + 100 * round, WHICH_Q, g, 0, (uint32_t)i, 0, 0));
		for (int b = 0; b < 2; b++) {
			memset(out[b][si], 0xee, bytes);
			reqs[b][n] = (struct kvp_attend_req){ s->h[b], s->computed, s->step, qbuf[si],
							      out[b][si] };
		}
		order[n++] = si;
	}
	if (!n)
		return;
	for (int b = 0; b < 2; b++)
		CHECK_EQ(kvp_attend(c[b], g, 0, q_heads, scale, softcap, q_f32, reqs[b], n), 0);
	n_attends++;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t si = order[k];
		size_t values = (size_t)seqs[si].step * q_heads * p->head_dim;

		for (size_t i = 0; i < values; i++) {
			double host = load_elem(out[0][si], qdt, i), gpu = load_elem(out[1][si], qdt, i);
			double tol = TOL + (qdt == KVP_DTYPE_F32 ? 0 : ulp_of(qdt, host));
			double err = gpu > host ? gpu - host : host - gpu;

			if (!(err <= tol)) {
				fprintf(stderr, "pool %s group %u seq %u pos %zu q head %zu of %u dim %zu "
					"q_f32 %d softcap %g: gpu %.9g, host %.9g, |diff| %.3g > %.3g\n",
					p->name, g, si, seqs[si].computed + i / p->head_dim / q_heads,
					i / p->head_dim % q_heads, q_heads, i % p->head_dim, q_f32,
					(double)softcap, gpu, host, err, tol);
				exit(1);
			}
			worst = err / tol > worst ? err / tol : worst;
			n_values++;
		}
	}
}

static void run_pool(const struct pool_def *p)
{
	static uint32_t tokens[8192];
	struct kvp_client *c[2];
	struct seq seqs[MAX_SEQS];
	char name[2][32];
	uint32_t active = p->nseqs, round = 0;

	snprintf(name[0], sizeof(name[0]), "h-%s", p->name);
	snprintf(name[1], sizeof(name[1]), "c-%s", p->name);
	for (int b = 0; b < 2; b++) {
		/* room for a step's q and outputs: 4 sequences of 32 queries of 64 heads */
		struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = name[b],
					      .arena_bytes = 16u << 20 };

		CHECK_EQ(kvp_connect(&o, &c[b]), 0);
	}
	for (uint32_t si = 0; si < p->nseqs; si++) {
		struct seq *s = &seqs[si];

		*s = (struct seq){ .prompt = p->prompts[si], .ntokens = p->prompts[si] };
		for (uint32_t t = 0; t < s->prompt; t++)
			tokens[t] = 100000 * si + t + 1;
		for (int b = 0; b < 2; b++)
			CHECK_EQ(kvp_seq_open(c[b], tokens, s->prompt, NULL, 0, -1, &s->h[b]), 0);
	}
	while (active) {
		for (uint32_t si = 0; si < p->nseqs; si++) {
			struct seq *s = &seqs[si];
			uint32_t end = s->prompt + p->decode_steps;

			/* the prompt in chunks (an uneven first one), then one token a step */
			s->step = s->computed < s->prompt ? s->prompt - s->computed : 1;
			if (s->step > p->max_step)
				s->step = s->computed ? p->max_step : p->max_step - 3 * si;
			if (s->computed >= end)
				s->step = 0;
			if (!s->step)
				continue;
			if (s->computed + s->step > s->ntokens) {
				uint32_t t = 100000 * si + s->ntokens + 1;

				for (int b = 0; b < 2; b++)
					CHECK_EQ(kvp_append(c[b], s->h[b], &t, 1), 0);
				s->ntokens++;
			}
			for (int b = 0; b < 2; b++)
				CHECK_EQ(kvp_alloc(c[b], s->h[b], s->step, 0, false, NULL, NULL, 0), 0);
			for (uint32_t g = 0; g < p->ngroups; g++)
				write_step(c, p, s, si, g);
		}
		for (uint32_t g = 0; g < p->ngroups; g++) {
			static const uint32_t gqas[3] = { 1, 4, 8 };
			uint32_t combo = (round + 2 * g) % 12;

			attend_step(c, p, seqs, g, gqas[combo % 3], combo / 3 % 2, combo / 6 ? 1.25f : 0,
				    round);
		}
		active = 0;
		for (uint32_t si = 0; si < p->nseqs; si++) {
			struct seq *s = &seqs[si];

			if (!s->step)
				continue;
			s->computed += s->step;
			for (int b = 0; b < 2; b++)
				CHECK_EQ(kvp_commit(c[b], s->h[b], s->computed), 0);
			active += s->computed < s->prompt + p->decode_steps;
		}
		round++;
	}
	for (uint32_t si = 0; si < p->nseqs; si++)
		for (int b = 0; b < 2; b++)
			CHECK_EQ(kvp_seq_close(c[b], seqs[si].h[b]), 0);
	for (int b = 0; b < 2; b++) {
		struct kvp_pool_stats st;

		kvp_close(c[b]);
		check_pool_or_die(&dmn, name[b], &st);
		CHECK_EQ(st.blocks_used, 0);
	}
}

int main(void)
{
	watchdog_start("test_cuda_attend", 240);
	cuda_need_gpu("test_cuda_attend");
	self_check();
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	for (size_t i = 0; i < sizeof(pools) / sizeof(pools[0]); i++) {
		create_pools(&pools[i]);
		run_pool(&pools[i]);
	}
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("test_cuda_attend: %llu attends on each backend, %llu values compared; "
	       "worst |gpu - host| / tolerance %.3f\n", (unsigned long long)n_attends,
	       (unsigned long long)n_values, worst);
	return 0;
}
