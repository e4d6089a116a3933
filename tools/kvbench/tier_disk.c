/* SPDX-License-Identifier: MIT */
/*
 * kvbench tier-disk: a pool's disk tier against the disk (docs/tiers.md, #39):
 *  - fill: prompts of 64 blocks stored until the tier's file is full;
 *  - promotion: ALLOCs whose whole prompt comes up from the disk, their bytes
 *    over their time, beside fio's io_uring O_DIRECT random reads at the same
 *    block size and queue depth in the same directory, run right after;
 *  - restart: the daemon stopped and started again, the pool made again,
 *    until a stored prompt's first hit.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "kvbench.h"

/* bf16, 8 kv heads of 128, 4 layers, blocks of 16 tokens: 256 KiB a block, K and V. */
#define BS 16
#define KVH 8
#define HD 128
#define LAYERS 4
#define BLOCK_BYTES (2ull * LAYERS * BS * KVH * HD * 2)
#define PROMPT_BLOCKS 64
#define PROMPT_TOKENS (PROMPT_BLOCKS * BS)
#define POOL_BLOCKS 1024
#define WRITE_TOKENS 128          /* a WRITE_KV: 256 KiB of K and as much of V */
#define LANE_DEPTH 32             /* the disk lane's batch at this block size (8 MiB) */

struct opts {
	const char *dir, *daemon;
	uint64_t gib;
	unsigned promotions;
	bool json;
};

static int usage_error(const char *fmt, const char *arg)
{
	return bench_usage_error("tier-disk", fmt, arg);
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .gib = 10, .promotions = 12 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;

		if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		if (!v)
			return usage_error("option '%s' needs a value", a);
		i++;
		if (!strcmp(a, "--dir"))
			o->dir = v;
		else if (!strcmp(a, "--daemon"))
			o->daemon = v;
		else if (!strcmp(a, "--gib") && !bench_parse_u64(v, 1, 1024, &n))
			o->gib = n;
		else if (!strcmp(a, "--promotions") && !bench_parse_u64(v, 1, 15, &n))
			o->promotions = (unsigned)n;
		else
			return usage_error("bad option or value '%s'", a);
	}
	if (!o->dir)
		return usage_error("%s", "missing --dir DIR (where the tier's file and fio's go)");
	return 0;
}

static void keys_of(const struct opts *o, char *keys, size_t len)
{
	snprintf(keys, len, "blocks = %u\nblock_size = %u\ngroups = full\nkv_heads = %u\n"
		 "head_dim = %u\ndtype = bf16\nlayers_per_group = %u\ntier_disk_bytes = %llu\n"
		 "tier_disk_path = %s\n", POOL_BLOCKS + 1, BS, KVH, HD, LAYERS,
		 (unsigned long long)(o->gib << 30), o->dir);
}

static int make_pool(struct kvp_client *admin, const struct opts *o)
{
	struct kvp_pool_params_v2 p;
	char keys[1024 + 4096], why[KVP_REASON_MAX] = "";
	int ret;

	kvp_pool_params_v2_init(&p, "tierbench");
	keys_of(o, keys, sizeof(keys));
	ret = kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvbench tier-disk: pool: %s\n", *why ? why : strerror(-ret));
	return ret;
}

static void prompt_of(uint32_t i, uint32_t *tokens)
{
	for (uint32_t j = 0; j < PROMPT_TOKENS; j++)
		tokens[j] = i * PROMPT_TOKENS + j;
}

/* Prompt @i stored: its KV written (a pattern of its own) and committed, then closed. */
static int store(struct kvp_client *c, uint32_t i, uint32_t *tokens, uint8_t *kv)
{
	prompt_of(i, tokens);
	memset(kv, (int)(i & 0xff), (size_t)WRITE_TOKENS * KVH * HD * 2);
	return bench_store(c, tokens, PROMPT_TOKENS, LAYERS, WRITE_TOKENS, kv);
}

