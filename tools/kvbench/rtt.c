/* SPDX-License-Identifier: MIT */
/*
 * kvbench rtt: requests through a real kvpoold, in spin mode (daemon and
 * client busy-poll) and sleep mode (both sleep at once and wake each other),
 * next to the same allocator call in process and this machine's limits.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "kvbench.h"
#include "kvcore.h"
#include "bpf/kvacct.h"

#define BATCH 64
#define TOKENS_PER_SEQ 4096
#define MAX_LOOPS 2
/*
 * The loops are measured in turns, ROUNDS each, the idle daemon stopped
 * (SIGSTOP): drift on a shared machine (seconds-long spells of another
 * speed) then hits every loop alike instead of one run of one loop.
 */
#define ROUNDS 10

struct mode_result {
	struct bench_pct nop, alloc;
	double nop_batched_ns, alloc_batched_ns;
};

struct rtt_opts {
	char daemon[PATH_MAX];
	unsigned iters;
	bool json;
	const char *loops[MAX_LOOPS + 1]; /* the event loops to run, NULL-terminated */
};

/* One client of one daemon, and where each measurement left off. */
struct rtt_client {
	struct kvp_client *c;
	uint64_t seq;            /* the single ALLOCs' sequence, */
	uint32_t len;            /* its length: a new one every TOKENS_PER_SEQ */
	uint64_t seqs[BATCH];    /* the batched ALLOCs' sequences, */
	uint32_t steps;          /* steps taken on them */
	uint64_t *nop, *alloc;   /* samples, ns */
	unsigned nnop, nalloc;
	uint64_t nop_batched_ns, nop_batched_ops, alloc_batched_ns, alloc_batched_ops;
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

/* A pool on the daemon at @sock, a client of it, the batched sequences opened; room for @samples. */
static int rtt_client_open(struct rtt_client *r, const char *sock, unsigned spin_us,
			   unsigned samples)
{
	struct kvp_connect_opts o = { .socket_path = sock, .pool = "bench", .spin_us = spin_us,
				      .sq_entries = 256 };
	uint32_t token = 1;
	int ret;

	memset(r, 0, sizeof(*r));
	r->nop = calloc(samples, sizeof(*r->nop));
	r->alloc = calloc(samples, sizeof(*r->alloc));
	if (!r->nop || !r->alloc)
		return -ENOMEM;
	ret = make_pool(sock) ?: kvp_connect(&o, &r->c);
	for (unsigned s = 0; s < BATCH && !ret; s++)
		ret = kvp_seq_open(r->c, &token, 1, NULL, 0, -1, &r->seqs[s]);
	return ret;
}

static void rtt_client_close(struct rtt_client *r)
{
	kvp_close(r->c); /* the daemon closes the sequences */
	free(r->nop);
	free(r->alloc);
}

static int nop_rounds(struct rtt_client *r, unsigned n)
{
	int ret = 0;

	for (unsigned i = 0; i < n && !ret; i++) {
		uint64_t start = bench_now_ns();

		ret = kvp_nop(r->c);
		r->nop[r->nnop++] = bench_now_ns() - start;
	}
	return ret;
}

static int nop_batches(struct rtt_client *r, unsigned batches)
{
	uint64_t start = bench_now_ns();
	struct kvp_cqe *cqe;
	int ret;

	for (unsigned b = 0; b < batches; b++) {
		for (unsigned i = 0; i < BATCH; i++)
			kvp_get_sqe(r->c)->opcode = KVP_OP_NOP;
		kvp_submit(r->c);
		for (unsigned i = 0; i < BATCH; i++) {
			if ((ret = kvp_wait_cqe(r->c, &cqe)))
				return ret;
			kvp_cqe_seen(r->c, cqe);
		}
	}
	r->nop_batched_ns += bench_now_ns() - start;
	r->nop_batched_ops += (uint64_t)batches * BATCH;
	return 0;
}

/* One decode step's ALLOC, timed alone: the append before and commit after are not. */
static int alloc_rounds(struct rtt_client *r, unsigned n)
{
	uint32_t token = 1;
	int ret = 0;

	for (unsigned i = 0; i < n && !ret; i++) {
		uint64_t start;

		if (r->len % TOKENS_PER_SEQ == 0) {
			if (r->len)
				kvp_seq_close(r->c, r->seq);
			ret = kvp_seq_open(r->c, &token, 1, NULL, 0, -1, &r->seq);
			r->len = 1;
		} else {
			ret = kvp_append(r->c, r->seq, &token, 1);
			r->len++;
		}
		start = bench_now_ns();
		ret = ret ?: kvp_alloc(r->c, r->seq, 1, 0, false, NULL, NULL, 0);
		r->alloc[r->nalloc++] = bench_now_ns() - start;
		ret = ret ?: kvp_commit(r->c, r->seq, r->len);
	}
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

/* Decode steps on BATCH sequences: APPEND, ALLOC (timed), COMMIT, each batched. */
static int alloc_steps(struct rtt_client *r, unsigned steps)
{
	uint32_t *arena = kvp_arena(r->c, NULL);
	int ret = 0;

	arena[0] = 1;
	for (unsigned i = 0; i < steps && !ret; i++, r->steps++) {
		uint64_t start;

		ret = r->steps ? batch(r->c, r->seqs, KVP_OP_APPEND_TOKENS, 1) : 0;
		start = bench_now_ns();
		ret = ret ?: batch(r->c, r->seqs, KVP_OP_ALLOC, 1);
		r->alloc_batched_ns += bench_now_ns() - start;
		r->alloc_batched_ops += BATCH;
		ret = ret ?: batch(r->c, r->seqs, KVP_OP_COMMIT, r->steps + 1);
	}
	return ret;
}

/* One round's share of every measurement. */
static int rtt_round(struct rtt_client *r, unsigned iters)
{
	unsigned n = iters / ROUNDS, batches = iters / BATCH / ROUNDS + 1;

	return nop_rounds(r, n) ?: nop_batches(r, batches) ?: alloc_rounds(r, n) ?:
	       alloc_steps(r, batches + 1);
}

static void rtt_result(struct rtt_client *r, struct mode_result *out)
{
	bench_percentiles(r->nop, r->nnop, &out->nop);
	bench_percentiles(r->alloc, r->nalloc, &out->alloc);
	out->nop_batched_ns = (double)r->nop_batched_ns / (double)r->nop_batched_ops;
	out->alloc_batched_ns = (double)r->alloc_batched_ns / (double)r->alloc_batched_ops;
}

/*
 * Where the daemons and the client run: the last core and the first. A wake-up
 * across cores costs ten times one on the same core, and left to the scheduler
 * the sleep-mode figures would say where it put them more than anything else.
 */
static int daemon_cpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n >= 2 ? (int)n - 1 : -1;
}

static void pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN); c++)
		if (cpu < 0 || c == cpu)
			CPU_SET(c, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* One mode, every loop: a daemon each, measured in turns. */
static int run_mode(const struct rtt_opts *o, unsigned nloops, bool spin,
		    struct mode_result out[MAX_LOOPS])
{
	unsigned iters = spin ? o->iters : o->iters / 10, spin_us = spin ? 1000 : 0, started = 0;
	struct bench_daemon d[MAX_LOOPS];
	struct rtt_client r[MAX_LOOPS];
	int ret = 0;

	pin_self(daemon_cpu() >= 0 ? 0 : -1);
	while (started < nloops && !ret) {
		ret = bench_daemon_start(&d[started], o->daemon, spin_us, o->loops[started],
					 daemon_cpu());
		if (ret)
			break;
		/* Closed below, whether it opened or not. */
		ret = rtt_client_open(&r[started], d[started].socket, spin_us, iters + ROUNDS);
		started++;
	}
	for (unsigned round = 0; round < ROUNDS && !ret; round++) {
		for (unsigned l = 0; l < nloops && !ret; l++) {
			/*
			 * A spinning daemon left running would take the core the other
			 * one needs. Sleeping ones are left alone: a SIGCONT would wake
			 * the daemon on the client's core, and sleep mode is meant to
			 * time wake-ups wherever the scheduler puts them.
			 */
			for (unsigned k = 0; spin && k < nloops; k++)
				kill(d[k].pid, k == l ? SIGCONT : SIGSTOP);
			ret = rtt_round(&r[l], iters);
		}
	}
	for (unsigned l = 0; l < started; l++) {
		kill(d[l].pid, SIGCONT);
		if (!ret)
			rtt_result(&r[l], &out[l]);
		rtt_client_close(&r[l]);
		bench_daemon_stop(&d[l]);
	}
	pin_self(-1);
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
	j = bench_json_row();
	json_object_object_add(j, "event_loop", json_object_new_string(loop));
	json_object_object_add(j, "mode", json_object_new_string(mode));
	json_object_object_add(j, "op", json_object_new_string(op));
	json_object_object_add(j, "median_ns", json_object_new_int64((int64_t)p->median));
	json_object_object_add(j, "p99_ns", json_object_new_int64((int64_t)p->p99));
	json_object_object_add(j, "batched_ns_per_op", bench_json_fixed(batched, 1));
	if (in_process > 0) /* ALLOC rows only: a NOP has no in-process counterpart */
		json_object_object_add(j, "in_process_ns", bench_json_fixed(in_process, 1));
	bench_json_line(j);
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
	/* [mode][loop] */
	struct mode_result modes[2][MAX_LOOPS];
	struct bench_limits limits;
	unsigned nloops = 0;
	double in_process;
	int ret;

	if (parse_rtt_args(argc, argv, &o))
		return 2;
	while (nloops < MAX_LOOPS && o.loops[nloops])
		nloops++;
	if (!o.json) {
		bench_print_machine();
		printf("# kvbench rtt: %u round trips in spin mode, %u in sleep mode, batches of %d; daemon %s\n",
		       o.iters, o.iters / 10, BATCH, o.daemon);
		if (daemon_cpu() >= 0)
			printf("# daemons on CPU %d, client on CPU 0; the event loops measured in %d turns each\n",
			       daemon_cpu(), ROUNDS);
	}
	ret = bench_measure_limits(&limits);
	for (int m = 0; m < 2 && !ret; m++)
		ret = run_mode(&o, nloops, m == 0, modes[m]);
	if (ret) {
		fprintf(stderr, "kvbench rtt: %s\n", strerror(-ret));
		return 1;
	}
	in_process = in_process_alloc_ns();
	bench_print_limits(&limits, o.json);
	if (!o.json) {
		printf("%-9s %-6s %-6s %12s %12s %16s %14s\n", "loop", "mode", "op", "median_ns",
		       "p99_ns", "batched_ns/op", "in_process_ns");
	}
	for (int m = 0; m < 2; m++) {
		for (unsigned l = 0; l < nloops; l++) {
			const struct mode_result *r = &modes[m][l];
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

/*
 * Fresh sequences for a pass: six passes of 200000 decode steps' ALLOCs on the
 * same 64 would need more blocks than the pool has.
 */
static int renew_seqs(struct rtt_client *r)
{
	uint32_t token = 1;
	int ret = 0;

	for (unsigned s = 0; s < BATCH && !ret; s++)
		ret = kvp_seq_close(r->c, r->seqs[s]) ?:
		      kvp_seq_open(r->c, &token, 1, NULL, 0, -1, &r->seqs[s]);
	r->steps = 0;
	return ret;
}

static int overhead_pass(struct rtt_client *r, unsigned iters, struct overhead_row *row)
{
	int ret = renew_seqs(r);

	if (ret)
		return ret;
	r->nop_batched_ns = r->nop_batched_ops = r->alloc_batched_ns = r->alloc_batched_ops = 0;
	ret = nop_batches(r, iters / BATCH) ?: alloc_steps(r, iters / BATCH);
	row->nop_ns = (double)r->nop_batched_ns / (double)r->nop_batched_ops;
	row->alloc_ns = (double)r->alloc_batched_ns / (double)r->alloc_batched_ops;
	return ret;
}

static void overhead_row_print(int pass, const char *op, double without, double with, bool json)
{
	json_object *j;

	if (!json) {
		printf("%-6d %-12s %14.1f %14.1f %8.1f%%\n", pass, op, without, with,
		       100.0 * (with / without - 1));
		return;
	}
	j = bench_json_row();
	json_object_object_add(j, "pass", json_object_new_int(pass));
	json_object_object_add(j, "op", json_object_new_string(op));
	json_object_object_add(j, "without_ns_per_op", bench_json_fixed(without, 1));
	json_object_object_add(j, "with_ns_per_op", bench_json_fixed(with, 1));
	json_object_object_add(j, "overhead_pct", bench_json_fixed(100.0 * (with / without - 1), 1));
	bench_json_line(j);
}

/*
 * kvbench overhead: the daemon's batched throughput (NOP, decode-step ALLOC)
 * without and with the BPF accounting program attached to its probes.
 */
int bench_overhead(int argc, char **argv)
{
	struct overhead_row off[3], on[3];
	char daemon[PATH_MAX], why[256] = "";
	unsigned iters = 200000;
	bool json = false;
	struct bench_daemon d;
	struct kvacct *acct = NULL;
	struct rtt_client c;
	int ret;

	bench_default_daemon(daemon, sizeof(daemon));
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--daemon") && i + 1 < argc) {
			snprintf(daemon, sizeof(daemon), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--iters") && i + 1 < argc && atoi(argv[i + 1]) >= 1000) {
			iters = (unsigned)atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else {
			fprintf(stderr, "kvbench overhead: bad argument '%s'\n", argv[i]);
			return 2;
		}
	}
	ret = bench_daemon_start(&d, daemon, 1000, NULL, -1);
	if (ret)
		goto out_err;
	ret = rtt_client_open(&c, d.socket, 1000, 1);
	/* Alternate without and with, three times: drift on a shared machine hits both alike. */
	for (int rep = 0; rep < 3 && !ret; rep++) {
		ret = overhead_pass(&c, iters, &off[rep]);
		if (!ret && (ret = kvacct_open(d.pid, &acct, why, sizeof(why))) == 0) {
			ret = overhead_pass(&c, iters, &on[rep]);
			kvacct_close(acct);
		}
	}
	rtt_client_close(&c);
	bench_daemon_stop(&d);
	if (ret) {
out_err:
		fprintf(stderr, "kvbench overhead: %s%s%s\n", strerror(-ret), *why ? ": " : "", why);
		return 1;
	}
	if (!json) {
		bench_print_machine();
		printf("# kvbench overhead: batched throughput (64 per batch, spin mode, %u requests per "
		       "pass),\n# without and with kvacct attached to every probe it uses; 3 alternating "
		       "passes\n", iters);
		printf("%-6s %-12s %14s %14s %9s\n", "pass", "op", "without_ns/op", "with_ns/op",
		       "overhead");
	}
	for (int rep = 0; rep < 3; rep++) {
		overhead_row_print(rep + 1, "NOP", off[rep].nop_ns, on[rep].nop_ns, json);
		overhead_row_print(rep + 1, "ALLOC", off[rep].alloc_ns, on[rep].alloc_ns, json);
	}
	return 0;
}
