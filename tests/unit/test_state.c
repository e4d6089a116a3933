/* SPDX-License-Identifier: MIT */
/*
 * A pool carried across a restart (kvc_pool_save / kvc_pool_restore): the
 * new pool's free queue, cached keys and their copies' order are the old
 * one's, so every lookup and every allocation after gives the same blocks;
 * a pool with a block in use is not saved; a restore takes only a new pool
 * and a list of every block once.
 */
#include "helpers.h"

#define NB 24

/* What the pool decides from here: its queue and stats, and each probe's hit. */
static void describe(char *buf, size_t len, const char *const *probes)
{
	fmt_snapshot(buf, len);
	for (const char *const *p = probes; *p; p++) {
		struct kvc_seq *s = seq_new(*p);
		struct kvc_hit h;
		size_t o = strlen(buf);

		assert_int_equal(kvc_lookup(s, &h), 0);
		snprintf(buf + o, len - o, " | %u", h.tokens);
		for (uint32_t g = 0; g < num_groups(); g++) {
			strncat(buf, " ", len - strlen(buf) - 1);
			fmt_ids(buf, len, h.nids[g] ? h.ids[g] : NULL, h.nids[g]);
		}
		kvc_seq_destroy(s);
	}
}

/* P replaced by a new pool of @groups restored from @saved: it describes itself as @before. */
static void restarted(const char *groups, const struct kvc_saved_block *saved,
		      const char *const *probes_, const char *before)
{
	char after[HBUF];

	pool_teardown(NULL);
	pool_new(NB, 4, groups);
	assert_int_equal(kvc_pool_restore(P, saved, NB - 1), 0);
	check_pool();
	describe(after, sizeof(after), probes_);
	assert_string_equal(after, before);
}

/* ALLOC with the cache of @n tokens, whatever it hands out. */
static void alloc_ok(struct kvc_seq *s, uint32_t n)
{
	struct kvc_alloc_req req = { .new_tokens = n, .use_cache = true };
	struct kvc_alloc_res res;

	assert_int_equal(kvc_alloc(s, &req, &res), 0);
	copies_done();
	check_pool();
}

/* A prompt computed whole and let go: its full blocks cached. */
static void served(const char *toks)
{
	struct kvc_seq *s = seq_new(toks);
	uint32_t n = parse_tokens(toks, (uint32_t[HBUF]){ 0 }, HBUF);

	alloc_ok(s, n);
	COMPUTED(s, n);
	kvc_seq_destroy(s);
	check_pool();
}

static const char *const probes[] = {
	"1 2 3 4 5 6 7 8 9", "1 2 3 4 5 6 7 8 10 11 12 13 14", "20 21 22 23 24 25 26 27 28",
	"40 41 42 43 44", "1 2 3 4 99", NULL,
};

static void test_a_restored_pool_answers_as_the_saved_one(void **state)
{
	struct kvc_saved_block saved[NB - 1];
	char before[HBUF], old_alloc[HBUF], new_alloc[HBUF];
	struct kvc_seq *a, *b, *s;

	(void)state;
	pool_new(NB, 4, "full swa:8");
	served("1 2 3 4 5 6 7 8 9");
	served("1 2 3 4 5 6 7 8 10 11 12 13 14");
	served("20 21 22 23 24 25 26 27 28");
	/* Two copies of one key: computed side by side, neither hitting the other. */
	a = seq_new("40 41 42 43 44");
	b = seq_new("40 41 42 43 44");
	alloc_ok(a, 5);
	alloc_ok(b, 5);
	COMPUTED(b, 5);
	COMPUTED(a, 5);
	kvc_seq_destroy(a);
	kvc_seq_destroy(b);
	served("60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76"); /* some evicted */
	describe(before, sizeof(before), probes);
	assert_int_equal(kvc_pool_save(P, saved), 0);
	/* What the old pool hands out next, and hits, for a new prompt. */
	s = seq_new("1 2 3 4 5 6 7 8 80 81 82 83 84 85 86 87 88 89 90 91 92");
	alloc_ok(s, 21);
	fmt_tables(old_alloc, sizeof(old_alloc), s);
	kvc_seq_destroy(s);
	restarted("full swa:8", saved, probes, before);
	s = seq_new("1 2 3 4 5 6 7 8 80 81 82 83 84 85 86 87 88 89 90 91 92");
	alloc_ok(s, 21);
	fmt_tables(new_alloc, sizeof(new_alloc), s);
	assert_string_equal(new_alloc, old_alloc);
	kvc_seq_destroy(s);
}

