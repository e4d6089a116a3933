/* SPDX-License-Identifier: MIT */
/*
 * Decode-attention kernel benchmark (not built by the Makefile). Build and run
 * from the repository root:
 *
 *   gcc -std=gnu11 -O2 -D_GNU_SOURCE daemon/attn/bench_kernel.c daemon/attn/attend.c \
 *       daemon/attn/attend_avx2.c daemon/attn/attend_avx512.c -lm -lpthread -o /tmp/bench_kernel \
 *   && /tmp/bench_kernel [seconds per point, default 0.3]
 *
 * KVPOOL_ATTN_ISA=c|avx2|avx512|avx512bf16 picks a lower kernel level.
 *
 * One thread, one query position per call (decode), head_dim 128, block_size 16,
 * q in the pool dtype. The pool is 1 GiB of block slots laid out like the
 * daemon's (one layer, 8 kv heads: K of every head then V; huge pages advised),
 * filled with random values; each call takes a random kv head and a run of
 * block ids from a random permutation of all blocks, so the KV it reads is
 * scattered over the pool and almost never in cache. GB/s counts the K and V
 * bytes of the context. Next to it, the read bandwidth: a plain sum of a 1 GiB
 * buffer on the same thread. Each row alternates three bandwidth passes with
 * three kernel runs and shows the best of each (the machine's bandwidth
 * drifts: the percentage compares measurements taken together).
 *
 * BENCH_HOT=1 reuses one head and one run of blocks (in cache: the compute rate);
 * BENCH_SEQ=1 uses block ids in order; BENCH_CTX=n runs the context n only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "attend.h"

#define POOL_BYTES (1ul << 30)
#define KV_HEADS 8
#define HEAD_DIM 128
#define BS 16

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void *big_alloc(size_t bytes)
{
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(m, bytes, MADV_HUGEPAGE);
	return m;
}

/* GB/s of one pass summing a buffer of POOL_BYTES. */
static double read_pass(const uint64_t *b)
{
	uint64_t s[8] = { 0 };
	double t = now();

	for (size_t i = 0; i < POOL_BYTES / 8; i += 8)
		for (int k = 0; k < 8; k++)
			s[k] += b[i + k];
	t = now() - t;
	if (s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7] == 42)
		printf("!");
	return POOL_BYTES / t / 1e9;
}

static void fill(uint8_t *pool, enum attn_dtype dt)
{
	size_t n = POOL_BYTES / attn_dtype_size(dt);

	for (size_t i = 0; i < n; i++) {
		float f = (float)((double)(rnd() >> 11) * 0x1p-52 * 2 - 1);

		if (dt == ATTN_F32)
			((float *)pool)[i] = f;
		else if (dt == ATTN_F16)
			((uint16_t *)pool)[i] = attn_f32_to_f16(f);
		else
			((uint16_t *)pool)[i] = attn_f32_to_bf16(f);
	}
}

static const char *dt_name(enum attn_dtype t)
{
	return t == ATTN_F32 ? "f32" : t == ATTN_F16 ? "f16" : "bf16";
}

struct run {
	uint8_t *pool;
	const uint32_t *perm;
	uint32_t nblocks;
	size_t head_bytes, slot;
	enum attn_dtype dt;
	const void *q;
	void *out;
	int hot;
};

/* GB/s of KV read by decode calls over ctx positions for secs. */
static double run_kernel(const struct run *r, uint32_t g, uint32_t ctx, double secs)
{
	uint32_t nb = ctx / BS;
	struct attn_params p = {
		.g = g, .scale = 1.0f / sqrtf(HEAD_DIM), .softcap = 0, .q_dtype = r->dt,
	};
	struct attn_query qq = { .q = r->q, .out = r->out, .lo = { 0 }, .hi = { ctx }, .nranges = 1 };
	double t0 = now(), t;
	unsigned long calls = 0;

	do {
		for (int i = 0; i < 8; i++) {
			struct attn_keys k = {
				.pool = r->pool, .block_stride = r->slot,
				.k_off = r->hot ? 0 : (rnd() % KV_HEADS) * r->head_bytes,
				.v_delta = KV_HEADS * r->head_bytes, .block_size = BS,
				.head_dim = HEAD_DIM, .dtype = r->dt,
				.ids = r->perm + (r->hot ? 0 : rnd() % (r->nblocks - nb + 1)),
				.first_block = 0, .nblocks = nb, .ring_tokens = 0,
			};

			attn_one(&k, &qq, &p);
			calls++;
		}
		t = now() - t0;
	} while (t < secs);
	return (double)calls * ctx * 2 * HEAD_DIM * attn_dtype_size(r->dt) / t / 1e9;
}

