/* SPDX-License-Identifier: MIT */
/*
 * kvbench events: a pool's KV events publisher (docs/events.md, #40).
 *  - publish: commits as fast as one client makes them, each announcing 1 or
 *    64 blocks, into a pool with kv_events, a subscriber reading every batch:
 *    the events and blocks a second the publisher sends (none dropped);
 *  - decode: decode steps (ALLOC of one token, COMMIT) of 32 sequences through
 *    the daemon, on two pools alike but for kv_events, in turns of one run:
 *    ns a step on each, the ratio.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "../../lib/libkvpool.h"
#include "kvbench.h"

#define BS 16
#define POOL_BLOCKS 8192
#define SEQS 32
#define PROMPT 512

struct opts {
	const char *daemon;
	unsigned seconds, steps, rounds;
	bool json;
};

struct counter {
	void *sock;
	uint64_t batches, bytes;
	volatile bool stop;
};

static int usage_error(const char *fmt, const char *arg)
{
	return bench_usage_error("events", fmt, arg);
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .seconds = 3, .steps = 64, .rounds = 16 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;

		if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		if (!v)
			return usage_error("option '%s' needs a value", a);
		i++;
		if (!strcmp(a, "--daemon"))
			o->daemon = v;
		else if (!strcmp(a, "--seconds") && !bench_parse_u64(v, 1, 600, &n))
			o->seconds = (unsigned)n;
		else if (!strcmp(a, "--steps") && !bench_parse_u64(v, 16, 4096, &n))
			o->steps = (unsigned)n;
		else if (!strcmp(a, "--rounds") && !bench_parse_u64(v, 2, 1000, &n))
			o->rounds = (unsigned)n;
		else
			return usage_error("bad option or value '%s'", a);
	}
	return 0;
}

static int make_pool(struct kvp_client *admin, const char *name, const char *events_dir)
{
	struct kvp_pool_params_v2 p;
	char keys[512], why[KVP_REASON_MAX] = "";
	int n, ret;

	kvp_pool_params_v2_init(&p, name);
	n = snprintf(keys, sizeof(keys), "blocks = %u\nblock_size = %u\ngroups = full\n",
		     POOL_BLOCKS + 1, BS);
	if (events_dir)
		snprintf(keys + n, sizeof(keys) - (size_t)n, "kv_events = ipc://%s/%s.pub\n"
			 "kv_events_replay = off\n", events_dir, name);
	ret = kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvbench events: pool %s: %s\n", name, *why ? why : strerror(-ret));
	return ret;
}

static void *count(void *arg)
{
	struct counter *k = arg;
	zmq_msg_t msg;

	zmq_msg_init(&msg);
	while (!k->stop) {
		int more;

		if (zmq_msg_recv(&msg, k->sock, 0) < 0)
			continue; /* the receive timeout: look at stop again */
		more = zmq_msg_more(&msg);
		if (!more) {
			k->batches++;
			k->bytes += zmq_msg_size(&msg);
		}
	}
	zmq_msg_close(&msg);
	return NULL;
}

/* The CPU seconds the daemon's publisher threads (kvpd-events) have used. */
static double publisher_cpu_s(int pid)
{
	char path[320], line[512];
	double ticks = 0;
	struct dirent *e;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	while (dir && (e = readdir(dir))) {
		unsigned long ut, st;
		char *p;
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", pid, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		/* comm in parentheses, then fields 3..: utime and stime are 14th and 15th. */
		if (fgets(line, sizeof(line), f) && strstr(line, "(kvpd-events)") &&
		    (p = strrchr(line, ')')) &&
		    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			   &st) == 2)
			ticks += (double)(ut + st);
		fclose(f);
	}
	if (dir)
		closedir(dir);
	return ticks / (double)sysconf(_SC_CLK_TCK);
}

static int connect_pool(const char *sock, const char *pool, struct kvp_client **c)
{
	return kvp_connect(&(struct kvp_connect_opts){ .socket_path = sock, .pool = pool,
						      .arena_bytes = 1u << 20 }, c);
}

static const struct kvp_stats_events *events_row(struct kvp_stats_view *v, const char *pool)
{
	KVP_STATS_FOR_EACH_POOL(v, p)
		if (!strncmp(p->name, pool, KVP_NAME_MAX))
			return kvp_stats_events_of(v, p);
	return NULL;
}

