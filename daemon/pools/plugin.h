/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend lives in a plugin, libkvpool_cuda.so, loaded on demand:
 * kvpoold itself never links CUDA, so it runs (host pools only) where there is
 * no GPU, no driver and no plugin.
 */
#ifndef KVPOOLD_PLUGIN_H
#define KVPOOLD_PLUGIN_H

#include <limits.h>
#include <stddef.h>

#include "pools/backend.h"

#define KVPD_CUDA_PLUGIN_FILE "libkvpool_cuda.so"
/*
 * A const uint32_t the plugin exports beside its entry: the KVPD_BACKEND_ABI
 * it was built for, so that a mismatch can say which one it has.
 */
#define KVPD_CUDA_PLUGIN_ABI_SYM "kvpool_cuda_backend_abi"

struct kvpd_plugin {
	void *handle;                        /* dlopen's; NULL: not loaded */
	const struct kvpd_backend_ops *ops;  /* its backend; NULL: not loaded */
	char path[PATH_MAX];                 /* the file it was loaded from */
};

/*
 * Loads the CUDA plugin into @p; once loaded, later calls return 0 at once.
 * It is looked for in @plugin_dir when not NULL, and only there; else in
 * KVPOOL_PLUGIN_DIR (the install's), then in gpu/ of the build tree kvpoold
 * runs from. Returns 0 or -errno with the reason in @why (why_len bytes,
 * NUL-terminated, possibly cut): -ENOENT when no file is found, -ELIBBAD when
 * one does not load or is built for another backend ABI.
 */
int kvpd_plugin_load(struct kvpd_plugin *p, const char *plugin_dir, char *why, size_t why_len);
/* Where an installed kvpoold looks: $(LIBDIR)/kvpool of the build. */
const char *kvpd_plugin_install_dir(void);
/* Every pool of its backend must be finished first: their memory is its code's. */
void kvpd_plugin_unload(struct kvpd_plugin *p);

#endif
