/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's own: the driver calls it makes (loaded with dlopen, see
 * backend_cuda.c) and a pool's state, shared by the memory (backend_cuda.c)
 * and the data path (cuda_copy.c).
 */
#ifndef KVPOOL_GPU_CUDA_POOL_H
#define KVPOOL_GPU_CUDA_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "../daemon/backend.h"

#define CUDA_LIB "libcuda.so.1"

/* The driver calls this backend makes; each X(name) expands to its versioned symbol. */
#define CU_CALLS(X)                                                                        \
	X(cuInit) X(cuGetErrorString) X(cuDeviceGetCount) X(cuDeviceGet)                   \
	X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)   \
	X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxSynchronize)                         \
	X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease)                    \
	X(cuMemExportToShareableHandle) X(cuMemAddressReserve) X(cuMemAddressFree)         \
	X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess) X(cuMemsetD8) X(cuMemGetInfo)           \
	X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel)     \
	X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuMemAllocHost)      \
	X(cuMemFreeHost) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)

#define CU_STR_(sym) #sym
#define CU_STR(sym) CU_STR_(sym) /* the macro's expansion: cuMemsetD8 -> "cuMemsetD8_v2" */

struct cuda_lane;

struct cu_api {
	void *lib;
#define CU_PTR(fn) __typeof__(&fn) fn;
	CU_CALLS(CU_PTR)
#undef CU_PTR
};

/*
 * A piece of a pool's memory is at most this: one cuMemCreate each, all made
 * when the pool is (each costs ~0.2 ms per 2 MiB page: never per request).
 */
#define PIECE_MAX_BYTES (1ull << 30)

/*
 * A pool's memory; *mem points here. ptr comes first so that a later data
 * path can read the device address through mem alone.
 */
struct cuda_pool {
	CUdeviceptr ptr;
	size_t bytes;                        /* reserved and mapped */
	size_t piece_bytes;                  /* each piece's but the last (the rest) */
	uint32_t npieces;
	CUmemGenericAllocationHandle *handles; /* the physical memory, a piece each */
	CUdevice dev;
	CUcontext ctx;                       /* the device's primary context, retained */
	struct cu_api cu;                    /* per pool: the plugin keeps no state of its own */
	CUmodule module;                     /* the kernels (gpu/kv_copy.cu) */
	CUfunction copy[3];                  /* kvpool_copy16, 4, 2: by the rows' alignment */
	pthread_mutex_t lanes_lock;
	struct cuda_lane *free_lanes;        /* idle */
	struct cuda_lane *lanes;             /* all, to free */
};

static inline int cu_errno(CUresult res)
{
	switch (res) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
		return -ENODEV;
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case CUDA_ERROR_NOT_PERMITTED:
		return -EPERM;
	default:
		return -EIO;
	}
}

static inline const char *cu_text(const struct cu_api *cu, CUresult res)
{
	const char *s = NULL;

	if (cu->cuGetErrorString(res, &s) != CUDA_SUCCESS || !s)
		s = "unknown error";
	return s;
}

/* "cuMemCreate failed: out of memory (CUresult 2)": the driver's words and its number. */
static inline int cu_refuse(const struct cu_api *cu, CUresult res, int err, const char *call, char *why,
		     size_t why_len)
{
	return kvpd_refuse(why, why_len, err, "%s failed: %s (CUresult %d)", call, cu_text(cu, res),
		      (int)res);
}

/* The data path's (cuda_copy.c): its kernels loaded, its lanes freed. */
int cuda_copy_init(struct cuda_pool *pool, char *why, size_t why_len);
void cuda_copy_fini(struct cuda_pool *pool);
/* WRITE_KV and READ_KV: task chunk * kv_heads moves the chunk, every head; the others nothing. */
int cuda_copy_task(struct kvpd_job *job, uint32_t task);

#endif
