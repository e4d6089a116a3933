/* SPDX-License-Identifier: MIT */
/* Pool parameters from key=value words: shared by kvctl, the config file and engines. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libkvpool.h"

void kvp_pool_params_init(struct kvp_pool_params *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	if (name)
		strncpy(p->name, name, sizeof(p->name) - 1);
	p->caching = 1;
	p->max_len = 2147483647u;
	p->max_step_tokens = 1;
}

static int parse_u32(const char *s, uint32_t min, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int parse_choice(const char *s, const char *const *names, unsigned n, uint8_t *out)
{
	for (unsigned i = 0; i < n; i++) {
		if (!strcmp(s, names[i])) {
			*out = (uint8_t)i;
			return 0;
		}
	}
	return -EINVAL;
}

static const char *const kinds[] = { "full", "swa", "rswa", "chunked", "cyclic" };

const char *kvp_kind_name(unsigned kind)
{
	return kind < 5 ? kinds[kind] : "unknown";
}

void kvp_pool_params_groups(const struct kvp_pool_params *p, char *buf, size_t len)
{
	size_t off = 0;

	if (len)
		buf[0] = '\0';
	for (unsigned g = 0; g < p->num_groups && g < KVP_MAX_GROUPS && off < len; g++) {
		int n = p->group_kind[g] == KVP_KIND_FULL ?
			snprintf(buf + off, len - off, "%sfull", g ? " " : "") :
			snprintf(buf + off, len - off, "%s%s:%u", g ? " " : "",
				 kvp_kind_name(p->group_kind[g]), p->group_param[g]);

		off += n > 0 ? (size_t)n : 0;
	}
}

/* "full swa:128 rswa:64,chunked:256": kinds with their parameter, blank or comma separated. */
static int parse_groups(struct kvp_pool_params *p, const char *spec)
{
	static const uint32_t min_param[] = { 0, 2, 1, 1, 1 };
	char buf[512], *save = NULL;
	unsigned n = 0;

	if (strlen(spec) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, spec);
	for (char *tok = strtok_r(buf, " ,\t", &save); tok; tok = strtok_r(NULL, " ,\t", &save)) {
		char *colon = strchr(tok, ':');
		uint8_t kind;
		uint32_t param = 0;

		if (n == KVP_MAX_GROUPS)
			return -EINVAL;
		if (colon)
			*colon = '\0';
		if (parse_choice(tok, kinds, 5, &kind))
			return -EINVAL;
		if ((kind == KVP_KIND_FULL) != !colon)
			return -EINVAL;
		if (colon && parse_u32(colon + 1, min_param[kind], &param))
			return -EINVAL;
		p->group_kind[n] = kind;
		p->group_param[n] = param;
		n++;
	}
	if (n == 0)
		return -EINVAL;
	p->num_groups = (uint8_t)n;
	return 0;
}

int kvp_pool_params_set(struct kvp_pool_params *p, const char *key, const char *value)
{
	static const char *const on_off[] = { "off", "on" };
	static const char *const orders[] = { "split", "append" };
	static const char *const publish[] = { "commit", "alloc" };
	static const char *const dtypes[] = { "f32", "f16", "bf16" };
	uint8_t v8 = 0;
	int ret;

	if (!strcmp(key, "blocks"))
		return parse_u32(value, 2, &p->num_blocks);
	if (!strcmp(key, "block_size"))
		return parse_u32(value, 1, &p->block_size);
	if (!strcmp(key, "caching"))
		return parse_choice(value, on_off, 2, &p->caching);
	if (!strcmp(key, "free_order"))
		return parse_choice(value, orders, 2, &p->free_order);
	if (!strcmp(key, "publish"))
		return parse_choice(value, publish, 2, &p->publish);
	if (!strcmp(key, "max_len"))
		return parse_u32(value, 1, &p->max_len);
	if (!strcmp(key, "max_step_tokens"))
		return parse_u32(value, 1, &p->max_step_tokens);
	if (!strcmp(key, "groups"))
		return parse_groups(p, value);
	if (!strcmp(key, "kv_heads"))
		return parse_u32(value, 1, &p->kv_heads);
	if (!strcmp(key, "head_dim"))
		return parse_u32(value, 1, &p->head_dim);
	if (!strcmp(key, "layers_per_group"))
		return parse_u32(value, 1, &p->layers_per_group);
	if (!strcmp(key, "dtype")) {
		ret = parse_choice(value, dtypes, 3, &v8);
		if (!ret)
			p->dtype = v8;
		return ret;
	}
	return -EINVAL;
}

void kvp_pool_params_v2_init(struct kvp_pool_params_v2 *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	kvp_pool_params_init(&p->v1, name);
}

int kvp_pool_params_v2_set(struct kvp_pool_params_v2 *p, const char *key, const char *value)
{
	static const char *const backends[] = { "host", "cuda" };
	static const char *const layouts[] = { "default", "block", "layer" };
	uint8_t v8 = 0;
	int ret;

	if (!strcmp(key, "backend") || !strcmp(key, "layout")) {
		bool backend = key[0] == 'b';

		ret = parse_choice(value, backend ? backends : layouts, backend ? 2 : 3, &v8);
		if (!ret)
			*(backend ? &p->backend : &p->layout) = v8;
		return ret;
	}
	if (!strcmp(key, "device"))
		return parse_u32(value, 0, &p->device);
	if (!strcmp(key, "namespace")) {
		if (strlen(value) >= sizeof(p->namespace_))
			return -EINVAL;
		memset(p->namespace_, 0, sizeof(p->namespace_));
		strcpy(p->namespace_, value);
		return 0;
	}
	return kvp_pool_params_set(&p->v1, key, value);
}

/* The limits of uapi/kvpool.h's struct kvp_pool_params(_v2), in kvp_pool_params_v2_set's words. */
static const struct {
	const char *key, *help;
} param_help[] = {
	{ "blocks", "2..16777216" },
	{ "block_size", "1..1073741824" },
	{ "groups", "1..16 of full, swa:W (W 2..1073741824), rswa:W, cyclic:W (W 1..1073741824), "
		    "chunked:C (C 1..1073741824)" },
	{ "caching", "on|off" },
	{ "free_order", "split|append" },
	{ "publish", "commit|alloc" },
	{ "max_len", "1..4294967295" },
	{ "max_step_tokens", "1..1073741824" },
	{ "kv_heads", "1..1024" },
	{ "head_dim", "1..1024" },
	{ "layers_per_group", "1..1024" },
	{ "dtype", "f32|f16|bf16" },
	{ "backend", "host|cuda" },
	{ "device", "a CUDA device ordinal (0 for host)" },
	{ "layout", "default|block|layer" },
	{ "namespace", "a name of 1..31 bytes, or empty" },
};

const char *kvp_pool_param_help(const char *key)
{
	/* A literal, not built from the table: callers may be on any thread. */
	if (!key)
		return "blocks, block_size, groups, caching, free_order, publish, max_len, "
		       "max_step_tokens, kv_heads, head_dim, layers_per_group, dtype, backend, "
		       "device, layout, namespace";
	for (size_t i = 0; i < sizeof(param_help) / sizeof(param_help[0]); i++)
		if (!strcmp(key, param_help[i].key))
			return param_help[i].help;
	return NULL;
}
