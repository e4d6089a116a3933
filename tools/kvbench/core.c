/* SPDX-License-Identifier: MIT */
/*
 * kvbench core: the allocator alone, on a decode-heavy workload. Calls are
 * timed in batches of one per live sequence, so the clock's own cost is
 * spread over 64 calls.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvbench.h"
#include "kvcore.h"

#define SEQS 64
#define PROMPT 512
#define SHARED 256
#define DECODE 256
#define BLOCK_SIZE 16
#define SWA_WINDOW 128

enum phase { LOOKUP, PREFILL, DECODE_ALLOC, COMMIT, FREE, NPHASES };
static const char *const phase_names[NPHASES] = {
	"lookup (512-token prompt)", "prefill alloc (with hit)", "decode-step alloc",
	"decode-step commit", "free",
};

struct phase_time {
	uint64_t ns, calls;
};

static int run_round(struct kvc_pool *pool, unsigned round, struct phase_time *t)
{
	struct kvc_seq *seqs[SEQS];
	uint32_t prompt[PROMPT];
	uint64_t start;
	int ret = 0;

	for (unsigned s = 0; s < SEQS; s++) {
		for (unsigned i = 0; i < PROMPT; i++)
			prompt[i] = i < SHARED ? i : (round * SEQS + s) * PROMPT + i;
		ret = kvc_seq_create(pool, prompt, PROMPT, NULL, 0, -1, &seqs[s]);
		if (ret)
			return ret;
	}

	uint32_t hit_tokens[SEQS];
	struct kvc_hit hit;

	start = bench_now_ns();
	for (unsigned s = 0; s < SEQS; s++) {
		ret |= kvc_lookup(seqs[s], &hit);
		hit_tokens[s] = hit.tokens;
	}
	t[LOOKUP].ns += bench_now_ns() - start;
	t[LOOKUP].calls += SEQS;

	struct kvc_alloc_res res;

	start = bench_now_ns();
	for (unsigned s = 0; s < SEQS; s++) {
		struct kvc_alloc_req req = { .new_tokens = PROMPT - hit_tokens[s], .use_cache = true };

		ret |= kvc_alloc(seqs[s], &req, &res);
	}
	t[PREFILL].ns += bench_now_ns() - start;
	t[PREFILL].calls += SEQS;
	for (unsigned s = 0; s < SEQS; s++)
		ret |= kvc_seq_computed(seqs[s], PROMPT);

	for (uint32_t step = 0; step < DECODE && !ret; step++) {
		uint32_t token = 1000000 + step;
		struct kvc_alloc_req req = { .new_tokens = 1 };

		for (unsigned s = 0; s < SEQS; s++)
			ret |= kvc_seq_append(seqs[s], &token, 1);
		start = bench_now_ns();
		for (unsigned s = 0; s < SEQS; s++)
			ret |= kvc_alloc(seqs[s], &req, &res);
		t[DECODE_ALLOC].ns += bench_now_ns() - start;
		start = bench_now_ns();
		for (unsigned s = 0; s < SEQS; s++)
			ret |= kvc_seq_computed(seqs[s], PROMPT + step + 1);
		t[COMMIT].ns += bench_now_ns() - start;
		t[DECODE_ALLOC].calls += SEQS;
		t[COMMIT].calls += SEQS;
	}

	start = bench_now_ns();
	for (unsigned s = 0; s < SEQS; s++)
		kvc_seq_free(seqs[s]);
	t[FREE].ns += bench_now_ns() - start;
	t[FREE].calls += SEQS;
	for (unsigned s = 0; s < SEQS; s++)
		kvc_seq_destroy(seqs[s]);
	return ret ? -EIO : 0;
}

static int bench_pool(const char *name, const struct kvc_group_spec *groups, uint32_t ngroups,
		      unsigned rounds, bool json)
{
	struct phase_time t[NPHASES] = { 0 };
	struct kvc_pool_config cfg;
	struct kvc_pool *pool;
	int ret;

	kvc_pool_config_init(&cfg, 16384, BLOCK_SIZE);
	cfg.num_groups = ngroups;
	memcpy(cfg.groups, groups, ngroups * sizeof(*groups));
	ret = kvc_pool_create(&cfg, &pool);
	if (ret)
		return ret;
	/* One untimed round first: page faults and first-touch growth are not the steady state. */
	struct phase_time warm[NPHASES] = { 0 };

	ret = run_round(pool, 0, warm);
	for (unsigned r = 1; r <= rounds && !ret; r++)
		ret = run_round(pool, r, t);
	kvc_pool_destroy(pool);
	if (ret)
		return ret;
	for (int p = 0; p < NPHASES; p++) {
		double ns = (double)t[p].ns / (double)t[p].calls;
		json_object *j;

		if (!json) {
			printf("%-12s %-28s %10.1f ns/op  (%llu ops)\n", name, phase_names[p], ns,
			       (unsigned long long)t[p].calls);
			continue;
		}
		j = bench_json_row();
		json_object_object_add(j, "groups", json_object_new_string(name));
		json_object_object_add(j, "phase", json_object_new_string(phase_names[p]));
		json_object_object_add(j, "ns_per_op", bench_json_fixed(ns, 1));
		json_object_object_add(j, "ops", json_object_new_int64((int64_t)t[p].calls));
		bench_json_line(j);
	}
	return 0;
}

int bench_core(int argc, char **argv)
{
	static const struct kvc_group_spec full[] = { { KVC_FULL, 0 } };
	static const struct kvc_group_spec full_swa[] = { { KVC_FULL, 0 }, { KVC_SWA, SWA_WINDOW } };
	unsigned rounds = 20;
	bool json = false;
	int ret;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) > 0) {
			rounds = (unsigned)atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else {
			fprintf(stderr, "kvbench core: bad argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (!json) {
		bench_print_machine();
		printf("# kvbench core: %d sequences, %d-token prompts sharing %d, %d decode steps, "
		       "block_size %d, swa window %d, publish=commit, %u rounds\n",
		       SEQS, PROMPT, SHARED, DECODE, BLOCK_SIZE, SWA_WINDOW, rounds);
	}
	ret = bench_pool("full", full, 1, rounds, json);
	if (!ret)
		ret = bench_pool("full+swa", full_swa, 2, rounds, json);
	if (ret)
		fprintf(stderr, "kvbench core: %s\n", strerror(-ret));
	return ret ? 1 : 0;
}
