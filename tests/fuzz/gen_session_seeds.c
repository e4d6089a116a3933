/* SPDX-License-Identifier: MIT */
/*
 * Writes fuzz_session's hand-made seeds (tests/fuzz/corpus/session/) in the
 * format of session_format.h: sessions a real client would run, which the
 * fuzzer then mutates from, so it starts with handles that exist, KV that is
 * written and requests that succeed. Run by `make fuzz-seeds`.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "session_format.h"
#include "../../uapi/kvpool.h"

struct seed {
	uint8_t b[4096];
	size_t n;
};

static void put8(struct seed *s, unsigned v)
{
	s->b[s->n++] = (uint8_t)v;
}

static void put16(struct seed *s, unsigned v)
{
	put8(s, v & 0xff);
	put8(s, v >> 8);
}

static void put32(struct seed *s, uint32_t v)
{
	put16(s, v & 0xffff);
	put16(s, v >> 16);
}

/* The opcode's index in FZ_OPCODES: itself below 15, admin ones from 15 on. */
static unsigned op_index(unsigned op)
{
	return op < 64 ? op : op - 64 + 15;
}

/* FZ_A_SQE: offsets in bytes (multiples of 4), handle index 0.. of those seen. */
static void sqe(struct seed *s, unsigned op, unsigned hsel, unsigned fl, unsigned len,
		unsigned addr, unsigned out_addr, unsigned out_len, unsigned arg1, unsigned arg2)
{
	put8(s, FZ_A_SQE);
	put8(s, op_index(op));
	put8(s, hsel);
	put8(s, fl);
	put16(s, len);
	put16(s, addr / 4);
	put16(s, out_addr / 4);
	put16(s, out_len / 4);
	put16(s, arg1);
	put16(s, arg2);
}

static void tokens(struct seed *s, unsigned off, unsigned n, unsigned base, unsigned step)
{
	put8(s, FZ_A_TOKENS);
	put16(s, off / 4);
	put8(s, n);
	put8(s, base);
	put8(s, step);
}

static void run(struct seed *s, unsigned budget)
{
	put8(s, FZ_A_RUN);
	put8(s, budget - 1);
}

static void fill(struct seed *s, unsigned off, unsigned len, unsigned v)
{
	put8(s, FZ_A_ARENA_FILL);
	put16(s, off / 4);
	put16(s, len / 4);
	put8(s, v);
}

static void bytes(struct seed *s, unsigned off, const char *text)
{
	put8(s, FZ_A_ARENA_BYTES);
	put16(s, off / 4);
	put8(s, (unsigned)strlen(text));
	memcpy(s->b + s->n, text, strlen(text));
	s->n += strlen(text);
}

/* prelude, then client 0's setup: @s0 sizes, @s1 pool/namespace/features, @s2 uid/flags. */
static void start(struct seed *s, unsigned pre, unsigned s0, unsigned s1, unsigned s2)
{
	s->n = 0;
	put8(s, pre);
	put8(s, s0);
	put8(s, s1);
	put8(s, s2);
}

static int save(const struct seed *s, const char *dir, const char *name)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(s->b, 1, s->n, f) != s->n || fclose(f)) {
		perror(path);
		return 1;
	}
	return 0;
}

