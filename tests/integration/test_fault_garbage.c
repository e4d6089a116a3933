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
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define POOL "p"
/* Where this test stages raw inputs and outputs: above what the blocking calls use. */
#define IN_OFF 65536u
#define OUT_OFF 131072u
#define NAME_OFF (IN_OFF + 4096u)   /* a pool name: "p" */
#define PARAMS_OFF (IN_OFF + 8192u) /* struct kvp_pool_params of a pool "q" */
/* First opcode of the non-admin range this test treats as unassigned. */
#define FIRST_UNKNOWN 32u
_Static_assert(KVP_OP_ATTACH < FIRST_UNKNOWN, "FIRST_UNKNOWN must be unassigned");

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

/*
 * An entry of @opcode that would do something (succeed, or change the pool or
 * @h) but for a stray op_flags bit: the prompt at IN_OFF doubles as EVICT's ids.
 */
static struct kvp_sqe plausible(uint8_t opcode, uint64_t h)
{
	struct kvp_sqe s = op(opcode, h);

	s.out_addr = OUT_OFF;
	s.out_len = 4096;
	switch (opcode) {
	case KVP_OP_SEQ_OPEN:
	case KVP_OP_APPEND_TOKENS:
	case KVP_OP_EVICT:
		s.addr = IN_OFF;
		s.len = 2;
		break;
	case KVP_OP_ALLOC:
	case KVP_OP_COMMIT:
		s.len = 8;
		break;
	case KVP_OP_ATTACH:
	case KVP_OP_POOL_DESTROY:
		s.addr = NAME_OFF;
		s.len = 1;
		break;
	case KVP_OP_POOL_CREATE:
		s.addr = PARAMS_OFF;
		s.len = sizeof(struct kvp_pool_params);
		break;
	}
	return s;
}

/*
 * Every opcode refuses an op_flags bit it does not know, before anything else
 * (the handle, the pool, the admin check), whoever asks: SEQ_OPEN, ALLOC and
 * POOL_CREATE know bit 0 only, the others none.
 */
static void stray_op_flags(struct kvp_client *c, struct kvp_client *adm, uint8_t *arena,
			   uint64_t h)
{
	static const uint32_t bits[] = { 1u << 0, 1u << 1, 1u << 16, 1u << 31 };
	struct kvp_pool_params params;

	memcpy(arena + NAME_OFF, "p", 1);
	kvp_pool_params_init(&params, "q");
	memcpy(arena + PARAMS_OFF, &params, sizeof(params));
	for (unsigned o = 0; o < KVP_OP_LAST; o++) {
		if (o > KVP_OP_ATTEND && o < KVP_OP_POOL_CREATE)
			continue;
		for (unsigned b = 0; b < sizeof(bits) / sizeof(bits[0]); b++) {
			struct kvp_sqe s = plausible((uint8_t)o, h);

			if (bits[b] == 1 && (o == KVP_OP_SEQ_OPEN || o == KVP_OP_ALLOC ||
					     o == KVP_OP_POOL_CREATE || o == KVP_OP_POOL_DESTROY))
				continue;
			s.op_flags = bits[b];
			CHECK_EQ(res_of(c, &s), -EINVAL);
			CHECK_EQ(res_of(adm, &s), -EINVAL);
		}
	}
}

/*
 * Sends @len bytes of @msg as a connection's setup message; returns the
 * reply's result (descriptors that come with it are closed), or 1 when the
 * daemon hung up without a reply.
 */
static int raw_setup(const struct daemon *d, const void *msg, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVP_NUM_FDS)];
		struct cmsghdr align;
	} ctl;
	struct kvp_setup_reply r;
	struct iovec iov = { .iov_base = &r, .iov_len = sizeof(r) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf) };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ssize_t n;

	CHECK(fd >= 0);
	strcpy(sa.sun_path, d->socket);
	CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CHECK_EQ(send(fd, msg, len, MSG_NOSIGNAL), (ssize_t)len);
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
			close(((int *)CMSG_DATA(cm))[i]);
	close(fd);
	if (n == 0)
		return 1;
	CHECK_EQ(n, sizeof(r));
	return r.result;
}

