/* SPDX-License-Identifier: MIT */
/*
 * Hybrid pools: bundles ordered full, rswa, others; passes until L is stable,
 * one pass only for two bundles led by full/rswa; groups dropped in order.
 */
#include "helpers.h"

#define T12 "1 2 3 4 5 6 7 8 9 10 11 12"

static void test_full_swa(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(24, 2, "full swa:4");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6] [7,8,9,10,11,12]");
	COMPUTED(a, 12); /* all hashed; swa skipped 9 -> positions 3..0 of group 1 */
	EXPECT_TABLE(a, "[1,2,3,4,5,6] [0,0,0,0,11,12]");
	EXPECT_FREEQ("[13,14,15,16,17,18,19,20,21,22,23,10,9,8,7]");
	EXPECT_STATS("free=15 used=8 cached=12");
	b = seq_new(T12 " 13");
	EXPECT_HIT(b, "12 [1,2,3,4,5,6] [0,0,0,0,11,12]");
	EXPECT_EVICT(1, 12); /* swa misses position 5: its run is 3,4 */
	EXPECT_HIT(b, "10 [1,2,3,4,5] [0,0,0,10,11]");
	EXPECT_EVICT(1, 3); /* full stops at 2 blocks; swa with M=4 finds 0,1 */
	EXPECT_HIT(b, "4 [1,2] [7,8]");
	/* g0: cdiv(13,2)=7 - 2 = 5; g1: 7 - 2 = 5, + 7,8 free */
	EXPECT_COST(b, 9, 0, true, 12);
	EXPECT_ALLOC(b, 9, 0, true, "ok [13,14,15,16,17] [18,19,20,21,22]");
	EXPECT_TABLE(b, "[1,2,13,14,15,16,17] [7,8,18,19,20,21,22]");
	EXPECT_FREEQ("[23,10,9]");
	EXPECT_INFO(b, "tokens=13 prompt=13 prefix=13 computed=4 slots=13 held=14 running=1");
	COMPUTED(b, 13); /* hash positions 2..5 in both groups, then drop swa 4..0 */
	EXPECT_TABLE(b, "[1,2,13,14,15,16,17] [0,0,0,0,0,21,22]");
	EXPECT_FREEQ("[23,10,9,20,19,18,8,7]");
	EXPECT_STATS("free=8 used=15 cached=18");
}

static void test_full_chunked_one_pass(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(16, 2, "full chunked:3");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6] [7,8,9,10,11,12]");
	COMPUTED(a, 12); /* chunked skipped 12: all of group 1 goes to the tail */
	EXPECT_TABLE(a, "[1,2,3,4,5,6] [0,0,0,0,0,0]");
	EXPECT_FREEQ("[13,14,15,12,11,10,9,8,7]");
	EXPECT_EVICT(2, 10, 11); /* group 1 positions 3, 4 */
	b = seq_new("1 2 3 4 5 6 7 8 9 10 11");
	/* full: L=10; chunked M=10: start 9/2=4, block 4 misses -> 8. A second pass
	 * (chunked M=8: start 6/2=3, block 3 misses -> 6) is not made. */
	EXPECT_HIT(b, "8 [1,2,3,4] [0,0,0,0]");
	/* g0: 6-4 = 2; g1: sb = 6/2 = 3, 6 - max(3,4) = 2 */
	EXPECT_COST(b, 3, 0, true, 4);
	EXPECT_ALLOC(b, 3, 0, true, "ok [13,14] [15,12]");
	EXPECT_TABLE(b, "[1,2,3,4,13,14] [0,0,0,0,15,12]");
	EXPECT_STATS("free=5 used=10 cached=9");
}

static void test_chunked_full_order(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	/* the full bundle is still first although it is group 1 */
	pool_new(16, 2, "chunked:3 full");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6] [7,8,9,10,11,12]");
	COMPUTED(a, 12);
	EXPECT_TABLE(a, "[0,0,0,0,0,0] [7,8,9,10,11,12]");
	EXPECT_FREEQ("[13,14,15,6,5,4,3,2,1]");
	EXPECT_EVICT(2, 4, 5);
	b = seq_new("1 2 3 4 5 6 7 8 9 10 11");
	EXPECT_HIT(b, "8 [0,0,0,0] [7,8,9,10]");
}

