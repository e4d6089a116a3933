/* SPDX-License-Identifier: MIT */
/*
 * Sliding window W: skipped(n) = max(0, n-W+1); hits need cdiv(W-1, bs)
 * consecutive cached blocks, or a shorter run that reaches block 0.
 */
#include "helpers.h"

#define T12 "1 2 3 4 5 6 7 8 9 10 11 12"

static void test_swa_skipped_and_drop(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(16, 2, "swa:4");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 3); /* skipped 0 */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	EXPECT_STATS("free=9 used=6 cached=1");
	COMPUTED(a, 4); /* skipped 1: still inside block 0 */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	COMPUTED(a, 5); /* skipped 2 -> position 0 goes; hashed -> tail */
	EXPECT_TABLE(a, "[0,2,3,4,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,1]");
	COMPUTED(a, 6); /* skipped 3: nothing more */
	EXPECT_TABLE(a, "[0,2,3,4,5,6]");
	COMPUTED(a, 7); /* skipped 4 -> position 1; stops at the null position 0 */
	EXPECT_TABLE(a, "[0,0,3,4,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,1,2]");
	COMPUTED(a, 12); /* hash 3..5 first, then skipped 9 -> positions 3,2 (release 4,3) */
	EXPECT_TABLE(a, "[0,0,0,0,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,1,2,4,3]");
	EXPECT_STATS("free=13 used=2 cached=6");
	EXPECT_INFO(a, "tokens=12 prompt=12 prefix=12 computed=12 slots=12 held=2 running=1");
	SEQ_FREE(a);
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,1,2,4,3,6,5]");
}

static void test_swa_drop_unhashed(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new_ex(16, 2, "swa:4", "caching=off");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 12); /* positions 3,2,1,0 released in that order, before the head */
	EXPECT_TABLE(a, "[0,0,0,0,5,6]");
	EXPECT_FREEQ("[4,3,2,1,7,8,9,10,11,12,13,14,15]");
	EXPECT_STATS("free=13 used=2 cached=0");
	EXPECT_ALLOC(a, 2, 0, false, "ok [4]"); /* cdiv(14,2)=7 positions, nulls included */
	EXPECT_TABLE(a, "[0,0,0,0,5,6,4]");
}

static void test_swa_window_bs4(void **state)
{
	struct kvc_seq *a;

	(void)state;
	/* W 4, bs 4: skipped(n) = n-3, one block suffices for a hit */
	pool_new(10, 4, "swa:4");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3]");
	COMPUTED(a, 6); /* skipped 3 */
	EXPECT_TABLE(a, "[1,2,3]");
	COMPUTED(a, 7); /* skipped 4 */
	EXPECT_TABLE(a, "[0,2,3]");
	COMPUTED(a, 10); /* skipped 7 */
	EXPECT_TABLE(a, "[0,2,3]");
	COMPUTED(a, 11); /* skipped 8 */
	EXPECT_TABLE(a, "[0,0,3]");
	EXPECT_FREEQ("[4,5,6,7,8,9,1,2]");
	EXPECT_STATS("free=8 used=1 cached=2"); /* block 3 ends at 12 > 11 */
	EXPECT_HIT(seq_new(T12 " 13"), "8 [0,2]");  /* M 12: 3 unhashed, 2 is a run */
	COMPUTED(a, 12); /* hashes 3; skipped 9 -> nothing more */
	EXPECT_TABLE(a, "[0,0,3]");
	EXPECT_HIT(seq_new(T12 " 13"), "12 [0,0,3]"); /* block 2 alone is a run */
	EXPECT_HIT(seq_new(T12), "8 [0,2]");          /* M 11: block 1 (free, cached) */
	EXPECT_EVICT(1, 2);
	EXPECT_HIT(seq_new(T12), "4 [1]");
}

/* W 4, bs 2: a's 12 tokens all hashed; table [0,0,0,0,5,6]; 4,3,2,1 free */
static struct kvc_seq *swa4_cached(void)
{
	struct kvc_seq *a = seq_new(T12);

	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 12);
	EXPECT_TABLE(a, "[0,0,0,0,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,4,3,2,1]");
	return a;
}

static void test_swa_hit(void **state)
{
	struct kvc_seq *b13;

	(void)state;
	pool_new(16, 2, "swa:4"); /* run of cdiv(3,2) = 2 blocks */
	swa4_cached();
	b13 = seq_new(T12 " 13");
	EXPECT_HIT(b13, "12 [0,0,0,0,5,6]");        /* M 12: scan from block 5 */
	EXPECT_HIT(seq_new(T12), "10 [0,0,0,4,5]"); /* M 11: from block 4; 4 is free */
	EXPECT_HIT(seq_new("1 2 3 4"), "2 [1]");    /* run of 1 reaching block 0 */
	EXPECT_HIT(seq_new("1 2 3"), "2 [1]");
	EXPECT_HIT(seq_new("1 2"), "0 []");
	EXPECT_EVICT(1, 5); /* position 4 */
	EXPECT_HIT(b13, "8 [0,0,3,4]");
	EXPECT_EVICT(1, 3); /* position 2 */
	EXPECT_HIT(b13, "4 [1,2]");
	EXPECT_EVICT(1, 1); /* position 0: runs of 1 at 5, 3, 1 only */
	EXPECT_HIT(b13, "0 []");
}

