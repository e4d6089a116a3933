/* SPDX-License-Identifier: MIT */
/*
 * A lower tier under the prefix cache (kvc_pool_set_tier): lookups and ALLOC
 * count a position the tier holds as a hit, with vLLM's rules per kind; ALLOC
 * gives each needed tier position a block off the free queue, caches its key
 * at once and lists it as a promotion. The tier here is a list of keys the
 * test fills from blocks it has seen cached.
 */
#include "helpers.h"

#define TIER_MAX 64

static struct {
	uint32_t n, asked;
	uint32_t group[TIER_MAX];
	struct kvc_hash key[TIER_MAX];
	char left[HBUF]; /* the leaving hook's calls: "3h" handed out, "2t" taken by a hit... */
} tier;

static bool tier_has(void *ctx, uint32_t group, const struct kvc_hash *key)
{
	assert_ptr_equal(ctx, &tier);
	tier.asked++;
	for (uint32_t i = 0; i < tier.n; i++)
		if (tier.group[i] == group && tier.key[i].lo == key->lo && tier.key[i].hi == key->hi)
			return true;
	return false;
}

/* As the daemon's tier reads it: the block still as it was in the queue. */
static void tier_leaving(void *ctx, uint32_t id, bool handed_out)
{
	struct kvc_block_state st;
	size_t o = strlen(tier.left);

	assert_ptr_equal(ctx, &tier);
	assert_int_equal(kvc_block_state(P, id, &st), 0);
	assert_true(st.queued && st.ref == 0);
	snprintf(tier.left + o, sizeof(tier.left) - o, "%s%u%c%s%s", o ? " " : "", id,
		 handed_out ? 'h' : 't', st.hashed ? "#" : "", st.shared ? "+" : "");
}

static const struct kvc_tier_ops tier_ops = { .has = tier_has, .leaving = tier_leaving };

/* Block @id's key goes to the tier, as a copy down would put it there. */
static void tier_store(uint32_t id)
{
	struct kvc_block_state st;

	assert_int_equal(kvc_block_state(P, id, &st), 0);
	assert_true(st.hashed);
	assert_true(tier.n < TIER_MAX);
	tier.group[tier.n] = st.group;
	tier.key[tier.n++] = st.key;
}

static struct kvc_pool *tier_pool_ex(uint32_t n, uint32_t bs, const char *groups,
				     const char *opts)
{
	memset(&tier, 0, sizeof(tier));
	pool_new_ex(n, bs, groups, opts);
	kvc_pool_set_tier(P, &tier_ops, &tier);
	return P;
}
#define tier_pool(n, bs, groups) tier_pool_ex(n, bs, groups, NULL)

/* "g:pos->block" for each promotion of the last EXPECT_ALLOC, and its keys checked. */
static void expect_promoted_at(const char *exp, uint32_t from, const char *file, int line)
{
	char got[HBUF] = "";

	for (uint32_t i = 0; i < last_res.promoted; i++) {
		const struct kvc_promotion *p = &last_res.promotions[i];
		struct kvc_block_state st;
		size_t o = strlen(got);

		snprintf(got + o, sizeof(got) - o, "%s%u:%u->%u%s", i ? " " : "", p->group, p->pos,
			 p->block, p->ring ? "r" : "");
		_assert_int_equal(kvc_block_state(P, p->block, &st), 0, file, line);
		_assert_true(tier_has(&tier, p->group, &p->key), "key in the tier", file, line);
		if (p->ring) {
			/* A ring's block, in use by the sequence: never cached. */
			_assert_true(!st.hashed && st.ref == 1 && !st.queued, "ring block", file,
				     line);
			continue;
		}
		/* Cached at once under the key the tier holds, in use by the sequence. */
		_assert_true(st.hashed && st.ref == 1 && !st.queued, "promoted block", file, line);
		_assert_true(st.key.lo == p->key.lo && st.key.hi == p->key.hi, "key", file, line);
	}
	_assert_string_equal(got, exp, file, line);
	_assert_int_equal(last_res.promoted_from, from, file, line);
}
#define EXPECT_PROMOTED(exp, from) expect_promoted_at(exp, from, __FILE__, __LINE__)

