/* SPDX-License-Identifier: MIT */
/*
 * Prefix caching across processes: forked clients on one pool share the
 * blocks of a common system prompt (exact hit lengths and block ids), cache
 * namespaces never share, and published blocks stay cached after their owners
 * close. Children are driven phase by phase through pipes.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define POOL "p"
#define SYS_LEN 16
#define MAX_TOKENS 32
#define MAX_IDS 16

/* What a child reports after its phase: the lookup, the alloc and its table. */
struct report {
	int32_t lookup;
	uint32_t hit;
	uint32_t nlookup;
	uint32_t lookup_ids[MAX_IDS];
	uint32_t ntable;
	uint32_t table[MAX_IDS];
};

struct role {
	const char *ns;
	uint32_t tokens[MAX_TOKENS];
	uint32_t n;
	int go_rd;  /* parent -> child */
	int rep_wr; /* child -> parent */
	pid_t pid;
	int go_wr, rep_rd; /* the parent's ends */
};

static struct daemon dmn;

static void read_go(int fd)
{
	char b;

	CHECK_EQ(read(fd, &b, 1), 1);
}

static int child_main(void *arg)
{
	struct role *r = arg;
	union {
		struct kvp_block_lists l;
		uint8_t bytes[sizeof(struct kvp_block_lists) + MAX_IDS * sizeof(uint32_t)];
	} buf;
	struct report rep;
	struct kvp_client *c;
	uint64_t h;
	int ret;

	memset(&rep, 0, sizeof(rep));
	read_go(r->go_rd);
	c = connect_or_die(&dmn, POOL, r->ns, false);
	CHECK_EQ(kvp_seq_open(c, r->tokens, r->n, NULL, 0, -1, &h), 0);

	memset(&buf, 0, sizeof(buf));
	rep.lookup = kvp_lookup(c, h, &buf.l, sizeof(buf));
	CHECK(rep.lookup >= 0);
	CHECK_EQ(buf.l.num_groups, 1);
	CHECK(buf.l.counts[0] <= MAX_IDS);
	rep.nlookup = buf.l.counts[0];
	memcpy(rep.lookup_ids, buf.l.ids, rep.nlookup * sizeof(uint32_t));

	/* Only the tokens past the (advisory) hit are new. */
	CHECK_EQ(kvp_alloc(c, h, r->n - (uint32_t)rep.lookup, 0, true, &rep.hit, NULL, 0), 0);
	CHECK_EQ(kvp_commit(c, h, r->n), 0);

	memset(&buf, 0, sizeof(buf));
	ret = kvp_get_table(c, h, &buf.l, sizeof(buf));
	CHECK(ret > 0);
	CHECK_EQ(buf.l.num_groups, 1);
	CHECK(buf.l.counts[0] <= MAX_IDS);
	CHECK_EQ(ret, sizeof(struct kvp_block_lists) + buf.l.counts[0] * sizeof(uint32_t));
	rep.ntable = buf.l.counts[0];
	memcpy(rep.table, buf.l.ids, rep.ntable * sizeof(uint32_t));
	CHECK_EQ(write(r->rep_wr, &rep, sizeof(rep)), sizeof(rep));

	/* Hold the sequence until told to close it. */
	read_go(r->go_rd);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
	return 0;
}

static void spawn(struct role *r)
{
	int go[2], rep[2];

	CHECK_EQ(pipe(go), 0);
	CHECK_EQ(pipe(rep), 0);
	r->go_rd = go[0];
	r->go_wr = go[1];
	r->rep_rd = rep[0];
	r->rep_wr = rep[1];
	fflush(NULL);
	r->pid = fork_child(child_main, r);
	CHECK(r->pid > 0);
	close(r->go_rd);
	close(r->rep_wr);
}

static void go(struct role *r)
{
	CHECK_EQ(write(r->go_wr, "g", 1), 1);
}

static void get_report(struct role *r, struct report *rep)
{
	CHECK_EQ(read(r->rep_rd, rep, sizeof(*rep)), sizeof(*rep));
}

static void set_tokens(struct role *r, const char *ns, uint32_t own_base, uint32_t own_len)
{
	r->ns = ns;
	r->n = SYS_LEN + own_len;
	CHECK(r->n <= MAX_TOKENS);
	for (uint32_t i = 0; i < SYS_LEN; i++)
		r->tokens[i] = 1000 + i;
	for (uint32_t i = 0; i < own_len; i++)
		r->tokens[SYS_LEN + i] = own_base + i;
}

static void check_stats(uint32_t free_, uint32_t used, uint32_t cached)
{
	struct kvp_pool_stats st;

	check_pool_or_die(&dmn, POOL, &st);
	CHECK_EQ(st.blocks_total, 64);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_cached, cached);
}

