/* SPDX-License-Identifier: MIT */
/*
 * kvbench attend: decode ATTEND through a kvpoold it starts, as GB/s of KV
 * read, next to this machine's read bandwidth measured in the same run. Decode
 * attention reads every key and value of the context once per step, so memory
 * bandwidth is its physical limit and the ratio says how close we get.
 *
 * Each step reads the next @seqs of all the sequences filled, round-robin, as
 * a server's decode steps read fresh KV: a row's working set is every filled
 * sequence's context, not one batch that the CPU's last-level cache would
 * keep and so flatter the ratio.
 */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "common/dtype_store.h"
#include "kvbench.h"

#define HEAD_DIM 128
#define BLOCK_SIZE 16
#define WRITE_CHUNK 4096u
#define BW_BYTES (1ull << 30)
/* Each row measures this many (bandwidth, attend) pairs and keeps the one of median ratio. */
#define PASSES 3
/* Each bandwidth and each attend measurement runs this long at least. */
#define MEASURE_NS 100000000ull
/*
 * The daemon's --spin-us and the client's spin_us: a decode engine waits for each
 * step, and a wake-up across cores (eventfd, futex) costs the waker 10-60 us on
 * some machines, as much as an 8k step's reading. Both sides spin through the
 * round trip between two steps instead, as a latency-bound engine would set them.
 */
#define SPIN_US 200

struct attend_opts {
	char daemon[PATH_MAX];
	const uint64_t *bw_buf; /* BW_BYTES to read for the bandwidth */
	unsigned cores;
	bool json, quick;
	/* 0 / NULL: every value of the table; else only rows with this value */
	unsigned context, seqs, gqa;
	const char *dtype;
};

/* The table: every combination of these, per dtype (--quick: the first two of each). */
static const unsigned contexts[] = { 1024, 4096, 8192, 16384, 32768 };
static const unsigned seq_counts[] = { 1, 8, 64 };
static const unsigned gqas[] = { 1, 4 };

struct row {
	const char *dtype;
	unsigned gqa, context, seqs;
	double kv_gbps, bw_gbps;
	double working_set_mib; /* KV the round-robin steps of the row read */
};

/* ---- the machine's read bandwidth: threads summing disjoint parts of one buffer ---- */

struct bw_part {
	const uint64_t *p;
	size_t n;
	uint64_t sum;
};

static void *sum_part(void *arg)
{
	struct bw_part *b = arg;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	for (size_t i = 0; i + 4 <= b->n; i += 4) {
		s0 += b->p[i];
		s1 += b->p[i + 1];
		s2 += b->p[i + 2];
		s3 += b->p[i + 3];
	}
	b->sum = s0 + s1 + s2 + s3;
	return NULL;
}

/* One pass of @threads threads over @bytes of @buf. */
static void read_pass(const uint64_t *buf, size_t bytes, unsigned threads)
{
	size_t n = bytes / sizeof(uint64_t);
	struct bw_part parts[64];
	pthread_t tids[64];

	if (threads > 64)
		threads = 64;
	for (unsigned t = 0; t < threads; t++) {
		parts[t] = (struct bw_part){ buf + n / threads * t, n / threads, 0 };
		pthread_create(&tids[t], NULL, sum_part, &parts[t]);
	}
	for (unsigned t = 0; t < threads; t++)
		pthread_join(tids[t], NULL);
}

/*
 * GB/s of passes over BW_BYTES of @buf for MEASURE_NS or more: as long as an attend
 * run, so that a short spell of faster memory weighs on both alike.
 */
static double measure_bw(const uint64_t *buf, unsigned threads)
{
	uint64_t start = bench_now_ns(), elapsed;
	unsigned passes = 0;

	do {
		read_pass(buf, BW_BYTES, threads);
		passes++;
		elapsed = bench_now_ns() - start;
	} while (elapsed < MEASURE_NS);
	return (double)passes * BW_BYTES / (double)elapsed;
}

/* ---- the pool: seqs sequences of max_context tokens of random KV, committed ---- */

