/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend, built into libkvpool_cuda.so and loaded by kvpoold only
 * when a pool asks for it (daemon/pools/plugin.c). Pool memory is a CUDA VMM
 * allocation, exportable as a POSIX fd so that engines map the same blocks.
 *
 * The driver API is loaded at runtime, not linked: the plugin must load, and
 * refuse with a reason, on a machine without a driver (the build machines
 * have only the toolkit's stub libcuda). cuda.h still gives the types and the
 * prototypes, which pick each call's current ABI version (cuMemsetD8_v2...).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>

#include "cuda_alloc.h"
#include "cuda_pool.h"
#include "../daemon/pools/jobs.h"
#include "../daemon/pools/plugin.h"
#include "../uapi/kvpool.h"

#define CUDA_LIB "libcuda.so.1"

/*
 * NODELETE: once cuInit has run, the driver has threads of its own in the
 * process, and unmapping its code under them would crash the daemon; the
 * last pool's dlclose must leave it loaded.
 */
static int cu_open(struct cu_api *cu, char *why, size_t why_len)
{
	cu->lib = dlopen(CUDA_LIB, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!cu->lib)
		return kvpd_refuse(why, why_len, -ENODEV, CUDA_LIB " not loadable: %s", dlerror());
#define CU_SYM(fn)                                                                               \
	cu->fn = (__typeof__(&fn))dlsym(cu->lib, CU_STR(fn));                                    \
	if (!cu->fn) {                                                                           \
		dlclose(cu->lib);                                                                \
		return kvpd_refuse(why, why_len, -ENOSYS, CUDA_LIB " has no " CU_STR(fn)              \
			      ": driver too old");                                               \
	}
	CU_CALLS(CU_SYM)
#undef CU_SYM
	*(void **)&cu->elapsed = dlsym(cu->lib, "cuEventElapsedTime_v2");
	if (!cu->elapsed)
		*(void **)&cu->elapsed = dlsym(cu->lib, "cuEventElapsedTime");
	if (!cu->elapsed) {
		dlclose(cu->lib);
		return kvpd_refuse(why, why_len, -ENOSYS, CUDA_LIB " has no cuEventElapsedTime: "
				   "driver too old");
	}
	return 0;
}

/* Refuses a device without VMM or fd export up front, with a reason that says so. */
static int check_device(struct cuda_pool *pool, uint32_t device, char *why, size_t why_len)
{
	const struct cu_api *cu = &pool->cu;
	int count = 0, vmm = 0, posix_fd = 0;
	CUresult res;

	res = cu->cuInit(0);
	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, -ENODEV, "cuInit", why, why_len);
	res = cu->cuDeviceGetCount(&count);
	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, -ENODEV, "cuDeviceGetCount", why, why_len);
	if (device >= (uint32_t)count)
		return kvpd_refuse(why, why_len, -ENODEV, "no CUDA device %u (%d found)", device, count);
	res = cu->cuDeviceGet(&pool->dev, (int)device);
	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, -ENODEV, "cuDeviceGet", why, why_len);

	res = cu->cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				       pool->dev);
	if (res == CUDA_SUCCESS)
		res = cu->cuDeviceGetAttribute(
			&posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
			pool->dev);
	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, cu_errno(res), "cuDeviceGetAttribute", why, why_len);
	if (!vmm)
		return kvpd_refuse(why, why_len, -EOPNOTSUPP,
			      "CUDA device %u has no virtual memory management (cuMemCreate)", device);
	if (!posix_fd)
		return kvpd_refuse(why, why_len, -EOPNOTSUPP,
			      "CUDA device %u cannot export memory as POSIX fds", device);
	return 0;
}

static size_t piece_size(const struct cuda_pool *pool, uint32_t i)
{
	return i + 1 < pool->npieces ? pool->piece_bytes :
				       pool->bytes - (size_t)i * pool->piece_bytes;
}

/* Unmaps and releases pieces [0, n). */
static void drop_pieces(struct cuda_pool *pool, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		pool->cu.cuMemUnmap(pool->ptr + (size_t)i * pool->piece_bytes, piece_size(pool, i));
		pool->cu.cuMemRelease(pool->handles[i]);
	}
}

/* Creates each piece and maps it at its place in the reserved range. */
static int map_pieces(struct cuda_pool *pool, char *why, size_t why_len)
{
	const struct cu_api *cu = &pool->cu;
	CUmemAllocationProp prop = cuda_alloc_prop(pool->dev);

	for (uint32_t i = 0; i < pool->npieces; i++) {
		CUresult res = cu->cuMemCreate(&pool->handles[i], piece_size(pool, i), &prop, 0);

		if (res == CUDA_SUCCESS) {
			res = cu->cuMemMap(pool->ptr + (size_t)i * pool->piece_bytes,
					   piece_size(pool, i), 0, pool->handles[i], 0);
			if (res != CUDA_SUCCESS) {
				cu->cuMemRelease(pool->handles[i]);
				drop_pieces(pool, i);
				return cu_refuse(cu, res, cu_errno(res), "cuMemMap", why, why_len);
			}
			continue;
		}
		drop_pieces(pool, i);
		return cu_refuse(cu, res, cu_errno(res), "cuMemCreate", why, why_len);
	}
	return 0;
}

