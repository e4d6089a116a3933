/* SPDX-License-Identifier: MIT */
/*
 * Inside the attention kernels: the per-ISA entry points (the tests call each
 * one directly), the CPU probe, and the walk that turns the key ranges of a
 * query into tiles of K row pointers.
 */
#ifndef KVPOOL_ATTEND_INTERNAL_H
#define KVPOOL_ATTEND_INTERNAL_H

#include <stdint.h>

#include "attend.h"

enum attn_level {
	ATTN_LEVEL_C,
	ATTN_LEVEL_AVX2,       /* AVX2 + FMA + F16C */
	ATTN_LEVEL_AVX512,     /* AVX-512 F/BW/VL/DQ */
	ATTN_LEVEL_AVX512BF16, /* and AVX512_BF16: vdpbf16ps for bf16 q over bf16 keys */
	ATTN_NLEVELS
};

typedef void attn_fn(const struct attn_keys *k, const struct attn_query *q,
		     const struct attn_params *p);

attn_fn attn_one_c;
attn_fn attn_one_avx2;
attn_fn attn_one_avx512;
attn_fn attn_one_avx512bf16;

/* The highest level this CPU and OS support (probed every call; cheap). */
enum attn_level attn_cpu_level(void);
/* The kernel of a level, or NULL where the CPU lacks it. */
attn_fn *attn_level_fn(enum attn_level l);
/* "c", "avx2", "avx512", "avx512bf16"; NULL when out of range. */
const char *attn_level_name(enum attn_level l);

/* Keys per tile: one online-softmax step, one rescale of the accumulators. */
#define ATTN_TILE 16
/* Floats of scratch per array (prescaled q, accumulators) in the SIMD kernels. */
#define ATTN_SCRATCH 4096

/*
 * Prefetch. While it computes a tile, a kernel prefetches the K and V lines of
 * the next tile into L1 and those of the tile ATTN_PF_FAR ahead into L2, a line
 * of each per load step, from tables of each tile's lines in rising order:
 * each row's lines, the rows in order, so a block is requested as one rising
 * stream. (Line i of every row, then line i + 1, read 12-17 GB/s a core; the
 * rising order 25.) The L1 prefetch alone cannot keep enough misses in flight
 * when memory is slow: on a VM whose plain read ran 30 GB/s a core, the
 * kernels read 12 (f16, 4 heads a kv head); with the L2 prefetch 4 tiles
 * (32 KiB of KV) ahead, 18, and 23 -> 35 on two cores. Rows longer than
 * ATTN_PF_LINES lines are not prefetched. Prefetches never fault: a padded row
 * costs a wasted line, nothing else.
 */
#define ATTN_PF_LINES 64
#ifndef ATTN_PF_FAR /* -D to try other distances: 2 to 6 measured the same */
#define ATTN_PF_FAR 4
#endif
_Static_assert(ATTN_PF_FAR >= 2, "the far tile lies beyond the next one");

/* The lines of a row of row_bytes; 0 when it is too long to prefetch. */
static inline uint32_t attn_pf_lines(size_t row_bytes)
{
	size_t lines = (row_bytes + 63) / 64;

	return lines <= ATTN_PF_LINES ? (uint32_t)lines : 0;
}

/*
 * tab[r * lines + l]: line l of rows[r], for the ATTN_TILE rows of a tile. The
 * rows of a tile within one block follow each other: one run of lines.
 */
static inline void attn_pf_table(const uint8_t **tab, const uint8_t *const *rows, uint32_t lines,
				 size_t row_bytes)
{
	if (rows[ATTN_TILE - 1] == rows[0] + (ATTN_TILE - 1) * row_bytes) {
		for (uint32_t s = 0; s < ATTN_TILE * lines; s++)
			tab[s] = rows[0] + 64 * (size_t)s;
		return;
	}
	for (uint32_t r = 0; r < ATTN_TILE; r++)
		for (uint32_t l = 0; l < lines; l++)
			tab[r * lines + l] = rows[r] + 64 * (size_t)l;
}

/*
 * Whether the keys lie in one rising run of memory: each block's K rows, then its
 * V rows, then the next block's K rows (a slot of one layer's one kv head, blocks
 * in order). Read in that order, such a run needs no software prefetch: the
 * hardware prefetchers follow it across pages, and prefetch instructions only
 * get in their way (a core read 30 GB/s of it with none, 19-24 with them).
 */
