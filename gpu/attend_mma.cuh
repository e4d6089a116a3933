// SPDX-License-Identifier: MIT
//
// Attention on the tensor cores (mma.m16n8k16), for K and V in f16 or bf16:
// one warp a work item, 16 rows (query heads of one or more queries) against
// 16 keys a step.
//
// Keys come through shared memory: a warp's own ring of KVG_MMA_STAGES(hd)
// stages, each the K and V rows of one step, filled by cp.async KVG_MMA_STAGES
// - 1 steps ahead of the one computed, so that many of a warp's bytes are in
// flight without holding registers. A stage holds row r's 16-byte chunk c at
// chunk c ^ kvg_swizzle(r): the fragment reads below then touch every bank
// once per quarter warp.
//
// The registers are laid out so that every fragment read is 16 bytes of one
// row:
//   - S = q K^T: lane (g, t) (g = lane / 4, t = lane % 4) reads dims
//     32w + 8t .. 8t + 7 of key g's K row, which are the b operand of two
//     k-steps; q is read with the same permutation of dims (a dot product is
//     the same in any order of its terms);
//   - O += P V: S's accumulators are P's a operand as they lie (the
//     FlashAttention-2 arrangement); V's b operand needs two keys' values of
//     one dim in a register: lane (g, t) reads dims 64w + 8g .. 8g + 7 of
//     keys 2t, 2t + 1, 2t + 8, 2t + 9 and packs one value of each pair per
//     n-tile, so n-tile j of window w holds dims 64w + 8n + j (n its column).
//     The output row of a lane is then 8 consecutive dims per (w, column):
//     stored 16 bytes at a time.
// P goes to the tensor cores as two 16-bit terms (p = hi + lo), and q given in
// f32 likewise: the products are exact and summed in f32, so the result is as
// close to the f32 reference as the host's kernels are, not a 16-bit P's
// 2^-9 off.
#ifndef KVPOOL_GPU_ATTEND_MMA_CUH
#define KVPOOL_GPU_ATTEND_MMA_CUH

#include "attend_dev.cuh"

struct kvg_u4 {
	uint32_t x, y, z, w;
};

KVG_FN kvg_u4 kvg_ld16(const uint8_t *p)
{
	uint4 v = *(const uint4 *)p;

	return kvg_u4{ v.x, v.y, v.z, v.w };
}

KVG_FN uint32_t kvg_word(const kvg_u4 &v, int i)
{
	return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Where chunk @c of row @r of a stage's K (or V) lies, in chunks: see the top.
KVG_FN uint32_t kvg_swizzle(uint32_t r, uint32_t c)
{
	return c ^ ((r & 6) ^ ((r & 1) << 2));
}

// 16 bytes from global memory to shared memory, in flight until kvg_cp_wait; zeros without a source.
KVG_FN void kvg_cp16(uint8_t *dst, const uint8_t *src, bool copy)
{
#ifdef KVG_EMU
	if (copy)
		memcpy(dst, src, 16);
	else
		memset(dst, 0, 16);
#else
	uint32_t at = (uint32_t)__cvta_generic_to_shared(dst);

	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(src),
		     "r"(copy ? 16 : 0));
#endif
}

