/* SPDX-License-Identifier: MIT */
/*
 * kvbench restart: a planned restart of a full cache (#59). A pool of N
 * blocks with a host tier of T blocks is filled (prompts of 1024 blocks
 * stored until the tier is full), then DAEMON_RESTART is sent and timed: until
 * the next run answers, and until its first LOOKUP hit; the daemon's own log
 * line gives the parts (drain, state write, teardown, exec, restore). A
 * sample of prompts, in the pool and in the tier, must look up as before.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "kvbench.h"

/* f16, one kv head of 8, one layer, blocks of 16 tokens: 512 bytes a block, K and V. */
#define BS 16
#define HD 8
#define SLOT_BYTES (2ull * BS * HD * 2)
#define PROMPT_BLOCKS 1024
#define PROMPT_TOKENS (PROMPT_BLOCKS * BS)
#define WRITE_TOKENS 4096
#define SAMPLES 64

struct opts {
	const char *daemon;
	uint32_t blocks, tier_blocks;
	bool json;
};

struct figures {
	uint64_t prompts, held, cached;
	double fill_s, answer_ms, hit_ms;
	int first_hit;
	bool same;
	char parts[256];
};

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "kvbench restart: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nUsage: kvbench restart [--blocks N] [--tier-blocks N] [--json] "
		"[--daemon PATH]\n");
	return 2;
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (!*s || *end || v == 0 || v > (1ul << 24))
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .blocks = 65536, .tier_blocks = 1u << 22 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		if (!v)
			return usage_error("%s: needs a value", a);
		if (!strcmp(a, "--daemon"))
			o->daemon = v;
		else if (!strcmp(a, "--blocks") ? parse_u32(v, &o->blocks) :
			 !strcmp(a, "--tier-blocks") ? parse_u32(v, &o->tier_blocks) : -ENOENT)
			return usage_error("bad option or value: %s", a);
		i++;
	}
	if (o->blocks < 2 * PROMPT_BLOCKS)
		return usage_error("--blocks: at least %s", "2048");
	return 0;
}

static void prompt_of(uint32_t i, uint32_t *tokens)
{
	for (uint32_t j = 0; j < PROMPT_TOKENS; j++)
		tokens[j] = i * PROMPT_TOKENS + j;
}

/* Prompt @i stored: its KV written and committed, then closed. */
static int store(struct kvp_client *c, uint32_t i, uint32_t *tokens, uint8_t *kv)
{
	prompt_of(i, tokens);
	memset(kv, (int)(i & 0xff), (size_t)WRITE_TOKENS * HD * 2);
	return bench_store(c, tokens, PROMPT_TOKENS, 1, WRITE_TOKENS, kv);
}

/* Prompt @i's LOOKUP: its hit in tokens (pool and tier), or -errno. */
static int look(struct kvp_client *c, uint32_t i, uint32_t *tokens)
{
	uint64_t h;
	int ret;

	prompt_of(i, tokens);
	ret = kvp_seq_open(c, tokens, PROMPT_TOKENS, NULL, 0, -1, &h);
	if (ret)
		return ret;
	ret = kvp_lookup(c, h, NULL, 0);
	kvp_seq_close(c, h);
	return ret;
}

static int connect_pool(const char *sock, unsigned timeout_ms, struct kvp_client **c)
{
	return kvp_connect(&(struct kvp_connect_opts){ .socket_path = sock, .pool = "restart",
						       .arena_bytes = 4u << 20,
						       .timeout_ms = timeout_ms }, c);
}

static int make_pool(struct kvp_client *admin, const struct opts *o)
{
	struct kvp_pool_params_v2 p;
	char why[KVP_REASON_MAX] = "", keys[256];
	int ret;

	snprintf(keys, sizeof(keys), "blocks = %u\nblock_size = %d\ngroups = full\nkv_heads = 1\n"
		 "head_dim = %d\ndtype = f16\nlayers_per_group = 1\nmax_len = %d\n"
		 "tier_host_bytes = %llu\n", o->blocks + 1, BS, HD, PROMPT_TOKENS,
		 (unsigned long long)o->tier_blocks * SLOT_BYTES);
	kvp_pool_params_v2_init(&p, "restart");
	ret = kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvbench restart: pool: %s\n", *why ? why : strerror(-ret));
	return ret;
}

