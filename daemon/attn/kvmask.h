/* SPDX-License-Identifier: MIT */
/*
 * The attention masks: which key positions the query at position i sees in a
 * group of each kind. Shared by request validation (event loop), the workers
 * and the GPU kernels (gpu/), so what is checked is exactly what is read.
 *
 *   full       j <= i
 *   swa W      i - W < j <= i
 *   rswa W, P  j <= i and (j < P or i - W < j)
 *   chunked C  j <= i and j / C == i / C
 *   cyclic W   as swa, read from the ring
 */
#ifndef KVPOOLD_KVMASK_H
#define KVPOOLD_KVMASK_H

#include <stdint.h>

#include "core/kvcore.h"

/* Callable from CUDA kernels too (gpu/attend_dev.cuh compiles this header). */
#ifdef __CUDACC__
#define KVMASK_FN static inline __host__ __device__
#else
#define KVMASK_FN static inline
#endif

struct kvpd_mask {
	enum kvc_kind kind;
	uint32_t param;  /* W or C */
	uint32_t prefix; /* rswa: P */
};

/* Writes [lo, hi) ranges, ascending and disjoint; returns how many (1 or 2). */
KVMASK_FN uint32_t kvpd_mask_ranges(const struct kvpd_mask *m, uint32_t i, uint32_t lo[2],
					uint32_t hi[2])
{
	uint32_t window_lo = i + 1 > m->param ? i + 1 - m->param : 0;

	hi[0] = i + 1;
	switch (m->kind) {
	case KVC_FULL:
		lo[0] = 0;
		return 1;
	case KVC_SWA:
	case KVC_CYCLIC:
		lo[0] = window_lo;
		return 1;
	case KVC_CHUNKED:
		lo[0] = i / m->param * m->param;
		return 1;
	case KVC_RSWA:
		if (window_lo <= m->prefix) { /* the window reaches the prefix: no gap */
			lo[0] = 0;
			return 1;
		}
		if (m->prefix == 0) {
			lo[0] = window_lo;
			return 1;
		}
		lo[0] = 0;
		hi[0] = m->prefix;
		lo[1] = window_lo;
		hi[1] = i + 1;
		return 2;
	case KVC_NUM_KINDS:
		break;
	}
	lo[0] = 0;
	return 1;
}

/*
 * The positions queries first..last see together, as at most two ranges: the
 * masks' windows only move forward with i, so the union is the first query's
 * range starts and the last query's range ends.
 */
KVMASK_FN uint32_t kvpd_mask_union(const struct kvpd_mask *m, uint32_t first, uint32_t last,
				       uint32_t lo[2], uint32_t hi[2])
{
	uint32_t flo[2], fhi[2], llo[2], lhi[2];
	uint32_t nf = kvpd_mask_ranges(m, first, flo, fhi);
	uint32_t nl = kvpd_mask_ranges(m, last, llo, lhi);

	if (nl == 1) {
		lo[0] = flo[0];
		hi[0] = lhi[0];
		return 1;
	}
	/* rswa with a gap at the last query: the prefix, then the windows' union. */
	lo[0] = 0;
	hi[0] = m->prefix;
	lo[1] = nf == 2 ? flo[1] : m->prefix;
	hi[1] = lhi[1];
	if (lo[1] <= hi[0]) {
		hi[0] = hi[1];
		return 1;
	}
	return 2;
}

#endif
