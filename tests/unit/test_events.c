/* SPDX-License-Identifier: MIT */
/*
 * What the prefix cache announces to a KV events publisher
 * (kvc_pool_set_events): a key's first cached copy (stored, with its position,
 * parent key and tokens), its last copy forgotten (removed), a reset
 * (cleared). The log below writes "S<group>:<pos>(<tokens>)" and "R<group>:<pos>"
 * (the position the key was stored at) and "C", and checks each stored key's
 * parent against the key stored one position before.
 */
#include "helpers.h"

#define LOG_MAX 64

static struct {
	char text[HBUF];
	uint32_t n;
	uint32_t group[LOG_MAX], pos[LOG_MAX];
	struct kvc_hash key[LOG_MAX];
} ev;

static bool same(const struct kvc_hash *a, const struct kvc_hash *b)
{
	return a->lo == b->lo && a->hi == b->hi;
}

static void log_add(const char *s)
{
	size_t o = strlen(ev.text);

	snprintf(ev.text + o, sizeof(ev.text) - o, "%s%s", o ? " " : "", s);
}

static void on_stored(void *ctx, uint32_t group, uint32_t pos, const struct kvc_hash *key,
		      const struct kvc_hash *parent, const uint32_t *tokens)
{
	char s[64];
	uint32_t bs = kvc_pool_config(P)->block_size;
	int n;

	assert_ptr_equal(ctx, &ev);
	/* The parent is the key stored last one position before; none for block 0. */
	assert_true((pos == 0) == (parent == NULL));
	for (uint32_t i = ev.n; parent && i-- > 0;) {
		if (ev.group[i] == group && ev.pos[i] == pos - 1) {
			assert_true(same(&ev.key[i], parent));
			break;
		}
	}
	n = snprintf(s, sizeof(s), "S%u:%u(", group, pos);
	for (uint32_t i = 0; i < bs; i++)
		n += snprintf(s + n, sizeof(s) - (size_t)n, "%s%u", i ? "," : "", tokens[i]);
	snprintf(s + n, sizeof(s) - (size_t)n, ")");
	log_add(s);
	assert_true(ev.n < LOG_MAX);
	ev.group[ev.n] = group;
	ev.pos[ev.n] = pos;
	ev.key[ev.n++] = *key;
}

static void on_removed(void *ctx, uint32_t group, const struct kvc_hash *key)
{
	char s[32];
	uint32_t i = 0;

	assert_ptr_equal(ctx, &ev);
	while (i < ev.n && !(ev.group[i] == group && same(&ev.key[i], key)))
		i++;
	assert_true(i < ev.n); /* only what was stored is removed */
	snprintf(s, sizeof(s), "R%u:%u", group, ev.pos[i]);
	log_add(s);
}

static void on_cleared(void *ctx)
{
	assert_ptr_equal(ctx, &ev);
	log_add("C");
}

static const struct kvc_event_ops ops = { on_stored, on_removed, on_cleared };

static void events_pool(uint32_t n, uint32_t bs, const char *groups)
{
	memset(&ev, 0, sizeof(ev));
	pool_new(n, bs, groups);
	kvc_pool_set_events(P, &ops, &ev);
}

static void expect_events_at(const char *exp, const char *file, int line)
{
	_assert_string_equal(ev.text, exp, file, line);
	ev.text[0] = '\0';
}
#define EXPECT_EVENTS(exp) expect_events_at(exp, __FILE__, __LINE__)

static void test_events_commit_and_hand_out(void **state)
{
	struct kvc_seq *a, *b, *c;

	(void)state;
	events_pool(6, 2, "full");
	a = seq_new("1 2 3 4 5 6 7");
	EXPECT_ALLOC(a, 7, 0, false, "ok [1,2,3,4]");
	EXPECT_EVENTS(""); /* nothing before the KV is committed */
	COMPUTED(a, 4);
	EXPECT_EVENTS("S0:0(1,2) S0:1(3,4)");
	COMPUTED(a, 7);
	EXPECT_EVENTS("S0:2(5,6)"); /* the last, partial block is never cached */
	/* A second sequence computing the same blocks elsewhere: copies, not news. */
	b = seq_new("1 2 3 4 9");
	EXPECT_ALLOC(b, 1, 0, true, "ok [5]");
	EXPECT_EVENTS("");
	SEQ_FREE(a);
	SEQ_FREE(b);
	EXPECT_EVENTS("");
	/* The free queue hands cached blocks out in its order: each key goes with its block. */
	EXPECT_FREEQ("[5,4,3,2,1]");
	c = seq_new("20 21 22 23 24 25 26 27");
	EXPECT_ALLOC(c, 8, 0, false, "ok [5,4,3,2]");
	EXPECT_EVENTS("R0:2 R0:1");
	COMPUTED(c, 8);
	EXPECT_EVENTS("S0:0(20,21) S0:1(22,23) S0:2(24,25) S0:3(26,27)");
}

