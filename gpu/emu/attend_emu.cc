// SPDX-License-Identifier: MIT
//
// kv_attend.cu built for the CPU emulation: the same source the plugin's
// fatbin is built from, every kernel in attend_plan.h's order.
#define KVG_EMU 1
#include "../kv_attend.cu"
#include "attend_emu.h"

static emu_kernel_fn *const kernels[] = {
#define KVG_FN_PTR(name, kv, q, n) name,
	KVG_MMA_KERNELS(KVG_FN_PTR) KVG_SIMT_KERNELS(KVG_FN_PTR)
#undef KVG_FN_PTR
};

void kvg_emu_attend(uint32_t kernel, unsigned grid, unsigned block, size_t smem,
		    unsigned merge_grid, unsigned merge_block, const struct kvg_attend_args *args)
{
	if (kernel >= sizeof(kernels) / sizeof(kernels[0]))
		abort();
	emu_launch(kernels[kernel], grid, block, smem, args);
	if (merge_grid)
		emu_launch(kvg_merge, merge_grid, merge_block, 0, args);
}
