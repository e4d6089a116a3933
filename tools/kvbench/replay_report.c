/* SPDX-License-Identifier: MIT */
/*
 * kvbench replay's row: hit rates by tier over the whole run (every node's
 * counters summed) and each node's, the latencies, the tiers' traffic; JSON
 * (--json) or a line.
 */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>

#include "replay.h"
#include "kvbench.h"

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

/*
 * @b's counters added to @a's: the nodes' into the run's, and a run's across a
 * restart (the next run's start at 0). Sizes and percentiles are not counters.
 */
void replay_tier_add(struct replay_tier *a, const struct replay_tier *b)
{
	a->hit_tokens += b->hit_tokens;
	a->bytes_down += b->bytes_down;
	a->bytes_up += b->bytes_up;
	a->promoted += b->promoted;
	a->stored += b->stored;
	a->skipped += b->skipped;
	a->abandoned += b->abandoned;
	a->pool_evicted += b->pool_evicted;
	a->declined += b->declined;
	for (unsigned r = 0; r < KVP_TIER_UNOFFERED_REASONS; r++)
		a->unoffered[r] += b->unoffered[r];
	a->ns_down += b->ns_down;
	a->ns_up += b->ns_up;
	a->remote_hit_tokens += b->remote_hit_tokens;
	a->remote_bytes_in += b->remote_bytes_in;
	a->remote_bytes_out += b->remote_bytes_out;
	a->remote_timeouts += b->remote_timeouts;
}

/* The nodes' tier counters summed (the run's), their rounds' percentiles the worst node's. */
static void sum_tiers(const struct replay_tier *tiers, unsigned nodes, struct replay_tier *sum)
{
	*sum = tiers[0];
	for (unsigned k = 1; k < nodes; k++) {
		const struct replay_tier *t = &tiers[k];

		replay_tier_add(sum, t);
		sum->slots += t->slots;
		if (t->remote_round_p50_ns > sum->remote_round_p50_ns)
			sum->remote_round_p50_ns = t->remote_round_p50_ns;
		if (t->remote_round_p99_ns > sum->remote_round_p99_ns)
			sum->remote_round_p99_ns = t->remote_round_p99_ns;
	}
}

/*
 * Time to first token, modelled as bench/vllm_step.py does: the prompt's
 * missed tokens computed at REPLAY_COMPUTE_NS a token, after the LOOKUP and
 * the ALLOC as measured (their rounds and promotions). p50 and p99, ns.
 */
#define REPLAY_COMPUTE_NS 100000ull
static void ttft(const struct replay_req *reqs, uint32_t n, const struct replay_result *res,
		 struct bench_pct *pct)
{
	uint64_t *ns = malloc((n ? n : 1) * sizeof(*ns));
	uint32_t count = 0;

	*pct = (struct bench_pct){ 0, 0 };
	if (!ns)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (!res[i].error)
			ns[count++] = res[i].lookup_ns + res[i].alloc_ns +
				      (uint64_t)(reqs[i].in_len - res[i].hit_tokens) *
				      REPLAY_COMPUTE_NS;
	if (count)
		bench_percentiles(ns, count, pct);
	free(ns);
}

/* Each node's hit rates: all, its pool's (and local tier's), the cluster's. */
static json_object *per_node_json(const struct replay_opts *o, const struct replay_req *reqs,
				  uint32_t n, const struct replay_result *res,
				  const struct replay_figures *f)
{
	json_object *a = json_object_new_array();

	for (unsigned k = 0; k < o->nodes; k++) {
		const struct replay_tier *t = &f->tiers[k];
		json_object *node = json_object_new_object();
		uint64_t prompt = 0, hit = 0;

		for (uint32_t i = 0; i < n; i++) {
			if (f->node_of[i] != k)
				continue;
			prompt += reqs[i].in_len;
			hit += res[i].hit_tokens;
		}
		json_object_object_add(node, "hit_rate", bench_json_fixed(ratio(hit, prompt), 4));
		json_object_object_add(node, "hit_rate_pool",
				       bench_json_fixed(ratio(hit - t->hit_tokens - t->remote_hit_tokens,
							      prompt), 4));
		json_object_object_add(node, "hit_rate_remote",
				       bench_json_fixed(ratio(t->remote_hit_tokens, prompt), 4));
		json_object_array_add(a, node);
	}
	return a;
}

