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

/* The fleet's options together: what each needs, and what excludes what. */
static int fleet_opts_check(const struct replay_opts *o, bool seeded)
{
	if (o->tier_remote && o->redis_cluster)
		return usage_error("%s", "--tier-remote and --redis-cluster: a cluster you run, or "
				   "one the run starts, not both");
	if (o->nodes > 1 && (o->socket || o->daemon))
		return usage_error("%s", "--socket and --daemon name one kvpoold: not with --nodes "
				   "above 1 (the run starts its own)");
	if (o->restart_at > 0 && o->nodes > 1)
		return usage_error("%s", "--restart-at restarts one kvpoold: not with --nodes above 1");
	if (o->redis_cluster == 2)
		return usage_error("%s", "--redis-cluster 2: Redis Cluster needs 3 masters (1: one "
				   "standalone server)");
	if (o->redis_cluster && !o->tier_remote_tokens)
		return usage_error("%s", "--redis-cluster without --tier-remote-tokens (its memory, "
				   "in tokens of KV)");
	if (o->tier_remote_tokens && !o->redis_cluster && !o->tier_remote)
		return usage_error("%s", "--tier-remote-tokens without a cluster tier (--redis-cluster "
				   "or --tier-remote)");
	if (o->tier_remote_timeout_ms && !o->redis_cluster && !o->tier_remote)
		return usage_error("%s", "--tier-remote-timeout-ms without a cluster tier");
	if (seeded != (o->route == REPLAY_RANDOM))
		return usage_error("%s", seeded ? "--seed without --route random" :
				   "--route random without --seed");
	return 0;
}

static int parse_opts(int argc, char **argv, struct replay_opts *o)
{
	bool seeded = false;

	static const struct { const char *name; uint64_t min, max; } nums[] = {
		{ "--engines", 1, 256 },        { "--kv-bytes-per-token", 8, 8192 },
		{ "--block-size", 1, 1u << 16 }, { "--pool-tokens", 1, 1ull << 40 },
		{ "--tier-host-tokens", 0, 1ull << 40 }, { "--tier-disk-tokens", 0, 1ull << 40 },
		{ "--max-step-tokens", 1, 1u << 30 }, { "--snapshot-every", 0, 1u << 30 },
		{ "--nodes", 1, REPLAY_MAX_NODES }, { "--seed", 0, UINT64_MAX },
		{ "--redis-cluster", 1, REPLAY_MAX_NODES }, { "--tier-remote-tokens", 1, 1ull << 40 },
		{ "--tier-remote-timeout-ms", 1, 60000 },
	};
	*o = (struct replay_opts){ .engines = 1, .nodes = 1, .decode = true, .kv_bytes_per_token = 16,
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
			if ((strncmp(v, "redis://", 8) && strncmp(v, "rediss://", 9)) ||
			    strpbrk(v, "\n="))
				return usage_error("bad --tier-remote '%s': redis://HOST:PORT[,...]", v);
			o->tier_remote = v;
			continue;
		}
		if (!strcmp(a, "--route")) {
			if (!strcmp(v, "round_robin") || !strcmp(v, "session") || !strcmp(v, "random"))
				o->route = v[0] == 'r' && v[1] == 'o' ? REPLAY_ROUND_ROBIN :
					   v[0] == 's' ? REPLAY_SESSION : REPLAY_RANDOM;
			else
				return usage_error("bad --route '%s': round_robin, session or random",
						   v);
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
		if (!strcmp(a, "--restart-at")) {
			char *end;

			o->restart_at = strtod(v, &end);
			if (*end || !(o->restart_at > 0 && o->restart_at < 1))
				return usage_error("bad --restart-at '%s': a fraction of the requests, "
						   "above 0 and below 1", v);
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
		case 7: o->snapshot_every = (int64_t)num; break;
		case 8: o->nodes = (unsigned)num; break;
		case 9: o->seed = num; seeded = true; break;
		case 10: o->redis_cluster = (unsigned)num; break;
		case 11: o->tier_remote_tokens = num; break;
		default: o->tier_remote_timeout_ms = (uint32_t)num; break;
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
	return fleet_opts_check(o, seeded);
}

int bench_replay(int argc, char **argv)
{
	struct replay_opts o;
	struct replay_req *reqs = NULL;
	struct replay_result *res = MAP_FAILED;
	struct replay_tier tiers[REPLAY_MAX_NODES] = { 0 };
	struct replay_lat lat = { 0 };
	struct replay_held held = { 0 };
	struct replay_cluster cluster = { 0 };
	struct replay_figures f = { .tiers = tiers };
	uint8_t *node_of = NULL;
	uint64_t local;
	uint32_t n = 0;
	int ret = parse_opts(argc, argv, &o);

	if (ret)
		return ret;
	ret = load_trace(o.trace, &reqs, &n);
	/* One LRU cache of everything the fleet keeps: every node's pool and tier, the cluster. */
	local = o.pool_tokens + o.tier_host_tokens + o.tier_disk_tokens;
	if (!ret)
		ret = simulate(reqs, n, o.block_size, UINT64_MAX, &f.ceiling) ?:
		      simulate(reqs, n, o.block_size, (o.nodes * local + o.tier_remote_tokens) /
				       o.block_size, &f.lru);
	if (!ret) {
		node_of = malloc(n ? n : 1);
		ret = node_of ? replay_route(&o, reqs, n, node_of) : -ENOMEM;
		f.node_of = node_of;
	}
	if (!ret && o.redis_cluster) {
		ret = replay_cluster_start(&o, &cluster);
		o.tier_remote = cluster.url;
		f.cluster = &cluster;
	}
	if (!ret) {
		/* Shared: each engine process writes its requests' results. */
		res = mmap(NULL, (size_t)n * sizeof(*res), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		ret = res == MAP_FAILED ? -errno :
		      replay_run(&o, reqs, n, node_of, res, tiers, &lat, &held, &f.elapsed_ns);
	}
	if (!ret && o.redis_cluster)
		replay_cluster_census(&cluster);
	if (!ret)
		replay_report(&o, reqs, n, res, &lat, &held, &f);
	if (o.redis_cluster)
		replay_cluster_stop(&cluster);
	if (res != MAP_FAILED)
		munmap(res, (size_t)n * sizeof(*res));
	for (uint32_t i = 0; i < n; i++)
		free(reqs[i].ids);
	free(reqs);
	free(node_of);
	return ret ? 1 : 0;
}
