/* SPDX-License-Identifier: MIT */
/*
 * allocate_slots: nospace without side effects (but the drop), lookahead,
 * max_len, publish=alloc vs commit, refusals, alloc_cost == blocks taken,
 * free keeps the sequence for re-admission, the admission hook (what it is
 * shown, and its refusal coming before nospace).
 */
#include "helpers.h"

#define T12 "1 2 3 4 5 6 7 8 9 10 11 12"

static void test_nospace_no_side_effects(void **state)
{
	struct kvc_seq *a, *b, *c;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3 4 5 6 7 8");
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]");
	COMPUTED(a, 4);
	b = seq_new("1 2 3 4 9 9 9 9");
	EXPECT_HIT(b, "4 [1,2]");
	c = seq_new("7*10");
	EXPECT_ALLOC(c, 10, 0, false, "ok [5,6,7,8,9]");
	EXPECT_COST(b, 4, 0, true, 2); /* cdiv(8,2)=4 - 2 hit */
	EXPECT_ALLOC(b, 4, 0, true, "nospace");
	EXPECT_FREEQ("[]");
	EXPECT_STATS("free=0 used=9 cached=2");
	EXPECT_TABLE(b, "[]");
	EXPECT_INFO(b, "tokens=8 prompt=8 prefix=8 computed=0 slots=0 held=0 running=0");
	SEQ_FREE(a); /* 1,2 must be back at ref 0: b did not touch them */
	EXPECT_FREEQ("[4,3,2,1]");
	EXPECT_COST(b, 4, 0, true, 4);
	EXPECT_ALLOC(b, 4, 0, true, "ok [4,3]");
	EXPECT_TABLE(b, "[1,2,4,3]");
	EXPECT_FREEQ("[]");
	EXPECT_INFO(b, "tokens=8 prompt=8 prefix=8 computed=4 slots=8 held=4 running=1");
}

static void test_nospace_two_groups(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(8, 2, "full full");
	a = seq_new("1 2 3 4");
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2] [3,4]");
	b = seq_new("5 6 7 8");
	EXPECT_COST(b, 3, 0, false, 4); /* 2 per group, 3 free */
	EXPECT_ALLOC(b, 3, 0, false, "nospace");
	EXPECT_FREEQ("[5,6,7]");
	EXPECT_TABLE(b, "[] []");
	EXPECT_ALLOC(b, 2, 0, false, "ok [5] [6]");
	EXPECT_ALLOC(b, 2, 0, false, "ok [] []"); /* computed 0: still one block each */
	EXPECT_COST(b, 3, 0, false, 2);
	EXPECT_ALLOC(b, 3, 0, false, "nospace");
	EXPECT_TABLE(b, "[5] [6]");
	EXPECT_INFO(b, "tokens=4 prompt=4 prefix=4 computed=0 slots=2 held=2 running=1");
}

static void test_nospace_keeps_drop(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new_ex(10, 2, "swa:4", "publish=alloc");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]");
	COMPUTED(a, 8);
	b = seq_new("7*8");
	EXPECT_ALLOC(b, 8, 0, false, "ok [5,6,7,8]");
	EXPECT_STATS("free=1 used=8 cached=8");
	/* drop for 8 (skipped 5 -> positions 1,0), then cdiv(16,2)=8 - 4 = 4 > 3 */
	EXPECT_COST(a, 8, 0, false, 4);
	EXPECT_ALLOC(a, 8, 0, false, "nospace");
	EXPECT_TABLE(a, "[0,0,3,4]");
	EXPECT_FREEQ("[9,2,1]");
	EXPECT_STATS("free=3 used=6 cached=8");
	EXPECT_INFO(a, "tokens=12 prompt=12 prefix=12 computed=8 slots=8 held=2 running=1");
	EXPECT_ALLOC(a, 4, 0, false, "ok [9,2]");
	EXPECT_TABLE(a, "[0,0,3,4,9,2]");
	EXPECT_STATS("free=1 used=8 cached=9"); /* 2 lost its hash, 9 and 2 hashed anew */
}