void replay_report(const struct replay_opts *o, const struct replay_req *reqs, uint32_t n,
		   const struct replay_result *res, const struct replay_lat *lat,
		   const struct replay_held *held, const struct replay_figures *f)
{
	uint64_t ceiling = f->ceiling, lru = f->lru, elapsed_ns = f->elapsed_ns;
	struct replay_tier sum, *tier = &sum;
	uint64_t prompt = 0, hit = 0, unoffered = 0;
	uint64_t host_hit, disk_hit, host_down, disk_down, host_up, disk_up;
	struct bench_pct plain, promoting, first_token;
	uint32_t nplain, npromoting, errors = 0;

	sum_tiers(f->tiers, o->nodes, &sum);
	host_hit = tier->disk ? 0 : tier->hit_tokens;
	disk_hit = tier->disk ? tier->hit_tokens : 0;
	host_down = tier->disk ? 0 : tier->bytes_down;
	disk_down = tier->disk ? tier->bytes_down : 0;
	host_up = tier->disk ? 0 : tier->bytes_up;
	disk_up = tier->disk ? tier->bytes_up : 0;

	for (uint32_t i = 0; i < n; i++) {
		prompt += reqs[i].in_len;
		hit += res[i].hit_tokens;
		errors += res[i].error != 0;
	}
	ttft(reqs, n, res, &first_token);
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
		json_object_object_add(row, "nodes", json_object_new_int64(o->nodes));
		json_object_object_add(row, "route", json_object_new_string(replay_route_name(o->route)));
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
		json_object_object_add(row, "remote_timeouts",
				       json_object_new_int64((int64_t)tier->remote_timeouts));
		json_object_object_add(row, "tier_remote_tokens",
				       json_object_new_int64((int64_t)o->tier_remote_tokens));
		json_object_object_add(row, "redis_cluster", json_object_new_int64(o->redis_cluster));
		json_object_object_add(row, "redis_key_bytes", json_object_new_int64(
			(int64_t)(f->cluster ? f->cluster->key_bytes : 0)));
		json_object_object_add(row, "redis_keys", json_object_new_int64(
			(int64_t)(f->cluster ? f->cluster->keys : 0)));
		json_object_object_add(row, "redis_evicted_keys", json_object_new_int64(
			(int64_t)(f->cluster ? f->cluster->evicted : 0)));
		json_object_object_add(row, "per_node", per_node_json(o, reqs, n, res, f));
		/* What the cluster tier costs the network for what it gives: both ways, all hits. */
		json_object_object_add(row, "remote_bytes_per_hit_token", bench_json_fixed(
			ratio(tier->remote_bytes_in + tier->remote_bytes_out, hit), 1));
		json_object_object_add(row, "ttft_p50_ms", bench_json_fixed(first_token.median / 1e6,
									      2));
		json_object_object_add(row, "ttft_p99_ms", bench_json_fixed(first_token.p99 / 1e6, 2));
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
		if (o->restart_at > 0) {
			json_object_object_add(row, "restart_at", bench_json_fixed(o->restart_at, 3));
			json_object_object_add(row, "restart_s", bench_json_fixed(lat->restart_s, 3));
		}
		bench_json_line(row);
		return;
	}
	if (o->nodes > 1 || o->tier_remote)
		printf("%u nodes (route %s), cluster tier %s: remote hit rate %.4f, %llu rounds past "
		       "their deadline\n", o->nodes, replay_route_name(o->route),
		       o->tier_remote ? o->tier_remote : "none",
		       ratio(tier->remote_hit_tokens, prompt),
		       (unsigned long long)tier->remote_timeouts);
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
	if (o->restart_at > 0)
		printf("restart at %.0f%% of the requests: %.3f s from the request to the next run's "
		       "first hit\n", o->restart_at * 100, lat->restart_s);
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

