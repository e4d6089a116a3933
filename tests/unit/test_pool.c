/* SPDX-License-Identifier: MIT */
/*
 * Block pool: config validation, free queue, release orders (split, append,
 * caching off), touch, lazy eviction, evict, reset, stats, null block.
 */
#include "helpers.h"

static int try_create(uint32_t n, uint32_t bs, const char *groups)
{
	struct kvc_pool_config cfg;
	struct kvc_pool *p = NULL;
	int rc;

	kvc_pool_config_init(&cfg, n, bs);
	cfg_groups(&cfg, groups);
	rc = kvc_pool_create(&cfg, &p);
	if (rc == 0) {
		assert_non_null(p);
		assert_int_equal(kvc_pool_check(p, NULL, 0), 0);
		kvc_pool_destroy(p);
	}
	return rc;
}

static void test_config_defaults(void **state)
{
	struct kvc_pool_config cfg;
	const struct kvc_pool_config *c;

	(void)state;
	kvc_pool_config_init(&cfg, 8, 4);
	assert_int_equal(cfg.num_blocks, 8);
	assert_int_equal(cfg.block_size, 4);
	assert_true(cfg.caching);
	assert_int_equal(cfg.free_order, KVC_FREE_SPLIT);
	assert_int_equal(cfg.publish, KVC_PUBLISH_COMMIT);
	assert_int_equal(cfg.max_len, 2147483647u);
	assert_int_equal(cfg.max_step_tokens, 1);

	pool_new_ex(8, 4, "full swa:3", "free_order=append publish=alloc max_len=40");
	c = kvc_pool_config(P);
	assert_int_equal(c->num_blocks, 8);
	assert_int_equal(c->block_size, 4);
	assert_int_equal(c->num_groups, 2);
	assert_int_equal(c->groups[0].kind, KVC_FULL);
	assert_int_equal(c->groups[1].kind, KVC_SWA);
	assert_int_equal(c->groups[1].param, 3);
	assert_int_equal(c->free_order, KVC_FREE_APPEND);
	assert_int_equal(c->publish, KVC_PUBLISH_ALLOC);
	assert_int_equal(c->max_len, 40);
	assert_int_equal(kvc_group_ring_blocks(P, 0), 0);
	assert_int_equal(kvc_group_ring_blocks(P, 1), 0);
}

static void test_config_validation(void **state)
{
	struct kvc_pool_config cfg;
	struct kvc_pool *p = NULL;

	(void)state;
	assert_int_equal(try_create(0, 4, "full"), -EINVAL);
	assert_int_equal(try_create(1, 4, "full"), -EINVAL);     /* N < 2 */
	assert_int_equal(try_create(2, 4, "full"), 0);           /* N = 2: one usable block */
	assert_int_equal(try_create(KVC_MAX_BLOCKS + 1, 4, "full"), -EINVAL); /* N > 2^24 */
	assert_int_equal(try_create(8, 0, "full"), -EINVAL);     /* bs 0 */
	assert_int_equal(try_create(8, 1, "full"), 0);
	assert_int_equal(try_create(8, 4, "swa:0"), -EINVAL);
	assert_int_equal(try_create(8, 4, "swa:1"), -EINVAL);    /* swa W < 2 */
	assert_int_equal(try_create(8, 4, "swa:2"), 0);
	assert_int_equal(try_create(8, 4, "full swa:1"), -EINVAL);
	assert_int_equal(try_create(8, 4, "rswa:0"), -EINVAL);   /* rswa W >= 1 */
	assert_int_equal(try_create(8, 4, "rswa:1"), 0);
	assert_int_equal(try_create(8, 4, "chunked:0"), -EINVAL); /* chunked C >= 1 */
	assert_int_equal(try_create(8, 4, "chunked:1"), 0);
	assert_int_equal(try_create(8, 4, "cyclic:0"), -EINVAL); /* cyclic W >= 1 */
	assert_int_equal(try_create(8, 4, "cyclic:1"), 0);
	assert_int_equal(try_create(8, 4, ""), -EINVAL);         /* zero groups */

	/* 16 groups are fine, 17 are not */
	kvc_pool_config_init(&cfg, 8, 4);
	cfg.num_groups = KVC_MAX_GROUPS;
	for (uint32_t g = 0; g < KVC_MAX_GROUPS; g++) {
		cfg.groups[g].kind = KVC_FULL;
		cfg.groups[g].param = 0;
	}
	assert_int_equal(kvc_pool_create(&cfg, &p), 0);
	kvc_pool_destroy(p);
	p = NULL;
	cfg.num_groups = KVC_MAX_GROUPS + 1;
	assert_int_equal(kvc_pool_create(&cfg, &p), -EINVAL);

	/* unknown kind */
	kvc_pool_config_init(&cfg, 8, 4);
	cfg.num_groups = 1;
	cfg.groups[0].kind = KVC_NUM_KINDS;
	cfg.groups[0].param = 4;
	assert_int_equal(kvc_pool_create(&cfg, &p), -EINVAL);
}

