/* SPDX-License-Identifier: MIT */
/*
 * kvbench replay TRACE: the options, the trace (JSONL: timestamp, input_length,
 * output_length, hash_ids), the figures computed in process from the trace
 * alone (the ceiling: a block hits if any earlier request computed it; one
 * LRU cache of the pool's and tiers' summed size), and the row.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "replay.h"
#include "kvbench.h"

static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint32_t replay_token(const uint64_t *ids, uint32_t j)
{
	/* Equal ids, equal tokens; different ids, different tokens (but with odds of 2^-32 a token). */
	return (uint32_t)mix(ids[j / REPLAY_TRACE_BLOCK] * REPLAY_TRACE_BLOCK + j % REPLAY_TRACE_BLOCK);
}

/* ---- the trace ---- */

static int get_u64(json_object *line, const char *key, uint64_t *out)
{
	json_object *v;

	if (!json_object_object_get_ex(line, key, &v) || !json_object_is_type(v, json_type_int) ||
	    json_object_get_int64(v) < 0)
		return -EINVAL;
	*out = (uint64_t)json_object_get_int64(v);
	return 0;
}

static int parse_line(const char *text, uint32_t lineno, struct replay_req *r)
{
	json_object *line = json_tokener_parse(text), *ids;
	uint64_t in, out;
	size_t n;

	if (!line || !json_object_is_type(line, json_type_object)) {
		fprintf(stderr, "kvbench replay: line %u: not a JSON object\n", lineno);
		goto err_put;
	}
	if (get_u64(line, "timestamp", &r->ts_ms) || get_u64(line, "input_length", &in) ||
	    get_u64(line, "output_length", &out) || in < 1 || in > (1u << 24) || out > (1u << 24) ||
	    !json_object_object_get_ex(line, "hash_ids", &ids) ||
	    !json_object_is_type(ids, json_type_array)) {
		fprintf(stderr, "kvbench replay: line %u: needs timestamp, input_length (1..2^24), "
			"output_length (0..2^24) and hash_ids, an array\n", lineno);
		goto err_put;
	}
	n = json_object_array_length(ids);
	if (n < (in + REPLAY_TRACE_BLOCK - 1) / REPLAY_TRACE_BLOCK) {
		fprintf(stderr, "kvbench replay: line %u: %zu hash_ids cover %zu tokens, "
			"input_length is %llu\n", lineno, n, n * REPLAY_TRACE_BLOCK,
			(unsigned long long)in);
		goto err_put;
	}
	r->in_len = (uint32_t)in;
	r->out_len = (uint32_t)out;
	r->nids = (uint32_t)n;
	r->ids = calloc(n ? n : 1, sizeof(*r->ids));
	if (!r->ids)
		goto err_put;
	for (size_t i = 0; i < n; i++)
		r->ids[i] = (uint64_t)json_object_get_int64(json_object_array_get_idx(ids, i));
	json_object_put(line);
	return 0;

err_put:
	json_object_put(line);
	return -EINVAL;
}

