/* SPDX-License-Identifier: MIT */
/*
 * libkvpool internals: importing a cuda pool's pieces (cuda_import.c). The
 * driver's types this needs, declared here so that libkvpool builds without
 * the CUDA toolkit; gpu/lib_abi_check.c pins them against cuda.h.
 */
#ifndef LIBKVPOOL_CUDA_IMPORT_H
#define LIBKVPOOL_CUDA_IMPORT_H

#include <stddef.h>
#include <stdint.h>

/* CUmemAccessDesc: a CUmemLocation (type, id), then the access flags. */
struct kvp_cu_access {
	int type;  /* CU_MEM_LOCATION_TYPE_DEVICE */
	int id;    /* the device ordinal */
	int flags; /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
};

#define KVP_CU_HANDLE_POSIX_FD 1  /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
#define KVP_CU_LOCATION_DEVICE 1  /* CU_MEM_LOCATION_TYPE_DEVICE */
#define KVP_CU_ACCESS_READWRITE 3 /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */

struct kvp_cuda_map;

/*
 * Imports @n pieces (@fds, of @sizes bytes; the caller keeps and closes the
 * fds) on CUDA device @device and maps them back to back at *base, read-write
 * for that device. Returns 0, or -errno with the reason in @why.
 */
int kvp_cuda_import(uint32_t device, const int *fds, const uint64_t *sizes, uint32_t n,
		    struct kvp_cuda_map **out, unsigned long long *base, char *why, size_t len);
void kvp_cuda_unmap(struct kvp_cuda_map *m);

#endif
