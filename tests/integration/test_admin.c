/* SPDX-License-Identifier: MIT */
/*
 * Privileges: an unprivileged client (uid/gid 65534) is refused the admin
 * feature at connect and gets -EPERM for every admin opcode submitted raw; a
 * named namespace is refused to it unless the config grants it; POOL_DESTROY
 * is -EBUSY while another client is attached or a sequence is open.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534

static void start(struct daemon *d, const char *const *args)
{
	CHECK_EQ(daemon_start(d, args), 0);
	watchdog_watch(d);
	/* Let uid 65534 reach the socket: the harness makes the directory 0700 and the socket 0660. */
	CHECK_EQ(chmod(d->dir, 0711), 0);
	CHECK_EQ(chmod(d->socket, 0666), 0);
}

static void stop(struct daemon *d)
{
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(d), 0);
}

static int try_connect(const struct daemon *d, const char *pool, const char *ns, bool admin,
		       struct kvp_client **out)
{
	struct kvp_connect_opts o = { .socket_path = d->socket, .pool = pool, .namespace_ = ns,
				      .admin = admin };

	*out = NULL;
	return kvp_connect(&o, out);
}

static struct kvp_stats_header stats_header(const struct daemon *d)
{
	struct kvp_client *c = connect_or_die(d, "", "", false);
	static uint8_t buf[8192];
	struct kvp_stats_header h;

	CHECK(kvp_stats(c, buf, sizeof(buf)) >= (int)sizeof(h));
	memcpy(&h, buf, sizeof(h));
	kvp_close(c);
	return h;
}

/* One raw entry: submit it and return its completion's result. */
static int32_t raw(struct kvp_client *c, const struct kvp_sqe *in)
{
	static uint64_t user_data = 0x5000;
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;
	int32_t res;

	CHECK(sqe != NULL);
	*sqe = *in;
	sqe->user_data = ++user_data;
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK_EQ(cqe->user_data, user_data);
	CHECK_EQ(cqe->flags, 0);
	res = cqe->res;
	kvp_cqe_seen(c, cqe);
	return res;
}

struct child_args {
	const struct daemon *d;
	bool granted; /* the config grants namespace "granted" to 65534 */
};

static void drop_privileges(void)
{
	CHECK_EQ(setgroups(0, NULL), 0);
	CHECK_EQ(setgid(NOBODY), 0);
	CHECK_EQ(setuid(NOBODY), 0);
	CHECK_EQ(getuid(), NOBODY);
	CHECK_EQ(geteuid(), NOBODY);
	CHECK(setuid(0) != 0); /* really dropped */
}

/* Every admin opcode, submitted raw with plausible arguments, is -EPERM. */
static void admin_opcodes_refused(struct kvp_client *c)
{
	uint64_t arena_bytes;
	uint8_t *arena = kvp_arena(c, &arena_bytes);
	struct kvp_pool_params params;
	uint32_t ids[2] = { 1, 2 };
	struct kvp_sqe sqe;

	CHECK(arena_bytes >= 65536);
	/* Inputs above what the blocking calls use. */
	kvp_pool_params_init(&params, "evil");
	CHECK_EQ(kvp_pool_params_set(&params, "blocks", "8"), 0);
	CHECK_EQ(kvp_pool_params_set(&params, "block_size", "4"), 0);
	CHECK_EQ(kvp_pool_params_set(&params, "groups", "full"), 0);
	memcpy(arena + 4096, &params, sizeof(params));
	memcpy(arena + 8192, "p", 1);
	memcpy(arena + 12288, ids, sizeof(ids));

	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = KVP_OP_POOL_CREATE;
	sqe.addr = 4096;
	sqe.len = sizeof(params);
	CHECK_EQ(raw(c, &sqe), -EPERM);

	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = KVP_OP_POOL_DESTROY;
	sqe.addr = 8192;
	sqe.len = 1;
	CHECK_EQ(raw(c, &sqe), -EPERM);

	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = KVP_OP_EVICT;
	sqe.addr = 12288;
	sqe.len = 2;
	CHECK_EQ(raw(c, &sqe), -EPERM);

	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = KVP_OP_RESET;
	CHECK_EQ(raw(c, &sqe), -EPERM);

	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = KVP_OP_DUMP_FREEQ;
	sqe.out_addr = 16384;
	sqe.out_len = 4096;
	CHECK_EQ(raw(c, &sqe), -EPERM);

	memset(&sqe, 0, sizeof(sqe));
	sqe.opcode = KVP_OP_CHECK;
	sqe.out_addr = 16384;
	sqe.out_len = 256;
	CHECK_EQ(raw(c, &sqe), -EPERM);

	/* The library's wrappers say the same. */
	CHECK_EQ(kvp_pool_create(c, &params), -EPERM);
	CHECK_EQ(kvp_pool_destroy(c, "p"), -EPERM);
	CHECK_EQ(kvp_evict(c, ids, 2), -EPERM);
	CHECK_EQ(kvp_reset(c), -EPERM);
	CHECK_EQ(kvp_dump_freeq(c, ids, 2), -EPERM);
	CHECK_EQ(kvp_check(c, NULL, 0), -EPERM);
	/* And the connection still works. */
	CHECK_EQ(kvp_nop(c), 0);
}

