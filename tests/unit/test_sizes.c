/* SPDX-License-Identifier: MIT */
/*
 * The checked sizes of daemon/session/sizes.c, each at the values where the plain
 * product wraps: ABI 1 computed an ATTEND entry's bytes as count * q_heads *
 * q_row with q_heads any u32, and a wrapped size passed the arena check.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>

#include "../../daemon/session/sizes.h"

static void test_attend_q_bytes(void **state)
{
	size_t out;

	(void)state;
	assert_int_equal(kvpd_attend_q_bytes(16, 32, 256, &out), 0);
	assert_int_equal(out, 16 * 32 * 256);
	/* 2^32 * 2^32 * 512 wraps to 0 in 64 bits: a zero-byte range would pass any bounds check. */
	assert_int_equal(kvpd_attend_q_bytes(UINT32_MAX, UINT32_MAX, 512, &out), -EINVAL);
	assert_int_equal(kvpd_attend_q_bytes(1u << 16, 1u << 24, 1u << 24, &out), -EINVAL);
	/* 2^16 * 2^24 * 2^23 = 2^63: fits. */
	assert_int_equal(kvpd_attend_q_bytes(1u << 16, 1u << 24, 1ull << 23, &out), 0);
	assert_int_equal(out, 1ull << 63);
	assert_int_equal(kvpd_attend_q_bytes(1u << 16, 1u << 24, 1ull << 24, &out), -EINVAL);
	assert_int_equal(kvpd_attend_q_bytes(0, UINT32_MAX, SIZE_MAX, &out), 0);
	assert_int_equal(out, 0);
}

static void test_kv_io_bytes(void **state)
{
	uint64_t out;

	(void)state;
	assert_int_equal(kvpd_kv_io_bytes(100, 8, 256, &out), 0);
	assert_int_equal(out, 2ull * 100 * 8 * 256);
	/* 2^31 * 2^31 * 2^1 = 2^63, doubled for K and V: 2^64 wraps. */
	assert_int_equal(kvpd_kv_io_bytes(1u << 31, 1u << 31, 2, &out), -EINVAL);
	assert_int_equal(kvpd_kv_io_bytes(1u << 31, 1u << 31, 1, &out), 0);
	assert_int_equal(out, 1ull << 63);
	assert_int_equal(kvpd_kv_io_bytes(UINT32_MAX, UINT32_MAX, UINT32_MAX, &out), -EINVAL);
}

static void test_open_and_word_bytes(void **state)
{
	uint64_t out;

	(void)state;
	assert_int_equal(kvpd_open_bytes(10, 3, &out), 0);
	assert_int_equal(out, 43);
	assert_int_equal(kvpd_open_bytes(UINT32_MAX, UINT32_MAX, &out), 0);
	assert_int_equal(out, 4ull * UINT32_MAX + UINT32_MAX);
	assert_int_equal(kvpd_words_bytes(1ull << 61, &out), 0);
	assert_int_equal(out, 1ull << 63);
	assert_int_equal(kvpd_words_bytes(1ull << 62, &out), -EINVAL);
	assert_int_equal(kvpd_words_bytes(UINT64_MAX, &out), -EINVAL);
}

static void test_rings_bytes(void **state)
{
	uint64_t cqes, end;

	(void)state;
	assert_int_equal(kvpd_rings_bytes(4096, 64, 64, 128, 32, &cqes, &end), 0);
	assert_int_equal(cqes, 4096 + 64 * 64);
	assert_int_equal(end, 4096 + 64 * 64 + 128 * 32);
	assert_int_equal(kvpd_rings_bytes(UINT64_MAX - 10, 1, 64, 1, 32, &cqes, &end), -EINVAL);
	assert_int_equal(kvpd_rings_bytes(0, UINT32_MAX, SIZE_MAX, 1, 32, &cqes, &end), -EINVAL);
	assert_int_equal(kvpd_rings_bytes(0, 1, 64, UINT32_MAX, SIZE_MAX, &cqes, &end), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attend_q_bytes),
		cmocka_unit_test(test_kv_io_bytes),
		cmocka_unit_test(test_open_and_word_bytes),
		cmocka_unit_test(test_rings_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
