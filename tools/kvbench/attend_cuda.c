/* SPDX-License-Identifier: MIT */
/*
 * kvbench attend --backend cuda: decode ATTEND on a cuda pool through a
 * kvpoold it starts, as GB/s of KV the kernels read, next to the device's copy
 * bandwidth measured in the same run (bytes read + written of a
 * device-to-device copy), and the round trip through the daemon.
 *
 * The pool's KV is filled through a mapping (kvp_map_pool, the driver's
 * copies), never through the arena; sequences are then allocated over it and
 * committed on the mapping client's word. The kernels' time is what the
 * daemon measures with CUDA events around them (the ATTEND completion's aux),
 * so kv_read_gbps is KV bytes read / kernel time; rtt_us is the client's
 * whole step, staging of q and out included. Each step reads the next set of
 * sequences round-robin, at least SET_BYTES of KV a round, so that the KV
 * comes from HBM, not the L2.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "common/dtype_store.h"
#include "cuda.h"
#include "kvbench.h"

#define HEAD_DIM 128
#define KV_HEADS 8
#define BLOCK_SIZE 16
#define SPIN_US 200
#define MEASURE_NS 200000000ull
#define MIN_STEPS 5
#define SET_BYTES (512ull << 20)
#define MAX_SETS 16
#define COPY_BYTES (1ull << 30)
/* The device memory left beside the pool: the copy's buffers, the daemon's lanes, slack. */
#define MARGIN_BYTES (6ull << 30)
#define FILL_CHUNK (64u << 20)
#define ARENA_BYTES (64u << 20)
#define CUDA_NOTE " with --backend cuda"

static const unsigned contexts[] = { 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072 };
static const unsigned seq_counts[] = { 1, 8, 64, 256 };
static const unsigned gqas[] = { 1, 4, 8 };
static const unsigned quick_contexts[] = { 8192, 32768, 131072 };
static const unsigned quick_seqs[] = { 8, 64 };
static const unsigned quick_gqas[] = { 1, 8 };

struct cuda_opts {
	char daemon[PATH_MAX];
	bool json, quick;
	unsigned context, seqs, gqa; /* 0: every value */
	const char *dtype;
};

struct cuda_row {
	const char *dtype;
	unsigned gqa, context, seqs, sets, requests;
	double kv_gbps, copy_gbps, rtt_us, kernel_us;
	bool fits;
};

static size_t token_bytes(const char *dtype)
{
	return 2ull * KV_HEADS * HEAD_DIM * dtype_size(dtype_code(dtype));
}

static unsigned sets_of(const struct cuda_row *r)
{
	uint64_t step = (uint64_t)r->seqs * r->context * token_bytes(r->dtype);
	uint64_t sets = (SET_BYTES + step - 1) / step;

	return sets > MAX_SETS ? MAX_SETS : (unsigned)sets;
}

static uint64_t blocks_of(const struct cuda_row *r)
{
	return (uint64_t)r->sets * r->seqs * ((r->context + BLOCK_SIZE - 1) / BLOCK_SIZE);
}

/* Random small finite values in every 16-bit dtype through the mapping, K and V of layer 0. */
static int fill(const struct bench_cu *cu, const struct kvp_pool_map *m, uint64_t blocks,
		char *why, size_t why_len)
{
	uint8_t *buf = malloc(FILL_CHUNK);
	uint64_t seed = 88172645463325252ull, bytes = blocks * m->layers[0].block_stride;
	int res = 0;

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < FILL_CHUNK; i++) {
		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		buf[i] = (i & 1) ? (uint8_t)(0x3c | (seed & 0x80)) : (uint8_t)seed;
	}
	for (int kv = 0; kv < 2 && !res; kv++) {
		bench_cuptr base = (bench_cuptr)(uintptr_t)(kv ? m->layers[0].v : m->layers[0].k);

		for (uint64_t at = 0; at < bytes && !res; at += FILL_CHUNK)
			res = cu->htod(base + at, buf, bytes - at < FILL_CHUNK ? bytes - at : FILL_CHUNK);
	}
	free(buf);
	if (res)
		snprintf(why, why_len, "filling the pool through its mapping: %s", bench_cu_text(cu, res));
	return res ? -EIO : 0;
}

