/* SPDX-License-Identifier: MIT */
/*
 * Quotas (docs/reliability.md), each enforced for an unprivileged uid with the
 * exact errno, against a config that sets them low:
 *   - max_clients: the uid's 4th connection is -EUSERS; room again once one goes;
 *   - max_arena_bytes: the arenas of a uid's connections, summed: -EDQUOT;
 *   - max_sequences and max_tokens: SEQ_OPEN and APPEND past them -EDQUOT,
 *     shared by the uid's connections, given back when sequences close;
 *   - max_blocks: an ALLOC that would take the uid past it is -EDQUOT while
 *     the pool has free blocks; with two tenants whose block quotas sum to the
 *     pool's size, neither under its quota ever gets -ENOSPC (one tenant
 *     holding nearly the whole pool was the defect);
 *   - a block two tenants share through a prefix hit counts for both;
 *   - [namespace.NAME]: its clients together, across uids;
 *   - APPEND or SEQ_OPEN past the pool's max_len: -EINVAL, even for root;
 *   - root has no quota but what a [uid.0] section sets;
 *   - the stats page shows each uid's use against its limits.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define POOL "p"
#define BLOCK 4
#define NBLOCKS 101 /* 100 usable: the block quotas of 65532 and 65533 sum to it */
#define MAX_LEN 256

static struct daemon dmn;

static const char config[] =
	"[pool.p]\nblocks = 101\nblock_size = 4\ngroups = full\nmax_len = 256\n\n"
	"[quota]\nmax_clients = 3\nmax_sequences = 10\nmax_tokens = 300\n"
	"max_arena_bytes = 4194304\n\n"
	"[uid.65533]\nmax_blocks = 50\nmax_tokens = unlimited\n\n"
	"[uid.65532]\nmax_blocks = 50\nmax_tokens = unlimited\n\n"
	"[namespace.team]\nuids = 65532 65533\nmax_sequences = 5\n";

static int try_connect(const char *ns, uint64_t arena, struct kvp_client **c)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = POOL, .namespace_ = ns,
				      .arena_bytes = arena };

	return kvp_connect(&o, c);
}

static struct kvp_client *conn(const char *ns)
{
	struct kvp_client *c;

	CHECK_EQ(try_connect(ns, 0, &c), 0);
	return c;
}

static int open_seq(struct kvp_client *c, uint32_t base, uint32_t n, uint64_t *h)
{
	uint32_t tokens[MAX_LEN + 1];

	for (uint32_t i = 0; i < n; i++)
		tokens[i] = base + i;
	return kvp_seq_open(c, tokens, n, NULL, 0, -1, h);
}

/* uid 65534: [quota] only. */
static int clients_arena_seqs_tokens(void *arg)
{
	struct kvp_client *c[3], *extra;
	uint64_t h[11], big;
	uint32_t one = 7;

	(void)arg;
	drop_to_uid(65534);
	/* Arenas: 1 + 1 MiB held, 3 more would make 5 of 4; 2 more fit exactly. */
	CHECK_EQ(try_connect("", 1 << 20, &c[0]), 0);
	CHECK_EQ(try_connect("", 1 << 20, &c[1]), 0);
	CHECK_EQ(try_connect("", 3 << 20, &extra), -EDQUOT);
	CHECK_EQ(try_connect("", 2 << 20, &c[2]), 0);
	/* Clients: three held, the fourth is turned away with why. */
	CHECK_EQ(try_connect("", 4096, &extra), -EUSERS);
	/* The daemon learns of a hang-up on its own loop: room comes back soon after. */
	kvp_close(c[2]);
	for (int tries = 0; try_connect("", 2 << 20, &c[2]) == -EUSERS; tries++) {
		CHECK(tries < 100);
		usleep(10000);
	}

	/* Sequences: ten over two connections, the eleventh refused, one closed makes room. */
	for (int i = 0; i < 10; i++)
		CHECK_EQ(open_seq(c[i % 2], 1000 * (uint32_t)i, 10, &h[i]), 0);
	CHECK_EQ(open_seq(c[2], 99000, 10, &h[10]), -EDQUOT);
	CHECK_EQ(kvp_seq_close(c[1], h[1]), 0);
	CHECK_EQ(open_seq(c[2], 99000, 10, &h[1]), 0);
	for (int i = 0; i < 10; i++)
		CHECK_EQ(kvp_seq_close(c[i == 1 ? 2 : i % 2], h[i]), 0);

	/* Tokens: 4 x 64 + 44 = 300 of 300; one more, in SEQ_OPEN or APPEND, is over. */
	for (int i = 0; i < 4; i++)
		CHECK_EQ(open_seq(c[0], 1000 * (uint32_t)i, 64, &h[i]), 0);
	CHECK_EQ(open_seq(c[1], 50000, 45, &big), -EDQUOT);
	CHECK_EQ(open_seq(c[1], 50000, 44, &big), 0);
	CHECK_EQ(kvp_append(c[1], big, &one, 1), -EDQUOT);
	CHECK_EQ(kvp_seq_close(c[0], h[0]), 0);
	CHECK_EQ(kvp_append(c[1], big, &one, 1), 0);
	for (int i = 0; i < 3; i++)
		kvp_close(c[i]);
	return 0;
}

