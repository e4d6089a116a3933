// SPDX-License-Identifier: MIT
//
// ATTEND on a cuda pool: the kernels the plugin launches (cuda_attend.c), in
// the order and with the names of attend_abi.h's lists. Each takes the plan's
// struct kvg_attend_args by value. The attention kernels write each unsplit
// item's output rows, and each split item's partial rows with their
// log-sum-exp; kvg_merge then combines the parts of every split tile, in part
// order, so that a request's result does not depend on the kernels' timing.
#include "attend_mma.cuh"
#include "attend_simt.cuh"

#ifndef KVG_EMU
#define KVG_MMA_BOUNDS __launch_bounds__(32 * KVG_MMA_WARPS)
#define KVG_SIMT_BOUNDS __launch_bounds__(32)
#else
#define KVG_MMA_BOUNDS
#define KVG_SIMT_BOUNDS
#endif

// Each entry runs its template on the block's dynamic shared memory (the plan's smem).
#define KVG_ENTRY(fn, bounds, name, kv, q, n)                                                  \
	extern "C" __global__ void bounds name(const struct kvg_attend_args a)                 \
	{                                                                                      \
		KVG_DYNAMIC_SMEM(uint8_t, smem);                                               \
		fn<kv, q, n>(a, smem);                                                         \
	}
#define KVG_MMA_ENTRY(name, kv, q, n) KVG_ENTRY(kvg_attend_mma, KVG_MMA_BOUNDS, name, kv, q, n)
#define KVG_SIMT_ENTRY(name, kv, q, n) KVG_ENTRY(kvg_attend_simt, KVG_SIMT_BOUNDS, name, kv, q, n)
KVG_MMA_KERNELS(KVG_MMA_ENTRY)
KVG_SIMT_KERNELS(KVG_SIMT_ENTRY)

// One warp a split tile: for each of its rows, the parts' weights exp(lse - max) (0 for
// a part that saw none of the row's keys), then lane d sums dims d, d + 32, ...
extern "C" __global__ void __launch_bounds__(32 * KVG_MERGE_WARPS) kvg_merge(const struct kvg_attend_args a)
{
	__shared__ float weights[KVG_MERGE_WARPS][KVG_SPLIT_MAX];
	const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	const uint32_t item = blockIdx.x * KVG_MERGE_WARPS + warp;
	const uint32_t hd = a.head_dim, rpt = a.rows_per_tile;
	float *w = weights[warp];

	if (item >= a.units[a.nunits - 1].merge_end)
		return;
	uint32_t ui = kvg_find_unit(a.units, a.nunits, item, true);
	const struct kvg_unit u = a.units[ui];
	uint32_t local = item - (ui ? a.units[ui - 1].merge_end : 0);
	uint32_t tile = local % u.tiles, head = local / u.tiles, rows = u.count * a.g;
	uint32_t q_size = a.q_dtype == ATTN_F32 ? 4 : 2;

	for (uint32_t i = 0; i < rpt && tile * rpt + i < rows; i++) {
		uint64_t base = u.part_at + (uint64_t)(head * u.tiles + tile) * u.split * rpt + i;
		float mx = -INFINITY, sum = 0, inv;
		struct kvg_row row;
		uint32_t r = tile * rpt + i;

		for (uint32_t c = lane; c < u.split; c += 32)
			mx = fmaxf(mx, a.lse[base + (uint64_t)c * rpt]);
		mx = kvg_warp_max(mx, 32);
		for (uint32_t c = lane; c < u.split; c += 32) {
			float x = a.lse[base + (uint64_t)c * rpt];

			w[c] = x == -INFINITY ? 0.0f : expf(x - mx);
			sum += w[c];
		}
		inv = 1.0f / kvg_warp_sum(sum, 32);
		__syncwarp();
		row.query = kvg_div(r, a.g_mul, a.g_shr);
		row.head = r - row.query * a.g;
		uint8_t *out = a.out + u.out_at + kvg_q_at(a, &row, head, q_size);

		for (uint32_t d = lane; d < hd; d += 32) {
			float acc = 0;

			for (uint32_t c = 0; c < u.split; c++)
				if (w[c] != 0)
					acc += w[c] * a.part[(base + (uint64_t)c * rpt) * hd + d];
			kvg_store(out, d, acc * inv, a.q_dtype);
		}
		__syncwarp();
	}
}
