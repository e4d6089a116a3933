/* SPDX-License-Identifier: MIT */
/*
 * kvbench capacity, the measurement: a layer pattern cut into groups as vLLM's
 * hybrid allocator cuts it, and the allocator itself filling a pool with
 * sequences of one context until it is out of blocks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capacity.h"

static const char *const kind_names[KVC_NUM_KINDS] = {
	[KVC_FULL] = "full", [KVC_SWA] = "swa", [KVC_RSWA] = "rswa",
	[KVC_CHUNKED] = "chunked", [KVC_CYCLIC] = "cyclic",
};

const char *cap_kind_name(enum kvc_kind kind)
{
	return kind_names[kind];
}

/* The number at *p, in [min, max]; advances *p past its digits. */
static int parse_count(const char **p, uint32_t min, uint64_t max, uint32_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	while (*s >= '0' && *s <= '9') {
		v = v * 10 + (uint64_t)(*s++ - '0');
		if (v > max)
			return -EINVAL;
	}
	if (v < min)
		return -EINVAL;
	*p = s;
	*out = (uint32_t)v;
	return 0;
}

/* One KIND[:PARAM][*COUNT] at *p. */
static int parse_item(const char **p, struct kvc_group_spec *spec, uint32_t *count,
		      char *why, size_t why_len)
{
	size_t len = strcspn(*p, ":*,");
	int kind = -1;

	for (int k = 0; k < KVC_NUM_KINDS; k++)
		if (strlen(kind_names[k]) == len && !strncmp(*p, kind_names[k], len))
			kind = k;
	if (kind < 0) {
		snprintf(why, why_len, "unknown kind '%.*s' (full, swa:W, rswa:W, chunked:C, cyclic:W)",
			 (int)len, *p);
		return -EINVAL;
	}
	*p += len;
	spec->kind = (enum kvc_kind)kind;
	spec->param = 0;
	if (kind == KVC_FULL && **p == ':') {
		snprintf(why, why_len, "full takes no parameter");
		return -EINVAL;
	}
	if (kind != KVC_FULL) {
		/* The core's own minimums: a window of 1 would be no window for swa. */
		uint32_t min = kind == KVC_SWA ? 2 : 1;
		bool colon = **p == ':';

		*p += colon;
		if (!colon || parse_count(p, min, KVC_MAX_TOKENS, &spec->param)) {
			snprintf(why, why_len, "%s needs ':' and a size of %u to %u tokens",
				 kind_names[kind], min, KVC_MAX_TOKENS);
			return -EINVAL;
		}
	}
	*count = 1;
	if (**p == '*') {
		(*p)++;
		if (parse_count(p, 1, CAP_MAX_LAYERS, count)) {
			snprintf(why, why_len, "'*' needs a layer count of 1 to %u", CAP_MAX_LAYERS);
			return -EINVAL;
		}
	}
	if (**p && **p != ',') {
		snprintf(why, why_len, "unexpected '%c'", **p);
		return -EINVAL;
	}
	return 0;
}

/*
 * vLLM's grouping (kv_cache_utils, uniform page size; engine_model.py's
 * vllm_groups): the layers of each (kind, param) in order of first appearance,
 * cut into groups of the smallest kind's layer count, or of the largest's when
 * that is within 1.25 of it; a kind's last group is padded to that size. So the
 * order of the layers matters only through which kind comes first.
 */
