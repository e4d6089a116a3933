// SPDX-License-Identifier: MIT
//
// What the attention kernels share: conversions, the tensor-core instruction,
// where a key's row lies, which keys a tile of rows reads and which of them
// each row sees (daemon/attn/kvmask.h, the same code the daemon checks requests
// with). Built by nvcc for the device, and by the host compiler for the CPU
// emulation (KVG_EMU, gpu/emu/cuda_emu.h), whose tests run these kernels.
#ifndef KVPOOL_GPU_ATTEND_DEV_CUH
#define KVPOOL_GPU_ATTEND_DEV_CUH

#include <math.h>
#include <stdint.h>

#ifdef KVG_EMU
#include "emu/cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "attend_abi.h"
#include "../daemon/attn/kvmask.h"

#define KVG_FN static __device__ __forceinline__

#ifndef KVG_EMU
#define KVG_DYNAMIC_SMEM(type, name) extern __shared__ __align__(16) type name[]
#define KVG_UNROLL _Pragma("unroll")
#else
#define KVG_UNROLL /* the emulation runs loops as they are written */
#endif

KVG_FN uint32_t kvg_div(uint32_t n, uint32_t mul, uint32_t shr)
{
	return mul ? __umulhi(n, mul) >> shr : n;
}

// ---- conversions (round to nearest even) ----

#ifdef KVG_EMU
KVG_FN float kvg_f16(uint16_t h) { return attn_f16_to_f32(h); }
KVG_FN float kvg_bf16(uint16_t h) { return attn_bf16_to_f32(h); }
KVG_FN uint16_t kvg_to_f16(float f) { return attn_f32_to_f16(f); }
KVG_FN uint16_t kvg_to_bf16(float f) { return attn_f32_to_bf16(f); }
#else
KVG_FN float kvg_f16(uint16_t h) { return __half2float(__ushort_as_half(h)); }
KVG_FN float kvg_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
KVG_FN uint16_t kvg_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
KVG_FN uint16_t kvg_to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
#endif

template <uint32_t DT> KVG_FN float kvg_load(const uint8_t *row, uint32_t i)
{
	if constexpr (DT == ATTN_F32)
		return ((const float *)row)[i];
	else if constexpr (DT == ATTN_F16)
		return kvg_f16(((const uint16_t *)row)[i]);
	else
		return kvg_bf16(((const uint16_t *)row)[i]);
}

KVG_FN void kvg_store(uint8_t *row, uint32_t i, float v, uint32_t dt)
{
	if (dt == ATTN_F32)
		((float *)row)[i] = v;
	else if (dt == ATTN_F16)
		((uint16_t *)row)[i] = kvg_to_f16(v);
	else
		((uint16_t *)row)[i] = kvg_to_bf16(v);
}

// Two values rounded to the 16-bit dtype, lo in the low half: an mma operand register.
template <bool BF16> KVG_FN uint32_t kvg_pack2(float lo, float hi)
{
	uint16_t l = BF16 ? kvg_to_bf16(lo) : kvg_to_f16(lo), h = BF16 ? kvg_to_bf16(hi) : kvg_to_f16(hi);

	return (uint32_t)l | (uint32_t)h << 16;
}

template <bool BF16> KVG_FN float kvg_half(uint32_t pair, int which)
{
	uint16_t h = (uint16_t)(which ? pair >> 16 : pair);

	return BF16 ? kvg_bf16(h) : kvg_f16(h);
}

// ---- the tensor-core instruction: d += a (16x16, row) * b (16x8, col), f32 accumulators ----

template <bool BF16>
KVG_FN void kvg_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
#ifdef KVG_EMU
	emu_mma16816(BF16, d, a, b0, b1);
#else
	if constexpr (BF16)
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
	else
		asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// ---- warp reductions ----

