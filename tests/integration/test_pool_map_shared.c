/* SPDX-License-Identifier: MIT */
/*
 * A mapped pool shared by two processes of one namespace (KVP_OP_POOL_MAP,
 * kvp_map_pool), on a host pool in the layer layout with two groups (full,
 * swa:8), two layers, two f16 kv heads:
 *   1. A maps the pool, writes the KV of a 14-token prompt of every group and
 *      layer through its mapping at the blocks its table names and COMMITs
 *      (refused with -ENODATA before any mapping: the daemon takes the word
 *      of a mapped pool's clients only). B, another process, opens the same
 *      prompt and hits exactly A's 3 full blocks (12 tokens; the swa group's
 *      first one a null), maps the pool itself, reads A's bytes bit for bit
 *      at its own table's blocks, and its ATTEND through the daemon equals
 *      the double reference (kvref.c) within TOL_F32.
 *   2. A is SIGKILLed holding two sequences and its mapping: exactly its own
 *      blocks come back (used/free/cached counts, invariants checked), and B
 *      still reads the same bytes, attends the same, and allocates (A's freed
 *      blocks), writes and commits more.
 *   3. The protocol's edges: no .pool_map, or a pool open to all namespaces:
 *      -EPERM with a reason; a raw POOL_MAP completes with res 1 (one memfd)
 *      and, while its message is queued or unread, the next POOL_MAP is
 *      -EBUSY with its reason in the out buffer (two in one submission: the
 *      second, always); kvp_map_pool reads such a leftover off, closing its
 *      descriptor, and maps; kvp_map_pool twice in a row gives two usable
 *      mappings of the same memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvref.h"

#define POOL "p"
#define NS "ns1"
#define NBLOCKS 24
#define BS 4
#define G 2
#define L 2
#define KVH 2
#define HD 8
#define QH 4 /* GQA 2 */
#define W 8  /* group 1's window */
#define DT KVP_DTYPE_F16
#define PROMPT 14 /* 3 full blocks and 2 tokens */
#define MORE 6
#define MAXPOS (PROMPT + MORE)
#define SEED 0x6d6170ull
#define SCALE 0.35355339f
#define RAW_TAG 0xfeed000000000001ull
#define FD_SCAN 1024
#define PER_POS (L * KVH * HD * 2) /* elements of one position in one group */

static struct daemon dmn;
static const struct mask masks[G] = { { KVP_KIND_FULL, 0, 0 }, { KVP_KIND_SWA, W, 0 } };
/* The KV as the pool stores it, in double: [group][layer][kv head][pos][K, V][dim]. */
static double refkv[G][L][KVH][MAXPOS][2][HD];

union lists {
	struct kvp_block_lists l;
	uint8_t bytes[sizeof(struct kvp_block_lists) + NBLOCKS * sizeof(uint32_t)];
};

/* Element @i of one position's PER_POS: K or V (@w), dim, kv head, layer; its value. */
static float split(uint32_t g, uint32_t p, uint32_t i, uint32_t *w, uint32_t *d, uint32_t *h,
		   uint32_t *l)
{
	*w = i % 2;
	*d = i / 2 % HD;
	*h = i / 2 / HD % KVH;
	*l = i / 2 / HD / KVH;
	return val(SEED, *w, g, *l, p, *h, *d);
}

static void fill_ref(void)
{
	for (uint32_t g = 0; g < G; g++)
		for (uint32_t p = 0; p < MAXPOS; p++)
			for (uint32_t i = 0, w, d, h, l; i < PER_POS; i++) {
				float v = split(g, p, i, &w, &d, &h, &l);

				refkv[g][l][h][p][w][d] = as_stored(DT, v);
			}
}

static void prompt_tokens(uint32_t *t, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++)
		t[i - from] = 1000 + i;
}

static struct kvp_client *connect_ns(const char *pool, bool pool_map)
{
	char why[KVP_REASON_MAX] = "";
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = pool, .namespace_ = NS,
				      .pool_map = pool_map, .why = why, .why_len = sizeof(why) };
	struct kvp_client *c;
	int ret = kvp_connect(&o, &c);

	if (ret) {
		fprintf(stderr, "connect to %s in %s: %s: %s\n", pool, NS, strerror(-ret), why);
		exit(1);
	}
	CHECK_EQ(!!(kvp_features(c) & KVP_FEAT_POOL_MAP), pool_map);
	return c;
}