static void test_tier_full_prefix_promoted(void **state)
{
	struct kvc_seq *a, *b, *c;
	uint32_t gen;
	struct kvc_block_state st;

	(void)state;
	tier_pool(8, 2, "full");
	a = seq_new("1 2 3 4 5 6 7 8");
	EXPECT_ALLOC(a, 8, 0, false, "ok [1,2,3,4]");
	COMPUTED(a, 8);
	for (uint32_t id = 1; id <= 4; id++)
		tier_store(id);
	SEQ_FREE(a);
	/* The pool loses blocks 2..4 (reused elsewhere, say); the tier still has them. */
	EXPECT_EVICT(3, 2, 3, 4);
	b = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(b, "8 [1,4294967295,4294967295,4294967295]");
	EXPECT_COST(b, 1, 0, true, 5); /* 1 touched, 3 promoted, 1 new */
	assert_int_equal(kvc_block_state(P, 5, &st), 0);
	gen = st.gen;
	EXPECT_ALLOC(b, 1, 0, true, "ok [4]");
	EXPECT_TABLE(b, "[1,5,6,7,4]");
	EXPECT_PROMOTED("0:1->5 0:2->6 0:3->7", 1);
	assert_int_equal(last_res.hit_tokens, 8);
	assert_int_equal(last_res.taken, 5);
	assert_int_equal(kvc_block_state(P, 5, &st), 0);
	assert_int_equal(st.gen, gen + 1); /* handed out once more */
	EXPECT_STATS("free=2 used=5 cached=4");
	/* A second sequence finds the promoted blocks in the pool: nothing is promoted twice. */
	c = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(c, "8 [1,5,6,7]");
	EXPECT_ALLOC(c, 1, 0, true, "ok [3]");
	EXPECT_PROMOTED("", 4);
	EXPECT_TABLE(c, "[1,5,6,7,3]");
}

static void test_tier_pool_first(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	tier_pool(8, 2, "full");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	COMPUTED(a, 5);
	tier_store(1);
	tier_store(2);
	SEQ_FREE(a);
	/* Both in the pool and the tier: the pool's blocks, and the tier is not asked. */
	tier.asked = 0;
	b = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(b, 1, 0, true, "ok [3]");
	EXPECT_PROMOTED("", 2);
	EXPECT_TABLE(b, "[1,2,3]");
	assert_int_equal(tier.asked, 0);
}

static void test_tier_swa_reads_the_window_only(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	/* swa:4 with bs 2: a hit needs cdiv(3, 2) = 2 blocks before its end. */
	tier_pool(16, 2, "swa:4");
	a = seq_new("1 2 3 4 5 6 7 8 9 10 11 12");
	EXPECT_ALLOC(a, 12, 0, false, "ok [1,2,3,4,5,6]");
	COMPUTED(a, 8); /* 1..4 hashed; positions 0..1 dropped */
	for (uint32_t id = 1; id <= 4; id++)
		tier_store(id);
	COMPUTED(a, 12);
	tier_store(5);
	tier_store(6);
	SEQ_FREE(a);
	EXPECT_RESET(0);
	tier.asked = 0;
	b = seq_new("1 2 3 4 5 6 7 8 9 10 11 12 13");
	EXPECT_HIT(b, "12 [0,0,0,0,4294967295,4294967295]");
	assert_int_equal(tier.asked, 2); /* from the end down: a full window at once */
	EXPECT_ALLOC(b, 1, 0, true, "ok [9]");
	EXPECT_PROMOTED("0:4->7 0:5->8", 4);
	EXPECT_TABLE(b, "[0,0,0,0,7,8,9]");
}

static void test_tier_hybrid_groups_mix(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	tier_pool(16, 2, "full swa:4");
	a = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_ALLOC(a, 9, 0, false, "ok [1,2,3,4,5] [6,7,8,9,10]");
	COMPUTED(a, 8);
	/* full: 1..4; swa: only what the window kept, 8 (pos 2) and 9 (pos 3). */
	for (uint32_t id = 1; id <= 4; id++)
		tier_store(id);
	tier_store(8);
	tier_store(9);
	SEQ_FREE(a);
	/* The pool keeps full's blocks 1, 2 and swa's 9; the rest only the tier has. */
	EXPECT_EVICT(3, 3, 4, 8);
	b = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(b, "8 [1,2,4294967295,4294967295] [0,0,4294967295,9]");
	EXPECT_ALLOC(b, 1, 0, true, "ok [12] [13]");
	EXPECT_PROMOTED("0:2->10 0:3->5 1:2->11", 2);
	EXPECT_TABLE(b, "[1,2,10,5,12] [0,0,11,9,13]");
}

