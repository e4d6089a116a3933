/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype_store.h"
#include "model.h"

#define VOCAB 256

/* xorshift64*: the weights must be the same in every engine process. */
static float next_weight(uint64_t *s, float scale)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return scale * ((float)((*s * 0x2545f4914f6cdd1dull) >> 40) / (float)(1u << 24) - 0.5f);
}

static float *random_matrix(uint64_t *s, size_t n, float scale)
{
	float *w = malloc(n * sizeof(*w));

	for (size_t i = 0; w && i < n; i++)
		w[i] = next_weight(s, scale);
	return w;
}

int engine_model_init(struct engine_model *m, const struct kvp_pool_info *info)
{
	uint64_t seed = 0x6b76706f6f6cull;
	size_t kv_dim;

	memset(m, 0, sizeof(*m));
	if (!info->kv_heads || !info->head_dim || !info->layers_per_group)
		return -EOPNOTSUPP;
	m->vocab = VOCAB;
	m->kv_heads = info->kv_heads;
	m->q_heads = 2 * info->kv_heads;
	m->head_dim = info->head_dim;
	m->dim = m->q_heads * m->head_dim;
	m->groups = info->num_groups;
	m->layers_per_group = info->layers_per_group;
	m->layers = m->groups * m->layers_per_group;
	m->dtype = info->dtype;
	kv_dim = (size_t)m->kv_heads * m->head_dim;
	m->embed = random_matrix(&seed, (size_t)VOCAB * m->dim, 2.0f);
	m->wq = random_matrix(&seed, (size_t)m->layers * m->dim * m->dim, 2.0f / sqrtf((float)m->dim));
	m->wk = random_matrix(&seed, (size_t)m->layers * kv_dim * m->dim, 2.0f / sqrtf((float)m->dim));
	m->wv = random_matrix(&seed, (size_t)m->layers * kv_dim * m->dim, 2.0f / sqrtf((float)m->dim));
	m->wo = random_matrix(&seed, (size_t)m->layers * m->dim * m->dim, 1.0f / sqrtf((float)m->dim));
	m->unembed = random_matrix(&seed, (size_t)VOCAB * m->dim, 1.0f);
	if (!m->embed || !m->wq || !m->wk || !m->wv || !m->wo || !m->unembed) {
		engine_model_free(m);
		return -ENOMEM;
	}
	return 0;
}

void engine_model_free(struct engine_model *m)
{
	free(m->embed);
	free(m->wq);
	free(m->wk);
	free(m->wv);
	free(m->wo);
	free(m->unembed);
	memset(m, 0, sizeof(*m));
}

static void matvec(const float *w, const float *x, float *y, size_t rows, size_t cols)
{
	for (size_t r = 0; r < rows; r++) {
		float acc = 0;

		for (size_t c = 0; c < cols; c++)
			acc += w[r * cols + c] * x[c];
		y[r] = acc;
	}
}

static void rms_norm(const float *x, float *y, size_t n)
{
	float ss = 0;

	for (size_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = 1.0f / sqrtf(ss / (float)n + 1e-6f);
	for (size_t i = 0; i < n; i++)
		y[i] = x[i] * ss;
}

int engine_model_forward(struct engine_model *m, struct kvp_client *c, uint64_t seq,
			 const uint32_t *tokens, uint32_t first, uint32_t n, uint32_t *next)
{
	size_t dim = m->dim, kv_dim = (size_t)m->kv_heads * m->head_dim;
	size_t dsize = m->dtype == KVP_DTYPE_F32 ? 4 : 2;
	float *x = malloc(n * dim * sizeof(float)), *h = malloc(dim * sizeof(float));
	float *q = malloc(n * dim * sizeof(float)), *att = malloc(n * dim * sizeof(float));
	float *kv = malloc(kv_dim * sizeof(float)), *logits = malloc(m->vocab * sizeof(float));
	uint8_t *k = malloc(n * kv_dim * dsize), *v = malloc(n * kv_dim * dsize);
	int ret = -ENOMEM;

	if (!x || !h || !q || !att || !kv || !logits || !k || !v)
		goto out;
	for (uint32_t t = 0; t < n; t++)
		memcpy(x + t * dim, m->embed + (size_t)(tokens[first + t] % m->vocab) * dim,
		       dim * sizeof(float));
	for (uint32_t l = 0; l < m->layers; l++) {
		uint32_t group = l % m->groups, layer = l / m->groups;
		struct kvp_attend_req req = { .handle = seq, .first_pos = first, .count = n,
					      .q = q, .out = att };

		for (uint32_t t = 0; t < n; t++) {
			rms_norm(x + t * dim, h, dim);
			matvec(m->wq + l * dim * dim, h, q + t * dim, dim, dim);
			matvec(m->wk + l * kv_dim * dim, h, kv, kv_dim, dim);
			for (size_t i = 0; i < kv_dim; i++)
				dtype_store(k, t * kv_dim + i, kv[i], m->dtype);
			matvec(m->wv + l * kv_dim * dim, h, kv, kv_dim, dim);
			for (size_t i = 0; i < kv_dim; i++)
				dtype_store(v, t * kv_dim + i, kv[i], m->dtype);
		}
		ret = kvp_write_kv(c, seq, group, layer, first, n, k, v) ?:
		      kvp_attend(c, group, layer, m->q_heads, 1.0f / sqrtf((float)m->head_dim), 0,
				 true, &req, 1);
		if (ret)
			goto out;
		for (uint32_t t = 0; t < n; t++) {
			matvec(m->wo + l * dim * dim, att + t * dim, h, dim, dim);
			for (size_t i = 0; i < dim; i++)
				x[t * dim + i] += h[i];
		}
	}
	rms_norm(x + (n - 1) * dim, h, dim);
	matvec(m->unembed, h, logits, m->vocab, dim);
	*next = 0;
	for (uint32_t i = 1; i < m->vocab; i++)
		if (logits[i] > logits[*next])
			*next = i;
	ret = 0;
out:
	free(x);
	free(h);
	free(q);
	free(att);
	free(kv);
	free(logits);
	free(k);
	free(v);
	return ret;
}