/* The block of position @p in group @g of @l (lists that start at position 0); 0: a null. */
static uint32_t block_at(const struct kvp_block_lists *l, uint32_t g, uint32_t p)
{
	uint32_t off = 0;

	for (uint32_t i = 0; i < g; i++)
		off += l->counts[i];
	CHECK(p / BS < l->counts[g]);
	return l->ids[off + p / BS];
}

/* @l written as "ids of group 0 | ids of group 1" is @want. */
static void expect_lists(const struct kvp_block_lists *l, const char *want)
{
	char got[256] = "";
	size_t n = 0;

	CHECK_EQ(l->num_groups, G);
	for (uint32_t g = 0, k = 0; g < G; g++)
		for (uint32_t i = 0; i < l->counts[g] && n < 200; i++, k++)
			n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%u",
					      i ? " " : g ? " | " : "", l->ids[k]);
	if (strcmp(got, want)) {
		fprintf(stderr, "block lists \"%s\", expected \"%s\"\n", got, want);
		exit(1);
	}
}

static void get_table(struct kvp_client *c, uint64_t h, union lists *b)
{
	CHECK(kvp_get_table(c, h, &b->l, sizeof(*b)) > 0);
}

/* Element (block @b, token @t, kv head @h, dim @d) of K (@w 0) or V (@w 1) of layer @l. */
static uint8_t *elem(const struct kvp_pool_map *m, uint32_t w, uint32_t l, uint32_t b, uint32_t t,
		     uint32_t h, uint32_t d)
{
	const struct kvp_map_layer *e = &m->layers[l];

	return (w ? e->v : e->k) + b * e->block_stride + t * e->token_stride +
	       h * e->head_stride + d * dtype_size(DT);
}

/* The layout this pool must report: one memfd, [num_blocks][block_size][kv_heads][head_dim]. */
static void check_map(const struct kvp_pool_map *m)
{
	const uint64_t row = HD * 2, kv = (uint64_t)KVH * BS * row;

	CHECK_EQ(m->layout.mem_kind, KVP_MEM_HOST_MEMFD);
	CHECK_EQ(m->layout.layout, KVP_LAYOUT_LAYER);
	CHECK_EQ(m->layout.num_layers, L);
	CHECK_EQ(m->layout.num_blocks, NBLOCKS);
	CHECK_EQ(m->layout.dtype, DT);
	CHECK_EQ(m->num_pieces, 1);
	CHECK(m->cuda == NULL);
	CHECK(m->piece_bytes[0] >= 2 * L * NBLOCKS * kv);
	for (uint32_t l = 0; l < L; l++) {
		CHECK_EQ(m->layers[l].block_stride, kv);
		CHECK_EQ(m->layers[l].token_stride, KVH * row);
		CHECK_EQ(m->layers[l].head_stride, row);
		CHECK_EQ(m->layers[l].k - (uint8_t *)m->piece[0], 2 * l * NBLOCKS * kv);
		CHECK_EQ(m->layers[l].v - m->layers[l].k, NBLOCKS * kv);
	}
}

/* K and V of positions [from, to) of every group and layer, stored through @m at @t's blocks. */
static void write_through(const struct kvp_pool_map *m, const struct kvp_block_lists *t,
			  uint32_t from, uint32_t to)
{
	for (uint32_t g = 0; g < G; g++)
		for (uint32_t p = from; p < to; p++) {
			uint32_t b = block_at(t, g, p);

			CHECK(b != 0);
			for (uint32_t i = 0, w, d, h, l; i < PER_POS; i++) {
				float v = split(g, p, i, &w, &d, &h, &l);

				store_elem(elem(m, w, l, b, p % BS, h, d), DT, 0, v);
			}
		}
}

/* Compares, bit for bit, what @m holds at @t's non-null blocks; returns the positions compared. */
static uint32_t check_through(const struct kvp_pool_map *m, const struct kvp_block_lists *t,
			      uint32_t g, uint32_t from, uint32_t to)
{
	uint32_t seen = 0;

	for (uint32_t p = from; p < to; p++) {
		uint32_t b = block_at(t, g, p);

		if (!b)
			continue;
		for (uint32_t i = 0, w, d, h, l; i < PER_POS; i++) {
			uint16_t want;

			store_elem(&want, DT, 0, split(g, p, i, &w, &d, &h, &l));
			CHECK(!memcmp(elem(m, w, l, b, p % BS, h, d), &want, sizeof(want)));
		}
		seen++;
	}
	return seen;
}

