/* SPDX-License-Identifier: MIT */
/*
 * fuzz_session's requests: what its input writes into a client's memory
 * (SQEs, tokens, ATTEND requests, pool parameters, raw bytes), decoded from
 * the compact forms of session_format.h. Compact, because valid requests
 * from random bytes would be rare: a handle is 64 bits of the daemon's, and
 * every reserved field must be zero.
 */
#include <math.h>
#include <string.h>

#include "fuzz_session.h"
#include "session_format.h"

/* An offset the harness writes at: inside the arena (which must not be empty). */
static uint64_t arena_off(const struct fz_client *fc, uint16_t v)
{
	return ((uint64_t)v * 4) % fc->arena_bytes;
}

/* Copies @len bytes to the arena at @off, cut at its end; the last object is what was written. */
static void arena_put(struct fz_client *fc, uint64_t off, const void *src, uint64_t len,
		      uint64_t units)
{
	uint64_t room = fc->arena_bytes - off;

	memcpy(fc->arena + off, src, len < room ? len : room);
	fc->obj_off = off;
	fc->obj_len = units;
}

void fz_push_sqe(struct fz_client *fc, const struct kvp_sqe *sqe)
{
	memcpy(&fc->sqes[fc->sq_local & (fc->sq_entries - 1)], sqe, sizeof(*sqe));
	__atomic_store_n(fc->sq_tail, ++fc->sq_local, __ATOMIC_RELEASE);
}

static uint64_t pick_handle(const struct fz_client *fc, uint8_t sel)
{
	uint64_t h;

	if (!fc->nhandles)
		return sel;
	h = fc->handles[sel % (fc->nhandles < 16 ? fc->nhandles : 16)];
	if (sel >= 0xf8)
		return h + (1ull << 24); /* a generation the slot has not reached */
	if (sel >= 0xf0)
		return h ^ (1ull << 40); /* another client's tag */
	return h;
}

void fz_compact_sqe(struct fz_client *fc, struct input *in)
{
	static const uint8_t opcodes[] = { FZ_OPCODES };
	uint8_t op = opcodes[u8(in) % sizeof(opcodes)], hsel = u8(in), fl = u8(in);
	uint16_t len = u16(in), addr = u16(in), out_addr = u16(in), out_len = u16(in);
	uint16_t arg1 = u16(in), arg2 = u16(in);
	struct kvp_sqe sqe = {
		.opcode = op,
		.len = fl & FZ_F_LEN_BIG ? (uint32_t)len << 12 : len,
		.handle = pick_handle(fc, hsel),
		.user_data = 0xf2ull << 56 | (uint64_t)op << 32 | fc->submitted++,
		.addr = (uint64_t)addr * 4,
		.out_addr = (uint64_t)out_addr * 4,
		.out_len = (uint32_t)out_len * 4,
		.op_flags = (fl & FZ_F_OPFLAG ? 1u : 0) | (fl & FZ_F_BADFLAG ? 0x80u : 0),
		.arg1 = fl & FZ_F_ARG1_BIG ? (uint32_t)arg1 << 16 : arg1,
		.arg2 = op == KVP_OP_WRITE_KV || op == KVP_OP_READ_KV ?
				KVP_KV_SEL(arg2 & 0xff, arg2 >> 8) : arg2,
	};

	if (fl & FZ_F_AUTO) {
		sqe.addr = fc->obj_off;
		sqe.len = (uint32_t)fc->obj_len;
	}
	if (fl & FZ_F_ADDR_WRAP)
		sqe.addr = -sqe.addr;
	if (fl & FZ_F_OUT_ALL)
		sqe.out_len = sqe.out_addr < fc->arena_bytes ?
				      (uint32_t)(fc->arena_bytes - sqe.out_addr) : 0xffffffffu;
	if (fl & FZ_F_RESV) {
		if (len & 1)
			sqe.flags = 1;
		else if (len & 2)
			sqe.resv1 = 1;
		else
			sqe.resv2 = 1;
	}
	fz_push_sqe(fc, &sqe);
}

