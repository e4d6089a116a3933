/* SPDX-License-Identifier: MIT */
/*
 * cuda_probe: what this machine (a sandbox, maybe: gVisor) lets the GPU pool
 * do, checked with the driver alone, before kvpool's own code is trusted
 * with it:
 *   - passing a descriptor between processes (SCM_RIGHTS);
 *   - cuMemCreate with a POSIX fd handle, and cuMemExportToShareableHandle;
 *   - another process importing that fd (cuMemImportFromShareableHandle),
 *     mapping it and reading the exporter's bytes: what engines' mappings are;
 *   - cuMemHostRegister of ordinary host memory.
 * One line each, "probe: WHAT: ok" or "probe: WHAT: refused: WHY". Exit 0 when
 * export and import work, 3 when the sandbox refuses them (the mapping tests
 * then skip, quoting this output), 1 when there is no usable GPU at all.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "cuda_alloc.h"

#define CU_STR_(sym) #sym
#define CU_STR(sym) CU_STR_(sym)
#define PROBE_CALLS(X)                                                                          \
	X(cuInit) X(cuGetErrorString) X(cuDriverGetVersion) X(cuDeviceGet) X(cuDeviceGetName)   \
	X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuMemGetInfo)                          \
	X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease)                         \
	X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)                       \
	X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)  \
	X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemHostRegister) X(cuMemHostUnregister)

struct probe_cu {
#define PROBE_PTR(fn) __typeof__(&fn) fn;
	PROBE_CALLS(PROBE_PTR)
#undef PROBE_PTR
};

static struct probe_cu cu;
static char text[256];

static const char *why(CUresult res, const char *call)
{
	const char *s = NULL;

	if (cu.cuGetErrorString(res, &s) != CUDA_SUCCESS || !s)
		s = "unknown error";
	snprintf(text, sizeof(text), "%s: %s (CUresult %d)", call, s, (int)res);
	return text;
}

#define TRY(call, args)                                                                          \
	do {                                                                                     \
		CUresult res_ = cu.call args;                                                    \
		if (res_ != CUDA_SUCCESS)                                                        \
			return why(res_, #call);                                                 \
	} while (0)

static int load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		printf("probe: driver: refused: libcuda.so.1 not loadable: %s\n", dlerror());
		return -1;
	}
#define PROBE_SYM(fn)                                                                             \
	*(void **)&cu.fn = dlsym(lib, CU_STR(fn));                                               \
	if (!cu.fn) {                                                                            \
		printf("probe: driver: refused: libcuda.so.1 has no " CU_STR(fn) "\n");          \
		return -1;                                                                       \
	}
	PROBE_CALLS(PROBE_SYM)
#undef PROBE_SYM
	return 0;
}

static const char *device_context(CUdevice *dev)
{
	CUcontext ctx;

	TRY(cuInit, (0));
	TRY(cuDeviceGet, (dev, 0));
	TRY(cuDevicePrimaryCtxRetain, (&ctx, *dev));
	TRY(cuCtxSetCurrent, (ctx));
	return NULL;
}

/* Maps @h (of @bytes) into a new range, readable and writable: its address in *at. */
static const char *map(CUdevice dev, CUmemGenericAllocationHandle h, size_t bytes, CUdeviceptr *at)
{
	CUmemAccessDesc access = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
				   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

	TRY(cuMemAddressReserve, (at, bytes, 0, 0, 0));
	TRY(cuMemMap, (*at, bytes, 0, h, 0));
	TRY(cuMemSetAccess, (*at, bytes, &access, 1));
	return NULL;
}

static int send_fd(int sock, int fd, size_t bytes)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl = { 0 };
	struct iovec iov = { .iov_base = &bytes, .iov_len = sizeof(bytes) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
	return sendmsg(sock, &mh, 0) == (ssize_t)sizeof(bytes) ? 0 : -errno;
}

static int recv_fd(int sock, size_t *bytes)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = bytes, .iov_len = sizeof(*bytes) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	int fd = -1;

	if (recvmsg(sock, &mh, 0) != (ssize_t)sizeof(*bytes))
		return -EPROTO;
	cm = CMSG_FIRSTHDR(&mh);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -EPROTO;
	memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	return fd;
}

