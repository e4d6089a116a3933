/* SPDX-License-Identifier: MIT */
/*
 * Refusals name their cause, exactly, and cost the daemon nothing:
 *   - mapping: kvp_map_pool of a pool shared by all namespaces is -EPERM with
 *     the daemon's reason in map.why; a namespace-ns2 client is refused a pool
 *     restricted to ns1 at setup (opts.why), by kvp_attach and by a raw ATTACH
 *     (reason in out_addr, cqe.aux its length, cut to out_len); ns1 attaches
 *     and maps it;
 *   - a cuda pool without a GPU: without the plugin (--plugin-dir /nonexistent)
 *     -ENOENT "cuda backend not available: ... not found in /nonexistent", the
 *     same through kvctl on its stderr (exit 1); with the built plugin (gpu/
 *     beside the daemon's directory) -ENODEV "libcuda.so.1 not loadable: ..."
 *     unless this machine's libcuda.so.1 loads (then the pool may be created).
 *     Either way the daemon goes on serving, the refused name stays free, and
 *     20 refusals leave its descriptors as they were and its RSS nearly so;
 *   - a config pool with backend = cuda stops kvpoold at start: exit 1, the
 *     reason on its stderr, no socket left behind;
 *   - POOL_CREATE's checks name the parameter and its limit (-EINVAL);
 *   - setup refusals carry their reason in opts.why ("" after a success).
 * Why: an admin or engine that is refused reads these texts to fix the cause;
 * a refusal that leaked a descriptor would, repeated, take the daemon down.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOPLUGIN "/nonexistent"
#define NOT_FOUND "cuda backend not available: libkvpool_cuda.so not found in " NOPLUGIN
#define NO_LIBCUDA "libcuda.so.1 not loadable: "
#define GEOMETRY "blocks=16", "block_size=4", "groups=full"
#define KV "kv_heads=2", "head_dim=8", "layers_per_group=1"
#define REFUSALS 20
#define RSS_SLACK_KIB 1024 /* what 20 refusals may add: allocator noise, not a leak per call */

static void start(struct daemon *d, const char *const *args)
{
	CHECK_EQ(daemon_start(d, args), 0);
	watchdog_watch(d);
}

static void stop(struct daemon *d)
{
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(d), 0);
}

/* Checks @got against the exact @want, printing both when they differ. */
static void same_text(const char *got, const char *want)
{
	if (strcmp(got, want)) {
		fprintf(stderr, "got  \"%s\"\nwant \"%s\"\n", got, want);
		CHECK(!"the reason texts differ");
	}
}

static struct kvp_pool_params_v2 params(const char *name, const char *const *kv)
{
	struct kvp_pool_params_v2 p;

	pool_params_or_die(&p, name, kv);
	return p;
}

/* POOL_CREATE of @p by @admin: returns its result, the reason in @why (KVP_REASON_MAX). */
static int create(struct kvp_client *admin, const struct kvp_pool_params_v2 *p, char *why)
{
	strcpy(why, "stale");
	return kvp_pool_create_v2(admin, p, 0, why, KVP_REASON_MAX);
}

/* kvp_connect as the test asks it; opts.why goes to @why (KVP_REASON_MAX). */
static int try_connect(const struct daemon *d, struct kvp_connect_opts o, char *why,
		       struct kvp_client **c)
{
	o.socket_path = d->socket;
	o.why = why;
	o.why_len = KVP_REASON_MAX;
	strcpy(why, "stale");
	*c = NULL;
	return kvp_connect(&o, c);
}