KVG_FN float kvg_warp_max(float v, unsigned width)
{
	for (unsigned o = width / 2; o; o /= 2)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

KVG_FN float kvg_warp_sum(float v, unsigned width)
{
	for (unsigned o = width / 2; o; o /= 2)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// ---- the work: an item's unit and place, its rows, its keys ----

// The first unit whose item_end (merge: merge_end) is past @item.
KVG_FN uint32_t kvg_find_unit(const struct kvg_unit *units, uint32_t n, uint32_t item, bool merge)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if ((merge ? units[mid].merge_end : units[mid].item_end) > item)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

// Where part c of S starts among n keys: on a multiple of KVG_PART_ALIGN (as the host's split).
KVG_FN uint32_t kvg_part_start(uint32_t n, uint32_t c, uint32_t parts)
{
	if (c >= parts)
		return n;
	return (uint32_t)((uint64_t)n * c / parts) & ~(uint32_t)(KVG_PART_ALIGN - 1);
}

struct kvg_item {
	struct kvg_unit u;
	struct kvpd_mask mask;
	uint32_t head, tile, part;
	uint32_t rows;               // the unit's rows per kv head: count * g
	// the keys the tile's queries see together: [lo0, lo0 + len0), then from lo1
	uint32_t lo0, len0, lo1;
	uint32_t k0, k1;             // this part's keys, counted along those ranges
	bool one_query;              // every row of the tile is one query's: masks need no check
};

// Item @item (of the attention kernel, rows_per_tile rows a tile): who it is and what it reads.
KVG_FN void kvg_item_of(const struct kvg_attend_args &a, uint32_t item, struct kvg_item *it)
{
	uint32_t ui = kvg_find_unit(a.units, a.nunits, item, false);
	uint32_t local = item - (ui ? a.units[ui - 1].item_end : 0), lo[2], hi[2], n, total;
	uint32_t row0, q_first, q_last;

	it->u = a.units[ui];
	it->part = local % it->u.split;
	local /= it->u.split;
	it->tile = local % it->u.tiles;
	it->head = local / it->u.tiles;
	it->rows = it->u.count * a.g;
	it->mask.kind = (enum kvc_kind)it->u.kind;
	it->mask.param = it->u.param;
	it->mask.prefix = it->u.prefix;
	row0 = it->tile * a.rows_per_tile;
	q_first = kvg_div(row0, a.g_mul, a.g_shr);
	q_last = kvg_div((row0 + a.rows_per_tile < it->rows ? row0 + a.rows_per_tile : it->rows) - 1,
			 a.g_mul, a.g_shr);
	it->one_query = q_first == q_last;
	n = kvpd_mask_union(&it->mask, it->u.first_pos + q_first, it->u.first_pos + q_last, lo, hi);
	it->lo0 = lo[0];
	it->len0 = hi[0] - lo[0];
	it->lo1 = n == 2 ? lo[1] : 0;
	total = it->len0 + (n == 2 ? hi[1] - lo[1] : 0);
	it->k0 = kvg_part_start(total, it->part, it->u.split);
	it->k1 = kvg_part_start(total, it->part + 1, it->u.split);
}

// The position of the tile's key number @x.
KVG_FN uint32_t kvg_key_pos(const struct kvg_item *it, uint32_t x)
{
	return x < it->len0 ? it->lo0 + x : it->lo1 + (x - it->len0);
}

// The K row of kv head @head at position @pos (its V row is v_delta further).
KVG_FN const uint8_t *kvg_row(const struct kvg_attend_args &a, const struct kvg_unit &u,
			      uint32_t head, uint32_t pos)
{
	uint32_t p = u.ring_tokens ? pos % u.ring_tokens : pos;
	uint32_t b = kvg_div(p, a.bs_mul, a.bs_shr), t = p - b * a.block_size;
	uint32_t id = a.ids[u.ids_at + b - u.first_block];

	return a.kv + id * a.block_stride + t * a.token_stride + head * a.head_stride;
}

// One row of a tile: its query, its head, the keys it sees.
struct kvg_row {
	bool valid;            // a row of the unit, not the tile's padding
	uint32_t query, head;  // head: among the kv head's g
	uint32_t lo[2], hi[2]; // what it sees: [lo, hi) each, the second empty when one range
};

// Row @r of the unit; past its rows, padding that stands in for its last row.
KVG_FN void kvg_row_of(const struct kvg_attend_args &a, const struct kvg_item *it, uint32_t r,
		       struct kvg_row *row)
{
	uint32_t n;

	row->valid = r < it->rows;
	if (!row->valid)
		r = it->rows - 1;
	row->query = kvg_div(r, a.g_mul, a.g_shr);
	row->head = r - row->query * a.g;
	n = kvpd_mask_ranges(&it->mask, it->u.first_pos + row->query, row->lo, row->hi);
	if (n == 1)
		row->lo[1] = row->hi[1] = 0;
}

KVG_FN bool kvg_sees(const struct kvg_row *row, uint32_t pos)
{
	return (pos >= row->lo[0] && pos < row->hi[0]) || (pos >= row->lo[1] && pos < row->hi[1]);
}

// The logit of a q.k product: scaled, then soft-capped.
KVG_FN float kvg_logit(const struct kvg_attend_args &a, float dot)
{
	float s = dot * a.scale;

	return a.softcap > 0 ? a.softcap * tanhf(s / a.softcap) : s;
}

// The q (and out) row of @row of kv head @head: bytes from the q (out) area.
KVG_FN uint64_t kvg_q_at(const struct kvg_attend_args &a, const struct kvg_row *row, uint32_t head,
			 uint32_t q_size)
{
	return ((uint64_t)row->query * a.q_heads + head * a.g + row->head) * a.head_dim * q_size;
}

// A partial row of item (head, tile, part): its index among the part and lse rows.
KVG_FN uint64_t kvg_part_row(const struct kvg_attend_args &a, const struct kvg_item *it, uint32_t i)
{
	return it->u.part_at +
	       ((uint64_t)(it->head * it->u.tiles + it->tile) * it->u.split + it->part) * a.rows_per_tile + i;
}

#endif
