/* SPDX-License-Identifier: MIT */
/*
 * The allocation a cuda pool's pieces are made with, shared by the plugin
 * (backend_cuda.c) and cuda_probe: the probe checks exactly what the pool
 * asks the driver for.
 */
#ifndef KVPOOL_GPU_CUDA_ALLOC_H
#define KVPOOL_GPU_CUDA_ALLOC_H

#include <cuda.h>

/* Pinned device memory on @dev that a POSIX fd can share. */
static inline CUmemAllocationProp cuda_alloc_prop(CUdevice dev)
{
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
	};

	return prop;
}

#endif