static int fill(struct kvp_client *c, uint64_t *handles, unsigned seqs, unsigned context,
		size_t token_bytes)
{
	uint32_t *tokens = malloc(context * sizeof(*tokens));
	uint8_t *kv = malloc(WRITE_CHUNK * token_bytes);
	uint64_t seed = 88172645463325252ull;
	int ret = tokens && kv ? 0 : -ENOMEM;

	for (size_t i = 0; !ret && i < WRITE_CHUNK * token_bytes; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		/* Small finite values in every dtype: a sign, a small exponent, random mantissa. */
		kv[i] = (i & 1) ? (uint8_t)(0x3c | (seed & 0x80)) : (uint8_t)seed;
	}
	for (unsigned s = 0; s < seqs && !ret; s++) {
		for (unsigned t = 0; t < context; t++)
			tokens[t] = s * context + t; /* distinct: no sequence shares a block */
		ret = kvp_seq_open(c, tokens, context, NULL, 0, -1, &handles[s]) ?:
		      kvp_alloc(c, handles[s], context, 0, false, NULL, NULL, 0);
		for (unsigned t = 0; t < context && !ret; t += WRITE_CHUNK) {
			unsigned n = context - t < WRITE_CHUNK ? context - t : WRITE_CHUNK;

			ret = kvp_write_kv(c, handles[s], 0, 0, t, n, kv, kv + n * token_bytes / 2);
		}
		ret = ret ?: kvp_commit(c, handles[s], context);
	}
	free(tokens);
	free(kv);
	return ret;
}

/*
 * The decode step of the @seqs sequences after @from (of @nhandles), at @context: q and out
 * in the pool's @dtype, as an engine running its model in that dtype passes them.
 */
static int step(struct kvp_client *c, const uint64_t *handles, unsigned nhandles, unsigned from,
		unsigned seqs, unsigned context, unsigned gqa, uint32_t dtype, uint8_t *q, uint8_t *out)
{
	size_t q_bytes = (size_t)gqa * HEAD_DIM * dtype_size(dtype);
	struct kvp_attend_req req[64];

	for (unsigned s = 0; s < seqs; s++)
		req[s] = (struct kvp_attend_req){ handles[(from + s) % nhandles], context - 1, 1,
						  q + s * q_bytes, out + s * q_bytes };
	return kvp_attend(c, 0, 0, gqa, 0.088f, 0, dtype == KVP_DTYPE_F32, req, seqs);
}

/* Decode steps of @seqs sequences at @context, round-robin over all handles, for MEASURE_NS. */
static int measure(struct kvp_client *c, const uint64_t *handles, unsigned nhandles,
		   unsigned seqs, unsigned context, unsigned gqa, uint32_t dtype, double *gbps)
{
	size_t n = (size_t)seqs * gqa * HEAD_DIM, token_bytes = 2 * HEAD_DIM * dtype_size(dtype);
	uint8_t *q = malloc(n * dtype_size(dtype)), *out = malloc(n * dtype_size(dtype));
	uint64_t start, elapsed = 0;
	unsigned reps = 0;
	int ret = q && out ? 0 : -ENOMEM;

	for (size_t i = 0; !ret && i < n; i++)
		dtype_store(q, i, (float)(i % 7) * 0.01f, dtype);
	ret = ret ?: step(c, handles, nhandles, 0, seqs, context, gqa, dtype, q, out); /* warm */
	start = bench_now_ns();
	while (!ret && (elapsed < MEASURE_NS || reps < 3)) {
		ret = step(c, handles, nhandles, (reps + 1) * seqs, seqs, context, gqa, dtype, q, out);
		reps++;
		elapsed = bench_now_ns() - start;
	}
	*gbps = (double)reps * seqs * context * token_bytes / (double)elapsed;
	free(q);
	free(out);
	return ret;
}

struct pair {
	double bw, kv;
};

/* By ratio kv / bw, compared as products: kv / bw < kv' / bw' as kv * bw' < kv' * bw. */
static int by_ratio(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;
	double l = x->kv * y->bw, r = y->kv * x->bw;

	return (l > r) - (l < r);
}

/*
 * Fills in r's figures. The machine's bandwidth drifts, by half and for a second or
 * so at a time (other tenants of the host): a row's two figures are a bandwidth and
 * an attend rate measured back to back, over the same time, so both see the same
 * machine; of PASSES such pairs the row keeps the one of median ratio. (The best of
 * each, taken apart, paired the bandwidth of a fast spell with an attend rate
 * measured outside it.)
 */
static int measure_row(const struct attend_opts *o, struct kvp_client *c, const uint64_t *handles,
		       unsigned nhandles, struct row *r)
{
	struct pair pairs[PASSES];
	int ret = 0;

	for (unsigned p = 0; p < PASSES && !ret; p++) {
		pairs[p].bw = measure_bw(o->bw_buf, o->cores);
		ret = measure(c, handles, nhandles, r->seqs, r->context, r->gqa, dtype_code(r->dtype),
			      &pairs[p].kv);
	}
	if (ret)
		return ret;
	qsort(pairs, PASSES, sizeof(pairs[0]), by_ratio);
	r->bw_gbps = pairs[PASSES / 2].bw;
	r->kv_gbps = pairs[PASSES / 2].kv;
	return 0;
}

