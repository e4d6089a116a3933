/* SPDX-License-Identifier: MIT */
/* Checked sizes (sizes.h): __builtin_*_overflow, which the compiler turns into a flag test. */
#include <errno.h>

#include "session/sizes.h"

int kvpd_attend_q_bytes(uint32_t count, uint32_t q_heads, size_t q_row, size_t *out)
{
	size_t rows;

	if (__builtin_mul_overflow((size_t)count, (size_t)q_heads, &rows) ||
	    __builtin_mul_overflow(rows, q_row, out))
		return -EINVAL;
	return 0;
}

int kvpd_kv_io_bytes(uint32_t count, uint32_t kv_heads, size_t row_bytes, uint64_t *out)
{
	uint64_t rows;

	if (__builtin_mul_overflow((uint64_t)count, (uint64_t)kv_heads, &rows) ||
	    __builtin_mul_overflow(rows, (uint64_t)row_bytes, out) ||
	    __builtin_mul_overflow(*out, (uint64_t)2, out))
		return -EINVAL;
	return 0;
}

int kvpd_open_bytes(uint32_t n, uint32_t salt_len, uint64_t *out)
{
	uint64_t tokens;

	if (kvpd_words_bytes(n, &tokens) || __builtin_add_overflow(tokens, (uint64_t)salt_len, out))
		return -EINVAL;
	return 0;
}

int kvpd_words_bytes(uint64_t n, uint64_t *out)
{
	return __builtin_mul_overflow(n, (uint64_t)sizeof(uint32_t), out) ? -EINVAL : 0;
}

int kvpd_rings_bytes(uint64_t sqes_off, uint32_t sq_entries, size_t sqe_size,
		     uint32_t cq_entries, size_t cqe_size, uint64_t *cqes_off, uint64_t *end)
{
	uint64_t sq, cq;

	if (__builtin_mul_overflow((uint64_t)sq_entries, (uint64_t)sqe_size, &sq) ||
	    __builtin_add_overflow(sqes_off, sq, cqes_off) ||
	    __builtin_mul_overflow((uint64_t)cq_entries, (uint64_t)cqe_size, &cq) ||
	    __builtin_add_overflow(*cqes_off, cq, end))
		return -EINVAL;
	return 0;
}