static inline int attn_keys_rising(const struct attn_keys *k)
{
	size_t block = (size_t)k->block_size * k->head_dim * attn_dtype_size(k->dtype);

	if (k->ring_tokens || k->v_delta != block || k->block_stride != 2 * block ||
	    (k->row_stride && k->row_stride != block / k->block_size))
		return 0;
	for (uint32_t i = 1; i < k->nblocks; i++)
		if (k->ids[i] != k->ids[i - 1] + 1)
			return 0;
	return 1;
}

/*
 * The key positions of a query, in order, as row pointers. Divisions happen
 * only where a range starts; the rest is counting rows within blocks.
 */
struct attn_walk {
	const uint8_t *pool;
	const uint32_t *ids;
	size_t block_stride, k_off, row_stride;
	uint32_t bs, ring, first_block;
	uint32_t lo[2], hi[2];
	uint32_t nr, r;  /* ranges, the next one to start */
	uint32_t left;   /* positions left in the current range */
	uint32_t jr, lb, row;
};

static inline void attn_walk_init(struct attn_walk *w, const struct attn_keys *k,
				  const struct attn_query *q)
{
	w->pool = k->pool;
	w->ids = k->ids;
	w->block_stride = k->block_stride;
	w->k_off = k->k_off;
	w->row_stride = k->row_stride ? k->row_stride : (size_t)k->head_dim * attn_dtype_size(k->dtype);
	w->bs = k->block_size;
	w->ring = k->ring_tokens;
	w->first_block = k->first_block;
	w->nr = q->nranges < 2 ? q->nranges : 2;
	for (uint32_t i = 0; i < 2; i++) {
		w->lo[i] = q->lo[i];
		w->hi[i] = q->hi[i];
	}
	w->r = 0;
	w->left = 0;
	w->jr = w->lb = w->row = 0;
}

/* Fills rows[0..n) with the K rows of the next n <= max positions; 0 at the end. */
static inline unsigned attn_walk_fill(struct attn_walk *w, const uint8_t **rows, unsigned max)
{
	unsigned n = 0;

	while (n < max) {
		const uint8_t *base;
		uint32_t seg;

		if (w->left == 0) {
			uint32_t j;

			if (w->r >= w->nr)
				break;
			j = w->lo[w->r];
			w->left = w->hi[w->r] > j ? w->hi[w->r] - j : 0;
			w->r++;
			w->jr = w->ring ? j % w->ring : j;
			w->lb = w->jr / w->bs;
			w->row = w->jr % w->bs;
			continue;
		}
		seg = w->bs - w->row;
		if (seg > w->left)
			seg = w->left;
		if (w->ring && seg > w->ring - w->jr)
			seg = w->ring - w->jr;
		if (seg > max - n)
			seg = max - n;
		base = w->pool + (size_t)w->ids[w->lb - w->first_block] * w->block_stride + w->k_off +
		       (size_t)w->row * w->row_stride;
		for (uint32_t i = 0; i < seg; i++)
			rows[n++] = base + i * w->row_stride;
		w->left -= seg;
		w->jr += seg;
		w->row += seg;
		if (w->row == w->bs) {
			w->row = 0;
			w->lb++;
		}
		if (w->ring && w->jr == w->ring) {
			w->jr = 0;
			w->lb = 0;
			w->row = 0;
		}
	}
	return n;
}

/*
 * The next tile of the walk: its rows, padded with its first row (with any past
 * the end), and their table of lines to prefetch; the keys in it, 0 at the end.
 * Always inlined: the kernels call it from two places, and GCC would make it a
 * call costing 1-5 cycles a key. (The walk, the rows and the tables stay local
 * arrays of the kernels: gathered in one struct, they cost 4-6 cycles a key.)
 */
static inline __attribute__((always_inline)) unsigned
attn_next_tile(struct attn_walk *w, const uint8_t **rows, const uint8_t **tab, uint32_t lines,
	       size_t row_bytes, const uint8_t *any)
{
	unsigned n = attn_walk_fill(w, rows, ATTN_TILE);

	for (unsigned i = n; i < ATTN_TILE; i++)
		rows[i] = n ? rows[0] : any;
	if (rows[0]) /* NULL: a walk with no keys at all */
		attn_pf_table(tab, rows, lines, row_bytes);
	return n;
}

#endif
