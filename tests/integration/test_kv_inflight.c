/* SPDX-License-Identifier: MIT */
/*
 * Frees and deaths while data-path requests are in flight (docs/kvdata.md:
 * "while a request is in flight its blocks are pinned").
 *
 * 1. A big ATTEND (8 sequences x 512 tokens x 64 queries) with, right behind it
 *    in the same submission, a FREE of one of its sequences, a SEQ_CLOSE of
 *    another, a POOL_STATS, an ALLOC for a new sequence and a WRITE_KV of junk
 *    into that sequence's new blocks. The non-data entries complete first (the
 *    ATTEND is still on the workers then): the stats still count the freed
 *    blocks as used, and the ALLOC gets none of them even though, with caching
 *    off, a released block goes to the very head of the free queue. The ATTEND
 *    then completes with exactly the output an undisturbed run gave (which
 *    matches a double-precision reference), and the pool's free count returns
 *    to its initial value with the invariants holding.
 * 2. A client killed by SIGKILL with up to a second of ATTENDs queued
 *    (calibrated on the daemon under test, at most MAX_QUEUED): once the
 *    daemon has noticed, the queued ones are cancelled, so every block comes
 *    back within a third of the queued work's time (100 ms at least); the
 *    daemon serves new clients and exits 0 on SIGTERM.
 * 3. A WRITE_KV in flight when its sequence is freed and re-allocated must not
 *    make the new slots readable: they were never written (-ENODATA).
 *
 * Tolerance: f32 pool and queries: |out - ref| <= 1e-5 (V values in [-1, 1]).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvref.h"

#define POOL "big"
#define NBLOCKS 1024
#define BS 16
#define KV_HEADS 2
#define HD 64
#define CTX 512             /* tokens per sequence */
#define NQ 64               /* queries per sequence: the last NQ positions */
#define NSEQ 8
#define Q_HEADS 8           /* GQA 4 */
#define SEQ_BLOCKS (CTX / BS)
#define SCALE 0.25f
#define TOL 1e-5
#define ARENA (64u << 20)
#define Q_BYTES ((size_t)NQ * Q_HEADS * HD * 4)           /* one sequence's Q (and output) */
#define HDR_BYTES (sizeof(struct kvp_attend) + NSEQ * sizeof(struct kvp_attend_seq))
#define RAW_HDR (4u << 20)  /* raw requests' data: above what the blocking calls stage */
#define RAW_Q (5u << 20)
#define RAW_MISC (6u << 20)
#define RAW_OUT (8u << 20)  /* outputs: 1 MiB per ATTEND */
#define MAX_QUEUED 40

static struct daemon dmn;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- values and the reference ---- */

/* A multiple of 2^-23 in [-1, 1): exact in f32. which: 0 K, 1 V, 2 Q. */
static float kv_value(uint32_t which, uint32_t seq, uint32_t pos, uint32_t head, uint32_t d)
{
	uint64_t h = mix(mix((uint64_t)which << 32 | seq) ^ ((uint64_t)pos << 32 | head << 16 | d));

	return (float)((int32_t)(h >> 40) - (1 << 23)) * 0x1p-23f;
}

/* Full causal attention of query position @i, query head @qh, of sequence @seq. */
static void reference(uint32_t seq, uint32_t i, uint32_t qh, double *out)
{
	static double logit[CTX];
	uint32_t kh = qh / (Q_HEADS / KV_HEADS);
	double mx = -1e300, sum = 0;

	for (uint32_t j = 0; j <= i; j++) {
		double x = 0;

		for (uint32_t d = 0; d < HD; d++)
			x += (double)kv_value(2, seq, i, qh, d) * kv_value(0, seq, j, kh, d);
		logit[j] = x * (double)SCALE;
		mx = logit[j] > mx ? logit[j] : mx;
	}
	for (uint32_t d = 0; d < HD; d++)
		out[d] = 0;
	for (uint32_t j = 0; j <= i; j++) {
		double w = ref_exp(logit[j] - mx);

		sum += w;
		for (uint32_t d = 0; d < HD; d++)
			out[d] += w * kv_value(1, seq, j, kh, d);
	}
	for (uint32_t d = 0; d < HD; d++)
		out[d] /= sum;
}

