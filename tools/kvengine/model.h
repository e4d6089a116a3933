/* SPDX-License-Identifier: MIT */
/*
 * A tiny synthetic transformer for kvengine: random weights from a fixed seed
 * (so every engine computes the same KV for the same tokens, which is what
 * makes a cached prefix reusable), the pool's geometry, and attention done by
 * kvpoold: each layer writes its K and V and attends through the daemon.
 */
#ifndef KVPOOL_ENGINE_MODEL_H
#define KVPOOL_ENGINE_MODEL_H

#include <stdint.h>

#include "../../lib/libkvpool.h"

struct engine_model {
	uint32_t vocab, dim, q_heads, kv_heads, head_dim;
	uint32_t groups, layers_per_group, layers; /* model layer l: group l % groups */
	uint32_t dtype;
	float *embed;              /* [vocab][dim] */
	float *wq, *wk, *wv, *wo;  /* per layer: [dim][dim], [kv_dim][dim] x2, [dim][dim] */
	float *unembed;            /* [vocab][dim] */
};

/* Sizes the model to the attached pool; -EOPNOTSUPP if it holds no KV. */
int engine_model_init(struct engine_model *m, const struct kvp_pool_info *info);
void engine_model_free(struct engine_model *m);

/*
 * Runs tokens[first .. first + n) (positions first..) through every layer:
 * writes their K and V, attends, and returns the most likely next token.
 * Positions before first must have their KV in the pool (computed or a hit).
 */
int engine_model_forward(struct engine_model *m, struct kvp_client *c, uint64_t seq,
			 const uint32_t *tokens, uint32_t first, uint32_t n, uint32_t *next);

#endif
