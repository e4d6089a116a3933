/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the kvcore unit tests.
 *
 * Every helper that can change the pool ends with check_pool(), so each test
 * verifies the pool invariants (kvc_pool_check) after every mutating call.
 * Results are compared as text in kvtrace's notation ("[1,0,3]", "ok [4] [5]",
 * "free=3 used=4 cached=2"), so a failure shows expected and actual side by side.
 * The query helpers (EXPECT_HIT, EXPECT_COST) also check that the free queue and
 * the stats are unchanged by the query.
 */
#ifndef KVCORE_TEST_HELPERS_H
#define KVCORE_TEST_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcore.h"

#define HBUF 8192

/* The pool under test; destroyed by pool_teardown after each test. */
static struct kvc_pool *P;
/* The result of the last EXPECT_ALLOC. */
static struct kvc_alloc_res last_res;

static inline void check_pool_at(const char *file, int line)
{
	char why[512] = "";
	int rc;

	if (!P)
		return;
	rc = kvc_pool_check(P, why, sizeof(why));
	if (rc != 0) {
		print_error("kvc_pool_check: %d: %s\n", rc, why);
		_fail(file, line);
	}
}
#define check_pool() check_pool_at(__FILE__, __LINE__)

static inline int pool_teardown(void **state)
{
	(void)state;
	if (P)
		kvc_pool_destroy(P);
	P = NULL;
	return 0;
}
#define T(fn) cmocka_unit_test_teardown(fn, pool_teardown)

/* "full swa:4 rswa:8 chunked:4 cyclic:3" -> cfg->groups */
static inline void cfg_groups(struct kvc_pool_config *cfg, const char *groups)
{
	char buf[256], *save = NULL, *w;

	snprintf(buf, sizeof(buf), "%s", groups);
	cfg->num_groups = 0;
	for (w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		struct kvc_group_spec *g = &cfg->groups[cfg->num_groups++];
		char *colon = strchr(w, ':');

		g->param = colon ? (uint32_t)strtoul(colon + 1, NULL, 10) : 0;
		if (colon)
			*colon = 0;
		if (!strcmp(w, "full"))
			g->kind = KVC_FULL;
		else if (!strcmp(w, "swa"))
			g->kind = KVC_SWA;
		else if (!strcmp(w, "rswa"))
			g->kind = KVC_RSWA;
		else if (!strcmp(w, "chunked"))
			g->kind = KVC_CHUNKED;
		else if (!strcmp(w, "cyclic"))
			g->kind = KVC_CYCLIC;
		else
			fail_msg("bad group '%s'", w);
	}
}

/* "caching=off free_order=append publish=alloc max_len=6 max_step_tokens=4" */
static inline void cfg_opts(struct kvc_pool_config *cfg, const char *opts)
{
	char buf[256], *save = NULL, *w;

	snprintf(buf, sizeof(buf), "%s", opts ? opts : "");
	for (w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		if (!strcmp(w, "caching=off"))
			cfg->caching = false;
		else if (!strcmp(w, "caching=on"))
			cfg->caching = true;
		else if (!strcmp(w, "free_order=append"))
			cfg->free_order = KVC_FREE_APPEND;
		else if (!strcmp(w, "free_order=split"))
			cfg->free_order = KVC_FREE_SPLIT;
		else if (!strcmp(w, "publish=alloc"))
			cfg->publish = KVC_PUBLISH_ALLOC;
		else if (!strcmp(w, "publish=commit"))
			cfg->publish = KVC_PUBLISH_COMMIT;
		else if (!strncmp(w, "max_len=", 8))
			cfg->max_len = (uint32_t)strtoul(w + 8, NULL, 10);
		else if (!strncmp(w, "max_step_tokens=", 16))
			cfg->max_step_tokens = (uint32_t)strtoul(w + 16, NULL, 10);
		else if (!strcmp(w, "snapshots=off"))
			cfg->snapshots = false;
		else if (!strncmp(w, "snapshot_every=", 15))
			cfg->snapshot_every = (uint32_t)strtoul(w + 15, NULL, 10);
		else
			fail_msg("bad option '%s'", w);
	}
}