static void check_reference(uint32_t seq, const float *out)
{
	for (uint32_t t = 0; t < NQ; t++) {
		for (uint32_t qh = 0; qh < Q_HEADS; qh++) {
			double ref[HD];

			reference(seq, CTX - NQ + t, qh, ref);
			for (uint32_t d = 0; d < HD; d++) {
				double o = out[((size_t)t * Q_HEADS + qh) * HD + d];
				double err = o > ref[d] ? o - ref[d] : ref[d] - o;

				if (!(err <= TOL)) {
					fprintf(stderr, "sequence %u position %u head %u dim %u: out %.9g, "
						"reference %.9g\n", seq, CTX - NQ + t, qh, d, o, ref[d]);
					exit(1);
				}
			}
		}
	}
}

/* ---- clients and sequences ---- */

static struct kvp_client *connect_big(void)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = POOL, .arena_bytes = ARENA };
	struct kvp_client *c;

	CHECK_EQ(kvp_connect(&o, &c), 0);
	return c;
}

/* Opens NSEQ sequences of CTX tokens (@salt keeps clients' tokens apart), KV written and committed. */
static void setup_seqs(struct kvp_client *c, uint64_t *h, uint32_t salt)
{
	static uint32_t tokens[CTX];
	static float k[CTX * KV_HEADS * HD], v[CTX * KV_HEADS * HD];

	for (uint32_t s = 0; s < NSEQ; s++) {
		for (uint32_t t = 0; t < CTX; t++)
			tokens[t] = salt + s * CTX + t;
		CHECK_EQ(kvp_seq_open(c, tokens, CTX, NULL, 0, -1, &h[s]), 0);
		CHECK_EQ(kvp_alloc(c, h[s], CTX, 0, false, NULL, NULL, 0), 0);
		for (uint32_t t = 0; t < CTX; t++)
			for (uint32_t kh = 0; kh < KV_HEADS; kh++)
				for (uint32_t d = 0; d < HD; d++) {
					k[((size_t)t * KV_HEADS + kh) * HD + d] = kv_value(0, s, t, kh, d);
					v[((size_t)t * KV_HEADS + kh) * HD + d] = kv_value(1, s, t, kh, d);
				}
		CHECK_EQ(kvp_write_kv(c, h[s], 0, 0, 0, CTX, k, v), 0);
		CHECK_EQ(kvp_commit(c, h[s], CTX), 0);
	}
}

static void fill_q(uint32_t s, float *q)
{
	for (uint32_t t = 0; t < NQ; t++)
		for (uint32_t qh = 0; qh < Q_HEADS; qh++)
			for (uint32_t d = 0; d < HD; d++)
				q[((size_t)t * Q_HEADS + qh) * HD + d] = kv_value(2, s, CTX - NQ + t, qh, d);
}

/* The blocking ATTEND of all NSEQ sequences; returns how long it took. */
static uint64_t attend_all(struct kvp_client *c, const uint64_t *h, float (*out)[NQ * Q_HEADS * HD])
{
	static float q[NSEQ][NQ * Q_HEADS * HD];
	struct kvp_attend_req r[NSEQ];
	uint64_t t0;

	for (uint32_t s = 0; s < NSEQ; s++) {
		fill_q(s, q[s]);
		r[s] = (struct kvp_attend_req){ .handle = h[s], .first_pos = CTX - NQ, .count = NQ,
						.q = q[s], .out = out[s] };
	}
	t0 = now_ns();
	CHECK_EQ(kvp_attend(c, 0, 0, Q_HEADS, SCALE, 0, true, r, NSEQ), 0);
	return now_ns() - t0;
}