static void test_drop_makes_room(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new_ex(10, 2, "swa:4", "publish=alloc");
	a = seq_new(T12);
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]");
	COMPUTED(a, 8);
	b = seq_new("7*8");
	EXPECT_ALLOC(b, 8, 0, false, "ok [5,6,7,8]");
	EXPECT_FREEQ("[9]");
	EXPECT_COST(a, 4, 0, false, 2); /* more than the queue holds before the drop */
	EXPECT_ALLOC(a, 4, 0, false, "ok [9,2]");
	EXPECT_TABLE(a, "[0,0,3,4,9,2]");
	EXPECT_FREEQ("[1]");
}

static void test_lookahead(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(12, 2, "full");
	a = seq_new("1 2 3 4 5 6 7 8 9 10");
	EXPECT_COST(a, 3, 2, false, 3);
	EXPECT_ALLOC(a, 3, 2, false, "ok [1,2,3]"); /* cdiv(3+2, 2) */
	EXPECT_INFO(a, "tokens=10 prompt=10 prefix=10 computed=0 slots=5 held=3 running=1");
	EXPECT_COMPUTED(a, 6, -EINVAL);
	COMPUTED(a, 5);
	EXPECT_STATS("free=8 used=3 cached=2");
	EXPECT_COST(a, 1, 3, false, 2);
	EXPECT_ALLOC(a, 1, 3, false, "ok [4,5]"); /* cdiv(5+1+3, 2) = 5 */
	EXPECT_ALLOC(a, 1, 0, false, "ok []");
	EXPECT_INFO(a, "tokens=10 prompt=10 prefix=10 computed=5 slots=9 held=5 running=1");
	COMPUTED(a, 9);
	EXPECT_COST(a, 1, 4, false, 2); /* cdiv(14,2)=7 - 5 */
	EXPECT_STATS("free=6 used=5 cached=4");
}

static void test_max_len(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new_ex(12, 2, "full", "max_len=6");
	a = seq_new("1 2 3 4 5 6 7 8 9 10");
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3]"); /* cdiv(min(8,6), 2) */
	EXPECT_INFO(a, "tokens=10 prompt=10 prefix=10 computed=0 slots=6 held=3 running=1");
	EXPECT_COMPUTED(a, 7, -EINVAL);
	COMPUTED(a, 6);
	EXPECT_COST(a, 2, 2, false, 0);
	EXPECT_ALLOC(a, 2, 2, false, "ok []");
	EXPECT_INFO(a, "tokens=10 prompt=10 prefix=10 computed=6 slots=6 held=3 running=1");
	b = seq_new("1 2 3 4 5 6 7 8 9 10");
	EXPECT_HIT(b, "6 [1,2,3]");
	EXPECT_COST(b, 2, 0, true, 0);
	EXPECT_ALLOC(b, 2, 0, true, "ok []");
	EXPECT_TABLE(b, "[1,2,3]");
	EXPECT_INFO(b, "tokens=10 prompt=10 prefix=10 computed=6 slots=6 held=3 running=1");
	EXPECT_FREEQ("[4,5,6,7,8,9,10,11]");
}

static void test_max_len_caps_hit_total(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	/* publish=alloc hashes the full block 2 (tokens 4,5) though max_len is 5 */
	pool_new_ex(12, 2, "full", "max_len=5 publish=alloc");
	a = seq_new("1 2 3 4 5 6");
	EXPECT_ALLOC(a, 6, 0, false, "ok [1,2,3]");
	EXPECT_STATS("free=8 used=3 cached=3");
	b = seq_new("1 2 3 4 5 6 7");
	EXPECT_HIT(b, "6 [1,2,3]");
	/* total = min(6, 5) = 5; cdiv(min(5+1,5),2) = 3 - max(0,3) = 0 */
	EXPECT_COST(b, 1, 0, true, 0);
	EXPECT_ALLOC(b, 1, 0, true, "ok []");
	assert_int_equal(last_res.hit_tokens, 6);
	EXPECT_TABLE(b, "[1,2,3]");
	EXPECT_INFO(b, "tokens=7 prompt=7 prefix=7 computed=5 slots=5 held=3 running=1");
}