/* @n sequences of @context tokens of their own, allocated and committed. */
static int open_seqs(struct kvp_client *c, uint64_t *h, unsigned n, unsigned context, uint32_t base)
{
	uint32_t *tokens = malloc(context * sizeof(*tokens));
	int ret = tokens ? 0 : -ENOMEM;

	for (unsigned s = 0; s < n && !ret; s++) {
		for (unsigned t = 0; t < context; t++)
			tokens[t] = base + s * context + t;
		ret = kvp_seq_open(c, tokens, context, NULL, 0, -1, &h[s]) ?:
		      kvp_alloc(c, h[s], context, 0, false, NULL, NULL, 0) ?:
		      kvp_commit(c, h[s], context);
	}
	free(tokens);
	return ret;
}

/*
 * One decode step of @n sequences: as few ATTENDs as KVP_ATTEND_MAX_KEYS allows, one
 * after another; *ns the step's round trip, *kernel_ns the kernels' time summed.
 */
static int step(struct kvp_client *c, const uint64_t *h, unsigned n, const struct cuda_row *r,
		uint8_t *q, uint8_t *out, uint64_t *ns, uint64_t *kernel_ns)
{
	size_t q_bytes = (size_t)r->gqa * KV_HEADS * HEAD_DIM * dtype_size(dtype_code(r->dtype));
	unsigned per = (n + r->requests - 1) / r->requests;
	uint64_t start = bench_now_ns();
	struct kvp_attend_req req[256];

	*kernel_ns = 0;
	for (unsigned s0 = 0; s0 < n; s0 += per) {
		unsigned k = n - s0 < per ? n - s0 : per;
		struct kvp_sqe *sqe = kvp_get_sqe(c);
		struct kvp_cqe *cqe;
		int64_t used;
		int res;

		for (unsigned s = 0; s < k; s++)
			req[s] = (struct kvp_attend_req){ h[s0 + s], r->context - 1, 1, q + s * q_bytes,
							  out + s * q_bytes };
		if (!sqe)
			return -EBUSY;
		used = kvp_prep_attend(c, sqe, 0, 0, 0, r->gqa * KV_HEADS, 0.088f, 0, false, req, k);
		if (used < 0)
			return (int)used;
		sqe->user_data = s0;
		if (kvp_submit(c) != 1 || kvp_wait_cqe(c, &cqe))
			return -EIO;
		res = cqe->res;
		*kernel_ns += cqe->aux;
		kvp_cqe_seen(c, cqe);
		if (res)
			return res;
	}
	*ns = bench_now_ns() - start;
	return 0;
}

/* Steps round-robin over the row's sets for MEASURE_NS and MIN_STEPS, medians kept. */
static int measure(struct kvp_client *c, const uint64_t *h, struct cuda_row *r)
{
	size_t n = (size_t)r->seqs * r->gqa * KV_HEADS * HEAD_DIM;
	uint8_t *q = malloc(n * 4), *out = malloc(n * 4);
	uint64_t *rtt = NULL, *kern = NULL, start, ns, kns;
	unsigned steps = 0, cap = 64;
	int ret = q && out ? 0 : -ENOMEM;

	rtt = malloc(cap * sizeof(*rtt));
	kern = malloc(cap * sizeof(*kern));
	if (!rtt || !kern)
		ret = -ENOMEM;
	for (size_t i = 0; !ret && i < n; i++)
		dtype_store(q, i, (float)(i % 7) * 0.01f, dtype_code(r->dtype));
	for (unsigned w = 0; !ret && w < 2; w++) /* module load, lanes' buffers */
		ret = step(c, h + (size_t)(w % r->sets) * r->seqs, r->seqs, r, q, out, &ns, &kns);
	start = bench_now_ns();
	while (!ret && (bench_now_ns() - start < MEASURE_NS || steps < MIN_STEPS)) {
		if (steps == cap) {
			uint64_t *a = realloc(rtt, 2 * cap * sizeof(*a)), *b;

			rtt = a ? a : rtt;
			b = realloc(kern, 2 * cap * sizeof(*b));
			kern = b ? b : kern;
			if (!a || !b) {
				ret = -ENOMEM;
				break;
			}
			cap *= 2;
		}
		ret = step(c, h + (size_t)(steps % r->sets) * r->seqs, r->seqs, r, q, out, &rtt[steps],
			   &kern[steps]);
		steps += !ret;
	}
	if (!ret) {
		struct bench_pct rtt_pct, kern_pct;

		bench_percentiles(rtt, steps, &rtt_pct);
		bench_percentiles(kern, steps, &kern_pct);
		r->rtt_us = (double)rtt_pct.median / 1e3;
		r->kernel_us = (double)kern_pct.median / 1e3;
		if (!kern_pct.median)
			ret = -EPROTO; /* a daemon that does not report its kernels' time */
		else
			r->kv_gbps = (double)r->seqs * r->context * token_bytes(r->dtype) /
				     (double)kern_pct.median;
	}
	free(rtt);
	free(kern);
	free(q);
	free(out);
	return ret;
}

