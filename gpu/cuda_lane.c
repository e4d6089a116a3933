/* SPDX-License-Identifier: MIT */
/*
 * The workers' lanes on a cuda pool (cuda_pool.h): each task that touches the
 * device takes an idle lane (a stream of its own, its staging buffer, its
 * scratch, its events) and puts it back, so that tasks of several workers run
 * on streams of their own and a lane's buffers, once grown, are reused.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>

#include "cuda_pool.h"
#include "../daemon/pools/jobs.h"

int cuda_lanes_init(struct cuda_pool *pool)
{
	return -pthread_mutex_init(&pool->lanes_lock, NULL);
}

void cuda_lanes_fini(struct cuda_pool *pool)
{
	const struct cu_api *cu = &pool->cu;

	while (pool->lanes) {
		struct cuda_lane *lane = pool->lanes;

		pool->lanes = lane->next;
		if (lane->host)
			cu->cuMemFreeHost(lane->host);
		if (lane->dev)
			cu->cuMemFree(lane->dev);
		cu->cuEventDestroy(lane->start);
		cu->cuEventDestroy(lane->end);
		cu->cuStreamDestroy(lane->stream);
		free(lane);
	}
	pthread_mutex_destroy(&pool->lanes_lock);
}

struct cuda_lane *cuda_lane_take(struct cuda_pool *pool)
{
	const struct cu_api *cu = &pool->cu;
	struct cuda_lane *lane;

	pthread_mutex_lock(&pool->lanes_lock);
	lane = pool->free_lanes;
	if (lane)
		pool->free_lanes = lane->next_free;
	pthread_mutex_unlock(&pool->lanes_lock);
	if (lane)
		return lane;
	lane = calloc(1, sizeof(*lane));
	if (!lane)
		return NULL;
	if (cu->cuStreamCreate(&lane->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
		goto free_lane;
	if (cu->cuEventCreate(&lane->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
		goto destroy_stream;
	if (cu->cuEventCreate(&lane->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
		goto destroy_start;
	pthread_mutex_lock(&pool->lanes_lock);
	lane->next = pool->lanes;
	pool->lanes = lane;
	pthread_mutex_unlock(&pool->lanes_lock);
	return lane;

destroy_start:
	cu->cuEventDestroy(lane->start);
destroy_stream:
	cu->cuStreamDestroy(lane->stream);
free_lane:
	free(lane);
	return NULL;
}

void cuda_lane_put(struct cuda_pool *pool, struct cuda_lane *lane)
{
	pthread_mutex_lock(&pool->lanes_lock);
	lane->next_free = pool->free_lanes;
	pool->free_lanes = lane;
	pthread_mutex_unlock(&pool->lanes_lock);
}

CUresult cuda_lane_room(const struct cu_api *cu, struct cuda_lane *lane, size_t host_bytes,
			size_t dev_bytes)
{
	CUresult res = CUDA_SUCCESS;

	if (lane->host_bytes < host_bytes) {
		if (lane->host)
			cu->cuMemFreeHost(lane->host);
		lane->host = NULL;
		lane->host_bytes = 0;
		res = cu->cuMemAllocHost(&lane->host, host_bytes);
		if (res != CUDA_SUCCESS)
			return res;
		lane->host_bytes = host_bytes;
	}
	if (lane->dev_bytes < dev_bytes) {
		if (lane->dev)
			cu->cuMemFree(lane->dev);
		lane->dev = 0;
		lane->dev_bytes = 0;
		res = cu->cuMemAlloc(&lane->dev, dev_bytes);
		if (res == CUDA_SUCCESS)
			lane->dev_bytes = dev_bytes;
	}
	return res;
}

void cuda_lane_run(struct kvpd_job *job, cuda_lane_fn *fn, void *arg)
{
	struct cuda_pool *pool = (struct cuda_pool *)job->mem;
	const struct cu_api *cu = &pool->cu;
	const char *call = "cuCtxPushCurrent";
	struct cuda_lane *lane;
	CUcontext popped;
	CUresult res;

	res = cu->cuCtxPushCurrent(pool->ctx);
	if (res != CUDA_SUCCESS)
		goto failed;
	lane = cuda_lane_take(pool);
	call = "a new lane (cuStreamCreate, cuEventCreate)";
	res = lane ? fn(pool, lane, job, arg, &call) : CUDA_ERROR_OUT_OF_MEMORY;
	if (lane)
		cuda_lane_put(pool, lane);
	cu->cuCtxPopCurrent(&popped);
	if (res == CUDA_SUCCESS)
		return;
failed:
	cuda_job_error(job, cu_errno(res), "%s failed: %s (CUresult %d)", call, cu_text(cu, res),
		       (int)res);
}

void cuda_job_error(struct kvpd_job *job, int err, const char *fmt, ...)
{
	int expected = 0;
	va_list ap;

	/* the first failure's task alone writes the reason; the loop reads it after the last */
	if (!__atomic_compare_exchange_n(&job->error, &expected, err, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vsnprintf(job->why, sizeof(job->why), fmt, ap);
	va_end(ap);
}
