/* SPDX-License-Identifier: MIT */
/* The pause between two looks of a spinning thread (the event loop, a worker). */
#ifndef KVPOOLD_SPIN_H
#define KVPOOLD_SPIN_H

static inline void kvpd_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

#endif
