/* SPDX-License-Identifier: MIT */
/*
 * fuzz_session's pieces: reading its input (integers that run out read as
 * zero, so that every byte string is a script) and writing requests into a
 * client's memory (fuzz_requests.c).
 */
#ifndef KVPOOL_FUZZ_SESSION_H
#define KVPOOL_FUZZ_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_daemon.h"

struct input {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t u8(struct input *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint16_t u16(struct input *in)
{
	uint16_t lo = u8(in);

	return (uint16_t)(lo | u8(in) << 8);
}

static inline uint32_t u32(struct input *in)
{
	uint32_t lo = u16(in);

	return lo | (uint32_t)u16(in) << 16;
}

static inline void take(struct input *in, void *dst, size_t len)
{
	size_t n = len < in->n ? len : in->n;

	memcpy(dst, in->p, n);
	memset((uint8_t *)dst + n, 0, len - n);
	in->p += n;
	in->n -= n;
}

/* At the SQ tail, which moves (and is published). */
void fz_push_sqe(struct fz_client *fc, const struct kvp_sqe *sqe);
/* FZ_A_SQE: an SQE from its compact form. */
void fz_compact_sqe(struct fz_client *fc, struct input *in);
/* The arena's builders (its size must not be 0): FZ_A_ATTEND, FZ_A_POOL_PARAMS, */
void fz_build_attend(struct fz_client *fc, struct input *in);
void fz_build_pool_params(struct fz_client *fc, struct input *in);
/* and FZ_A_ARENA_BYTES, FZ_A_ARENA_FILL, FZ_A_TOKENS (@op). */
void fz_arena_action(struct fz_client *fc, unsigned op, struct input *in);

#endif