static void test_publish_commit(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(12, 2, "full");
	a = seq_new("1 2 3 4 5 6 7");
	EXPECT_ALLOC(a, 7, 0, false, "ok [1,2,3,4]");
	EXPECT_STATS("free=7 used=4 cached=0");
	b = seq_new("1 2 3 4 5 6 7");
	EXPECT_HIT(b, "0 []"); /* nothing is written yet */
	COMPUTED(a, 1);
	EXPECT_STATS("free=7 used=4 cached=0");
	COMPUTED(a, 3);
	EXPECT_STATS("free=7 used=4 cached=1");
	EXPECT_HIT(b, "2 [1]");
	COMPUTED(a, 4);
	COMPUTED(a, 7); /* block 4 ends at 8 */
	EXPECT_STATS("free=7 used=4 cached=3");
	EXPECT_HIT(b, "6 [1,2,3]");
}

static void test_publish_alloc(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new_ex(12, 2, "full", "publish=alloc");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]"); /* hashes min(8, 5 known) -> 2 blocks */
	EXPECT_STATS("free=7 used=4 cached=2");
	b = seq_new("1 2 3 4 5 6 7");
	EXPECT_HIT(b, "4 [1,2]");
	EXPECT_COMPUTED(a, 6, -EINVAL); /* only 5 tokens known */
	COMPUTED(a, 5);
	EXPECT_STATS("free=7 used=4 cached=2");
	seq_add(a, "6 7 8");
	EXPECT_ALLOC(a, 1, 0, false, "ok []"); /* min(5+1, 8) = 6 -> block 3 */
	EXPECT_STATS("free=7 used=4 cached=3");
	EXPECT_HIT(b, "6 [1,2,3]");
	EXPECT_EVICT(1, 3);
	COMPUTED(a, 6);
	EXPECT_ALLOC(a, 2, 0, false, "ok []"); /* 8 -> block 4; position 2 is not redone */
	EXPECT_STATS("free=7 used=4 cached=3");
	EXPECT_HIT(b, "4 [1,2]");
	EXPECT_HIT(seq_new("1 2 3 4 5 6 7 8 9"), "4 [1,2]");
}

static void test_computed_refusals(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3 4 5 6");
	COMPUTED(a, 0);
	EXPECT_COMPUTED(a, 1, -EINVAL); /* nothing allocated */
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2]");
	EXPECT_COMPUTED(a, 5, -EINVAL); /* above the 4 allocated slots */
	COMPUTED(a, 3);
	EXPECT_STATS("free=7 used=2 cached=1");
	EXPECT_COMPUTED(a, 2, -EINVAL); /* below the count */
	COMPUTED(a, 3);
	EXPECT_INFO(a, "tokens=6 prompt=6 prefix=6 computed=3 slots=4 held=2 running=1");
	EXPECT_ALLOC(a, 4, 0, false, "ok [3,4]"); /* slots 7 */
	EXPECT_COMPUTED(a, 7, -EINVAL);          /* above the 6 tokens */
	EXPECT_STATS("free=5 used=4 cached=1");
	COMPUTED(a, 6);
	EXPECT_INFO(a, "tokens=6 prompt=6 prefix=6 computed=6 slots=7 held=4 running=1");
	EXPECT_STATS("free=5 used=4 cached=3");
}

