/* SPDX-License-Identifier: MIT */
/*
 * Cyclic W: a ring of R = cdiv(W-1+S, bs) blocks per sequence; ring blocks
 * never hashed, nothing dropped before free. Hits come from window snapshots
 * (the last min(W-1, p) tokens before a committed boundary p, copied out of
 * the ring into cached blocks); with snapshots off, a pool with a cyclic
 * group has no hits.
 */
#include "helpers.h"

static void test_cyclic_ring_size(void **state)
{
	(void)state;
	pool_new(8, 4, "cyclic:1"); /* cdiv(0+1, 4) = 1 */
	assert_int_equal(kvc_group_ring_blocks(P, 0), 1);
	pool_teardown(NULL);
	pool_new_ex(8, 2, "full cyclic:5", "max_step_tokens=2"); /* cdiv(4+2, 2) = 3 */
	assert_int_equal(kvc_group_ring_blocks(P, 0), 0);
	assert_int_equal(kvc_group_ring_blocks(P, 1), 3);
	pool_teardown(NULL);
	pool_new_ex(8, 2, "cyclic:4", "max_step_tokens=2"); /* cdiv(3+2, 2) = 3 */
	assert_int_equal(kvc_group_ring_blocks(P, 0), 3);
}

static void test_cyclic_ring(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new_ex(12, 2, "cyclic:4", "max_step_tokens=4"); /* R = cdiv(3+4, 2) = 4 */
	assert_int_equal(kvc_group_ring_blocks(P, 0), 4);
	a = seq_new("1 2 3 4 5 6 7 8 9 10 11 12");
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2]");
	COMPUTED(a, 4);
	EXPECT_ALLOC(a, 4, 0, false, "ok [3,4]");
	COMPUTED(a, 8);
	EXPECT_COST(a, 4, 0, false, 0); /* cdiv(12,2)=6 capped at 4 */
	EXPECT_ALLOC(a, 4, 0, false, "ok []");
	EXPECT_COPIES("made [] hit []");
	/*
	 * The prompt's end, 12: tokens 9..11 (W-1 = 3) are blocks 4 and 5, at
	 * ring positions 0 and 1; two new blocks get their copies, cached.
	 */
	COMPUTED(a, 12);
	EXPECT_COPIES("made [1>5,2>6] hit []");
	EXPECT_TABLE(a, "[1,2,3,4]"); /* nothing dropped, the ring unhashed */
	EXPECT_STATS("free=7 used=4 cached=2");
	EXPECT_INFO(a, "tokens=12 prompt=12 prefix=12 computed=12 slots=12 held=4 running=1");
	EXPECT_SNAPSHOTS("held=2 made=2 hit=0 evicted=0 skipped=0");
	b = seq_new("1 2 3 4 5 6 7 8 9 10 11 12 13");
	EXPECT_HIT(b, "12 [5,6]");
	/* A ring of 4 new blocks (7 slots > R), 5 and 6 taken first, copied to positions 0 and 1. */
	EXPECT_COST(b, 1, 0, true, 6);
	EXPECT_ALLOC(b, 1, 0, true, "ok [7,8,9,10]");
	EXPECT_COPIES("made [] hit [5>7,6>8]");
	assert_int_equal(last_res.hit_tokens, 12);
	EXPECT_INFO(b, "tokens=13 prompt=13 prefix=13 computed=12 slots=13 held=4 running=1");
	EXPECT_SNAPSHOTS("held=2 made=2 hit=2 evicted=0 skipped=0");
	EXPECT_FREEQ("[11,5,6]");
	SEQ_FREE(a);
	EXPECT_FREEQ("[4,3,2,1,11,5,6]");
}

static void test_cyclic_step_limit(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new_ex(12, 2, "cyclic:4", "max_step_tokens=4");
	a = seq_new("1 2 3 4 5 6 7 8 9 10");
	EXPECT_ALLOC(a, 5, 0, false, "invalid"); /* new + lookahead > S */
	EXPECT_ALLOC(a, 4, 1, false, "invalid");
	EXPECT_COST(a, 5, 0, false, -EINVAL);
	EXPECT_COST(a, 3, 2, false, -EINVAL);
	EXPECT_INFO(a, "tokens=10 prompt=10 prefix=10 computed=0 slots=0 held=0 running=0");
	EXPECT_COST(a, 3, 1, false, 2);
	EXPECT_ALLOC(a, 3, 1, false, "ok [1,2]");
	EXPECT_FREEQ("[3,4,5,6,7,8,9,10,11]");
}

static void test_cyclic_with_full(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new_ex(16, 2, "full cyclic:4", "max_step_tokens=4 snapshots=off"); /* R = 4 */
	a = seq_new("1 2 3 4 5 6 7 8");
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2] [3,4]");
	COMPUTED(a, 4); /* the full group still hashes */
	EXPECT_STATS("free=11 used=4 cached=2");
	EXPECT_ALLOC(a, 4, 0, false, "ok [5,6] [7,8]");
	COMPUTED(a, 8);
	EXPECT_STATS("free=7 used=8 cached=4");
	seq_add(a, "9 10");
	EXPECT_ALLOC(a, 2, 0, false, "ok [9] []"); /* 5 blocks; the ring stays at 4 */
	b = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(b, "0 [] []");
	EXPECT_COST(b, 4, 0, true, 4);
	EXPECT_ALLOC(b, 4, 0, true, "ok [10,11] [12,13]");
	assert_int_equal(last_res.hit_tokens, 0);
	EXPECT_STATS("free=2 used=13 cached=4");
	/* group 0: 9 before the head, 6,5,2,1 at the tail; group 1: 8,7,4,3 before the head */
	SEQ_FREE(a);
	EXPECT_FREEQ("[8,7,4,3,9,14,15,6,5,2,1]");
}

/* Full + cyclic: the pool's hit is the largest boundary both allow, the snapshot copied into b's ring. */
static void test_cyclic_with_full_hits(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new_ex(24, 2, "full cyclic:4", "max_step_tokens=4"); /* R = 4 */
	a = seq_new("1 2 3 4 5 6 7 8");
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2] [3,4]");
	COMPUTED(a, 4);
	EXPECT_COPIES("made [] hit []");
	EXPECT_ALLOC(a, 4, 0, false, "ok [5,6] [7,8]");
	COMPUTED(a, 8); /* the prompt's end: blocks 2 and 3 at ring positions 2 and 3 */
	EXPECT_COPIES("made [7>9,8>10] hit []");
	EXPECT_STATS("free=15 used=8 cached=6");
	seq_add(a, "9 10");
	EXPECT_ALLOC(a, 2, 0, false, "ok [11] []");
	b = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(b, "8 [1,2,5,6] [9,10]");
	/* full: 2 new; cyclic: a ring of 4 new, and 9 and 10 leave the queue */
	EXPECT_COST(b, 4, 0, true, 8);
	EXPECT_ALLOC(b, 4, 0, true, "ok [12,13] [14,15,16,17]");
	EXPECT_COPIES("made [] hit [9>16,10>17]");
	assert_int_equal(last_res.hit_tokens, 8);
	EXPECT_TABLE(b, "[1,2,5,6,12,13] [14,15,16,17]");
	EXPECT_STATS("free=8 used=15 cached=6");
	/* a's full blocks stay with b; 11 and its ring go before the head */
	SEQ_FREE(a);
	EXPECT_FREEQ("[8,7,4,3,11,18,19,20,21,22,23,9,10]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_cyclic_ring_size),
		T(test_cyclic_ring),
		T(test_cyclic_step_limit),
		T(test_cyclic_with_full),
		T(test_cyclic_with_full_hits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
