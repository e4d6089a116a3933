/* SPDX-License-Identifier: MIT */
/*
 * kvbench rtt: requests through a real kvpoold, in spin mode (daemon and
 * client busy-poll) and sleep mode (both sleep at once and wake each other),
 * next to the same allocator call in process and this machine's limits.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/libkvpool.h"
#include "kvbench.h"
#include "kvcore.h"
#include "bpf/kvacct.h"

#define BATCH 64
#define TOKENS_PER_SEQ 4096

struct mode_result {
	struct bench_pct nop, alloc;
	double nop_batched_ns, alloc_batched_ns;
};

struct rtt_opts {
	char daemon[PATH_MAX];
	unsigned iters;
	bool json;
	const char *loops[2]; /* the event loops to run, NULL-terminated */
};

static int make_pool(const char *sock)
{
	struct kvp_connect_opts o = { .socket_path = sock, .admin = true };
	struct kvp_pool_params p;
	struct kvp_client *c;
	int ret = kvp_connect(&o, &c);

	if (ret)
		return ret;
	kvp_pool_params_init(&p, "bench");
	p.num_blocks = 65536;
	p.block_size = 16;
	p.num_groups = 1;
	p.group_kind[0] = KVP_KIND_FULL;
	ret = kvp_pool_create(c, &p);
	kvp_close(c);
	return ret;
}

static int measure_nop(struct kvp_client *c, unsigned iters, struct mode_result *r)
{
	uint64_t *samples = calloc(iters, sizeof(*samples)), start;
	int ret = 0;

	if (!samples)
		return -ENOMEM;
	for (unsigned i = 0; i < iters && !ret; i++) {
		start = bench_now_ns();
		ret = kvp_nop(c);
		samples[i] = bench_now_ns() - start;
	}
	bench_percentiles(samples, iters, &r->nop);
	free(samples);
	if (ret)
		return ret;

	unsigned batches = iters / BATCH + 1;

	start = bench_now_ns();
	for (unsigned b = 0; b < batches; b++) {
		struct kvp_cqe *cqe;

		for (unsigned i = 0; i < BATCH; i++)
			kvp_get_sqe(c)->opcode = KVP_OP_NOP;
		kvp_submit(c);
		for (unsigned i = 0; i < BATCH; i++) {
			if ((ret = kvp_wait_cqe(c, &cqe)))
				return ret;
			kvp_cqe_seen(c, cqe);
		}
	}
	r->nop_batched_ns = (double)(bench_now_ns() - start) / (batches * BATCH);
	return 0;
}

/* One decode step's ALLOC, timed alone: the append before and commit after are not. */
static int measure_alloc(struct kvp_client *c, unsigned iters, struct mode_result *r)
{
	uint64_t *samples = calloc(iters, sizeof(*samples)), seq = 0;
	uint32_t token = 1, len = 0;
	int ret = 0;

	if (!samples)
		return -ENOMEM;
	for (unsigned i = 0; i < iters && !ret; i++) {
		uint64_t start;

		if (len % TOKENS_PER_SEQ == 0) {
			if (len)
				kvp_seq_close(c, seq);
			ret = kvp_seq_open(c, &token, 1, NULL, 0, -1, &seq);
			len = 1;
		} else {
			ret = kvp_append(c, seq, &token, 1);
			len++;
		}
		start = bench_now_ns();
		ret = ret ?: kvp_alloc(c, seq, 1, 0, false, NULL, NULL, 0);
		samples[i] = bench_now_ns() - start;
		ret = ret ?: kvp_commit(c, seq, len);
	}
	kvp_seq_close(c, seq);
	bench_percentiles(samples, iters, &r->alloc);
	free(samples);
	return ret;
}

