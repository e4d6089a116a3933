/* SPDX-License-Identifier: MIT */
/*
 * KVP_OP_POOL_LAYOUT: where a pool's K and V lie, by strides, so that an
 * engine that maps the pool runs its own kernels on it with one code path for
 * both layouts.
 */
#include <errno.h>
#include <string.h>

#include "pools/pools.h"

int kvpd_pool_layout(const struct kvpd_pool *pool, void *out, uint32_t out_len, __u64 *needed)
{
	const struct kvpd_kv_layout *l = &pool->layout;
	struct kvp_kv_layout head = {
		.mem_kind = pool->backend->mem_kind,
		.layout = l->kind,
		.total_bytes = l->map_bytes,
		.num_pieces = l->num_pieces,
		.num_layers = l->layers,
		.num_blocks = l->num_blocks,
		.block_size = l->block_size,
		.kv_heads = l->kv_heads,
		.head_dim = l->head_dim,
		.dtype = pool->params.dtype,
		.device = pool->device,
	};
	uint8_t *p = out;

	if (!l->slot_bytes)
		return -EOPNOTSUPP;
	*needed = sizeof(head) + (uint64_t)l->layers * sizeof(struct kvp_kv_layer_layout) +
		  (uint64_t)head.num_pieces * sizeof(__u64);
	if (*needed > out_len)
		return -EOVERFLOW;
	memcpy(p, &head, sizeof(head));
	p += sizeof(head);
	for (uint32_t layer = 0; layer < l->layers; layer++) {
		struct kvp_kv_layer_layout e = {
			/* piece 0: the pieces lie back to back, an array may run on into the next */
			.k_off = kvpd_k_off(l, layer, 0),
			.v_off = kvpd_k_off(l, layer, 0) + l->v_delta,
			.block_stride = l->block_stride,
			.token_stride = l->token_stride,
			.head_stride = l->head_stride,
		};

		memcpy(p, &e, sizeof(e));
		p += sizeof(e);
	}
	for (uint32_t i = 0; i < l->num_pieces; i++) {
		__u64 piece = i + 1 < l->num_pieces ? l->piece_bytes :
			      l->map_bytes - (size_t)i * l->piece_bytes;

		memcpy(p, &piece, sizeof(piece));
		p += sizeof(piece);
	}
	return (int)*needed;
}
