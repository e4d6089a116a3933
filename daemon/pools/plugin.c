/* SPDX-License-Identifier: MIT */
/*
 * Finding and loading the CUDA backend plugin. Every refusal names its cause:
 * an admin asking for a cuda pool reads it in the client's error, and "not
 * found where" or "which ABI" is what they need to fix it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pools/plugin.h"

/* The Makefile passes $(LIBDIR)/kvpool; builds that do not (the fuzzers') get the default's. */
#ifndef KVPOOL_PLUGIN_DIR
#define KVPOOL_PLUGIN_DIR "/usr/local/lib/kvpool"
#endif

#define NOT_AVAILABLE "cuda backend not available: "

/*
 * gpu/ of the build tree that the running kvpoold was built in: build/bin/kvpoold
 * (or build/<variant>/bin/kvpoold) finds build/gpu/ (build/<variant>/gpu/)
 * beside its own directory. /proc/self/exe is already free of symlinks, so its
 * directory's parent by name is its parent on disk.
 */
static int build_tree_dir(char *dir, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", dir, len - sizeof("/gpu"));
	char *slash;

	if (n < 0)
		return -errno;
	if ((size_t)n == len - sizeof("/gpu"))
		return -ENAMETOOLONG; /* readlink cuts silently */
	dir[n] = '\0';
	for (int up = 0; up < 2; up++) {
		slash = strrchr(dir, '/');
		if (!slash)
			return -ENOENT;
		*slash = '\0';
	}
	strcat(dir, "/gpu");
	return 0;
}

/* Puts the plugin's file into p->path: the first directory that has it. */
static int find_plugin(struct kvpd_plugin *p, const char *plugin_dir, char *why, size_t why_len)
{
	char build_dir[PATH_MAX];
	const char *dirs[2];
	unsigned ndirs = 0;

	if (plugin_dir) {
		dirs[ndirs++] = plugin_dir;
	} else {
		dirs[ndirs++] = KVPOOL_PLUGIN_DIR;
		if (build_tree_dir(build_dir, sizeof(build_dir)) == 0)
			dirs[ndirs++] = build_dir;
	}
	for (unsigned i = 0; i < ndirs; i++) {
		int n = snprintf(p->path, sizeof(p->path), "%s/" KVPD_CUDA_PLUGIN_FILE, dirs[i]);

		if (n < 0 || (size_t)n >= sizeof(p->path))
			return kvpd_refuse(why, why_len, -ENAMETOOLONG,
				      NOT_AVAILABLE "plugin path too long: %s", dirs[i]);
		if (access(p->path, F_OK) == 0)
			return 0;
		/* Not there is the one failure that moves on: any other hides a file that is. */
		if (errno != ENOENT && errno != ENOTDIR) {
			int err = errno;

			return kvpd_refuse(why, why_len, -err, NOT_AVAILABLE "%s: %s", p->path,
				      strerror(err));
		}
	}
	p->path[0] = '\0';
	if (ndirs == 1)
		return kvpd_refuse(why, why_len, -ENOENT,
			      NOT_AVAILABLE KVPD_CUDA_PLUGIN_FILE " not found in %s", dirs[0]);
	return kvpd_refuse(why, why_len, -ENOENT,
		      NOT_AVAILABLE KVPD_CUDA_PLUGIN_FILE " not found in %s or %s", dirs[0],
		      dirs[1]);
}

const char *kvpd_plugin_install_dir(void)
{
	return KVPOOL_PLUGIN_DIR;
}

int kvpd_plugin_load(struct kvpd_plugin *p, const char *plugin_dir, char *why, size_t why_len)
{
	const struct kvpd_backend_ops *ops;
	kvpd_backend_entry_fn *entry;
	const uint32_t *abi;
	int err;

	if (p->ops)
		return 0;
	err = find_plugin(p, plugin_dir, why, why_len);
	if (err)
		return err;
	/* NOW: a plugin missing a symbol fails here, with dlerror's name for it, not mid-request. */
	p->handle = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
	if (!p->handle)
		return kvpd_refuse(why, why_len, -ELIBBAD, NOT_AVAILABLE "%s", dlerror());

	entry = (kvpd_backend_entry_fn *)dlsym(p->handle, KVPD_CUDA_PLUGIN_ENTRY);
	if (!entry) {
		err = kvpd_refuse(why, why_len, -ELIBBAD,
			     NOT_AVAILABLE KVPD_CUDA_PLUGIN_FILE " has no " KVPD_CUDA_PLUGIN_ENTRY "()");
		goto close_handle;
	}
	ops = entry(KVPD_BACKEND_ABI);
	if (!ops) {
		abi = dlsym(p->handle, KVPD_CUDA_PLUGIN_ABI_SYM);
		if (abi)
			err = kvpd_refuse(why, why_len, -ELIBBAD,
				     NOT_AVAILABLE KVPD_CUDA_PLUGIN_FILE
				     " built for backend ABI %u, kvpoold has %u",
				     *abi, KVPD_BACKEND_ABI);
		else
			err = kvpd_refuse(why, why_len, -ELIBBAD,
				     NOT_AVAILABLE KVPD_CUDA_PLUGIN_FILE
				     " built for another backend ABI, kvpoold has %u",
				     KVPD_BACKEND_ABI);
		goto close_handle;
	}
	p->ops = ops;
	return 0;

close_handle:
	dlclose(p->handle);
	p->handle = NULL;
	return err;
}

void kvpd_plugin_unload(struct kvpd_plugin *p)
{
	if (p->handle)
		dlclose(p->handle);
	p->handle = NULL;
	p->ops = NULL;
	p->path[0] = '\0';
}
