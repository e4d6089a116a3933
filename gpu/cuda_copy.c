/* SPDX-License-Identifier: MIT */
/*
 * WRITE_KV and READ_KV on a cuda pool: the offload and restore path of
 * clients without a mapping. The request's K and V lie in the client's arena
 * (host memory); a task copies them through a pinned staging buffer to device
 * scratch and scatters them by block table in a kernel (gpu/kv_copy.cu), or
 * gathers and copies back, on a lane of the worker's (cuda_lane.c).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_pool.h"
#include "../daemon/pools/jobs.h"

/* The kernels' fatbin, embedded by gpu/kernels_embed.S. */
extern const unsigned char kvpool_fatbin_kv_copy[];

static const char *const copy_names[3] = { "kvpool_copy16", "kvpool_copy4", "kvpool_copy2" };
static const unsigned unit_bytes[3] = { 16, 4, 2 };

int cuda_copy_init(struct cuda_pool *pool, char *why, size_t why_len)
{
	const struct cu_api *cu = &pool->cu;
	CUresult res = cu->cuModuleLoadData(&pool->module, kvpool_fatbin_kv_copy);

	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, cu_errno(res), "cuModuleLoadData", why, why_len);
	for (int i = 0; i < 3; i++) {
		res = cu->cuModuleGetFunction(&pool->copy[i], pool->module, copy_names[i]);
		if (res != CUDA_SUCCESS) {
			cu->cuModuleUnload(pool->module);
			return cu_refuse(cu, res, cu_errno(res), "cuModuleGetFunction", why, why_len);
		}
	}
	return 0;
}

void cuda_copy_fini(struct cuda_pool *pool)
{
	pool->cu.cuModuleUnload(pool->module);
}

/*
 * Tokens [t0, t1) of the job, every kv head, K then V: staged as the request
 * carries them ([tokens][kv_heads][row], K then V), with off[t] the byte
 * offset of token t's K row of head 0 in the pool, after them.
 */
static CUresult move_chunk(struct cuda_pool *pool, struct cuda_lane *lane,
			   const struct kvpd_job *job, uint32_t t0, uint32_t t1, const char **call)
{
	const struct cu_api *cu = &pool->cu;
	const struct kvpd_kv_layout *l = job->layout;
	uint32_t n = t1 - t0;
	size_t token_bytes = l->kv_heads * l->row_bytes, half = n * token_bytes;
	size_t off_at = 2 * half, bytes = off_at + n * sizeof(uint64_t);
	uint8_t *k = job->data + t0 * token_bytes, *v = job->data + job->count * token_bytes +
							 t0 * token_bytes;
	bool to_pool = job->type == KVPD_JOB_WRITE;
	uint64_t *off;
	CUdeviceptr pool_ptr = pool->ptr, stage, offs;
	uint32_t count = n, heads = l->kv_heads, row = (uint32_t)l->row_bytes;
	uint64_t head_stride = l->head_stride, v_delta = l->v_delta;
	int dir = to_pool;
	void *args[] = { &pool_ptr, &stage, &offs, &count, &heads, &row, &head_stride, &v_delta,
			 &dir };
	int unit = row % 16 == 0 ? 0 : row % 4 == 0 ? 1 : 2;
	uint64_t units = 2ull * n * heads * (row / unit_bytes[unit]);
	unsigned grid = (unsigned)((units + 255) / 256 < 65535 ? (units + 255) / 256 : 65535);
	CUresult res;

	*call = "staging (cuMemAllocHost, cuMemAlloc)";
	res = cuda_lane_room(cu, lane, bytes, bytes);
	if (res != CUDA_SUCCESS)
		return res;
	stage = lane->dev;
	offs = lane->dev + off_at;
	off = (uint64_t *)((uint8_t *)lane->host + off_at);
	for (uint32_t t = 0; t < n; t++)
		off[t] = kvpd_row_off(l, &job->map, job->first_pos + t0 + t,
				      kvpd_k_off(l, job->layer, 0));
	*call = "cuMemcpyHtoDAsync";
	if (to_pool) {
		memcpy(lane->host, k, half);
		memcpy((uint8_t *)lane->host + half, v, half);
		res = cu->cuMemcpyHtoDAsync(lane->dev, lane->host, bytes, lane->stream);
	} else {
		res = cu->cuMemcpyHtoDAsync(offs, off, n * sizeof(uint64_t), lane->stream);
	}
	if (res == CUDA_SUCCESS) {
		*call = copy_names[unit];
		res = cu->cuLaunchKernel(pool->copy[unit], grid, 1, 1, 256, 1, 1, 0, lane->stream,
					 args, NULL);
	}
	if (res == CUDA_SUCCESS && !to_pool) {
		*call = "cuMemcpyDtoHAsync";
		res = cu->cuMemcpyDtoHAsync(lane->host, lane->dev, off_at, lane->stream);
	}
	/* The completion waits for the copy: the arena is read or written only now. */
	if (res == CUDA_SUCCESS) {
		*call = "cuStreamSynchronize after the copy kernel";
		res = cu->cuStreamSynchronize(lane->stream);
	}
	if (res == CUDA_SUCCESS && !to_pool) {
		memcpy(k, lane->host, half);
		memcpy(v, (uint8_t *)lane->host + half, half);
	}
	return res;
}