/*
 * Maps pool->bytes (a multiple of the granularity) of new device memory, in
 * pieces, into one new address range, zeroed. The caller has the pool's
 * context current.
 */
static int map_memory(struct cuda_pool *pool, char *why, size_t why_len)
{
	const struct cu_api *cu = &pool->cu;
	CUmemAccessDesc access = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = pool->dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	size_t free_bytes = 0, total_bytes = 0;
	const char *call;
	CUresult res;
	int err;

	res = cu->cuMemGetInfo(&free_bytes, &total_bytes);
	if (res != CUDA_SUCCESS)
		return cu_refuse(cu, res, cu_errno(res), "cuMemGetInfo", why, why_len);
	if (pool->bytes > free_bytes)
		return kvpd_refuse(why, why_len, -ENOMEM,
				   "a pool of %zu MiB does not fit: the device has %zu MiB free of %zu",
				   pool->bytes >> 20, free_bytes >> 20, total_bytes >> 20);
	pool->handles = calloc(pool->npieces, sizeof(*pool->handles));
	if (!pool->handles)
		return kvpd_refuse(why, why_len, -ENOMEM, "out of memory");
	res = cu->cuMemAddressReserve(&pool->ptr, pool->bytes, 0, 0, 0);
	if (res != CUDA_SUCCESS) {
		err = cu_refuse(cu, res, cu_errno(res), "cuMemAddressReserve", why, why_len);
		goto free_handles;
	}
	err = map_pieces(pool, why, why_len);
	if (err)
		goto free_address;

	/* A new mapping is not even accessible from its own device until granted. */
	call = "cuMemSetAccess";
	res = cu->cuMemSetAccess(pool->ptr, pool->bytes, &access, 1);
	if (res == CUDA_SUCCESS) {
		call = "cuMemsetD8";
		res = cu->cuMemsetD8(pool->ptr, 0, pool->bytes);
	}
	/* The memset may still run: clients may map the pool as soon as this returns. */
	if (res == CUDA_SUCCESS) {
		call = "cuCtxSynchronize";
		res = cu->cuCtxSynchronize();
	}
	if (res != CUDA_SUCCESS) {
		err = cu_refuse(cu, res, cu_errno(res), call, why, why_len);
		goto unmap;
	}
	return 0;

unmap:
	drop_pieces(pool, pool->npieces);
free_address:
	cu->cuMemAddressFree(pool->ptr, pool->bytes);
free_handles:
	free(pool->handles);
	pool->handles = NULL;
	return err;
}

static int cuda_pool_init(struct kvpd_kv_layout *l, uint32_t device, void **mem, char *why,
			  size_t why_len)
{
	struct cuda_pool *pool;
	CUmemAllocationProp prop;
	size_t gran = 0;
	CUcontext popped;
	CUresult res;
	int err;

	l->mem_fd = -1;
	if (!l->total_bytes)
		return kvpd_refuse(why, why_len, -EINVAL, "a cuda pool needs KV memory (kv_heads, head_dim)");
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return kvpd_refuse(why, why_len, -ENOMEM, "out of memory");
	err = cu_open(&pool->cu, why, why_len);
	if (err)
		goto free_pool;
	err = check_device(pool, device, why, why_len);
	if (err)
		goto close_lib;

	res = pool->cu.cuDevicePrimaryCtxRetain(&pool->ctx, pool->dev);
	if (res != CUDA_SUCCESS) {
		err = cu_refuse(&pool->cu, res, cu_errno(res), "cuDevicePrimaryCtxRetain", why, why_len);
		goto close_lib;
	}
	/* Pushed, not set: the calling thread's own current context is left as it was. */
	res = pool->cu.cuCtxPushCurrent(pool->ctx);
	if (res != CUDA_SUCCESS) {
		err = cu_refuse(&pool->cu, res, cu_errno(res), "cuCtxPushCurrent", why, why_len);
		goto release_ctx;
	}

	prop = cuda_alloc_prop(pool->dev);
	res = pool->cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (res != CUDA_SUCCESS) {
		err = cu_refuse(&pool->cu, res, cu_errno(res), "cuMemGetAllocationGranularity", why,
				why_len);
		goto pop_ctx;
	}
	if (!gran) {
		err = kvpd_refuse(why, why_len, -EIO, "cuMemGetAllocationGranularity gave 0");
		goto pop_ctx;
	}
	pool->bytes = (l->total_bytes + gran - 1) / gran * gran;
	if (pool->bytes < l->total_bytes) {
		err = kvpd_refuse(why, why_len, -EOVERFLOW, "a pool of %zu bytes is too large",
			     l->total_bytes);
		goto pop_ctx;
	}
	pool->piece_bytes = PIECE_MAX_BYTES / gran * gran;
	if (!pool->piece_bytes)
		pool->piece_bytes = gran;
	if (pool->piece_bytes > pool->bytes)
		pool->piece_bytes = pool->bytes;
	pool->npieces = (uint32_t)((pool->bytes + pool->piece_bytes - 1) / pool->piece_bytes);
	err = map_memory(pool, why, why_len);
	if (err)
		goto pop_ctx;
	err = cuda_lanes_init(pool);
	if (err) {
		kvpd_refuse(why, why_len, err, "pthread_mutex_init failed");
		goto unmap_memory;
	}
	err = cuda_copy_init(pool, why, why_len);
	if (err)
		goto fini_lanes;
	err = cuda_attend_init(pool, why, why_len);
	if (err)
		goto fini_copy;
	pool->cu.cuCtxPopCurrent(&popped);

	l->map_bytes = pool->bytes;
	l->page_bytes = gran;
	l->num_pieces = pool->npieces;
	l->piece_bytes = pool->piece_bytes;
	*mem = pool;
	return 0;

fini_copy:
	cuda_copy_fini(pool);
fini_lanes:
	cuda_lanes_fini(pool);
unmap_memory:
	drop_pieces(pool, pool->npieces);
	pool->cu.cuMemAddressFree(pool->ptr, pool->bytes);
	free(pool->handles);
pop_ctx:
	pool->cu.cuCtxPopCurrent(&popped);
release_ctx:
	pool->cu.cuDevicePrimaryCtxRelease(pool->dev);
close_lib:
	dlclose(pool->cu.lib);
free_pool:
	free(pool);
	return err;
}