/* Creates P with @groups and the kvtrace-style options @opts (may be NULL). */
static inline struct kvc_pool *pool_new_ex(uint32_t n, uint32_t bs, const char *groups,
					   const char *opts)
{
	struct kvc_pool_config cfg;
	int rc;

	kvc_pool_config_init(&cfg, n, bs);
	cfg_groups(&cfg, groups);
	cfg_opts(&cfg, opts);
	assert_null(P);
	rc = kvc_pool_create(&cfg, &P);
	assert_int_equal(rc, 0);
	assert_non_null(P);
	check_pool();
	return P;
}
#define pool_new(n, bs, groups) pool_new_ex(n, bs, groups, NULL)

static inline uint32_t num_groups(void)
{
	return kvc_pool_config(P)->num_groups;
}

/* kvtrace TOKENS: "1 2 3*4" -> tokens; returns the count. */
static inline uint32_t parse_tokens(const char *spec, uint32_t *out, uint32_t max)
{
	char buf[HBUF], *save = NULL, *w;
	uint32_t n = 0;

	snprintf(buf, sizeof(buf), "%s", spec);
	for (w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		char *star = strchr(w, '*');
		uint32_t t = (uint32_t)strtoul(w, NULL, 10);
		uint32_t k = star ? (uint32_t)strtoul(star + 1, NULL, 10) : 1;

		while (k--) {
			assert_true(n < max);
			out[n++] = t;
		}
	}
	return n;
}

/* A sequence with prompt @toks, salt @salt (C string or NULL), prefix (-1 = prompt). */
static inline struct kvc_seq *seq_new_ex(const char *toks, const char *salt, int64_t prefix)
{
	static uint32_t tk[HBUF];
	struct kvc_seq *s = NULL;
	uint32_t n = parse_tokens(toks, tk, HBUF);
	int rc = kvc_seq_create(P, tk, n, salt, salt ? strlen(salt) : 0, prefix, &s);

	assert_int_equal(rc, 0);
	assert_non_null(s);
	check_pool();
	return s;
}
#define seq_new(toks) seq_new_ex(toks, NULL, -1)

static inline void seq_add(struct kvc_seq *s, const char *toks)
{
	static uint32_t tk[HBUF];
	uint32_t n = parse_tokens(toks, tk, HBUF);

	assert_int_equal(kvc_seq_append(s, tk, n), 0);
	check_pool();
}