/* One query row of an ATTEND's output against the double reference. */
static void check_row(uint32_t g, uint32_t l, uint32_t pos, uint32_t qh, const float *q,
		      const float *o)
{
	const struct ref_kv kv = { &refkv[g][l][qh / (QH / KVH)][0][0][0], 2 * HD, HD };
	double qd[HD], ref[HD];

	for (uint32_t d = 0; d < HD; d++)
		qd[d] = q[d];
	ref_attend(&masks[g], pos, qd, HD, SCALE, 0, &kv, ref);
	for (uint32_t d = 0; d < HD; d++) {
		double err = o[d] - ref[d];

		if (!(err <= TOL_F32 && err >= -TOL_F32)) {
			fprintf(stderr, "group %u layer %u pos %u q head %u dim %u: %.9g, "
				"reference %.9g\n", g, l, pos, qh, d, (double)o[d], ref[d]);
			exit(1);
		}
	}
}

/* ATTEND of queries [from, to) of group @g, every layer, f32 Q and output. */
static void check_attend(struct kvp_client *c, uint64_t hd, uint32_t g, uint32_t from, uint32_t to)
{
	static float q[MAXPOS * QH * HD], out[MAXPOS * QH * HD];
	struct kvp_attend_req r = { .handle = hd, .first_pos = from, .count = to - from,
				    .q = q, .out = out };

	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t i = 0; i < (to - from) * QH * HD; i++)
			q[i] = val(SEED, WHICH_Q, g, l, from + i / (QH * HD), i / HD % QH, i % HD);
		memset(out, 0xee, sizeof(out));
		CHECK_EQ(kvp_attend(c, g, l, QH, SCALE, 0, true, &r, 1), 0);
		for (uint32_t row = 0; row < (to - from) * QH; row++)
			check_row(g, l, from + row / QH, row % QH, q + row * HD, out + row * HD);
	}
}

static void expect_stats(struct kvp_client *adm, uint32_t free_, uint32_t used, uint32_t cached)
{
	struct kvp_pool_stats st;
	char why[256];

	CHECK_EQ(kvp_check(adm, why, sizeof(why)), 0);
	CHECK_EQ(kvp_pool_stats(adm, &st), 0);
	CHECK_EQ(st.blocks_total, NBLOCKS);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_cached, cached);
}

/*
 * A: the prompt's KV through its mapping (blocks 1-4 full, 5-8 swa), committed, and a
 * second sequence of 6 tokens never committed (9-10, 11-12); then it waits for its kill.
 */
