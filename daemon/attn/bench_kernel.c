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
 * bytes of the context; the bandwidth line is a plain read (sum) of a 1 GiB
 * buffer on the same thread, best of 5.
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

static double read_bandwidth(void)
{
	size_t n = POOL_BYTES / 8;
	uint64_t *b = big_alloc(POOL_BYTES);
	double best = 0;

	for (size_t i = 0; i < n; i++)
		b[i] = i;
	for (int r = 0; r < 5; r++) {
		uint64_t s[8] = { 0 };
		double t = now();

		for (size_t i = 0; i < n; i += 8)
			for (int k = 0; k < 8; k++)
				s[k] += b[i + k];
		t = now() - t;
		if (s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7] == 42)
			printf("!");
		if (POOL_BYTES / t > best)
			best = POOL_BYTES / t;
	}
	munmap(b, POOL_BYTES);
	return best / 1e9;
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

int main(int argc, char **argv)
{
	static const enum attn_dtype dts[] = { ATTN_F16, ATTN_BF16, ATTN_F32 };
	static const uint32_t ctxs[] = { 1024, 8192, 32768 }, gs[] = { 1, 4 };
	double secs = argc > 1 ? atof(argv[1]) : 0.3;
	uint8_t *pool = big_alloc(POOL_BYTES);
	double bw = read_bandwidth();
	int hot = getenv("BENCH_HOT") != NULL; /* same head and blocks every call: compute bound */

	printf("attn_isa %s; read bandwidth (sum of 1 GiB, one thread): %.1f GB/s\n", attn_isa(), bw);
	printf("%-5s %2s %6s %9s %8s %6s\n", "dtype", "g", "ctx", "us/call", "GB/s", "%bw");
	for (size_t di = 0; di < 3; di++) {
		enum attn_dtype dt = dts[di];
		size_t row = HEAD_DIM * attn_dtype_size(dt), head_bytes = BS * row;
		size_t slot = 2 * KV_HEADS * head_bytes;
		uint32_t nblocks = (uint32_t)(POOL_BYTES / slot), *perm = malloc(sizeof(uint32_t) * nblocks);
		uint8_t q[16 * HEAD_DIM * 4], out[16 * HEAD_DIM * 4];

		fill(pool, dt);
		for (uint32_t i = 0; i < nblocks; i++)
			perm[i] = i;
		for (uint32_t i = nblocks - 1; i > 0 && !getenv("BENCH_SEQ"); i--) {
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
				uint32_t ctx = ctxs[ci], nb = ctx / BS;
				struct attn_params p = {
					.g = gs[gi], .scale = 1.0f / sqrtf(HEAD_DIM), .softcap = 0, .q_dtype = dt,
				};
				struct attn_query qq = { .q = q, .out = out, .lo = { 0 }, .hi = { ctx }, .nranges = 1 };
				double t0 = now(), t;
				unsigned long calls = 0;

				do {
					for (int r = 0; r < 8; r++) {
						struct attn_keys k = {
							.pool = pool, .slot_bytes = slot,
							.k_off = hot ? 0 : (rnd() % KV_HEADS) * head_bytes,
							.v_delta = KV_HEADS * head_bytes, .block_size = BS,
							.head_dim = HEAD_DIM, .dtype = dt,
							.ids = perm + (hot ? 0 : rnd() % (nblocks - nb + 1)),
							.first_block = 0, .nblocks = nb, .ring_tokens = 0,
						};

						attn_one(&k, &qq, &p);
						calls++;
					}
					t = now() - t0;
				} while (t < secs);
				printf("%-5s %2u %6u %9.1f %8.2f %5.0f%%\n", dt_name(dt), gs[gi], ctx, t / (double)calls * 1e6,
				       (double)calls * ctx * 2 * row / t / 1e9, (double)calls * ctx * 2 * row / t / 1e9 / bw * 100);
			}
		}
		free(perm);
	}
	return 0;
}