static void test_alloc_refusals(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3 4 5 6");
	EXPECT_ALLOC(a, 0, 0, false, "invalid");
	EXPECT_ALLOC(a, 0, 2, false, "invalid");
	EXPECT_COST(a, 0, 0, false, -EINVAL);
	EXPECT_INFO(a, "tokens=6 prompt=6 prefix=6 computed=0 slots=0 held=0 running=0");
	EXPECT_ALLOC(a, 2, 0, false, "ok [1]");
	EXPECT_ALLOC(a, 2, 0, true, "invalid"); /* hit on a running sequence */
	EXPECT_COST(a, 2, 0, true, -EINVAL);
	EXPECT_TABLE(a, "[1]");
	EXPECT_FREEQ("[2,3,4,5,6,7,8,9]");
	pool_teardown(NULL);

	pool_new_ex(10, 2, "full cyclic:4", "max_step_tokens=2");
	b = seq_new("1 2 3 4 5 6");
	EXPECT_ALLOC(b, 2, 1, false, "invalid");
	EXPECT_ALLOC(b, 3, 0, false, "invalid");
	EXPECT_COST(b, 1, 2, false, -EINVAL);
	EXPECT_FREEQ("[1,2,3,4,5,6,7,8,9]");
	EXPECT_ALLOC(b, 2, 0, false, "ok [1] [2]");
}

static void test_cost_equals_taken(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(14, 2, "full swa:4");
	a = seq_new("1 2 3 4 5 6 7 8");
	EXPECT_COST(a, 8, 0, false, 8);
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4] [5,6,7,8]");
	EXPECT_STATS("free=5 used=8 cached=0");
	COMPUTED(a, 8); /* swa drops positions 1,0 */
	SEQ_FREE(a);
	EXPECT_FREEQ("[9,10,11,12,13,6,5,4,3,2,1,8,7]");
	b = seq_new("1 2 3 4 5 6 7 8 9 9");
	EXPECT_HIT(b, "8 [1,2,3,4] [0,0,7,8]");
	/* g0: 5-4 = 1 + 4 free; g1: sb 5/2 = 2, 5 - 4 = 1 + 7,8 free */
	EXPECT_COST(b, 2, 0, true, 8);
	EXPECT_ALLOC(b, 2, 0, true, "ok [9] [10]");
	EXPECT_STATS("free=5 used=8 cached=8"); /* 13 - 8 */
	EXPECT_TABLE(b, "[1,2,3,4,9] [0,0,7,8,10]");
	EXPECT_FREEQ("[11,12,13,6,5]");
	COMPUTED(b, 10); /* hash position 4; swa skipped 7 -> positions 2 (7) */
	EXPECT_TABLE(b, "[1,2,3,4,9] [0,0,0,8,10]");
	EXPECT_FREEQ("[11,12,13,6,5,7]");
	EXPECT_COST(b, 3, 0, false, 4); /* cdiv(13,2)=7 - 5 per group */
	EXPECT_ALLOC(b, 3, 0, false, "ok [11,12] [13,6]");
	EXPECT_STATS("free=2 used=11 cached=9"); /* 6 lost its hash */
}

static void test_free_keeps_sequence(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3 4 5 6");
	EXPECT_ALLOC(a, 6, 0, false, "ok [1,2,3]");
	COMPUTED(a, 6);
	seq_add(a, "7 8");
	SEQ_FREE(a);
	EXPECT_FREEQ("[4,5,6,7,8,9,3,2,1]");
	EXPECT_INFO(a, "tokens=8 prompt=6 prefix=6 computed=0 slots=0 held=0 running=0");
	EXPECT_TABLE(a, "[]");
	SEQ_FREE(a); /* holds nothing: no change */
	EXPECT_FREEQ("[4,5,6,7,8,9,3,2,1]");
	EXPECT_COMPUTED(a, 1, -EINVAL);
	EXPECT_HIT(a, "6 [1,2,3]"); /* M = 7 */
	EXPECT_COST(a, 2, 0, true, 4);
	EXPECT_ALLOC(a, 2, 0, true, "ok [4]");
	assert_int_equal(last_res.hit_tokens, 6);
	EXPECT_TABLE(a, "[1,2,3,4]");
	EXPECT_INFO(a, "tokens=8 prompt=6 prefix=6 computed=6 slots=8 held=4 running=1");
	EXPECT_FREEQ("[5,6,7,8,9]");
	COMPUTED(a, 8);
	EXPECT_STATS("free=5 used=4 cached=4");
	SEQ_DESTROY(a);
	EXPECT_FREEQ("[5,6,7,8,9,4,3,2,1]");
	EXPECT_STATS("free=9 used=0 cached=4");
}