/* Stored until the tier holds its size (or stops growing): the pool full too. */
static int fill(struct kvp_client *admin, struct kvp_client *c, const struct opts *o,
		uint32_t *tokens, uint8_t *kv, struct figures *f)
{
	uint64_t want = (uint64_t)o->blocks + o->tier_blocks, t0 = bench_now_ns();
	int ret = 0;

	for (uint32_t i = 0; !ret && (uint64_t)i * PROMPT_BLOCKS < want + PROMPT_BLOCKS; i++) {
		ret = store(c, i, tokens, kv);
		if (!ret && i % 16 == 15)
			ret = kvp_pool_sync(admin, "restart");
		f->prompts = i + 1;
	}
	if (!ret)
		ret = kvp_pool_sync(admin, "restart");
	f->fill_s = (double)(bench_now_ns() - t0) / 1e9;
	return ret;
}

static void pool_counts(struct kvp_client *admin, struct figures *f)
{
	struct kvp_stats_view v = { 0 };

	if (kvp_stats_view_take(admin, &v))
		return;
	KVP_STATS_FOR_EACH_POOL(&v, p) {
		const struct kvp_stats_tier *t;

		if (strncmp(p->name, "restart", KVP_NAME_MAX))
			continue;
		t = kvp_stats_tier_of(&v, p);
		f->cached = p->blocks_cached;
		f->held = t ? t->held : 0;
	}
	kvp_stats_view_release(&v);
}

/* The daemon's summary line of the restart, from its log. */
static void parts_of(const char *log, char *out, size_t len)
{
	char line[512];
	FILE *fp = fopen(log, "r");

	snprintf(out, len, "(not logged)");
	while (fp && fgets(line, sizeof(line), fp)) {
		const char *at = strstr(line, "started empty; ");

		if (at && strstr(line, "restart: ")) {
			snprintf(out, len, "%s", at + strlen("started empty; "));
			out[strcspn(out, "\n")] = '\0';
		}
	}
	if (fp)
		fclose(fp);
}

