/* SPDX-License-Identifier: MIT */
/*
 * The attention kernels of gpu/kv_attend.cu, run on the CPU (cuda_emu.h) over
 * host memory: what tests/unit/test_gpu_attend.c checks them with, on any
 * machine. @kernel is a KVG_K_* of attend_plan.h; the launch is the plan's.
 */
#ifndef KVPOOL_GPU_EMU_ATTEND_EMU_H
#define KVPOOL_GPU_EMU_ATTEND_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "../attend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the attention kernel @kernel, then the merge when @merge_grid is non-zero. */
void kvg_emu_attend(uint32_t kernel, unsigned grid, unsigned block, size_t smem,
		    unsigned merge_grid, unsigned merge_block, const struct kvg_attend_args *args);

#ifdef __cplusplus
}
#endif

#endif