/* What the admission hook saw last, and what it answers. */
static struct {
	void *owner;
	uint32_t popped, nhits, hits[16];
	int answer;
	unsigned calls;
} admit;

static int record_admit(void *owner, const struct kvc_admit *a)
{
	admit.owner = owner;
	admit.popped = a->popped;
	admit.nhits = 0;
	for (uint32_t g = 0; g < KVC_MAX_GROUPS; g++)
		for (uint32_t p = a->hit_first[g]; p < a->hit_end[g]; p++)
			if (a->hit_ids[g][p] != KVC_NULL_BLOCK && admit.nhits < 16)
				admit.hits[admit.nhits++] = a->hit_ids[g][p];
	admit.calls++;
	return admit.answer;
}

static void test_admit_hook(void **state)
{
	struct kvc_seq *a, *b, *c;
	int owner;

	(void)state;
	memset(&admit, 0, sizeof(admit));
	pool_new(8, 2, "full");
	kvc_pool_set_admit_hook(P, record_admit);
	a = seq_new("1 2 3 4 5 6 7 8");
	kvc_seq_set_owner(a, &owner);
	EXPECT_ALLOC(a, 8, 0, true, "ok [1,2,3,4]");
	assert_ptr_equal(admit.owner, &owner);
	assert_int_equal(admit.popped, 4);
	assert_int_equal(admit.nhits, 0);
	COMPUTED(a, 8);
	/* b hits a's first three blocks and needs one more. */
	b = seq_new("1 2 3 4 5 6 9 9");
	EXPECT_HIT(b, "6 [1,2,3]");
	admit.answer = -EDQUOT;
	EXPECT_ALLOC(b, 2, 0, true, "error -122");
	assert_int_equal(admit.popped, 1);
	assert_int_equal(admit.nhits, 3);
	assert_int_equal(admit.hits[0], 1);
	assert_int_equal(admit.hits[2], 3);
	EXPECT_TABLE(b, "[]");
	EXPECT_INFO(b, "tokens=8 prompt=8 prefix=8 computed=0 slots=0 held=0 running=0");
	admit.answer = 0;
	EXPECT_ALLOC(b, 2, 0, true, "ok [5]");
	EXPECT_TABLE(b, "[1,2,3,5]");
	/* The hook comes first: with the queue empty it still decides, and nospace after it. */
	c = seq_new("7*12");
	EXPECT_ALLOC(c, 4, 0, false, "ok [6,7]");
	COMPUTED(c, 4);
	EXPECT_FREEQ("[]");
	admit.answer = -EDQUOT;
	admit.calls = 0;
	EXPECT_ALLOC(c, 4, 0, false, "error -122");
	assert_int_equal(admit.calls, 1);
	assert_int_equal(admit.popped, 2);
	admit.answer = 0;
	EXPECT_ALLOC(c, 4, 0, false, "nospace");
	kvc_pool_set_admit_hook(P, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_nospace_no_side_effects),
		T(test_nospace_two_groups),
		T(test_nospace_keeps_drop),
		T(test_drop_makes_room),
		T(test_lookahead),
		T(test_max_len),
		T(test_max_len_caps_hit_total),
		T(test_publish_commit),
		T(test_publish_alloc),
		T(test_computed_refusals),
		T(test_alloc_refusals),
		T(test_cost_equals_taken),
		T(test_free_keeps_sequence),
		T(test_admit_hook),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
