/* SPDX-License-Identifier: MIT */
/* A cuda ATTEND's plan (attend_plan.h): the kernel, the cut, the buffer. */
#include <errno.h>
#include <string.h>

#include "attend_plan.h"

const char *const kvg_kernel_names[KVG_NKERNELS] = {
#define KVG_NAME(name, kv, q, n) #name,
	KVG_MMA_KERNELS(KVG_NAME) KVG_SIMT_KERNELS(KVG_NAME)
#undef KVG_NAME
	"kvg_merge",
};

struct kvg_kernel_shape {
	uint32_t kv, q, n;
};

static const struct kvg_kernel_shape shapes[KVG_K_MERGE] = {
#define KVG_SHAPE(name, kv, q, n) { kv, q, n },
	KVG_MMA_KERNELS(KVG_SHAPE) KVG_SIMT_KERNELS(KVG_SHAPE)
#undef KVG_SHAPE
};

#define ALIGN 256

static size_t align_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

/*
 * The tensor-core kernels load K, V and q rows 16 bytes at a time: every
 * row of the pool must start on 16 bytes, whatever its block, token and head.
 */
static bool rows_aligned(const struct kvpd_kv_layout *l, uint64_t kv_off)
{
	return !((kv_off | l->block_stride | l->token_stride | l->head_stride | l->v_delta) % 16);
}

static uint32_t pick_kernel(const struct kvpd_job *job, uint64_t kv_off)
{
	const struct kvpd_kv_layout *l = job->layout;
	uint32_t kv = l->dtype, q = job->params.q_dtype, dpl = (l->head_dim + 31) / 32;

	if (rows_aligned(l, kv_off))
		for (uint32_t k = 0; k < KVG_K_kvg_simt_f32_d4; k++)
			if (shapes[k].kv == kv && shapes[k].q == q && shapes[k].n == l->head_dim)
				return k;
	for (uint32_t k = KVG_K_kvg_simt_f32_d4; k < KVG_K_MERGE; k++)
		if (shapes[k].kv == kv && shapes[k].q == q && shapes[k].n >= dpl)
			return k;
	return KVG_NKERNELS; /* not reached: head_dim <= 1024 and every dtype pair is listed */
}

/*
 * Split-K, for a request of too few items to keep the device's loads in
 * flight: each unit's tiles cut into parts of at least KVG_PART_MIN_KEYS keys
 * (counted by its query that reads the fewest), as many as make the items
 * KVG_WARPS_PER_SM per multiprocessor.
 */
static uint32_t split_of(const struct kvpd_attend_unit *u, uint64_t base, unsigned sms)
{
	uint64_t target = (uint64_t)sms * KVG_WARPS_PER_SM, want;

	if (base >= target)
		return 1;
	want = (target + base - 1) / base;
	if (want > u->minkeys / KVG_PART_MIN_KEYS)
		want = u->minkeys / KVG_PART_MIN_KEYS;
	if (want > KVG_SPLIT_MAX)
		want = KVG_SPLIT_MAX;
	return want < 2 ? 1 : (uint32_t)want;
}

/* What the walk over a request's units adds up (kvg_plan_attend's sizes). */
struct kvg_walk {
	uint64_t items, merge, part_rows, nids;
	size_t q_bytes;
};

/*
 * The cut of every unit, in order, written to @units when not NULL: one walk
 * for the sizes and the same one for the buffer, so they cannot disagree.
 */
static void walk_units(const struct kvpd_job *job, uint32_t rows_per_tile, unsigned sms,
		       struct kvg_unit *units, struct kvg_walk *w)
{
	const struct kvpd_kv_layout *l = job->layout;
	uint32_t g = job->params.g;
	size_t q_row = (size_t)l->head_dim * attn_dtype_size(job->params.q_dtype);
	uint64_t base = 0;

	memset(w, 0, sizeof(*w));
	for (uint32_t s = 0; s < job->nunits; s++)
		base += (uint64_t)l->kv_heads *
			(((uint64_t)job->units[s].count * g + rows_per_tile - 1) / rows_per_tile);
	for (uint32_t s = 0; s < job->nunits; s++) {
		const struct kvpd_attend_unit *u = &job->units[s];
		uint64_t tiles = ((uint64_t)u->count * g + rows_per_tile - 1) / rows_per_tile;
		uint64_t per_part = (uint64_t)l->kv_heads * tiles * rows_per_tile;
		uint32_t split = split_of(u, base, sms);
		size_t bytes = (size_t)u->count * job->q_heads * q_row;

		if (split > 1 && (w->part_rows + per_part * split) * (l->head_dim + 1) * sizeof(float) >
					 KVG_PART_BYTES_MAX)
			split = 1;
		if (units)
			units[s] = (struct kvg_unit){
				.first_pos = u->first_pos,
				.count = u->count,
				.tiles = (uint32_t)tiles,
				.split = split,
				.kind = u->mask.kind,
				.param = u->mask.param,
				.prefix = u->mask.prefix,
				.ring_tokens = u->map.ring_tokens,
				.first_block = u->map.first_block,
				.ids_at = (uint32_t)w->nids,
				.q_at = w->q_bytes,
				.out_at = w->q_bytes,
				.part_at = w->part_rows,
			};
		w->items += (uint64_t)l->kv_heads * tiles * split;
		if (split > 1) {
			w->merge += (uint64_t)l->kv_heads * tiles;
			w->part_rows += per_part * split;
		}
		if (units) {
			units[s].item_end = (uint32_t)w->items;
			units[s].merge_end = (uint32_t)w->merge;
		}
		w->nids += u->map.nblocks;
		w->q_bytes += align_up(bytes, 16);
	}
}