/* Runs @argv with its stderr in @err (NUL-terminated); returns its exit status. */
static int run_capture(char *const argv[], char *err, size_t len)
{
	size_t used = 0;
	int fds[2];
	ssize_t n;
	pid_t pid;

	CHECK_EQ(pipe(fds), 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	while (used < len - 1 && (n = read(fds[0], err + used, len - 1 - used)) > 0)
		used += (size_t)n;
	err[used] = '\0';
	close(fds[0]);
	return wait_child(pid);
}

static long fd_count(const struct daemon *d)
{
	char path[64];
	struct dirent *e;
	long n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
	dir = opendir(path);
	CHECK(dir != NULL);
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/* The count once it is @want: what a closing client held goes on the daemon's own time. */
static long fd_count_settled(const struct daemon *d, long want)
{
	long n = fd_count(d);

	for (int i = 0; i < 300 && n != want; i++, n = fd_count(d))
		usleep(10 * 1000);
	return n;
}

/* The count once two reads 20 ms apart agree. */
static long fd_count_stable(const struct daemon *d)
{
	long n = fd_count(d), prev = -1;

	for (int i = 0; i < 50 && n != prev; i++) {
		usleep(20 * 1000);
		prev = n;
		n = fd_count(d);
	}
	return n;
}

/* The daemon serves: a round trip, and a host pool named @name (a refused one's) is made and used. */
static void still_serving(const struct daemon *d, struct kvp_client *admin, const char *name)
{
	struct kvp_pool_params_v2 p = params(name, (const char *const[]){ GEOMETRY, NULL });
	uint32_t tokens[6] = { 1, 2, 3, 4, 5, 6 }, hit = 0;
	struct kvp_client *c;
	char why[KVP_REASON_MAX];
	uint64_t h;

	CHECK_EQ(kvp_nop(admin), 0);
	CHECK_EQ(create(admin, &p, why), 0);
	same_text(why, "");
	c = connect_or_die(d, name, "", false);
	CHECK_EQ(kvp_seq_open(c, tokens, 6, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, 6, 0, true, &hit, NULL, 0), 0);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
	check_pool_or_die(d, name, NULL);
	/* -EBUSY until the daemon has seen the users' hang-ups, on its own loop. */
	for (int i = 0; i < 200 && kvp_pool_destroy(admin, name) == -EBUSY; i++)
		usleep(10 * 1000);
	CHECK_EQ(kvp_attach(admin, name), -ENODEV);
}

/*
 * @n refused creates of cuda pool "g1", each @err with a reason starting with @want:
 * the daemon's descriptors are back to @fds (counted before), its RSS grows by little.
 */
static void refusals_leak_nothing(const struct daemon *d, struct kvp_client *admin, int err,
				  const char *want, unsigned n, long fds)
{
	struct kvp_pool_params_v2 p = params("g1", (const char *const[]){ "backend=cuda", GEOMETRY,
									  KV, NULL });
	long rss = 0, grown;
	char why[KVP_REASON_MAX];

	for (unsigned i = 0; i < n; i++) {
		CHECK_EQ(create(admin, &p, why), err);
		CHECK(!strncmp(why, want, strlen(want)));
		if (i == 1) /* after the first: a plugin that loads once is not a leak */
			rss = daemon_rss_kib(d);
	}
	CHECK(rss > 0);
	CHECK_EQ(fd_count_settled(d, fds), fds);
	grown = daemon_rss_kib(d) - rss;
	if (grown > RSS_SLACK_KIB)
		fprintf(stderr, "RSS grew by %ld KiB over %u refusals\n", grown, n - 2);
	CHECK(grown <= RSS_SLACK_KIB);
}

/* kvctl pool create g1 backend=cuda ... exits 1 and says "kvctl: pool create g1: @want...". */
static void kvctl_refused(const struct daemon *d, const char *want, bool whole)
{
	char *argv[] = { getenv("KVCTL") ? getenv("KVCTL") : "build/bin/kvctl", "-s", (char *)d->socket,
			 "pool", "create", "g1", "backend=cuda", GEOMETRY, KV, NULL };
	char err[1024], line[256];

	CHECK_EQ(run_capture(argv, err, sizeof(err)), 1);
	snprintf(line, sizeof(line), "kvctl: pool create g1: %s%s", want, whole ? "\n" : "");
	if (whole)
		same_text(err, line);
	else
		CHECK(!strncmp(err, line, strlen(line)) && strchr(err, '\n') == err + strlen(err) - 1);
}

/* A raw ATTACH to @pool refused -EPERM: @out_len bytes of @want at out_addr, cqe.aux its length. */
static void raw_attach_refused(struct kvp_client *c, const char *pool, uint32_t out_len,
			       const char *want)
{
	size_t len = strlen(want) < out_len ? strlen(want) : out_len - 1;
	char *arena = kvp_arena(c, NULL), *out = arena + 256;
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;

	CHECK(sqe != NULL);
	memcpy(arena, pool, strlen(pool));
	memset(out, 0x7f, KVP_REASON_MAX);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_ATTACH, .len = (uint32_t)strlen(pool),
				 .out_addr = 256, .out_len = out_len, .user_data = 77 };
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK_EQ(cqe->user_data, 77);
	CHECK_EQ(cqe->res, -EPERM);
	CHECK_EQ(cqe->aux, len);
	kvp_cqe_seen(c, cqe);
	CHECK(!strncmp(out, want, len) && out[len] == '\0');
}

/* 1. Mapping and attaching, by namespace. */
static void mapping_by_namespace(const struct daemon *d)
{
	char why[KVP_REASON_MAX];
	struct kvp_client *c, *ns2;
	struct kvp_pool_map map;
	const char *restricted = "pool 'p1' is restricted to namespace 'ns1'";

	create_pool_or_die(d, "shared", (const char *const[]){ GEOMETRY, KV, NULL });
	create_pool_or_die(d, "p1", (const char *const[]){ GEOMETRY, KV, "namespace=ns1", NULL });

	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .pool = "shared", .pool_map = true },
			     why, &c), 0);
	same_text(why, "");
	/* No daemon there: no reason came, and none is left from before. */
	strcpy(why, "stale");
	CHECK_EQ(kvp_connect(&(struct kvp_connect_opts){ .socket_path = "/nonexistent/sock",
							  .why = why, .why_len = KVP_REASON_MAX },
			     &ns2), -ENOENT);
	same_text(why, "");
	CHECK_EQ(kvp_map_pool(c, &map), -EPERM);
	same_text(map.why, "pool 'shared' is shared by all namespaces: only a pool restricted to "
			   "one namespace is mapped");
	kvp_close(c);

	/* ns1 without the feature: refused, and told why. */
	c = connect_or_die(d, "p1", "ns1", false);
	CHECK_EQ(kvp_map_pool(c, &map), -EPERM);
	same_text(map.why, "KVP_FEAT_POOL_MAP was not agreed at setup");
	kvp_close(c);

	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .pool = "p1", .namespace_ = "ns2",
							   .pool_map = true }, why, &c), -EPERM);
	same_text(why, restricted);
	/* Root's ns2 client is refused too, at ATTACH: by the library call and raw. */
	ns2 = connect_or_die(d, "", "ns2", true);
	CHECK_EQ(kvp_attach(ns2, "p1"), -EPERM);
	raw_attach_refused(ns2, "p1", KVP_REASON_MAX, restricted);
	raw_attach_refused(ns2, "p1", 10, restricted); /* cut to out_len, NUL included */
	CHECK_EQ(kvp_nop(ns2), 0); /* refused, not dropped */
	CHECK_EQ(kvp_attach(ns2, "shared"), 0);
	kvp_close(ns2);

	/* ns1: attaches both ways and maps its pool. */
	c = connect_or_die(d, "", "ns1", false);
	CHECK_EQ(kvp_attach(c, "p1"), 0);
	kvp_close(c);
	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .pool = "p1", .namespace_ = "ns1",
							   .pool_map = true }, why, &c), 0);
	same_text(why, "");
	CHECK_EQ(kvp_map_pool(c, &map), 0);
	same_text(map.why, "");
	CHECK(map.num_pieces >= 1 && map.layers && map.layers[0].k);
	kvp_unmap_pool(&map);
	kvp_close(c);
}