static inline void fmt_ids(char *buf, size_t len, const uint32_t *ids, uint32_t n)
{
	size_t o = strlen(buf);

	o += (size_t)snprintf(buf + o, len - o, "[");
	for (uint32_t i = 0; i < n && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, i ? ",%u" : "%u", ids[i]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

/* "[..] [..]": every group's table. */
static inline void fmt_tables(char *buf, size_t len, const struct kvc_seq *s)
{
	buf[0] = 0;
	for (uint32_t g = 0; g < num_groups(); g++) {
		uint32_t n = 0;
		const uint32_t *t = kvc_seq_table(s, g, &n);

		if (g)
			strncat(buf, " ", len - strlen(buf) - 1);
		fmt_ids(buf, len, t, n);
	}
}

/* "[free queue] free=F used=U cached=C": what a pure query must not change. */
static inline void fmt_snapshot(char *buf, size_t len)
{
	static uint32_t ids[KVC_MAX_BLOCKS >> 8];
	struct kvc_pool_stats st;
	uint32_t n = kvc_pool_free_queue(P, ids, sizeof(ids) / sizeof(ids[0]));
	size_t o;

	buf[0] = 0;
	fmt_ids(buf, len, ids, n);
	kvc_pool_stats(P, &st);
	o = strlen(buf);
	snprintf(buf + o, len - o, " free=%u used=%u cached=%u", st.free, st.used, st.cached);
}

static inline void expect_freeq_at(const char *exp, const char *file, int line)
{
	static uint32_t ids[4096];
	char got[HBUF] = "";
	uint32_t n = kvc_pool_free_queue(P, ids, 4096);

	_assert_true(n <= 4096, "queue length", file, line);
	fmt_ids(got, sizeof(got), ids, n);
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_FREEQ(exp) expect_freeq_at(exp, __FILE__, __LINE__)

static inline void expect_stats_at(const char *exp, const char *file, int line)
{
	struct kvc_pool_stats st;
	char got[128];

	kvc_pool_stats(P, &st);
	snprintf(got, sizeof(got), "free=%u used=%u cached=%u", st.free, st.used, st.cached);
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_STATS(exp) expect_stats_at(exp, __FILE__, __LINE__)

static inline void expect_table_at(const struct kvc_seq *s, const char *exp, const char *file,
				   int line)
{
	char got[HBUF];

	fmt_tables(got, sizeof(got), s);
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_TABLE(s, exp) expect_table_at(s, exp, __FILE__, __LINE__)

/* The last alloc's or commit's copies as "made [src>dst,...] hit [src>dst,...]". */
static char last_copies[HBUF];

/* Does the copies the core asked for at once (there is no KV here), as kvtrace does. */
static inline void copies_done(void)
{
	const struct kvc_copy *c;
	uint32_t n = kvc_pool_copies(P, &c);
	size_t at = 0;

	for (int make = 1; make >= 0; make--) {
		const char *sep = "";

		at += (size_t)snprintf(last_copies + at, sizeof(last_copies) - at, "%s[",
				       make ? "made " : " hit ");
		for (uint32_t i = 0; i < n && at < sizeof(last_copies); i++) {
			if (c[i].make != make)
				continue;
			at += (size_t)snprintf(last_copies + at, sizeof(last_copies) - at, "%s%u>%u",
					       sep, c[i].src, c[i].dst);
			sep = ",";
		}
		if (at < sizeof(last_copies))
			at += (size_t)snprintf(last_copies + at, sizeof(last_copies) - at, "]");
	}
	for (uint32_t i = 0; i < n; i++)
		kvc_copy_done(P, &c[i], true);
}
#define EXPECT_COPIES(exp) assert_string_equal(last_copies, exp)

/* "held=H made=M hit=X evicted=E skipped=S": the pool's snapshot counters. */
static inline void expect_snapshots_at(const char *exp, const char *file, int line)
{
	struct kvc_pool_counters c;
	char got[HBUF];

	kvc_pool_counters(P, &c);
	snprintf(got, sizeof(got), "held=%u made=%llu hit=%llu evicted=%llu skipped=%llu",
		 c.snap_held, (unsigned long long)c.snap_made, (unsigned long long)c.snap_hit,
		 (unsigned long long)c.snap_evicted, (unsigned long long)c.snap_skipped);
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_SNAPSHOTS(exp) expect_snapshots_at(exp, __FILE__, __LINE__)

/* "ok [g0 new] [g1 new] ..." | "nospace" | "invalid"; checks the pool after. */
static inline void expect_alloc_at(struct kvc_seq *s, uint32_t nw, uint32_t la, bool hit,
				   const char *exp, const char *file, int line)
{
	struct kvc_alloc_req req = { .new_tokens = nw, .lookahead = la, .use_cache = hit };
	char got[HBUF] = "";
	int rc;

	memset(&last_res, 0, sizeof(last_res));
	rc = kvc_alloc(s, &req, &last_res);
	check_pool_at(file, line);
	if (rc == 0) {
		copies_done();
		check_pool_at(file, line);
		snprintf(got, sizeof(got), "ok");
		for (uint32_t g = 0; g < num_groups(); g++) {
			uint32_t n = 0;
			const uint32_t *t = kvc_seq_table(s, g, &n);
			uint32_t f = last_res.first_new[g];

			_assert_true(f <= n, "first_new <= table length", file, line);
			strncat(got, " ", sizeof(got) - strlen(got) - 1);
			fmt_ids(got, sizeof(got), t + f, n - f);
		}
	} else if (rc == -ENOSPC) {
		snprintf(got, sizeof(got), "nospace");
	} else if (rc == -EINVAL) {
		snprintf(got, sizeof(got), "invalid");
	} else {
		snprintf(got, sizeof(got), "error %d", rc);
	}
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_ALLOC(s, nw, la, hit, exp) expect_alloc_at(s, nw, la, hit, exp, __FILE__, __LINE__)

/* kvc_alloc_cost == @exp (a count or -EINVAL), and the query changes nothing. */
static inline void expect_cost_at(struct kvc_seq *s, uint32_t nw, uint32_t la, bool hit,
				  int64_t exp, const char *file, int line)
{
	struct kvc_alloc_req req = { .new_tokens = nw, .lookahead = la, .use_cache = hit };
	char before[HBUF], after[HBUF], tb[HBUF], ta[HBUF];
	int64_t got;

	fmt_snapshot(before, sizeof(before));
	fmt_tables(tb, sizeof(tb), s);
	got = kvc_alloc_cost(s, &req);
	check_pool_at(file, line);
	fmt_snapshot(after, sizeof(after));
	fmt_tables(ta, sizeof(ta), s);
	_assert_string_equal(after, before, file, line);
	_assert_string_equal(ta, tb, file, line);
	_assert_int_equal((uint64_t)got, (uint64_t)exp, file, line);
}
#define EXPECT_COST(s, nw, la, hit, exp) expect_cost_at(s, nw, la, hit, exp, __FILE__, __LINE__)

/* "H [g0 ids] [g1 ids] ..." from kvc_lookup, which must change nothing. */
static inline void expect_hit_at(struct kvc_seq *s, const char *exp, const char *file, int line)
{
	struct kvc_hit h;
	char before[HBUF], after[HBUF], got[HBUF];
	int rc;

	memset(&h, 0, sizeof(h));
	fmt_snapshot(before, sizeof(before));
	rc = kvc_lookup(s, &h);
	check_pool_at(file, line);
	_assert_int_equal((uint64_t)rc, 0, file, line);
	fmt_snapshot(after, sizeof(after));
	_assert_string_equal(after, before, file, line);
	_assert_int_equal(h.blocks * kvc_pool_config(P)->block_size, h.tokens, file, line);
	snprintf(got, sizeof(got), "%u", h.tokens);
	for (uint32_t g = 0; g < num_groups(); g++) {
		strncat(got, " ", sizeof(got) - strlen(got) - 1);
		fmt_ids(got, sizeof(got), h.nids[g] ? h.ids[g] : NULL, h.nids[g]);
	}
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_HIT(s, exp) expect_hit_at(s, exp, __FILE__, __LINE__)

/* kvc_seq_computed(s, n) == rc (0 or -EINVAL). */
static inline void expect_computed_at(struct kvc_seq *s, uint32_t n, int rc, const char *file,
				      int line)
{
	int got = kvc_seq_computed(s, n);

	check_pool_at(file, line);
	if (got == 0) {
		copies_done();
		check_pool_at(file, line);
	}
	_assert_int_equal((uint64_t)(int64_t)got, (uint64_t)(int64_t)rc, file, line);
}
#define EXPECT_COMPUTED(s, n, rc) expect_computed_at(s, n, rc, __FILE__, __LINE__)
#define COMPUTED(s, n) expect_computed_at(s, n, 0, __FILE__, __LINE__)

/* "tokens=T prompt=P prefix=X computed=C slots=A held=H running=R" */
static inline void expect_info_at(const struct kvc_seq *s, const char *exp, const char *file,
				  int line)
{
	struct kvc_seq_info in;
	char got[256];

	memset(&in, 0, sizeof(in));
	kvc_seq_info(s, &in);
	snprintf(got, sizeof(got), "tokens=%u prompt=%u prefix=%u computed=%u slots=%u held=%u running=%d",
		 in.tokens, in.prompt_tokens, in.prefix, in.computed, in.allocated_slots,
		 in.blocks_held, (int)in.running);
	_assert_string_equal(got, exp, file, line);
}
#define EXPECT_INFO(s, exp) expect_info_at(s, exp, __FILE__, __LINE__)

static inline void seq_free_at(struct kvc_seq *s, const char *file, int line)
{
	kvc_seq_free(s);
	check_pool_at(file, line);
}
#define SEQ_FREE(s) seq_free_at(s, __FILE__, __LINE__)

static inline void seq_destroy_at(struct kvc_seq *s, const char *file, int line)
{
	kvc_seq_destroy(s);
	check_pool_at(file, line);
}
#define SEQ_DESTROY(s) seq_destroy_at(s, __FILE__, __LINE__)

static inline void expect_evict_at(const uint32_t *ids, uint32_t n, int rc, const char *file,
				   int line)
{
	int got = kvc_pool_evict(P, ids, n);

	check_pool_at(file, line);
	_assert_int_equal((uint64_t)(int64_t)got, (uint64_t)(int64_t)rc, file, line);
}
/* EXPECT_EVICT(rc, id, id, ...): rc = hashes removed or -EINVAL. */
#define EXPECT_EVICT(rc, ...)                                                          \
	expect_evict_at((const uint32_t[]){ __VA_ARGS__ },                             \
			sizeof((const uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t), rc, \
			__FILE__, __LINE__)

static inline void expect_reset_at(int rc, const char *file, int line)
{
	int got = kvc_pool_reset(P);

	check_pool_at(file, line);
	_assert_int_equal((uint64_t)(int64_t)got, (uint64_t)(int64_t)rc, file, line);
}
#define EXPECT_RESET(rc) expect_reset_at(rc, __FILE__, __LINE__)

#endif
