/* SPDX-License-Identifier: MIT */
/*
 * What WRITE_KV, READ_KV and ATTEND refuse, each at its boundary and next to
 * the same request one step inside it (which must succeed):
 *   WRITE_KV below the computed count -EPERM; at or past the allocated slots -EINVAL;
 *   READ_KV of a dropped position (swa, rswa gap, chunked, a cyclic slot overwritten)
 *     and of a never-written uncommitted one -ENODATA;
 *   ATTEND whose mask needs such a position -ENODATA;
 *   another client's handle, a closed one -EBADF; group or layer out of range -EINVAL;
 *   a pool without KV geometry -EOPNOTSUPP; q_heads not a multiple of kv_heads -EINVAL;
 *     (COMMIT's own rules, and non-finite scale or soft-cap: test_kv_commit.c)
 *   arena ranges out of bounds, malformed ATTEND headers, reserved bits -EINVAL
 *     (raw entries through kvp_get_sqe / kvp_submit / kvp_wait_cqe).
 * Refused requests change nothing: the data read afterwards is what was written,
 * positions a refused write named stay absent, and once every sequence is
 * closed no block is left in use (no pin leaked) and the invariants hold.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define POOL "kv"
#define NOKV "nokv"
#define KV_HEADS 2
#define HD 8
#define LAYERS 2
#define NGROUPS 5
#define G_FULL 0
#define G_SWA 1     /* swa:6 */
#define G_RSWA 2    /* rswa:5, prefix 6 */
#define G_CHUNKED 3 /* chunked:8 */
#define G_CYCLIC 4  /* cyclic:5, max_step_tokens 4: a ring of 2 blocks, 8 slots */
#define ROW (KV_HEADS * HD) /* floats per token */
#define MAXQ 40

static struct daemon dmn;
static uint64_t next_ud;

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* K (which 0) or V (which 1) of one element: a multiple of 2^-23 in [-1, 1). */
static float val(uint32_t which, uint32_t group, uint32_t layer, uint32_t pos, uint32_t i)
{
	uint64_t h = mix(mix((uint64_t)which << 48 | (uint64_t)group << 32 | layer) ^
			 ((uint64_t)pos << 32 | i));

	return (float)((int32_t)(h >> 40) - (1 << 23)) * 0x1p-23f;
}

static void fill_kv(uint32_t g, uint32_t l, uint32_t first, uint32_t count, float *k, float *v)
{
	for (uint32_t t = 0; t < count; t++)
		for (uint32_t i = 0; i < ROW; i++) {
			k[t * ROW + i] = val(0, g, l, first + t, i);
			v[t * ROW + i] = val(1, g, l, first + t, i);
		}
}

static int write_kv(struct kvp_client *c, uint64_t h, uint32_t g, uint32_t l, uint32_t first,
		    uint32_t count)
{
	static float k[64 * ROW], v[64 * ROW];

	CHECK(count <= 64);
	fill_kv(g, l, first, count, k, v);
	return kvp_write_kv(c, h, g, l, first, count, k, v);
}

/* A write that must be refused, carrying junk: had it landed, later reads would show it. */
static int write_junk(struct kvp_client *c, uint64_t h, uint32_t g, uint32_t l, uint32_t first,
		      uint32_t count)
{
	static float junk[64 * ROW];

	CHECK(count <= 64);
	for (uint32_t i = 0; i < count * ROW; i++)
		junk[i] = 7.0f;
	return kvp_write_kv(c, h, g, l, first, count, junk, junk);
}

/* READ_KV; on success the data must be exactly what was written. */
static int read_kv(struct kvp_client *c, uint64_t h, uint32_t g, uint32_t l, uint32_t first,
		   uint32_t count)
{
	static float k[64 * ROW], v[64 * ROW], ek[64 * ROW], ev[64 * ROW];
	int ret;

	CHECK(count <= 64);
	memset(k, 0xa5, sizeof(k));
	memset(v, 0xa5, sizeof(v));
	ret = kvp_read_kv(c, h, g, l, first, count, k, v);
	if (ret == 0) {
		fill_kv(g, l, first, count, ek, ev);
		if (memcmp(k, ek, count * ROW * sizeof(float)) ||
		    memcmp(v, ev, count * ROW * sizeof(float))) {
			fprintf(stderr, "READ_KV group %u layer %u [%u, %u): not what was written\n", g, l,
				first, first + count);
			exit(1);
		}
	}
	return ret;
}