/* 3. Setup refusals, each with its errno and its reason. */
static void setup_refusals(const struct daemon *d)
{
	char why[KVP_REASON_MAX];
	struct kvp_client *c;

	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .pool = "nosuch" }, why, &c), -ENODEV);
	same_text(why, "no pool 'nosuch'");
	CHECK(c == NULL);
	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .sq_entries = 3 }, why, &c), -EINVAL);
	same_text(why, "sq_entries 3: a power of two, 1..4096");
	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .arena_bytes = 2ull << 30 }, why, &c),
		 -EINVAL);
	same_text(why, "arena_bytes 2147483648: at most 1073741824");
	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .namespace_ = "a b" }, why, &c), -EINVAL);
	same_text(why, "namespace: not a valid name");
	CHECK_EQ(try_connect(d, (struct kvp_connect_opts){ .pool = "shared" }, why, &c), 0);
	same_text(why, "");
	kvp_close(c);
}

/* 2d. POOL_CREATE's checks: the parameter and its limit. */
static void create_checks(struct kvp_client *admin)
{
	struct kvp_pool_params_v2 p = params("bad", (const char *const[]){ GEOMETRY, "device=1",
									   NULL });
	char why[KVP_REASON_MAX];

	CHECK_EQ(create(admin, &p, why), -EINVAL);
	same_text(why, "device 1: must be 0 for a host pool");
	p = params("bad", (const char *const[]){ GEOMETRY, NULL });
	p.layout = 7;
	CHECK_EQ(create(admin, &p, why), -EINVAL);
	same_text(why, "layout 7: must be 0 (default), 1 (block) or 2 (layer)");
	p = params("bad", (const char *const[]){ GEOMETRY, "namespace=a b", NULL });
	CHECK_EQ(create(admin, &p, why), -EINVAL);
	same_text(why, "namespace: must be \"\" or 1..31 printable characters without blanks");
	p = params("bad", (const char *const[]){ GEOMETRY, NULL });
	p.backend = 9;
	CHECK_EQ(create(admin, &p, why), -EINVAL);
	same_text(why, "backend 9: must be 0 (host) or 1 (cuda)");
	p = params("bad", (const char *const[]){ GEOMETRY, "backend=cuda", NULL });
	CHECK_EQ(create(admin, &p, why), -EINVAL);
	same_text(why, "backend cuda: needs KV (kv_heads, head_dim, layers_per_group)");
	p = params("shared", (const char *const[]){ GEOMETRY, NULL });
	CHECK_EQ(create(admin, &p, why), -EEXIST);
	same_text(why, "a pool named shared exists");
}

