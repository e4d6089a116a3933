// SPDX-License-Identifier: MIT
//
// Attention on the CUDA cores, for what the tensor-core kernel does not take:
// f32 pools, f16 pools with q in f32, head_dim other than 64, 128 or 256, rows
// not on 16 bytes. One warp a block and a work item of KVG_SIMT_ROWS rows:
// 32 keys a step, lane j computing key j's logits against the rows' q (in
// shared memory, read by every lane at once), then lane d accumulating dims
// d, d + 32, ... of the weighted V rows (each row read by the warp at once).
// Everything in f32, whatever the storage dtypes.
#ifndef KVPOOL_GPU_ATTEND_SIMT_CUH
#define KVPOOL_GPU_ATTEND_SIMT_CUH

#include "attend_dev.cuh"

template <uint32_t KVDT, uint32_t QDT, int DPL>
KVG_FN void kvg_attend_simt(const struct kvg_attend_args &a, uint8_t *smem)
{
	constexpr int R = KVG_SIMT_ROWS;
	constexpr uint32_t QSIZE = QDT == ATTN_F32 ? 4 : 2;
	const uint32_t lane = threadIdx.x % 32, hd = a.head_dim;
	uint64_t *key_off = (uint64_t *)smem;          // [32]: the step's K rows, from a.kv
	float *qs = (float *)(key_off + 32);            // [R][hd]
	float *ps = qs + R * hd;                        // [R][32]: the step's weights
	struct kvg_item it;
	struct kvg_row row[R];
	float acc[R][DPL], m[R], l[R];

	if (blockIdx.x >= a.items)
		return;
	kvg_item_of(a, blockIdx.x, &it);
KVG_UNROLL
	for (int i = 0; i < R; i++) {
		kvg_row_of(a, &it, it.tile * R + i, &row[i]);
		const uint8_t *q = a.q + it.u.q_at + kvg_q_at(a, &row[i], it.head, QSIZE);

		for (uint32_t d = lane; d < hd; d += 32)
			qs[i * hd + d] = row[i].valid ? kvg_load<QDT>(q, d) : 0.0f;
		m[i] = -INFINITY;
		l[i] = 0;
KVG_UNROLL
		for (int k = 0; k < DPL; k++)
			acc[i][k] = 0;
	}
	__syncwarp();

	for (uint32_t s = it.k0; s < it.k1; s += 32) {
		uint32_t x = s + lane, n = it.k1 - s < 32 ? it.k1 - s : 32;
		uint32_t pos = x < it.k1 ? kvg_key_pos(&it, x) : 0;
		const uint8_t *k = x < it.k1 ? kvg_row(a, it.u, it.head, pos) : a.kv;
		float sc[R], alpha[R];

		key_off[lane] = (uint64_t)(k - a.kv);
KVG_UNROLL
		for (int i = 0; i < R; i++)
			sc[i] = 0;
		if (x < it.k1)
			for (uint32_t d = 0; d < hd; d++) {
				float kd = kvg_load<KVDT>(k, d);

KVG_UNROLL
				for (int i = 0; i < R; i++)
					sc[i] += qs[i * hd + d] * kd;
			}
KVG_UNROLL
		for (int i = 0; i < R; i++) {
			float mn, p;

			sc[i] = x < it.k1 && kvg_sees(&row[i], pos) ? kvg_logit(a, sc[i]) : -INFINITY;
			mn = fmaxf(m[i], kvg_warp_max(sc[i], 32));
			alpha[i] = mn == -INFINITY ? 1.0f : expf(m[i] - mn);
			p = sc[i] == -INFINITY ? 0.0f : expf(sc[i] - mn);
			l[i] = l[i] * alpha[i] + kvg_warp_sum(p, 32);
			m[i] = mn;
			ps[i * 32 + lane] = p;
		}
		__syncwarp();
KVG_UNROLL
		for (int kk = 0; kk < DPL; kk++) {
			uint32_t d = lane + 32 * kk;

			if (d >= hd)
				break;
KVG_UNROLL
			for (int i = 0; i < R; i++)
				acc[i][kk] *= alpha[i];
			for (uint32_t j = 0; j < n; j++) {
				float v = kvg_load<KVDT>(a.kv + key_off[j] + a.v_delta, d);

KVG_UNROLL
				for (int i = 0; i < R; i++)
					acc[i][kk] += ps[i * 32 + j] * v;
			}
		}
		__syncwarp();
	}

KVG_UNROLL
	for (int i = 0; i < R; i++) {
		float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;

		if (!row[i].valid)
			continue;
		if (it.u.split > 1) {
			uint64_t pr = kvg_part_row(a, &it, i);

			if (lane == 0)
				a.lse[pr] = l[i] > 0 ? m[i] + logf(l[i]) : -INFINITY;
KVG_UNROLL
			for (int kk = 0; kk < DPL; kk++)
				if (lane + 32 * kk < hd)
					a.part[pr * hd + lane + 32 * kk] = acc[i][kk] * inv;
			continue;
		}
		uint8_t *out = a.out + it.u.out_at + kvg_q_at(a, &row[i], it.head, QSIZE);

KVG_UNROLL
		for (int kk = 0; kk < DPL; kk++)
			if (lane + 32 * kk < hd)
				kvg_store(out, lane + 32 * kk, acc[i][kk] * inv, QDT);
	}
}

#endif
