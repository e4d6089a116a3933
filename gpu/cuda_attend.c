/* SPDX-License-Identifier: MIT */
/*
 * ATTEND on a cuda pool: one task runs the whole request. It plans it
 * (attend_plan.c), stages the block tables and q through the lane's pinned
 * buffer into device scratch in one copy, launches the attention kernel (and
 * the merge, when long contexts were split) on the lane's stream between two
 * events, copies the outputs back and into the client's arena, and reports
 * the kernels' time as the completion's aux. The completion is posted only
 * after the stream has finished, so the blocks stay pinned while a kernel
 * reads them.
 */
#include <errno.h>
#include <string.h>

#include "cuda_pool.h"
#include "../daemon/pools/jobs.h"

/* The kernels' fatbin, embedded by gpu/kernels_embed.S. */
extern const unsigned char kvpool_fatbin_kv_attend[];

int cuda_attend_init(struct cuda_pool *pool, char *why, size_t why_len)
{
	const struct cu_api *cu = &pool->cu;
	int sms = 0;
	CUresult res;

	res = cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, pool->dev);
	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, cu_errno(res), "cuDeviceGetAttribute", why, why_len);
	pool->sms = sms > 0 ? (unsigned)sms : 1;
	res = cu->cuModuleLoadData(&pool->attend_module, kvpool_fatbin_kv_attend);
	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, cu_errno(res), "cuModuleLoadData", why, why_len);
	for (uint32_t k = 0; k < KVG_NKERNELS; k++) {
		const char *call = "cuModuleGetFunction";

		res = cu->cuModuleGetFunction(&pool->attend[k], pool->attend_module, kvg_kernel_names[k]);
		/* past 48 KiB of shared memory, a kernel launches only once allowed more */
		if (res == CUDA_SUCCESS && kvg_kernel_smem_max(k) > 48 * 1024) {
			call = "cuFuncSetAttribute";
			res = cu->cuFuncSetAttribute(pool->attend[k],
						     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
						     (int)kvg_kernel_smem_max(k));
		}
		if (res != CUDA_SUCCESS) {
			cu->cuModuleUnload(pool->attend_module);
			return kvpd_refuse(why, why_len, cu_errno(res),
					   "%s %s failed: %s (CUresult %d)", call,
					   kvg_kernel_names[k], cu_text(cu, res), (int)res);
		}
	}
	return 0;
}

void cuda_attend_fini(struct cuda_pool *pool)
{
	pool->cu.cuModuleUnload(pool->attend_module);
}

/*
 * The request on @lane's stream, from staging to outputs; job->aux: the kernels' time.
 * *call: the driver call that failed (CUDA's asynchronous errors surface at the
 * synchronization, so a kernel's fault is named there).
 */
static CUresult run(struct cuda_pool *pool, struct cuda_lane *lane, struct kvpd_job *job, void *arg,
		    const char **call)
{
	const struct cu_api *cu = &pool->cu;
	struct kvg_plan *plan = arg;
	void *args[] = { &plan->args };
	float ms = 0;
	CUresult res;

	*call = "staging (cuMemAllocHost, cuMemAlloc)";
	res = cuda_lane_room(cu, lane, plan->host_bytes, plan->dev_bytes);
	if (res != CUDA_SUCCESS)
		return res;
	kvg_plan_fill(job, plan, lane->host);
	kvg_plan_bind(plan, (uintptr_t)lane->dev, (uintptr_t)pool->ptr);
	*call = "cuMemcpyHtoDAsync";
	res = cu->cuMemcpyHtoDAsync(lane->dev, lane->host, plan->in_bytes, lane->stream);
	if (res == CUDA_SUCCESS)
		res = cu->cuEventRecord(lane->start, lane->stream);
	if (res == CUDA_SUCCESS) {
		*call = kvg_kernel_names[plan->kernel];
		res = cu->cuLaunchKernel(pool->attend[plan->kernel], plan->grid, 1, 1, plan->block, 1,
					 1, plan->smem, lane->stream, args, NULL);
	}
	if (res == CUDA_SUCCESS && plan->merge_items) {
		*call = kvg_kernel_names[KVG_K_MERGE];
		res = cu->cuLaunchKernel(pool->attend[KVG_K_MERGE], plan->merge_grid, 1, 1,
					 plan->merge_block, 1, 1, 0, lane->stream, args, NULL);
	}
	if (res == CUDA_SUCCESS)
		res = cu->cuEventRecord(lane->end, lane->stream);
	if (res == CUDA_SUCCESS) {
		*call = "cuMemcpyDtoHAsync";
		res = cu->cuMemcpyDtoHAsync((uint8_t *)lane->host + plan->out_at,
					    lane->dev + plan->out_at, plan->out_bytes, lane->stream);
	}
	/* The completion waits for the kernels: the blocks stay pinned until they are done. */
	if (res == CUDA_SUCCESS) {
		*call = "cuStreamSynchronize after the attention kernels";
		res = cu->cuStreamSynchronize(lane->stream);
	}
	if (res != CUDA_SUCCESS)
		return res;
	kvg_plan_collect(job, plan, lane->host);
	if (cu->elapsed(&ms, lane->start, lane->end) == CUDA_SUCCESS && ms > 0)
		job->aux = (uint64_t)((double)ms * 1e6);
	return CUDA_SUCCESS;
}

int cuda_attend_task(struct kvpd_job *job)
{
	struct cuda_pool *pool = (struct cuda_pool *)job->mem;
	struct kvg_plan plan;
	int err = kvg_plan_attend(job, pool->sms, &plan);

	if (err)
		cuda_job_error(job, err, "no plan for the request: %s", strerror(-err));
	else
		cuda_lane_run(job, run, &plan);
	return 0;
}
