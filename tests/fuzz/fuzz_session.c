/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: whole client sessions against an in-process kvpoold
 * (fuzz_daemon.c). The input is a script (session_format.h): a client
 * connects with a setup the input picks, then writes SQEs, moves its ring
 * indices anywhere, writes its arena (tokens, ATTEND requests, pool
 * parameters), and lets the daemon serve its ring, complete jobs and keep
 * house. A second client may come and go. At the end every client hangs up
 * and the daemon must be back to idle with its pools' invariants intact.
 *
 * Bounds that keep one input cheap and finite: at most MAX_STEPS actions and
 * MAX_CONNECTS connections, a ring turn takes at most 64 entries, and the
 * pool parameters a POOL_CREATE names are clamped (clamp_pending,
 * fz_clamp_pool_params) so that no pool's memory or ATTEND's work can grow
 * past what a fuzzer run affords.
 */
#include <string.h>
#include <unistd.h>

#include "fuzz_session.h"
#include "session_format.h"

#define MAX_STEPS 1024
#define MAX_CONNECTS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint64_t arena_sizes[8] = { 0, 4096, 16384, 65536, 262144, 1u << 20, 100,
					 (1ull << 30) + 1 };
static const char *const pools[4] = { "", "kv", "plain", "nosuch" };
static const char *const namespaces[4] = { "", "team", "open", "solo" };

static void connect_client(struct kvpd *d, struct fz_client *fc, struct input *in)
{
	uint8_t s0 = u8(in), s1 = u8(in), s2 = u8(in);
	uid_t uids[4] = { geteuid(), 1000, 1001, 65534 };
	struct kvp_setup s = { .magic = KVP_MAGIC, .abi_version = KVP_ABI_VERSION };
	size_t len = sizeof(s);
	uint32_t sq = 1u << FZ_S0_SQ_LOG2(s0);
	static const uint32_t cq_mul[3] = { 0, 1, 4 };

	s.sq_entries = sq;
	s.cq_entries = FZ_S0_CQ_MODE(s0) == 3 ? 2 * sq + 1 : sq * cq_mul[FZ_S0_CQ_MODE(s0)];
	s.arena_bytes = arena_sizes[FZ_S0_ARENA(s0)];
	strcpy(s.pool, pools[FZ_S1_POOL(s1)]);
	strcpy(s.namespace_, namespaces[FZ_S1_NS(s1)]);
	s.features = (s1 & FZ_S1_SPIN ? KVP_FEAT_SPIN_WAKEUP : 0) |
		     (s1 & FZ_S1_ADMIN ? KVP_FEAT_ADMIN : 0) |
		     (s1 & FZ_S1_STATS ? KVP_FEAT_STATS_PAGE : 0);
	if (s1 & FZ_S1_MUTATE) {
		uint8_t which = u8(in);
		uint32_t v = u32(in);

		switch (which % 9) {
		case 0: s.magic = v; break;
		case 1: s.abi_version = v; break;
		case 2: s.sq_entries = v; break;
		case 3: s.cq_entries = v; break;
		case 4: s.arena_bytes = (uint64_t)v << (which >> 4); break;
		case 5: s.resv[v & 3] = v | 1; break;
		case 6: s.pool[v % KVP_NAME_MAX] = (char)(v >> 8); break;
		case 7: s.namespace_[v % KVP_NAME_MAX] = (char)(v >> 8); break;
		case 8: len = v % (sizeof(s) + 8); break; /* short, empty or long message */
		}
	}
	fz_fail_client_watch = s2 & FZ_S2_FAIL_WATCH;
	fz_fail_doorbell_watch = s2 & FZ_S2_FAIL_BELL;
	if (len > sizeof(s)) {
		union {
			struct kvp_setup s;
			uint8_t b[sizeof(struct kvp_setup) + 8];
		} big = { .s = s };

		fz_connect(d, fc, &big.s, len, uids[FZ_S2_UID(s2)], s2 & FZ_S2_HUP);
	} else {
		fz_connect(d, fc, &s, len, uids[FZ_S2_UID(s2)], s2 & FZ_S2_HUP);
	}
	fz_fail_client_watch = fz_fail_doorbell_watch = false;
}

/*
 * The POOL_CREATEs the next turn may take name parameters that the harness
 * clamps (in the arena) to pools it can afford: a valid request stays valid,
 * an invalid one stays invalid. Jobs are drained first: a READ_KV landing on
 * the parameters could otherwise undo the clamp before the daemon reads them.
 */
static void clamp_pending(struct kvpd *d, struct kvpd_client *c, struct fz_client *fc)
{
	uint32_t avail = *fc->sq_tail - c->sq_next;

	if (avail > fc->sq_entries)
		return; /* the daemon refuses this tail without reading an entry */
	for (uint32_t i = 0; i < avail; i++) {
		const struct kvp_sqe *sqe = &fc->sqes[(c->sq_next + i) & (fc->sq_entries - 1)];
		struct kvp_pool_params p;

		if (sqe->opcode != KVP_OP_POOL_CREATE || sqe->addr > fc->arena_bytes ||
		    sizeof(p) > fc->arena_bytes - sqe->addr)
			continue;
		fz_drain(d);
		memcpy(&p, fc->arena + sqe->addr, sizeof(p));
		fz_clamp_pool_params(&p);
		memcpy(fc->arena + sqe->addr, &p, sizeof(p));
	}
}