/* Promotion pops only after every hit block is out of the queue: a pop never takes one. */
static void test_tier_pop_spares_hit_blocks(void **state)
{
	struct kvc_seq *a, *y, *z, *b;

	(void)state;
	tier_pool(4, 2, "full");
	a = seq_new("1 2 3 4");
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2]");
	COMPUTED(a, 4);
	tier_store(1);
	EXPECT_EVICT(1, 1);
	SEQ_FREE(a);
	EXPECT_FREEQ("[1,3,2]");
	y = seq_new("7 8");
	EXPECT_ALLOC(y, 2, 0, false, "ok [1]");
	COMPUTED(y, 2);
	z = seq_new("9 10");
	EXPECT_ALLOC(z, 2, 0, false, "ok [3]");
	COMPUTED(z, 2);
	SEQ_FREE(y);
	SEQ_FREE(z);
	EXPECT_FREEQ("[2,1,3]"); /* the hit block 2 at the head */
	b = seq_new("1 2 3 4 5");
	EXPECT_HIT(b, "4 [4294967295,2]");
	EXPECT_ALLOC(b, 1, 0, true, "ok [3]");
	EXPECT_PROMOTED("0:0->1", 0);
	EXPECT_TABLE(b, "[1,2,3]");
	EXPECT_FREEQ("[]");
}

/* The admission hook sees promotions as popped blocks, tier positions in its ids. */
static uint32_t admit_popped;
static int admit_count(void *owner, const struct kvc_admit *a)
{
	(void)owner;
	admit_popped = a->popped;
	assert_int_equal(a->hit_ids[0][0], KVC_TIER_BLOCK);
	return -EDQUOT;
}

static void test_tier_admission_counts_promotions(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	tier_pool(8, 2, "full");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	COMPUTED(a, 5);
	tier_store(1);
	tier_store(2);
	SEQ_FREE(a);
	EXPECT_RESET(0);
	kvc_pool_set_admit_hook(P, admit_count);
	b = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(b, 1, 0, true, "error -122");
	assert_int_equal(admit_popped, 3);
	EXPECT_STATS("free=7 used=0 cached=0"); /* refused: nothing taken, nothing cached */
}

static void test_tier_block_state(void **state)
{
	struct kvc_block_state st;
	struct kvc_seq *a;

	(void)state;
	tier_pool(8, 2, "full swa:4");
	assert_int_equal(kvc_block_state(P, 0, &st), -EINVAL);
	assert_int_equal(kvc_block_state(P, 8, &st), -EINVAL);
	assert_int_equal(kvc_block_state(P, 1, &st), 0);
	assert_true(!st.hashed && st.queued && st.gen == 0 && st.ref == 0);
	a = seq_new("1 2 3");
	EXPECT_ALLOC(a, 3, 0, false, "ok [1,2] [3,4]");
	COMPUTED(a, 2);
	assert_int_equal(kvc_block_state(P, 3, &st), 0);
	assert_true(st.hashed && !st.queued && st.gen == 1 && st.ref == 1 && st.group == 1);
}