static int unprivileged(void *arg)
{
	const struct child_args *a = arg;
	static uint8_t buf[8192];
	struct kvp_stats_header h;
	struct kvp_client_entry e;
	struct kvp_pool_stats st;
	struct kvp_client *c;
	uint32_t tokens[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint64_t h1;
	int n, mine;

	drop_privileges();

	/* Admin refused: the daemon leaves the feature out, the library turns that into -EPERM. */
	CHECK_EQ(try_connect(a->d, "", "", true, &c), -EPERM);
	CHECK(c == NULL);
	CHECK_EQ(try_connect(a->d, "p", "", true, &c), -EPERM);
	CHECK(c == NULL);

	/* Namespaces nobody granted it: refused at setup. */
	CHECK_EQ(try_connect(a->d, "p", "secret", false, &c), -EPERM);
	CHECK(c == NULL);
	CHECK_EQ(try_connect(a->d, "", "a", false, &c), -EPERM);
	CHECK(c == NULL);
	/* The one the config grants (when it does). */
	CHECK_EQ(try_connect(a->d, "p", "granted", false, &c), a->granted ? 0 : -EPERM);
	if (a->granted) {
		CHECK_EQ(kvp_seq_open(c, tokens, 8, NULL, 0, -1, &h1), 0);
		CHECK_EQ(kvp_alloc(c, h1, 8, 0, true, NULL, NULL, 0), 0);
		CHECK_EQ(kvp_commit(c, h1, 8), 0);
		CHECK_EQ(kvp_seq_close(c, h1), 0);
		kvp_close(c);
	}

	/* The shared namespace, no admin: the admin opcodes are all -EPERM. */
	CHECK_EQ(try_connect(a->d, "p", "", false, &c), 0);
	CHECK_EQ(kvp_features(c) & KVP_FEAT_ADMIN, 0);
	admin_opcodes_refused(c);
	/* Ordinary requests work, and the daemon knows who we are. */
	CHECK_EQ(kvp_pool_stats(c, &st), 0);
	CHECK_EQ(st.blocks_used, 0);
	n = kvp_stats(c, buf, sizeof(buf));
	CHECK(n >= (int)sizeof(h));
	memcpy(&h, buf, sizeof(h));
	CHECK_EQ(n, sizeof(h) + h.num_pools * sizeof(struct kvp_pool_entry) +
			    h.num_clients * sizeof(struct kvp_client_entry));
	mine = 0;
	for (uint32_t i = 0; i < h.num_clients; i++) {
		memcpy(&e, buf + sizeof(h) + h.num_pools * sizeof(struct kvp_pool_entry) +
				   i * sizeof(e), sizeof(e));
		if (e.pid != getpid())
			continue;
		mine++;
		CHECK_EQ(e.uid, NOBODY);
		CHECK_EQ(strcmp(e.pool, "p"), 0);
		CHECK_EQ(strcmp(e.namespace_, ""), 0);
		CHECK_EQ(e.sequences, 0);
	}
	CHECK_EQ(mine, 1);
	kvp_close(c);
	return 0;
}

static void run_unprivileged(const struct daemon *d, bool granted)
{
	struct child_args a = { .d = d, .granted = granted };
	struct kvp_stats_header before = stats_header(d), after;

	fflush(NULL);
	CHECK_EQ(wait_child(fork_child(unprivileged, &a)), 0);
	after = stats_header(d);
	/*
	 * Namespace refusals are not sessions. The admin attempts are: the daemon serves them
	 * without the feature and the library hangs up. So: 2 admin attempts, the granted
	 * namespace (if any), the plain one, and our own stats connection.
	 */
	CHECK_EQ(after.clients_connected - before.clients_connected, 2 + (granted ? 1 : 0) + 1 + 1);
	CHECK_EQ(after.clients_killed, before.clients_killed);
}

/* POOL_DESTROY: -EBUSY while another client is attached or a sequence is open. */
static void destroy_busy(const struct daemon *d)
{
	static const char *const kv[] = { "blocks=16", "block_size=4", "groups=full", NULL };
	uint32_t tokens[4] = { 1, 2, 3, 4 };
	struct kvp_client *admin, *other;
	uint64_t h;

	create_pool_or_die(d, "q", kv);
	admin = connect_or_die(d, "", "", true);
	other = connect_or_die(d, "q", "", false);

	CHECK_EQ(kvp_pool_destroy(admin, "nosuch"), -ENOENT);
	CHECK_EQ(kvp_pool_destroy(admin, "q"), -EBUSY);
	CHECK_EQ(kvp_attach(admin, "q"), 0);
	CHECK_EQ(kvp_pool_destroy(admin, "q"), -EBUSY);
	/* The other client leaves: only the admin itself is attached now. */
	CHECK_EQ(kvp_attach(other, ""), 0);
	/* ... but a sequence of its own is open. */
	CHECK_EQ(kvp_seq_open(admin, tokens, 4, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_pool_destroy(admin, "q"), -EBUSY);
	CHECK_EQ(kvp_seq_close(admin, h), 0);
	/* Still there and working after the refusals. */
	CHECK_EQ(kvp_check(admin, NULL, 0), 0);
	CHECK_EQ(kvp_pool_destroy(admin, "q"), 0);
	/* Gone: the admin was detached, the pool cannot be found. */
	CHECK_EQ(kvp_seq_open(admin, tokens, 4, NULL, 0, -1, &h), -ENODEV);
	CHECK_EQ(kvp_attach(other, "q"), -ENODEV);
	CHECK_EQ(kvp_pool_destroy(admin, "q"), -ENOENT);
	CHECK_EQ(kvp_nop(other), 0);
	kvp_close(admin);
	kvp_close(other);
}

int main(void)
{
	static const char *const kv[] = { "blocks=16", "block_size=4", "groups=full", NULL };
	char dir[] = "/tmp/kvpool-admin-XXXXXX";
	char path[64];
	const char *args[3] = { "--config", path, NULL };
	struct daemon d;
	FILE *f;

	watchdog_start("test_admin", 30);

	if (geteuid() != 0) {
		printf("needs root: the test drops to uid/gid 65534\n");
		return 77;
	}

	/* No config: only "" is open to uid 65534. */
	start(&d, NULL);
	create_pool_or_die(&d, "p", kv);
	run_unprivileged(&d, false);
	destroy_busy(&d);
	stop(&d);

	/* A config granting namespace "granted" to 65534 (and another one to someone else). */
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/kvpoold.ini", dir);
	f = fopen(path, "w");
	CHECK(f != NULL);
	fprintf(f, "[pool.p]\nblocks = 16\nblock_size = 4\ngroups = full\n\n"
		   "[namespace.granted]\nuids = 1000 65534\n\n"
		   "[namespace.secret]\nuids = 1000\n");
	CHECK_EQ(fclose(f), 0);
	start(&d, args);
	run_unprivileged(&d, true);
	stop(&d);
	CHECK_EQ(unlink(path), 0);
	CHECK_EQ(rmdir(dir), 0);
	return 0;
}