static void test_swa_hit_short_run_at_start(void **state)
{
	struct kvc_seq *a, *b13;

	(void)state;
	pool_new(16, 2, "swa:6"); /* run of cdiv(5,2) = 3 blocks; skipped(12) = 7 */
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 12);
	EXPECT_TABLE(a, "[0,0,0,4,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,3,2,1]");
	b13 = seq_new(T12 " 13");
	EXPECT_HIT(b13, "12 [0,0,0,4,5,6]");
	EXPECT_EVICT(1, 4); /* position 3 */
	EXPECT_HIT(b13, "6 [1,2,3]");
	EXPECT_EVICT(1, 3); /* position 2: 0,1 is a run of 2 < 3 reaching block 0 */
	EXPECT_HIT(b13, "4 [1,2]");
	EXPECT_EVICT(1, 2);
	EXPECT_HIT(b13, "2 [1]");
	EXPECT_EVICT(1, 1); /* only 4,5 cached: a run of 2 not reaching block 0 */
	EXPECT_HIT(b13, "0 []");
}

static void test_swa_alloc_hit(void **state)
{
	struct kvc_seq *a, *b, *c;

	(void)state;
	pool_new(16, 2, "swa:4");
	a = swa4_cached();
	b = seq_new(T12 " 13 14");
	EXPECT_HIT(b, "12 [0,0,0,0,5,6]");
	/* sb = skipped(12)/2 = 4; cdiv(14,2)=7 - max(4,6) = 1; 5,6 are in use */
	EXPECT_COST(b, 2, 0, true, 1);
	EXPECT_ALLOC(b, 2, 0, true, "ok [7]");
	EXPECT_TABLE(b, "[0,0,0,0,5,6,7]");
	EXPECT_INFO(b, "tokens=14 prompt=14 prefix=14 computed=12 slots=14 held=3 running=1");
	SEQ_FREE(a); /* 6,5 still held by b */
	EXPECT_FREEQ("[8,9,10,11,12,13,14,15,4,3,2,1]");
	SEQ_FREE(b); /* 7 unhashed before the head; 6,5 at the tail */
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,4,3,2,1,6,5]");
	c = seq_new(T12 " 13 14");
	EXPECT_HIT(c, "12 [0,0,0,0,5,6]");
	EXPECT_COST(c, 2, 0, true, 3);
	EXPECT_ALLOC(c, 2, 0, true, "ok [7]");
	EXPECT_FREEQ("[8,9,10,11,12,13,14,15,4,3,2,1]");
	COMPUTED(c, 14); /* hash block 7; skipped 11 -> positions 4 (5): released at the tail */
	EXPECT_TABLE(c, "[0,0,0,0,0,6,7]");
	EXPECT_FREEQ("[8,9,10,11,12,13,14,15,4,3,2,1,5]");
	EXPECT_STATS("free=13 used=2 cached=7");
}

static void test_swa_publish_alloc_drops_at_alloc(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new_ex(16, 2, "swa:4", "publish=alloc");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]");
	EXPECT_STATS("free=11 used=4 cached=4");
	COMPUTED(a, 8); /* only sets the count */
	EXPECT_TABLE(a, "[1,2,3,4]");
	/* drop for total 8 (skipped 5: positions 1,0), then take cdiv(12,2)-4 = 2 */
	EXPECT_COST(a, 4, 0, false, 2);
	EXPECT_ALLOC(a, 4, 0, false, "ok [5,6]");
	EXPECT_TABLE(a, "[0,0,3,4,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,2,1]");
	EXPECT_STATS("free=11 used=4 cached=6");
}

static void test_swa_odd_windows(void **state)
{
	struct kvc_seq *a, *b12;

	(void)state;
	pool_new(16, 2, "swa:5"); /* skipped(n) = n-4; run of cdiv(4,2) = 2 blocks */
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 5); /* skipped 1 */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	COMPUTED(a, 6); /* skipped 2 */
	EXPECT_TABLE(a, "[0,2,3,4,5,6]");
	COMPUTED(a, 12); /* skipped 8: positions 3,2,1 */
	EXPECT_TABLE(a, "[0,0,0,0,5,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,1,4,3,2]");
	EXPECT_HIT(seq_new(T12 " 13"), "12 [0,0,0,0,5,6]");
	EXPECT_EVICT(1, 5);
	EXPECT_HIT(seq_new(T12 " 13"), "8 [0,0,3,4]");
	pool_teardown(NULL);

	pool_new(16, 2, "swa:3"); /* skipped(n) = n-2; run of cdiv(2,2) = 1 block */
	a = seq_new(T12);
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 12); /* skipped 10: positions 4..0 */
	EXPECT_TABLE(a, "[0,0,0,0,0,6]");
	EXPECT_FREEQ("[7,8,9,10,11,12,13,14,15,5,4,3,2,1]");
	EXPECT_HIT(seq_new(T12 " 13"), "12 [0,0,0,0,0,6]");
	b12 = seq_new(T12);
	EXPECT_HIT(b12, "10 [0,0,0,0,5]");
	/* sb = skipped(10)/2 = 4; cdiv(12,2)=6 - max(4,5) = 1, + free block 5 */
	EXPECT_COST(b12, 2, 0, true, 2);
	EXPECT_ALLOC(b12, 2, 0, true, "ok [7]");
	EXPECT_TABLE(b12, "[0,0,0,0,5,7]");
	EXPECT_FREEQ("[8,9,10,11,12,13,14,15,4,3,2,1]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_swa_skipped_and_drop),
		T(test_swa_drop_unhashed),
		T(test_swa_window_bs4),
		T(test_swa_hit),
		T(test_swa_hit_short_run_at_start),
		T(test_swa_odd_windows),
		T(test_swa_alloc_hit),
		T(test_swa_publish_alloc_drops_at_alloc),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
