/* SPDX-License-Identifier: MIT */
/*
 * Reference sliding window W with prefix P: the gap [cdiv(P,bs), max(P,n-W)/bs)
 * is dropped; only blocks wholly inside the prefix are hashed; hits as full.
 */
#include "helpers.h"

static void test_rswa_spec_example(void **state)
{
	struct kvc_seq *s;

	(void)state;
	pool_new(16, 4, "rswa:8");
	s = seq_new("1*16");
	seq_add(s, "1*24");
	EXPECT_ALLOC(s, 40, 0, false, "ok [1,2,3,4,5,6,7,8,9,10]");
	COMPUTED(s, 28); /* hash 1..4 (the prefix), gap [4, 20/4=5) */
	EXPECT_TABLE(s, "[1,2,3,4,0,6,7,8,9,10]");
	COMPUTED(s, 36); /* gap [4, 28/4=7): 7,6 released, stops at null 4 */
	EXPECT_TABLE(s, "[1,2,3,4,0,0,0,8,9,10]");
	EXPECT_FREEQ("[7,6,5,11,12,13,14,15]");
	EXPECT_STATS("free=8 used=7 cached=4");
}

static void test_rswa_gap_boundaries(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(16, 2, "rswa:4");
	a = seq_new("1 2 3 4"); /* P = 4 */
	seq_add(a, "5 6 7 8 9 10 11 12");
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 4); /* hash 1,2; gap [2,2) */
	EXPECT_STATS("free=9 used=6 cached=2");
	COMPUTED(a, 8); /* gap [2, max(4,4)/2=2): empty; 3,4 are outside the prefix */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	EXPECT_STATS("free=9 used=6 cached=2");
	COMPUTED(a, 9); /* gap [2, 5/2=2) */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	COMPUTED(a, 10); /* gap [2, 3): block 3, unhashed -> before the head */
	EXPECT_TABLE(a, "[1,2,0,4,5,6]");
	EXPECT_FREEQ("[3,7,8,9,10,11,12,13,14,15]");
	COMPUTED(a, 12); /* gap [2, 4) */
	EXPECT_TABLE(a, "[1,2,0,0,5,6]");
	EXPECT_FREEQ("[4,3,7,8,9,10,11,12,13,14,15]");
	EXPECT_STATS("free=11 used=4 cached=2");
	SEQ_FREE(a); /* 6,5 unhashed before the head; 2,1 at the tail */
	EXPECT_FREEQ("[6,5,4,3,7,8,9,10,11,12,13,14,15,2,1]");
}

static void test_rswa_prefix_unaligned(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(16, 2, "rswa:2");
	a = seq_new("1 2 3 4 5"); /* P = 5 */
	seq_add(a, "6 7 8 9 10 11 12");
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	/* hash positions 0,1 (end <= 5); gap [cdiv(5,2)=3, 10/2=5): 5,4 */
	COMPUTED(a, 12);
	EXPECT_TABLE(a, "[1,2,3,0,0,6]");
	EXPECT_FREEQ("[5,4,7,8,9,10,11,12,13,14,15]");
	EXPECT_STATS("free=11 used=4 cached=2");
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 9 10 11 12 13"), "4 [1,2]");
}

static void test_rswa_explicit_prefix(void **state)
{
	static const uint32_t tk[3] = { 1, 2, 3 };
	struct kvc_seq *a, *c, *bad = NULL;

	(void)state;
	pool_new(16, 2, "rswa:2");
	assert_int_equal(kvc_seq_create(P, tk, 3, NULL, 0, 4, &bad), -EINVAL);
	check_pool();
	assert_int_equal(kvc_seq_create(P, tk, 3, NULL, 0, 3, &bad), 0);
	check_pool();
	a = seq_new_ex("1 2 3 4 5 6 7 8 9 10 11 12", NULL, 4);
	EXPECT_INFO(a, "tokens=12 prompt=12 prefix=4 computed=0 slots=0 held=0 running=0");
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 12); /* hash 1,2; gap [2, 10/2=5): 5,4,3 */
	EXPECT_TABLE(a, "[1,2,0,0,0,6]");
	EXPECT_FREEQ("[5,4,3,7,8,9,10,11,12,13,14,15]");
	EXPECT_STATS("free=12 used=3 cached=2");
	c = seq_new_ex("7 7 7 7 7 7", NULL, 0); /* no prefix: nothing hashed */
	EXPECT_ALLOC(c, 6, 0, false, "ok [5,4,3]");
	COMPUTED(c, 6); /* gap [0, 4/2=2): 4,5 */
	EXPECT_TABLE(c, "[0,0,3]");
	EXPECT_FREEQ("[4,5,7,8,9,10,11,12,13,14,15]");
	EXPECT_STATS("free=11 used=4 cached=2");
}

static void test_rswa_hit(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(16, 2, "rswa:4");
	a = seq_new("1 2 3 4 5 6 7 8"); /* P = 8 */
	seq_add(a, "9 10 11 12");
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 12); /* hash 1..4; gap [4, 8/2=4) is empty */
	EXPECT_TABLE(a, "[1,2,3,4,5,6]");
	EXPECT_STATS("free=9 used=6 cached=4");
	b = seq_new("1 2 3 4 5 6 7 8 9 10 11 12 13");
	EXPECT_HIT(b, "8 [1,2,3,4]"); /* block 5 is outside a's prefix: never hashed */
	EXPECT_HIT(seq_new("1 2 3 4 5"), "4 [1,2]");
	EXPECT_COST(b, 5, 0, true, 3); /* cdiv(13,2)=7 - 4 */
	EXPECT_ALLOC(b, 5, 0, true, "ok [7,8,9]");
	EXPECT_TABLE(b, "[1,2,3,4,7,8,9]");
	EXPECT_INFO(b, "tokens=13 prompt=13 prefix=13 computed=8 slots=13 held=7 running=1");
	EXPECT_FREEQ("[10,11,12,13,14,15]");
}

static void test_rswa_publish_alloc(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new_ex(16, 2, "rswa:2", "publish=alloc");
	a = seq_new("1 2 3 4");
	seq_add(a, "5 6 7 8 9 10");
	EXPECT_ALLOC(a, 10, 0, false, "ok [1,2,3,4,5]");
	EXPECT_STATS("free=10 used=5 cached=2"); /* only the prefix blocks */
	COMPUTED(a, 10); /* only the count */
	EXPECT_TABLE(a, "[1,2,3,4,5]");
	/* drop for 10: gap [2, 8/2=4) -> 4,3; then cdiv(12,2)-5 = 1 */
	EXPECT_ALLOC(a, 2, 0, false, "ok [4]");
	EXPECT_TABLE(a, "[1,2,0,0,5,4]");
	EXPECT_FREEQ("[3,6,7,8,9,10,11,12,13,14,15]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_rswa_spec_example),
		T(test_rswa_gap_boundaries),
		T(test_rswa_prefix_unaligned),
		T(test_rswa_explicit_prefix),
		T(test_rswa_hit),
		T(test_rswa_publish_alloc),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