int kvg_plan_attend(const struct kvpd_job *job, unsigned sms, struct kvg_plan *p)
{
	const struct kvpd_kv_layout *l = job->layout;
	struct kvg_attend_args *a = &p->args;
	struct kvg_walk w;
	bool mma;

	memset(p, 0, sizeof(*p));
	p->sms = sms;
	p->kv_off = kvpd_k_off(l, job->layer, 0);
	p->kernel = pick_kernel(job, p->kv_off);
	if (p->kernel >= KVG_K_MERGE)
		return -EINVAL;
	mma = p->kernel < KVG_K_kvg_simt_f32_d4;
	a->rows_per_tile = mma ? KVG_MMA_ROWS : KVG_SIMT_ROWS;
	walk_units(job, a->rows_per_tile, sms, NULL, &w);
	/* 32-bit item indices, and a grid the device takes (2^31 - 1 blocks) */
	if (w.items > INT32_MAX || w.merge > INT32_MAX)
		return -E2BIG;

	p->units_at = 0;
	p->ids_at = align_up(job->nunits * sizeof(struct kvg_unit), ALIGN);
	p->q_at = align_up(p->ids_at + w.nids * sizeof(uint32_t), ALIGN);
	p->in_bytes = p->q_at + w.q_bytes;
	p->out_at = align_up(p->in_bytes, ALIGN);
	p->out_bytes = w.q_bytes;
	p->host_bytes = p->out_at + p->out_bytes;
	p->part_at = align_up(p->host_bytes, ALIGN);
	p->lse_at = align_up(p->part_at + w.part_rows * l->head_dim * sizeof(float), ALIGN);
	p->dev_bytes = p->lse_at + w.part_rows * sizeof(float);

	p->merge_items = (uint32_t)w.merge;
	p->merge_block = 32 * KVG_MERGE_WARPS;
	p->merge_grid = (p->merge_items + KVG_MERGE_WARPS - 1) / KVG_MERGE_WARPS;
	if (mma) {
		p->block = 32 * KVG_MMA_WARPS;
		p->grid = (unsigned)((w.items + KVG_MMA_WARPS - 1) / KVG_MMA_WARPS);
		p->smem = KVG_MMA_SMEM(l->head_dim);
	} else {
		/* a warp a block: its rows' q, then a step's weights and key rows, in shared memory */
		p->block = 32;
		p->grid = (unsigned)w.items;
		p->smem = KVG_SIMT_ROWS * (l->head_dim + 32) * sizeof(float) + 32 * sizeof(uint64_t);
	}

	a->nunits = job->nunits;
	a->items = (uint32_t)w.items;
	a->block_stride = l->block_stride;
	a->token_stride = l->token_stride;
	a->head_stride = l->head_stride;
	a->v_delta = l->v_delta;
	a->block_size = l->block_size;
	a->head_dim = l->head_dim;
	a->kv_heads = l->kv_heads;
	a->q_heads = job->q_heads;
	a->g = job->params.g;
	kvg_divider(l->block_size, &a->bs_mul, &a->bs_shr);
	kvg_divider(a->g, &a->g_mul, &a->g_shr);
	a->kv_dtype = l->dtype;
	a->q_dtype = job->params.q_dtype;
	a->scale = job->params.scale;
	a->softcap = job->params.softcap;
	return 0;
}

uint32_t kvg_kernel_smem_max(uint32_t kernel)
{
	return kernel < KVG_K_kvg_simt_f32_d4 ? KVG_MMA_SMEM(shapes[kernel].n) : 0;
}

void kvg_plan_fill(const struct kvpd_job *job, const struct kvg_plan *p, uint8_t *buf)
{
	const struct kvpd_kv_layout *l = job->layout;
	const struct kvg_unit *units = (const struct kvg_unit *)(buf + p->units_at);
	uint32_t *ids = (uint32_t *)(buf + p->ids_at);
	size_t q_row = (size_t)l->head_dim * attn_dtype_size(job->params.q_dtype);
	struct kvg_walk w;

	walk_units(job, p->args.rows_per_tile, p->sms, (struct kvg_unit *)(buf + p->units_at), &w);
	for (uint32_t s = 0; s < job->nunits; s++) {
		const struct kvpd_attend_unit *u = &job->units[s];

		memcpy(ids + units[s].ids_at, u->map.ids, u->map.nblocks * sizeof(uint32_t));
		memcpy(buf + p->q_at + units[s].q_at, u->q, (size_t)u->count * job->q_heads * q_row);
	}
}

void kvg_plan_bind(struct kvg_plan *p, uintptr_t dev, uintptr_t pool)
{
	struct kvg_attend_args *a = &p->args;

	a->kv = (const uint8_t *)(pool + p->kv_off);
	a->units = (const struct kvg_unit *)(dev + p->units_at);
	a->ids = (const uint32_t *)(dev + p->ids_at);
	a->q = (const uint8_t *)(dev + p->q_at);
	a->out = (uint8_t *)(dev + p->out_at);
	a->part = (float *)(dev + p->part_at);
	a->lse = (float *)(dev + p->lse_at);
}

void kvg_plan_collect(const struct kvpd_job *job, const struct kvg_plan *p, const uint8_t *buf)
{
	const struct kvg_unit *units = (const struct kvg_unit *)(buf + p->units_at);
	size_t q_row = (size_t)job->layout->head_dim * attn_dtype_size(job->params.q_dtype);

	for (uint32_t s = 0; s < job->nunits; s++)
		memcpy(job->units[s].out, buf + p->out_at + units[s].out_at,
		       (size_t)job->units[s].count * job->q_heads * q_row);
}
