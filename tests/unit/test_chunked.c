/* SPDX-License-Identifier: MIT */
/*
 * Chunked local attention C: skipped(n) = (n/C)*C; a hit is nulls up to block
 * ((M/C)*C)/bs, then cached blocks from there to the first miss.
 */
#include "helpers.h"

#define T12 "1 2 3 4 5 6 7 8 9 10 11 12"

static void test_chunked_drop(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(16, 2, "chunked:4");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 3); /* skipped 0 */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	COMPUTED(a, 4); /* hash 1,2, then skipped 4 -> positions 1,0 (release 2,1) */
	EXPECT_TABLE(a, "[0,0,3,4,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,2,1]");
	COMPUTED(a, 7); /* skipped 4 */
	EXPECT_TABLE(a, "[0,0,3,4,5,6]");
	COMPUTED(a, 8); /* skipped 8 -> positions 3,2 */
	EXPECT_TABLE(a, "[0,0,0,0,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,2,1,4,3]");
	EXPECT_STATS("free=13 used=2 cached=4");
}

static void test_chunked_drop_unaligned(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new_ex(16, 2, "chunked:3", "caching=off");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 2); /* skipped 0 */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	COMPUTED(a, 3); /* skipped 3 -> sb 1 */
	EXPECT_TABLE(a, "[0,2,3,4,5,6]");
	EXPECT_FREEQ("[1,7,8,9,10,11,12,13,14,15]");
	COMPUTED(a, 5); /* skipped 3: block 1 (tokens 2,3) still needed */
	EXPECT_TABLE(a, "[0,2,3,4,5,6]");
	COMPUTED(a, 6); /* skipped 6 -> sb 3: positions 2,1 */
	EXPECT_TABLE(a, "[0,0,0,4,5,6]");
	EXPECT_FREEQ("[3,2,1,7,8,9,10,11,12,13,14,15]");
	COMPUTED(a, 11); /* skipped 9 -> sb 4 */
	EXPECT_TABLE(a, "[0,0,0,0,5,6]");
	EXPECT_FREEQ("[4,3,2,1,7,8,9,10,11,12,13,14,15]");
	EXPECT_STATS("free=13 used=2 cached=0");
}

static void test_chunked_hit(void **state)
{
	struct kvc_seq *a, *b12;

	(void)state;
	pool_new(16, 2, "chunked:4");
	/* nothing cached: blocks before the current chunk are nulls, and count */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 9 10"), "8 [0,0,0,0]"); /* M 9 -> 8 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6"), "4 [0,0]");              /* M 5 -> 4 */
	EXPECT_HIT(seq_new("1 2 3 4 5"), "4 [0,0]");                /* M 4 -> 4 */
	EXPECT_HIT(seq_new("1 2 3 4"), "0 []");                     /* M 3 -> 0 */
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 12); /* all six hashed, then all dropped (skipped 12) */
	EXPECT_TABLE(a, "[0,0,0,0,0,0]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,6,5,4,3,2,1]");
	b12 = seq_new(T12);
	EXPECT_HIT(b12, "10 [0,0,0,0,5]");                       /* M 11: start 8, block 4 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 9 10 11"), "10 [0,0,0,0,5]"); /* M 10 */
	EXPECT_HIT(seq_new(T12 " 13"), "12 [0,0,0,0,0,0]");     /* M 12: start 12 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7"), "6 [0,0,3]");       /* M 6: start 4 */
	EXPECT_HIT(seq_new("1 2 3"), "2 [1]");                   /* M 2: start 0 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 0 10 0 0"), "8 [0,0,0,0]"); /* block 4 differs */
	EXPECT_EVICT(1, 5);
	EXPECT_HIT(b12, "8 [0,0,0,0]");
}

static void test_chunked_alloc_all_null_hit(void **state)
{
	struct kvc_seq *b, *c;

	(void)state;
	pool_new(16, 2, "chunked:4");
	b = seq_new("1 2 3 4 5 6 7 8 9 10");
	/* h 8, sb = 8/2 = 4, cdiv(10,2)=5 - max(4,4) = 1 */
	EXPECT_COST(b, 2, 0, true, 1);
	EXPECT_ALLOC(b, 2, 0, true, "ok [1]");
	assert_int_equal(last_res.hit_tokens, 8);
	EXPECT_TABLE(b, "[0,0,0,0,1]");
	EXPECT_INFO(b, "tokens=10 prompt=10 prefix=10 computed=8 slots=10 held=1 running=1");
	EXPECT_FREEQ("[2,3,4,5,6,7,8,9,10,11,12,13,14,15]");
	COMPUTED(b, 10); /* position 4 (tokens 1..10 chained) is hashed */
	EXPECT_STATS("free=14 used=1 cached=1");
	c = seq_new("1 2 3 4 5 6 7 8 9 10 11");
	EXPECT_HIT(c, "10 [0,0,0,0,1]");
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 0 10 11"), "8 [0,0,0,0]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_chunked_drop),
		T(test_chunked_drop_unaligned),
		T(test_chunked_hit),
		T(test_chunked_alloc_all_null_hit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