/* An ALLOC with the cache for prompt @i, timed: its hit in tokens, or -errno. */
static int promote(struct kvp_client *c, uint32_t i, uint32_t *tokens, uint64_t *ns, bool keep)
{
	uint64_t h, t;
	uint32_t hit = 0;
	int ret;

	prompt_of(i, tokens);
	ret = kvp_seq_open(c, tokens, PROMPT_TOKENS, NULL, 0, -1, &h);
	if (ret)
		return ret;
	t = bench_now_ns();
	ret = kvp_alloc(c, h, 1, 0, true, &hit, NULL, 0);
	*ns = bench_now_ns() - t;
	if (!keep)
		kvp_seq_close(c, h);
	return ret ? ret : (int)hit;
}

static const struct kvp_stats_tier *tier_row(struct kvp_stats_view *v)
{
	KVP_STATS_FOR_EACH_POOL(v, p)
		if (!strncmp(p->name, "tierbench", KVP_NAME_MAX))
			return kvp_stats_tier_of(v, p);
	return NULL;
}

/*
 * fio's random O_DIRECT reads on io_uring at @bs and @depth over a file of
 * @gib GiB in @dir, for @seconds: bytes a second, or 0 (no fio).
 */
static double fio_bw(const char *dir, uint64_t gib, uint64_t bs, unsigned depth,
		     unsigned seconds)
{
	char cmd[8192], out[1 << 16];
	json_object *root, *jobs, *read, *bw;
	double v = 0;
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "fio --name=kvbench --filename=%s/fio.dat --size=%llug "
		 "--bs=%llu --rw=randread --direct=1 --ioengine=io_uring --iodepth=%u "
		 "--runtime=%u --time_based --output-format=json 2>/dev/null", dir,
		 (unsigned long long)gib, (unsigned long long)bs, depth, seconds);
	p = popen(cmd, "r");
	if (!p)
		return 0;
	n = fread(out, 1, sizeof(out) - 1, p);
	pclose(p);
	out[n] = '\0';
	root = json_tokener_parse(out);
	if (root && json_object_object_get_ex(root, "jobs", &jobs) &&
	    json_object_array_length(jobs) > 0 &&
	    json_object_object_get_ex(json_object_array_get_idx(jobs, 0), "read", &read) &&
	    json_object_object_get_ex(read, "bw_bytes", &bw))
		v = json_object_get_double(bw);
	json_object_put(root);
	return v;
}

static int connect_admin(const char *sock, struct kvp_client **admin)
{
	return kvp_connect(&(struct kvp_connect_opts){ .socket_path = sock, .admin = true,
						      .stats_page = true, .monitor = true },
			   admin);
}

static int connect_client(const char *sock, struct kvp_client **c)
{
	return kvp_connect(&(struct kvp_connect_opts){ .socket_path = sock, .pool = "tierbench",
						      .arena_bytes = 4u << 20 }, c);
}

struct figures {
	uint64_t slots, stored, fill_ns, promoted_bytes, promote_ns, restored;
	double daemon_mb_s, fio_depth, fio_64, restart_s, daemon_s, pool_s;
	int first_hit;
};

static int fill(struct kvp_client *admin, struct kvp_client *c, uint32_t *tokens, uint8_t *kv,
		struct figures *f, uint32_t *prompts)
{
	struct kvp_stats_view v = { 0 };
	const struct kvp_stats_tier *t;
	uint64_t t0 = bench_now_ns();
	uint32_t i;
	int ret = kvp_stats_view_take(admin, &v);

	t = ret ? NULL : tier_row(&v);
	f->slots = t ? t->slots : 0;
	kvp_stats_view_release(&v);
	if (!f->slots)
		return -ENODEV;
	/* The tier's slots and the pool's blocks: everything but the first pool's worth stays. */
	*prompts = (uint32_t)((f->slots + POOL_BLOCKS) / PROMPT_BLOCKS);
	for (i = 0; i < *prompts && !ret; i++)
		ret = store(c, i, tokens, kv) ?: kvp_pool_sync(admin, "tierbench");
	/* The last prompts, still in the pool, pushed down by a pool's worth of new blocks. */
	for (uint32_t k = 0; k < POOL_BLOCKS / PROMPT_BLOCKS && !ret; k++)
		ret = store(c, *prompts + k, tokens, kv) ?: kvp_pool_sync(admin, "tierbench");
	f->fill_ns = bench_now_ns() - t0;
	if (!ret && !kvp_stats_view_take(admin, &v) && (t = tier_row(&v)))
		f->stored = t->held;
	kvp_stats_view_release(&v);
	return ret;
}