/* The two consecutive new ids of a B/C-like child: {7,8} or {9,10} etc. */
static uint32_t run_start(const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		CHECK_EQ(ids[i], ids[0] + i);
	return ids[0];
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=64", "block_size=4", "groups=full", NULL };
	struct role a, b, cc, na, nb, na2;
	struct role *all[] = { &a, &b, &cc, &na, &nb, &na2 };
	struct report ra, rb, rc, rna, rnb, rna2;
	uint32_t sb, sc, sna, snb;

	watchdog_start("test_cross_process", 30);

	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, POOL, pool_kv);
	check_stats(63, 0, 0);

	/* A: system prompt + 6 own tokens; B and C: the system prompt + 5 tokens of their own. */
	set_tokens(&a, "", 2000, 6);
	set_tokens(&b, "", 3000, 5);
	set_tokens(&cc, "", 4000, 5);
	/* Namespaces: exactly A's tokens, so only the namespace separates them. */
	set_tokens(&na, "a", 2000, 6);
	set_tokens(&nb, "b", 2000, 6);
	set_tokens(&na2, "a", 2000, 6);
	for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		spawn(all[i]);

	/* A first, on an empty cache: 22 tokens take blocks 1..6, 5 full ones get published. */
	go(&a);
	get_report(&a, &ra);
	CHECK_EQ(ra.lookup, 0);
	CHECK_EQ(ra.nlookup, 0);
	CHECK_EQ(ra.hit, 0);
	CHECK_EQ(ra.ntable, 6);
	for (uint32_t i = 0; i < 6; i++)
		CHECK_EQ(ra.table[i], 1 + i);
	check_stats(57, 6, 5);

	/* B and C at once: each hits A's 4 system-prompt blocks (16 tokens), and no more. */
	go(&b);
	go(&cc);
	get_report(&b, &rb);
	get_report(&cc, &rc);
	CHECK_EQ(rb.lookup, 16);
	CHECK_EQ(rc.lookup, 16);
	CHECK_EQ(rb.hit, 16);
	CHECK_EQ(rc.hit, 16);
	CHECK_EQ(rb.nlookup, 4);
	CHECK_EQ(rc.nlookup, 4);
	CHECK_EQ(rb.ntable, 6);
	CHECK_EQ(rc.ntable, 6);
	for (uint32_t i = 0; i < 4; i++) {
		CHECK_EQ(rb.lookup_ids[i], ra.table[i]);
		CHECK_EQ(rc.lookup_ids[i], ra.table[i]);
		CHECK_EQ(rb.table[i], ra.table[i]);
		CHECK_EQ(rc.table[i], ra.table[i]);
	}
	/* Their own blocks: two fresh ones each, 7..10 between them. */
	sb = run_start(rb.table + 4, 2);
	sc = run_start(rc.table + 4, 2);
	CHECK((sb == 7 && sc == 9) || (sb == 9 && sc == 7));
	/* 6 + 2 + 2 in use; A's 5 hashes plus B's and C's own block 4. */
	check_stats(53, 10, 7);

	/* Namespace "a": A's identical tokens in "" do not hit. */
	go(&na);
	get_report(&na, &rna);
	CHECK_EQ(rna.lookup, 0);
	CHECK_EQ(rna.nlookup, 0);
	CHECK_EQ(rna.hit, 0);
	CHECK_EQ(rna.ntable, 6);
	sna = run_start(rna.table, 6);
	CHECK_EQ(sna, 11);
	check_stats(47, 16, 12);

	/* Namespace "b", after "a" published the same tokens: still no hit. */
	go(&nb);
	get_report(&nb, &rnb);
	CHECK_EQ(rnb.lookup, 0);
	CHECK_EQ(rnb.nlookup, 0);
	CHECK_EQ(rnb.hit, 0);
	CHECK_EQ(rnb.ntable, 6);
	snb = run_start(rnb.table, 6);
	CHECK_EQ(snb, 17);
	check_stats(41, 22, 17);

	/* A second client in "a" hits all 5 full blocks of the first (M = 21 -> 20 tokens). */
	go(&na2);
	get_report(&na2, &rna2);
	CHECK_EQ(rna2.lookup, 20);
	CHECK_EQ(rna2.nlookup, 5);
	CHECK_EQ(rna2.hit, 20);
	CHECK_EQ(rna2.ntable, 6);
	for (uint32_t i = 0; i < 5; i++) {
		CHECK_EQ(rna2.lookup_ids[i], rna.table[i]);
		CHECK_EQ(rna2.table[i], rna.table[i]);
	}
	CHECK_EQ(rna2.table[5], 23);
	check_stats(40, 23, 17);

	/* Everyone closes: every block is free again, the 17 published ones stay cached. */
	for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		go(all[i]);
	for (unsigned i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		CHECK_EQ(wait_child(all[i]->pid), 0);
		close(all[i]->go_wr);
		close(all[i]->rep_rd);
	}
	check_stats(63, 0, 17);

	/* The cache outlives its owners: a new client in "" still hits A's 5 blocks. */
	{
		struct kvp_client *c = connect_or_die(&dmn, POOL, "", false);
		uint64_t h;
		uint32_t hit = 99;

		CHECK_EQ(kvp_seq_open(c, a.tokens, a.n, NULL, 0, -1, &h), 0);
		CHECK_EQ(kvp_lookup(c, h, NULL, 0), 20);
		CHECK_EQ(kvp_alloc(c, h, 2, 0, true, &hit, NULL, 0), 0);
		CHECK_EQ(hit, 20);
		CHECK_EQ(kvp_seq_close(c, h), 0);
		kvp_close(c);
	}
	check_stats(63, 0, 17);

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