static int run_dtype(const struct attend_opts *o, const char *dtype, struct row *rows,
		     unsigned *nrows)
{
	const unsigned *ctxs = o->context ? &o->context : contexts;
	const unsigned *counts = o->seqs ? &o->seqs : seq_counts;
	const unsigned *gs = o->gqa ? &o->gqa : gqas;
	unsigned ncontexts = o->context ? 1 : o->quick ? 2 : 5;
	unsigned nseqs = o->seqs ? 1 : o->quick ? 2 : 3, ngqas = o->gqa ? 1 : 2;
	unsigned max_context = ctxs[ncontexts - 1];
	/* a filtered row reads from the same working set as in the whole table */
	unsigned max_seqs = o->quick ? 8 : 64;
	size_t token_bytes = 2 * HEAD_DIM * dtype_size(dtype_code(dtype));
	char blocks[32], dt[16];
	const char *kv[] = { blocks, "block_size=16", "groups=full", "kv_heads=1", "head_dim=128",
			     dt, "layers_per_group=1", NULL };
	struct kvp_connect_opts copts = { .pool = "bench", .arena_bytes = 64u << 20,
					  .spin_us = SPIN_US };
	struct kvp_pool_params p;
	struct bench_daemon d;
	struct kvp_client *c, *admin;
	uint64_t handles[64];
	int ret;

	snprintf(blocks, sizeof(blocks), "blocks=%u", max_seqs * max_context / BLOCK_SIZE + 64);
	snprintf(dt, sizeof(dt), "dtype=%s", dtype);
	ret = bench_daemon_start(&d, o->daemon, SPIN_US, NULL, -1);
	if (ret)
		return ret;
	struct kvp_connect_opts aopts = { .socket_path = d.socket, .admin = true };

	ret = kvp_connect(&aopts, &admin);
	if (!ret) {
		kvp_pool_params_init(&p, "bench");
		for (unsigned i = 0; kv[i] && !ret; i++) {
			char key[32];
			const char *eq = strchr(kv[i], '=');

			snprintf(key, sizeof(key), "%.*s", (int)(eq - kv[i]), kv[i]);
			ret = kvp_pool_params_set(&p, key, eq + 1);
		}
		ret = ret ?: kvp_pool_create(admin, &p);
		kvp_close(admin);
	}
	copts.socket_path = d.socket;
	ret = ret ?: kvp_connect(&copts, &c);
	if (ret)
		goto out;
	ret = fill(c, handles, max_seqs, max_context, token_bytes);
	for (unsigned ci = 0; ci < ncontexts && !ret; ci++)
		for (unsigned si = 0; si < nseqs && !ret; si++)
			for (unsigned gi = 0; gi < ngqas && !ret; gi++) {
				struct row *r = &rows[(*nrows)++];

				*r = (struct row){ dtype, gs[gi], ctxs[ci], counts[si], 0, 0,
						   (double)max_seqs * ctxs[ci] * token_bytes / (1 << 20) };
				ret = measure_row(o, c, handles, max_seqs, r);
			}
	kvp_close(c);
out:
	bench_daemon_stop(&d);
	return ret;
}

/* One row as one line of JSON: the fields of the issue, then head_dim, working set, cores. */
static int print_json_row(const struct row *r, long cores)
{
	json_object *o = json_object_new_object();

	if (!o)
		return -ENOMEM;
	json_object_object_add(o, "context_tokens", json_object_new_int64(r->context));
	json_object_object_add(o, "seqs", json_object_new_int64(r->seqs));
	json_object_object_add(o, "dtype", json_object_new_string(r->dtype));
	json_object_object_add(o, "gqa", json_object_new_int64(r->gqa));
	json_object_object_add(o, "head_dim", json_object_new_int64(HEAD_DIM));
	json_object_object_add(o, "kv_read_gbps", bench_json_fixed(r->kv_gbps, 2));
	json_object_object_add(o, "bw_gbps", bench_json_fixed(r->bw_gbps, 2));
	json_object_object_add(o, "ratio", bench_json_fixed(r->kv_gbps / r->bw_gbps, 3));
	json_object_object_add(o, "working_set_mib", bench_json_fixed(r->working_set_mib, 0));
	json_object_object_add(o, "cores", json_object_new_int64(cores));
	return bench_json_line(o);
}

