/* SPDX-License-Identifier: MIT */
/*
 * The cluster tier (tier_remote) on one standalone Redis of the test's own,
 * what the Python tests cannot see through a binding that waits for each
 * call:
 *   - a LOOKUP that asks the cluster completes after its round, after the
 *     entries on its sequence submitted with it (which get -EBUSY), its hit in
 *     res and the positions only the cluster holds as KVP_BLOCK_REMOTE;
 *   - an ALLOC that reads them completes with KVP_CQE_F_TIER, A's rows bit
 *     for bit; the row says a standalone server (cluster 0), 2 rounds, 4
 *     blocks promoted.
 * Skipped (77) without redis-server.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define HD 8
#define PROMPT 17 /* 4 full blocks of 4 */

static struct daemon dmn;
static pid_t redis = -1;

static float val(uint32_t layer, uint32_t pos, uint32_t d, uint32_t kv)
{
	return (float)(layer * 1000 + pos * 10 + d) + (kv ? 0.5f : 0.25f);
}

static uint64_t open_seq(struct kvp_client *c, uint32_t first, uint32_t n)
{
	uint32_t tokens[64];
	uint64_t h;

	for (uint32_t i = 0; i < n; i++)
		tokens[i] = first + i;
	CHECK_EQ(kvp_seq_open(c, tokens, n, NULL, 0, -1, &h), 0);
	return h;
}

/* A loopback port free now. */
static unsigned free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static bool accepts(unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bool ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));

	if (fd >= 0)
		close(fd);
	return ok;
}

static void redis_start(unsigned port)
{
	char p[16];

	snprintf(p, sizeof(p), "%u", port);
	redis = fork();
	CHECK(redis >= 0);
	if (redis == 0) {
		int null = open("/dev/null", O_WRONLY);

		/* Gone with the test, whatever ends it; its output not in the test's pipes. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save",
		       "", "--appendonly", "no", "--logfile", "/dev/null", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500 && !accepts(port); i++)
		usleep(10000);
	CHECK(accepts(port));
}

static void redis_stop(void)
{
	if (redis > 0) {
		kill(redis, SIGKILL);
		waitpid(redis, NULL, 0);
	}
}

/* A's prompt with its KV, committed, sent, closed; then its blocks evicted from the pool. */
static void written_then_evicted(struct kvp_client *c, struct kvp_client *admin)
{
	uint8_t buf[sizeof(struct kvp_block_lists) + 16 * sizeof(uint32_t)];
	struct kvp_block_lists *lists = (struct kvp_block_lists *)buf;
	float k[PROMPT * HD], v[PROMPT * HD];
	uint64_t a = open_seq(c, 100, PROMPT);

	CHECK_EQ(kvp_alloc(c, a, PROMPT, 0, false, NULL, NULL, 0), 0);
	for (uint32_t layer = 0; layer < 2; layer++) {
		for (uint32_t p = 0; p < PROMPT; p++)
			for (uint32_t d = 0; d < HD; d++) {
				k[p * HD + d] = val(layer, p, d, 0);
				v[p * HD + d] = val(layer, p, d, 1);
			}
		CHECK_EQ(kvp_write_kv(c, a, 0, layer, 0, PROMPT, k, v), 0);
	}
	CHECK_EQ(kvp_commit(c, a, PROMPT), 0);
	CHECK_EQ(kvp_seq_close(c, a), 0);
	CHECK_EQ(kvp_pool_sync(admin, "t"), 0);
	a = open_seq(c, 100, PROMPT);
	CHECK_EQ(kvp_lookup(c, a, lists, sizeof(buf)), 16);
	CHECK_EQ(kvp_evict(admin, lists->ids, 4), 4);
	CHECK_EQ(kvp_seq_close(c, a), 0);
}

static void lookup_then_alloc(struct kvp_client *c)
{
	struct kvp_block_lists *lists;
	float k[16 * HD], v[16 * HD];
	int32_t res[2] = { 1, 1 };
	uint64_t b = open_seq(c, 100, PROMPT), aux = 0;
	unsigned order[2];
	struct kvp_sqe *sqe;

	sqe = kvp_get_sqe(c);
	kvp_prep_handle_op(sqe, KVP_OP_LOOKUP, b, 0);
	sqe->out_addr = 0;
	sqe->out_len = sizeof(struct kvp_block_lists) + 16 * sizeof(uint32_t);
	sqe->user_data = 0;
	sqe = kvp_get_sqe(c);
	kvp_prep_handle_op(sqe, KVP_OP_APPEND_TOKENS, b, 0);
	sqe->user_data = 1;
	CHECK_EQ(kvp_submit(c), 2);
	for (unsigned n = 0; n < 2; n++) {
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK(cqe->user_data < 2);
		res[cqe->user_data] = cqe->res;
		order[n] = (unsigned)cqe->user_data;
		if (cqe->user_data == 0)
			aux = cqe->aux;
		kvp_cqe_seen(c, cqe);
	}
	CHECK_EQ(order[0], 1); /* the LOOKUP waited for its round: the entry after it went first */
	CHECK_EQ(res[1], -EBUSY);
	CHECK_EQ(res[0], 16);
	CHECK(aux >= sizeof(struct kvp_block_lists) + 4 * sizeof(uint32_t));
	lists = kvp_arena(c, NULL);
	CHECK_EQ(lists->counts[0], 4);
	for (unsigned i = 0; i < 4; i++)
		CHECK_EQ(lists->ids[i], KVP_BLOCK_REMOTE);

	sqe = kvp_get_sqe(c);
	kvp_prep_alloc(sqe, b, 1, 0, true);
	sqe->user_data = 7;
	CHECK_EQ(kvp_submit(c), 1);
	{
		struct kvp_cqe *cqe;

		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		CHECK_EQ(cqe->res, 0);
		CHECK_EQ(cqe->aux, 16);
		CHECK(cqe->flags & KVP_CQE_F_TIER);
		kvp_cqe_seen(c, cqe);
	}
	for (uint32_t layer = 0; layer < 2; layer++) {
		CHECK_EQ(kvp_read_kv(c, b, 0, layer, 0, 16, k, v), 0);
		for (uint32_t p = 0; p < 16; p++)
			for (uint32_t d = 0; d < HD; d++) {
				CHECK(k[p * HD + d] == val(layer, p, d, 0));
				CHECK(v[p * HD + d] == val(layer, p, d, 1));
			}
	}
	CHECK_EQ(kvp_seq_close(c, b), 0);
}

static void check_row(void)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .timeout_ms = 10000,
				      .stats_page = true };
	struct kvp_stats_view v = { 0 };
	const struct kvp_stats_remote *r = NULL;
	struct kvp_client *m;

	CHECK_EQ(kvp_connect(&o, &m), 0);
	CHECK_EQ(kvp_stats_view_take(m, &v), 0);
	KVP_STATS_FOR_EACH_POOL(&v, p)
		if (!strcmp(p->name, "t"))
			r = kvp_stats_remote_of(&v, p);
	CHECK(r != NULL);
	CHECK_EQ(r->cluster, 0);
	CHECK_EQ(r->nodes_known, 1);
	CHECK_EQ(r->sent, 4);
	CHECK_EQ(r->rounds, 2);
	CHECK_EQ(r->promoted, 4);
	CHECK_EQ(r->hit_tokens, 16);
	kvp_stats_view_release(&v);
	kvp_close(m);
}