/* The same ATTEND staged for the raw ring: header at @hdr_off, outputs from @out_off. */
static struct kvp_sqe raw_attend(struct kvp_client *c, const uint64_t *h, uint64_t hdr_off,
				 uint64_t out_off)
{
	uint8_t *arena = kvp_arena(c, NULL);
	struct kvp_attend *a = (struct kvp_attend *)(arena + hdr_off);

	*a = (struct kvp_attend){ .group = 0, .layer = 0, .num_seqs = NSEQ, .q_heads = Q_HEADS,
				  .flags = KVP_ATTEND_Q_F32, .scale = SCALE };
	for (uint32_t s = 0; s < NSEQ; s++) {
		fill_q(s, (float *)(arena + RAW_Q + s * Q_BYTES));
		memset(arena + out_off + s * Q_BYTES, 0xee, Q_BYTES);
		a->seqs[s] = (struct kvp_attend_seq){ .handle = h[s], .first_pos = CTX - NQ,
						      .count = NQ, .q_off = RAW_Q + s * Q_BYTES,
						      .out_off = out_off + s * Q_BYTES };
	}
	return (struct kvp_sqe){ .opcode = KVP_OP_ATTEND, .addr = hdr_off, .len = HDR_BYTES };
}

static void submit(struct kvp_client *c, struct kvp_sqe sqe)
{
	struct kvp_sqe *e = kvp_get_sqe(c);

	CHECK(e != NULL);
	*e = sqe;
}

static void get_cqe(struct kvp_client *c, struct kvp_cqe *out)
{
	struct kvp_cqe *cqe;

	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	*out = *cqe;
	kvp_cqe_seen(c, cqe);
}

static uint32_t table_ids(struct kvp_client *c, uint64_t h, uint32_t *ids, uint32_t max)
{
	union {
		struct kvp_block_lists l;
		uint8_t b[sizeof(struct kvp_block_lists) + 4 * 64];
	} buf;

	CHECK(kvp_get_table(c, h, &buf.l, sizeof(buf)) > 0);
	CHECK_EQ(buf.l.num_groups, 1);
	CHECK(buf.l.counts[0] <= max);
	memcpy(ids, buf.l.ids, buf.l.counts[0] * sizeof(uint32_t));
	return buf.l.counts[0];
}

static void pool_stats(uint32_t used)
{
	struct kvp_pool_stats st;

	check_pool_or_die(&dmn, POOL, &st);
	CHECK_EQ(st.blocks_total, NBLOCKS);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_free, NBLOCKS - 1 - used);
}

static float base[NSEQ][NQ * Q_HEADS * HD];

/* ---- 1: FREE and SEQ_CLOSE behind an ATTEND ---- */

