/* SPDX-License-Identifier: MIT */
/*
 * A cuda ATTEND's plan: which kernel, how its work is cut (tiles of rows,
 * split-K parts), and one buffer that holds what goes to the device and what
 * comes back. Pure host code, no CUDA: the backend (cuda_attend.c) and the
 * CPU emulation's tests (tests/unit/test_gpu_attend.c) run the same plans.
 *
 * The buffer, pinned on the host and mirrored on the device:
 *   [units][ids][q]   in_bytes, copied to the device before the kernels
 *   [out]             out_bytes at out_at, copied back after them
 *   [part][lse]       split-K partials, device only (dev_bytes in all)
 */
#ifndef KVPOOL_GPU_ATTEND_PLAN_H
#define KVPOOL_GPU_ATTEND_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attend_abi.h"
#include "../daemon/pools/jobs.h"

/* Items that keep one multiprocessor's loads in flight: fewer, and long contexts are split. */
#define KVG_WARPS_PER_SM 16
/* A part reads this many keys at least: its partials and their merge cost little next to it. */
#define KVG_PART_MIN_KEYS 256
/* The partials of one request, at most; past it, units stay whole. */
#define KVG_PART_BYTES_MAX (64u << 20)

/* Every kernel of kv_attend.cu: the tensor-core ones, the SIMT ones, then the merge. */
enum {
#define KVG_ENUM(name, kv, q, n) KVG_K_##name,
	KVG_MMA_KERNELS(KVG_ENUM) KVG_SIMT_KERNELS(KVG_ENUM)
#undef KVG_ENUM
	KVG_K_MERGE,
	KVG_NKERNELS
};
extern const char *const kvg_kernel_names[KVG_NKERNELS];
/* The dynamic shared memory kernel @kernel may ask for, when past the default 48 KiB; else 0. */
uint32_t kvg_kernel_smem_max(uint32_t kernel);

struct kvg_plan {
	uint32_t kernel;          /* KVG_K_*: the attention kernel */
	struct kvg_attend_args args; /* its pointers are offsets into the buffer until bound */
	uint32_t merge_items;     /* 0: no unit is split, no merge kernel */
	unsigned grid, block, smem;  /* the attention kernel's launch */
	unsigned merge_grid, merge_block;
	size_t units_at, ids_at, q_at, out_at, part_at, lse_at;
	size_t in_bytes, out_bytes;
	size_t host_bytes;        /* the pinned buffer: through out */
	size_t dev_bytes;         /* the device buffer: through lse */
	uint64_t kv_off;          /* the layer's K, kv head 0, block 0, from the pool's start */
	unsigned sms;
};

/*
 * Plans @job (an ATTEND, checked by the daemon) for a device of @sms
 * multiprocessors: a pure function of the two. -E2BIG: a launch larger than
 * the device takes.
 */
int kvg_plan_attend(const struct kvpd_job *job, unsigned sms, struct kvg_plan *p);
/* Writes units, ids and q into @buf (host_bytes): what goes to the device. */
void kvg_plan_fill(const struct kvpd_job *job, const struct kvg_plan *p, uint8_t *buf);
/* Points the kernels' arguments at the device buffer @dev and the pool's memory @pool. */
void kvg_plan_bind(struct kvg_plan *p, uintptr_t dev, uintptr_t pool);
/* Copies the outputs out of @buf (back from the device) to the client's arena. */
void kvg_plan_collect(const struct kvpd_job *job, const struct kvg_plan *p, const uint8_t *buf);

#endif