static void test_swa_swa(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(20, 2, "swa:4 swa:8"); /* runs of 2 and 4 blocks */
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6] [7,8,9,10,11,12]");
	COMPUTED(a, 12); /* skipped 9 -> sb 4 in group 0; skipped 5 -> sb 2 in group 1 */
	EXPECT_TABLE(a, "[0,0,0,0,5,6] [0,0,9,10,11,12]");
	EXPECT_FREEQ("[13,14,15,16,17,18,19,4,3,2,1,8,7]");
	b = seq_new(T12);
	EXPECT_HIT(b, "10 [0,0,0,4,5] [0,8,9,10,11]");
	/* group 1 now has no run of 4 below 5; 0,1 reach block 0 -> L=4; the second
	 * pass recomputes group 0 with M=4 -> blocks 0,1 */
	EXPECT_EVICT(1, 9);
	EXPECT_HIT(b, "4 [1,2] [7,8]");
	/* per group: cdiv(12,2)=6 - 2 = 4, + 2 free hit blocks */
	EXPECT_COST(b, 8, 0, true, 12);
	EXPECT_ALLOC(b, 8, 0, true, "ok [13,14,15,16] [17,18,19,4]");
	EXPECT_TABLE(b, "[1,2,13,14,15,16] [7,8,17,18,19,4]");
	EXPECT_FREEQ("[3]");
	EXPECT_STATS("free=1 used=18 cached=10");
	COMPUTED(b, 12); /* hash 2..5 in both, drop 3..0 (14,13,2,1) then 1..0 (8,7) */
	EXPECT_TABLE(b, "[0,0,0,0,15,16] [0,0,17,18,19,4]");
	EXPECT_FREEQ("[3,14,13,2,1,8,7]");
	EXPECT_STATS("free=7 used=12 cached=18");
}

static void test_full_rswa(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(20, 2, "full rswa:4");
	a = seq_new("1 2 3 4 5 6 7 8"); /* P = 8 */
	seq_add(a, "9 10 11 12");
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6] [7,8,9,10,11,12]");
	COMPUTED(a, 12); /* full: 6 hashed; rswa: prefix blocks 7..10; gap [4,4) */
	EXPECT_STATS("free=7 used=12 cached=10");
	seq_add(a, "13 14 15 16");
	EXPECT_ALLOC(a, 4, 0, false, "ok [13,14] [15,16]");
	COMPUTED(a, 16); /* rswa gap [4, 12/2=6): 12, 11 before the head */
	EXPECT_TABLE(a, "[1,2,3,4,5,6,13,14] [7,8,9,10,0,0,15,16]");
	EXPECT_FREEQ("[12,11,17,18,19]");
	EXPECT_STATS("free=5 used=14 cached=12");
	b = seq_new("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17");
	EXPECT_HIT(b, "8 [1,2,3,4] [7,8,9,10]"); /* full 16, rswa stops at 8 */
	EXPECT_EVICT(1, 3);
	EXPECT_HIT(b, "4 [1,2] [7,8]");
	EXPECT_COST(b, 1, 0, true, 2);
	EXPECT_ALLOC(b, 1, 0, true, "ok [12] [11]");
	EXPECT_TABLE(b, "[1,2,12] [7,8,11]");
}

static void test_full_swa_chunked_fixed_point(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(24, 2, "full swa:4 chunked:4");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false,
		     "ok [1,2,3,4,5,6] [7,8,9,10,11,12] [13,14,15,16,17,18]");
	COMPUTED(a, 12);
	EXPECT_TABLE(a, "[1,2,3,4,5,6] [0,0,0,0,11,12] [0,0,0,0,0,0]");
	EXPECT_FREEQ("[19,20,21,22,23,10,9,8,7,18,17,16,15,14,13]");
	EXPECT_STATS("free=15 used=8 cached=18");
	EXPECT_EVICT(2, 17, 9); /* chunked position 4, swa position 2 */
	b = seq_new(T12);
	/* pass 1: full 10, swa 10, chunked (start 8) 8; pass 2: swa M=8 -> run 0,1 -> 4,
	 * chunked 4; pass 3: unchanged */
	EXPECT_HIT(b, "4 [1,2] [7,8] [0,0]");
	/* need 3: g0 1; g1 1 + 7,8 free; g2 sb = 4/2 = 2, 3 - 2 = 1 */
	EXPECT_COST(b, 2, 0, true, 5);
	EXPECT_ALLOC(b, 2, 0, true, "ok [19] [20] [21]");
	EXPECT_TABLE(b, "[1,2,19] [7,8,20] [0,0,21]");
	EXPECT_FREEQ("[22,23,10,9,18,17,16,15,14,13]"); /* evicted 9, 17 stay in place */
}

static void test_drop_group_order(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new_ex(16, 2, "swa:4 chunked:4", "caching=off");
	a = seq_new("1 2 3 4 5 6 7 8");
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4] [5,6,7,8]");
	COMPUTED(a, 8); /* group 0 releases 2,1, then group 1 releases 8,7,6,5 */
	EXPECT_TABLE(a, "[0,0,3,4] [0,0,0,0]");
	EXPECT_FREEQ("[8,7,6,5,2,1,9,10,11,12,13,14,15]");
	SEQ_FREE(a);
	EXPECT_FREEQ("[4,3,8,7,6,5,2,1,9,10,11,12,13,14,15]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_full_swa),
		T(test_full_chunked_one_pass),
		T(test_chunked_full_order),
		T(test_swa_swa),
		T(test_full_rswa),
		T(test_full_swa_chunked_fixed_point),
		T(test_drop_group_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
