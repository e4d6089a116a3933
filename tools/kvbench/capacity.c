/* SPDX-License-Identifier: MIT */
/*
 * kvbench capacity: how many sequences of context L a KV memory budget holds,
 * found by running the allocator in process (capacity_run.c), three ways:
 *
 *  (a) every layer as full attention, one group of all the model's layers: what
 *      an engine without a hybrid allocator holds (vLLM with its hybrid KV cache
 *      manager off turns every window into full attention the same way). Its
 *      block is every layer's, so no layer slot is padded.
 *  (b) kvpool's groups as vLLM's hybrid allocator forms them: each kind's layers
 *      cut into groups of layers_per_group, the last one padded, so that every
 *      block has the same size:
 *        bytes per block = block_size x kv_heads x head_dim x 2 (K, V)
 *                          x dtype bytes x layers_per_group
 *      and the pool has floor(budget / bytes per block) blocks, the null block 0
 *      among them (it is never handed out, so it is lost).
 *  (c) the bound: budget / (sum over groups of cdiv(tokens the group's mask
 *      needs at L, block_size) x bytes per block), the padded block of (b):
 *      what (b) would hold with no null block, every window aligned to blocks
 *      and no last prefill chunk allocated before a window drops.
 *
 * A sequence reaches L by chunked prefill, max_step_tokens (S) per ALLOC and a
 * COMMIT per chunk, so windows drop as they go; then the next is added, until
 * one does not fit. Tokens are distinct, so the prefix cache has nothing to give.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capacity.h"
#include "kvbench.h"

#define MAX_CONTEXTS 16

/*
 * Public geometries. Only the kind that comes first matters to the grouping,
 * so the interleaved models are written kind by kind, the first kind of their
 * real layer order first: gemma3-27b's layers 0-4 slide, 5 is global, and so
 * on; gpt-oss-20b's layers alternate from a sliding one.
 */
static const struct preset {
	const char *name, *layers;
	uint32_t kv_heads, head_dim;
} presets[] = {
	{ "llama3-8b", "full*32", 8, 128 },
	{ "mistral-7b", "swa:4096*32", 8, 128 },
	{ "gemma3-27b", "swa:1024*52,full*10", 16, 128 },
	{ "gpt-oss-20b", "swa:128*12,full*12", 8, 64 },
	{ "rswa", "rswa:4096*32", 8, 128 },
};
#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

static const uint32_t default_contexts[] = { 8192, 32768, 131072 };

static void format_bytes(char *out, size_t len, uint64_t bytes)
{
	if (bytes >= (1u << 30))
		snprintf(out, len, "%.2f GiB", (double)bytes / (1 << 30));
	else if (bytes >= (1u << 20))
		snprintf(out, len, "%.2f MiB", (double)bytes / (1 << 20));
	else if (bytes >= 1024)
		snprintf(out, len, "%.2f KiB", (double)bytes / 1024);
	else
		snprintf(out, len, "%llu B", (unsigned long long)bytes);
}

/* Why (b) is below (c) at a row, from the counts each loss alone would leave. */
enum { GAP_ALIGN = 1, GAP_NULL = 2, GAP_PEAK = 4 };

static unsigned gap_reasons(const struct cap_row *r, const struct cap_opts *o)
{
	const struct cap_fill *k = &r->kvpool;
	uint64_t budget_blocks = o->budget / k->bytes_per_block;
	unsigned why = 0;

	if (!k->held || k->unbounded || r->seqs_bound == UINT64_MAX)
		return 0;
	if (budget_blocks / k->held < r->seqs_bound)
		why |= GAP_ALIGN; /* a window's tokens span one block more than their cdiv */
	if ((k->pool_blocks - 1) / k->held < budget_blocks / k->held)
		why |= GAP_NULL;
	if (k->seqs < (k->pool_blocks - 1) / k->held)
		why |= GAP_PEAK; /* the last sequence's chunk before its window dropped */
	return why;
}

