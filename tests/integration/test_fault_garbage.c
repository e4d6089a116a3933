/* SPDX-License-Identifier: MIT */
/*
 * Garbage submissions: unknown opcodes, non-zero reserved fields, arena
 * offsets and lengths out of range, outputs larger than the arena. Each gets
 * its exact error completion (dispatch.c), nothing in the pool changes, and
 * the daemon keeps serving this connection and new ones.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define POOL "p"
/* Where this test stages raw inputs and outputs: above what the blocking calls use. */
#define IN_OFF 65536u
#define OUT_OFF 131072u
/* First opcode of the non-admin range this test treats as unassigned. */
#define FIRST_UNKNOWN 32u
_Static_assert(KVP_OP_ATTACH < FIRST_UNKNOWN, "FIRST_UNKNOWN must be unassigned");

static struct daemon *g_daemon;
static pid_t g_main;

static void cleanup(void)
{
	if (g_daemon && getpid() == g_main) {
		kill(g_daemon->pid, SIGKILL);
		waitpid(g_daemon->pid, NULL, 0);
		fprintf(stderr, "kvpoold killed; its log: %s\n", g_daemon->log);
	}
}

static void on_alarm(int sig)
{
	static const char msg[] = "test_fault_garbage: timed out\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	if (g_daemon)
		kill(g_daemon->pid, SIGKILL);
	_exit(1);
}

/* One raw entry, submitted and completed; the completion is returned whole. */
static struct kvp_cqe raw(struct kvp_client *c, const struct kvp_sqe *in)
{
	static uint64_t user_data = 0x9000;
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe, out;

	CHECK(sqe != NULL);
	*sqe = *in;
	sqe->user_data = ++user_data;
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	out = *cqe;
	kvp_cqe_seen(c, cqe);
	CHECK_EQ(out.user_data, user_data);
	CHECK_EQ(out.resv, 0);
	return out;
}

static int32_t res_of(struct kvp_client *c, const struct kvp_sqe *in)
{
	struct kvp_cqe cqe = raw(c, in);

	CHECK_EQ(cqe.flags, 0);
	return cqe.res;
}

static struct kvp_sqe op(uint8_t opcode, uint64_t handle)
{
	struct kvp_sqe s;

	memset(&s, 0, sizeof(s));
	s.opcode = opcode;
	s.handle = handle;
	return s;
}

static void pool_is(struct kvp_client *c, uint32_t free_, uint32_t used, uint32_t cached)
{
	struct kvp_pool_stats st;

	CHECK_EQ(kvp_pool_stats(c, &st), 0);
	CHECK_EQ(st.blocks_total, 32);
	CHECK_EQ(st.blocks_free, free_);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_cached, cached);
}