static int measure(const struct opts *o, const char *bin, struct figures *f)
{
	struct bench_daemon dmn = { .pid = -1 };
	struct kvp_client *admin = NULL, *c = NULL;
	struct kvp_stats_view v = { 0 };
	const struct kvp_stats_tier *t;
	uint32_t *tokens = malloc(PROMPT_TOKENS * sizeof(*tokens)), prompts = 0;
	uint8_t *kv = malloc((size_t)WRITE_TOKENS * KVH * HD * 2);
	uint64_t up0 = 0, ns0 = 0, t0;
	char path[4096 + 16];
	int ret = tokens && kv ? bench_daemon_start(&dmn, bin, 50, NULL, -1) : -ENOMEM;

	if (!ret)
		ret = connect_admin(dmn.socket, &admin) ?: make_pool(admin, o) ?:
		      connect_client(dmn.socket, &c);
	if (!ret)
		ret = fill(admin, c, tokens, kv, f, &prompts);
	if (!ret && !kvp_stats_view_take(admin, &v) && (t = tier_row(&v))) {
		up0 = t->bytes_up;
		ns0 = t->ns_up;
	}
	kvp_stats_view_release(&v);
	/* Prompts from the middle of the tier: each comes up whole, 64 blocks in one ALLOC. */
	for (unsigned k = 0; k < o->promotions && !ret; k++) {
		uint64_t ns;
		int hit = promote(c, prompts / 2 + k, tokens, &ns, false);

		if (hit < 0)
			ret = hit;
		else if (hit == PROMPT_TOKENS - BS) /* the last block is never a hit */
			f->promoted_bytes += (PROMPT_BLOCKS - 1) * BLOCK_BYTES;
		f->promote_ns += ns;
	}
	if (!ret && !kvp_stats_view_take(admin, &v) && (t = tier_row(&v)) && t->ns_up > ns0)
		f->daemon_mb_s = (double)(t->bytes_up - up0) / (double)(t->ns_up - ns0) * 1000.0;
	kvp_stats_view_release(&v);
	kvp_close(c);
	kvp_close(admin);
	c = admin = NULL;
	if (dmn.pid > 0)
		bench_daemon_stop(&dmn);
	if (!ret) {
		uint64_t gib = o->gib < 2 ? o->gib : 2;
		unsigned seconds = o->gib < 2 ? 3 : 8;

		f->fio_depth = fio_bw(o->dir, gib, BLOCK_BYTES, LANE_DEPTH, seconds);
		f->fio_64 = fio_bw(o->dir, gib, BLOCK_BYTES, 64, seconds);
	}
	/* Restart: a new daemon, the pool made again, a stored prompt's first hit. */
	t0 = bench_now_ns();
	if (!ret)
		ret = bench_daemon_start(&dmn, bin, 50, NULL, -1) ?:
		      connect_admin(dmn.socket, &admin);
	f->daemon_s = (double)(bench_now_ns() - t0) / 1e9;
	if (!ret)
		ret = make_pool(admin, o); /* its index read back from the file */
	f->pool_s = (double)(bench_now_ns() - t0) / 1e9 - f->daemon_s;
	if (!ret)
		ret = connect_client(dmn.socket, &c);
	if (!ret) {
		uint64_t ns;

		f->first_hit = promote(c, prompts / 2 + o->promotions, tokens, &ns, true);
		f->restart_s = (double)(bench_now_ns() - t0) / 1e9;
		if (!kvp_stats_view_take(admin, &v) && (t = tier_row(&v)))
			f->restored = t->restored;
		kvp_stats_view_release(&v);
	}
	kvp_close(c); /* its sequence goes: the pool is free to go */
	if (admin && bench_pool_drop(admin, "tierbench"))
		fprintf(stderr, "kvbench tier-disk: %s/tierbench.kvtier left behind\n", o->dir);
	kvp_close(admin);
	if (dmn.pid > 0)
		bench_daemon_stop(&dmn);
	snprintf(path, sizeof(path), "%s/fio.dat", o->dir);
	unlink(path);
	free(tokens);
	free(kv);
	return ret;
}