static int print_json_row(const struct cap_model *m, const struct cap_opts *o,
			  const struct cap_row *r, long cores)
{
	const struct cap_fill *a = &r->full, *b = &r->kvpool;
	json_object *j = json_object_new_object();
	bool has_rswa = false;

	if (!j)
		return -ENOMEM;
	for (uint32_t g = 0; g < m->ngroups; g++)
		has_rswa |= m->groups[g].kind == KVC_RSWA;
#define ADD(key, val) json_object_object_add(j, key, val)
#define SEQS(n, unbounded) ((unbounded) ? NULL : json_object_new_int64((int64_t)(n)))
	ADD("model", json_object_new_string(m->name));
	ADD("layers", json_object_new_string(m->layers));
	ADD("context_tokens", json_object_new_int64(r->context));
	ADD("budget_bytes", json_object_new_int64((int64_t)o->budget));
	ADD("seqs_full_accounting", SEQS(a->seqs, a->unbounded));
	ADD("seqs_kvpool", SEQS(b->seqs, b->unbounded));
	ADD("seqs_bound", SEQS(r->seqs_bound, r->seqs_bound == UINT64_MAX));
	ADD("gain_kvpool_over_full", a->seqs && !b->unbounded ?
		bench_json_fixed((double)b->seqs / (double)a->seqs, 3) : NULL);
	ADD("groups", json_object_new_int64(m->ngroups));
	ADD("layers_per_group", json_object_new_int64(m->layers_per_group));
	ADD("model_layers", json_object_new_int64(m->nlayers));
	ADD("kv_heads", json_object_new_int64(m->kv_heads));
	ADD("head_dim", json_object_new_int64(m->head_dim));
	ADD("dtype", json_object_new_string(o->dtype));
	ADD("block_size_tokens", json_object_new_int64(o->block_size));
	ADD("max_step_tokens", json_object_new_int64(o->max_step));
	if (has_rswa)
		ADD("rswa_prefix_tokens", json_object_new_int64(o->rswa_prefix < r->context ?
								 o->rswa_prefix : r->context));
	ADD("bytes_per_block", json_object_new_int64((int64_t)b->bytes_per_block));
	ADD("pool_blocks", json_object_new_int64(b->pool_blocks));
	/* Measured on the sequences that fit: unknown (null) when none did. */
	ADD("blocks_per_seq_kvpool", b->seqs ? json_object_new_int64(b->held) : NULL);
	ADD("peak_blocks_per_seq_kvpool", b->seqs ? json_object_new_int64(b->peak) : NULL);
	ADD("blocks_per_seq_bound", json_object_new_int64((int64_t)r->bound_blocks));
	ADD("bytes_per_block_full_accounting", json_object_new_int64((int64_t)a->bytes_per_block));
	ADD("pool_blocks_full_accounting", json_object_new_int64(a->pool_blocks));
	ADD("blocks_per_seq_full_accounting", a->seqs ? json_object_new_int64(a->held) : NULL);
	ADD("cores", json_object_new_int64(cores));
#undef SEQS
#undef ADD
	return bench_json_line(j);
}

static void print_seqs(uint64_t n, bool unbounded)
{
	if (unbounded)
		printf(" %10s", "inf");
	else
		printf(" %10llu", (unsigned long long)n);
}

static void print_model_head(const struct cap_model *m, const struct cap_opts *o,
			     const struct cap_row *r)
{
	uint32_t slots = m->ngroups * m->layers_per_group;
	char b[32], a[32];

	format_bytes(b, sizeof(b), r->kvpool.bytes_per_block);
	format_bytes(a, sizeof(a), r->full.bytes_per_block);
	printf("\n%s: %s, %u KV heads x head_dim %u, %s\n", m->name, m->layers, m->kv_heads,
	       m->head_dim, o->dtype);
	printf("#   (b) %u group%s of %u layers", m->ngroups, m->ngroups == 1 ? "" : "s",
	       m->layers_per_group);
	if (slots > m->nlayers)
		printf(" (%u padding)", slots - m->nlayers);
	printf(", %s a block, %u blocks\n", b, r->kvpool.pool_blocks);
	printf("#   (a) 1 group of %u layers, %s a block, %u blocks\n", m->nlayers, a,
	       r->full.pool_blocks);
	printf("%8s %10s %10s %10s %9s %12s %9s %12s\n", "context", "(a) full", "(b) kvpool",
	       "(c) bound", "gain b/a", "blk/seq (b)", "peak (b)", "blk/seq (c)");
}