static int a_main(void *arg)
{
	struct kvp_client *c = connect_ns(POOL, true);
	struct kvp_pool_map m;
	uint32_t tok[PROMPT], hit = 99;
	union lists b;
	uint64_t h, h2;

	(void)arg;
	prompt_tokens(tok, 0, PROMPT);
	CHECK_EQ(kvp_seq_open(c, tok, PROMPT, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, PROMPT, 0, true, &hit, &b.l, sizeof(b)), 0);
	CHECK_EQ(hit, 0);
	expect_lists(&b.l, "1 2 3 4 | 5 6 7 8");
	/* Nothing written and the pool not mapped yet: the daemon's own check refuses. */
	CHECK_EQ(kvp_commit(c, h, PROMPT), -ENODATA);
	CHECK_EQ(kvp_map_pool(c, &m), 0);
	check_map(&m);
	write_through(&m, &b.l, 0, PROMPT);
	CHECK_EQ(kvp_commit(c, h, PROMPT), 0);

	for (uint32_t i = 0; i < 6; i++)
		tok[i] = 5000 + i;
	CHECK_EQ(kvp_seq_open(c, tok, 6, NULL, 0, -1, &h2), 0);
	CHECK_EQ(kvp_alloc(c, h2, 6, 0, true, &hit, &b.l, sizeof(b)), 0);
	expect_lists(&b.l, "9 10 | 11 12");
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* B's prompt positions, read through @m and attended through the daemon. */
static void b_check_prompt(struct kvp_client *c, const struct kvp_pool_map *m, uint64_t h)
{
	float q[QH * HD] = { 0 }, out[QH * HD];
	struct kvp_attend_req r = { .handle = h, .first_pos = 10, .count = 1, .q = q, .out = out };
	union lists t;

	get_table(c, h, &t);
	expect_lists(&t.l, "1 2 3 13 | 0 6 7 14");
	/* Group 1's block 0 is a null: positions 4..11 only. */
	CHECK_EQ(check_through(m, &t.l, 0, 0, 12), 12);
	CHECK_EQ(check_through(m, &t.l, 1, 0, 12), 8);
	check_attend(c, h, 0, 0, PROMPT);
	/* swa 8: query i needs keys i-7..i, and B has none below 4: 11.. only. */
	check_attend(c, h, 1, 11, PROMPT);
	CHECK_EQ(kvp_attend(c, 1, 0, QH, SCALE, 0, true, &r, 1), -ENODATA);
}

/* B, after A's death: 6 more tokens on A's freed blocks, through the mapping. */
static void b_more(struct kvp_client *c, const struct kvp_pool_map *m, uint64_t h)
{
	uint32_t tok[MORE], hit = 99;
	union lists b;

	prompt_tokens(tok, PROMPT, MAXPOS);
	CHECK_EQ(kvp_append(c, h, tok, MORE), 0);
	CHECK_EQ(kvp_alloc(c, h, MORE, 0, false, &hit, &b.l, sizeof(b)), 0);
	/* One block a group, popped from the run of A's unhashed blocks now at the head. */
	CHECK(b.l.counts[0] == 1 && b.l.counts[1] == 1 && b.l.ids[0] != b.l.ids[1]);
	for (uint32_t g = 0; g < G; g++)
		CHECK(b.l.ids[g] == 4 || b.l.ids[g] == 8 || (b.l.ids[g] >= 9 && b.l.ids[g] <= 12));
	get_table(c, h, &b);
	CHECK(b.l.counts[0] == 5 && b.l.counts[1] == 5);
	write_through(m, &b.l, PROMPT, MAXPOS);
	CHECK_EQ(kvp_commit(c, h, MAXPOS), 0);
	/* COMMIT 20 dropped swa positions 0..11 (skipped 13): group 1 holds 12.. now. */
	get_table(c, h, &b);
	CHECK(block_at(&b.l, 1, 11) == 0 && block_at(&b.l, 1, 12) == 14);
	CHECK_EQ(check_through(m, &b.l, 0, 0, MAXPOS), MAXPOS);
	CHECK_EQ(check_through(m, &b.l, 1, 0, MAXPOS), 8);
	check_attend(c, h, 0, 0, MAXPOS);
	check_attend(c, h, 1, 19, MAXPOS);
}

/* Parts 1 and 2: the parent is B. */
static void shared_prefix(struct kvp_client *adm)
{
	struct kvp_client *c;
	struct kvp_pool_map m;
	uint32_t tok[PROMPT], hit = 99;
	struct kvp_pool_stats st;
	union lists b;
	uint64_t h, deadline;
	pid_t a;

	fflush(NULL);
	a = fork_child_ready(a_main, NULL);
	/* A: 4 + 4 + 2 + 2 blocks, swa block 5 dropped at its commit; 3 + 3 published. */
	expect_stats(adm, 12, 11, 6);

	c = connect_ns(POOL, true);
	prompt_tokens(tok, 0, PROMPT);
	CHECK_EQ(kvp_seq_open(c, tok, PROMPT, NULL, 0, -1, &h), 0);
	/* M = 13: blocks 0..2 of group 0; group 1 needs 2 (cdiv(W - 1, BS)) below block 3. */
	CHECK_EQ(kvp_lookup(c, h, &b.l, sizeof(b)), 12);
	expect_lists(&b.l, "1 2 3 | 0 6 7");
	CHECK_EQ(kvp_alloc(c, h, 2, 0, true, &hit, &b.l, sizeof(b)), 0);
	CHECK_EQ(hit, 12);
	expect_lists(&b.l, "13 | 14");
	expect_stats(adm, 10, 13, 6);

	CHECK_EQ(kvp_map_pool(c, &m), 0);
	check_map(&m);
	get_table(c, h, &b);
	write_through(&m, &b.l, 12, PROMPT);
	CHECK_EQ(kvp_commit(c, h, PROMPT), 0);
	b_check_prompt(c, &m, h);
	expect_stats(adm, 10, 13, 6);

	/* A dies holding both sequences and its mapping: its 6 blocks of its own come back. */
	CHECK_EQ(kill(a, SIGKILL), 0);
	CHECK_EQ(wait_child(a), 128 + SIGKILL);
	deadline = test_now_ns() + 5000000000ull;
	do {
		CHECK_EQ(kvp_pool_stats(c, &st), 0);
	} while (st.blocks_used != 7 && test_now_ns() < deadline && !usleep(1000));
	expect_stats(adm, 16, 7, 6);
	b_check_prompt(c, &m, h);

	b_more(c, &m, h);
	/* Blocks 3 and 4 published in both groups; swa 6 and 7 dropped (free, cached). */
	expect_stats(adm, 16, 7, 10);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_unmap_pool(&m);
	CHECK(m.layers == NULL && m.num_pieces == 0);
	kvp_close(c);
	expect_stats(adm, NBLOCKS - 1, 0, 10);
}

/* The one socket not in @known (-1: none), after which every socket is in @known. */
static int new_socket(bool *known)
{
	int found = -1;

	for (int fd = 0; fd < FD_SCAN; fd++) {
		struct stat st;

		if (fstat(fd, &st) || !S_ISSOCK(st.st_mode) || known[fd])
			continue;
		CHECK_EQ(found, -1);
		found = fd;
		known[fd] = true;
	}
	return found;
}

/* One raw POOL_MAP, its completion: res, and the reason's length in cqe.aux. */
static int raw_map(struct kvp_client *c, uint64_t tag, uint32_t out_len, uint64_t *aux)
{
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;
	int res;

	CHECK(sqe != NULL);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_POOL_MAP, .user_data = tag,
				 .out_addr = 4096, .out_len = out_len };
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK(cqe->user_data == tag);
	res = cqe->res;
	*aux = cqe->aux;
	kvp_cqe_seen(c, cqe);
	return res;
}