int bench_tier_disk(int argc, char **argv)
{
	struct figures f = { 0 };
	struct opts o;
	char bin[4096];
	double mb_s;
	int ret = parse(argc, argv, &o);

	if (ret)
		return ret;
	bench_daemon_path(o.daemon, bin, sizeof(bin));
	ret = measure(&o, bin, &f);
	if (ret) {
		fprintf(stderr, "kvbench tier-disk: %s\n", strerror(-ret));
		return 1;
	}
	mb_s = f.promote_ns ? (double)f.promoted_bytes / (double)f.promote_ns * 1000.0 : 0;
	if (o.json) {
		json_object *row = bench_json_row();

		json_object_object_add(row, "benchmark", json_object_new_string("tier-disk"));
		json_object_object_add(row, "tier_gib", json_object_new_int64((int64_t)o.gib));
		json_object_object_add(row, "block_bytes", json_object_new_int64(BLOCK_BYTES));
		json_object_object_add(row, "slots", json_object_new_int64((int64_t)f.slots));
		json_object_object_add(row, "stored_blocks", json_object_new_int64((int64_t)f.stored));
		json_object_object_add(row, "fill_s", bench_json_fixed(f.fill_ns / 1e9, 1));
		json_object_object_add(row, "promotion_mb_per_s", bench_json_fixed(mb_s, 1));
		json_object_object_add(row, "promotion_daemon_mb_per_s",
				       bench_json_fixed(f.daemon_mb_s, 1));
		json_object_object_add(row, "fio_mb_per_s_depth32", bench_json_fixed(f.fio_depth / 1e6, 1));
		json_object_object_add(row, "fio_mb_per_s_depth64", bench_json_fixed(f.fio_64 / 1e6, 1));
		json_object_object_add(row, "promotion_vs_fio",
				       bench_json_fixed(f.fio_depth ? mb_s * 1e6 / f.fio_depth : 0, 3));
		json_object_object_add(row, "restored_blocks", json_object_new_int64((int64_t)f.restored));
		json_object_object_add(row, "restart_to_first_hit_s", bench_json_fixed(f.restart_s, 3));
		json_object_object_add(row, "restart_daemon_s", bench_json_fixed(f.daemon_s, 3));
		json_object_object_add(row, "restart_pool_create_s", bench_json_fixed(f.pool_s, 3));
		json_object_object_add(row, "first_hit_tokens", json_object_new_int64(f.first_hit));
		return bench_json_line(row) ? 1 : 0;
	}
	printf("tier-disk %s: %llu GiB, %llu slots of %llu KiB: %llu blocks stored in %.1f s\n",
	       o.dir, (unsigned long long)o.gib, (unsigned long long)f.slots,
	       (unsigned long long)(BLOCK_BYTES >> 10), (unsigned long long)f.stored,
	       f.fill_ns / 1e9);
	printf("promotion: %.1f MB/s (ALLOC to completion; the daemon's copies %.1f MB/s); fio "
	       "io_uring O_DIRECT randread %llu KiB: %.1f MB/s at depth %u (%.2f of it), %.1f MB/s "
	       "at 64\n", mb_s, f.daemon_mb_s, (unsigned long long)(BLOCK_BYTES >> 10),
	       f.fio_depth / 1e6, LANE_DEPTH, f.fio_depth ? mb_s * 1e6 / f.fio_depth : 0,
	       f.fio_64 / 1e6);
	printf("restart: %llu blocks restored, first hit (%d tokens) %.3f s after the daemon's "
	       "start (the daemon up %.3f s, the pool made with its index read back %.3f s)\n",
	       (unsigned long long)f.restored, f.first_hit, f.restart_s, f.daemon_s, f.pool_s);
	return 0;
}
