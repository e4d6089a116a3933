/* SPDX-License-Identifier: MIT */
/*
 * POOL_CREATE v3 (#38's one ABI extension for the keys that follow): v2 and a
 * text of `key = value` lines read with the [pool.NAME] table.
 *   - an admin connection is granted KVP_FEAT_POOL_KEYS;
 *   - a pool whose every key is in the text (v2 as kvp_pool_params_v2_init
 *     leaves it: defaults, no blocks, no groups), with
 *     comments and blank lines, is the pool they say (PoolInfo exactly);
 *   - a key in the text replaces v2's field; v2's fields stand otherwise;
 *   - refusals name the key, exactly, and create nothing: an unknown key, a
 *     key set twice, a bad value (the config file's words), a line without
 *     '=', a NUL byte in the text (raw), reserved fields not zero (raw), a len
 *     that is not sizeof(v3) + keys_len (raw), keys_len over the most (raw);
 *   - v1 and v2 requests still create pools.
 * Why: later keys (tiers, KV events) ride this text and need no new struct;
 * a client that sends a bad one must be told which key, as an operator is by
 * the config file.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"

#define V3 sizeof(struct kvp_pool_params_v3)

static void same_text(const char *got, const char *want)
{
	if (strcmp(got, want)) {
		fprintf(stderr, "got  \"%s\"\nwant \"%s\"\n", got, want);
		CHECK(!"the reason texts differ");
	}
}

/* v2 as kvp_pool_params_v2_init leaves it: the defaults, no blocks, no groups. */
static void named_only(struct kvp_pool_params_v2 *p, const char *name)
{
	kvp_pool_params_v2_init(p, name);
}

/* The pool @name's info as an attached client sees it. */
static struct kvp_pool_info info_of(const struct daemon *d, const char *name)
{
	struct kvp_client *c = connect_or_die(d, name, NULL, false);
	struct kvp_pool_info info = *kvp_pool_info(c);

	kvp_close(c);
	return info;
}

static void refused(struct kvp_client *admin, const char *keys, const char *want)
{
	struct kvp_pool_params_v2 p;
	char why[KVP_REASON_MAX] = "stale";

	named_only(&p, "refused");
	CHECK_EQ(kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why)), -EINVAL);
	same_text(why, want);
}

/* A raw POOL_CREATE of @len bytes at arena offset 0 (the caller wrote them): res, reason. */
static int raw_create(struct kvp_client *c, uint32_t len, char *why)
{
	char *arena = kvp_arena(c, NULL);
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;
	uint32_t out = 8192;
	int res;

	CHECK(sqe != NULL);
	*sqe = (struct kvp_sqe){ .opcode = KVP_OP_POOL_CREATE, .len = len, .out_addr = out,
				 .out_len = KVP_REASON_MAX, .user_data = 9 };
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK_EQ(cqe->user_data, 9);
	res = cqe->res;
	if (res < 0)
		memcpy(why, arena + out, KVP_REASON_MAX);
	kvp_cqe_seen(c, cqe);
	return res;
}

/* v3 with @text (@len bytes, NULs allowed) at arena offset 0, for raw_create. */
static void stage_v3(struct kvp_client *c, const char *name, const char *text, uint32_t len)
{
	char *arena = kvp_arena(c, NULL);
	struct kvp_pool_params_v3 v3 = { .keys_len = len };

	named_only(&v3.v2, name);
	memcpy(arena, &v3, V3);
	memcpy(arena + V3, text, len);
}