/* Runs one batch of @op on every sequence, tokens (for APPEND) staged at arena offset 0. */
static int batch(struct kvp_client *c, const uint64_t *seqs, uint8_t op, uint32_t len)
{
	struct kvp_cqe *cqe;
	int ret = 0;

	for (unsigned s = 0; s < BATCH; s++) {
		struct kvp_sqe *sqe = kvp_get_sqe(c);

		sqe->opcode = op;
		sqe->handle = seqs[s];
		sqe->len = op == KVP_OP_ALLOC ? 1 : op == KVP_OP_APPEND_TOKENS ? 1 : len;
	}
	kvp_submit(c);
	for (unsigned s = 0; s < BATCH; s++) {
		int r = kvp_wait_cqe(c, &cqe);

		if (r)
			return r;
		if (cqe->res < 0 && !ret)
			ret = cqe->res;
		kvp_cqe_seen(c, cqe);
	}
	return ret;
}

static int measure_alloc_batched(struct kvp_client *c, unsigned iters, struct mode_result *r)
{
	uint64_t seqs[BATCH], alloc_ns = 0;
	uint32_t token = 1, *arena = kvp_arena(c, NULL);
	unsigned steps = iters / BATCH + 16;
	int ret = 0;

	arena[0] = token;
	for (unsigned s = 0; s < BATCH && !ret; s++)
		ret = kvp_seq_open(c, &token, 1, NULL, 0, -1, &seqs[s]);
	for (unsigned step = 0; step < steps && !ret; step++) {
		uint64_t start;

		ret = step ? batch(c, seqs, KVP_OP_APPEND_TOKENS, 1) : 0;
		start = bench_now_ns();
		ret = ret ?: batch(c, seqs, KVP_OP_ALLOC, 1);
		alloc_ns += bench_now_ns() - start;
		ret = ret ?: batch(c, seqs, KVP_OP_COMMIT, step + 1);
	}
	for (unsigned s = 0; s < BATCH; s++)
		kvp_seq_close(c, seqs[s]);
	r->alloc_batched_ns = (double)alloc_ns / ((double)steps * BATCH);
	return ret;
}

static int run_mode(const struct rtt_opts *o, const char *loop, bool spin, struct mode_result *r)
{
	struct kvp_connect_opts copts = { .pool = "bench", .spin_us = spin ? 1000 : 0,
					  .sq_entries = 256 };
	unsigned iters = spin ? o->iters : o->iters / 10;
	struct bench_daemon d;
	struct kvp_client *c;
	int ret = bench_daemon_start(&d, o->daemon, spin ? 1000 : 0, loop);

	if (ret)
		return ret;
	copts.socket_path = d.socket;
	ret = make_pool(d.socket) ?: kvp_connect(&copts, &c);
	if (!ret) {
		ret = measure_nop(c, iters, r) ?: measure_alloc(c, iters, r) ?:
		      measure_alloc_batched(c, iters, r);
		kvp_close(c);
	}
	bench_daemon_stop(&d);
	return ret;
}

static double in_process_alloc_ns(void)
{
	struct kvc_pool_config cfg;
	struct kvc_pool *pool;
	struct kvc_seq *seqs[BATCH];
	struct kvc_alloc_req req = { .new_tokens = 1 };
	struct kvc_alloc_res res;
	uint32_t token = 1;
	uint64_t ns = 0;
	unsigned steps = 1024;

	kvc_pool_config_init(&cfg, 65536, 16);
	cfg.num_groups = 1;
	cfg.groups[0].kind = KVC_FULL;
	if (kvc_pool_create(&cfg, &pool))
		return -1;
	for (unsigned s = 0; s < BATCH; s++)
		if (kvc_seq_create(pool, &token, 1, NULL, 0, -1, &seqs[s]))
			return -1;
	for (unsigned step = 0; step < steps; step++) {
		uint64_t start;

		for (unsigned s = 0; step && s < BATCH; s++)
			kvc_seq_append(seqs[s], &token, 1);
		start = bench_now_ns();
		for (unsigned s = 0; s < BATCH; s++)
			kvc_alloc(seqs[s], &req, &res);
		ns += bench_now_ns() - start;
		for (unsigned s = 0; s < BATCH; s++)
			kvc_seq_computed(seqs[s], step + 1);
	}
	kvc_pool_destroy(pool);
	return (double)ns / ((double)steps * BATCH);
}

