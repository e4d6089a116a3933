/* SPDX-License-Identifier: MIT */
/*
 * kvp_map_pool's half for cuda pools: the pieces come as POSIX fds (CUDA VMM
 * shareable handles) and are imported and mapped back to back into one
 * device address range, in the primary context of the pool's device (the one
 * torch and the CUDA runtime use), readable and writable there. The driver is
 * loaded with dlopen here and only here: libkvpool has no CUDA dependency, and
 * the few driver types below are pinned against cuda.h by gpu/lib_abi_check.c.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_import.h"

#define CU_OK 0
#define CU_ERROR_OUT_OF_MEMORY 2
#define CU_ERROR_NO_DEVICE 100
#define CU_ERROR_INVALID_DEVICE 101
#define CU_ERROR_NOT_SUPPORTED 801

/* What each call is named in libcuda.so.1: the versions cuda.h picks. */
#define KVP_CU_CALLS(X)                                                                    \
	X(init, "cuInit", int (*)(unsigned))                                               \
	X(error_string, "cuGetErrorString", int (*)(int, const char **))                    \
	X(device_get, "cuDeviceGet", int (*)(int *, int))                                  \
	X(ctx_retain, "cuDevicePrimaryCtxRetain", int (*)(void **, int))                   \
	X(ctx_release, "cuDevicePrimaryCtxRelease_v2", int (*)(int))                       \
	X(ctx_push, "cuCtxPushCurrent_v2", int (*)(void *))                                \
	X(ctx_pop, "cuCtxPopCurrent_v2", int (*)(void **))                                 \
	X(reserve, "cuMemAddressReserve",                                                  \
	  int (*)(unsigned long long *, size_t, size_t, unsigned long long, unsigned long long)) \
	X(address_free, "cuMemAddressFree", int (*)(unsigned long long, size_t))           \
	X(import, "cuMemImportFromShareableHandle", int (*)(unsigned long long *, void *, int)) \
	X(map, "cuMemMap",                                                                 \
	  int (*)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long)) \
	X(unmap, "cuMemUnmap", int (*)(unsigned long long, size_t))                        \
	X(release, "cuMemRelease", int (*)(unsigned long long))                            \
	X(set_access, "cuMemSetAccess",                                                    \
	  int (*)(unsigned long long, size_t, const struct kvp_cu_access *, size_t))

struct kvp_cuda_map {
	void *lib;
	int device;
	void *ctx;
	unsigned long long base;
	size_t bytes;
	size_t mapped;       /* bytes mapped from base so far */
#define KVP_CU_FIELD(field, sym, type) __typeof__(type) field;
	KVP_CU_CALLS(KVP_CU_FIELD)
#undef KVP_CU_FIELD
};

static int cu_errno(int res)
{
	switch (res) {
	case CU_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CU_ERROR_NO_DEVICE:
	case CU_ERROR_INVALID_DEVICE:
		return -ENODEV;
	case CU_ERROR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

/* "cuMemMap failed: out of memory (CUresult 2)" into @why. */
static int cu_refuse(struct kvp_cuda_map *m, int res, const char *call, char *why, size_t len)
{
	const char *s = NULL;

	if (m->error_string(res, &s) != CU_OK || !s)
		s = "unknown error";
	snprintf(why, len, "%s failed: %s (CUresult %d)", call, s, res);
	return cu_errno(res);
}

/* NODELETE: the driver's threads outlive any one mapping of ours. */
static int load_driver(struct kvp_cuda_map *m, char *why, size_t len)
{
	m->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!m->lib) {
		snprintf(why, len, "libcuda.so.1 not loadable: %s", dlerror());
		return -ENODEV;
	}
#define KVP_CU_SYM(field, sym, type)                                                       \
	m->field = (type)dlsym(m->lib, sym);                                               \
	if (!m->field) {                                                                   \
		snprintf(why, len, "libcuda.so.1 has no " sym ": driver too old");        \
		dlclose(m->lib);                                                           \
		return -ENOSYS;                                                            \
	}
	KVP_CU_CALLS(KVP_CU_SYM)
#undef KVP_CU_SYM
	return 0;
}

/* Undoes what kvp_cuda_import did, as far as it got. */
void kvp_cuda_unmap(struct kvp_cuda_map *m)
{
	void *popped;

	if (!m)
		return;
	if (m->ctx && m->ctx_push(m->ctx) == CU_OK) {
		if (m->mapped)
			m->unmap(m->base, m->mapped);
		if (m->base)
			m->address_free(m->base, m->bytes);
		m->ctx_pop(&popped);
	}
	if (m->ctx)
		m->ctx_release(m->device);
	if (m->lib)
		dlclose(m->lib);
	free(m);
}

/* Maps each piece after the one before; the mapping holds the memory, so the handle goes. */
static int map_pieces(struct kvp_cuda_map *m, const int *fds, const uint64_t *sizes,
		      uint32_t n, char *why, size_t len)
{
	for (uint32_t p = 0; p < n; p++) {
		unsigned long long handle;
		int res = m->import(&handle, (void *)(intptr_t)fds[p], KVP_CU_HANDLE_POSIX_FD);

		if (res != CU_OK)
			return cu_refuse(m, res, "cuMemImportFromShareableHandle", why, len);
		res = m->map(m->base + m->mapped, sizes[p], 0, handle, 0);
		m->release(handle);
		if (res != CU_OK)
			return cu_refuse(m, res, "cuMemMap", why, len);
		m->mapped += sizes[p];
	}
	return 0;
}

int kvp_cuda_import(uint32_t device, const int *fds, const uint64_t *sizes, uint32_t n,
		    struct kvp_cuda_map **out, unsigned long long *base, char *why, size_t len)
{
	struct kvp_cu_access access = { .type = KVP_CU_LOCATION_DEVICE, .id = (int)device,
					 .flags = KVP_CU_ACCESS_READWRITE };
	struct kvp_cuda_map *m = calloc(1, sizeof(*m));
	void *popped;
	int res, ret;

	if (!m)
		return -ENOMEM;
	m->device = -1;
	for (uint32_t p = 0; p < n; p++)
		m->bytes += sizes[p];
	ret = load_driver(m, why, len);
	if (ret) {
		m->lib = NULL;
		goto err;
	}
	res = m->init(0);
	if (res == CU_OK)
		res = m->device_get(&m->device, (int)device);
	if (res != CU_OK) {
		ret = cu_refuse(m, res, "cuInit", why, len);
		goto err;
	}
	res = m->ctx_retain(&m->ctx, m->device);
	if (res != CU_OK) {
		m->ctx = NULL;
		ret = cu_refuse(m, res, "cuDevicePrimaryCtxRetain", why, len);
		goto err;
	}
	res = m->ctx_push(m->ctx);
	if (res != CU_OK) {
		ret = cu_refuse(m, res, "cuCtxPushCurrent", why, len);
		goto err;
	}
	res = m->reserve(&m->base, m->bytes, 0, 0, 0);
	if (res != CU_OK) {
		m->base = 0;
		ret = cu_refuse(m, res, "cuMemAddressReserve", why, len);
	} else {
		ret = map_pieces(m, fds, sizes, n, why, len);
	}
	if (!ret) {
		res = m->set_access(m->base, m->bytes, &access, 1);
		if (res != CU_OK)
			ret = cu_refuse(m, res, "cuMemSetAccess", why, len);
	}
	m->ctx_pop(&popped);
	if (ret)
		goto err;
	*out = m;
	*base = m->base;
	return 0;

err:
	kvp_cuda_unmap(m);
	return ret;
}
