/* SPDX-License-Identifier: MIT */
/* Full attention: nothing is ever skipped; hits run left to right to the first miss. */
#include "helpers.h"

#define T13 "1 2 3 4 5 6 7 8 9 10 11 12 13"

static void test_full_never_drops(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(12, 2, "full");
	a = seq_new("1*10");
	EXPECT_ALLOC(a, 10, 0, false, "ok [1,2,3,4,5]");
	COMPUTED(a, 1);
	COMPUTED(a, 9);
	COMPUTED(a, 10);
	EXPECT_TABLE(a, "[1,2,3,4,5]");
	EXPECT_FREEQ("[6,7,8,9,10,11]");
	EXPECT_STATS("free=6 used=5 cached=5"); /* equal tokens, distinct chained entries */
	seq_add(a, "1 1 1");
	EXPECT_ALLOC(a, 3, 0, false, "ok [6,7]");
	COMPUTED(a, 13);
	EXPECT_TABLE(a, "[1,2,3,4,5,6,7]");
	EXPECT_STATS("free=4 used=7 cached=6");
	EXPECT_INFO(a, "tokens=13 prompt=10 prefix=10 computed=13 slots=13 held=7 running=1");
}

/* bs 4, blocks 1,2,3 hold tokens 1..12 and are hashed, 4 holds token 13 */
static struct kvc_seq *cached_13(void)
{
	struct kvc_seq *a = seq_new(T13);

	EXPECT_ALLOC(a, 13, 0, false, "ok [1,2,3,4]");
	COMPUTED(a, 13);
	EXPECT_STATS("free=11 used=4 cached=3");
	return a;
}

static void test_full_hit_boundaries(void **state)
{
	struct kvc_seq *s13;

	(void)state;
	pool_new(16, 4, "full");
	cached_13();
	/* M = n - 1; blocks 0 .. M/4 - 1 can hit */
	EXPECT_HIT(seq_new(T13 " 99"), "12 [1,2,3]");           /* M 13 */
	s13 = seq_new(T13);
	EXPECT_HIT(s13, "12 [1,2,3]");                          /* M 12 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 9 10 11 12"), "8 [1,2]"); /* M 11 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 9"), "8 [1,2]");    /* M 8 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8"), "4 [1]");        /* M 7 */
	EXPECT_HIT(seq_new("1 2 3 4 5"), "4 [1]");              /* M 4 */
	EXPECT_HIT(seq_new("1 2 3 4"), "0 []");                 /* M 3 */
	EXPECT_HIT(seq_new("1"), "0 []");
	EXPECT_HIT(seq_new(""), "0 []");                        /* n = 0 */
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 0 9 10 11 12 13"), "4 [1]");
	/* stop at the first miss even though block 3 is still cached */
	EXPECT_EVICT(1, 2);
	EXPECT_HIT(s13, "4 [1]");
	EXPECT_EVICT(1, 1);
	EXPECT_HIT(s13, "0 []");
}

static void test_full_alloc_hit(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(16, 4, "full");
	a = cached_13();
	SEQ_FREE(a); /* 4 before the head; 3,2,1 at the tail */
	EXPECT_FREEQ("[4,5,6,7,8,9,10,11,12,13,14,15,3,2,1]");
	b = seq_new("1 2 3 4 5 6 7 8 9 10 11 12 20 21 22");
	EXPECT_HIT(b, "12 [1,2,3]");
	EXPECT_COST(b, 3, 0, true, 4); /* cdiv(15,4)=4 - 3 = 1, + 3 free hit blocks */
	EXPECT_ALLOC(b, 3, 0, true, "ok [4]");
	assert_int_equal(last_res.hit_tokens, 12);
	assert_int_equal(last_res.first_new[0], 3);
	EXPECT_TABLE(b, "[1,2,3,4]");
	EXPECT_FREEQ("[5,6,7,8,9,10,11,12,13,14,15]");
	EXPECT_STATS("free=11 used=4 cached=3");
	EXPECT_INFO(b, "tokens=15 prompt=15 prefix=15 computed=12 slots=15 held=4 running=1");
	COMPUTED(b, 15); /* block 4 ends at 16 > 15: not hashed */
	EXPECT_STATS("free=11 used=4 cached=3");
	/* a comes back and hits its own (now shared) blocks */
	EXPECT_HIT(a, "12 [1,2,3]");
	EXPECT_COST(a, 1, 0, true, 1);
	EXPECT_ALLOC(a, 1, 0, true, "ok [5]");
	EXPECT_TABLE(a, "[1,2,3,5]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_full_never_drops),
		T(test_full_hit_boundaries),
		T(test_full_alloc_hit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