static void print_row(const struct rtt_opts *o, const char *loop, const char *mode,
		      const char *op, const struct bench_pct *p, double batched, double in_process)
{
	json_object *j;

	if (!o->json) {
		printf("%-9s %-6s %-6s %12llu %12llu %16.1f ", loop, mode, op,
		       (unsigned long long)p->median, (unsigned long long)p->p99, batched);
		if (in_process > 0)
			printf("%14.1f\n", in_process);
		else
			printf("%14s\n", "-");
		return;
	}
	j = json_object_new_object();
	json_object_object_add(j, "event_loop", json_object_new_string(loop));
	json_object_object_add(j, "mode", json_object_new_string(mode));
	json_object_object_add(j, "op", json_object_new_string(op));
	json_object_object_add(j, "median_ns", json_object_new_int64((int64_t)p->median));
	json_object_object_add(j, "p99_ns", json_object_new_int64((int64_t)p->p99));
	json_object_object_add(j, "batched_ns_per_op", bench_json_fixed(batched, 1));
	json_object_object_add(j, "in_process_ns", in_process > 0 ? bench_json_fixed(in_process, 1) : NULL);
	bench_json_line(j);
}

/* The machine's limits, as rows of their own: no daemon, so no event loop (null). */
static void print_limit_rows(const struct bench_limits *l)
{
	const struct { const char *name; const struct bench_pct *p; } rows[] = {
		{ "ring", &l->ring }, { "eventfd", &l->eventfd },
	};

	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		json_object *j = json_object_new_object();

		json_object_object_add(j, "event_loop", NULL);
		json_object_object_add(j, "limit", json_object_new_string(rows[i].name));
		json_object_object_add(j, "median_ns", json_object_new_int64((int64_t)rows[i].p->median));
		json_object_object_add(j, "p99_ns", json_object_new_int64((int64_t)rows[i].p->p99));
		bench_json_line(j);
	}
}

static int parse_rtt_args(int argc, char **argv, struct rtt_opts *o)
{
	bench_default_daemon(o->daemon, sizeof(o->daemon));
	o->iters = 20000;
	o->loops[0] = "io_uring";
	o->loops[1] = "epoll";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--daemon") && i + 1 < argc) {
			snprintf(o->daemon, sizeof(o->daemon), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--iters") && i + 1 < argc && atoi(argv[i + 1]) >= 100) {
			o->iters = (unsigned)atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--json")) {
			o->json = true;
		} else if (!strcmp(argv[i], "--event-loop") && i + 1 < argc &&
			   (!strcmp(argv[i + 1], "io_uring") || !strcmp(argv[i + 1], "epoll") ||
			    !strcmp(argv[i + 1], "both"))) {
			i++;
			if (strcmp(argv[i], "both")) {
				o->loops[0] = argv[i];
				o->loops[1] = NULL;
			}
		} else {
			fprintf(stderr, "kvbench rtt: bad argument '%s'\n", argv[i]);
			return -EINVAL;
		}
	}
	return 0;
}

int bench_rtt(int argc, char **argv)
{
	struct rtt_opts o = { 0 };
	/* [loop][mode]: spin and sleep of each loop, measured one after the other */
	struct mode_result modes[2][2];
	struct bench_limits limits;
	unsigned nloops = 0;
	double in_process;
	int ret;

	if (parse_rtt_args(argc, argv, &o))
		return 2;
	while (nloops < 2 && o.loops[nloops])
		nloops++;
	if (!o.json) {
		bench_print_machine();
		printf("# kvbench rtt: %u round trips in spin mode, %u in sleep mode, batches of %d; daemon %s\n",
		       o.iters, o.iters / 10, BATCH, o.daemon);
	}
	ret = bench_measure_limits(&limits);
	/* Modes outer, loops inner: drift on a shared machine hits both loops alike. */
	for (int m = 0; m < 2 && !ret; m++)
		for (unsigned l = 0; l < nloops && !ret; l++)
			ret = run_mode(&o, o.loops[l], m == 0, &modes[l][m]);
	if (ret) {
		fprintf(stderr, "kvbench rtt: %s\n", strerror(-ret));
		return 1;
	}
	in_process = in_process_alloc_ns();
	if (o.json) {
		print_limit_rows(&limits);
	} else {
		bench_print_limits(&limits);
		printf("%-9s %-6s %-6s %12s %12s %16s %14s\n", "loop", "mode", "op", "median_ns",
		       "p99_ns", "batched_ns/op", "in_process_ns");
	}
	for (int m = 0; m < 2; m++) {
		for (unsigned l = 0; l < nloops; l++) {
			const struct mode_result *r = &modes[l][m];
			const char *name = m ? "sleep" : "spin";

			print_row(&o, o.loops[l], name, "NOP", &r->nop, r->nop_batched_ns, 0);
			print_row(&o, o.loops[l], name, "ALLOC", &r->alloc, r->alloc_batched_ns,
				  in_process);
		}
	}
	return 0;
}

