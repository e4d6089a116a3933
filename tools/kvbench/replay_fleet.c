/* SPDX-License-Identifier: MIT */
/*
 * kvbench replay's fleet: which node serves each request (--route), and the
 * Redis Cluster a run starts for its cluster tier (--redis-cluster), sized
 * from what a block's key takes there, measured on the cluster itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <xxhash.h>

#include "replay.h"
#include "kvbench.h"

#define KVPD_URL_SEEDS 8 /* HOST:PORT entries tier_remote takes */

/* ---- what goes with kvbench when a signal ends it ---- */

static void (*on_signal[4])(void);
static pid_t signal_owner;

static void run_and_die(int sig)
{
	if (getpid() == signal_owner)
		for (unsigned i = 0; i < sizeof(on_signal) / sizeof(on_signal[0]); i++)
			if (on_signal[i])
				on_signal[i]();
	signal(sig, SIG_DFL);
	raise(sig);
}

void replay_on_signal(void (*fn)(void))
{
	for (unsigned i = 0; i < sizeof(on_signal) / sizeof(on_signal[0]); i++)
		if (!on_signal[i] || on_signal[i] == fn) {
			on_signal[i] = fn;
			break;
		}
	signal_owner = getpid();
	signal(SIGINT, run_and_die);
	signal(SIGTERM, run_and_die);
	signal(SIGHUP, run_and_die);
}

const char *replay_route_name(enum replay_route route)
{
	return route == REPLAY_SESSION ? "session" : route == REPLAY_RANDOM ? "random" :
	       "round_robin";
}

/* ---- routes ---- */

/* A request's ids, the first @k of them, as one key. */
static uint64_t prefix_key(const struct replay_req *r, uint32_t k)
{
	return XXH3_64bits_withSeed(r->ids, (size_t)k * sizeof(*r->ids), k);
}

/*
 * Open addressing from a request's whole ids to the node that served the
 * latest request with exactly those: a later request whose ids extend them
 * (its next turn, a shared system prompt) looks each of its prefixes up.
 */
struct session_map {
	uint64_t *keys;              /* 0: empty */
	uint8_t *nodes;
	uint64_t mask;
};

static int session_map_init(struct session_map *m, uint32_t n)
{
	uint64_t cap = 16;

	while (cap < 2ull * n + 16)
		cap *= 2;
	m->keys = calloc(cap, sizeof(*m->keys));
	m->nodes = calloc(cap, 1);
	m->mask = cap - 1;
	return m->keys && m->nodes ? 0 : -ENOMEM;
}

static uint64_t *slot_of(const struct session_map *m, uint64_t key, bool *found)
{
	uint64_t i = key & m->mask;

	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & m->mask;
	*found = m->keys[i] == key;
	return &m->keys[i];
}

/* The node of the latest earlier request whose ids @r's extend, longest; -1: none. */
static int session_node(const struct session_map *m, const struct replay_req *r)
{
	for (uint32_t k = r->nids; k > 0; k--) {
		bool found;
		uint64_t *at = slot_of(m, prefix_key(r, k) | 1, &found);

		if (found)
			return m->nodes[at - m->keys];
	}
	return -1;
}

/* xorshift64*: the random route's, the same for a seed on every machine. */
static uint64_t next_random(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

int replay_route(const struct replay_opts *o, const struct replay_req *reqs, uint32_t n,
		 uint8_t *node_of)
{
	struct session_map m = { 0 };
	uint64_t state = o->seed * 0x9e3779b97f4a7c15ull + 1;
	int ret = 0;

	if (o->route == REPLAY_SESSION && (ret = session_map_init(&m, n)))
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		int node;
		bool found;

		switch (o->route) {
		case REPLAY_RANDOM:
			node_of[i] = (uint8_t)(next_random(&state) % o->nodes);
			break;
		case REPLAY_SESSION:
			node = session_node(&m, &reqs[i]);
			node_of[i] = (uint8_t)(node >= 0 ? (unsigned)node : i % o->nodes);
			if (reqs[i].nids) {
				uint64_t *at = slot_of(&m, prefix_key(&reqs[i], reqs[i].nids) | 1,
						       &found);

				*at = prefix_key(&reqs[i], reqs[i].nids) | 1;
				m.nodes[at - m.keys] = node_of[i];
			}
			break;
		default:
			node_of[i] = (uint8_t)(i % o->nodes);
		}
	}
out:
	free(m.keys);
	free(m.nodes);
	return ret;
}

/* ---- the Redis Cluster of a run ---- */

