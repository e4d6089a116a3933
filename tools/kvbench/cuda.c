/* SPDX-License-Identifier: MIT */
/* The driver calls of kvbench attend --backend cuda (cuda.h). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

int bench_cu_open(struct bench_cu *cu, char *why, size_t why_len)
{
	int dev = 0, res;

	memset(cu, 0, sizeof(*cu));
	cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu->lib) {
		snprintf(why, why_len, "libcuda.so.1 not loadable: %s", dlerror());
		return -ENODEV;
	}
#define BENCH_CU_SYM(field, sym, type)                                                       \
	*(void **)&cu->field = dlsym(cu->lib, sym);                                          \
	if (!cu->field) {                                                                    \
		snprintf(why, why_len, "libcuda.so.1 has no %s: driver too old", sym);          \
		return -ENODEV;                                                              \
	}
	BENCH_CU_CALLS(BENCH_CU_SYM)
#undef BENCH_CU_SYM
	*(void **)&cu->elapsed = dlsym(cu->lib, "cuEventElapsedTime_v2");
	if (!cu->elapsed)
		*(void **)&cu->elapsed = dlsym(cu->lib, "cuEventElapsedTime");
	if (!cu->elapsed) {
		snprintf(why, why_len, "libcuda.so.1 has no cuEventElapsedTime: driver too old");
		return -ENODEV;
	}
	res = cu->init(0);
	if (!res)
		res = cu->device_get(&dev, 0);
	if (!res)
		res = cu->device_name(cu->device, sizeof(cu->device), dev);
	if (!res)
		res = cu->ctx_retain(&cu->ctx, dev);
	if (!res)
		res = cu->ctx_push(cu->ctx);
	if (res) {
		snprintf(why, why_len, "CUDA device 0: %s", bench_cu_text(cu, res));
		return -ENODEV;
	}
	return 0;
}

const char *bench_cu_text(const struct bench_cu *cu, int res)
{
	const char *s = NULL;

	if (!cu->error_string || cu->error_string(res, &s) || !s)
		return "unknown CUDA error";
	return s;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_cu_copy_gbps(const struct bench_cu *cu, size_t bytes, unsigned reps, int *res)
{
	bench_cuptr a = 0, b = 0;
	void *start = NULL, *end = NULL;
	double gbps[32];
	unsigned n = 0;

	if (reps > 32)
		reps = 32;
	*res = cu->alloc(&a, bytes);
	if (!*res)
		*res = cu->alloc(&b, bytes);
	if (!*res)
		*res = cu->event_create(&start, 0);
	if (!*res)
		*res = cu->event_create(&end, 0);
	/* one copy to warm up, then @reps timed */
	for (unsigned i = 0; !*res && i <= reps; i++) {
		float ms = 0;

		*res = cu->event_record(start, NULL);
		if (!*res)
			*res = cu->dtod_async(b, a, bytes, NULL);
		if (!*res)
			*res = cu->event_record(end, NULL);
		if (!*res)
			*res = cu->event_sync(end);
		if (!*res)
			*res = cu->elapsed(&ms, start, end);
		if (!*res && i && ms > 0)
			gbps[n++] = 2.0 * (double)bytes / ((double)ms * 1e6);
	}
	if (end)
		cu->event_destroy(end);
	if (start)
		cu->event_destroy(start);
	if (b)
		cu->free(b);
	if (a)
		cu->free(a);
	if (*res || !n)
		return 0;
	qsort(gbps, n, sizeof(gbps[0]), by_value);
	return gbps[n / 2];
}