static void test_initial_queue(void **state)
{
	uint32_t ids[4] = { 99, 99, 99, 99 };

	(void)state;
	pool_new(8, 4, "full");
	EXPECT_FREEQ("[1,2,3,4,5,6,7]");
	EXPECT_STATS("free=7 used=0 cached=0");
	/* a short buffer gets the head; the return value is the whole length */
	assert_int_equal(kvc_pool_free_queue(P, ids, 3), 7);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 2);
	assert_int_equal(ids[2], 3);
	assert_int_equal(ids[3], 99);
}

static void test_null_block_never_handed_out(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(2, 2, "full");
	EXPECT_FREEQ("[1]");
	a = seq_new("1 2");
	b = seq_new("3 4");
	EXPECT_ALLOC(a, 2, 0, false, "ok [1]");
	EXPECT_STATS("free=0 used=1 cached=0");
	EXPECT_COST(b, 1, 0, false, 1);
	EXPECT_ALLOC(b, 1, 0, false, "nospace"); /* block 0 is not in the queue */
	EXPECT_TABLE(b, "[]");
	SEQ_FREE(a); /* unhashed (computed 0) */
	EXPECT_FREEQ("[1]");
	EXPECT_ALLOC(b, 1, 0, false, "ok [1]");
	EXPECT_STATS("free=0 used=1 cached=0");
}

/* a holds [1,2,3,4], 1 and 2 hashed (computed 4), then is freed */
static struct kvc_seq *hashed_two_of_four(void)
{
	struct kvc_seq *a = seq_new("1 2 3 4 5 6 7 8");

	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]");
	EXPECT_FREEQ("[5,6,7,8,9]");
	COMPUTED(a, 4); /* positions 0,1 end at 2,4 <= 4 */
	EXPECT_STATS("free=5 used=4 cached=2");
	SEQ_FREE(a); /* release order 4,3,2,1 */
	return a;
}

static void test_release_split(void **state)
{
	struct kvc_seq *b;

	(void)state;
	pool_new(10, 2, "full");
	hashed_two_of_four();
	/* unhashed 4,3 as one run before the head, hashed 2,1 at the tail */
	EXPECT_FREEQ("[4,3,5,6,7,8,9,2,1]");
	EXPECT_STATS("free=9 used=0 cached=2");
	b = seq_new("9 9 9");
	EXPECT_ALLOC(b, 3, 0, false, "ok [4,3]"); /* the first released is popped next */
	SEQ_FREE(b);                              /* release 3,4: run before the head */
	EXPECT_FREEQ("[3,4,5,6,7,8,9,2,1]");
}