static int run_row(const struct bench_cu *cu, struct kvp_client *c, struct cuda_row *r,
		   char *why, size_t why_len)
{
	unsigned n = r->sets * r->seqs;
	uint64_t *h = calloc(n, sizeof(*h));
	int ret = h ? 0 : -ENOMEM, res = 0;

	r->requests = (unsigned)(((uint64_t)r->seqs * r->context + KVP_ATTEND_MAX_KEYS - 1) /
				 KVP_ATTEND_MAX_KEYS);
	ret = ret ?: open_seqs(c, h, n, r->context, 1u << 31);
	ret = ret ?: measure(c, h, r);
	for (unsigned s = 0; s < n && h[s]; s++)
		kvp_seq_close(c, h[s]);
	free(h);
	if (ret) {
		snprintf(why, why_len, "%s, context %u, %u sequences, GQA %u: %s", r->dtype, r->context,
			 r->seqs, r->gqa, strerror(-ret));
		return ret;
	}
	r->copy_gbps = bench_cu_copy_gbps(cu, COPY_BYTES, 5, &res);
	if (res) {
		snprintf(why, why_len, "the copy: %s", bench_cu_text(cu, res));
		return -EIO;
	}
	return 0;
}

static bool wanted(unsigned filter, unsigned v)
{
	return !filter || filter == v;
}

/* The rows of @dtype, in table order; how many. */
static unsigned table(const struct cuda_opts *o, const char *dtype, struct cuda_row *rows)
{
	const unsigned *ctxs = o->quick ? quick_contexts : contexts;
	const unsigned *counts = o->quick ? quick_seqs : seq_counts, *gs = o->quick ? quick_gqas : gqas;
	unsigned nc = o->quick ? 3 : 8, ns = o->quick ? 2 : 4, ng = o->quick ? 2 : 3, n = 0;

	for (unsigned ci = 0; ci < nc; ci++)
		for (unsigned si = 0; si < ns; si++)
			for (unsigned gi = 0; gi < ng; gi++) {
				struct cuda_row *r = &rows[n];

				if (!wanted(o->context, ctxs[ci]) || !wanted(o->seqs, counts[si]) ||
				    !wanted(o->gqa, gs[gi]))
					continue;
				*r = (struct cuda_row){ .dtype = dtype, .gqa = gs[gi], .context = ctxs[ci],
							.seqs = counts[si] };
				r->sets = sets_of(r);
				n++;
			}
	return n;
}

static int create_pool(const char *socket, const char *dtype, uint64_t blocks, char *why,
		       size_t why_len)
{
	struct kvp_connect_opts ao = { .socket_path = socket, .admin = true };
	struct kvp_pool_params_v2 p;
	struct kvp_client *admin;
	char nblocks[32], kv_heads[16], dt[16];
	const char *kv[][2] = { { "blocks", nblocks }, { "block_size", "16" }, { "groups", "full" },
				{ "kv_heads", kv_heads }, { "head_dim", "128" }, { "dtype", dt },
				{ "layers_per_group", "1" }, { "backend", "cuda" },
				{ "namespace", "bench" } };
	int ret;

	snprintf(nblocks, sizeof(nblocks), "%llu", (unsigned long long)blocks);
	snprintf(kv_heads, sizeof(kv_heads), "%u", KV_HEADS);
	snprintf(dt, sizeof(dt), "%s", dtype);
	ret = kvp_connect(&ao, &admin);
	if (ret) {
		snprintf(why, why_len, "admin connection: %s", strerror(-ret));
		return ret;
	}
	kvp_pool_params_v2_init(&p, "bench");
	for (unsigned i = 0; i < sizeof(kv) / sizeof(kv[0]) && !ret; i++)
		ret = kvp_pool_params_v2_set(&p, kv[i][0], kv[i][1]);
	ret = ret ?: kvp_pool_create_v2(admin, &p, 0, why, why_len);
	kvp_close(admin);
	if (ret && !why[0])
		snprintf(why, why_len, "creating the pool: %s", strerror(-ret));
	return ret;
}