static void print_row(const struct cap_row *r)
{
	printf("%8u", r->context);
	print_seqs(r->full.seqs, r->full.unbounded);
	print_seqs(r->kvpool.seqs, r->kvpool.unbounded);
	print_seqs(r->seqs_bound, r->seqs_bound == UINT64_MAX);
	if (r->full.seqs && !r->kvpool.unbounded)
		printf(" %8.2fx", (double)r->kvpool.seqs / (double)r->full.seqs);
	else
		printf(" %9s", "-");
	if (r->kvpool.seqs)
		printf(" %12u %9u", r->kvpool.held, r->kvpool.peak);
	else
		printf(" %12s %9s", "-", "-");
	printf(" %12llu\n", (unsigned long long)r->bound_blocks);
}

/*
 * The line on what limits a model: what a sequence of the longest context
 * needs, kind by kind, and which losses keep (b) below (c) at which contexts.
 */
static void print_limit(const struct cap_model *m, const struct cap_opts *o,
			const struct cap_row *rows, unsigned nrows)
{
	static const char *const gap_words[] = { "an unaligned window's extra block",
						 "the null block",
						 "the last sequence's prefill chunk" };
	const struct cap_row *last = &rows[0];
	bool done[KVC_MAX_GROUPS] = { false };
	unsigned any = 0;

	for (unsigned i = 1; i < nrows; i++)
		if (rows[i].context > last->context)
			last = &rows[i];
	printf("# limit: a sequence of %u tokens needs", last->context);
	for (uint32_t g = 0; g < m->ngroups; g++) {
		const struct kvc_group_spec *s = &m->groups[g];
		uint32_t blocks = (cap_mask_tokens(s, last->context, o) + o->block_size - 1) /
				  o->block_size;
		uint32_t n = 0;

		if (done[g])
			continue;
		for (uint32_t h = g; h < m->ngroups; h++) {
			if (m->groups[h].kind == s->kind && m->groups[h].param == s->param) {
				done[h] = true;
				n++;
			}
		}
		printf("%s %ux%u (%s", g ? " +" : "", n, blocks, cap_kind_name(s->kind));
		if (s->kind != KVC_FULL)
			printf(":%u", s->param);
		printf(")");
	}
	printf(" = %llu blocks at best;", (unsigned long long)last->bound_blocks);
	for (unsigned bit = 0; bit < 3; bit++) {
		char at[MAX_CONTEXTS * 12] = "";
		size_t len = 0;

		for (unsigned i = 0; i < nrows; i++)
			if (gap_reasons(&rows[i], o) & (1u << bit))
				len += (size_t)snprintf(at + len, sizeof(at) - len, "%s%u", len ? "/" : "",
							rows[i].context);
		if (len)
			printf("%s%s at %s", any++ ? ", " : " (b) < (c) by ", gap_words[bit], at);
	}
	puts(any ? "" : " (b) = (c)");
}

