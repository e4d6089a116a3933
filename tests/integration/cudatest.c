/* SPDX-License-Identifier: MIT */
/* The GPU tests' common part (cudatest.h). */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cudatest.h"
#include "harness.h"

struct cu cu;

static void skip(const char *test, const char *why)
{
	printf("%s: skipped: %s\n", test, why);
	exit(77);
}

void cuda_need_gpu(const char *test)
{
	char dir[PATH_MAX], why[PATH_MAX + 128];
	const char *s = NULL;
	int res, fds[2];
	ssize_t n;
	pid_t pid;

	if (!daemon_plugin_dir(dir, sizeof(dir))) {
		snprintf(why, sizeof(why),
			 "the CUDA plugin is not built (no %s/libkvpool_cuda.so: nvcc not found)", dir);
		skip(test, why);
	}
	cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu.lib) {
		snprintf(why, sizeof(why), "libcuda.so.1 not loadable: %s", dlerror());
		skip(test, why);
	}
	*(void **)&cu.init = dlsym(cu.lib, "cuInit");
	*(void **)&cu.error_string = dlsym(cu.lib, "cuGetErrorString");
	*(void **)&cu.device_get = dlsym(cu.lib, "cuDeviceGet");
	*(void **)&cu.ctx_retain = dlsym(cu.lib, "cuDevicePrimaryCtxRetain");
	*(void **)&cu.ctx_push = dlsym(cu.lib, "cuCtxPushCurrent_v2");
	*(void **)&cu.htod = dlsym(cu.lib, "cuMemcpyHtoD_v2");
	*(void **)&cu.dtoh = dlsym(cu.lib, "cuMemcpyDtoH_v2");
	CHECK(cu.init && cu.error_string && cu.device_get && cu.ctx_retain && cu.ctx_push &&
	      cu.htod && cu.dtoh);
	CHECK_EQ(pipe(fds), 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		res = cu.init(0);
		if (res) {
			cu.error_string(res, &s);
			dprintf(fds[1], "cuInit failed: %s (CUresult %d)", s ? s : "?", res);
		}
		_exit(0);
	}
	close(fds[1]);
	n = read(fds[0], why, sizeof(why) - 1);
	close(fds[0]);
	CHECK_EQ(wait_child(pid), 0);
	if (n > 0) {
		why[n] = '\0';
		skip(test, why);
	}
}

void cuda_need_mapping(const char *test)
{
	char dir[PATH_MAX], cmd[PATH_MAX + 32], out[2048], refused[2048] = "";
	size_t n = 0;
	FILE *p;
	int status;

	cuda_need_gpu(test);
	daemon_plugin_dir(dir, sizeof(dir));
	snprintf(cmd, sizeof(cmd), "%s/cuda_probe 2>&1", dir);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	while (fgets(out, sizeof(out), p)) {
		fputs(out, stdout);
		out[strcspn(out, "\n")] = '\0';
		if (strstr(out, ": refused") && n < sizeof(refused) - 1)
			n += (size_t)snprintf(refused + n, sizeof(refused) - n, "%s%s", n ? "; " : "", out);
	}
	status = pclose(p);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
		printf("%s: skipped: this machine refuses CUDA memory export or import (%s)\n", test,
		       refused);
		exit(77);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s: %s failed (status %d): %s\n", test, cmd, status, refused);
		exit(1);
	}
}

void cuda_use_device(void)
{
	void *ctx;
	int dev;

	CHECK_EQ(cu.init(0), 0);
	CHECK_EQ(cu.device_get(&dev, 0), 0);
	CHECK_EQ(cu.ctx_retain(&ctx, dev), 0);
	CHECK_EQ(cu.ctx_push(ctx), 0);
}