static void test_release_append(void **state)
{
	struct kvc_seq *b;

	(void)state;
	pool_new_ex(10, 2, "full", "free_order=append");
	hashed_two_of_four();
	EXPECT_FREEQ("[5,6,7,8,9,4,3,2,1]");
	EXPECT_STATS("free=9 used=0 cached=2");
	b = seq_new("9 9 9");
	EXPECT_ALLOC(b, 3, 0, false, "ok [5,6]");
	SEQ_FREE(b);
	EXPECT_FREEQ("[7,8,9,4,3,2,1,6,5]");
}

static void test_release_caching_off(void **state)
{
	struct kvc_seq *b;

	(void)state;
	pool_new_ex(10, 2, "full", "caching=off");
	{
		struct kvc_seq *a = seq_new("1 2 3 4 5 6 7 8");

		EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]");
		COMPUTED(a, 4); /* nothing is hashed with caching off */
		EXPECT_STATS("free=5 used=4 cached=0");
		SEQ_FREE(a);
	}
	EXPECT_FREEQ("[4,3,2,1,5,6,7,8,9]");
	b = seq_new("1 2 3 4 5");
	EXPECT_HIT(b, "0 []");
	EXPECT_ALLOC(b, 5, 0, true, "ok [4,3,2]");
}

static void test_release_two_groups(void **state)
{
	struct kvc_seq *a;

	(void)state;
	pool_new(12, 2, "full full");
	a = seq_new("1 2 3 4 5 6");
	EXPECT_ALLOC(a, 6, 0, false, "ok [1,2,3] [4,5,6]");
	COMPUTED(a, 4);
	EXPECT_STATS("free=5 used=6 cached=4");
	/* group 0 first: 3 before the head, 2,1 at the tail; then group 1: 6 before, 5,4 after */
	SEQ_FREE(a);
	EXPECT_FREEQ("[6,3,7,8,9,10,11,2,1,5,4]");
}

static void test_touch(void **state)
{
	struct kvc_seq *a, *b, *c;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	COMPUTED(a, 4);
	b = seq_new("1 2 3 4 9");
	EXPECT_HIT(b, "4 [1,2]");
	EXPECT_COST(b, 1, 0, true, 1); /* cdiv(5,2)=3 - 2 hit; 1,2 are in use */
	EXPECT_ALLOC(b, 1, 0, true, "ok [4]");
	EXPECT_TABLE(b, "[1,2,4]");
	EXPECT_FREEQ("[5,6,7,8,9]");
	EXPECT_STATS("free=5 used=4 cached=2");
	SEQ_FREE(a); /* 3 -> 0 refs; 2,1 -> 1 ref each */
	EXPECT_FREEQ("[3,5,6,7,8,9]");
	SEQ_FREE(b); /* 4 before the head, 2,1 at the tail */
	EXPECT_FREEQ("[4,3,5,6,7,8,9,2,1]");
	c = seq_new("1 2 3 4 7");
	EXPECT_HIT(c, "4 [1,2]");
	EXPECT_COST(c, 1, 0, true, 3); /* 1 new + the two free hit blocks */
	EXPECT_ALLOC(c, 1, 0, true, "ok [4]");
	EXPECT_TABLE(c, "[1,2,4]");
	EXPECT_FREEQ("[3,5,6,7,8,9]"); /* touch took 2,1 out of the queue */
	EXPECT_STATS("free=6 used=3 cached=2");
}

static void test_lazy_eviction(void **state)
{
	struct kvc_seq *a, *b, *c;

	(void)state;
	pool_new(6, 2, "full");
	a = seq_new("1 2 3 4");
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2]");
	COMPUTED(a, 4);
	SEQ_FREE(a);
	EXPECT_FREEQ("[3,4,5,2,1]");
	EXPECT_STATS("free=5 used=0 cached=2");
	b = seq_new("1 2 3 4 5");
	EXPECT_HIT(b, "4 [1,2]"); /* freed cached blocks stay hittable */
	c = seq_new("7*8");
	EXPECT_ALLOC(c, 8, 0, false, "ok [3,4,5,2]");
	EXPECT_STATS("free=1 used=4 cached=1"); /* 2 lost its hash when popped */
	EXPECT_HIT(b, "2 [1]");
}