/* Allocates @blocks blocks for a new sequence of distinct tokens; returns kvp_alloc's result. */
static int alloc_blocks(struct kvp_client *c, uint32_t base, uint32_t blocks, uint64_t *h)
{
	uint32_t hit;

	CHECK_EQ(open_seq(c, base, blocks * BLOCK, h), 0);
	return kvp_alloc(c, *h, blocks * BLOCK, 0, false, &hit, NULL, 0);
}

struct blocks_args {
	uid_t uid;
	int rd, wr; /* told when to let go; says when it holds its blocks */
};

/*
 * Takes its 50 blocks (in two sequences), is refused one more while the pool
 * has free blocks, and holds them until told.
 */
static int fill_block_quota(void *arg)
{
	const struct blocks_args *a = arg;
	struct kvp_client *c;
	uint64_t h[3];
	char go;

	drop_to_uid(a->uid);
	c = conn("");
	CHECK_EQ(alloc_blocks(c, a->uid * 10000u, 30, &h[0]), 0);
	CHECK_EQ(alloc_blocks(c, a->uid * 10000u + 5000, 20, &h[1]), 0);
	/* At 50 of 50: refused before free space is looked at. */
	CHECK_EQ(alloc_blocks(c, a->uid * 10000u + 8000, 1, &h[2]), -EDQUOT);
	CHECK_EQ(write(a->wr, "h", 1), 1);
	CHECK_EQ(read(a->rd, &go, 1), 1);
	kvp_close(c);
	return 0;
}

static void block_quotas(void)
{
	struct blocks_args a[2] = { { .uid = 65533 }, { .uid = 65532 } };
	struct kvp_client *root = conn("");
	struct kvp_pool_stats st;
	int held[2], go[2];
	pid_t pid[2];
	char ch;

	CHECK_EQ(pipe(held), 0);
	CHECK_EQ(pipe(go), 0);
	for (int i = 0; i < 2; i++) {
		a[i].rd = go[0];
		a[i].wr = held[1];
		pid[i] = fork_child(fill_block_quota, &a[i]);
		/* One after the other: the second fills its quota with the first at its own. */
		CHECK_EQ(read(held[0], &ch, 1), 1);
	}
	/* Both at their quota, the pool exactly full, and neither ever saw -ENOSPC. */
	CHECK_EQ(kvp_pool_stats(root, &st), 0);
	CHECK_EQ(st.blocks_free, 0);
	CHECK_EQ(st.blocks_used, NBLOCKS - 1);
	CHECK_EQ(write(go[1], "gg", 2), 2);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(wait_child(pid[i]), 0);
	kvp_close(root);
	close(held[0]);
	close(held[1]);
	close(go[0]);
	close(go[1]);
}

/* The uid's tenant row in @c's stats page, or NULL. */
static const struct kvp_stats_tenant *tenant_row(const void *page, uint32_t kind, uid_t uid,
						 const char *ns)
{
	const struct kvp_stats_page *pg = page;
	const struct kvp_stats_tenant *t = (const void *)((const char *)page + pg->tenants_off);

	for (uint32_t i = 0; i < pg->max_tenants; i++, t++)
		if (t->in_use && t->kind == kind &&
		    (kind == KVP_TENANT_UID ? t->uid == uid : !strcmp(t->namespace_, ns)))
			return t;
	return NULL;
}

struct share_args {
	int rd, wr;
	uid_t uid;
	bool cached; /* the prompt is in the cache already: its blocks are hit */
};

/*
 * uid 65533 computes and commits a 40-token prompt; uid 65532 opens the same
 * one and hits its 9 full blocks but the last (whose last token is always
 * computed): the hit blocks count for it too. Each holds until told.
 */