/* Commits of @blocks blocks each for @seconds, fresh tokens every time. */
static int publish(const char *sock, unsigned blocks, unsigned seconds, uint32_t *base,
		   uint64_t *commits, uint64_t *ns)
{
	uint32_t n = blocks * BS, *tokens = malloc(n * sizeof(*tokens)), hit;
	struct kvp_client *c;
	uint64_t t0, h = 0;
	int ret = connect_pool(sock, "events", &c);

	if (ret || !tokens) {
		free(tokens);
		return ret ? ret : -ENOMEM;
	}
	*commits = 0;
	t0 = bench_now_ns();
	while (!ret && bench_now_ns() - t0 < seconds * 1000000000ull) {
		for (uint32_t i = 0; i < n; i++)
			tokens[i] = (*base)++;
		ret = kvp_seq_open(c, tokens, n, NULL, 0, -1, &h) ?:
		      kvp_alloc(c, h, n, 0, false, &hit, NULL, 0) ?: kvp_commit(c, h, n);
		kvp_seq_close(c, h);
		(*commits)++;
	}
	*ns = bench_now_ns() - t0;
	kvp_close(c);
	free(tokens);
	return ret;
}

/* @steps decode steps of SEQS sequences on @c's pool: ns a step (an ALLOC and a COMMIT). */
static int decode(struct kvp_client *c, unsigned steps, uint32_t *base, double *ns_per_step)
{
	uint64_t h[SEQS], t0;
	uint32_t tokens[PROMPT], hit, len = PROMPT;
	int ret = 0;

	for (unsigned s = 0; s < SEQS && !ret; s++) {
		for (uint32_t i = 0; i < PROMPT; i++)
			tokens[i] = (*base)++;
		ret = kvp_seq_open(c, tokens, PROMPT, NULL, 0, -1, &h[s]) ?:
		      kvp_alloc(c, h[s], PROMPT, 0, false, &hit, NULL, 0) ?:
		      kvp_commit(c, h[s], PROMPT);
	}
	t0 = bench_now_ns();
	for (unsigned k = 0; k < steps && !ret; k++, len++)
		for (unsigned s = 0; s < SEQS && !ret; s++) {
			uint32_t tok = (*base)++;

			ret = kvp_append(c, h[s], &tok, 1) ?:
			      kvp_alloc(c, h[s], 1, 0, false, &hit, NULL, 0) ?:
			      kvp_commit(c, h[s], len + 1);
		}
	*ns_per_step = (double)(bench_now_ns() - t0) / ((double)steps * SEQS);
	for (unsigned s = 0; s < SEQS; s++)
		kvp_seq_close(c, h[s]);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void print_row(const struct opts *o, const char *what, json_object *row)
{
	if (o->json) {
		json_object_object_add(row, "figure", json_object_new_string(what));
		bench_json_line(row);
		return;
	}
	json_object_put(row);
}

static int run(const struct opts *o, const struct bench_daemon *d)
{
	struct kvp_client *admin = NULL, *plain = NULL, *evc = NULL;
	struct counter k = { 0 };
	void *ctx = zmq_ctx_new();
	char ep[128];
	double with[1000], without[1000];
	uint32_t base = 1;
	uint64_t bytes0 = 0;
	pthread_t th;
	int ret, timeout = 100;

	ret = kvp_connect(&(struct kvp_connect_opts){ .socket_path = d->socket, .admin = true,
						     .stats_page = true, .monitor = true }, &admin) ?:
	      make_pool(admin, "plain", NULL) ?: make_pool(admin, "events", d->dir);
	if (ret)
		goto out;
	k.sock = zmq_socket(ctx, ZMQ_SUB);
	snprintf(ep, sizeof(ep), "ipc://%s/events.pub", d->dir);
	zmq_setsockopt(k.sock, ZMQ_SUBSCRIBE, "", 0);
	zmq_setsockopt(k.sock, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
	zmq_connect(k.sock, ep);
	usleep(200000); /* ZMQ's slow joiner: the subscription reaches the publisher */
	pthread_create(&th, NULL, count, &k);
	for (unsigned blocks = 1, sent0 = 0; blocks <= 64 && !ret; blocks *= 64) {
		struct kvp_stats_view v = { 0 };
		const struct kvp_stats_events *e;
		uint64_t commits, ns, b0 = k.batches;
		double cpu0 = publisher_cpu_s(d->pid), cpu;
		json_object *row;

		ret = publish(d->socket, blocks, o->seconds, &base, &commits, &ns);
		usleep(300000); /* what is queued reaches the subscriber */
		cpu = (publisher_cpu_s(d->pid) - cpu0) / (ns / 1e9);
		if (ret || (ret = kvp_stats_view_take(admin, &v)) || !(e = events_row(&v, "events"))) {
			kvp_stats_view_release(&v);
			ret = ret ? ret : -ENOENT;
			break;
		}
		if (!o->json)
			printf("publish, %2u blocks a commit: %8.0f commits/s, %9.0f blocks/s "
			       "announced, %5.1f MB/s of payload; received %llu of %llu batches, "
			       "dropped %llu; the publisher thread busy %.1f%% of the time\n", blocks,
			       commits / (ns / 1e9), commits * blocks / (ns / 1e9),
			       (e->bytes - bytes0) / (ns / 1e9) / 1e6,
			       (unsigned long long)(k.batches - b0),
			       (unsigned long long)(e->sent - sent0), (unsigned long long)e->dropped,
			       cpu * 100);
		row = bench_json_row();
		json_object_object_add(row, "blocks_per_commit", json_object_new_int(blocks));
		json_object_object_add(row, "commits_per_s", bench_json_fixed(commits / (ns / 1e9), 0));
		json_object_object_add(row, "blocks_per_s",
				       bench_json_fixed(commits * blocks / (ns / 1e9), 0));
		json_object_object_add(row, "sent_batches", json_object_new_int64(
			(int64_t)(e->sent - sent0)));
		json_object_object_add(row, "received_batches", json_object_new_int64(
			(int64_t)(k.batches - b0)));
		json_object_object_add(row, "mb_per_s", bench_json_fixed(
			(e->bytes - bytes0) / (ns / 1e9) / 1e6, 1));
		sent0 = (unsigned)e->sent;
		bytes0 = e->bytes;
		json_object_object_add(row, "dropped", json_object_new_int64((int64_t)e->dropped));
		json_object_object_add(row, "publisher_cpu_percent", bench_json_fixed(cpu * 100, 1));
		print_row(o, "publish", row);
		kvp_stats_view_release(&v);
	}
	ret = ret ?: connect_pool(d->socket, "plain", &plain) ?: connect_pool(d->socket, "events", &evc);
	/* Turns, each pool first every other round: drift and warm-up fall on both. */
	for (unsigned r = 0; r < o->rounds && !ret; r++) {
		bool flip = r & 1;

		ret = decode(flip ? evc : plain, o->steps, &base, flip ? &with[r] : &without[r]) ?:
		      decode(flip ? plain : evc, o->steps, &base, flip ? &without[r] : &with[r]);
	}
	if (!ret) {
		json_object *row = bench_json_row();
		double a, b;

		qsort(with, o->rounds, sizeof(*with), cmp_double);
		qsort(without, o->rounds, sizeof(*without), cmp_double);
		a = with[o->rounds / 2];
		b = without[o->rounds / 2];
		if (!o->json)
			printf("decode, %u sequences x %u steps x %u rounds: %.0f ns a step (ALLOC + "
			       "COMMIT) without events, %.0f with: %+.1f%%\n", SEQS, o->steps,
			       o->rounds, b, a, (a / b - 1) * 100);
		json_object_object_add(row, "ns_per_step_without", bench_json_fixed(b, 0));
		json_object_object_add(row, "ns_per_step_with", bench_json_fixed(a, 0));
		json_object_object_add(row, "slower_percent", bench_json_fixed((a / b - 1) * 100, 1));
		print_row(o, "decode", row);
	}
out:
	if (k.sock) {
		k.stop = true;
		pthread_join(th, NULL);
		zmq_close(k.sock);
	}
	zmq_ctx_term(ctx);
	if (plain)
		kvp_close(plain);
	if (evc)
		kvp_close(evc);
	if (admin)
		kvp_close(admin);
	if (ret)
		fprintf(stderr, "kvbench events: %s\n", strerror(-ret));
	return ret ? 1 : 0;
}

int bench_events(int argc, char **argv)
{
	struct bench_daemon d;
	struct opts o;
	char bin[512];
	int ret = parse(argc, argv, &o);

	if (ret)
		return ret;
	bench_default_daemon(bin, sizeof(bin));
	if (!o.json)
		bench_print_machine();
	ret = bench_daemon_start(&d, o.daemon ? o.daemon : bin, 50, NULL, -1);
	if (ret) {
		fprintf(stderr, "kvbench events: kvpoold did not start: %s\n", strerror(-ret));
		return 1;
	}
	ret = run(&o, &d);
	bench_daemon_stop(&d);
	return ret;
}