static void test_evict(void **state)
{
	struct kvc_seq *a, *b, *c, *d;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3 4 5 6 7");
	EXPECT_ALLOC(a, 7, 0, false, "ok [1,2,3,4]");
	COMPUTED(a, 6);
	EXPECT_STATS("free=5 used=4 cached=3");
	EXPECT_EVICT(1, 2); /* in use, hashed */
	EXPECT_STATS("free=5 used=4 cached=2");
	EXPECT_FREEQ("[5,6,7,8,9]");
	b = seq_new("1 2 3 4 5 6 7");
	EXPECT_HIT(b, "2 [1]"); /* stops at position 1 */
	EXPECT_EVICT(0, 4);     /* no hash: ignored */
	EXPECT_EVICT(0, 2);
	EXPECT_EVICT(-EINVAL, 0);
	EXPECT_EVICT(-EINVAL, 10);
	EXPECT_EVICT(-EINVAL, 3, 10); /* nothing evicted */
	EXPECT_STATS("free=5 used=4 cached=2");
	EXPECT_EVICT(2, 1, 3);
	EXPECT_STATS("free=5 used=4 cached=0");
	SEQ_FREE(a); /* all unhashed now: one run before the head */
	EXPECT_FREEQ("[4,3,2,1,5,6,7,8,9]");

	/* evicting a free block does not move it */
	c = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(c, 5, 0, false, "ok [4,3,2]");
	COMPUTED(c, 4); /* hashes 4 (pos 0), 3 (pos 1) */
	SEQ_FREE(c);    /* 2 before the head, 3,4 at the tail */
	EXPECT_FREEQ("[2,1,5,6,7,8,9,3,4]");
	EXPECT_EVICT(1, 3);
	EXPECT_FREEQ("[2,1,5,6,7,8,9,3,4]");
	EXPECT_STATS("free=9 used=0 cached=1");
	d = seq_new("1 2 3 4 5");
	EXPECT_HIT(d, "2 [4]");
}

static void test_evicted_position_not_rehashed(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(10, 2, "full");
	a = seq_new("1 2 3 4 5 6");
	EXPECT_ALLOC(a, 6, 0, false, "ok [1,2,3]");
	COMPUTED(a, 2);
	EXPECT_STATS("free=6 used=3 cached=1");
	EXPECT_EVICT(1, 1);
	COMPUTED(a, 6); /* positions 1,2 only */
	EXPECT_STATS("free=6 used=3 cached=2");
	SEQ_FREE(a); /* 3,2 hashed -> tail; 1 -> before the head */
	EXPECT_FREEQ("[1,4,5,6,7,8,9,3,2]");
	b = seq_new("1 2 3 4 5 6 7");
	EXPECT_HIT(b, "0 []");
}

static void test_reset(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(10, 2, "full");
	EXPECT_RESET(0);
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	COMPUTED(a, 4);
	EXPECT_RESET(-EBUSY);
	EXPECT_STATS("free=6 used=3 cached=2");
	b = seq_new("1 2 3 4 9");
	EXPECT_HIT(b, "4 [1,2]");
	SEQ_FREE(a);
	EXPECT_FREEQ("[3,4,5,6,7,8,9,2,1]");
	EXPECT_RESET(0);
	EXPECT_STATS("free=9 used=0 cached=0");
	EXPECT_FREEQ("[3,4,5,6,7,8,9,2,1]");
	EXPECT_HIT(b, "0 []");
	EXPECT_ALLOC(b, 5, 0, true, "ok [3,4,5]");
	EXPECT_RESET(-EBUSY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_config_defaults),
		T(test_config_validation),
		T(test_initial_queue),
		T(test_null_block_never_handed_out),
		T(test_release_split),
		T(test_release_append),
		T(test_release_caching_off),
		T(test_release_two_groups),
		T(test_touch),
		T(test_lazy_eviction),
		T(test_evict),
		T(test_evicted_position_not_rehashed),
		T(test_reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