/* The free queue from @id on, as kvc_pool_queue_next walks it: "[a,b,...]". */
static void expect_queue_from(uint32_t id, const char *exp, const char *file, int line)
{
	char got[HBUF] = "[";

	for (id = kvc_pool_queue_next(P, id); id != KVC_NULL_BLOCK; id = kvc_pool_queue_next(P, id))
		snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%u", got[1] ? "," : "", id);
	strcat(got, "]");
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_QUEUE_FROM(id, exp) expect_queue_from(id, exp, __FILE__, __LINE__)

/*
 * The tier hears of every block leaving the free queue, as it was: a pop for
 * new data (its hash, if any, still there), a hit taking a cached block back;
 * a hit on a block already in use says nothing. uses counts both.
 */
static void test_tier_leaving_hook(void **state)
{
	struct kvc_block_state st;
	struct kvc_seq *a, *b, *c;

	(void)state;
	tier_pool(6, 2, "full");
	EXPECT_QUEUE_FROM(0, "[1,2,3,4,5]");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	assert_string_equal(tier.left, "1h 2h 3h");
	COMPUTED(a, 5);
	SEQ_FREE(a);
	/* Split order: the unhashed 3 to the head, the cached ones to the tail, last first. */
	EXPECT_QUEUE_FROM(0, "[3,4,5,2,1]");
	EXPECT_QUEUE_FROM(4, "[5,2,1]");
	EXPECT_QUEUE_FROM(1, "[]");
	tier.left[0] = '\0';
	b = seq_new("1 2 3 4 6");
	EXPECT_ALLOC(b, 1, 0, true, "ok [3]");
	assert_string_equal(tier.left, "1t# 2t# 3h");
	EXPECT_QUEUE_FROM(2, "[]"); /* in use: not in the queue */
	assert_int_equal(kvc_block_state(P, 1, &st), 0);
	assert_true(st.uses == 2 && st.gen == 1 && st.hashed && !st.shared);
	tier.left[0] = '\0';
	c = seq_new("1 2 3 4 7");
	EXPECT_ALLOC(c, 1, 0, true, "ok [4]");
	assert_string_equal(tier.left, "4h"); /* 1 and 2 were in use already */
	SEQ_FREE(b);
	SEQ_FREE(c);
	/* A pop of a cached block says so while the block still carries its key. */
	EXPECT_FREEQ("[4,3,5,2,1]");
	tier.left[0] = '\0';
	a = seq_new("9 9 9 9 9 9 9 9 9 9");
	EXPECT_ALLOC(a, 10, 0, false, "ok [4,3,5,2,1]");
	assert_string_equal(tier.left, "4h 3h 5h 2h# 1h#");
}

/* Two blocks carry one key: the pop of one says the key is still in the pool. */
static void test_tier_leaving_shared_key(void **state)
{
	struct kvc_seq *a, *b, *c;

	(void)state;
	tier_pool(6, 2, "full");
	a = seq_new("1 2 3");
	b = seq_new("1 2 3");
	EXPECT_ALLOC(a, 3, 0, false, "ok [1,2]");
	EXPECT_ALLOC(b, 3, 0, false, "ok [3,4]");
	COMPUTED(a, 2);
	COMPUTED(b, 2);
	SEQ_FREE(a);
	SEQ_FREE(b);
	EXPECT_FREEQ("[4,2,5,1,3]");
	tier.left[0] = '\0';
	c = seq_new("7 7 7 7 7 7 7 7");
	EXPECT_ALLOC(c, 8, 0, false, "ok [4,2,5,1]");
	assert_string_equal(tier.left, "4h 2h 5h 1h#+");
}

/*
 * A window snapshot the pool lost but the tier holds still hits: its blocks
 * are promoted straight into the new ring's blocks at their ring positions,
 * not cached in the pool; a hit partly in the pool copies that part.
 */
static void test_tier_snapshot_into_ring(void **state)
{
	struct kvc_seq *a, *b, *c;

	(void)state;
	/* cyclic:4, bs 2, S 4: a ring of 4 blocks; the snapshot at 8 is blocks 2 and 3. */
	tier_pool_ex(16, 2, "full cyclic:4", "max_step_tokens=4");
	a = seq_new("1 2 3 4 5 6 7 8");
	EXPECT_ALLOC(a, 4, 0, false, "ok [1,2] [3,4]");
	COMPUTED(a, 4);
	EXPECT_ALLOC(a, 4, 0, false, "ok [5,6] [7,8]");
	COMPUTED(a, 8);
	EXPECT_COPIES("made [7>9,8>10] hit []");
	tier_store(9);
	tier_store(10);
	SEQ_FREE(a);
	/* The pool loses the snapshot's second block; the tier still has it. */
	EXPECT_EVICT(1, 10);
	b = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(b, "8 [1,2,5,6] [9,4294967295]");
	/* 4 + 1 touched, 1 new full block, a ring of 4: the promotion pops nothing of its own. */
	EXPECT_COST(b, 1, 0, true, 10);
	EXPECT_ALLOC(b, 1, 0, true, "ok [8] [7,4,3,11]");
	EXPECT_COPIES("made [] hit [9>3]"); /* ring positions 2 and 3 */
	EXPECT_PROMOTED("1:3->11r", 3);
	assert_int_equal(last_res.hit_tokens, 8);
	EXPECT_SNAPSHOTS("held=1 made=2 hit=2 evicted=1 skipped=0");
	/* Now the tier alone has the snapshot; its key stays the tier's, never the pool's. */
	EXPECT_EVICT(1, 9);
	c = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(c, "8 [1,2,5,6] [4294967295,4294967295]");
	EXPECT_ALLOC(c, 1, 0, true, "ok [12] [13,14,15,10]");
	EXPECT_COPIES("made [] hit []");
	EXPECT_PROMOTED("1:2->15r 1:3->10r", 2);
	EXPECT_SNAPSHOTS("held=0 made=2 hit=4 evicted=2 skipped=0");
	SEQ_FREE(b);
	SEQ_FREE(c);
	EXPECT_STATS("free=15 used=0 cached=4"); /* the full group's 4: rings are never cached */
	c = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_HIT(c, "8 [1,2,5,6] [4294967295,4294967295]");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_tier_leaving_hook),
		T(test_tier_leaving_shared_key),
		T(test_tier_full_prefix_promoted),
		T(test_tier_pool_first),
		T(test_tier_swa_reads_the_window_only),
		T(test_tier_hybrid_groups_mix),
		T(test_tier_pop_spares_hit_blocks),
		T(test_tier_admission_counts_promotions),
		T(test_tier_block_state),
		T(test_tier_snapshot_into_ring),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