static void free_behind_attend(void)
{
	struct kvp_client *c = connect_big();
	uint8_t *arena = kvp_arena(c, NULL);
	uint64_t h[NSEQ], hnew;
	uint32_t freed[2 * SEQ_BLOCKS], nfreed, tokens[64];
	struct kvp_cqe cqes[6];
	struct kvp_pool_stats st;
	uint64_t took;

	setup_seqs(c, h, 1);
	for (uint32_t t = 0; t < 64; t++)
		tokens[t] = 900000 + t;
	CHECK_EQ(kvp_seq_open(c, tokens, 64, NULL, 0, -1, &hnew), 0);
	nfreed = table_ids(c, h[0], freed, SEQ_BLOCKS);
	nfreed += table_ids(c, h[1], freed + nfreed, SEQ_BLOCKS);
	CHECK_EQ(nfreed, 2 * SEQ_BLOCKS);
	pool_stats(NSEQ * SEQ_BLOCKS);

	/* Undisturbed: the output to expect, checked against the reference (first and last). */
	took = attend_all(c, h, base);
	check_reference(0, base[0]);
	check_reference(NSEQ - 1, base[NSEQ - 1]);

	/* The same ATTEND, and behind it, without waiting: */
	{
		struct kvp_sqe a = raw_attend(c, h, RAW_HDR, RAW_OUT);

		a.user_data = 1;
		submit(c, a);
	}
	submit(c, (struct kvp_sqe){ .opcode = KVP_OP_FREE, .handle = h[0], .user_data = 2 });
	submit(c, (struct kvp_sqe){ .opcode = KVP_OP_SEQ_CLOSE, .handle = h[1], .user_data = 3 });
	submit(c, (struct kvp_sqe){ .opcode = KVP_OP_POOL_STATS, .out_addr = RAW_MISC,
				    .out_len = sizeof(st), .user_data = 4 });
	submit(c, (struct kvp_sqe){ .opcode = KVP_OP_ALLOC, .handle = hnew, .len = 64,
				    .out_addr = RAW_MISC + 64, .out_len = 4096, .user_data = 5 });
	for (uint32_t i = 0; i < 64 * KV_HEADS * HD * 2; i++)
		((float *)(arena + RAW_MISC + 8192))[i] = 1000.0f; /* junk: it would swamp any output */
	submit(c, (struct kvp_sqe){ .opcode = KVP_OP_WRITE_KV, .handle = hnew, .len = 64, .arg1 = 0,
				    .arg2 = KVP_KV_SEL(0, 0), .addr = RAW_MISC + 8192,
				    .user_data = 6 });
	CHECK_EQ(kvp_submit(c), 6);
	for (uint32_t i = 0; i < 6; i++)
		get_cqe(c, &cqes[i]);

	/* FREE, SEQ_CLOSE, POOL_STATS and ALLOC completed while the ATTEND was in flight. */
	for (uint32_t i = 0; i < 4; i++) {
		CHECK_EQ(cqes[i].user_data, 2 + i);
		CHECK_EQ(cqes[i].res, 0);
	}
	memcpy(&st, arena + RAW_MISC, sizeof(st));
	CHECK_EQ(st.blocks_used, NSEQ * SEQ_BLOCKS); /* freed, but pinned: still used */
	CHECK_EQ(st.blocks_free, NBLOCKS - 1 - NSEQ * SEQ_BLOCKS);
	{
		const struct kvp_block_lists *l = (const struct kvp_block_lists *)(arena + RAW_MISC + 64);

		CHECK_EQ(l->num_groups, 1);
		CHECK_EQ(l->counts[0], 64 / BS);
		for (uint32_t i = 0; i < l->counts[0]; i++)
			for (uint32_t j = 0; j < nfreed; j++)
				if (l->ids[i] == freed[j]) {
					fprintf(stderr, "ALLOC got block %u of a sequence freed behind an "
						"ATTEND still reading it\n", l->ids[i]);
					exit(1);
				}
	}
	/* Then the two data jobs, in either order. */
	CHECK((cqes[4].user_data == 1 && cqes[5].user_data == 6) ||
	      (cqes[4].user_data == 6 && cqes[5].user_data == 1));
	CHECK_EQ(cqes[4].res, 0);
	CHECK_EQ(cqes[5].res, 0);
	for (uint32_t s = 0; s < NSEQ; s++)
		if (memcmp(arena + RAW_OUT + s * Q_BYTES, base[s], Q_BYTES)) {
			fprintf(stderr, "sequence %u: the ATTEND behind which it was freed gave another "
				"output\n", s);
			exit(1);
		}

	/* The pins are gone: sequences 0 and 1 released their blocks, the new one holds 4. */
	pool_stats((NSEQ - 2) * SEQ_BLOCKS + 64 / BS);
	CHECK_EQ(table_ids(c, h[0], freed, SEQ_BLOCKS), 0);
	CHECK_EQ(kvp_seq_close(c, h[1]), -EBADF);
	CHECK_EQ(kvp_seq_close(c, h[0]), 0);
	for (uint32_t s = 2; s < NSEQ; s++)
		CHECK_EQ(kvp_seq_close(c, h[s]), 0);
	CHECK_EQ(kvp_seq_close(c, hnew), 0);
	pool_stats(0);
	kvp_close(c);
	printf("test_kv_inflight: one ATTEND of %u x %u queries over %u tokens: %.1f ms\n", NSEQ, NQ,
	       CTX, (double)took / 1e6);
}

/* ---- 2: SIGKILL with ATTENDs queued ---- */