static void fill_q(uint32_t count, uint32_t q_heads, float *q)
{
	for (uint32_t i = 0; i < count * q_heads * HD; i++)
		q[i] = (float)((int)(mix(i) % 2001) - 1000) / 1000;
}

static int attend_n(struct kvp_client *c, uint32_t g, uint32_t l, uint32_t q_heads,
		    const struct kvp_attend_req *reqs, uint32_t n)
{
	return kvp_attend(c, g, l, q_heads, 0.5f, 0, true, reqs, n);
}

static int attend(struct kvp_client *c, uint64_t h, uint32_t g, uint32_t l, uint32_t first,
		  uint32_t count, uint32_t q_heads)
{
	static float q[4 * MAXQ * HD], out[4 * MAXQ * HD];
	struct kvp_attend_req r = { .handle = h, .first_pos = first, .count = count, .q = q, .out = out };

	CHECK(count <= 4 && q_heads <= MAXQ);
	fill_q(count, q_heads, q);
	return attend_n(c, g, l, q_heads, &r, 1);
}

/* One raw entry, submitted and waited for: its result. */
static int raw(struct kvp_client *c, struct kvp_sqe in)
{
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;
	int res;

	CHECK(sqe != NULL);
	in.user_data = ++next_ud;
	*sqe = in;
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK_EQ(cqe->user_data, in.user_data);
	res = cqe->res;
	kvp_cqe_seen(c, cqe);
	return res;
}

static int raw_io(struct kvp_client *c, uint8_t op, uint64_t h, uint32_t g, uint32_t l,
		  uint32_t first, uint32_t count, uint64_t addr, uint32_t out_len, uint32_t op_flags)
{
	struct kvp_sqe s = { .opcode = op, .handle = h, .len = count, .arg1 = first,
			     .arg2 = KVP_KV_SEL(g, l), .op_flags = op_flags };

	if (op == KVP_OP_WRITE_KV) {
		s.addr = addr;
	} else {
		s.out_addr = addr;
		s.out_len = out_len;
	}
	return raw(c, s);
}

/* A raw ATTEND of one sequence, its header at @hdr_off, Q at @q_off, output at @out_off. */
struct raw_attend {
	uint64_t hdr_off, q_off, out_off;
	uint32_t len;       /* sqe.len */
	uint32_t num_seqs;  /* header's num_seqs */
	uint32_t q_heads, flags, op_flags;
	uint64_t resv;
	float softcap;
	uint32_t first, count;
};

static int raw_attend(struct kvp_client *c, uint64_t h, const struct raw_attend *r)
{
	uint64_t arena_bytes;
	uint8_t *arena = kvp_arena(c, &arena_bytes);
	struct kvp_attend a = { .group = G_FULL, .layer = 0, .num_seqs = r->num_seqs,
				.q_heads = r->q_heads, .flags = r->flags, .scale = 0.5f,
				.softcap = r->softcap, .resv = r->resv };
	struct kvp_attend_seq s = { .handle = h, .first_pos = r->first, .count = r->count,
				    .q_off = r->q_off, .out_off = r->out_off };
	struct kvp_sqe sqe = { .opcode = KVP_OP_ATTEND, .addr = r->hdr_off, .len = r->len,
			       .op_flags = r->op_flags };

	/* Write the header where it fits; a header meant to lie out of bounds is not written. */
	if (r->hdr_off + sizeof(a) + sizeof(s) <= arena_bytes) {
		memcpy(arena + r->hdr_off, &a, sizeof(a));
		memcpy(arena + r->hdr_off + sizeof(a), &s, sizeof(s));
	}
	if (r->q_off < arena_bytes && arena_bytes - r->q_off >= (uint64_t)r->count * 4 * HD * 4)
		fill_q(r->count, 4, (float *)(arena + r->q_off));
	return raw(c, sqe);
}

static void pool_stats(uint32_t free_, uint32_t used)
{
	struct kvp_pool_stats st;

	check_pool_or_die(&dmn, POOL, &st);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
}