/* 2a. No plugin where the daemon was told to look. */
static void cuda_without_plugin(const struct daemon *d)
{
	struct kvp_client *admin = connect_or_die(d, "", "", true);
	struct kvp_pool_params_v2 p = params("g1", (const char *const[]){ "backend=cuda", GEOMETRY,
									  KV, NULL });
	char why[KVP_REASON_MAX];
	long fds;

	CHECK_EQ(kvp_nop(admin), 0);
	fds = fd_count_stable(d);
	CHECK_EQ(create(admin, &p, why), -ENOENT);
	same_text(why, NOT_FOUND);
	kvctl_refused(d, NOT_FOUND, true); /* its connection's descriptors go too */
	refusals_leak_nothing(d, admin, -ENOENT, NOT_FOUND, REFUSALS, fds);
	still_serving(d, admin, "g1");
	kvp_close(admin);
}

static bool libcuda_loads(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

	if (h)
		dlclose(h);
	return h != NULL;
}

/* 2b. The built plugin: refused for want of a driver, or (a GPU machine) created. */
static void cuda_with_plugin(const char *dir)
{
	const char *args[] = { "--plugin-dir", dir, NULL };
	struct kvp_pool_params_v2 p = params("g1", (const char *const[]){ "backend=cuda", GEOMETRY,
									  KV, NULL });
	struct kvp_client *admin;
	char why[KVP_REASON_MAX];
	struct daemon d;
	int ret;

	start(&d, args);
	admin = connect_or_die(&d, "", "", true);
	if (!libcuda_loads()) {
		long fds = fd_count_stable(&d);

		CHECK_EQ(create(admin, &p, why), -ENODEV);
		CHECK(!strncmp(why, NO_LIBCUDA, strlen(NO_LIBCUDA)));
		kvctl_refused(&d, NO_LIBCUDA, false);
		refusals_leak_nothing(&d, admin, -ENODEV, NO_LIBCUDA, REFUSALS, fds);
	} else {
		/* A driver: the pool is made, or refused by the driver's or the device's word. */
		ret = create(admin, &p, why);
		fprintf(stderr, "libcuda.so.1 loads: cuda pool create: %d \"%s\"\n", ret, why);
		if (ret == 0)
			CHECK_EQ(kvp_pool_destroy(admin, "g1"), 0);
		else
			CHECK(*why && strncmp(why, NO_LIBCUDA, strlen(NO_LIBCUDA)) &&
			      strncmp(why, "cuda backend not available", 27));
	}
	still_serving(&d, admin, "g1");
	kvp_close(admin);
	stop(&d);
}

/* 2c. A config pool the daemon cannot make: it exits 1 at start, saying @want, and leaves nothing. */
static void config_pool_refused(const char *plugin_dir, const char *want)
{
	char dir[] = "/tmp/kvpool-refusal-XXXXXX", sock[64], err[4096];
	const char *config = config_file("[pool.g1]\nblocks = 16\nblock_size = 4\ngroups = full\n"
					 "kv_heads = 2\nhead_dim = 8\nlayers_per_group = 1\n"
					 "backend = cuda\n");
	char *argv[] = { (char *)daemon_binary(), "--socket", sock, "--config", (char *)config,
			 "--plugin-dir", (char *)plugin_dir, NULL };

	CHECK(mkdtemp(dir) != NULL);
	snprintf(sock, sizeof(sock), "%s/kvpool.sock", dir);
	CHECK_EQ(run_capture(argv, err, sizeof(err)), 1);
	if (!strstr(err, want)) {
		fprintf(stderr, "kvpoold's stderr:\n%s\nwant: %s\n", err, want);
		CHECK(!"the reason is not on kvpoold's stderr");
	}
	CHECK_EQ(rmdir(dir), 0); /* no socket, no lock file left */
}

int main(void)
{
	const char *args[] = { "--plugin-dir", NOPLUGIN, NULL };
	struct kvp_client *admin;
	char dir[PATH_MAX];
	struct daemon d;

	watchdog_start("test_pool_refusals", 60);
	start(&d, args);
	mapping_by_namespace(&d);
	setup_refusals(&d);
	admin = connect_or_die(&d, "", "", true);
	create_checks(admin);
	kvp_close(admin);
	cuda_without_plugin(&d);
	stop(&d);

	config_pool_refused(NOPLUGIN, "kvpoold: pool g1: " NOT_FOUND "\n");
	if (!daemon_plugin_dir(dir, sizeof(dir))) {
		fprintf(stderr, "no %s/libkvpool_cuda.so (built without nvcc): the plugin's part "
			"skipped\n", dir);
	} else {
		cuda_with_plugin(dir);
		if (!libcuda_loads())
			config_pool_refused(dir, "kvpoold: pool g1: " NO_LIBCUDA);
	}
	return 0;
}