/* The importer, a process that never ran CUDA before the fd came. */
static const char *import_and_read(int sock)
{
	CUmemGenericAllocationHandle h;
	CUdevice dev;
	CUdeviceptr at;
	size_t bytes;
	uint32_t word = 0;
	const char *err;
	int fd = recv_fd(sock, &bytes);

	if (fd < 0)
		return "no descriptor came over the socket";
	err = device_context(&dev);
	if (err)
		return err;
	TRY(cuMemImportFromShareableHandle, (&h, (void *)(uintptr_t)fd,
					     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	err = map(dev, h, bytes, &at);
	if (err)
		return err;
	TRY(cuMemcpyDtoH, (&word, at + bytes - sizeof(word), sizeof(word)));
	if (word != 0x6b76706cu)
		return "the imported memory does not hold the exporter's bytes";
	TRY(cuMemUnmap, (at, bytes));
	TRY(cuMemAddressFree, (at, bytes));
	TRY(cuMemRelease, (h));
	return NULL;
}

/* The exporter: memory created, written, exported and sent; the importer's verdict. */
static const char *export_to(int sock, pid_t child, CUdevice dev, int *status)
{
	CUmemAllocationProp prop = cuda_alloc_prop(dev);
	CUmemGenericAllocationHandle h;
	CUdeviceptr at;
	size_t gran = 0;
	uint32_t word = 0x6b76706cu;
	const char *err;
	int fd = -1;

	TRY(cuMemGetAllocationGranularity, (&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	TRY(cuMemCreate, (&h, gran, &prop, 0));
	err = map(dev, h, gran, &at);
	if (err)
		return err;
	TRY(cuMemcpyHtoD, (at + gran - sizeof(word), &word, sizeof(word)));
	TRY(cuMemExportToShareableHandle, (&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	printf("probe: cuMemCreate (POSIX fd handle) and export: ok\n");
	if (send_fd(sock, fd, gran))
		return "sendmsg of the exported descriptor failed";
	close(fd);
	waitpid(child, status, 0);
	return NULL;
}

static void probe_fd_passing(void)
{
	int sv[2], fd;
	size_t bytes = 1;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv)) {
		printf("probe: fd passing (SCM_RIGHTS): refused: socketpair: %s\n", strerror(errno));
		return;
	}
	fd = send_fd(sv[0], STDOUT_FILENO, bytes) ? -1 : recv_fd(sv[1], &bytes);
	printf("probe: fd passing (SCM_RIGHTS): %s\n", fd >= 0 ? "ok" : "refused");
	if (fd >= 0)
		close(fd);
	close(sv[0]);
	close(sv[1]);
}

static void probe_host_register(void)
{
	size_t bytes = 1u << 21;
	void *buf = aligned_alloc(4096, bytes);
	CUresult res;

	if (!buf)
		return;
	res = cu.cuMemHostRegister(buf, bytes, 0);
	printf("probe: cuMemHostRegister: %s\n", res == CUDA_SUCCESS ? "ok" : why(res, "refused"));
	if (res == CUDA_SUCCESS)
		cu.cuMemHostUnregister(buf);
	free(buf);
}

int main(void)
{
	char name[128] = "?";
	int version = 0, status = 0, sv[2];
	size_t free_bytes = 0, total = 0;
	const char *err;
	CUdevice dev;
	pid_t child;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (load())
		return 1;
	probe_fd_passing();
	/* The importer forks first: CUDA does not survive a fork. */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv))
		return 1;
	child = fork();
	if (child == 0) {
		close(sv[0]);
		err = import_and_read(sv[1]);
		printf("probe: import in another process, mapped and read: %s%s\n",
		       err ? "refused: " : "ok", err ? err : "");
		_exit(err ? 3 : 0);
	}
	close(sv[1]);
	err = device_context(&dev);
	if (err) {
		printf("probe: device: refused: %s\n", err);
		return 1;
	}
	cu.cuDriverGetVersion(&version);
	cu.cuDeviceGetName(name, sizeof(name), dev);
	cu.cuMemGetInfo(&free_bytes, &total);
	printf("probe: device 0: %s, driver CUDA %d.%d, %zu MiB free of %zu\n", name,
	       version / 1000, version % 1000 / 10, free_bytes >> 20, total >> 20);
	probe_host_register();
	err = export_to(sv[0], child, dev, &status);
	if (err) {
		printf("probe: cuMemCreate (POSIX fd handle) and export: refused: %s\n", err);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		return 3;
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}