static int measure(const struct opts *o, const char *bin, struct figures *f)
{
	struct bench_daemon dmn = { .pid = -1 };
	struct kvp_client *admin = NULL, *c = NULL;
	uint32_t *tokens = malloc(PROMPT_TOKENS * sizeof(*tokens));
	uint8_t *kv = malloc((size_t)WRITE_TOKENS * HD * 2);
	int before[SAMPLES], ret;
	uint64_t t0, boot;
	char log[64];

	if (!tokens || !kv) {
		ret = -ENOMEM;
		goto free_bufs;
	}
	snprintf(dmn.log, sizeof(dmn.log), "/tmp/kvbench-restart-%d.log", (int)getpid());
	snprintf(log, sizeof(log), "%s", dmn.log);
	ret = bench_daemon_start(&dmn, bin, 50, NULL, -1);
	if (ret)
		goto free_bufs;
	ret = kvp_connect(&(struct kvp_connect_opts){ .socket_path = dmn.socket, .admin = true,
						      .stats_page = true }, &admin) ?:
	      make_pool(admin, o) ?: connect_pool(dmn.socket, 0, &c) ?:
	      fill(admin, c, o, tokens, kv, f);
	if (ret)
		goto stop;
	/* A sample across the prompts: the oldest gone, then the tier's, then the pool's. */
	for (uint32_t s = 0; s < SAMPLES; s++)
		before[s] = look(c, (uint32_t)((uint64_t)s * f->prompts / SAMPLES), tokens);
	pool_counts(admin, f);
	boot = kvp_boot_id(c);
	kvp_close(c);
	c = NULL;
	t0 = bench_now_ns();
	ret = kvp_daemon_restart(admin, NULL, NULL, 0);
	kvp_close(admin);
	admin = NULL;
	while (!ret) {
		ret = connect_pool(dmn.socket, 60000, &c);
		if (!ret && kvp_boot_id(c) != boot)
			break;
		if (!ret) {
			kvp_close(c);
			c = NULL;
		}
		if (bench_now_ns() - t0 > 60000000000ull)
			ret = -ETIMEDOUT;
		else
			ret = 0;
		usleep(1000);
	}
	if (ret)
		goto stop;
	f->answer_ms = (double)(bench_now_ns() - t0) / 1e6;
	f->first_hit = look(c, (uint32_t)f->prompts - 1, tokens);
	f->hit_ms = (double)(bench_now_ns() - t0) / 1e6;
	f->same = true;
	for (uint32_t s = 0; s < SAMPLES; s++)
		f->same &= look(c, (uint32_t)((uint64_t)s * f->prompts / SAMPLES), tokens) == before[s];
	ret = kvp_connect(&(struct kvp_connect_opts){ .socket_path = dmn.socket, .admin = true,
						      .stats_page = true }, &admin);
	if (!ret) {
		struct figures after = { 0 };

		pool_counts(admin, &after);
		f->same &= after.cached == f->cached && after.held == f->held;
	}
stop:
	kvp_close(c);
	kvp_close(admin);
	bench_daemon_stop(&dmn);
	parts_of(log, f->parts, sizeof(f->parts));
	unlink(log);
free_bufs:
	free(tokens);
	free(kv);
	return ret;
}

int bench_restart(int argc, char **argv)
{
	struct figures f = { 0 };
	struct opts o;
	char bin[512];
	int ret = parse(argc, argv, &o);

	if (ret)
		return ret;
	bench_daemon_path(o.daemon, bin, sizeof(bin));
	ret = measure(&o, bin, &f);
	if (ret) {
		fprintf(stderr, "kvbench restart: %s\n", strerror(-ret));
		return 1;
	}
	if (o.json) {
		json_object *row = json_object_new_object();

		json_object_object_add(row, "pool_blocks", json_object_new_int64(o.blocks));
		json_object_object_add(row, "tier_blocks", json_object_new_int64(o.tier_blocks));
		json_object_object_add(row, "cached", json_object_new_int64((int64_t)f.cached));
		json_object_object_add(row, "tier_held", json_object_new_int64((int64_t)f.held));
		json_object_object_add(row, "fill_s", bench_json_fixed(f.fill_s, 1));
		json_object_object_add(row, "answer_ms", bench_json_fixed(f.answer_ms, 1));
		json_object_object_add(row, "first_hit_ms", bench_json_fixed(f.hit_ms, 1));
		json_object_object_add(row, "first_hit_tokens", json_object_new_int(f.first_hit));
		json_object_object_add(row, "lookups_same", json_object_new_boolean(f.same));
		json_object_object_add(row, "parts", json_object_new_string(f.parts));
		puts(json_object_to_json_string_ext(row, JSON_C_TO_STRING_PLAIN));
		json_object_put(row);
	} else {
		printf("restart: pool %u blocks (%llu cached), host tier %u blocks (%llu held), "
		       "filled in %.1f s\n", o.blocks, (unsigned long long)f.cached, o.tier_blocks,
		       (unsigned long long)f.held, f.fill_s);
		printf("restart: command to the next run's answer %.1f ms, to its first hit (%d "
		       "tokens) %.1f ms; %d sampled lookups %s\n", f.answer_ms, f.first_hit, f.hit_ms,
		       SAMPLES, f.same ? "as before" : "CHANGED");
		printf("restart: the daemon's parts: %s\n", f.parts);
	}
	return f.same && f.first_hit > 0 ? 0 : 1;
}