/* A well-formed setup for pool @pool and namespace @ns (copied whole, padding and all). */
static struct kvp_setup setup_msg(const char pool[KVP_NAME_MAX], const char ns[KVP_NAME_MAX])
{
	struct kvp_setup s;

	memset(&s, 0, sizeof(s));
	s.magic = KVP_MAGIC;
	s.abi_version = KVP_ABI_VERSION;
	s.sq_entries = 4;
	s.arena_bytes = 4096;
	memcpy(s.pool, pool, KVP_NAME_MAX);
	memcpy(s.namespace_, ns, KVP_NAME_MAX);
	return s;
}

/*
 * Setup messages: exactly struct kvp_setup (longer ones are not cut short);
 * names "" or 1..31 printable non-blank ASCII bytes, zero-padded, since the
 * whole namespace field goes into every salt.
 */
static void setup_messages(const struct daemon *d)
{
	static const char none[KVP_NAME_MAX], p[KVP_NAME_MAX] = "p";
	static const char *const bad_names[] = {
		"a b", "a\tb", " a", "a\x7f", "caf\xc3\xa9", "\x01",
	};
	uint8_t big[2 * sizeof(struct kvp_setup)];
	struct kvp_setup s = setup_msg(p, none);
	char name[KVP_NAME_MAX];

	CHECK_EQ(raw_setup(d, &s, sizeof(s)), 0);
	memset(big, 0, sizeof(big));
	memcpy(big, &s, sizeof(s));
	CHECK_EQ(raw_setup(d, big, sizeof(s) + 1), -EINVAL);
	CHECK_EQ(raw_setup(d, big, sizeof(big)), -EINVAL);
	CHECK_EQ(raw_setup(d, big, sizeof(s) - 1), -EINVAL);
	CHECK_EQ(raw_setup(d, big, 1), -EINVAL);

	/* Bytes after the NUL: in the namespace, and in the pool name. */
	memset(name, 0, sizeof(name));
	memcpy(name, "ns\0x", 4);
	s = setup_msg(p, name);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	name[3] = '\0';
	name[KVP_NAME_MAX - 1] = 1;
	s = setup_msg(p, name);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	s = setup_msg(name, none);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	memset(name, 0, sizeof(name));
	name[5] = 'x'; /* "" followed by garbage */
	s = setup_msg(p, name);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	s = setup_msg(name, none);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	/* No NUL at all. */
	memset(name, 'n', sizeof(name));
	s = setup_msg(p, name);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	s = setup_msg(name, none);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	/* Characters a pool name may not have are refused in a namespace too. */
	for (unsigned i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		memset(name, 0, sizeof(name));
		strcpy(name, bad_names[i]);
		s = setup_msg(p, name);
		CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
		s = setup_msg(name, none);
		CHECK_EQ(raw_setup(d, &s, sizeof(s)), -EINVAL);
	}
	/* The longest name, 31 bytes, is fine (the daemon's own uid may use any namespace). */
	memset(name, 0, sizeof(name));
	memset(name, 'n', KVP_NAME_MAX - 1);
	s = setup_msg(p, name);
	CHECK_EQ(raw_setup(d, &s, sizeof(s)), 0);
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

	watchdog_start("test_fault_garbage", 30);

	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
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
	stray_op_flags(c, adm, arena, h);
	/* Nothing happened: h still holds its two blocks, no pool q, p's cache intact. */
	pool_is(c, 29, 2, 2);
	CHECK_EQ(kvp_lookup(c, h, NULL, 0), 4);
	s = op(KVP_OP_GET_TABLE, h);
	s.out_addr = OUT_OFF;
	s.out_len = 4096;
	CHECK_EQ(res_of(c, &s), sizeof(struct kvp_block_lists) + 2 * sizeof(uint32_t));
	CHECK_EQ(kvp_attach(adm, "q"), -ENODEV);

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
		/*
		 * A salt of any length the arena holds (here 1000 bytes, past the 256 once
		 * allowed): up to the arena's very end, and not a byte more.
		 */
		s = op(KVP_OP_SEQ_OPEN, 0);
		s.addr = ab - 4 - 1000;
		s.len = 1;
		s.arg2 = 1001;
		CHECK_EQ(res_of(c, &s), -EINVAL);
		s.arg2 = UINT32_MAX;
		CHECK_EQ(res_of(c, &s), -EINVAL);
		s.addr = IN_OFF;
		s.arg2 = (uint32_t)(ab - IN_OFF - 4) + 1;
		CHECK_EQ(res_of(c, &s), -EINVAL);
		s.addr = ab - 4 - 1000;
		s.arg2 = 1000;
		cqe = raw(c, &s);
		CHECK_EQ(cqe.res, 0);
		CHECK_EQ(kvp_seq_close(c, cqe.aux), 0);
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
	/*
	 * ALLOC's output range must lie in the arena, with room for the lists' header at
	 * least: checked before anything is allocated, with or without the prefix cache.
	 */
	CHECK_EQ(kvp_free(c, h), 0);
	pool_is(c, 31, 0, 2);
	{
		static const struct { uint64_t addr; uint32_t len; } bad[] = {
			{ 0, 0 }, /* replaced below: ab - 8, UINT32_MAX */
			{ OUT_OFF, UINT32_MAX },
			{ 0, (uint32_t)(4u << 20) + 1 },
			{ (4u << 20) - 75, 76 },
			{ 4u << 20, 76 },
			{ 1ull << 32, 76 },
			{ ~0ull - 3, 76 },
			{ ~0ull, 1 },
			{ OUT_OFF, 1 },
			{ OUT_OFF, sizeof(struct kvp_block_lists) - 1 },
		};

		for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			for (uint32_t flags = 0; flags <= KVP_ALLOC_USE_CACHE; flags++) {
				s = op(KVP_OP_ALLOC, h);
				s.len = 8;
				s.op_flags = flags;
				s.out_addr = i ? bad[i].addr : ab - 8;
				s.out_len = i ? bad[i].len : UINT32_MAX;
				CHECK_EQ(res_of(c, &s), -EINVAL);
			}
		}
	}
	pool_is(c, 31, 0, 2);
	/* The same lists exactly at the end of the arena: allocated, written. */
	s = op(KVP_OP_ALLOC, h);
	s.len = 8;
	s.out_addr = ab - 76;
	s.out_len = 76;
	CHECK_EQ(res_of(c, &s), 0);
	CHECK_EQ(((struct kvp_block_lists *)(arena + ab - 76))->counts[0], 2);
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
	/*
	 * ALLOC lists too long for a valid output: known only once allocated, so allocated
	 * anyway and flagged; kvp_alloc says -EOVERFLOW and leaves its buffer alone.
	 */
	CHECK_EQ(kvp_free(c, h), 0);
	s = op(KVP_OP_ALLOC, h);
	s.len = 8;
	s.out_addr = OUT_OFF;
	s.out_len = sizeof(struct kvp_block_lists);
	cqe = raw(c, &s);
	CHECK_EQ(cqe.res, 0);
	CHECK_EQ(cqe.flags, KVP_CQE_F_OVERFLOW);
	pool_is(c, 29, 2, 2);
	{
		union {
			struct kvp_block_lists l;
			uint8_t bytes[sizeof(struct kvp_block_lists) + 2 * sizeof(uint32_t)];
		} lb;
		uint32_t hit = 12345;

		CHECK_EQ(kvp_free(c, h), 0);
		memset(&lb, 0xa5, sizeof(lb));
		CHECK_EQ(kvp_alloc(c, h, 8, 0, false, &hit, &lb.l, sizeof(lb) - 1), -EOVERFLOW);
		CHECK_EQ(hit, 0);
		CHECK_EQ(lb.bytes[0], 0xa5);
		pool_is(c, 29, 2, 2);
		/* Less room than the header: refused, nothing allocated. */
		CHECK_EQ(kvp_free(c, h), 0);
		hit = 12345;
		CHECK_EQ(kvp_alloc(c, h, 8, 0, false, &hit, &lb.l, sizeof(lb.l) - 1), -EINVAL);
		CHECK_EQ(hit, 12345);
		pool_is(c, 31, 0, 2);
		CHECK_EQ(kvp_alloc(c, h, 8, 0, false, &hit, &lb.l, sizeof(lb)), 0);
		CHECK_EQ(lb.l.counts[0], 2);
		pool_is(c, 29, 2, 2);
	}

	setup_messages(&d);

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

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
