/* SPDX-License-Identifier: MIT */
/* The probes' semaphores: in .probes, where tracers find and increment them. */
#include "probes.h"

#define KVPD_DEFINE_SEMAPHORE(name) \
	unsigned short kvpool_##name##_semaphore __attribute__((section(".probes"), used));
KVPD_PROBES(KVPD_DEFINE_SEMAPHORE)
