/* SPDX-License-Identifier: MIT */
/*
 * The driver calls kvbench attend --backend cuda makes itself (cuda.c):
 * libcuda.so.1 loaded with dlopen, as libkvpool loads it, so kvbench has no
 * CUDA dependency. Results are CUresults (0: success).
 */
#ifndef KVPOOL_BENCH_CUDA_H
#define KVPOOL_BENCH_CUDA_H

#include <stddef.h>

typedef unsigned long long bench_cuptr;

#define BENCH_CU_CALLS(X)                                                                  \
	X(init, "cuInit", int (*)(unsigned))                                               \
	X(error_string, "cuGetErrorString", int (*)(int, const char **))                    \
	X(device_get, "cuDeviceGet", int (*)(int *, int))                                  \
	X(device_name, "cuDeviceGetName", int (*)(char *, int, int))                       \
	X(ctx_retain, "cuDevicePrimaryCtxRetain", int (*)(void **, int))                   \
	X(ctx_push, "cuCtxPushCurrent_v2", int (*)(void *))                                \
	X(mem_info, "cuMemGetInfo_v2", int (*)(size_t *, size_t *))                        \
	X(alloc, "cuMemAlloc_v2", int (*)(bench_cuptr *, size_t))                          \
	X(free, "cuMemFree_v2", int (*)(bench_cuptr))                                      \
	X(htod, "cuMemcpyHtoD_v2", int (*)(bench_cuptr, const void *, size_t))             \
	X(dtod_async, "cuMemcpyDtoDAsync_v2", int (*)(bench_cuptr, bench_cuptr, size_t, void *)) \
	X(event_create, "cuEventCreate", int (*)(void **, unsigned))                       \
	X(event_record, "cuEventRecord", int (*)(void *, void *))                          \
	X(event_sync, "cuEventSynchronize", int (*)(void *))                               \
	X(event_destroy, "cuEventDestroy_v2", int (*)(void *))

struct bench_cu {
	void *lib;
	void *ctx;
	char device[128];
#define BENCH_CU_FIELD(field, sym, type) __typeof__(type) field;
	BENCH_CU_CALLS(BENCH_CU_FIELD)
#undef BENCH_CU_FIELD
	int (*elapsed)(float *ms, void *start, void *end);
};

/*
 * Loads the driver and makes device 0's primary context current (where
 * kvp_map_pool maps); -ENODEV with the reason in @why when it cannot.
 */
int bench_cu_open(struct bench_cu *cu, char *why, size_t why_len);
/* "cuMemAlloc: out of memory": the call's name and the driver's words. */
const char *bench_cu_text(const struct bench_cu *cu, int res);
/*
 * The device's copy bandwidth: bytes read + written per second of a
 * device-to-device copy of @bytes between two buffers, timed with events,
 * the median of @reps; 0 on a failure (its CUresult in *res).
 */
double bench_cu_copy_gbps(const struct bench_cu *cu, size_t bytes, unsigned reps, int *res);

#endif
