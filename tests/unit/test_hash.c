/* SPDX-License-Identifier: MIT */
/*
 * Hashing and namespaces: chained block hashes, salts, groups never share
 * entries, only full blocks are hashed, earliest holder of an entry wins.
 */
#include "helpers.h"

/* a = 1 2 3 4 5 computed: blocks 1 (pos 0) and 2 (pos 1) hashed, 3 is partial */
static struct kvc_seq *cached_prefix(const char *salt)
{
	struct kvc_seq *a = seq_new_ex("1 2 3 4 5", salt, -1);

	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	COMPUTED(a, 5);
	EXPECT_STATS("free=6 used=3 cached=2");
	return a;
}

static void test_chained_tokens(void **state)
{
	(void)state;
	pool_new(10, 2, "full");
	cached_prefix(NULL);
	EXPECT_HIT(seq_new("1 2 3 4 5"), "4 [1,2]");
	EXPECT_HIT(seq_new("1 2 3 4"), "2 [1]");     /* M = 3: one block at most */
	EXPECT_HIT(seq_new("1 2 3 4 5 6"), "4 [1,2]");
	EXPECT_HIT(seq_new("1 2 3 4 9 9 9"), "4 [1,2]"); /* later tokens do not matter */
	EXPECT_HIT(seq_new("1 2 9 4 5"), "2 [1]");   /* block 1 differs */
	EXPECT_HIT(seq_new("9 2 3 4 5"), "0 []");    /* chained: block 0 differs */
	EXPECT_HIT(seq_new("3 4 1 2 5"), "0 []");
}

static void test_salt(void **state)
{
	(void)state;
	pool_new(10, 2, "full");
	cached_prefix("ns1");
	EXPECT_HIT(seq_new("1 2 3 4 5"), "0 []");
	EXPECT_HIT(seq_new_ex("1 2 3 4 5", "ns2", -1), "0 []");
	EXPECT_HIT(seq_new_ex("1 2 3 4 5", "ns", -1), "0 []");
	EXPECT_HIT(seq_new_ex("1 2 3 4 5", "ns11", -1), "0 []");
	EXPECT_HIT(seq_new_ex("1 2 3 4 5", "ns1", -1), "4 [1,2]");
}

static void test_no_salt_not_shared_with_salted(void **state)
{
	struct kvc_seq *b, *c;

	(void)state;
	pool_new(10, 2, "full");
	cached_prefix(NULL);
	b = seq_new_ex("1 2 3 4 5", "x", -1);
	EXPECT_HIT(b, "0 []");
	EXPECT_ALLOC(b, 5, 0, true, "ok [4,5,6]");
	COMPUTED(b, 4); /* same tokens, another namespace: a second pair of entries */
	EXPECT_STATS("free=3 used=6 cached=4");
	c = seq_new_ex("1 2 3 4 5", "x", -1);
	EXPECT_HIT(c, "4 [4,5]");
	EXPECT_HIT(seq_new("1 2 3 4 5"), "4 [1,2]");
}

static void test_groups_never_share(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(14, 2, "full full");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3] [4,5,6]");
	COMPUTED(a, 5);
	EXPECT_STATS("free=7 used=6 cached=4");
	b = seq_new("1 2 3 4 5");
	EXPECT_HIT(b, "4 [1,2] [4,5]");
	/* group 1 misses position 1: group 0's block for the same tokens must not count */
	EXPECT_EVICT(1, 5);
	EXPECT_HIT(b, "2 [1] [4]");
	EXPECT_EVICT(1, 4);
	EXPECT_HIT(b, "0 [] []");
	EXPECT_STATS("free=7 used=6 cached=2");
}

static void test_earliest_wins(void **state)
{
	struct kvc_seq *a, *b, *c, *d;

	(void)state;
	pool_new(12, 2, "full");
	a = seq_new("1 2 3");
	b = seq_new("1 2 3");
	EXPECT_ALLOC(a, 3, 0, false, "ok [1,2]");
	EXPECT_ALLOC(b, 3, 0, false, "ok [3,4]");
	COMPUTED(b, 2); /* 3 gets the entry first */
	COMPUTED(a, 2); /* then 1 */
	EXPECT_STATS("free=7 used=4 cached=2");
	c = seq_new("1 2 3");
	EXPECT_HIT(c, "2 [3]");
	SEQ_FREE(b); /* 4 before the head, 3 at the tail, still cached */
	EXPECT_FREEQ("[4,5,6,7,8,9,10,11,3]");
	EXPECT_HIT(c, "2 [3]");
	EXPECT_EVICT(1, 3);
	EXPECT_HIT(c, "2 [1]");
	d = seq_new("1 2 3");
	EXPECT_ALLOC(d, 3, 0, false, "ok [4,5]");
	COMPUTED(d, 2); /* 4 joins the entry after 1 */
	EXPECT_HIT(c, "2 [1]");
	EXPECT_EVICT(1, 1);
	EXPECT_HIT(c, "2 [4]");
	EXPECT_STATS("free=7 used=4 cached=1");
}

static void test_only_full_blocks(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3");
	EXPECT_ALLOC(a, 3, 0, false, "ok [1,2]");
	COMPUTED(a, 3); /* block 2 holds one token: not hashed */
	EXPECT_STATS("free=7 used=2 cached=1");
	EXPECT_HIT(seq_new("1 2 3 4 5"), "2 [1]");
	seq_add(a, "4");
	EXPECT_COMPUTED(a, 4, -EINVAL); /* only 3 slots allocated */
	EXPECT_ALLOC(a, 1, 0, false, "ok []");
	COMPUTED(a, 4); /* generated tokens are hashed like the prompt */
	EXPECT_STATS("free=7 used=2 cached=2");
	EXPECT_HIT(seq_new("1 2 3 4 5"), "4 [1,2]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_chained_tokens),
		T(test_salt),
		T(test_no_salt_not_shared_with_salted),
		T(test_groups_never_share),
		T(test_earliest_wins),
		T(test_only_full_blocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