int main(void)
{
	static const char *const pool_kv[] = { "blocks=32", "block_size=4", "groups=full", NULL };
	static const uint32_t prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct daemon d;
	struct kvp_client *c, *adm, *c2;
	struct kvp_sqe s;
	struct kvp_cqe cqe;
	uint64_t ab, h, h2;
	uint8_t *arena;
	long rss0;
	char why[256];

	g_main = getpid();
	atexit(cleanup);
	signal(SIGALRM, on_alarm);
	alarm(30);

	CHECK_EQ(daemon_start(&d, NULL), 0);
	g_daemon = &d;
	create_pool_or_die(&d, POOL, pool_kv);
	c = connect_or_die(&d, POOL, "", false);
	adm = connect_or_die(&d, POOL, "", true);
	arena = kvp_arena(c, &ab);
	CHECK_EQ(ab, 4u << 20);

	/* A sequence to aim at: 8 tokens in blocks 1..2, both published. */
	CHECK_EQ(kvp_seq_open(c, prompt, 8, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, 8, 0, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_commit(c, h, 8), 0);
	pool_is(c, 29, 2, 2);
	rss0 = daemon_rss_kib(&d);
	CHECK(rss0 > 0);

	/*
	 * Unknown opcodes: the upper half of the non-admin range (new opcodes are added right
	 * after ATTACH, so this stays unassigned the longest), and past the admin range.
	 */
	for (unsigned o = FIRST_UNKNOWN; o < KVP_OP_POOL_CREATE; o++) {
		s = op((uint8_t)o, h);
		CHECK_EQ(res_of(c, &s), -EINVAL);
		CHECK_EQ(res_of(adm, &s), -EINVAL);
	}
	for (unsigned o = KVP_OP_LAST; o <= 255; o++) {
		s = op((uint8_t)o, h);
		CHECK_EQ(res_of(adm, &s), -EINVAL);
		/* Unknown is unknown, whoever asks: no admin check first. */
		CHECK_EQ(res_of(c, &s), -EINVAL);
	}

	/* Reserved fields: -EINVAL before anything else (even before the admin check). */
	{
		static const uint8_t ops[] = { KVP_OP_NOP, KVP_OP_LOOKUP, KVP_OP_ALLOC,
					       KVP_OP_SEQ_CLOSE, KVP_OP_POOL_STATS, KVP_OP_STATS,
					       KVP_OP_RESET, KVP_OP_CHECK, 200 };

		for (unsigned i = 0; i < sizeof(ops); i++) {
			for (unsigned f = 0; f < 5; f++) {
				s = op(ops[i], h);
				s.len = 4;
				s.out_addr = OUT_OFF;
				s.out_len = 4096;
				switch (f) {
				case 0: s.flags = 1; break;
				case 1: s.flags = 0x80; break;
				case 2: s.resv1 = 1; break;
				case 3: s.resv2 = 1; break;
				case 4: s.resv2 = 1ull << 63; break;
				}
				CHECK_EQ(res_of(c, &s), -EINVAL);
				CHECK_EQ(res_of(adm, &s), -EINVAL);
			}
		}
	}
	/* The ALLOC and SEQ_CLOSE above did nothing. */
	pool_is(c, 29, 2, 2);
	CHECK_EQ(kvp_lookup(c, h, NULL, 0), 4);

	/* Unknown per-opcode flags. */
	memcpy(arena + IN_OFF, prompt, sizeof(prompt));
	s = op(KVP_OP_SEQ_OPEN, 0);
	s.addr = IN_OFF;
	s.len = 8;
	s.op_flags = 2;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s = op(KVP_OP_ALLOC, h);
	s.len = 4;
	s.op_flags = ~KVP_ALLOC_USE_CACHE;
	CHECK_EQ(res_of(c, &s), -EINVAL);

	/* Arena offsets out of range. */
	{
		static const uint64_t bad[] = { 0, 1, 2, 3, 4 };

		for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			/* 2 tokens (8 bytes) at ab - 7 .. ab - 3: 1 to 5 bytes past the end. */
			s = op(KVP_OP_SEQ_OPEN, 0);
			s.addr = ab - 8 + bad[i] + 1;
			s.len = 2;
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_APPEND_TOKENS, h);
			s.addr = ab - 8 + bad[i] + 1;
			s.len = 2;
			CHECK_EQ(res_of(c, &s), -EINVAL);
		}
		static const uint64_t far[] = { 4u << 20, (4u << 20) + 4096, 1ull << 32, 1ull << 62,
						~0ull - 3, ~0ull };

		for (unsigned i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
			s = op(KVP_OP_SEQ_OPEN, 0);
			s.addr = far[i];
			s.len = 1;
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_APPEND_TOKENS, h);
			s.addr = far[i];
			s.len = 1;
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_ATTACH, 0);
			s.addr = far[i];
			s.len = 1;
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_EVICT, 0);
			s.addr = far[i];
			s.len = 1;
			CHECK_EQ(res_of(adm, &s), -EINVAL);
			s = op(KVP_OP_POOL_DESTROY, 0);
			s.addr = far[i];
			s.len = 1;
			CHECK_EQ(res_of(adm, &s), -EINVAL);
			s = op(KVP_OP_POOL_CREATE, 0);
			s.addr = far[i];
			s.len = sizeof(struct kvp_pool_params);
			CHECK_EQ(res_of(adm, &s), -EINVAL);
			/* Outputs: the range written must be inside the arena. */
			s = op(KVP_OP_POOL_STATS, 0);
			s.out_addr = far[i];
			s.out_len = sizeof(struct kvp_pool_stats);
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_STATS, 0);
			s.out_addr = far[i];
			s.out_len = 4096;
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_GET_TABLE, h);
			s.out_addr = far[i];
			s.out_len = 4096;
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_LOOKUP, h);
			s.out_addr = far[i];
			s.out_len = 4096;
			CHECK_EQ(res_of(c, &s), -EINVAL);
			s = op(KVP_OP_DUMP_FREEQ, 0);
			s.out_addr = far[i];
			s.out_len = 4096;
			CHECK_EQ(res_of(adm, &s), -EINVAL);
		}
		/* The salt must fit too: 1 token at the very end, then 1 byte of salt past it. */
		s = op(KVP_OP_SEQ_OPEN, 0);
		s.addr = ab - 4;
		s.len = 1;
		s.arg2 = 1;
		CHECK_EQ(res_of(c, &s), -EINVAL);
		/* Salt longer than the 256 bytes allowed. */
		s = op(KVP_OP_SEQ_OPEN, 0);
		s.addr = IN_OFF;
		s.len = 1;
		s.arg2 = 257;
		CHECK_EQ(res_of(c, &s), -EINVAL);
		/* No tokens at all. */
		s = op(KVP_OP_SEQ_OPEN, 0);
		s.addr = IN_OFF;
		CHECK_EQ(res_of(c, &s), -EINVAL);
		/* A lists output straddling the end: the write would not fit. */
		s = op(KVP_OP_GET_TABLE, h);
		s.out_addr = ab - 70; /* 68 + 2 * 4 bytes needed */
		s.out_len = 76;
		CHECK_EQ(res_of(c, &s), -EINVAL);
		s = op(KVP_OP_POOL_STATS, 0);
		s.out_addr = ab - 15;
		s.out_len = 16;
		CHECK_EQ(res_of(c, &s), -EINVAL);
	}
	/* The same inputs exactly at the end do fit (the checks are not off by one). */
	memcpy(arena + ab - 8, prompt, 8);
	s = op(KVP_OP_SEQ_OPEN, 0);
	s.addr = ab - 8;
	s.len = 2;
	cqe = raw(c, &s);
	CHECK_EQ(cqe.res, 0);
	h2 = cqe.aux;
	s = op(KVP_OP_GET_TABLE, h);
	s.out_addr = ab - 76;
	s.out_len = 76;
	CHECK_EQ(res_of(c, &s), 76);
	CHECK_EQ(((struct kvp_block_lists *)(arena + ab - 76))->counts[0], 2);
	s = op(KVP_OP_POOL_STATS, 0);
	s.out_addr = ab - 16;
	s.out_len = 16;
	CHECK_EQ(res_of(c, &s), 0);
	CHECK_EQ(((struct kvp_pool_stats *)(arena + ab - 16))->blocks_used, 2);
	CHECK_EQ(kvp_seq_close(c, h2), 0);

	/* Huge lengths. */
	s = op(KVP_OP_SEQ_OPEN, 0);
	s.addr = IN_OFF;
	s.len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s.len = (uint32_t)(ab / 4) + 1;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s = op(KVP_OP_APPEND_TOKENS, h);
	s.addr = IN_OFF;
	s.len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s = op(KVP_OP_ATTACH, 0);
	s.addr = IN_OFF;
	s.len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	memset(arena + IN_OFF, 'p', 64);
	s.len = KVP_NAME_MAX; /* 32 name bytes: one too many */
	CHECK_EQ(res_of(c, &s), -EINVAL);
	memcpy(arena + IN_OFF, "p\0q", 3); /* a NUL inside the name */
	s.len = 3;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s = op(KVP_OP_EVICT, 0);
	s.addr = IN_OFF;
	s.len = UINT32_MAX;
	CHECK_EQ(res_of(adm, &s), -EINVAL);
	s = op(KVP_OP_POOL_CREATE, 0);
	s.addr = IN_OFF;
	s.len = UINT32_MAX;
	CHECK_EQ(res_of(adm, &s), -EINVAL);
	/* COMMIT beyond the tokens known. */
	s = op(KVP_OP_COMMIT, h);
	s.len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s.len = 9;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	/* ALLOC of 2^32-1 tokens (or lookahead): the pool is short, nothing changes. */
	s = op(KVP_OP_ALLOC, h);
	s.len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), -ENOSPC);
	s.len = 1;
	s.arg1 = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), -ENOSPC);
	pool_is(c, 29, 2, 2);

	/* Outputs that claim more room than the arena has. */
	s = op(KVP_OP_STATS, 0);
	s.out_addr = 0;
	s.out_len = (uint32_t)ab + 1;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s.out_len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s.out_addr = OUT_OFF;
	s.out_len = (uint32_t)(ab - OUT_OFF) + 1;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	s = op(KVP_OP_DUMP_FREEQ, 0);
	s.out_addr = OUT_OFF;
	s.out_len = UINT32_MAX;
	CHECK_EQ(res_of(adm, &s), -EINVAL);
	s.out_len = (uint32_t)(ab - OUT_OFF) + 4;
	CHECK_EQ(res_of(adm, &s), -EINVAL);
	/* Lists and stats outputs: only the bytes really written are checked. */
	s = op(KVP_OP_GET_TABLE, h);
	s.out_addr = OUT_OFF;
	s.out_len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), sizeof(struct kvp_block_lists) + 2 * sizeof(uint32_t));
	s = op(KVP_OP_LOOKUP, h);
	s.out_addr = OUT_OFF;
	s.out_len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), 4);
	s = op(KVP_OP_POOL_STATS, 0);
	s.out_addr = OUT_OFF;
	s.out_len = UINT32_MAX;
	CHECK_EQ(res_of(c, &s), 0);
	/* CHECK's reason text is optional: an impossible buffer is just not written. */
	s = op(KVP_OP_CHECK, 0);
	s.out_addr = OUT_OFF;
	s.out_len = UINT32_MAX;
	CHECK_EQ(res_of(adm, &s), 0);
	/* An ALLOC whose lists would not fit still allocates, and says so in the flags. */
	CHECK_EQ(kvp_free(c, h), 0);
	s = op(KVP_OP_ALLOC, h);
	s.len = 8;
	s.out_addr = ab - 8;
	s.out_len = UINT32_MAX;
	cqe = raw(c, &s);
	CHECK_EQ(cqe.res, 0);
	CHECK_EQ(cqe.flags, KVP_CQE_F_OVERFLOW);
	CHECK_EQ(cqe.aux, 0);
	pool_is(c, 29, 2, 2);

	/* Outputs too small: -EOVERFLOW with the size needed in aux. */
	s = op(KVP_OP_GET_TABLE, h);
	s.out_addr = OUT_OFF;
	s.out_len = 75;
	cqe = raw(c, &s);
	CHECK_EQ(cqe.res, -EOVERFLOW);
	CHECK_EQ(cqe.aux, 76);
	s = op(KVP_OP_LOOKUP, h);
	s.out_addr = OUT_OFF;
	s.out_len = 4;
	cqe = raw(c, &s);
	CHECK_EQ(cqe.res, -EOVERFLOW);
	s = op(KVP_OP_STATS, 0);
	s.out_addr = OUT_OFF;
	s.out_len = sizeof(struct kvp_stats_header);
	cqe = raw(c, &s);
	CHECK_EQ(cqe.res, -EOVERFLOW);
	/* 1 pool, 3 clients (c, adm and create_pool_or_die's may be gone): at least this much. */
	CHECK(cqe.aux >= sizeof(struct kvp_stats_header) + sizeof(struct kvp_pool_entry) +
				2 * sizeof(struct kvp_client_entry));
	CHECK_EQ((cqe.aux - sizeof(struct kvp_stats_header) - sizeof(struct kvp_pool_entry)) %
			 sizeof(struct kvp_client_entry), 0);
	s = op(KVP_OP_POOL_STATS, 0);
	s.out_addr = OUT_OFF;
	s.out_len = sizeof(struct kvp_pool_stats) - 1;
	CHECK_EQ(res_of(c, &s), -EINVAL);
	/* ALLOC lists that do not fit: allocated anyway, flagged. */
	CHECK_EQ(kvp_free(c, h), 0);
	s = op(KVP_OP_ALLOC, h);
	s.len = 8;
	s.out_addr = OUT_OFF;
	s.out_len = sizeof(struct kvp_block_lists);
	cqe = raw(c, &s);
	CHECK_EQ(cqe.res, 0);
	CHECK_EQ(cqe.flags, KVP_CQE_F_OVERFLOW);
	pool_is(c, 29, 2, 2);

	/* The daemon is fine: this connection, the admin one, and a new one all work. */
	CHECK_EQ(kvp_nop(c), 0);
	CHECK_EQ(kvp_nop(adm), 0);
	c2 = connect_or_die(&d, POOL, "", false);
	CHECK_EQ(kvp_nop(c2), 0);
	{
		uint64_t h3;
		uint32_t hit = 0;

		CHECK_EQ(kvp_seq_open(c2, prompt, 8, NULL, 0, -1, &h3), 0);
		CHECK_EQ(kvp_alloc(c2, h3, 1, 0, true, &hit, NULL, 0), 0);
		CHECK_EQ(hit, 4);
		CHECK_EQ(kvp_seq_close(c2, h3), 0);
	}
	CHECK_EQ(kvp_check(adm, why, sizeof(why)), 0);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	pool_is(c, 31, 0, 2);
	/* Garbage cost the daemon no memory to speak of. */
	CHECK(daemon_rss_kib(&d) - rss0 < 1024);
	kvp_close(c);
	kvp_close(c2);
	kvp_close(adm);

	g_daemon = NULL;
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