static void cuda_pool_fini(const struct kvpd_kv_layout *l, void *mem)
{
	struct cuda_pool *pool = mem;
	const struct cu_api *cu;
	CUcontext popped;

	(void)l;
	if (!pool)
		return;
	cu = &pool->cu;
	/*
	 * Clients that still map the memory keep it alive through their own
	 * handles: the release here drops only the daemon's reference.
	 */
	if (cu->cuCtxPushCurrent(pool->ctx) == CUDA_SUCCESS) {
		cuda_attend_fini(pool);
		cuda_copy_fini(pool);
		cuda_lanes_fini(pool);
		drop_pieces(pool, pool->npieces);
		cu->cuMemAddressFree(pool->ptr, pool->bytes);
		cu->cuCtxPopCurrent(&popped);
	}
	free(pool->handles);
	cu->cuDevicePrimaryCtxRelease(pool->dev);
	dlclose(cu->lib);
	free(pool);
}

/* A descriptor per piece, in order; on a failure none is left open. */
static int cuda_export_fds(const struct kvpd_kv_layout *l, void *mem, int *fds, unsigned max)
{
	struct cuda_pool *pool = mem;
	const struct cu_api *cu = &pool->cu;
	CUcontext popped;
	CUresult res;
	uint32_t i;

	(void)l;
	if (max < pool->npieces)
		return -ENOSPC;
	res = cu->cuCtxPushCurrent(pool->ctx);
	if (res != CUDA_SUCCESS)
		return cu_errno(res);
	for (i = 0; i < pool->npieces; i++) {
		int fd = -1;

		res = cu->cuMemExportToShareableHandle(&fd, pool->handles[i],
						       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (res != CUDA_SUCCESS)
			break;
		/* The driver does not ask for CLOEXEC, and nothing the daemon execs may hold it. */
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		fds[i] = fd;
	}
	cu->cuCtxPopCurrent(&popped);
	if (res != CUDA_SUCCESS) {
		while (i--)
			close(fds[i]);
		return cu_errno(res);
	}
	return (int)pool->npieces;
}

static int cuda_run_task(struct kvpd_job *job, uint32_t task)
{
	if (job->type == KVPD_JOB_ATTEND)
		return cuda_attend_task(job);
	if (job->type == KVPD_JOB_TIER_DOWN || job->type == KVPD_JOB_TIER_UP ||
	    job->type == KVPD_JOB_COPY)
		return cuda_tier_task(job, task);
	return cuda_copy_task(job, task);
}

static const struct kvpd_backend_ops cuda_backend = {
	.name = "cuda",
	.pool_init = cuda_pool_init,
	.pool_fini = cuda_pool_fini,
	.export_fds = cuda_export_fds,
	.mem_kind = KVP_MEM_CUDA,
	.whole_attend = true,
	.run_task = cuda_run_task,
};

/*
 * The plugin's only exports (it is built with hidden visibility): the daemon's
 * entry, and the ABI that plugin.c names when the entry refuses its own.
 */
#define EXPORT __attribute__((visibility("default")))
EXPORT kvpd_backend_entry_fn kvpool_cuda_backend;
EXPORT extern const uint32_t kvpool_cuda_backend_abi;

const uint32_t kvpool_cuda_backend_abi = KVPD_BACKEND_ABI;

const struct kvpd_backend_ops *kvpool_cuda_backend(uint32_t abi)
{
	/* Only the layouts of this ABI's structs are known here; say nothing rather than guess. */
	return abi == KVPD_BACKEND_ABI ? &cuda_backend : NULL;
}
