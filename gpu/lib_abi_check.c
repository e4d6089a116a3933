/* SPDX-License-Identifier: MIT */
/*
 * libkvpool declares the few CUDA driver types it needs itself (it builds
 * without the toolkit, lib/cuda_import.h); this file, built with the plugin,
 * holds them to cuda.h's, so that a toolkit that changed one fails the build.
 */
#include <stddef.h>

#include <cuda.h>

#include "../lib/cuda_import.h"

_Static_assert(sizeof(struct kvp_cu_access) == sizeof(CUmemAccessDesc), "CUmemAccessDesc");
_Static_assert(offsetof(struct kvp_cu_access, id) == offsetof(CUmemAccessDesc, location.id),
	       "CUmemAccessDesc.location.id");
_Static_assert(offsetof(struct kvp_cu_access, flags) == offsetof(CUmemAccessDesc, flags),
	       "CUmemAccessDesc.flags");
_Static_assert(KVP_CU_HANDLE_POSIX_FD == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	       "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
_Static_assert(KVP_CU_LOCATION_DEVICE == CU_MEM_LOCATION_TYPE_DEVICE,
	       "CU_MEM_LOCATION_TYPE_DEVICE");
_Static_assert(KVP_CU_ACCESS_READWRITE == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	       "CU_MEM_ACCESS_FLAGS_PROT_READWRITE");
_Static_assert(sizeof(CUdeviceptr) == sizeof(unsigned long long), "CUdeviceptr");
_Static_assert(sizeof(CUmemGenericAllocationHandle) == sizeof(unsigned long long),
	       "CUmemGenericAllocationHandle");
_Static_assert(sizeof(CUdevice) == sizeof(int), "CUdevice");
_Static_assert(sizeof(CUresult) == sizeof(int), "CUresult");