struct overhead_row {
	double nop_ns, alloc_ns;
};

static int overhead_pass(struct kvp_client *c, unsigned iters, struct overhead_row *row)
{
	struct mode_result r;
	int ret = measure_nop(c, iters, &r) ?: measure_alloc_batched(c, iters, &r);

	row->nop_ns = r.nop_batched_ns;
	row->alloc_ns = r.alloc_batched_ns;
	return ret;
}

/*
 * kvbench overhead: the daemon's batched throughput (NOP, decode-step ALLOC)
 * without and with the BPF accounting program attached to its probes.
 */
int bench_overhead(int argc, char **argv)
{
	struct kvp_connect_opts copts = { .pool = "bench", .sq_entries = 256, .spin_us = 1000 };
	struct overhead_row off[3], on[3];
	char daemon[PATH_MAX], why[256] = "";
	unsigned iters = 200000;
	struct bench_daemon d;
	struct kvacct *acct = NULL;
	struct kvp_client *c;
	int ret;

	bench_default_daemon(daemon, sizeof(daemon));
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--daemon") && i + 1 < argc) {
			snprintf(daemon, sizeof(daemon), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--iters") && i + 1 < argc && atoi(argv[i + 1]) >= 1000) {
			iters = (unsigned)atoi(argv[++i]);
		} else {
			fprintf(stderr, "kvbench overhead: bad argument '%s'\n", argv[i]);
			return 2;
		}
	}
	ret = bench_daemon_start(&d, daemon, 1000, NULL);
	if (ret)
		goto out_err;
	copts.socket_path = d.socket;
	ret = make_pool(d.socket) ?: kvp_connect(&copts, &c);
	if (ret)
		goto out_stop;
	/* Alternate without and with, three times: drift on a shared machine hits both alike. */
	for (int rep = 0; rep < 3 && !ret; rep++) {
		ret = overhead_pass(c, iters, &off[rep]);
		if (!ret && (ret = kvacct_open(d.pid, &acct, why, sizeof(why))) == 0) {
			ret = overhead_pass(c, iters, &on[rep]);
			kvacct_close(acct);
		}
	}
	kvp_close(c);
out_stop:
	bench_daemon_stop(&d);
	if (ret) {
out_err:
		fprintf(stderr, "kvbench overhead: %s%s%s\n", strerror(-ret), *why ? ": " : "", why);
		return 1;
	}
	bench_print_machine();
	printf("# kvbench overhead: batched throughput (64 per batch, spin mode, %u requests per pass),\n"
	       "# without and with kvacct attached to every probe it uses; 3 alternating passes\n", iters);
	printf("%-6s %-12s %14s %14s %9s\n", "pass", "op", "without_ns/op", "with_ns/op", "overhead");
	for (int rep = 0; rep < 3; rep++) {
		printf("%-6d %-12s %14.1f %14.1f %8.1f%%\n", rep + 1, "NOP", off[rep].nop_ns, on[rep].nop_ns,
		       100.0 * (on[rep].nop_ns / off[rep].nop_ns - 1));
		printf("%-6d %-12s %14.1f %14.1f %8.1f%%\n", rep + 1, "ALLOC", off[rep].alloc_ns,
		       on[rep].alloc_ns, 100.0 * (on[rep].alloc_ns / off[rep].alloc_ns - 1));
	}
	return 0;
}
