/* SPDX-License-Identifier: MIT */
/*
 * Sizes computed from what a client wrote (counts, heads, lengths), checked:
 * a product that wraps would pass the bounds check it feeds. Each returns 0
 * and the size, or -EINVAL when it does not fit in 64 bits (no arena holds
 * that many bytes, so no such request is valid).
 */
#ifndef KVPOOLD_SIZES_H
#define KVPOOLD_SIZES_H

#include <stddef.h>
#include <stdint.h>

/* ATTEND: an entry's queries (or outputs), @count x @q_heads rows of @q_row bytes. */
int kvpd_attend_q_bytes(uint32_t count, uint32_t q_heads, size_t q_row, size_t *out);
/* WRITE_KV / READ_KV: K then V of @count tokens, @kv_heads rows of @row_bytes each. */
int kvpd_kv_io_bytes(uint32_t count, uint32_t kv_heads, size_t row_bytes, uint64_t *out);
/* SEQ_OPEN: @n tokens, then @salt_len bytes of salt. */
int kvpd_open_bytes(uint32_t n, uint32_t salt_len, uint64_t *out);
/* Ids or tokens: @n 32-bit words (APPEND, EVICT, DUMP_FREEQ). */
int kvpd_words_bytes(uint64_t n, uint64_t *out);
/* Setup: SQ entries, CQ entries and the arena after the ring header (@sqes_off). */
int kvpd_rings_bytes(uint64_t sqes_off, uint32_t sq_entries, size_t sqe_size,
		     uint32_t cq_entries, size_t cqe_size, uint64_t *cqes_off, uint64_t *end);

#endif