static void test_events_duplicates_announced_once(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	events_pool(8, 2, "full");
	/* Two sequences compute the same prompt at once: two copies of each key. */
	a = seq_new("1 2 3 4 5");
	b = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, true, "ok [1,2,3]");
	EXPECT_ALLOC(b, 5, 0, true, "ok [4,5,6]");
	COMPUTED(a, 5);
	COMPUTED(b, 5);
	EXPECT_EVENTS("S0:0(1,2) S0:1(3,4)");
	/* One copy evicted: the key is still here. The other too: gone. */
	EXPECT_EVICT(2, 1, 2);
	EXPECT_EVENTS("");
	EXPECT_EVICT(2, 4, 5);
	EXPECT_EVENTS("R0:0 R0:1");
	SEQ_FREE(a);
	SEQ_FREE(b);
}

static void test_events_reset(void **state)
{
	struct kvc_seq *a;

	(void)state;
	events_pool(8, 2, "full");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	COMPUTED(a, 5);
	EXPECT_EVENTS("S0:0(1,2) S0:1(3,4)");
	EXPECT_RESET(-EBUSY);
	EXPECT_EVENTS("");
	SEQ_FREE(a);
	EXPECT_RESET(0);
	EXPECT_EVENTS("C");
}

static void test_events_hybrid_group_by_group(void **state)
{
	struct kvc_seq *a;

	(void)state;
	/* Each group's blocks in order, the groups in order; a window's too (computed, cached). */
	events_pool(16, 2, "full swa:4");
	a = seq_new("1 2 3 4 5 6 7 8 9");
	EXPECT_ALLOC(a, 9, 0, false, "ok [1,2,3,4,5] [6,7,8,9,10]");
	COMPUTED(a, 9);
	EXPECT_EVENTS("S0:0(1,2) S0:1(3,4) S0:2(5,6) S0:3(7,8) "
		      "S1:0(1,2) S1:1(3,4) S1:2(5,6) S1:3(7,8)");
	/* Out of the window, swa's first blocks went back to the queue, still cached. */
	EXPECT_EVICT(2, 6, 7);
	EXPECT_EVENTS("R1:0 R1:1");
	SEQ_FREE(a);
}

static bool tier_has_all(void *ctx, uint32_t group, const struct kvc_hash *key)
{
	(void)ctx;
	(void)group;
	(void)key;
	return true;
}

static void tier_ignores(void *ctx, uint32_t id, bool handed_out)
{
	(void)ctx;
	(void)id;
	(void)handed_out;
}

static const struct kvc_tier_ops tier_all = { .has = tier_has_all, .leaving = tier_ignores };

static void test_events_promotion_is_a_first_copy(void **state)
{
	struct kvc_seq *a, *b;

	(void)state;
	/*
	 * A key promoted from the tier gets its first copy in the pool: stored, as
	 * any other (the publisher, which knows the tier had it, says nothing new).
	 */
	events_pool(8, 2, "full");
	a = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(a, 5, 0, false, "ok [1,2,3]");
	COMPUTED(a, 5);
	SEQ_FREE(a);
	EXPECT_EVICT(2, 1, 2);
	EXPECT_EVENTS("S0:0(1,2) S0:1(3,4) R0:0 R0:1");
	kvc_pool_set_tier(P, &tier_all, NULL);
	b = seq_new("1 2 3 4 5");
	EXPECT_ALLOC(b, 1, 0, true, "ok [5]");
	EXPECT_EVENTS("S0:0(1,2) S0:1(3,4)");
	SEQ_FREE(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_events_commit_and_hand_out),
		T(test_events_duplicates_announced_once),
		T(test_events_reset),
		T(test_events_hybrid_group_by_group),
		T(test_events_promotion_is_a_first_copy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