/* Every row of @dtype that fits on the device, through one daemon and one pool. */
static int run_dtype(const struct cuda_opts *o, const struct bench_cu *cu, const char *dtype,
		     struct cuda_row *rows, unsigned *nrows, char *why, size_t why_len)
{
	struct cuda_row *mine = rows + *nrows;
	unsigned n = table(o, dtype, mine);
	size_t free_bytes = 0, total = 0;
	uint64_t block_bytes = (uint64_t)BLOCK_SIZE * token_bytes(dtype), want = 0, room;
	struct kvp_connect_opts copts = { .pool = "bench", .namespace_ = "bench", .pool_map = true,
					  .arena_bytes = ARENA_BYTES, .spin_us = SPIN_US };
	struct bench_daemon d;
	struct kvp_pool_map m;
	struct kvp_client *c;
	int ret, res;

	res = cu->mem_info(&free_bytes, &total);
	if (res) {
		snprintf(why, why_len, "cuMemGetInfo: %s", bench_cu_text(cu, res));
		return -EIO;
	}
	room = free_bytes > MARGIN_BYTES ? (free_bytes - MARGIN_BYTES) / block_bytes : 0;
	for (unsigned i = 0; i < n; i++) {
		mine[i].fits = blocks_of(&mine[i]) + 1 <= room;
		if (mine[i].fits && blocks_of(&mine[i]) + 1 > want)
			want = blocks_of(&mine[i]) + 1;
	}
	*nrows += n;
	if (!want)
		return 0;
	ret = bench_daemon_start(&d, o->daemon, SPIN_US, NULL, -1);
	if (ret) {
		snprintf(why, why_len, "starting %.300s: %s", o->daemon, strerror(-ret));
		return ret;
	}
	ret = create_pool(d.socket, dtype, want, why, why_len);
	copts.socket_path = d.socket;
	if (!ret) {
		ret = kvp_connect(&copts, &c);
		if (ret)
			snprintf(why, why_len, "connecting: %s", strerror(-ret));
	}
	if (!ret) {
		ret = kvp_map_pool(c, &m);
		if (ret)
			snprintf(why, why_len, "mapping the pool: %s: %s", strerror(-ret), m.why);
		ret = ret ?: fill(cu, &m, want, why, why_len);
		for (unsigned i = 0; i < n && !ret; i++)
			if (mine[i].fits)
				ret = run_row(cu, c, &mine[i], why, why_len);
		if (m.layers)
			kvp_unmap_pool(&m);
		kvp_close(c);
	}
	bench_daemon_stop(&d);
	return ret;
}

static int print_json_row(const struct bench_cu *cu, const struct cuda_row *r)
{
	json_object *o = bench_json_row();

	if (!o)
		return -ENOMEM;
	json_object_object_add(o, "backend", json_object_new_string("cuda"));
	json_object_object_add(o, "device", json_object_new_string(cu->device));
	json_object_object_add(o, "context_tokens", json_object_new_int64(r->context));
	json_object_object_add(o, "seqs", json_object_new_int64(r->seqs));
	json_object_object_add(o, "dtype", json_object_new_string(r->dtype));
	json_object_object_add(o, "gqa", json_object_new_int64(r->gqa));
	json_object_object_add(o, "head_dim", json_object_new_int64(HEAD_DIM));
	json_object_object_add(o, "kv_heads", json_object_new_int64(KV_HEADS));
	json_object_object_add(o, "kv_read_gbps", bench_json_fixed(r->kv_gbps, 2));
	json_object_object_add(o, "copy_gbps", bench_json_fixed(r->copy_gbps, 2));
	json_object_object_add(o, "ratio", bench_json_fixed(r->kv_gbps / r->copy_gbps, 3));
	json_object_object_add(o, "rtt_us", bench_json_fixed(r->rtt_us, 1));
	json_object_object_add(o, "kernel_us", bench_json_fixed(r->kernel_us, 1));
	json_object_object_add(o, "requests", json_object_new_int64(r->requests));
	return bench_json_line(o);
}