int bench_pick(const char *opt, const char *arg, const unsigned *allowed, unsigned n,
	       const char *note, unsigned *out)
{
	char *end;
	unsigned long v = strtoul(arg, &end, 10);

	for (unsigned i = 0; *arg && !*end && i < n; i++) {
		if (v == allowed[i]) {
			*out = allowed[i];
			return 0;
		}
	}
	fprintf(stderr, "kvbench attend: %s: one of", opt);
	for (unsigned i = 0; i < n; i++)
		fprintf(stderr, " %u", allowed[i]);
	fprintf(stderr, "%s, not '%s'\n", note, arg);
	return -EINVAL;
}

int bench_attend(int argc, char **argv)
{
	static const char *const dtypes[] = { "f16", "bf16", "f32" };
	struct attend_opts o = { 0 };
	struct row rows[128];
	unsigned nrows = 0;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t *bw_buf;
	int ret = 0;

	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--backend")) {
			if (!strcmp(argv[i + 1], "cuda"))
				return bench_attend_cuda(argc, argv);
			if (strcmp(argv[i + 1], "host")) {
				fprintf(stderr, "kvbench attend: --backend: host or cuda, not '%s'\n",
					argv[i + 1]);
				return 2;
			}
		}
	bench_default_daemon(o.daemon, sizeof(o.daemon));
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
			i++; /* host */
		} else if (!strcmp(argv[i], "--json")) {
			o.json = true;
		} else if (!strcmp(argv[i], "--quick")) {
			o.quick = true;
		} else if (!strcmp(argv[i], "--daemon") && i + 1 < argc) {
			snprintf(o.daemon, sizeof(o.daemon), "%s", argv[++i]);
		} else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
			o.dtype = argv[++i];
			if (strcmp(o.dtype, "f16") && strcmp(o.dtype, "bf16") && strcmp(o.dtype, "f32")) {
				fprintf(stderr, "kvbench attend: --dtype: f16, bf16 or f32, not '%s'\n", o.dtype);
				return 2;
			}
		} else if (!strcmp(argv[i], "--context") && i + 1 < argc) {
			if (bench_pick(argv[i], argv[i + 1], contexts, 5, "", &o.context))
				return 2;
			i++;
		} else if (!strcmp(argv[i], "--seqs") && i + 1 < argc) {
			if (bench_pick(argv[i], argv[i + 1], seq_counts, 3, "", &o.seqs))
				return 2;
			i++;
		} else if (!strcmp(argv[i], "--gqa") && i + 1 < argc) {
			if (bench_pick(argv[i], argv[i + 1], gqas, 2, "", &o.gqa))
				return 2;
			i++;
		} else {
			fprintf(stderr, "kvbench attend: bad argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bw_buf = malloc(BW_BYTES);
	if (!bw_buf) {
		fprintf(stderr, "kvbench attend: %s\n", strerror(ENOMEM));
		return 1;
	}
	memset(bw_buf, 1, BW_BYTES);
	o.bw_buf = bw_buf;
	o.cores = cores > 0 ? (unsigned)cores : 1;
	for (unsigned t = 0; t < 3 && !ret; t++)
		if (o.dtype ? !strcmp(o.dtype, dtypes[t]) : !o.quick || t == 0)
			ret = run_dtype(&o, dtypes[t], rows, &nrows);
	free(bw_buf);
	if (ret) {
		fprintf(stderr, "kvbench attend: %s\n", strerror(-ret));
		return 1;
	}
	if (!o.json) {
		bench_print_machine();
		printf("# kvbench attend: decode (1 query per sequence), head_dim %d, 1 kv head, block_size %d,\n"
		       "# q and out in the pool's dtype,\n"
		       "# through kvpoold with its default worker threads, --spin-us %d, the client spinning\n"
		       "# %d us for each step; bw: read bandwidth of %ld threads summing 1 GiB\n"
		       "# each row: of %d pairs (bandwidth, then attend, each >= 0.1 s), the one of median ratio\n"
		       "# each step attends the next sequences of all those filled, "
		       "round-robin: working set = their contexts\n", HEAD_DIM, BLOCK_SIZE, SPIN_US, SPIN_US,
		       cores, PASSES);
		printf("%-5s %4s %8s %5s %12s %9s %6s %10s\n", "dtype", "gqa", "context", "seqs",
		       "kv_read_GB/s", "bw_GB/s", "ratio", "set_MiB");
	}
	for (unsigned i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];

		if (o.json) {
			ret = print_json_row(r, cores);
			if (ret) {
				fprintf(stderr, "kvbench attend: %s\n", strerror(-ret));
				return 1;
			}
		} else
			printf("%-5s %4u %8u %5u %12.2f %9.2f %6.3f %10.0f\n", r->dtype, r->gqa, r->context,
			       r->seqs, r->kv_gbps, r->bw_gbps, r->kv_gbps / r->bw_gbps, r->working_set_mib);
	}
	return 0;
}