/* A loopback port free now, and its cluster bus's (port + 10000) too. */
static int free_port(void)
{
	for (int tries = 0; tries < 100; tries++) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(a);
		int fd = socket(AF_INET, SOCK_STREAM, 0), bus, port;

		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
		    getsockname(fd, (struct sockaddr *)&a, &len)) {
			if (fd >= 0)
				close(fd);
			return -errno;
		}
		port = ntohs(a.sin_port);
		close(fd);
		if (port > 55000)
			continue;
		a.sin_port = htons((uint16_t)(port + 10000));
		bus = socket(AF_INET, SOCK_STREAM, 0);
		if (bus >= 0 && !bind(bus, (struct sockaddr *)&a, sizeof(a))) {
			close(bus);
			return port;
		}
		if (bus >= 0)
			close(bus);
	}
	return -EADDRINUSE;
}

/* @argv run to its end, its output to /dev/null: 0, or -ECHILD. */
static int run_quiet(char *const argv[])
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 1);
		dup2(null, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		return -ECHILD;
	return 0;
}

static int start_server(struct replay_cluster *c, unsigned k)
{
	char port[8], conf[96];
	pid_t parent = getpid();

	snprintf(port, sizeof(port), "%d", c->ports[k]);
	snprintf(conf, sizeof(conf), "%s/nodes-%d.conf", c->dir, c->ports[k]);
	c->pids[k] = fork();
	if (c->pids[k] == 0) {
		char *argv[] = { "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
				 "--appendonly", "no", "--dir", c->dir, "--logfile", "/dev/null",
				 "--maxmemory-policy", "allkeys-lru", "--maxmemory-samples", "10",
				 "--cluster-enabled",
				 c->masters > 1 ? "yes" : "no", "--cluster-config-file", conf, NULL };
		int null = open("/dev/null", O_RDWR);

		/* Never outlives the run, however it ends. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		dup2(null, 1);
		dup2(null, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	return c->pids[k] < 0 ? -errno : 0;
}

static redisContext *connect_to(int port)
{
	for (int i = 0; i < 500; i++) {
		redisContext *r = redisConnect("127.0.0.1", port);

		if (r && !r->err)
			return r;
		redisFree(r);
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	}
	return NULL;
}

/* An integer field of INFO's (SECTION) on @r, or 0. */
static uint64_t info_field(redisContext *r, const char *section, const char *field)
{
	redisReply *rep = redisCommand(r, "INFO %s", section);
	const char *at = rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, field) : NULL;
	uint64_t v = at ? strtoull(at + strlen(field) + 1, NULL, 10) : 0;

	freeReplyObject(rep);
	return v;
}

/* Every master says cluster_state:ok, within 30 s. */
static int wait_cluster_ok(const struct replay_cluster *c)
{
	for (int i = 0; i < 600; i++) {
		unsigned ok = 0;

		for (unsigned k = 0; k < c->masters; k++) {
			redisContext *r = connect_to(c->ports[k]);
			redisReply *rep = r ? redisCommand(r, "CLUSTER INFO") : NULL;

			ok += rep && rep->type == REDIS_REPLY_STRING &&
			      strstr(rep->str, "cluster_state:ok");
			freeReplyObject(rep);
			redisFree(r);
		}
		if (ok == c->masters)
			return 0;
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	}
	return -ETIMEDOUT;
}

/*
 * What a block's value takes in Redis, its key and every overhead included
 * (the expiry's entry, a cluster's slot index, the allocator's rounding):
 * PROBE_KEYS values of the tier's size written with a TTL into one slot, the
 * master's used_memory before and after over their count; then deleted.
 * MEMORY USAGE of one key says 11% less (Redis then held 1.05 M of 1.19 M
 * keys), and keys shorter than the tier's 6% less.
 */
#define PROBE_KEYS 4096u
/* As long as the tier's keys (kvpool:GEOMETRY:0:HASH, 58 characters), one slot for all. */
#define PROBE_KEY "{kvbench-probe}:%042u"
static uint64_t measure_key(const struct replay_opts *o, const struct replay_cluster *c)
{
	size_t len = 64 + (size_t)o->block_size * o->kv_bytes_per_token;
	char *value = calloc(1, len);
	uint64_t bytes = 0;

	for (unsigned k = 0; value && k < c->masters && !bytes; k++) {
		redisContext *r = connect_to(c->ports[k]);
		uint64_t before = r ? info_field(r, "memory", "used_memory") : 0;
		redisReply *rep;
		bool mine = true;

		for (unsigned i = 0; r && mine && i < PROBE_KEYS; i++)
			redisAppendCommand(r, "SET " PROBE_KEY " %b EX 86400", i, value, len);
		for (unsigned i = 0; r && i < PROBE_KEYS; i++) {
			if (redisGetReply(r, (void **)&rep) != REDIS_OK)
				break;
			mine &= rep && rep->type == REDIS_REPLY_STATUS; /* else MOVED: not its slot */
			freeReplyObject(rep);
		}
		if (r && mine) {
			uint64_t after = info_field(r, "memory", "used_memory");

			bytes = after > before ? (after - before + PROBE_KEYS - 1) / PROBE_KEYS : 0;
			for (unsigned i = 0; i < PROBE_KEYS; i++)
				redisAppendCommand(r, "UNLINK " PROBE_KEY, i);
			for (unsigned i = 0; i < PROBE_KEYS; i++)
				if (redisGetReply(r, (void **)&rep) == REDIS_OK)
					freeReplyObject(rep);
		}
		redisFree(r);
	}
	free(value);
	return bytes;
}

void replay_cluster_census(struct replay_cluster *c)
{
	c->keys = c->evicted = 0;
	for (unsigned k = 0; k < c->masters; k++) {
		redisContext *r = connect_to(c->ports[k]);
		redisReply *rep = r ? redisCommand(r, "DBSIZE") : NULL;

		c->keys += rep && rep->type == REDIS_REPLY_INTEGER ? (uint64_t)rep->integer : 0;
		freeReplyObject(rep);
		c->evicted += r ? info_field(r, "stats", "evicted_keys") : 0;
		redisFree(r);
	}
}

static struct replay_cluster *running;

static void stop_running(void)
{
	if (running)
		replay_cluster_stop(running);
}

int replay_cluster_start(const struct replay_opts *o, struct replay_cluster *c)
{
	char *create[8 + REPLAY_MAX_NODES] = { "redis-cli", "--cluster", "create" };
	char addrs[REPLAY_MAX_NODES][24];
	uint64_t keys, per_master;
	int ret = 0, n = 3, off = 0;

	memset(c, 0, sizeof(*c));
	c->masters = o->redis_cluster;
	snprintf(c->dir, sizeof(c->dir), "%s/kvbench-redis.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (strlen(c->dir) >= sizeof(c->dir) - 1 || !mkdtemp(c->dir)) {
		fprintf(stderr, "kvbench replay: --redis-cluster: no directory of its own\n");
		return -EIO;
	}
	running = c;
	replay_on_signal(stop_running);
	for (unsigned k = 0; k < c->masters && !ret; k++) {
		c->ports[k] = free_port();
		ret = c->ports[k] < 0 ? c->ports[k] : start_server(c, k);
		snprintf(addrs[k], sizeof(addrs[k]), "127.0.0.1:%d", c->ports[k]);
		create[n++] = addrs[k];
		/* A URL lists 8 seeds at most: the slot map names the others. */
		if (k < KVPD_URL_SEEDS)
			off += snprintf(c->url + off, sizeof(c->url) - (size_t)off, "%s%s",
					k ? "," : "redis://", addrs[k]);
	}
	for (unsigned k = 0; k < c->masters && !ret; k++) {
		redisContext *r = connect_to(c->ports[k]);

		ret = r ? 0 : -ECONNREFUSED;
		redisFree(r);
	}
	create[n++] = "--cluster-yes";
	create[n] = NULL;
	if (!ret && c->masters > 1)
		ret = run_quiet(create) ?: wait_cluster_ok(c);
	if (!ret && !(c->key_bytes = measure_key(o, c)))
		ret = -EIO;
	if (ret) {
		fprintf(stderr, "kvbench replay: --redis-cluster %u: %s (redis-server and redis-cli "
			"installed? apt-get install redis-server redis-tools)\n", c->masters,
			strerror(-ret));
		replay_cluster_stop(c);
		return ret;
	}
	/* Each master: its share of T tokens' keys, over what it takes empty. */
	keys = o->tier_remote_tokens / o->block_size;
	per_master = (keys + c->masters - 1) / c->masters * c->key_bytes;
	for (unsigned k = 0; k < c->masters; k++) {
		redisContext *r = connect_to(c->ports[k]);
		uint64_t base = r ? info_field(r, "memory", "used_memory") : 0;
		redisReply *rep = r ? redisCommand(r, "CONFIG SET maxmemory %llu",
						   (unsigned long long)(base + per_master)) : NULL;

		if (!rep || rep->type == REDIS_REPLY_ERROR)
			ret = -EIO;
		freeReplyObject(rep);
		redisFree(r);
	}
	if (ret) {
		fprintf(stderr, "kvbench replay: --redis-cluster: CONFIG SET maxmemory refused\n");
		replay_cluster_stop(c);
	}
	return ret;
}

void replay_cluster_stop(struct replay_cluster *c)
{
	char path[128];

	for (unsigned k = 0; k < c->masters; k++) {
		if (c->pids[k] > 0) {
			kill(c->pids[k], SIGKILL);
			waitpid(c->pids[k], NULL, 0);
			c->pids[k] = 0;
		}
		snprintf(path, sizeof(path), "%s/nodes-%d.conf", c->dir, c->ports[k]);
		unlink(path);
	}
	if (*c->dir && rmdir(c->dir) && running)
		fprintf(stderr, "kvbench replay: %s left behind: %s\n", c->dir, strerror(errno));
	*c->dir = '\0';
	running = NULL;
}