int main(void)
{
	static const char *const kv_words[] = {
		"blocks=128", "block_size=4", "groups=full swa:6 rswa:5 chunked:8 cyclic:5",
		"kv_heads=2", "head_dim=8", "dtype=f32", "layers_per_group=2", "max_step_tokens=4",
		NULL,
	};
	static const char *const nokv_words[] = { "blocks=16", "block_size=4", "groups=full", NULL };
	struct kvp_client *c, *other, *plain;
	uint64_t h, h2, hclosed, hplain, arena_bytes;
	uint32_t tokens[24];
	uint8_t *arena;
	const uint64_t kv20 = 2ull * 4 * ROW * sizeof(float); /* K and V of 4 tokens */

	watchdog_start("test_kv_refusals", 30);

	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	create_pool_or_die(&dmn, POOL, kv_words);
	create_pool_or_die(&dmn, NOKV, nokv_words);
	c = connect_or_die(&dmn, POOL, "", false);
	other = connect_or_die(&dmn, POOL, "", false);
	plain = connect_or_die(&dmn, NOKV, "", false);
	arena = kvp_arena(c, &arena_bytes);
	CHECK(arena != NULL && arena_bytes >= (1u << 20));

	/* 20 tokens computed in steps of 4, every group and layer written; then 4 more slots. */
	for (uint32_t t = 0; t < 24; t++)
		tokens[t] = t + 1;
	CHECK_EQ(kvp_seq_open(c, tokens, 24, NULL, 0, 6, &h), 0);
	for (uint32_t pos = 0; pos < 20; pos += 4) {
		CHECK_EQ(kvp_alloc(c, h, 4, 0, false, NULL, NULL, 0), 0);
		for (uint32_t g = 0; g < NGROUPS; g++)
			for (uint32_t l = 0; l < LAYERS; l++)
				CHECK_EQ(write_kv(c, h, g, l, pos, 4), 0);
		CHECK_EQ(kvp_commit(c, h, pos + 4), 0);
	}
	CHECK_EQ(kvp_alloc(c, h, 4, 0, false, NULL, NULL, 0), 0); /* slots 20..23 */

	/* ---- WRITE_KV: below computed, past allocated ---- */
	CHECK_EQ(write_junk(c, h, G_FULL, 0, 19, 1), -EPERM);
	CHECK_EQ(write_junk(c, h, G_FULL, 0, 19, 2), -EPERM); /* straddles computed */
	CHECK_EQ(write_junk(c, h, G_FULL, 0, 0, 4), -EPERM);
	CHECK_EQ(write_junk(c, h, G_CYCLIC, 0, 16, 4), -EPERM);
	CHECK_EQ(write_junk(c, h, G_FULL, 0, 24, 1), -EINVAL);
	CHECK_EQ(write_junk(c, h, G_FULL, 0, 23, 2), -EINVAL); /* straddles allocated */
	CHECK_EQ(write_junk(c, h, G_FULL, 1, 22, 3), -EINVAL);
	CHECK_EQ(write_junk(c, h, G_FULL, 0, 100, 1), -EINVAL);
	CHECK_EQ(write_junk(c, h, NGROUPS, 0, 20, 1), -EINVAL);
	CHECK_EQ(write_junk(c, h, G_FULL, LAYERS, 20, 1), -EINVAL);
	/* One step inside: up to the last allocated slot. Layer 1 gets 20 and 22 only. */
	CHECK_EQ(write_kv(c, h, G_FULL, 0, 20, 4), 0);
	CHECK_EQ(write_kv(c, h, G_FULL, 1, 20, 1), 0);
	CHECK_EQ(write_kv(c, h, G_FULL, 1, 22, 1), 0);
	CHECK_EQ(write_kv(c, h, G_CYCLIC, 0, 20, 4), 0);

	/* Raw WRITE_KV entries of junk: count 0, op_flags, position overflow, arena bounds. */
	for (uint64_t i = 0; i < kv20 / sizeof(float); i++)
		((float *)(arena + arena_bytes - kv20))[i] = 7.0f;
	CHECK_EQ(raw_io(c, KVP_OP_WRITE_KV, h, G_FULL, 0, 20, 0, arena_bytes - kv20, 0, 0), -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_WRITE_KV, h, G_FULL, 0, 20, 4, arena_bytes - kv20, 0, 1), -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_WRITE_KV, h, G_FULL, 0, UINT32_MAX, 2, arena_bytes - kv20, 0, 0),
		 -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_WRITE_KV, h, G_FULL, 0, 20, 4, arena_bytes, 0, 0), -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_WRITE_KV, h, G_FULL, 0, 20, 4, arena_bytes - kv20 + 4, 0, 0), -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_WRITE_KV, h, G_FULL, 0, 20, 4, UINT64_MAX - 3, 0, 0), -EINVAL);
	CHECK_EQ(read_kv(c, h, G_FULL, 0, 20, 4), 0); /* no junk landed */
	/* One step inside: K and V ending exactly at the arena's end. */
	fill_kv(G_FULL, 0, 20, 4, (float *)(arena + arena_bytes - kv20),
		(float *)(arena + arena_bytes - kv20 / 2));
	CHECK_EQ(raw_io(c, KVP_OP_WRITE_KV, h, G_FULL, 0, 20, 4, arena_bytes - kv20, 0, 0), 0);

	/* ---- READ_KV ---- */
	CHECK_EQ(read_kv(c, h, G_FULL, 0, 0, 24), 0);
	CHECK_EQ(read_kv(c, h, G_FULL, 1, 0, 21), 0);
	CHECK_EQ(read_kv(c, h, G_FULL, 1, 21, 1), -ENODATA); /* allocated, never written */
	CHECK_EQ(read_kv(c, h, G_FULL, 1, 20, 2), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_FULL, 1, 22, 1), 0);
	CHECK_EQ(read_kv(c, h, G_FULL, 1, 23, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_FULL, 0, 24, 1), -ENODATA); /* past the allocation */
	CHECK_EQ(read_kv(c, h, G_FULL, 0, 1000, 1), -ENODATA);
	/* swa:6 at 20 computed: 15 skipped, blocks 0..2 (positions 0..11) dropped. */
	CHECK_EQ(read_kv(c, h, G_SWA, 0, 11, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_SWA, 0, 0, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_SWA, 0, 11, 2), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_SWA, 0, 12, 8), 0);
	/* rswa:5 with prefix 6: blocks [cdiv(6,4), 15/4) = [2, 3), positions 8..11, dropped. */
	CHECK_EQ(read_kv(c, h, G_RSWA, 1, 0, 8), 0);
	CHECK_EQ(read_kv(c, h, G_RSWA, 1, 8, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_RSWA, 1, 11, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_RSWA, 1, 7, 2), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_RSWA, 1, 12, 8), 0);
	/* chunked:8: 16 skipped, blocks 0..3 dropped. */
	CHECK_EQ(read_kv(c, h, G_CHUNKED, 0, 15, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_CHUNKED, 0, 16, 4), 0);
	/* cyclic:5, 8 slots. Layer 1 holds 12..19; layer 0 was written up to 23: it holds 16..23. */
	CHECK_EQ(read_kv(c, h, G_CYCLIC, 1, 11, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_CYCLIC, 1, 12, 8), 0);
	CHECK_EQ(read_kv(c, h, G_CYCLIC, 1, 20, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_CYCLIC, 0, 15, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_CYCLIC, 0, 15, 2), -ENODATA);
	CHECK_EQ(read_kv(c, h, G_CYCLIC, 0, 16, 8), 0);
	CHECK_EQ(read_kv(c, h, NGROUPS, 0, 12, 1), -EINVAL);
	CHECK_EQ(read_kv(c, h, G_FULL, LAYERS, 12, 1), -EINVAL);
	/* Raw READ_KV entries: output short or out of bounds; then one that just fits. */
	CHECK_EQ(raw_io(c, KVP_OP_READ_KV, h, G_FULL, 0, 16, 4, 0, (uint32_t)kv20 - 1, 0), -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_READ_KV, h, G_FULL, 0, 16, 4, arena_bytes - kv20 + 4, (uint32_t)kv20, 0),
		 -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_READ_KV, h, G_FULL, 0, 16, 4, UINT64_MAX - 7, (uint32_t)kv20, 0),
		 -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_READ_KV, h, G_FULL, 0, 16, 0, 0, (uint32_t)kv20, 0), -EINVAL);
	CHECK_EQ(raw_io(c, KVP_OP_READ_KV, h, G_FULL, 0, 16, 4, 0, (uint32_t)kv20, 1), -EINVAL);
	memset(arena + arena_bytes - kv20, 0, kv20);
	CHECK_EQ(raw_io(c, KVP_OP_READ_KV, h, G_FULL, 0, 16, 4, arena_bytes - kv20, (uint32_t)kv20, 0), 0);
	{
		float k[4 * ROW], v[4 * ROW];

		fill_kv(G_FULL, 0, 16, 4, k, v);
		CHECK(memcmp(arena + arena_bytes - kv20, k, sizeof(k)) == 0);
		CHECK(memcmp(arena + arena_bytes - kv20 / 2, v, sizeof(v)) == 0);
	}

	/* ---- ATTEND: masks needing absent positions, one query to either side ---- */
	CHECK_EQ(attend(c, h, G_SWA, 0, 16, 1, 4), -ENODATA); /* needs 11 */
	CHECK_EQ(attend(c, h, G_SWA, 0, 17, 1, 4), 0);
	CHECK_EQ(attend(c, h, G_SWA, 0, 16, 2, 4), -ENODATA);
	CHECK_EQ(attend(c, h, G_SWA, 0, 17, 3, 4), 0);
	CHECK_EQ(attend(c, h, G_SWA, 0, 3, 1, 4), -ENODATA);
	CHECK_EQ(attend(c, h, G_CHUNKED, 0, 15, 1, 4), -ENODATA);
	CHECK_EQ(attend(c, h, G_CHUNKED, 0, 16, 4, 4), 0);
	CHECK_EQ(attend(c, h, G_RSWA, 1, 15, 1, 4), -ENODATA); /* window reaches 11 */
	CHECK_EQ(attend(c, h, G_RSWA, 1, 16, 4, 4), 0);      /* prefix 0..5, then 12.. */
	CHECK_EQ(attend(c, h, G_RSWA, 1, 12, 1, 4), -ENODATA); /* 0..5 and 8..12 */
	CHECK_EQ(attend(c, h, G_RSWA, 1, 7, 1, 4), 0);        /* 0..7: before the gap */
	CHECK_EQ(attend(c, h, G_CYCLIC, 1, 15, 1, 4), -ENODATA); /* needs 11, overwritten */
	CHECK_EQ(attend(c, h, G_CYCLIC, 1, 16, 4, 4), 0);
	CHECK_EQ(attend(c, h, G_CYCLIC, 0, 19, 1, 4), -ENODATA); /* needs 15: 23 took its slot */
	CHECK_EQ(attend(c, h, G_CYCLIC, 0, 20, 4, 4), 0);
	CHECK_EQ(attend(c, h, G_FULL, 1, 20, 1, 4), 0);
	CHECK_EQ(attend(c, h, G_FULL, 1, 21, 1, 4), -ENODATA); /* never written */
	CHECK_EQ(attend(c, h, G_FULL, 1, 20, 2, 4), -ENODATA);
	CHECK_EQ(attend(c, h, G_FULL, 1, 22, 1, 4), -ENODATA); /* needs 21 */
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 4, 4), 0);
	CHECK_EQ(attend(c, h, G_FULL, 0, 24, 1, 4), -ENODATA); /* past the allocation */
	/* GQA: q_heads a multiple of kv_heads (2), any ratio (17 per kv head crosses a kernel slice). */
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 1, 3), -EINVAL);
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 1, 1), -EINVAL);
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 1, 0), -EINVAL);
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 1, 2), 0);
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 1, 32), 0);
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 1, 34), 0);
	CHECK_EQ(attend(c, h, G_FULL, 0, 20, 1, 35), -EINVAL);
	CHECK_EQ(attend(c, h, NGROUPS, 0, 20, 1, 4), -EINVAL);
	CHECK_EQ(attend(c, h, G_FULL, LAYERS, 20, 1, 4), -EINVAL);
	CHECK_EQ(attend(c, h, G_FULL, 0xffff, 20, 1, 4), -EINVAL);

	/* A fresh sequence: its slots allocated, nothing written. */
	CHECK_EQ(kvp_seq_open(c, tokens, 8, NULL, 0, -1, &h2), 0);
	CHECK_EQ(kvp_alloc(c, h2, 4, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(read_kv(c, h2, G_FULL, 0, 0, 1), -ENODATA);
	CHECK_EQ(read_kv(c, h2, G_CYCLIC, 0, 0, 1), -ENODATA);
	CHECK_EQ(attend(c, h2, G_FULL, 0, 0, 1, 4), -ENODATA);
	CHECK_EQ(attend(c, h2, G_CYCLIC, 0, 0, 1, 4), -ENODATA);
	CHECK_EQ(write_kv(c, h2, G_FULL, 0, 0, 1), 0);
	CHECK_EQ(read_kv(c, h2, G_FULL, 0, 0, 1), 0);
	CHECK_EQ(attend(c, h2, G_FULL, 0, 0, 1, 4), 0);
	CHECK_EQ(read_kv(c, h2, G_FULL, 1, 0, 1), -ENODATA); /* written in layer 0 only */
	CHECK_EQ(read_kv(c, h2, G_SWA, 0, 0, 1), -ENODATA);  /* and in group 0 only */

	/* ---- handles: another client's, a closed one, one never issued ---- */
	CHECK_EQ(kvp_seq_open(c, tokens, 8, NULL, 0, -1, &hclosed), 0);
	CHECK_EQ(kvp_alloc(c, hclosed, 4, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(write_kv(c, hclosed, G_FULL, 0, 0, 4), 0);
	CHECK_EQ(kvp_seq_close(c, hclosed), 0);
	CHECK_EQ(write_kv(other, h, G_FULL, 0, 20, 1), -EBADF);
	CHECK_EQ(read_kv(other, h, G_FULL, 0, 0, 1), -EBADF);
	CHECK_EQ(attend(other, h, G_FULL, 0, 20, 1, 4), -EBADF);
	CHECK_EQ(write_kv(c, hclosed, G_FULL, 0, 0, 1), -EBADF);
	CHECK_EQ(read_kv(c, hclosed, G_FULL, 0, 0, 1), -EBADF);
	CHECK_EQ(attend(c, hclosed, G_FULL, 0, 0, 1, 4), -EBADF);
	CHECK_EQ(write_kv(c, 0, G_FULL, 0, 0, 1), -EBADF);
	CHECK_EQ(read_kv(c, ~0ull, G_FULL, 0, 0, 1), -EBADF);
	CHECK_EQ(attend(c, h ^ (1ull << 24), G_FULL, 0, 20, 1, 4), -EBADF); /* another generation */

	/* One bad entry fails a whole multi-sequence ATTEND (and pins nothing: checked at the end). */
	{
		static float q[2][4 * HD], out[2][4 * HD];
		struct kvp_attend_req r[2] = {
			{ .handle = h, .first_pos = 20, .count = 1, .q = q[0], .out = out[0] },
			{ .handle = h2, .first_pos = 1, .count = 1, .q = q[1], .out = out[1] },
		};

		fill_q(1, 4, q[0]);
		fill_q(1, 4, q[1]);
		CHECK_EQ(attend_n(c, G_FULL, 0, 4, r, 2), -ENODATA); /* h2's position 1: never written */
		r[1].handle = hclosed;
		r[1].first_pos = 0;
		CHECK_EQ(attend_n(c, G_FULL, 0, 4, r, 2), -EBADF);
		r[1].handle = h2;
		CHECK_EQ(attend_n(c, G_FULL, 0, 4, r, 2), 0);
		r[0].first_pos = 19; /* both fine, the first one leading: order does not matter */
		CHECK_EQ(attend_n(c, G_FULL, 0, 4, r, 2), 0);
	}

	/* ---- a pool without KV geometry ---- */
	CHECK_EQ(kvp_seq_open(plain, tokens, 8, NULL, 0, -1, &hplain), 0);
	CHECK_EQ(kvp_alloc(plain, hplain, 4, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_pool_info(plain)->kv_heads, 0);
	{
		static float q[4 * HD], out[4 * HD];
		struct kvp_attend_req r = { .handle = hplain, .first_pos = 0, .count = 1, .q = q, .out = out };
		uint64_t pb;
		uint8_t *pa = kvp_arena(plain, &pb);

		CHECK_EQ(kvp_write_kv(plain, hplain, 0, 0, 0, 1, q, q), -EOPNOTSUPP);
		CHECK_EQ(kvp_read_kv(plain, hplain, 0, 0, 0, 1, q, q), -EOPNOTSUPP);
		CHECK_EQ(kvp_attend(plain, 0, 0, 4, 0.5f, 0, true, &r, 1), -EOPNOTSUPP);
		/* Raw, with room for what a KV pool of this shape would need. */
		memset(pa, 0, 4096);
		CHECK_EQ(raw_io(plain, KVP_OP_WRITE_KV, hplain, 0, 0, 0, 1, 0, 0, 0), -EOPNOTSUPP);
		CHECK_EQ(raw_io(plain, KVP_OP_READ_KV, hplain, 0, 0, 0, 1, 0, 4096, 0), -EOPNOTSUPP);
		CHECK(pb >= 4096);
	}

	/* ---- raw ATTEND entries: header, offsets, reserved fields ---- */
	{
		const uint32_t qbytes = 4 * HD * 4; /* one query, 4 heads, f32 */
		const uint32_t hdr = sizeof(struct kvp_attend) + sizeof(struct kvp_attend_seq);
		const struct raw_attend ok = { .hdr_off = 4096, .q_off = 8192, .out_off = 12288,
					       .len = hdr, .num_seqs = 1, .q_heads = 4,
					       .first = 20, .count = 1 };
		struct raw_attend r;

		CHECK_EQ(raw_attend(c, h, &ok), 0);
		r = ok, r.len = sizeof(struct kvp_attend) - 1;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.len = hdr - 1; /* num_seqs 1 does not fit */
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.num_seqs = 2;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.num_seqs = 0;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.hdr_off = arena_bytes;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.hdr_off = arena_bytes - hdr + 8;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.hdr_off = UINT64_MAX - 15;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.q_off = arena_bytes - qbytes + 4;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.q_off = UINT64_MAX;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.out_off = arena_bytes;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.out_off = arena_bytes - qbytes + 4;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.out_off = UINT64_MAX - qbytes + 1;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.count = 0;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.first = UINT32_MAX, r.count = 2;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.resv = 1;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.flags = KVP_ATTEND_Q_F32 | 2;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.op_flags = 1;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		r = ok, r.softcap = -1;
		CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		{
			uint32_t nan_bits = 0x7fc00000;

			r = ok;
			memcpy(&r.softcap, &nan_bits, sizeof(r.softcap));
			CHECK_EQ(raw_attend(c, h, &r), -EINVAL);
		}
		/* One step inside: header, Q and output each ending exactly at the arena's end. */
		r = ok, r.hdr_off = arena_bytes - hdr;
		CHECK_EQ(raw_attend(c, h, &r), 0);
		r = ok, r.q_off = arena_bytes - qbytes;
		CHECK_EQ(raw_attend(c, h, &r), 0);
		r = ok, r.out_off = arena_bytes - qbytes;
		CHECK_EQ(raw_attend(c, h, &r), 0);
		r = ok, r.flags = 0; /* f32 pool: Q in the pool dtype is f32 as well */
		CHECK_EQ(raw_attend(c, h, &r), 0);
	}

	/* ---- refused requests changed nothing ---- */
	CHECK_EQ(read_kv(c, h, G_FULL, 0, 0, 24), 0);       /* no refused write landed */
	CHECK_EQ(read_kv(c, h, G_CYCLIC, 0, 16, 8), 0);
	CHECK_EQ(read_kv(c, h, G_FULL, 1, 23, 1), -ENODATA); /* the -EINVAL write [22, 25) marked nothing */
	CHECK_EQ(read_kv(c, h, G_FULL, 1, 21, 1), -ENODATA);
	/* COMMIT needs 20..23 written in every layer of every group, refused writes not counted. */
	CHECK_EQ(kvp_commit(c, h, 24), -ENODATA);
	for (uint32_t g = 0; g < NGROUPS; g++)
		for (uint32_t l = 0; l < LAYERS; l++)
			CHECK_EQ(write_kv(c, h, g, l, 20, 4), 0);
	CHECK_EQ(kvp_commit(c, h, 24), 0);
	CHECK_EQ(read_kv(c, h, G_FULL, 0, 20, 4), 0);
	CHECK_EQ(write_kv(c, h, G_FULL, 0, 23, 1), -EPERM);

	CHECK_EQ(kvp_seq_close(c, h), 0);
	CHECK_EQ(kvp_seq_close(c, h2), 0);
	CHECK_EQ(kvp_seq_close(plain, hplain), 0);
	pool_stats(127, 0);
	kvp_close(c);
	kvp_close(other);
	kvp_close(plain);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