struct chunk {
	uint32_t t0, t1;
};

static CUresult move(struct cuda_pool *pool, struct cuda_lane *lane, struct kvpd_job *job,
		     void *arg, const char **call)
{
	const struct chunk *c = arg;

	return move_chunk(pool, lane, job, c->t0, c->t1, call);
}

/*
 * A tier's task: one block between the pool and its host slot, chunk by chunk,
 * on the lane's stream; a COPY's: one block into another, on the device.
 */
static CUresult move_block(struct cuda_pool *pool, struct cuda_lane *lane, struct kvpd_job *job,
			   void *arg, const char **call)
{
	const struct cu_api *cu = &pool->cu;
	const struct kvpd_kv_layout *l = job->layout;
	uint32_t task = *(const uint32_t *)arg;
	size_t chunk = kvpd_block_chunk_bytes(l);
	CUresult res = CUDA_SUCCESS;

	for (uint32_t i = 0; i < 2 * l->layers && res == CUDA_SUCCESS; i++) {
		CUdeviceptr at = pool->ptr + kvpd_block_chunk_off(l, job->blocks[task], i);
		uint8_t *slot;

		if (job->type == KVPD_JOB_COPY) {
			*call = "cuMemcpyDtoDAsync (a window snapshot's block)";
			res = cu->cuMemcpyDtoDAsync(pool->ptr + kvpd_block_chunk_off(l, job->dsts[task], i),
						    at, chunk, lane->stream);
			continue;
		}
		slot = job->tier_mem + ((size_t)job->slots[task] * 2 * l->layers + i) * chunk;
		if (job->type == KVPD_JOB_TIER_DOWN) {
			*call = "cuMemcpyDtoHAsync (into the tier)";
			res = cu->cuMemcpyDtoHAsync(slot, at, chunk, lane->stream);
		} else {
			*call = "cuMemcpyHtoDAsync (out of the tier)";
			res = cu->cuMemcpyHtoDAsync(at, slot, chunk, lane->stream);
		}
	}
	if (res == CUDA_SUCCESS) {
		*call = "cuStreamSynchronize after the block copies";
		res = cu->cuStreamSynchronize(lane->stream);
	}
	return res;
}

int cuda_tier_task(struct kvpd_job *job, uint32_t task)
{
	cuda_lane_run(job, move_block, &task);
	return 0;
}

int cuda_copy_task(struct kvpd_job *job, uint32_t task)
{
	const struct kvpd_kv_layout *l = job->layout;
	struct chunk c = { task / l->kv_heads * job->chunk_tokens, 0 };

	/* The host's tasks are (chunk, kv head); here one per chunk moves every head. */
	if (task % l->kv_heads)
		return 0;
	c.t1 = c.t0 + job->chunk_tokens < job->count ? c.t0 + job->chunk_tokens : job->count;
	cuda_lane_run(job, move, &c);
	return 0;
}