/* The ring indices a client writes; any value at all. */
static void move_index(struct fz_client *fc, struct input *in, bool sq)
{
	uint8_t mode = u8(in);
	uint32_t v = u32(in);

	if (sq) {
		fc->sq_local = mode & 1 ? v : fc->sq_local + (uint32_t)(int8_t)v;
		__atomic_store_n(fc->sq_tail, fc->sq_local, __ATOMIC_RELEASE);
		fc->hostile = true;
		return;
	}
	fz_scan_cqes(fc);
	switch (mode % 3) {
	case 0: fc->cq_local = __atomic_load_n(fc->cq_tail, __ATOMIC_ACQUIRE); break;
	case 1: fc->cq_local = v; fc->hostile = true; break;
	case 2: fc->cq_local += (uint32_t)(int8_t)v; fc->hostile = true; break;
	}
	__atomic_store_n(fc->cq_head, fc->cq_local, __ATOMIC_RELEASE);
}

/* Every job is back: each entry the daemon took has its completion (unless indices were bent). */
static void drain(struct kvpd *d, struct fz_client *fc)
{
	fz_drain(d);
	if (!fc->connected)
		return;
	fz_scan_cqes(fc);
	if (fz_client_of(d, fc) && !fc->hostile && *fc->cq_tail != *fc->sq_head)
		fz_fail("drained, yet %u entries taken and %u completed", *fc->sq_head, *fc->cq_tail);
}

/* What the event loop does between turns (kvpd_loop_run), one piece per bit. */
static void poll_action(struct kvpd *d, struct kvpd_client *c, uint8_t bits)
{
	if (bits & 1)
		kvpd_jobs_complete(d);
	if (bits & 2)
		kvpd_workers_help(d->workers);
	if (c && (bits & 4)) {
		bool sleeping = bits & 8;

		kvpd_ring_set_sleeping(c, sleeping && !kvpd_ring_pending(c));
	}
}

static void step(struct kvpd *d, struct fz_client *clients, unsigned *connects, struct input *in)
{
	uint8_t b = u8(in);
	unsigned op = b & 15;
	struct fz_client *fc = &clients[b >> 4 & 1];
	struct kvpd_client *c = fz_client_of(d, fc);

	switch (op) {
	case FZ_A_DRAIN:
		drain(d, fc);
		return;
	case FZ_A_TICK:
		kvpd_stats_fragmentation(d);
		kvpd_pools_reap(d);
		return;
	case FZ_A_POLL:
		poll_action(d, c, u8(in));
		if (fc->connected)
			fz_scan_cqes(fc);
		return;
	case FZ_A_CONNECT:
		if (*connects >= MAX_CONNECTS)
			return;
		++*connects;
		fz_hangup(d, fc); /* whatever session was on this slot goes first */
		connect_client(d, fc, in);
		return;
	case FZ_A_HANGUP:
		fz_hangup(d, fc);
		return;
	}
	/* The rest write the client's memory: its mapping outlives the session, and is kept. */
	if (!fc->connected)
		return;
	switch (op) {
	case FZ_A_SQE_RAW: {
		struct kvp_sqe sqe;

		take(in, &sqe, sizeof(sqe));
		fz_push_sqe(fc, &sqe);
		return;
	}
	case FZ_A_SQE:
		fz_compact_sqe(fc, in);
		return;
	case FZ_A_SQ_TAIL:
	case FZ_A_CQ_HEAD:
		move_index(fc, in, op == FZ_A_SQ_TAIL);
		return;
	case FZ_A_RUN: {
		unsigned budget = u8(in) % 64 + 1;

		if (!c)
			return;
		clamp_pending(d, c, fc);
		kvpd_ring_process(d, c, budget, kvpd_dispatch); /* -EPROTO: the daemon closed it */
		fz_scan_cqes(fc);
		return;
	}
	}
	if (!fc->arena_bytes)
		return;
	if (op == FZ_A_ATTEND)
		fz_build_attend(fc, in);
	else if (op == FZ_A_POOL_PARAMS)
		fz_build_pool_params(fc, in);
	else if (op == FZ_A_ARENA_BYTES || op == FZ_A_ARENA_FILL || op == FZ_A_TOKENS)
		fz_arena_action(fc, op, in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvpd *d = fz_daemon();
	struct input in = { data, size };
	struct fz_client clients[2] = { { .sock = -1 }, { .sock = -1 } };
	uint8_t pre = u8(&in);
	unsigned connects = 1;

	/* Read ahead: client 0's setup byte 2 (after the prelude and two setup bytes). */
	fz_begin(size > 3 && (data[3] & FZ_S2_TRACE));
	fz_pools_create(d, FZ_PRE_KV_SHAPE(pre), FZ_PRE_DTYPE(pre), FZ_PRE_PLAIN_SHAPE(pre));
	connect_client(d, &clients[0], &in);
	for (unsigned i = 0; in.n && i < MAX_STEPS; i++)
		step(d, clients, &connects, &in);
	/* Hung up with jobs in flight, the daemon keeps a client until they are back. */
	for (unsigned k = 0; k < 2; k++) {
		if (pre & FZ_PRE_DRAIN_FIRST)
			drain(d, &clients[k]);
		fz_hangup(d, &clients[k]);
	}
	fz_teardown(d);
	return 0;
}