int main(void)
{
	static const char *const geometry[] = { "blocks=16", "block_size=4", "groups=full", NULL };
	static const char keys[] = "# a hybrid pool with KV\n"
				   "blocks = 32\n"
				   "\n"
				   "block_size=4\n"
				   "  groups = full swa:8   ; the window\n"
				   "kv_heads = 2\r\n"
				   "head_dim = 8\n"
				   "layers_per_group = 2\n"
				   "dtype = bf16";
	struct daemon d = { 0 };
	struct kvp_client *admin;
	struct kvp_pool_params_v2 p;
	struct kvp_pool_info info;
	char why[KVP_REASON_MAX];

	watchdog_start("test_pool_keys", 60);
	CHECK_EQ(daemon_start(&d, NULL), 0);
	watchdog_watch(&d);
	admin = connect_or_die(&d, NULL, NULL, true);
	CHECK(kvp_features(admin) & KVP_FEAT_POOL_KEYS);

	/* Every key in the text. */
	named_only(&p, "text");
	CHECK_EQ(kvp_pool_create_v3(admin, &p, keys, 0, why, sizeof(why)), 0);
	same_text(why, "");
	info = info_of(&d, "text");
	CHECK_EQ(info.num_blocks, 32);
	CHECK_EQ(info.block_size, 4);
	CHECK_EQ(info.num_groups, 2);
	CHECK_EQ(info.group_kind[0], KVP_KIND_FULL);
	CHECK_EQ(info.group_kind[1], KVP_KIND_SWA);
	CHECK_EQ(info.group_param[1], 8);
	CHECK_EQ(info.kv_heads, 2);
	CHECK_EQ(info.head_dim, 8);
	CHECK_EQ(info.layers_per_group, 2);
	CHECK_EQ(info.dtype, KVP_DTYPE_BF16);

	/* The text's keys over v2's fields; v2's stand where the text is silent. */
	pool_params_or_die(&p, "over", geometry);
	CHECK_EQ(kvp_pool_create_v3(admin, &p, "blocks = 24\nmax_len = 100\n", 0, why,
				    sizeof(why)), 0);
	info = info_of(&d, "over");
	CHECK_EQ(info.num_blocks, 24);
	CHECK_EQ(info.block_size, 4);
	CHECK_EQ(info.max_len, 100);
	pool_params_or_die(&p, "empty", geometry);
	CHECK_EQ(kvp_pool_create_v3(admin, &p, NULL, 0, why, sizeof(why)), 0);
	CHECK_EQ(info_of(&d, "empty").num_blocks, 16);

	/* Refusals, in the config file's words, naming the key. */
	refused(admin, "blocks = 16\nbogus = 1\n", "bogus: unknown pool key");
	refused(admin, "blocks = 16\nblock_size = 4\nblocks = 8\n", "blocks set twice");
	refused(admin, "blocks = 1\n", "blocks = 1: out of range (2..16777216)");
	refused(admin, "caching = yes\n", "caching = yes: not one of on, off");
	refused(admin, "blocks 16\n", "'blocks 16': not key = value");
	refused(admin, " = 3\n", "'= 3': no key before '='");

	/* Raw: what no library call sends. */
	stage_v3(admin, "raw", "blocks = 16\0x", 13);
	CHECK_EQ(raw_create(admin, V3 + 13, why), -EINVAL);
	same_text(why, "the keys' text holds a NUL byte");
	stage_v3(admin, "raw", "blocks = 16\n", 12);
	CHECK_EQ(raw_create(admin, V3 + 13, why), -EINVAL);
	same_text(why, "len 325: must be 312 + keys_len (12, at most 4096)");
	stage_v3(admin, "raw", "", 0);
	((struct kvp_pool_params_v3 *)kvp_arena(admin, NULL))->keys_len = KVP_POOL_KEYS_MAX + 1;
	CHECK_EQ(raw_create(admin, V3 + KVP_POOL_KEYS_MAX + 1, why), -EINVAL);
	same_text(why, "len 4409: must be 312 + keys_len (4097, at most 4096)");
	stage_v3(admin, "raw", "", 0);
	((struct kvp_pool_params_v3 *)kvp_arena(admin, NULL))->resv[2] = 1;
	CHECK_EQ(raw_create(admin, V3, why), -EINVAL);
	same_text(why, "kvp_pool_params_v3: reserved fields must be zero");
	CHECK_EQ(raw_create(admin, sizeof(struct kvp_pool_params_v2) + 8, why), -EINVAL);
	same_text(why, "len 288: must be 168 (v1), 280 (v2) or 312 and keys (v3) inside the arena");
	CHECK_EQ(kvp_attach(admin, "refused"), -ENODEV);
	CHECK_EQ(kvp_attach(admin, "raw"), -ENODEV);

	/* v1 and v2 as before. */
	pool_params_or_die(&p, "v2", geometry);
	CHECK_EQ(kvp_pool_create_v2(admin, &p, 0, why, sizeof(why)), 0);
	strcpy(p.v1.name, "v1");
	CHECK_EQ(kvp_pool_create(admin, &p.v1), 0);
	CHECK_EQ(info_of(&d, "v1").num_blocks, 16);
	CHECK_EQ(info_of(&d, "v2").num_blocks, 16);

	kvp_close(admin);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	printf("ok\n");
	return 0;
}
