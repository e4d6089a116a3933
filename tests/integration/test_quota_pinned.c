/* SPDX-License-Identifier: MIT */
/*
 * Issue #35, finding 1: no quota evasion through pinned blocks. uids 65533 (A)
 * and 65532 (B) have max_blocks 100 each in a pool of 200 blocks besides the
 * null block: the quotas sum to the pool, so no tenant under its quota may get
 * -ENOSPC (docs/reliability.md). A holds its 100 blocks in one sequence and
 * submits ATTENDs over them (each pins all 100 on the workers), a FREE of that
 * sequence and an ALLOC of 100 blocks for another. Freed but pinned, the blocks
 * stay out of the free queue, so they stay charged to A until the ATTENDs end:
 *   - A's ALLOC: -EDQUOT, A's tenant row still at 100. Before the fix the FREE
 *     uncharged them, the ALLOC took the 100 free blocks B's quota leaves it,
 *     and B, holding none, got -ENOSPC;
 *   - B's ALLOC of 100 while the ATTENDs run: 0, the pool then full;
 *   - the ATTENDs done (0), A's ALLOC of 100: 0, its freed blocks free again.
 *
 * Deterministic: the ATTENDs, the FREE and the ALLOC are one submission; the
 * daemon takes up to --budget (64) entries of a client's SQ in one turn, in
 * order (a turn is cut only past 500 us, which ten entries of microseconds do
 * not reach), and processes job completions only between turns
 * (kvpd_loop_run). So the FREE and the ALLOC run while every ATTEND ahead of
 * them pins its blocks, however fast the workers. B's ALLOC, in another
 * process, comes a round trip after A saw those two complete, against ATTENDs
 * of tens of ms each (the run prints how long they pinned); the pool stats B
 * reads next (all 200 blocks used) show the pins were still there.
 */
#include <errno.h>
#include <unistd.h>

#include "harness.h"

#define NBLOCKS 201
#define QUOTA 100
#define BS 16
#define CTX (QUOTA * BS) /* one sequence holds a whole quota */
#define KV_HEADS 2
#define HD 64
#define Q_HEADS 8
#define NQ 256           /* queries an ATTEND, the last positions: each reads every block */
#define NATTEND 8
#define UID_A 65533
#define UID_B 65532
#define FREE_UD 100
#define ALLOC_UD 101

static const char config[] =
	"[pool.p]\nblocks = 201\nblock_size = 16\ngroups = full\nmax_len = 1600\n"
	"kv_heads = 2\nhead_dim = 64\ndtype = f32\nlayers_per_group = 1\n\n"
	"[uid.65533]\nmax_blocks = 100\n\n"
	"[uid.65532]\nmax_blocks = 100\n";

static struct daemon dmn;
/* A tells B when to ALLOC and when to let go; B tells A it has allocated. */
static int to_a[2], to_b[2];

static void tell(int fd)
{
	CHECK_EQ(write(fd, "x", 1), 1);
}

/* EOF when the other side died: the check fails rather than hang. */
static void hear(int fd)
{
	char ch;

	CHECK_EQ(read(fd, &ch, 1), 1);
}

static struct kvp_client *conn(void)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = "p",
				      .arena_bytes = 16u << 20, .stats_page = true };
	struct kvp_client *c;

	CHECK_EQ(kvp_connect(&o, &c), 0);
	return c;
}

/* CTX distinct tokens from @base: no prefix hit between sequences. */
static uint64_t open_seq(struct kvp_client *c, uint32_t base)
{
	static uint32_t tokens[CTX];
	uint64_t h;

	for (uint32_t i = 0; i < CTX; i++)
		tokens[i] = base + i;
	CHECK_EQ(kvp_seq_open(c, tokens, CTX, NULL, 0, -1, &h), 0);
	return h;
}

/* @uid's blocks used against its quota, from its own view of the stats page. */
static uint64_t tenant_blocks(struct kvp_client *c, uid_t uid)
{
	static uint8_t page[1 << 20];
	const struct kvp_stats_page *pg = (const void *)page;
	const struct kvp_stats_tenant *t;

	CHECK(kvp_stats_snapshot(c, page, sizeof(page)) > 0);
	t = (const void *)(page + pg->tenants_off);
	for (uint32_t i = 0; i < pg->max_tenants; i++, t++) {
		if (t->in_use && t->kind == KVP_TENANT_UID && t->uid == uid) {
			CHECK_EQ(t->limit[KVP_QUOTA_BLOCKS], QUOTA);
			return t->used[KVP_QUOTA_BLOCKS];
		}
	}
	CHECK(!"no tenant row for the uid");
	return 0;
}

static void pool_used(struct kvp_client *c, uint32_t used)
{
	struct kvp_pool_stats st;

	CHECK_EQ(kvp_pool_stats(c, &st), 0);
	CHECK_EQ(st.blocks_used, used);
	CHECK_EQ(st.blocks_free, NBLOCKS - 1 - used);
}

static struct kvp_cqe next_cqe(struct kvp_client *c)
{
	struct kvp_cqe *cqe, copy;

	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	copy = *cqe;
	kvp_cqe_seen(c, cqe);
	return copy;
}

