/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's own: the driver calls it makes (loaded with dlopen, see
 * backend_cuda.c) and a pool's state, shared by the memory (backend_cuda.c),
 * the workers' lanes (cuda_lane.c) and the data path (cuda_copy.c,
 * cuda_attend.c).
 */
#ifndef KVPOOL_GPU_CUDA_POOL_H
#define KVPOOL_GPU_CUDA_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "attend_plan.h"
#include "../daemon/pools/backend.h"

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
	X(cuFuncSetAttribute)                                                             \
	X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuMemAllocHost)      \
	X(cuMemFreeHost) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) \
	X(cuMemcpyDtoDAsync)                                                              \
	X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)

#define CU_STR_(sym) #sym
#define CU_STR(sym) CU_STR_(sym) /* the macro's expansion: cuMemsetD8 -> "cuMemsetD8_v2" */

struct cuda_lane;

struct cu_api {
	void *lib;
#define CU_PTR(fn) __typeof__(&fn) fn;
	CU_CALLS(CU_PTR)
#undef CU_PTR
	/* cuEventElapsedTime_v2 (drivers of CUDA 12.8 on), else the first version: same call */
	CUresult (*elapsed)(float *ms, CUevent start, CUevent end);
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
	CUmodule module;                     /* the copy kernels (gpu/kv_copy.cu) */
	CUfunction copy[3];                  /* kvpool_copy16, 4, 2: by the rows' alignment */
	CUmodule attend_module;              /* the attention kernels (gpu/kv_attend.cu) */
	CUfunction attend[KVG_NKERNELS];     /* by attend_plan.h's KVG_K_* */
	unsigned sms;                        /* the device's multiprocessors: ATTEND's plans */
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

/*
 * A worker's lane (cuda_lane.c): a stream, a pinned staging buffer and device
 * scratch, grown on demand and kept, and two events to time kernels with.
 * A task takes one for its run and puts it back.
 */
struct cuda_lane {
	struct cuda_lane *next_free, *next;
	CUstream stream;
	CUevent start, end;
	void *host;          /* pinned: what the DMA engine reads and writes */
	CUdeviceptr dev;
	size_t host_bytes, dev_bytes;
};

/* The caller has the pool's context current for each of these. */
int cuda_lanes_init(struct cuda_pool *pool);
void cuda_lanes_fini(struct cuda_pool *pool);
/* An idle lane, or a new one; NULL when a stream cannot be made. */
struct cuda_lane *cuda_lane_take(struct cuda_pool *pool);
void cuda_lane_put(struct cuda_pool *pool, struct cuda_lane *lane);
/* Staging of at least @host_bytes, scratch of at least @dev_bytes. */
CUresult cuda_lane_room(const struct cu_api *cu, struct cuda_lane *lane, size_t host_bytes,
			size_t dev_bytes);
/*
 * A task's failure (-errno) and its reason, when it is the first: the
 * request's result, and the daemon's log line ("cuLaunchKernel failed: ...").
 */
void cuda_job_error(struct kvpd_job *job, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * Runs @fn on a lane of @job's pool with the pool's context current (pushed,
 * then popped: the worker's own is left as it was); a failure goes to
 * job->error, the call that failed (*call, set by @fn) to its reason.
 */
typedef CUresult cuda_lane_fn(struct cuda_pool *pool, struct cuda_lane *lane,
			      struct kvpd_job *job, void *arg, const char **call);
void cuda_lane_run(struct kvpd_job *job, cuda_lane_fn *fn, void *arg);

/* The copy path (cuda_copy.c): its kernels loaded and dropped. */
int cuda_copy_init(struct cuda_pool *pool, char *why, size_t why_len);
void cuda_copy_fini(struct cuda_pool *pool);
/* WRITE_KV and READ_KV: task chunk * kv_heads moves the chunk, every head; the others nothing. */
int cuda_copy_task(struct kvpd_job *job, uint32_t task);
/*
 * A tier's TIER_DOWN or TIER_UP: task i copies block blocks[i] to or from its
 * host slot; a COPY (window snapshots): into block dsts[i], on the device.
 */
int cuda_tier_task(struct kvpd_job *job, uint32_t task);

/* ATTEND (cuda_attend.c): its kernels loaded and dropped; a request's one task runs it all. */
int cuda_attend_init(struct cuda_pool *pool, char *why, size_t why_len);
void cuda_attend_fini(struct cuda_pool *pool);
int cuda_attend_task(struct kvpd_job *job);

#endif