int bench_attend_cuda(int argc, char **argv)
{
	static struct cuda_row rows[2 * 8 * 4 * 3];
	static const char *const dtypes[] = { "f16", "bf16" };
	struct cuda_opts o = { .json = false };
	char why[512] = "";
	struct bench_cu cu;
	unsigned nrows = 0;
	int ret = 0;

	bench_default_daemon(o.daemon, sizeof(o.daemon));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--backend") && v && !strcmp(v, "cuda"))
			i++;
		else if (!strcmp(a, "--json"))
			o.json = true;
		else if (!strcmp(a, "--quick"))
			o.quick = true;
		else if (!strcmp(a, "--daemon") && v)
			snprintf(o.daemon, sizeof(o.daemon), "%s", argv[++i]);
		else if (!strcmp(a, "--dtype") && v && (!strcmp(v, "f16") || !strcmp(v, "bf16")))
			o.dtype = argv[++i];
		else if (!strcmp(a, "--dtype") && v) {
			fprintf(stderr, "kvbench attend: --dtype: f16 or bf16 with --backend cuda, not '%s'\n", v);
			return 2;
		} else if (!strcmp(a, "--context") && v) {
			if (bench_pick(a, argv[++i], contexts, 8, CUDA_NOTE, &o.context))
				return 2;
		} else if (!strcmp(a, "--seqs") && v) {
			if (bench_pick(a, argv[++i], seq_counts, 4, CUDA_NOTE, &o.seqs))
				return 2;
		} else if (!strcmp(a, "--gqa") && v) {
			if (bench_pick(a, argv[++i], gqas, 3, CUDA_NOTE, &o.gqa))
				return 2;
		} else {
			fprintf(stderr, "kvbench attend: bad argument '%s'\n", a);
			return 2;
		}
	}
	if (bench_cu_open(&cu, why, sizeof(why))) {
		fprintf(stderr, "kvbench attend: --backend cuda: %s\n", why);
		return 1;
	}
	for (unsigned t = 0; t < 2 && !ret; t++)
		if (o.dtype ? !strcmp(o.dtype, dtypes[t]) : !o.quick || t == 1)
			ret = run_dtype(&o, &cu, dtypes[t], rows, &nrows, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "kvbench attend: --backend cuda: %s\n", why[0] ? why : strerror(-ret));
		return 1;
	}
	if (!o.json) {
		bench_print_machine();
		printf("# kvbench attend --backend cuda: %s; decode (1 query per sequence), head_dim %d,\n"
		       "# %d kv heads, q heads = %d x GQA, block_size %d, q and out in the pool's dtype;\n"
		       "# KV filled through a mapping; kv_read = KV bytes / the kernels' time (CUDA events,\n"
		       "# the daemon's), copy = a device-to-device copy's bytes read + written / its time,\n"
		       "# rtt = the client's step through kvpoold; medians of >= %d steps and >= %.1f s;\n"
		       "# steps past %u keys are several ATTENDs, one after another (req)\n",
		       cu.device, HEAD_DIM, KV_HEADS, KV_HEADS, BLOCK_SIZE, MIN_STEPS,
		       MEASURE_NS / 1e9, KVP_ATTEND_MAX_KEYS);
		printf("%-5s %4s %8s %5s %13s %10s %6s %9s %10s %4s\n", "dtype", "gqa", "context", "seqs",
		       "kv_read_GB/s", "copy_GB/s", "ratio", "rtt_us", "kernel_us", "req");
	}
	for (unsigned i = 0; i < nrows; i++) {
		const struct cuda_row *r = &rows[i];

		if (!r->fits) {
			if (!o.json)
				printf("%-5s %4u %8u %5u   (does not fit in the device's free memory)\n",
				       r->dtype, r->gqa, r->context, r->seqs);
			continue;
		}
		if (o.json) {
			if (print_json_row(&cu, r)) {
				fprintf(stderr, "kvbench attend: %s\n", strerror(ENOMEM));
				return 1;
			}
		} else
			printf("%-5s %4u %8u %5u %13.1f %10.1f %6.3f %9.1f %10.1f %4u\n", r->dtype, r->gqa,
			       r->context, r->seqs, r->kv_gbps, r->copy_gbps, r->kv_gbps / r->copy_gbps,
			       r->rtt_us, r->kernel_us, r->requests);
	}
	return 0;
}