static int tenant_b(void *arg)
{
	struct kvp_client *c;
	uint64_t h;

	(void)arg;
	drop_to_uid(UID_B);
	close(to_a[0]);
	close(to_b[1]);
	c = conn();
	h = open_seq(c, 2000000);
	/* Connected and open beforehand: only the ALLOC itself is left for the pinned window. */
	printf("ready\n");
	fflush(stdout);
	hear(to_b[0]);
	CHECK_EQ(kvp_alloc(c, h, CTX, 0, false, NULL, NULL, 0), 0);
	/* 100 of A's still pinned: B's ALLOC came while A's freed blocks were out of reach. */
	pool_used(c, NBLOCKS - 1);
	CHECK_EQ(tenant_blocks(c, UID_B), QUOTA);
	tell(to_a[1]);
	/* Held until A's last ALLOC, so that it has only the blocks B's quota leaves. */
	hear(to_b[0]);
	kvp_close(c);
	return 0;
}

static int tenant_a(void *arg)
{
	static float kv[CTX * KV_HEADS * HD], q[NQ * Q_HEADS * HD];
	struct kvp_attend_req r = { .first_pos = CTX - NQ, .count = NQ, .q = q };
	uint64_t h, h2, off = 0, t0, seen = 0;
	struct kvp_client *c;
	struct kvp_sqe *sqe;
	struct kvp_cqe cqe;

	(void)arg;
	drop_to_uid(UID_A);
	close(to_a[1]);
	close(to_b[0]);
	c = conn();
	h = open_seq(c, 0);
	h2 = open_seq(c, 1000000);
	CHECK_EQ(kvp_alloc(c, h, CTX, 0, false, NULL, NULL, 0), 0);
	/* ATTEND reads only positions that a completed WRITE_KV made present (zeros will do). */
	CHECK_EQ(kvp_write_kv(c, h, 0, 0, 0, CTX, kv, kv), 0);
	CHECK_EQ(tenant_blocks(c, UID_A), QUOTA);

	r.handle = h;
	for (uint32_t i = 0; i < NATTEND; i++) {
		int64_t n;

		CHECK((sqe = kvp_get_sqe(c)) != NULL);
		n = kvp_prep_attend(c, sqe, off, 0, 0, Q_HEADS, 0.125f, 0, true, &r, 1);
		CHECK(n > 0);
		off += ((uint64_t)n + 7) & ~7ull;
		sqe->user_data = i;
	}
	CHECK((sqe = kvp_get_sqe(c)) != NULL);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_FREE, .handle = h, .user_data = FREE_UD };
	CHECK((sqe = kvp_get_sqe(c)) != NULL);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_ALLOC, .handle = h2, .len = CTX,
				 .user_data = ALLOC_UD };
	t0 = test_now_ns();
	CHECK_EQ(kvp_submit(c), NATTEND + 2);

	/* The same turn: the FREE and the ALLOC complete before any ATTEND can. */
	cqe = next_cqe(c);
	CHECK_EQ(cqe.user_data, FREE_UD);
	CHECK_EQ(cqe.res, 0);
	cqe = next_cqe(c);
	CHECK_EQ(cqe.user_data, ALLOC_UD);
	CHECK_EQ(cqe.res, -EDQUOT); /* before the fix: 0, the pool's last 100 blocks */
	/* The page is written before the completions are published: it shows the pins. */
	CHECK_EQ(tenant_blocks(c, UID_A), QUOTA);
	tell(to_b[1]);
	hear(to_a[0]);

	for (uint32_t i = 0; i < NATTEND; i++) {
		cqe = next_cqe(c);
		CHECK(cqe.user_data < NATTEND && !(seen & 1ull << cqe.user_data));
		seen |= 1ull << cqe.user_data;
		CHECK_EQ(cqe.res, 0);
	}
	printf("test_quota_pinned: %u ATTENDs pinned A's blocks for %.1f ms\n", NATTEND,
	       (double)(test_now_ns() - t0) / 1e6);
	fflush(stdout);

	/* Unpinned, the freed blocks are free again: A takes them back, within its quota. */
	CHECK_EQ(kvp_alloc(c, h2, CTX, 0, false, NULL, NULL, 0), 0);
	pool_used(c, NBLOCKS - 1);
	CHECK_EQ(tenant_blocks(c, UID_A), QUOTA);
	tell(to_b[1]);
	kvp_close(c);
	return 0;
}

int main(void)
{
	const char *args[3] = { "--config", NULL, NULL };
	pid_t a, b;

	watchdog_start("test_quota_pinned", 60);
	if (geteuid() != 0) {
		printf("needs root: the test runs clients as uids 65532 and 65533\n");
		return 77;
	}
	args[1] = config_file(config);
	CHECK_EQ(daemon_start(&dmn, args), 0);
	watchdog_watch(&dmn);
	daemon_open_to_all(&dmn);

	CHECK_EQ(pipe(to_a), 0);
	CHECK_EQ(pipe(to_b), 0);
	b = fork_child_ready(tenant_b, NULL);
	a = fork_child(tenant_a, NULL);
	/* Each child holds only its own ends: one that dies is seen as EOF by the other. */
	for (int i = 0; i < 2; i++) {
		close(to_a[i]);
		close(to_b[i]);
	}
	/* B dies with this process (drop_to_uid's parent-death signal) if A failed. */
	CHECK_EQ(wait_child(a), 0);
	CHECK_EQ(wait_child(b), 0);

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("test_quota_pinned: blocks a job pins stay charged: the freeing tenant's ALLOC "
	       "-EDQUOT, the other's granted at once\n");
	return 0;
}