/* Two copies of one key: the newer is rank 1, and a lookup hits the older, before and after. */
static void test_a_keys_copies_keep_their_order(void **state)
{
	static const char *const probe[] = { "40 41 42 43 44", NULL };
	struct kvc_saved_block saved[NB - 1];
	char before[HBUF];
	uint32_t ranks[2] = { 0, 0 };
	struct kvc_seq *a, *b;

	(void)state;
	pool_new(NB, 4, "full");
	a = seq_new("40 41 42 43 44");
	b = seq_new("40 41 42 43 44");
	alloc_ok(a, 5);
	alloc_ok(b, 5);
	COMPUTED(b, 5); /* b's block gets the key first: the older copy */
	COMPUTED(a, 5);
	kvc_seq_destroy(a); /* a's block goes to the queue first */
	kvc_seq_destroy(b);
	describe(before, sizeof(before), probe);
	assert_int_equal(kvc_pool_save(P, saved), 0);
	for (uint32_t i = 0; i < NB - 1; i++)
		if (saved[i].hashed)
			ranks[saved[i].rank]++;
	assert_int_equal(ranks[0], 1);
	assert_int_equal(ranks[1], 1);
	restarted("full", saved, probe, before);
	assert_string_equal(strchr(before, '|'), "| 4 [3]"); /* b's block, not a's (1) */
}

static void test_a_pool_in_use_is_not_saved(void **state)
{
	struct kvc_saved_block saved[NB - 1];
	struct kvc_seq *s;

	(void)state;
	pool_new(NB, 4, "full");
	s = seq_new("1 2 3 4 5");
	alloc_ok(s, 5);
	assert_int_equal(kvc_pool_save(P, saved), -EBUSY);
	kvc_seq_free(s);
	assert_int_equal(kvc_pool_save(P, saved), 0);
	kvc_seq_destroy(s);
}

static void test_a_restore_takes_every_block_once_into_a_new_pool(void **state)
{
	struct kvc_saved_block saved[NB - 1], bad[NB - 1];
	struct kvc_seq *s;

	(void)state;
	pool_new(NB, 4, "full");
	served("1 2 3 4 5 6 7 8 9");
	assert_int_equal(kvc_pool_save(P, saved), 0);
	pool_teardown(NULL);
	pool_new(NB, 4, "full");
	assert_int_equal(kvc_pool_restore(P, saved, NB - 2), -EINVAL);
	memcpy(bad, saved, sizeof(bad));
	bad[3].id = bad[4].id;
	assert_int_equal(kvc_pool_restore(P, bad, NB - 1), -EINVAL);
	memcpy(bad, saved, sizeof(bad));
	bad[5].id = NB;
	assert_int_equal(kvc_pool_restore(P, bad, NB - 1), -EINVAL);
	memcpy(bad, saved, sizeof(bad));
	bad[0].id = 0;
	assert_int_equal(kvc_pool_restore(P, bad, NB - 1), -EINVAL);
	memcpy(bad, saved, sizeof(bad));
	bad[2].group = 1;
	assert_int_equal(kvc_pool_restore(P, bad, NB - 1), -EINVAL);
	/* Refusals changed nothing: a new pool still. */
	check_pool();
	EXPECT_STATS("free=23 used=0 cached=0");
	s = seq_new("7 7 7 7 7");
	assert_int_equal(kvc_pool_restore(P, saved, NB - 1), -EBUSY); /* a sequence */
	kvc_seq_destroy(s);
	assert_int_equal(kvc_pool_restore(P, saved, NB - 1), 0);
	EXPECT_STATS("free=23 used=0 cached=2");
	assert_int_equal(kvc_pool_restore(P, saved, NB - 1), -EBUSY); /* keys now */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_a_restored_pool_answers_as_the_saved_one),
		T(test_a_keys_copies_keep_their_order),
		T(test_a_pool_in_use_is_not_saved),
		T(test_a_restore_takes_every_block_once_into_a_new_pool),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