/* Reads the leftover message of POOL_MAP @tag off @sock: one memfd, the pool's size. */
static void drain_leftover(int sock, uint64_t tag, uint64_t total_bytes)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} ctl;
	struct kvp_map_msg msg;
	struct iovec iov = { .iov_base = &msg, .iov_len = sizeof(msg) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	struct stat st;
	int fd;

	CHECK_EQ(recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC), sizeof(msg));
	CHECK(msg.magic == KVP_MAP_MAGIC && msg.tag == tag);
	CHECK(msg.first == 0 && msg.count == 1 && msg.total == 1 && msg.resv == 0);
	cm = CMSG_FIRSTHDR(&mh);
	CHECK(cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS);
	CHECK_EQ(cm->cmsg_len, CMSG_LEN(sizeof(int)));
	memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK((uint64_t)st.st_size >= total_bytes);
	close(fd);
}

/* -EPERM, a reason, and nothing left in @m. */
static void expect_refused(struct kvp_client *c)
{
	struct kvp_pool_map m;

	memset(&m, 0x5a, sizeof(m));
	CHECK_EQ(kvp_map_pool(c, &m), -EPERM);
	CHECK(m.why[0] != '\0' && strnlen(m.why, sizeof(m.why)) < sizeof(m.why));
	CHECK(m.layers == NULL && m.piece == NULL && m.num_pieces == 0);
	kvp_close(c);
}

/* Two mappings of the same memory: a byte stored through one is read through the other. */
static void map_twice(struct kvp_client *c)
{
	struct kvp_pool_map m, m2;
	uint16_t old, mark = 0x3c01;
	uint8_t *a, *b;

	CHECK_EQ(kvp_map_pool(c, &m), 0);
	CHECK_EQ(kvp_map_pool(c, &m2), 0);
	check_map(&m);
	check_map(&m2);
	CHECK(m.piece[0] != m2.piece[0]);
	a = elem(&m, 1, 1, NBLOCKS - 1, BS - 1, KVH - 1, HD - 1);
	b = elem(&m2, 1, 1, NBLOCKS - 1, BS - 1, KVH - 1, HD - 1);
	memcpy(&old, a, 2);
	memcpy(a, &mark, 2);
	CHECK(!memcmp(b, &mark, 2));
	kvp_unmap_pool(&m);
	CHECK(!memcmp(b, &mark, 2)); /* m2 outlives m */
	memcpy(b, &old, 2);
	kvp_unmap_pool(&m2);
}