int main(int argc, char **argv)
{
	static const enum attn_dtype dts[] = { ATTN_F16, ATTN_BF16, ATTN_F32 };
	static const uint32_t ctxs[] = { 1024, 8192, 32768 }, gs[] = { 1, 4 };
	double secs = argc > 1 ? atof(argv[1]) : 0.3;
	uint8_t *pool = big_alloc(POOL_BYTES);
	uint64_t *buf = big_alloc(POOL_BYTES);
	uint8_t q[16 * HEAD_DIM * 4], out[16 * HEAD_DIM * 4];
	struct run r = { .pool = pool, .q = q, .out = out, .hot = getenv("BENCH_HOT") != NULL };

	for (size_t i = 0; i < POOL_BYTES / 8; i++)
		buf[i] = i;
	printf("attn_isa %s; one thread; head_dim %d, block_size %d, q in the pool dtype%s\n", attn_isa(),
	       HEAD_DIM, BS, r.hot ? "; HOT (cached)" : "");
	printf("%-5s %2s %6s %10s %12s %6s\n", "dtype", "g", "ctx", "KV GB/s", "read GB/s", "%");
	for (size_t di = 0; di < 3; di++) {
		enum attn_dtype dt = dts[di];
		uint32_t *perm;

		r.dt = dt;
		r.head_bytes = BS * HEAD_DIM * attn_dtype_size(dt);
		r.slot = 2 * KV_HEADS * r.head_bytes;
		r.nblocks = (uint32_t)(POOL_BYTES / r.slot);
		perm = malloc(sizeof(uint32_t) * r.nblocks);
		r.perm = perm;
		fill(pool, dt);
		for (uint32_t i = 0; i < r.nblocks; i++)
			perm[i] = i;
		for (uint32_t i = r.nblocks - 1; i > 0 && !getenv("BENCH_SEQ"); i--) {
			uint32_t j = (uint32_t)(rnd() % (i + 1)), x = perm[i];

			perm[i] = perm[j];
			perm[j] = x;
		}
		for (size_t i = 0; i < 16 * HEAD_DIM; i++) {
			float f = (float)((double)(rnd() >> 11) * 0x1p-52 * 2 - 1);

			if (dt == ATTN_F32)
				((float *)q)[i] = f;
			else if (dt == ATTN_F16)
				((uint16_t *)q)[i] = attn_f32_to_f16(f);
			else
				((uint16_t *)q)[i] = attn_f32_to_bf16(f);
		}
		for (size_t gi = 0; gi < 2; gi++) {
			for (size_t ci = 0; ci < 3; ci++) {
				double kv = 0, bw = 0;

				if (getenv("BENCH_CTX") && (uint32_t)atoi(getenv("BENCH_CTX")) != ctxs[ci])
					continue;
				for (int rep = 0; rep < 3; rep++) {
					double x = read_pass(buf), y = run_kernel(&r, gs[gi], ctxs[ci], secs / 3);

					bw = x > bw ? x : bw;
					kv = y > kv ? y : kv;
				}
				printf("%-5s %2u %6u %10.2f %12.2f %5.0f%%\n", dt_name(dt), gs[gi], ctxs[ci], kv, bw,
				       kv / bw * 100);
				fflush(stdout);
			}
		}
		free(perm);
	}
	return 0;
}