static int victim(void *arg)
{
	int wr = *(int *)arg;
	struct kvp_client *c = connect_big();
	uint64_t h[NSEQ], took;
	uint32_t n;
	struct kvp_cqe cqe;

	setup_seqs(c, h, 1000000);
	took = attend_all(c, h, base);
	/* About a second of work for the daemon, whatever its speed. */
	n = (uint32_t)(1000000000ull / (took ? took : 1)) + 1;
	n = n < 2 ? 2 : n > MAX_QUEUED ? MAX_QUEUED : n;
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_sqe sqe = raw_attend(c, h, RAW_HDR + i * 512ull, RAW_OUT + i * (1ull << 20));

		sqe.user_data = i;
		submit(c, sqe);
	}
	submit(c, (struct kvp_sqe){ .opcode = KVP_OP_NOP, .user_data = 999 });
	CHECK_EQ(kvp_submit(c), (int)n + 1);
	/* The NOP completes when it is taken: every ATTEND ahead of it was taken too. */
	get_cqe(c, &cqe);
	CHECK_EQ(cqe.user_data, 999);
	CHECK_EQ(write(wr, &n, sizeof(n)), (ssize_t)sizeof(n));
	CHECK_EQ(write(wr, &took, sizeof(took)), (ssize_t)sizeof(took));
	for (;;)
		pause();
	return 1;
}

static uint64_t clients_killed(struct kvp_client *obs)
{
	static uint8_t buf[65536];
	struct kvp_stats_header hdr;
	int n = kvp_stats(obs, buf, sizeof(buf));

	CHECK(n >= (int)sizeof(hdr));
	memcpy(&hdr, buf, sizeof(hdr));
	return hdr.clients_killed;
}

static void kill_with_attends_queued(void)
{
	struct kvp_client *obs = connect_or_die(&dmn, POOL, "", false);
	struct kvp_pool_stats st;
	uint64_t killed0 = clients_killed(obs), deadline, noticed, queued_ns, bound, took;
	uint32_t n;
	int pfd[2];
	pid_t pid;

	CHECK_EQ(pipe(pfd), 0);
	fflush(NULL);
	pid = fork_child(victim, &pfd[1]);
	CHECK(pid > 0);
	close(pfd[1]);
	CHECK_EQ(read(pfd[0], &n, sizeof(n)), (ssize_t)sizeof(n));
	CHECK_EQ(read(pfd[0], &took, sizeof(took)), (ssize_t)sizeof(took));
	close(pfd[0]);
	CHECK_EQ(kill(pid, SIGKILL), 0);
	CHECK_EQ(wait_child(pid), 128 + SIGKILL);

	/* The daemon notices the hang-up and closes the sequences... */
	deadline = now_ns() + 5000000000ull;
	while (clients_killed(obs) == killed0) {
		CHECK(now_ns() < deadline);
		usleep(1000);
	}
	/*
	 * ...and its queued ATTENDs are cancelled, not run for nobody: the
	 * blocks they pinned come back within a fraction of the queued work's
	 * time (only the tasks running at the kill finish).
	 */
	noticed = now_ns();
	queued_ns = (uint64_t)n * took;
	bound = queued_ns / 3 > 100000000ull ? queued_ns / 3 : 100000000ull;
	do {
		CHECK_EQ(kvp_pool_stats(obs, &st), 0);
		if (st.blocks_used == 0)
			break;
		usleep(1000);
	} while (now_ns() - noticed < bound);
	if (st.blocks_used != 0) {
		fprintf(stderr, "%u ATTENDs of ~%llu ms queued at the kill: %u blocks still used "
			"after %llu ms\n", n, (unsigned long long)(took / 1000000), st.blocks_used,
			(unsigned long long)(bound / 1000000));
		exit(1);
	}
	printf("test_kv_inflight: %u ATTENDs (%llu ms of work) queued at the kill; blocks back "
	       "in %.1f ms\n", n, (unsigned long long)(queued_ns / 1000000),
	       (double)(now_ns() - noticed) / 1e6);
	pool_stats(0);
	CHECK_EQ(kvp_nop(obs), 0);
	kvp_close(obs);
	printf("test_kv_inflight: killed with %u ATTENDs queued\n", n);
}