/* Descriptors this process has open. */
static int open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < FD_SCAN; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* Two raw POOL_MAPs in one submission: the second finds the first's message still queued. */
static void two_in_one_batch(struct kvp_client *c)
{
	struct kvp_sqe *a = kvp_get_sqe(c), *b = kvp_get_sqe(c);
	int res[2] = { 0, 0 };

	CHECK(a && b);
	*a = (struct kvp_sqe){ .opcode = KVP_OP_POOL_MAP, .user_data = RAW_TAG + 10 };
	*b = (struct kvp_sqe){ .opcode = KVP_OP_POOL_MAP, .user_data = RAW_TAG + 11 };
	CHECK_EQ(kvp_submit(c), 2);
	for (int i = 0; i < 2; i++) {
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK(cqe->user_data == RAW_TAG + 10 || cqe->user_data == RAW_TAG + 11);
		res[cqe->user_data - RAW_TAG - 10] = cqe->res;
		kvp_cqe_seen(c, cqe);
	}
	CHECK_EQ(res[0], 1);
	CHECK_EQ(res[1], -EBUSY);
}

/*
 * One POOL_MAP's descriptors at a time: while a raw POOL_MAP's message is
 * queued or unread the next POOL_MAP is -EBUSY, whatever the courier's
 * timing; kvp_map_pool reads such leftovers off first (closing their
 * descriptors) and maps.
 */
static void leftover_busy(void)
{
	static bool known[FD_SCAN];
	struct kvp_kv_layout lay;
	struct kvp_pool_map m;
	struct kvp_client *c;
	uint8_t lbuf[1024];
	struct pollfd pfd;
	char *arena;
	uint64_t aux;
	int fds;

	new_socket(known);
	c = connect_ns(POOL, true);
	pfd = (struct pollfd){ .fd = new_socket(known), .events = POLLIN };
	CHECK(pfd.fd >= 0);
	arena = kvp_arena(c, NULL);
	CHECK(kvp_pool_layout(c, lbuf, sizeof(lbuf)) > (int)sizeof(lay));
	memcpy(&lay, lbuf, sizeof(lay));

	two_in_one_batch(c);
	CHECK_EQ(poll(&pfd, 1, 5000), 1);
	memset(arena + 4096, 0, KVP_REASON_MAX);
	CHECK_EQ(raw_map(c, RAW_TAG + 1, KVP_REASON_MAX, &aux), -EBUSY);
	CHECK(aux > 0 && aux == strlen(arena + 4096));
	drain_leftover(pfd.fd, RAW_TAG + 10, lay.total_bytes);

	/* Leftovers kvp_map_pool meets are dropped, their descriptors closed. */
	fds = open_fds();
	CHECK_EQ(raw_map(c, RAW_TAG, 0, &aux), 1);
	CHECK_EQ(poll(&pfd, 1, 5000), 1);
	CHECK_EQ(kvp_map_pool(c, &m), 0);
	check_map(&m);
	kvp_unmap_pool(&m);
	CHECK_EQ(open_fds(), fds);
	map_twice(c);
	kvp_close(c);
}

int main(void)
{
	static const char *const pool_kv[] = {
		"blocks=24", "block_size=4", "groups=full swa:8", "kv_heads=2", "head_dim=8",
		"dtype=f16", "layers_per_group=2", "namespace=ns1", "layout=layer", NULL };
	static const char *const open_kv[] = { "blocks=4", "block_size=4", "groups=full",
					       "kv_heads=1", "head_dim=8", "layers_per_group=1",
					       NULL };
	struct kvp_client *adm;

	watchdog_start("test_pool_map_shared", 30);
	self_check();
	fill_ref();
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, POOL, pool_kv);
	create_pool_or_die(&dmn, "open", open_kv);
	adm = connect_or_die(&dmn, POOL, NS, true);
	expect_stats(adm, NBLOCKS - 1, 0, 0);

	shared_prefix(adm);
	expect_refused(connect_ns(POOL, false));
	expect_refused(connect_ns("open", true));
	leftover_busy();
	expect_stats(adm, NBLOCKS - 1, 0, 10);

	kvp_close(adm);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