int cap_parse_layers(const char *pattern, struct cap_model *m, char *why, size_t why_len)
{
	struct kvc_group_spec kinds[KVC_MAX_GROUPS];
	uint32_t counts[KVC_MAX_GROUPS], nkinds = 0, size, max, ngroups = 0;
	const char *p = pattern;
	int ret;

	if (strlen(pattern) >= sizeof(m->layers)) {
		snprintf(why, why_len, "longer than %zu characters", sizeof(m->layers) - 1);
		return -EINVAL;
	}
	m->nlayers = 0;
	do {
		struct kvc_group_spec spec;
		uint32_t count, k;

		ret = parse_item(&p, &spec, &count, why, why_len);
		if (ret)
			return ret;
		for (k = 0; k < nkinds; k++)
			if (kinds[k].kind == spec.kind && kinds[k].param == spec.param)
				break;
		if (k == KVC_MAX_GROUPS) {
			snprintf(why, why_len, "more than %u kinds of layer", KVC_MAX_GROUPS);
			return -EINVAL;
		}
		if (k == nkinds) {
			kinds[nkinds] = spec;
			counts[nkinds++] = 0;
		}
		counts[k] += count;
		m->nlayers += count;
		if (m->nlayers > CAP_MAX_LAYERS) {
			snprintf(why, why_len, "more than %u layers", CAP_MAX_LAYERS);
			return -EINVAL;
		}
	} while (*p++ == ',');

	size = max = counts[0];
	for (uint32_t k = 1; k < nkinds; k++) {
		size = counts[k] < size ? counts[k] : size;
		max = counts[k] > max ? counts[k] : max;
	}
	if ((uint64_t)max * 4 < (uint64_t)size * 5)
		size = max;
	for (uint32_t k = 0; k < nkinds; k++)
		ngroups += (counts[k] + size - 1) / size;
	if (ngroups > KVC_MAX_GROUPS) {
		snprintf(why, why_len, "%u groups of %u layers; a pool has at most %u", ngroups, size,
			 KVC_MAX_GROUPS);
		return -EINVAL;
	}
	m->ngroups = 0;
	m->layers_per_group = size;
	for (uint32_t k = 0; k < nkinds; k++)
		for (uint32_t n = 0; n < counts[k]; n += size)
			m->groups[m->ngroups++] = kinds[k];
	snprintf(m->layers, sizeof(m->layers), "%s", pattern);
	return 0;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/*
 * What the next token's query reads once @context tokens are computed
 * (docs/kvdata.md's masks at i = context), which is also what the core keeps
 * (docs/design.md: swa skips n-W+1 of n, chunked n/C*C): so the bound asks for
 * no KV the core could already have let go. Cyclic rings are fixed at
 * W-1+S tokens, whatever the mask reads.
 */
uint32_t cap_mask_tokens(const struct kvc_group_spec *g, uint32_t context,
			 const struct cap_opts *o)
{
	uint64_t prefix = min_u64(o->rswa_prefix, context);

	switch (g->kind) {
	case KVC_SWA:
		return (uint32_t)min_u64(context, g->param - 1);
	case KVC_RSWA:
		return (uint32_t)min_u64(context, prefix + g->param - 1);
	case KVC_CHUNKED:
		return context % g->param;
	case KVC_CYCLIC:
		return (uint32_t)min_u64(context, (uint64_t)g->param - 1 + o->max_step);
	default:
		return context;
	}
}

/*
 * One sequence's chunked prefill to @context, as an engine runs it: a lookup,
 * then an ALLOC of up to S tokens and its COMMIT until all are computed. The
 * lookup finds no block (the tokens are distinct), but a pool of chunked
 * groups alone hits every chunk before the last with null blocks (vLLM's
 * rule: nothing there is needed), and those tokens are not computed.
 */
static int prefill(struct kvc_seq *seq, uint32_t context, uint32_t step, uint32_t *peak)
{
	struct kvc_seq_info info;
	struct kvc_alloc_res res;
	struct kvc_hit hit;
	bool first = true;
	uint32_t done;
	int ret;

	ret = kvc_lookup(seq, &hit);
	if (ret)
		return ret;
	done = hit.tokens;
	*peak = 0;
	do {
		uint32_t n = context - done < step ? context - done : step;
		struct kvc_alloc_req req = { .new_tokens = n, .use_cache = first };

		ret = kvc_alloc(seq, &req, &res);
		if (ret)
			return ret;
		kvc_seq_info(seq, &info);
		*peak = info.blocks_held > *peak ? info.blocks_held : *peak;
		ret = kvc_seq_computed(seq, done + n);
		if (ret)
			return ret;
		done += n;
		first = false;
	} while (done < context);
	return 0;
}

/*
 * Adds sequences of @context distinct tokens (no prefix is shared, so the cache
 * cannot help) to a pool of f->pool_blocks until one does not fit. Every
 * sequence does the same, so each must end holding as many blocks as the
 * first: -EUCLEAN if not, as from the pool's own check at the end.
 */
static int fill(const struct kvc_group_spec *groups, uint32_t ngroups, const struct cap_opts *o,
		uint32_t context, struct cap_fill *f)
{
	uint32_t prefix = o->rswa_prefix < context ? o->rswa_prefix : context;
	struct kvc_pool_config cfg;
	struct kvc_pool *pool;
	uint32_t *tokens;
	int ret;

	f->seqs = 0;
	f->held = f->peak = 0;
	f->unbounded = false;
	if (f->pool_blocks < KVC_MIN_BLOCKS)
		return 0; /* the null block alone */
	kvc_pool_config_init(&cfg, f->pool_blocks, o->block_size);
	cfg.max_step_tokens = o->max_step;
	cfg.num_groups = ngroups;
	memcpy(cfg.groups, groups, ngroups * sizeof(*groups));
	ret = kvc_pool_create(&cfg, &pool);
	if (ret)
		return ret;
	tokens = malloc((size_t)context * sizeof(*tokens));
	if (!tokens) {
		ret = -ENOMEM;
		goto out;
	}
	for (;;) {
		struct kvc_seq_info info;
		struct kvc_seq *seq;
		uint32_t peak;

		for (uint32_t i = 0; i < context; i++)
			tokens[i] = (uint32_t)(f->seqs * context + i);
		ret = kvc_seq_create(pool, tokens, context, NULL, 0, prefix, &seq);
		if (ret)
			goto out;
		ret = prefill(seq, context, o->max_step, &peak);
		if (ret == -ENOSPC) {
			kvc_seq_destroy(seq);
			break;
		}
		if (ret)
			goto out;
		kvc_seq_info(seq, &info);
		if (f->seqs == 0) {
			f->held = info.blocks_held;
			f->peak = peak;
			if (!f->held) {
				f->unbounded = true;
				f->seqs = 1;
				break;
			}
			/* Every live sequence keeps its tokens: refuse a run that would take gigabytes. */
			if (((uint64_t)f->pool_blocks / f->held + 1) * context > CAP_MAX_SIM_TOKENS) {
				ret = -E2BIG;
				goto out;
			}
		} else if (info.blocks_held != f->held || peak != f->peak) {
			ret = -EUCLEAN;
			goto out;
		}
		f->seqs++;
	}
	ret = kvc_pool_check(pool, NULL, 0);
out:
	free(tokens);
	kvc_pool_destroy(pool);
	return ret;
}

/* floor(budget / bytes per block), the null block among them; -ERANGE past the core's limit. */
static int size_pool(const struct cap_opts *o, uint64_t bytes_per_block, struct cap_fill *f)
{
	uint64_t n = o->budget / bytes_per_block;

	if (n > KVC_MAX_BLOCKS)
		return -ERANGE;
	f->bytes_per_block = bytes_per_block;
	f->pool_blocks = (uint32_t)n;
	return 0;
}

int cap_measure(const struct cap_model *m, const struct cap_opts *o, uint32_t context,
		struct cap_row *r)
{
	static const struct kvc_group_spec all_full = { KVC_FULL, 0 };
	/* One block of one layer: block_size tokens of K and V over the KV heads. */
	uint64_t layer_bytes = (uint64_t)o->block_size * m->kv_heads * m->head_dim * 2 *
			       o->dtype_bytes;
	int ret;

	memset(r, 0, sizeof(*r));
	r->context = context;
	/*
	 * (a) as an engine without a hybrid allocator holds KV: one group of all the
	 * model's layers, so a block is every layer's and nothing is padded.
	 */
	ret = size_pool(o, layer_bytes * m->layers_per_group, &r->kvpool) ?:
	      size_pool(o, layer_bytes * m->nlayers, &r->full);
	if (ret)
		return ret;
	ret = fill(m->groups, m->ngroups, o, context, &r->kvpool) ?:
	      fill(&all_full, 1, o, context, &r->full);
	if (ret)
		return ret;
	for (uint32_t g = 0; g < m->ngroups; g++)
		r->bound_blocks += ((uint64_t)cap_mask_tokens(&m->groups[g], context, o) +
				    o->block_size - 1) / o->block_size;
	/* floor(floor(x / a) / b) = floor(x / (a b)), without the product's overflow */
	r->seqs_bound = r->bound_blocks ? o->budget / r->kvpool.bytes_per_block / r->bound_blocks :
					  UINT64_MAX;
	return 0;
}
