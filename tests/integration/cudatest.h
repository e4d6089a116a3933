/* SPDX-License-Identifier: MIT */
/*
 * The GPU tests' common part (cudatest.c): whether this machine can run them,
 * and the few driver calls they make themselves, loaded with dlopen as
 * libkvpool loads them (the tests link no CUDA).
 */
#ifndef KVPOOL_TEST_CUDATEST_H
#define KVPOOL_TEST_CUDATEST_H

#include <stddef.h>

struct cu {
	void *lib;
	int (*init)(unsigned);
	int (*error_string)(int, const char **);
	int (*device_get)(int *, int);
	int (*ctx_retain)(void **, int);
	int (*ctx_push)(void *);
	int (*htod)(unsigned long long, const void *, size_t);
	int (*dtoh)(void *, unsigned long long, size_t);
};

extern struct cu cu;

/*
 * Exits 77, saying why, unless the CUDA plugin is built beside the daemon
 * under test, libcuda.so.1 loads (else dlerror's words) and cuInit succeeds
 * (else the driver's); fills in cu. cuInit runs in a child: CUDA does not
 * survive a fork, and the tests fork their clients after this.
 */
void cuda_need_gpu(const char *test);
/*
 * As cuda_need_gpu, and exits 77 quoting the probe (cuda_probe, beside
 * the plugin) when this machine refuses to export CUDA memory as a POSIX fd
 * or to import it in another process: a sandbox's limit, not kvpool's.
 */
void cuda_need_mapping(const char *test);
/* This process's current context: the device's primary one, where kvp_map_pool maps. */
void cuda_use_device(void);

#endif