int main(void)
{
	static const char *const geometry[] = { "blocks=16", "block_size=4", "groups=full",
						"kv_heads=1", "head_dim=8", "dtype=f32",
						"layers_per_group=2", NULL };
	char keys[128], why[KVP_REASON_MAX] = "";
	struct kvp_pool_params_v2 p;
	struct kvp_client *admin, *c, *pool_admin;
	unsigned port;

	if (system("command -v redis-server >/dev/null 2>&1")) {
		printf("skipped: no redis-server (apt-get install redis-server)\n");
		return 77;
	}
	watchdog_start("test_tier_remote", 60);
	port = free_port();
	redis_start(port);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);
	admin = connect_or_die(&dmn, "", "", true);
	pool_params_or_die(&p, "t", geometry);
	/* A generous deadline: the first round connects and asks CLUSTER INFO too, maybe loaded. */
	snprintf(keys, sizeof(keys),
		 "tier_remote = redis://127.0.0.1:%u\ntier_remote_timeout_ms = 1000\n", port);
	CHECK_EQ(kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why)), 0);
	c = connect_or_die(&dmn, "t", "", false);
	pool_admin = connect_or_die(&dmn, "t", "", true);

	written_then_evicted(c, pool_admin);
	lookup_then_alloc(c);
	check_row();

	kvp_close(c);
	kvp_close(pool_admin);
	kvp_close(admin);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	redis_stop();
	printf("ok: a LOOKUP that asks the cluster completes after its round with KVP_BLOCK_REMOTE "
	       "ids; the ALLOC reads A's rows back bit for bit from a standalone Redis\n");
	return 0;
}