/* An integer option's value in [min, max]: 0, or -EINVAL with the reason printed. */
static int parse_u32_opt(const char *opt, const char *arg, uint32_t min, uint32_t max,
			 uint32_t *out)
{
	uint64_t v;

	if (bench_parse_u64(arg, min, max, &v)) {
		fprintf(stderr, "kvbench capacity: %s: a number from %u to %u, not '%s'\n", opt, min,
			max, arg);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

/* --budget-gib / --budget-mib: a positive number of @unit bytes, fractions allowed. */
static int parse_budget(const char *opt, const char *arg, double unit, uint64_t *out)
{
	char *end;
	double v = strtod(arg, &end);

	if (arg[0] < '0' || arg[0] > '9' || *end || !(v * unit >= 1) || v * unit > 0x1p60) {
		fprintf(stderr, "kvbench capacity: %s: a positive number up to 2^60 bytes, not '%s'\n",
			opt, arg);
		return -EINVAL;
	}
	*out = (uint64_t)(v * unit);
	return 0;
}

static int parse_contexts(const char *arg, uint32_t *ctx, unsigned *n)
{
	char buf[MAX_CONTEXTS * 12], *save, *tok;

	*n = 0;
	if (!*arg || strlen(arg) >= sizeof(buf) || arg[0] == ',' || arg[strlen(arg) - 1] == ',' ||
	    strstr(arg, ",,"))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (*n == MAX_CONTEXTS || bench_parse_u64(tok, 1, KVC_MAX_TOKENS, &v))
			goto bad;
		ctx[(*n)++] = (uint32_t)v;
	}
	if (*n)
		return 0;
bad:
	fprintf(stderr, "kvbench capacity: --context: up to %d token counts of 1 to %u, "
		"comma-separated, not '%s'\n", MAX_CONTEXTS, KVC_MAX_TOKENS, arg);
	return -EINVAL;
}

static int run_model(struct cap_model *m, const struct cap_opts *o, const uint32_t *ctx,
		     unsigned nctx, long cores)
{
	struct cap_row rows[MAX_CONTEXTS];
	int ret = 0;

	for (unsigned i = 0; i < nctx; i++) {
		ret = cap_measure(m, o, ctx[i], &rows[i]);
		if (ret == -E2BIG)
			fprintf(stderr, "kvbench capacity: %s at %u tokens: its sequences would hold "
				"more than %llu tokens in all; a smaller budget\n", m->name, ctx[i],
				CAP_MAX_SIM_TOKENS);
		else if (ret == -ERANGE)
			fprintf(stderr, "kvbench capacity: %s: the budget holds more than %u blocks; "
				"a smaller budget or a larger --block-size\n", m->name, KVC_MAX_BLOCKS);
		else if (ret)
			fprintf(stderr, "kvbench capacity: %s at %u tokens: %s\n", m->name, ctx[i],
				strerror(-ret));
		if (ret)
			return ret;
		if (o->json) {
			ret = print_json_row(m, o, &rows[i], cores);
			if (ret)
				return ret;
			continue;
		}
		if (i == 0)
			print_model_head(m, o, &rows[0]);
		print_row(&rows[i]);
	}
	if (!o->json)
		print_limit(m, o, rows, nctx);
	return 0;
}

static int set_dtype(struct cap_opts *o, const char *arg)
{
	static const struct { const char *name; uint32_t bytes; } dtypes[] = {
		{ "bf16", 2 }, { "f16", 2 }, { "f32", 4 },
	};

	for (unsigned i = 0; i < 3; i++) {
		if (!strcmp(arg, dtypes[i].name)) {
			o->dtype = dtypes[i].name;
			o->dtype_bytes = dtypes[i].bytes;
			return 0;
		}
	}
	fprintf(stderr, "kvbench capacity: --dtype: bf16, f16 or f32, not '%s'\n", arg);
	return -EINVAL;
}

/* The models to run: --layers, --model's preset, or every preset; -EINVAL with the reason printed. */
static int pick_models(const char *model, const char *layers, uint32_t kv_heads, uint32_t head_dim,
		       struct cap_model *models, unsigned *n)
{
	char why[160];

	*n = 0;
	if (layers && model) {
		fputs("kvbench capacity: --model and --layers exclude each other\n", stderr);
		return -EINVAL;
	}
	if (!layers && (kv_heads || head_dim)) {
		fputs("kvbench capacity: --kv-heads and --head-dim go with --layers\n", stderr);
		return -EINVAL;
	}
	if (layers) {
		models[0] = (struct cap_model){ .name = "custom", .kv_heads = kv_heads ?: 8,
						.head_dim = head_dim ?: 128 };
		if (cap_parse_layers(layers, &models[0], why, sizeof(why))) {
			fprintf(stderr, "kvbench capacity: --layers '%s': %s\n", layers, why);
			return -EINVAL;
		}
		*n = 1;
		return 0;
	}
	for (unsigned p = 0; p < NPRESETS; p++) {
		if (model && strcmp(model, presets[p].name))
			continue;
		models[*n] = (struct cap_model){ .name = presets[p].name,
						 .kv_heads = presets[p].kv_heads,
						 .head_dim = presets[p].head_dim };
		/* Cannot fail: a preset's pattern is valid. */
		cap_parse_layers(presets[p].layers, &models[(*n)++], why, sizeof(why));
	}
	if (*n)
		return 0;
	fprintf(stderr, "kvbench capacity: --model: one of");
	for (unsigned p = 0; p < NPRESETS; p++)
		fprintf(stderr, " %s", presets[p].name);
	fprintf(stderr, ", not '%s'\n", model);
	return -EINVAL;
}

int bench_capacity(int argc, char **argv)
{
	struct cap_opts o = { .budget = 64ull << 30, .block_size = 16, .dtype = "bf16",
			      .dtype_bytes = 2, .max_step = 2048, .rswa_prefix = 2048 };
	const char *model = NULL, *layers = NULL;
	uint32_t ctx[MAX_CONTEXTS], kv_heads = 0, head_dim = 0;
	struct cap_model models[NPRESETS];
	unsigned nctx = 3, nmodels;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int ret = 0;

	memcpy(ctx, default_contexts, sizeof(default_contexts));
	for (int i = 1; i < argc && !ret; i++) {
		const char *opt = argv[i], *arg = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(opt, "--json")) {
			o.json = true;
			continue;
		}
		if (!arg) {
			fprintf(stderr, "kvbench capacity: bad argument '%s'\n", opt);
			return 2;
		}
		i++;
		if (!strcmp(opt, "--model"))
			model = arg;
		else if (!strcmp(opt, "--layers"))
			layers = arg;
		else if (!strcmp(opt, "--kv-heads"))
			ret = parse_u32_opt(opt, arg, 1, 1024, &kv_heads);
		else if (!strcmp(opt, "--head-dim"))
			ret = parse_u32_opt(opt, arg, 1, 4096, &head_dim);
		else if (!strcmp(opt, "--budget-gib"))
			ret = parse_budget(opt, arg, 0x1p30, &o.budget);
		else if (!strcmp(opt, "--budget-mib"))
			ret = parse_budget(opt, arg, 0x1p20, &o.budget);
		else if (!strcmp(opt, "--context"))
			ret = parse_contexts(arg, ctx, &nctx);
		else if (!strcmp(opt, "--block-size"))
			ret = parse_u32_opt(opt, arg, 1, 65536, &o.block_size);
		else if (!strcmp(opt, "--dtype"))
			ret = set_dtype(&o, arg);
		else if (!strcmp(opt, "--max-step-tokens"))
			ret = parse_u32_opt(opt, arg, 1, KVC_MAX_TOKENS, &o.max_step);
		else if (!strcmp(opt, "--rswa-prefix"))
			ret = parse_u32_opt(opt, arg, 0, KVC_MAX_TOKENS, &o.rswa_prefix);
		else {
			fprintf(stderr, "kvbench capacity: bad argument '%s'\n", opt);
			return 2;
		}
	}
	if (ret || pick_models(model, layers, kv_heads, head_dim, models, &nmodels))
		return 2;
	if (!o.json) {
		char budget[32];

		format_bytes(budget, sizeof(budget), o.budget);
		bench_print_machine();
		printf("# kvbench capacity: the most sequences of L tokens a budget of %s (%llu bytes)\n"
		       "# of %s KV holds, block_size %u; each sequence reaches L by chunked prefill,\n"
		       "# %u tokens an ALLOC and a COMMIT each, then the next is added, until the pool\n"
		       "# is out of blocks; tokens distinct, so no prefix is shared; R-SWA prefix %u tokens\n"
		       "# (a) every layer full attention, one group; (b) kvpool, groups as vLLM forms them;\n"
		       "# (c) budget / (sum over groups of cdiv(tokens its mask needs at L, %u) x bytes per\n"
		       "#     block of (b)); blk/seq: the blocks a sequence holds at L, peak: the most it\n"
		       "#     held on its way (the last chunk's ALLOC, before its COMMIT dropped a window)\n",
		       budget, (unsigned long long)o.budget, o.dtype, o.block_size, o.max_step,
		       o.rswa_prefix, o.block_size);
	}
	for (unsigned m = 0; m < nmodels && !ret; m++)
		ret = run_model(&models[m], &o, ctx, nctx, cores);
	return ret ? 1 : 0;
}