void fz_build_attend(struct fz_client *fc, struct input *in)
{
	static const float scales[8] = { 0.35f, 1.0f, NAN, INFINITY, 0.0f, -2.0f, 1e30f, 1e-30f };
	static const float caps[8] = { 0.0f, 30.0f, -1.0f, NAN, INFINITY, 1e-3f, 50.0f, 0.0f };
	uint64_t off = arena_off(fc, u16(in));
	uint8_t nsel = u8(in), qh = u8(in), fl = u8(in), sel = u8(in);
	uint32_t n = nsel & 0x80 ? KVP_ATTEND_MAX_SEQS + 1 : nsel % 5;
	uint8_t buf[sizeof(struct kvp_attend) + 4 * sizeof(struct kvp_attend_seq)];
	struct kvp_attend *a = (struct kvp_attend *)buf;

	memset(buf, 0, sizeof(buf));
	a->group = fl >> 3 & 3;
	a->layer = fl >> 5 & 3;
	a->num_seqs = n;
	a->q_heads = qh;
	a->flags = (fl & 1 ? KVP_ATTEND_Q_F32 : 0) | (fl & 2 ? 1u << 5 : 0);
	a->resv = fl >> 2 & 1;
	a->scale = scales[sel & 7];
	a->softcap = caps[sel >> 3 & 7];
	for (uint32_t i = 0; i < 4; i++) {
		struct kvp_attend_seq *s = &a->seqs[i];

		s->handle = pick_handle(fc, u8(in));
		s->first_pos = u16(in);
		s->count = u8(in);
		s->q_off = (uint64_t)u16(in) * 4;
		s->out_off = (uint64_t)u16(in) * 4;
		if (i + 1 >= n)
			break;
	}
	arena_put(fc, off, buf, sizeof(*a) + (n < 4 ? n : 4) * sizeof(a->seqs[0]),
		  sizeof(*a) + (uint64_t)(n < 4 ? n : 4) * sizeof(a->seqs[0]));
}

void fz_build_pool_params(struct fz_client *fc, struct input *in)
{
	static const char *const names[8] = { "f0", "f1", "f2", "f3", "kv", "plain", "", "a b" };
	uint64_t off = arena_off(fc, u16(in));
	uint8_t name = u8(in), blocks = u8(in), bs = u8(in), groups = u8(in), kinds = u8(in);
	uint8_t param = u8(in), fl = u8(in), geo = u8(in);
	uint16_t max_len = u16(in);
	uint8_t step = u8(in);
	struct kvp_pool_params p = { 0 };

	strcpy(p.name, names[name & 7]);
	p.num_blocks = blocks;
	p.block_size = bs;
	p.num_groups = groups & 7;
	for (unsigned g = 0; g < p.num_groups; g++) {
		p.group_kind[g] = (uint8_t)((kinds + g * 3u) % 6);
		p.group_param[g] = param + g;
	}
	p.caching = fl & 1;
	p.free_order = fl >> 1 & 1;
	p.publish = fl >> 2 & 1;
	p.dtype = fl >> 3 & 3;
	p.resv0 = fl >> 5 & 1;
	if (fl & 0x40) {
		p.kv_heads = 1 + (geo & 3);
		p.head_dim = 4u << (geo >> 2 & 3);
		p.layers_per_group = 1 + (geo >> 4 & 1);
	}
	p.max_len = max_len;
	p.max_step_tokens = step;
	arena_put(fc, off, &p, sizeof(p), sizeof(p));
}

void fz_arena_action(struct fz_client *fc, unsigned op, struct input *in)
{
	uint64_t off = arena_off(fc, u16(in));

	if (op == FZ_A_ARENA_BYTES) {
		uint8_t buf[255], len = u8(in);

		take(in, buf, len);
		arena_put(fc, off, buf, len, len);
	} else if (op == FZ_A_ARENA_FILL) {
		uint64_t len = (uint64_t)u16(in) * 4, room = fc->arena_bytes - off;
		uint8_t v = u8(in);

		len = len < room ? len : room;
		if (v < 0x80) {
			memset(fc->arena + off, v, len);
		} else {
			for (uint64_t i = 0; i + 4 <= len; i += 4) {
				float f = (float)((i / 4 + v) % 7) * 0.25f - 0.5f;

				memcpy(fc->arena + off + i, &f, 4);
			}
		}
		fc->obj_off = off;
		fc->obj_len = len;
	} else {
		uint8_t n = u8(in), base = u8(in), step = u8(in);
		uint32_t tokens[255];

		for (unsigned i = 0; i < n; i++)
			tokens[i] = base + i * (step & 7) + (step >> 3) * 1000003u;
		arena_put(fc, off, tokens, (uint64_t)n * 4, n);
	}
}