static int load_trace(const char *path, struct replay_req **out, uint32_t *n)
{
	FILE *f = fopen(path, "r");
	struct replay_req *reqs = NULL;
	uint32_t cap = 0, lineno = 0;
	char *text = NULL;
	size_t len = 0;
	int ret = 0;

	if (!f) {
		fprintf(stderr, "kvbench replay: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	*n = 0;
	while (getline(&text, &len, f) > 0) {
		lineno++;
		if (text[strspn(text, " \t\r\n")] == '\0')
			continue;
		if (*n == cap) {
			struct replay_req *p = realloc(reqs, (cap = cap ? 2 * cap : 1024) * sizeof(*p));

			if (!p) {
				ret = -ENOMEM;
				break;
			}
			reqs = p;
		}
		ret = parse_line(text, lineno, &reqs[*n]);
		if (ret)
			break;
		(*n)++;
	}
	free(text);
	fclose(f);
	if (!ret && !*n) {
		fprintf(stderr, "kvbench replay: %s: no requests\n", path);
		ret = -EINVAL;
	}
	*out = reqs;
	return ret;
}

/* ---- what the trace alone allows ---- */

/* Pool block k's identity: the trace blocks up to its last token, and k. */
static uint64_t block_key(const struct replay_req *r, uint32_t k, uint32_t bs, uint64_t *chain,
			  uint32_t *chained)
{
	uint32_t q = (uint32_t)(((uint64_t)(k + 1) * bs - 1) / REPLAY_TRACE_BLOCK);

	while (*chained <= q) {
		*chain = mix(*chain ^ mix(r->ids[*chained] + 0x9e3779b97f4a7c15ull));
		(*chained)++;
	}
	return mix(*chain + k);
}

/* A set of keys with LRU order and a capacity (UINT64_MAX: no eviction). */
struct lru {
	uint64_t cap, n;
	uint32_t mask;
	uint32_t *buckets;
	struct lru_node { uint64_t key; uint32_t prev, next, hnext; } *nodes;
	uint32_t free_head, used; /* nodes[0] is the list's sentinel */
	uint32_t max_nodes;
};

static int lru_init(struct lru *l, uint64_t cap, uint32_t max_nodes)
{
	uint32_t nb = 1024;

	while (nb < max_nodes && nb < (1u << 30))
		nb <<= 1;
	*l = (struct lru){ .cap = cap, .mask = nb - 1, .max_nodes = max_nodes };
	l->buckets = calloc(nb, sizeof(*l->buckets));
	l->nodes = calloc((size_t)max_nodes + 1, sizeof(*l->nodes));
	if (!l->buckets || !l->nodes)
		return -ENOMEM;
	l->used = 1;
	return 0;
}

static void lru_free(struct lru *l)
{
	free(l->buckets);
	free(l->nodes);
}

static uint32_t lru_find(const struct lru *l, uint64_t key)
{
	uint32_t i = l->buckets[key & l->mask];

	while (i && l->nodes[i].key != key)
		i = l->nodes[i].hnext;
	return i;
}

static void unlink_node(struct lru *l, uint32_t i)
{
	l->nodes[l->nodes[i].prev].next = l->nodes[i].next;
	l->nodes[l->nodes[i].next].prev = l->nodes[i].prev;
}

static void append_node(struct lru *l, uint32_t i)
{
	l->nodes[i].prev = l->nodes[0].prev;
	l->nodes[i].next = 0;
	l->nodes[l->nodes[0].prev].next = i;
	l->nodes[0].prev = i;
}

static void lru_touch(struct lru *l, uint32_t i)
{
	unlink_node(l, i);
	append_node(l, i);
}

static void lru_evict_oldest(struct lru *l)
{
	uint32_t i = l->nodes[0].next, *link = &l->buckets[l->nodes[i].key & l->mask];

	while (*link != i)
		link = &l->nodes[*link].hnext;
	*link = l->nodes[i].hnext;
	unlink_node(l, i);
	l->nodes[i].hnext = l->free_head;
	l->free_head = i;
	l->n--;
}

static void lru_insert(struct lru *l, uint64_t key)
{
	uint32_t i;

	if (l->n == l->cap)
		lru_evict_oldest(l);
	if (l->free_head) {
		i = l->free_head;
		l->free_head = l->nodes[i].hnext;
	} else {
		i = l->used++;
	}
	l->nodes[i].key = key;
	l->nodes[i].hnext = l->buckets[key & l->mask];
	l->buckets[key & l->mask] = i;
	append_node(l, i);
	l->n++;
}

/*
 * The prompt tokens a prefix cache of @cap blocks, least recently used out
 * first, would hit on the trace: the requests in order, each caching its full
 * prompt blocks (the last token is never hit: at most input_length - 1, as
 * vLLM). UINT64_MAX: the ceiling.
 */
static int simulate(const struct replay_req *reqs, uint32_t n, uint32_t bs, uint64_t cap,
		    uint64_t *hit)
{
	uint64_t total = 0, *keys = NULL;
	uint32_t max_full = 0;
	struct lru l;
	int ret;

	for (uint32_t i = 0; i < n; i++) {
		total += reqs[i].in_len / bs;
		max_full = reqs[i].in_len / bs > max_full ? reqs[i].in_len / bs : max_full;
	}
	ret = lru_init(&l, cap, (uint32_t)(cap < total ? cap : total) + 1);
	if (ret)
		goto out;
	keys = malloc(((size_t)max_full + 1) * sizeof(*keys));
	if (!keys) {
		ret = -ENOMEM;
		goto out;
	}
	*hit = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct replay_req *r = &reqs[i];
		uint32_t full = r->in_len / bs, most = (r->in_len - 1) / bs, chained = 0, k;
		uint64_t chain = 0;

		for (k = 0; k < full; k++)
			keys[k] = block_key(r, k, bs, &chain, &chained);
		for (k = 0; k < most && lru_find(&l, keys[k]); k++)
			*hit += bs;
		/* Last block first, as vLLM frees a sequence's: a prefix's head is evicted last. */
		for (k = full; k-- > 0;) {
			uint32_t node = lru_find(&l, keys[k]);

			if (node)
				lru_touch(&l, node);
			else if (cap)
				lru_insert(&l, keys[k]);
		}
	}
out:
	free(keys);
	lru_free(&l);
	return ret;
}

/* ---- options and the row ---- */

static int usage_error(const char *fmt, const char *arg)
{
	return bench_usage_error("replay", fmt, arg);
}

static int parse_opts(int argc, char **argv, struct replay_opts *o)
{
	static const struct { const char *name; uint64_t min, max; } nums[] = {
		{ "--engines", 1, 256 },        { "--kv-bytes-per-token", 8, 8192 },
		{ "--block-size", 1, 1u << 16 }, { "--pool-tokens", 1, 1ull << 40 },
		{ "--tier-host-tokens", 0, 1ull << 40 }, { "--tier-disk-tokens", 0, 1ull << 40 },
		{ "--max-step-tokens", 1, 1u << 30 }, { "--snapshot-every", 0, 1u << 30 },
	};
	*o = (struct replay_opts){ .engines = 1, .decode = true, .kv_bytes_per_token = 16,
				   .block_size = 16, .pool_tokens = 65536, .tier_policy = "lru",
				   .groups = "full", .max_step = 2048, .snapshot_every = -1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t num;
		size_t k;

		if (!strcmp(a, "--json") || !strcmp(a, "--no-decode") || !strcmp(a, "--bystander")) {
			o->json |= a[2] == 'j';
			o->decode &= a[2] != 'n';
			o->bystander |= a[2] == 'b';
			continue;
		}
		if (a[0] != '-') {
			if (o->trace)
				return usage_error("unexpected argument '%s'", a);
			o->trace = a;
			continue;
		}
		if (!v)
			return usage_error("option '%s' needs a value", a);
		i++;
		if (!strcmp(a, "--tier-remote")) {
			if (strncmp(v, "redis://", 8) || strpbrk(v, "\n="))
				return usage_error("bad --tier-remote '%s': redis://HOST:PORT", v);
			o->tier_remote = v;
			continue;
		}
		if (!strcmp(a, "--daemon") || !strcmp(a, "--socket") || !strcmp(a, "--tier-disk-path")) {
			*(a[2] == 'd' && a[3] == 'a' ? &o->daemon : a[2] == 's' ? &o->socket :
			  &o->tier_disk_path) = v;
			continue;
		}
		if (!strcmp(a, "--groups")) {
			if (!*v || strlen(v) > 256 || strpbrk(v, "\n="))
				return usage_error("bad --groups '%s': the pool's groups, as kvpool.conf's "
						   "groups (\"full cyclic:1024\")", v);
			o->groups = v;
			continue;
		}
		if (!strcmp(a, "--tier-policy")) {
			if (strcmp(v, "lru") && strcmp(v, "second_sight"))
				return usage_error("bad --tier-policy '%s': lru or second_sight", v);
			o->tier_policy = v;
			continue;
		}
		if (!strcmp(a, "--speed")) {
			char *end;

			o->speed = strtod(v, &end);
			if (*end || !(o->speed > 0 && o->speed < 1e9))
				return usage_error("bad --speed '%s': a factor above 0", v);
			continue;
		}
		for (k = 0; k < sizeof(nums) / sizeof(nums[0]) && strcmp(a, nums[k].name); k++)
			;
		if (k == sizeof(nums) / sizeof(nums[0]))
			return usage_error("unknown option '%s'", a);
		if (bench_parse_u64(v, nums[k].min, nums[k].max, &num))
			return usage_error("bad value '%s'", v);
		switch (k) {
		case 0: o->engines = (unsigned)num; break;
		case 1: o->kv_bytes_per_token = (uint32_t)num; break;
		case 2: o->block_size = (uint32_t)num; break;
		case 3: o->pool_tokens = num; break;
		case 4: o->tier_host_tokens = num; break;
		case 5: o->tier_disk_tokens = num; break;
		case 6: o->max_step = (uint32_t)num; break;
		default: o->snapshot_every = (int64_t)num; break;
		}
	}
	if (!o->trace)
		return usage_error("%s", "missing the TRACE (JSONL: timestamp, input_length, "
				   "output_length, hash_ids)");
	if (o->kv_bytes_per_token % 8)
		return usage_error("%s", "--kv-bytes-per-token: a multiple of 8 (K and V of f32 "
				   "values, one kv head, one layer)");
	if (o->tier_disk_tokens && o->tier_host_tokens)
		return usage_error("%s", "--tier-host-tokens and --tier-disk-tokens: a pool has one "
				   "tier, in host memory or on disk");
	if ((o->tier_host_tokens && o->tier_host_tokens < o->block_size) ||
	    (o->tier_disk_tokens && o->tier_disk_tokens < o->block_size))
		return usage_error("%s", "--tier-host-tokens and --tier-disk-tokens: a block's "
				   "tokens (--block-size) at least");
	if (o->tier_disk_path && !o->tier_disk_tokens)
		return usage_error("%s", "--tier-disk-path without --tier-disk-tokens (the disk "
				   "tier's size)");
	return 0;
}

static void percentiles(const struct replay_result *res, uint32_t n, bool tier,
			struct bench_pct *pct, uint32_t *count)
{
	uint64_t *ns = malloc((n ? n : 1) * sizeof(*ns));

	*count = 0;
	*pct = (struct bench_pct){ 0, 0 };
	if (!ns)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (!res[i].error && (bool)res[i].tier == tier)
			ns[(*count)++] = res[i].alloc_ns;
	if (*count)
		bench_percentiles(ns, *count, pct);
	free(ns);
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

/* Per group, the blocks it held while the engines ran: their mean, or their most. */
static json_object *held_json(const struct replay_held *h, bool mean)
{
	json_object *a = json_object_new_array();

	for (uint32_t g = 0; g < h->ngroups; g++)
		json_object_array_add(a, mean ? bench_json_fixed(h->mean[g], 1) :
					  json_object_new_int64((int64_t)h->max[g]));
	return a;
}

static void report(const struct replay_opts *o, const struct replay_req *reqs, uint32_t n,
		   const struct replay_result *res, const struct replay_tier *tier,
		   const struct replay_lat *lat, const struct replay_held *held, uint64_t ceiling,
		   uint64_t lru, uint64_t elapsed_ns)
{
	uint64_t prompt = 0, hit = 0, unoffered = 0;
	uint64_t host_hit = tier->disk ? 0 : tier->hit_tokens, disk_hit = tier->disk ? tier->hit_tokens : 0;
	uint64_t host_down = tier->disk ? 0 : tier->bytes_down, disk_down = tier->disk ? tier->bytes_down : 0;
	uint64_t host_up = tier->disk ? 0 : tier->bytes_up, disk_up = tier->disk ? tier->bytes_up : 0;
	struct bench_pct plain, promoting;
	uint32_t nplain, npromoting, errors = 0;

	for (uint32_t i = 0; i < n; i++) {
		prompt += reqs[i].in_len;
		hit += res[i].hit_tokens;
		errors += res[i].error != 0;
	}
	percentiles(res, n, false, &plain, &nplain);
	percentiles(res, n, true, &promoting, &npromoting);
	for (unsigned r = 0; r < KVP_TIER_UNOFFERED_REASONS; r++)
		unoffered += tier->unoffered[r];
	if (o->json) {
		json_object *row = bench_json_row(), *why = json_object_new_object();

		for (unsigned r = 0; r < KVP_TIER_UNOFFERED_REASONS; r++)
			json_object_object_add(why, kvp_tier_unoffered_name(r),
					       json_object_new_int64((int64_t)tier->unoffered[r]));

		json_object_object_add(row, "benchmark", json_object_new_string("replay"));
		json_object_object_add(row, "trace", json_object_new_string(o->trace));
		json_object_object_add(row, "requests", json_object_new_int64(n));
		json_object_object_add(row, "engines", json_object_new_int64(o->engines));
		json_object_object_add(row, "block_size", json_object_new_int64(o->block_size));
		json_object_object_add(row, "pool_tokens", json_object_new_int64((int64_t)o->pool_tokens));
		json_object_object_add(row, "tier_host_tokens",
				       json_object_new_int64((int64_t)o->tier_host_tokens));
		json_object_object_add(row, "tier_disk_tokens",
				       json_object_new_int64((int64_t)o->tier_disk_tokens));
		json_object_object_add(row, "tier_disk_blocks",
				       json_object_new_int64((int64_t)(tier->disk ? tier->slots : 0)));
		json_object_object_add(row, "tier_policy", json_object_new_string(o->tier_policy));
		json_object_object_add(row, "groups", json_object_new_string(o->groups));
		json_object_object_add(row, "max_step_tokens", json_object_new_int64(o->max_step));
		json_object_object_add(row, "snapshot_every", o->snapshot_every < 0 ? NULL :
				       json_object_new_int64(o->snapshot_every));
		json_object_object_add(row, "blocks_held_mean", held_json(held, true));
		json_object_object_add(row, "blocks_held_max", held_json(held, false));
		json_object_object_add(row, "snapshot_blocks_made", json_object_new_int64((int64_t)held->snap_made));
		json_object_object_add(row, "snapshot_blocks_hit", json_object_new_int64((int64_t)held->snap_hit));
		json_object_object_add(row, "snapshot_blocks_evicted",
				       json_object_new_int64((int64_t)held->snap_evicted));
		json_object_object_add(row, "snapshot_blocks_held", json_object_new_int64(held->snap_held));
		json_object_object_add(row, "prompt_tokens", json_object_new_int64((int64_t)prompt));
		json_object_object_add(row, "hit_tokens", json_object_new_int64((int64_t)hit));
		json_object_object_add(row, "hit_rate_pool",
				       bench_json_fixed(ratio(hit - tier->hit_tokens -
							      tier->remote_hit_tokens, prompt), 4));
		json_object_object_add(row, "hit_rate_host", bench_json_fixed(ratio(host_hit, prompt), 4));
		json_object_object_add(row, "hit_rate_disk", bench_json_fixed(ratio(disk_hit, prompt), 4));
		json_object_object_add(row, "hit_rate_remote",
				       bench_json_fixed(ratio(tier->remote_hit_tokens, prompt), 4));
		json_object_object_add(row, "hit_rate", bench_json_fixed(ratio(hit, prompt), 4));
		json_object_object_add(row, "ceiling", bench_json_fixed(ratio(ceiling, prompt), 4));
		json_object_object_add(row, "ceiling_tokens", json_object_new_int64((int64_t)ceiling));
		json_object_object_add(row, "lru_hit_rate", bench_json_fixed(ratio(lru, prompt), 4));
		json_object_object_add(row, "bytes_down_host", json_object_new_int64((int64_t)host_down));
		json_object_object_add(row, "bytes_up_host", json_object_new_int64((int64_t)host_up));
		json_object_object_add(row, "pool_evicted_blocks",
				       json_object_new_int64((int64_t)tier->pool_evicted));
		json_object_object_add(row, "host_stored_blocks", json_object_new_int64((int64_t)tier->stored));
		json_object_object_add(row, "host_promoted_blocks",
				       json_object_new_int64((int64_t)tier->promoted));
		json_object_object_add(row, "host_skipped_blocks", json_object_new_int64((int64_t)tier->skipped));
		json_object_object_add(row, "host_abandoned_blocks",
				       json_object_new_int64((int64_t)tier->abandoned));
		json_object_object_add(row, "bytes_down_disk", json_object_new_int64((int64_t)disk_down));
		json_object_object_add(row, "bytes_up_disk", json_object_new_int64((int64_t)disk_up));
		json_object_object_add(row, "tier_declined_blocks",
				       json_object_new_int64((int64_t)tier->declined));
		json_object_object_add(row, "host_unoffered_blocks",
				       json_object_new_int64((int64_t)(tier->disk ? 0 : unoffered)));
		json_object_object_add(row, "disk_unoffered_blocks",
				       json_object_new_int64((int64_t)(tier->disk ? unoffered : 0)));
		json_object_object_add(row, "tier_unoffered", why);
		json_object_object_add(row, "remote_bytes_in",
				       json_object_new_int64((int64_t)tier->remote_bytes_in));
		json_object_object_add(row, "remote_bytes_out",
				       json_object_new_int64((int64_t)tier->remote_bytes_out));
		json_object_object_add(row, "remote_round_p50_us",
				       bench_json_fixed(tier->remote_round_p50_ns / 1e3, 1));
		json_object_object_add(row, "remote_round_p99_us",
				       bench_json_fixed(tier->remote_round_p99_ns / 1e3, 1));
		/* The copies' own bandwidth, bytes over their time, as kvctl stats' MB/s. */
		json_object_object_add(row, "tier_gb_per_s_down",
				       bench_json_fixed(tier->ns_down ? (double)tier->bytes_down /
							tier->ns_down : 0.0, 2));
		json_object_object_add(row, "tier_gb_per_s_up",
				       bench_json_fixed(tier->ns_up ? (double)tier->bytes_up /
							tier->ns_up : 0.0, 2));
		json_object_object_add(row, "allocs", json_object_new_int64(nplain));
		json_object_object_add(row, "alloc_p50_us", bench_json_fixed(plain.median / 1e3, 1));
		json_object_object_add(row, "alloc_p99_us", bench_json_fixed(plain.p99 / 1e3, 1));
		json_object_object_add(row, "promoting_allocs", json_object_new_int64(npromoting));
		json_object_object_add(row, "promoting_alloc_p50_us",
				       bench_json_fixed(promoting.median / 1e3, 1));
		json_object_object_add(row, "promoting_alloc_p99_us",
				       bench_json_fixed(promoting.p99 / 1e3, 1));
		json_object_object_add(row, "decode_allocs", json_object_new_int64((int64_t)lat->decode_n));
		json_object_object_add(row, "decode_alloc_p50_us", bench_json_fixed(lat->decode.median / 1e3, 1));
		json_object_object_add(row, "decode_alloc_p99_us", bench_json_fixed(lat->decode.p99 / 1e3, 1));
		json_object_object_add(row, "bystander_nops", json_object_new_int64((int64_t)lat->nop_n));
		json_object_object_add(row, "bystander_nop_p50_us", bench_json_fixed(lat->nop.median / 1e3, 1));
		json_object_object_add(row, "bystander_nop_p99_us", bench_json_fixed(lat->nop.p99 / 1e3, 1));
		json_object_object_add(row, "errors", json_object_new_int64(errors));
		json_object_object_add(row, "elapsed_s", bench_json_fixed(elapsed_ns / 1e9, 3));
		bench_json_line(row);
		return;
	}
	printf("replay %s: %u requests, %llu prompt tokens, engines %u, pool %llu tokens, %s "
	       "tier %llu (%s): hit rate %.4f (pool %.4f, host %.4f, disk %.4f), ceiling %.4f, one "
	       "LRU %.4f; tier %.1f MB down, %.1f MB up, %llu unoffered, %llu declined; ALLOC "
	       "p50/p99 %.1f/%.1f us, %u promoting %.1f/%.1f us, decode %.1f/%.1f us; %u errors; "
	       "%.3f s\n", o->trace,
	       n, (unsigned long long)prompt, o->engines, (unsigned long long)o->pool_tokens,
	       o->tier_disk_tokens ? "disk" : "host",
	       (unsigned long long)(o->tier_disk_tokens ? o->tier_disk_tokens : o->tier_host_tokens),
	       o->tier_policy, ratio(hit, prompt),
	       ratio(hit - tier->hit_tokens - tier->remote_hit_tokens, prompt),
	       ratio(host_hit, prompt), ratio(disk_hit, prompt), ratio(ceiling, prompt),
	       ratio(lru, prompt), tier->bytes_down / 1e6, tier->bytes_up / 1e6,
	       (unsigned long long)unoffered, (unsigned long long)tier->declined,
	       plain.median / 1e3, plain.p99 / 1e3, npromoting,
	       promoting.median / 1e3, promoting.p99 / 1e3, lat->decode.median / 1e3,
	       lat->decode.p99 / 1e3, errors, elapsed_ns / 1e9);
	printf("groups %s: blocks held, mean (most) each:", o->groups);
	for (uint32_t g = 0; g < held->ngroups; g++)
		printf(" %.1f (%llu)", held->mean[g], (unsigned long long)held->max[g]);
	if (held->snapshots)
		printf("; window snapshots: %llu blocks made, %llu hit, %llu evicted, %u held",
		       (unsigned long long)held->snap_made, (unsigned long long)held->snap_hit,
		       (unsigned long long)held->snap_evicted, held->snap_held);
	printf("\n");
	if (o->bystander)
		printf("bystander: %llu NOPs on another pool, p50/p99 %.1f/%.1f us\n",
		       (unsigned long long)lat->nop_n, lat->nop.median / 1e3, lat->nop.p99 / 1e3);
}

int bench_replay(int argc, char **argv)
{
	struct replay_opts o;
	struct replay_req *reqs = NULL;
	struct replay_result *res = MAP_FAILED;
	struct replay_tier tier = { 0 };
	struct replay_lat lat = { 0 };
	struct replay_held held = { 0 };
	uint64_t ceiling = 0, lru = 0, elapsed = 0;
	uint32_t n = 0;
	int ret = parse_opts(argc, argv, &o);

	if (ret)
		return ret;
	ret = load_trace(o.trace, &reqs, &n);
	if (!ret)
		ret = simulate(reqs, n, o.block_size, UINT64_MAX, &ceiling) ?:
		      simulate(reqs, n, o.block_size,
			       (o.pool_tokens + o.tier_host_tokens + o.tier_disk_tokens) /
				       o.block_size, &lru);
	if (!ret) {
		/* Shared: each engine process writes its requests' results. */
		res = mmap(NULL, (size_t)n * sizeof(*res), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		ret = res == MAP_FAILED ? -errno :
		      replay_run(&o, reqs, n, res, &tier, &lat, &held, &elapsed);
	}
	if (!ret)
		report(&o, reqs, n, res, &tier, &lat, &held, ceiling, lru, elapsed);
	if (res != MAP_FAILED)
		munmap(res, (size_t)n * sizeof(*res));
	for (uint32_t i = 0; i < n; i++)
		free(reqs[i].ids);
	free(reqs);
	return ret ? 1 : 0;
}
