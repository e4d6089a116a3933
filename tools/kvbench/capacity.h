/* SPDX-License-Identifier: MIT */
/* kvbench capacity: a model's layer groups, and the counts one context gets in a budget. */
#ifndef KVPOOL_BENCH_CAPACITY_H
#define KVPOOL_BENCH_CAPACITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvcore.h"

/* The longest --layers pattern and the most model layers it may name. */
#define CAP_PATTERN_MAX 256
#define CAP_MAX_LAYERS 4096u

struct cap_model {
	const char *name;
	char layers[CAP_PATTERN_MAX]; /* the pattern, as given */
	uint32_t kv_heads, head_dim;
	uint32_t nlayers;
	/* The pool's groups as vLLM forms them; every one has layers_per_group slots. */
	uint32_t ngroups, layers_per_group;
	struct kvc_group_spec groups[KVC_MAX_GROUPS];
};

struct cap_opts {
	uint64_t budget;     /* bytes */
	uint32_t block_size; /* tokens */
	uint32_t dtype_bytes;
	const char *dtype;
	uint32_t max_step;    /* tokens per prefill ALLOC */
	uint32_t rswa_prefix; /* tokens; at most the context */
	bool json;
};

/* One allocator run: sequences of one context added to one pool until -ENOSPC. */
struct cap_fill {
	uint64_t bytes_per_block;
	uint32_t pool_blocks; /* the null block included */
	uint64_t seqs;
	uint32_t held; /* blocks a sequence holds once it reached the context */
	uint32_t peak; /* the most it held on the way (an ALLOC before its COMMIT) */
	bool unbounded; /* held is 0: nothing limits the count */
};

struct cap_row {
	uint32_t context;
	struct cap_fill full;   /* (a) every layer full attention, one group */
	struct cap_fill kvpool; /* (b) the model's groups */
	uint64_t bound_blocks;  /* (c): per sequence, sum of cdiv(mask tokens, block size) */
	uint64_t seqs_bound;    /* UINT64_MAX when bound_blocks is 0 */
};

/*
 * Parses @pattern ("full*10,swa:1024*52": KIND[:PARAM][*COUNT], kinds as in
 * kvctl) into @m's layers and groups. -EINVAL with a reason in @why.
 */
int cap_parse_layers(const char *pattern, struct cap_model *m, char *why, size_t why_len);

/* "full", "swa", ...: the words of kvctl and --layers. */
const char *cap_kind_name(enum kvc_kind kind);

/* Tokens group @g's mask needs once @context tokens are computed. */
uint32_t cap_mask_tokens(const struct kvc_group_spec *g, uint32_t context,
			 const struct cap_opts *o);

/* Runs (a) and (b) for @context and works out (c). -E2BIG: too many tokens to simulate. */
int cap_measure(const struct cap_model *m, const struct cap_opts *o, uint32_t context,
		struct cap_row *r);

/* Tokens that all live sequences of one run may hold at most (their arrays' memory). */
#define CAP_MAX_SIM_TOKENS (1ull << 27)

#endif