/* ---- 3: WRITE_KV in flight, its sequence freed and re-allocated ---- */

static void free_behind_write(void)
{
	struct kvp_client *c = connect_big();
	uint8_t *arena = kvp_arena(c, NULL);
	uint32_t tokens[CTX];
	struct kvp_cqe cqes[3];
	float k[KV_HEADS * HD], v[KV_HEADS * HD];
	uint64_t h;

	for (uint32_t t = 0; t < CTX; t++)
		tokens[t] = 2000000 + t;
	CHECK_EQ(kvp_seq_open(c, tokens, CTX, NULL, 0, -1, &h), 0);

	/* Not in flight: written, freed, re-allocated: the new slots hold nothing readable. */
	CHECK_EQ(kvp_alloc(c, h, 1, 0, false, NULL, NULL, 0), 0);
	for (uint32_t i = 0; i < KV_HEADS * HD; i++)
		k[i] = v[i] = 0.5f;
	CHECK_EQ(kvp_write_kv(c, h, 0, 0, 0, 1, k, v), 0);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 0, 1, k, v), 0);
	CHECK_EQ(kvp_free(c, h), 0);
	CHECK_EQ(kvp_alloc(c, h, 1, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 0, 1, k, v), -ENODATA);
	CHECK_EQ(kvp_free(c, h), 0);

	/*
	 * In flight: the WRITE_KV's completion comes after the FREE and the new ALLOC.
	 * A worker may finish the write before the loop has taken the two (a loaded
	 * machine, TSan): then the case did not happen, and it is tried again.
	 */
	for (uint32_t i = 0; i < CTX * KV_HEADS * HD * 2; i++)
		((float *)(arena + RAW_MISC))[i] = kv_value(0, 99, i, 0, 0);
	for (uint32_t attempt = 0;; attempt++) {
		CHECK_EQ(kvp_alloc(c, h, CTX, 0, false, NULL, NULL, 0), 0);
		submit(c, (struct kvp_sqe){ .opcode = KVP_OP_WRITE_KV, .handle = h, .len = CTX,
					    .arg1 = 0, .arg2 = KVP_KV_SEL(0, 0), .addr = RAW_MISC,
					    .user_data = 1 });
		submit(c, (struct kvp_sqe){ .opcode = KVP_OP_FREE, .handle = h, .user_data = 2 });
		submit(c, (struct kvp_sqe){ .opcode = KVP_OP_ALLOC, .handle = h, .len = CTX,
					    .user_data = 3 });
		CHECK_EQ(kvp_submit(c), 3);
		for (uint32_t i = 0; i < 3; i++)
			get_cqe(c, &cqes[i]);
		for (uint32_t i = 0; i < 3; i++)
			CHECK_EQ(cqes[i].res, 0);
		if (cqes[2].user_data == 1)
			break;
		CHECK(attempt < 20);
		CHECK_EQ(kvp_free(c, h), 0);
	}
	CHECK_EQ(cqes[0].user_data, 2);
	CHECK_EQ(cqes[1].user_data, 3);
	pool_stats(SEQ_BLOCKS);
	/* The write went to the old blocks; nothing was written to the new ones. */
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, 0, 1, k, v), -ENODATA);
	CHECK_EQ(kvp_read_kv(c, h, 0, 0, CTX - 1, 1, k, v), -ENODATA);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	pool_stats(0);
	kvp_close(c);
}

int main(void)
{
	static const char *const pool_kv[] = {
		"blocks=1024", "block_size=16", "groups=full", "caching=off", "kv_heads=2",
		"head_dim=64", "dtype=f32", "layers_per_group=1", NULL,
	};

	watchdog_start("test_kv_inflight", 30);

	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, POOL, pool_kv);
	pool_stats(0);

	free_behind_attend();
	kill_with_attends_queued();
	free_behind_write();

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