/* A sequence's life on the pool without KV: open, alloc, commit, lookup, free, close. */
static void seq_life(struct seed *s)
{
	start(s, FZ_PRE_DRAIN_FIRST, 3 | 2 << 5, 2, 0); /* 8 entries, 16 KiB, "plain" */
	tokens(s, 0, 16, 1, 1);
	sqe(s, KVP_OP_SEQ_OPEN, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	sqe(s, KVP_OP_ALLOC, 0, FZ_F_OPFLAG, 16, 0, 1024, 1024, 0, 0);
	sqe(s, KVP_OP_COMMIT, 0, 0, 16, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_GET_TABLE, 0, 0, 0, 0, 2048, 1024, 0, 0);
	sqe(s, KVP_OP_POOL_STATS, 0, 0, 0, 0, 3072, 64, 0, 0);
	run(s, 8);
	tokens(s, 256, 16, 1, 1); /* the same prompt: a prefix hit */
	sqe(s, KVP_OP_SEQ_OPEN, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	sqe(s, KVP_OP_LOOKUP, 1, 0, 0, 0, 4096, 1024, 0, 0);
	sqe(s, KVP_OP_APPEND_TOKENS, 1, 0, 4, 256, 0, 0, 0, 0);
	sqe(s, KVP_OP_ALLOC, 1, FZ_F_OPFLAG, 6, 0, 0, 0, 2, 0);
	sqe(s, KVP_OP_FREE, 0, 0, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_SEQ_CLOSE, 0, 0, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_SEQ_CLOSE, 1, 0, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	put8(s, FZ_A_CQ_HEAD);
	put8(s, 0);
	put32(s, 0);
	put8(s, FZ_A_DRAIN);
}

/* KV: write both layers, attend, read back, commit, close (pool "kv", shape 0, f32). */
static void kv_life(struct seed *s)
{
	/* 8 tokens of 2 heads x 8 dims x f32: K and V are 1 KiB; ATTEND's q, 64 bytes. */
	start(s, FZ_PRE_DRAIN_FIRST, 3 | 3 << 5, 1, 0); /* 8 entries, 64 KiB, "kv" */
	tokens(s, 0, 8, 7, 1);
	sqe(s, KVP_OP_SEQ_OPEN, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	sqe(s, KVP_OP_ALLOC, 0, 0, 8, 0, 0, 0, 0, 0);
	fill(s, 4096, 1024, 0x80);
	sqe(s, KVP_OP_WRITE_KV, 0, 0, 8, 4096, 0, 0, 0, 0x0000);
	sqe(s, KVP_OP_WRITE_KV, 0, 0, 8, 4096, 0, 0, 0, 0x0100);
	run(s, 8);
	put8(s, FZ_A_DRAIN);
	put8(s, FZ_A_ATTEND);
	put16(s, 8192 / 4);
	put8(s, 1);          /* one sequence */
	put8(s, 2);          /* q_heads */
	put8(s, 0);          /* f32 pool dtype, group 0, layer 0 */
	put8(s, 0);          /* scale 0.35, no softcap */
	put8(s, 0);          /* handle 0 */
	put16(s, 0);         /* first_pos */
	put8(s, 8);          /* count */
	put16(s, 12288 / 4); /* q */
	put16(s, 16384 / 4); /* out */
	sqe(s, KVP_OP_ATTEND, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_READ_KV, 0, 0, 8, 0, 20480, 1024, 0, 0x0100);
	run(s, 8);
	put8(s, FZ_A_POLL);
	put8(s, 3);
	put8(s, FZ_A_DRAIN);
	sqe(s, KVP_OP_COMMIT, 0, 0, 8, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_FREE, 0, 0, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_SEQ_CLOSE, 0, 0, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	put8(s, FZ_A_DRAIN);
}

/* Admin: a pool made, attached, checked, dumped, evicted, reset, destroyed. */
static void admin(struct seed *s)
{
	start(s, 0, 3 | 2 << 5, 1 | FZ_S1_ADMIN | FZ_S1_STATS, 0);
	put8(s, FZ_A_POOL_PARAMS);
	put16(s, 0);
	put8(s, 0);       /* "f0" */
	put8(s, 32);      /* blocks */
	put8(s, 4);       /* block_size */
	put8(s, 2);       /* groups: full, rswa */
	put8(s, 0);
	put8(s, 8);       /* param */
	put8(s, 1 | 0x40); /* caching, KV */
	put8(s, 0);       /* 1 head x 4 dims x 1 layer */
	put16(s, 128);    /* max_len */
	put8(s, 4);       /* max_step_tokens */
	sqe(s, KVP_OP_POOL_CREATE, 0, FZ_F_AUTO | FZ_F_OPFLAG, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_CHECK, 0, 0, 0, 0, 1024, 256, 0, 0);
	sqe(s, KVP_OP_DUMP_FREEQ, 0, 0, 0, 0, 2048, 512, 0, 0);
	sqe(s, KVP_OP_STATS, 0, FZ_F_OUT_ALL, 0, 0, 4096, 0, 0, 0);
	run(s, 8);
	bytes(s, 512, "f0");
	sqe(s, KVP_OP_ATTACH, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	tokens(s, 600, 9, 3, 0);
	sqe(s, KVP_OP_SEQ_OPEN, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	sqe(s, KVP_OP_ALLOC, 0, 0, 9, 0, 0, 0, 0, 0);
	put8(s, FZ_A_ARENA_BYTES);
	put16(s, 700 / 4);
	put8(s, 12);
	put32(s, 1);
	put32(s, 2);
	put32(s, 1);
	sqe(s, KVP_OP_EVICT, 0, 0, 3, 700, 0, 0, 0, 0);
	sqe(s, KVP_OP_SEQ_CLOSE, 0, 0, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_RESET, 0, 0, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_POOL_DESTROY, 0, 0, 2, 512, 0, 0, 0, 0);
	run(s, 16);
	put8(s, FZ_A_TICK);
}

/* Hostile indices: an SQ tail a ring ahead, then a CQ head past what was produced. */
static void hostile(struct seed *s, int which)
{
	start(s, 0, 2 | 1 << 5, 2, 0);
	sqe(s, KVP_OP_NOP, 0, 0, 0, 0, 0, 0, 0, 0);
	put8(s, FZ_A_SQ_TAIL);
	put8(s, which ? 0 : 1);
	put32(s, which ? 3 : 0x80000000u);
	run(s, 4);
	put8(s, FZ_A_CQ_HEAD);
	put8(s, 1);
	put32(s, 0x7fffffffu);
	sqe(s, KVP_OP_NOP, 0, 0, 0, 0, 0, 0, 0, 0);
	run(s, 4);
}

/* Quotas: uid 1000 in namespace "team" (8 sequences), and a second client of uid 1001. */
static void quotas(struct seed *s)
{
	start(s, 0, 4 | 1 << 5, 2 | 1 << 2 | FZ_S1_STATS, 1 | FZ_S2_TRACE);
	tokens(s, 0, 4, 9, 1);
	for (int i = 0; i < 10; i++)
		sqe(s, KVP_OP_SEQ_OPEN, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	run(s, 16);
	sqe(s, KVP_OP_ALLOC, 0, 0, 64, 0, 0, 0, 0, 0);
	run(s, 4);
	put8(s, FZ_ACTION(FZ_A_CONNECT, 1));
	put8(s, 2 | 1 << 5);
	put8(s, 2 | 2 << 2);
	put8(s, 2);
	put8(s, FZ_ACTION(FZ_A_TOKENS, 1));
	put16(s, 0);
	put8(s, 4);
	put8(s, 9);
	put8(s, 1);
	put8(s, FZ_ACTION(FZ_A_SQE, 1));
	put8(s, op_index(KVP_OP_SEQ_OPEN));
	put8(s, 0);
	put8(s, FZ_F_AUTO);
	for (int i = 0; i < (FZ_SQE_BYTES - 3) / 2; i++)
		put16(s, 0);
	put8(s, FZ_ACTION(FZ_A_RUN, 1));
	put8(s, 3);
	put8(s, FZ_ACTION(FZ_A_HANGUP, 0));
	put8(s, FZ_A_TICK);
}

/* Split-K: an admin's f16 pool of 8192 positions, 4200 written, one query reading them all. */
static void split_k(struct seed *s)
{
	start(s, 0, 4 | 4 << 5, FZ_S1_ADMIN, 0); /* 16 entries, 256 KiB, no pool yet */
	put8(s, FZ_A_POOL_PARAMS);
	put16(s, 0);
	put8(s, 0);          /* "f0" */
	put8(s, 200);        /* blocks: 128 once clamped */
	put8(s, 64);         /* block_size */
	put8(s, 1);          /* full */
	put8(s, 0);
	put8(s, 0);
	put8(s, 1 | 1 << 3 | 0x40); /* caching, f16, KV */
	put8(s, 0);          /* 1 head x 4 dims x 1 layer */
	put16(s, 8192);      /* max_len */
	put8(s, 1);
	sqe(s, KVP_OP_POOL_CREATE, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	bytes(s, 1024, "f0");
	sqe(s, KVP_OP_ATTACH, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	sqe(s, KVP_OP_SEQ_OPEN, 0, 0, 4200, 4096, 0, 0, 0, 0); /* 4200 zero tokens */
	run(s, 8);
	sqe(s, KVP_OP_ALLOC, 0, 0, 4200, 0, 0, 0, 0, 0);
	fill(s, 32768, 4200 * 2 * 4 * 2, 0x80);
	sqe(s, KVP_OP_WRITE_KV, 0, 0, 4200, 32768, 0, 0, 0, 0);
	run(s, 8);
	put8(s, FZ_A_DRAIN);
	put8(s, FZ_A_ATTEND);
	put16(s, 2048 / 4);
	put8(s, 1);
	put8(s, 1);           /* q_heads */
	put8(s, 0);
	put8(s, 0);
	put8(s, 0);           /* handle 0 */
	put16(s, 4199);       /* first_pos */
	put8(s, 1);
	put16(s, 200000 / 4); /* q */
	put16(s, 200064 / 4); /* out */
	sqe(s, KVP_OP_ATTEND, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	put8(s, FZ_A_DRAIN);
}

/* Flow control: 70 WRITE_KVs, of which 64 go to the workers and the rest wait; traced. */
static void data_blocked(struct seed *s)
{
	start(s, 0, 7 | 3 << 5, 1, FZ_S2_TRACE); /* 128 entries, 64 KiB, "kv" */
	tokens(s, 0, 8, 1, 1);
	sqe(s, KVP_OP_SEQ_OPEN, 0, FZ_F_AUTO, 0, 0, 0, 0, 0, 0);
	run(s, 8);
	sqe(s, KVP_OP_ALLOC, 0, 0, 8, 0, 0, 0, 0, 0);
	run(s, 8);
	for (int i = 0; i < 70; i++)
		sqe(s, KVP_OP_WRITE_KV, 0, 0, 1, 4096, 0, 0, i % 8, 0);
	run(s, 64);
	run(s, 64);
	put8(s, FZ_A_POLL);
	put8(s, 1 | 4 | 8);
	run(s, 64);
	put8(s, FZ_A_DRAIN);
}

/* A setup the daemon refuses: a bad magic. */
static void bad_setup(struct seed *s)
{
	start(s, 0, 1 << 5, 1 | FZ_S1_MUTATE, 0);
	put8(s, 0);
	put32(s, 0x12345678);
}

int main(int argc, char **argv)
{
	struct seed s;
	int bad = 0;

	if (argc != 2) {
		fputs("usage: gen_session_seeds DIR\n", stderr);
		return 2;
	}
	seq_life(&s);
	bad |= save(&s, argv[1], "seq-life");
	kv_life(&s);
	bad |= save(&s, argv[1], "kv-attend");
	admin(&s);
	bad |= save(&s, argv[1], "admin-pool");
	hostile(&s, 0);
	bad |= save(&s, argv[1], "hostile-sq-tail");
	hostile(&s, 1);
	bad |= save(&s, argv[1], "hostile-cq-head");
	quotas(&s);
	bad |= save(&s, argv[1], "quotas-two-clients");
	bad_setup(&s);
	bad |= save(&s, argv[1], "bad-setup");
	split_k(&s);
	bad |= save(&s, argv[1], "split-k");
	data_blocked(&s);
	bad |= save(&s, argv[1], "data-blocked");
	return bad;
}