static int hold_prompt(void *arg)
{
	const struct share_args *a = arg;
	struct kvp_client *c;
	uint64_t h;
	uint32_t hit;
	char go;

	drop_to_uid(a->uid);
	c = conn("");
	CHECK_EQ(open_seq(c, 777000, 40, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, a->cached ? 4 : 40, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(hit, a->cached ? 36 : 0);
	if (!a->cached)
		CHECK_EQ(kvp_commit(c, h, 40), 0);
	CHECK_EQ(write(a->wr, "h", 1), 1);
	CHECK_EQ(read(a->rd, &go, 1), 1);
	kvp_close(c);
	return 0;
}

static void shared_blocks(void)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .admin = true, .stats_page = true };
	struct share_args a[2];
	static uint8_t page[1 << 20];
	const struct kvp_stats_tenant *t;
	struct kvp_client *obs;
	int held[2], go[2];
	pid_t pid[2];
	char ch;

	CHECK_EQ(kvp_connect(&o, &obs), 0);
	CHECK(kvp_stats_bytes(obs) <= sizeof(page));
	CHECK_EQ(pipe(held), 0);
	CHECK_EQ(pipe(go), 0);
	for (int i = 0; i < 2; i++) {
		a[i] = (struct share_args){ go[0], held[1], i == 0 ? 65533 : 65532, i == 1 };
		pid[i] = fork_child(hold_prompt, &a[i]);
		CHECK_EQ(read(held[0], &ch, 1), 1);
	}
	CHECK(kvp_stats_snapshot(obs, page, sizeof(page)) > 0);
	t = tenant_row(page, KVP_TENANT_UID, 65533, NULL);
	CHECK(t != NULL);
	CHECK_EQ(t->used[KVP_QUOTA_BLOCKS], 10);
	CHECK_EQ(t->limit[KVP_QUOTA_BLOCKS], 50);
	t = tenant_row(page, KVP_TENANT_UID, 65532, NULL);
	CHECK(t != NULL);
	/* 9 hit blocks shared with 65533, and its own last one. */
	CHECK_EQ(t->used[KVP_QUOTA_BLOCKS], 10);
	CHECK_EQ(write(go[1], "gg", 2), 2);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(wait_child(pid[i]), 0);
	kvp_close(obs);
	close(held[0]);
	close(held[1]);
	close(go[0]);
	close(go[1]);
}

/* Namespace "team": 65532's and 65533's clients in it share max_sequences 5. */
static int team_member(void *arg)
{
	uid_t uid = *(const uid_t *)arg;
	struct kvp_client *team, *plain;
	uint64_t h[4];

	drop_to_uid(uid);
	team = conn("team");
	plain = conn("");
	if (uid == 65532) {
		for (int i = 0; i < 3; i++)
			CHECK_EQ(open_seq(team, 100 * (uint32_t)i, 4, &h[i]), 0);
		printf("holding\n");
		fflush(stdout);
		pause();
	}
	/* 3 of 65532's + 2 = 5: the next one is over the namespace's quota, not the uid's. */
	CHECK_EQ(open_seq(team, 1000, 4, &h[0]), 0);
	CHECK_EQ(open_seq(team, 2000, 4, &h[1]), 0);
	CHECK_EQ(open_seq(team, 3000, 4, &h[2]), -EDQUOT);
	/* Outside the namespace only its uid's quota counts. */
	CHECK_EQ(open_seq(plain, 3000, 4, &h[3]), 0);
	kvp_close(team);
	kvp_close(plain);
	return 0;
}

static void namespace_quota(void)
{
	uid_t holder = 65532, other = 65533;
	pid_t pid = fork_child_ready(team_member, &holder);

	CHECK_EQ(wait_child(fork_child(team_member, &other)), 0);
	kill(pid, SIGKILL);
	CHECK_EQ(wait_child(pid), 128 + SIGKILL);
}

/* Root: no quota (20 sequences, 5 clients), but never past max_len. */
static void root_and_max_len(void)
{
	static uint32_t more[MAX_LEN];
	struct kvp_client *c[5];
	uint64_t h[20];

	for (int i = 0; i < 5; i++)
		c[i] = conn("");
	for (int i = 0; i < 20; i++)
		CHECK_EQ(open_seq(c[i % 5], 100 * (uint32_t)i, 16, &h[i]), 0);
	CHECK_EQ(open_seq(c[0], 0, MAX_LEN + 1, &h[0]), -EINVAL);
	CHECK_EQ(open_seq(c[0], 0, MAX_LEN, &h[0]), 0);
	CHECK_EQ(kvp_append(c[0], h[0], more, 1), -EINVAL);
	CHECK_EQ(kvp_append(c[1], h[1], more, MAX_LEN - 16 + 1), -EINVAL);
	CHECK_EQ(kvp_append(c[1], h[1], more, MAX_LEN - 16), 0);
	for (int i = 0; i < 5; i++)
		kvp_close(c[i]);
}

int main(void)
{
	const char *args[3] = { "--config", NULL, NULL };

	watchdog_start("test_quotas", 60);
	if (geteuid() != 0) {
		printf("needs root: the test runs clients as uids 65532-65534\n");
		return 77;
	}
	args[1] = config_file(config);
	CHECK_EQ(daemon_start(&dmn, args), 0);
	watchdog_watch(&dmn);
	daemon_open_to_all(&dmn);

	CHECK_EQ(wait_child(fork_child(clients_arena_seqs_tokens, NULL)), 0);
	block_quotas();
	shared_blocks();
	namespace_quota();
	root_and_max_len();

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("test_quotas: clients, arena bytes, sequences, tokens, blocks (shared and "
	       "guaranteed), namespace and max_len enforced\n");
	return 0;
}