KVG_FN void kvg_cp_commit(void)
{
#ifndef KVG_EMU
	asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// This lane's copies of every group but the @pending newest are done.
template <int PENDING> KVG_FN void kvg_cp_wait(void)
{
#ifndef KVG_EMU
	asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#endif
}

// q's a operands of one 32-dim window: two k-steps, from rows gid and gid + 8.
template <bool BF16, bool QF32>
KVG_FN void kvg_q_window(const uint8_t *r0, const uint8_t *r1, uint32_t dim, uint32_t hi[2][4],
			 uint32_t lo[2][4])
{
	if constexpr (!QF32) {
		kvg_u4 a = r0 ? kvg_ld16(r0 + dim * 2) : kvg_u4{ 0, 0, 0, 0 };
		kvg_u4 b = r1 ? kvg_ld16(r1 + dim * 2) : kvg_u4{ 0, 0, 0, 0 };

		hi[0][0] = a.x, hi[0][1] = b.x, hi[0][2] = a.y, hi[0][3] = b.y;
		hi[1][0] = a.z, hi[1][1] = b.z, hi[1][2] = a.w, hi[1][3] = b.w;
	} else {
		float f[2][8];

		for (int r = 0; r < 2; r++) {
			const uint8_t *row = r ? r1 : r0;

			for (int i = 0; i < 8; i++)
				f[r][i] = row ? ((const float *)row)[dim + i] : 0.0f;
		}
		// element pair e of the 8 dims: k-step e / 2, register (e % 2) * 2 + row
		for (int e = 0; e < 4; e++)
			for (int r = 0; r < 2; r++) {
				uint32_t h = kvg_pack2<BF16>(f[r][2 * e], f[r][2 * e + 1]);

				hi[e / 2][(e % 2) * 2 + r] = h;
				lo[e / 2][(e % 2) * 2 + r] = kvg_pack2<BF16>(
					f[r][2 * e] - kvg_half<BF16>(h, 0), f[r][2 * e + 1] - kvg_half<BF16>(h, 1));
			}
	}
}

/*
 * Step @step's 16 keys (of the item's k0..k1) into @stage: K rows then V rows,
 * HD * 2 bytes each; rows of keys past k1 zeroed. Lanes 0-15 find one key's
 * row each, and every lane copies its share of the 16-byte chunks.
 */
template <int HD>
KVG_FN void kvg_stage_fill(const struct kvg_attend_args &a, const struct kvg_item &it,
			   uint32_t step, uint8_t *stage)
{
	constexpr uint32_t CHUNKS = HD / 8; // 16-byte chunks of a row
	const uint32_t lane = threadIdx.x % 32, x = it.k0 + step * 16 + lane % 16;
	const bool mine = x < it.k1;
	uint64_t off = mine ? (uint64_t)(kvg_row(a, it.u, it.head, kvg_key_pos(&it, x)) - a.kv) : 0;

	KVG_UNROLL
	for (uint32_t j = 0; j < 16 * CHUNKS / 32; j++) {
		uint32_t c = lane + 32 * j, key = c / CHUNKS, chunk = c % CHUNKS;
		uint64_t key_off = __shfl_sync(0xffffffffu, off, key);
		bool copy = it.k0 + step * 16 + key < it.k1;
		uint32_t at = (key * CHUNKS + kvg_swizzle(key, chunk)) * 16;

		kvg_cp16(stage + at, a.kv + key_off + chunk * 16, copy);
		kvg_cp16(stage + 16 * HD * 2 + at, a.kv + key_off + a.v_delta + chunk * 16, copy);
	}
}

template <uint32_t KVDT, uint32_t QDT, int HD>
KVG_FN void kvg_attend_mma(const struct kvg_attend_args &a, uint8_t *smem)
{
	constexpr bool BF16 = KVDT == ATTN_BF16, QF32 = QDT == ATTN_F32;
	constexpr int KW = HD / 32, VW = HD / 64, STAGES = KVG_MMA_STAGES(HD);
	constexpr uint32_t QSIZE = QF32 ? 4 : 2, CHUNKS = HD / 8, STAGE_BYTES = 16 * HD * 2 * 2;
	const uint32_t lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
	const uint32_t item = blockIdx.x * KVG_MMA_WARPS + threadIdx.x / 32;
	uint8_t *ring = smem + (threadIdx.x / 32) * STAGES * STAGE_BYTES;
	struct kvg_item it;
	struct kvg_row row[2];
	uint32_t qa[KW][2][4], ql[KW][2][4], nsteps;
	float o[VW][8][4], m[2] = { -INFINITY, -INFINITY }, l[2] = { 0, 0 };

	if (item >= a.items)
		return;
	kvg_item_of(a, item, &it);
	nsteps = (it.k1 - it.k0 + 15) / 16;
	// the first stages on their way while q is read
	for (int s = 0; s < STAGES - 1; s++) {
		if ((uint32_t)s < nsteps)
			kvg_stage_fill<HD>(a, it, s, ring + s * STAGE_BYTES);
		kvg_cp_commit();
	}
	for (int i = 0; i < 2; i++)
		kvg_row_of(a, &it, it.tile * KVG_MMA_ROWS + gid + 8 * i, &row[i]);
	{
		const uint8_t *q0 = row[0].valid ? a.q + it.u.q_at + kvg_q_at(a, &row[0], it.head, QSIZE) : nullptr;
		const uint8_t *q1 = row[1].valid ? a.q + it.u.q_at + kvg_q_at(a, &row[1], it.head, QSIZE) : nullptr;

		KVG_UNROLL
		for (int w = 0; w < KW; w++)
			kvg_q_window<BF16, QF32>(q0, q1, w * 32 + tig * 8, qa[w], ql[w]);
	}
	KVG_UNROLL
	for (int w = 0; w < VW; w++)
		KVG_UNROLL
		for (int j = 0; j < 8; j++)
			o[w][j][0] = o[w][j][1] = o[w][j][2] = o[w][j][3] = 0;

	for (uint32_t step = 0; step < nsteps; step++) {
		const uint32_t s = it.k0 + step * 16;
		const uint8_t *kst = ring + step % STAGES * STAGE_BYTES, *vst = kst + 16 * HD * 2;
		float sc[2][4];
		uint32_t ph[4], pl[4];

		if (step + STAGES - 1 < nsteps)
			kvg_stage_fill<HD>(a, it, step + STAGES - 1,
					   ring + (step + STAGES - 1) % STAGES * STAGE_BYTES);
		kvg_cp_commit();
		kvg_cp_wait<STAGES - 1>();
		__syncwarp(); // every lane's copies of this step are in

		// S = q K^T, then the logits of the keys this part's rows see; the rest -inf
		KVG_UNROLL
		for (int nt = 0; nt < 2; nt++) {
			const uint32_t r = nt * 8 + gid;

			sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0;
			KVG_UNROLL
			for (int w = 0; w < KW; w++) {
				kvg_u4 k = kvg_ld16(kst + (r * CHUNKS + kvg_swizzle(r, w * 4 + tig)) * 16);

				kvg_mma<BF16>(sc[nt], qa[w][0], k.x, k.y);
				kvg_mma<BF16>(sc[nt], qa[w][1], k.z, k.w);
				if constexpr (QF32) {
					kvg_mma<BF16>(sc[nt], ql[w][0], k.x, k.y);
					kvg_mma<BF16>(sc[nt], ql[w][1], k.z, k.w);
				}
			}
			KVG_UNROLL
			for (int e = 0; e < 4; e++) {
				uint32_t x = s + nt * 8 + tig * 2 + e % 2;
				bool seen = x < it.k1 && (it.one_query || kvg_sees(&row[e / 2], kvg_key_pos(&it, x)));

				sc[nt][e] = seen ? kvg_logit(a, sc[nt][e]) : -INFINITY;
			}
		}

		// Online softmax per row (a quad of lanes holds a row's 16 logits); l stays per lane.
		KVG_UNROLL
		for (int i = 0; i < 2; i++) {
			float mx = fmaxf(fmaxf(sc[0][2 * i], sc[0][2 * i + 1]), fmaxf(sc[1][2 * i], sc[1][2 * i + 1]));
			float mn, alpha;

			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			mn = fmaxf(m[i], mx);
			alpha = mn == -INFINITY ? 1.0f : expf(m[i] - mn);
			l[i] *= alpha;
			KVG_UNROLL
			for (int nt = 0; nt < 2; nt++)
				KVG_UNROLL
				for (int e = 2 * i; e < 2 * i + 2; e++) {
					sc[nt][e] = sc[nt][e] == -INFINITY ? 0.0f : expf(sc[nt][e] - mn);
					l[i] += sc[nt][e];
				}
			m[i] = mn;
			KVG_UNROLL
			for (int w = 0; w < VW; w++)
				KVG_UNROLL
				for (int j = 0; j < 8; j++) {
					o[w][j][2 * i] *= alpha;
					o[w][j][2 * i + 1] *= alpha;
				}
		}

		// P as the a operand: rows gid, gid + 8; keys 2t, 2t + 1 then 2t + 8, 2t + 9
		KVG_UNROLL
		for (int r = 0; r < 4; r++) {
			int nt = r / 2, e = (r % 2) * 2;

			ph[r] = kvg_pack2<BF16>(sc[nt][e], sc[nt][e + 1]);
			pl[r] = kvg_pack2<BF16>(sc[nt][e] - kvg_half<BF16>(ph[r], 0),
						sc[nt][e + 1] - kvg_half<BF16>(ph[r], 1));
		}

		// O += P V, a 64-dim window at a time
		KVG_UNROLL
		for (int w = 0; w < VW; w++) {
			kvg_u4 vv[4];

			KVG_UNROLL
			for (int j = 0; j < 4; j++) {
				uint32_t r = (j / 2) * 8 + tig * 2 + j % 2;

				vv[j] = kvg_ld16(vst + (r * CHUNKS + kvg_swizzle(r, w * 8 + gid)) * 16);
			}
			KVG_UNROLL
			for (int j = 0; j < 8; j++) {
				uint32_t sel = j % 2 ? 0x7632 : 0x5410; // high halves, or low halves
				uint32_t b0 = __byte_perm(kvg_word(vv[0], j / 2), kvg_word(vv[1], j / 2), sel);
				uint32_t b1 = __byte_perm(kvg_word(vv[2], j / 2), kvg_word(vv[3], j / 2), sel);

				kvg_mma<BF16>(o[w][j], ph, b0, b1);
				kvg_mma<BF16>(o[w][j], pl, b0, b1);
			}
		}
		__syncwarp(); // nobody reads this stage again before its next fill
	}
	kvg_cp_wait<0>(); // nothing of ours lands in shared memory after we are gone

	// The rows' sums over their quads, then out (or the part's partial and log-sum-exp).
	KVG_UNROLL
	for (int i = 0; i < 2; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
	}
	KVG_UNROLL
	for (int i = 0; i < 2; i++) {
		float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;

		if (!row[i].valid)
			continue;
		if (it.u.split > 1) {
			uint64_t pr = kvg_part_row(a, &it, gid + 8 * i);
			float *part = a.part + pr * HD;

			if (tig == 0)
				a.lse[pr] = l[i] > 0 ? m[i] + logf(l[i]) : -INFINITY;
			KVG_UNROLL
			for (int w = 0; w < VW; w++)
				KVG_UNROLL
				for (int e = 0; e < 2; e++)
					KVG_UNROLL
					for (int j = 0; j < 8; j++)
						part[w * 64 + (tig * 2 + e) * 8 + j] = o[w][j][2 * i + e] * inv;
			continue;
		}
		uint8_t *out = a.out + it.u.out_at + kvg_q_at(a, &row[i], it.head, QSIZE);

		KVG_UNROLL
		for (int w = 0; w < VW; w++)
			KVG_UNROLL
			for (int e = 0; e < 2; e++) {
				uint32_t d0 = w * 64 + (tig * 2 + e) * 8;

				if constexpr (QF32) {
					KVG_UNROLL
					for (int j = 0; j < 8; j += 4)
						*(float4 *)(out + (d0 + j) * 4) = make_float4(
							o[w][j][2 * i + e] * inv, o[w][j + 1][2 * i + e] * inv,
							o[w][j + 2][2 * i + e] * inv, o[w][j + 3][2 * i + e] * inv);
				} else {
					uint4 v;

					v.x = kvg_pack2<BF16>(o[w][0][2 * i + e] * inv, o[w][1][2 * i + e] * inv);
					v.y = kvg_pack2<BF16>(o[w][2][2 * i + e] * inv, o[w][3][2 * i + e] * inv);
					v.z = kvg_pack2<BF16>(o[w][4][2 * i + e] * inv, o[w][5][2 * i + e] * inv);
					v.w = kvg_pack2<BF16>(o[w][6][2 * i + e] * inv, o[w][7][2 * i + e] * inv);
					*(uint4 *)(out + d0 * 2) = v;
				}
			}
	}
}

#endif
