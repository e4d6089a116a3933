/* SPDX-License-Identifier: MIT */
/*
 * The config file (INI, read with inih):
 *
 *   [daemon]            socket, socket_group, spin_us, budget, max_clients, event_loop
 *   [pool.NAME]         kvctl's pool keys: blocks, block_size, groups, ...
 *   [namespace.NAME]    uids = 1000 1001   (who may use the namespace), and quotas
 *   [quota]             quotas of every uid
 *   [uid.N]             quotas of uid N (keys it does not set: [quota]'s)
 * Quota keys: max_clients, max_sequences, max_tokens, max_arena_bytes,
 * max_blocks; a number or "unlimited".
 */
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpoold.h"
#include "../lib/libkvpool.h"

struct load_ctx {
	struct kvpd_config *cfg;
	const char *path;
	int error;
};

static const char *keep_string(struct kvpd_config *cfg, const char *s)
{
	/* Config strings live as long as the daemon: a leak-free arena of one allocation each. */
	size_t len = strlen(s) + 1;
	char **slot, *copy = malloc(sizeof(char *) + len);

	if (!copy)
		return NULL;
	slot = (char **)copy;
	*slot = cfg->strings;
	cfg->strings = copy;
	return memcpy(copy + sizeof(char *), s, len);
}

static int parse_unsigned(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v > 1000000000ul || *s == '-')
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int kvpd_parse_event_loop(const char *s, enum kvpd_evloop_choice *out)
{
	static const char *const names[] = { [KVPD_EVLOOP_AUTO] = "auto",
					     [KVPD_EVLOOP_IO_URING] = "io_uring",
					     [KVPD_EVLOOP_EPOLL] = "epoll" };

	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(s, names[i])) {
			*out = (enum kvpd_evloop_choice)i;
			return 0;
		}
	}
	return -EINVAL;
}

static const char *const quota_keys[KVP_QUOTA_KEYS] = {
	[KVP_QUOTA_CLIENTS] = "max_clients",         [KVP_QUOTA_SEQUENCES] = "max_sequences",
	[KVP_QUOTA_TOKENS] = "max_tokens",           [KVP_QUOTA_ARENA_BYTES] = "max_arena_bytes",
	[KVP_QUOTA_BLOCKS] = "max_blocks",
};

void kvpd_quota_defaults(struct kvpd_quota *q)
{
	q->limit[KVP_QUOTA_CLIENTS] = 32;
	q->limit[KVP_QUOTA_SEQUENCES] = 65536;
	q->limit[KVP_QUOTA_TOKENS] = 1u << 24;
	q->limit[KVP_QUOTA_ARENA_BYTES] = 256u << 20;
	q->limit[KVP_QUOTA_BLOCKS] = KVP_QUOTA_UNLIMITED;
}

/* A quota key into @q (its bit into *@set); -ENOENT: not a quota key. */
static int quota_key(struct kvpd_quota *q, unsigned *set, const char *name, const char *value)
{
	for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++) {
		char *end;

		if (strcmp(name, quota_keys[k]))
			continue;
		if (!strcmp(value, "unlimited")) {
			q->limit[k] = KVP_QUOTA_UNLIMITED;
		} else {
			errno = 0;
			q->limit[k] = strtoull(value, &end, 10);
			if (errno || end == value || *end || *value == '-')
				return -EINVAL;
		}
		if (set)
			*set |= 1u << k;
		return 0;
	}
	return -ENOENT;
}

static int uid_key(struct kvpd_config *cfg, const char *uid_text, const char *name,
		   const char *value)
{
	struct kvpd_uid_quota *u = NULL, *grown;
	unsigned uid;

	if (parse_unsigned(uid_text, &uid))
		return -EINVAL;
	for (unsigned i = 0; i < cfg->nuid_quotas && !u; i++)
		if (cfg->uid_quotas[i].uid == uid)
			u = &cfg->uid_quotas[i];
	if (!u) {
		grown = realloc(cfg->uid_quotas, (cfg->nuid_quotas + 1) * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		cfg->uid_quotas = grown;
		u = &cfg->uid_quotas[cfg->nuid_quotas++];
		*u = (struct kvpd_uid_quota){ .uid = uid };
	}
	return quota_key(&u->quota, &u->set, name, value) ? -EINVAL : 0;
}

static int daemon_key(struct kvpd_config *cfg, const char *name, const char *value)
{
	if (!strcmp(name, "socket"))
		return (cfg->socket_path = keep_string(cfg, value)) ? 0 : -ENOMEM;
	if (!strcmp(name, "socket_group"))
		return (cfg->socket_group = keep_string(cfg, value)) ? 0 : -ENOMEM;
	if (!strcmp(name, "plugin_dir"))
		return (cfg->plugin_dir = keep_string(cfg, value)) ? 0 : -ENOMEM;
	if (!strcmp(name, "spin_us"))
		return parse_unsigned(value, &cfg->spin_us);
	if (!strcmp(name, "budget"))
		return parse_unsigned(value, &cfg->budget) ?: (cfg->budget ? 0 : -EINVAL);
	if (!strcmp(name, "max_clients"))
		return parse_unsigned(value, &cfg->max_clients) ?: (cfg->max_clients ? 0 : -EINVAL);
	if (!strcmp(name, "event_loop"))
		return kvpd_parse_event_loop(value, &cfg->event_loop);
	return -EINVAL;
}

static struct kvp_pool_params_v2 *pool_section(struct kvpd_config *cfg, const char *name)
{
	for (unsigned i = 0; i < cfg->npools; i++)
		if (!strcmp(cfg->pools[i].v1.name, name))
			return &cfg->pools[i];
	if (cfg->npools == KVPD_MAX_POOLS || strlen(name) >= KVP_NAME_MAX || !*name)
		return NULL;
	kvp_pool_params_v2_init(&cfg->pools[cfg->npools], name);
	return &cfg->pools[cfg->npools++];
}

static int namespace_key(struct kvpd_config *cfg, const char *ns, const char *name,
			 const char *value)
{
	struct kvpd_namespace *n = NULL;
	char buf[256], *save = NULL;

	if (strlen(ns) >= KVP_NAME_MAX || !*ns || strlen(value) >= sizeof(buf))
		return -EINVAL;
	for (unsigned i = 0; i < cfg->nnamespaces && !n; i++)
		if (!strcmp(cfg->namespaces[i].name, ns))
			n = &cfg->namespaces[i];
	if (!n) {
		if (cfg->nnamespaces == KVPD_MAX_NAMESPACES)
			return -ENOSPC;
		n = &cfg->namespaces[cfg->nnamespaces++];
		memset(n, 0, sizeof(*n));
		strcpy(n->name, ns);
		for (unsigned k = 0; k < KVP_QUOTA_KEYS; k++)
			n->quota.limit[k] = KVP_QUOTA_UNLIMITED;
	}
	if (strcmp(name, "uids"))
		return quota_key(&n->quota, NULL, name, value) ? -EINVAL : 0;
	strcpy(buf, value);
	for (char *t = strtok_r(buf, " ,\t", &save); t; t = strtok_r(NULL, " ,\t", &save)) {
		unsigned uid;

		if (parse_unsigned(t, &uid) || n->nuids == KVPD_MAX_NS_UIDS)
			return -EINVAL;
		n->uids[n->nuids++] = uid;
	}
	return 0;
}

static int on_entry(void *user, const char *section, const char *name, const char *value)
{
	struct load_ctx *ctx = user;
	int ret = -EINVAL;

	if (!strcmp(section, "daemon")) {
		ret = daemon_key(ctx->cfg, name, value);
	} else if (!strncmp(section, "pool.", 5)) {
		struct kvp_pool_params_v2 *p = pool_section(ctx->cfg, section + 5);

		ret = p ? kvp_pool_params_v2_set(p, name, value) : -EINVAL;
	} else if (!strncmp(section, "namespace.", 10)) {
		ret = namespace_key(ctx->cfg, section + 10, name, value);
	} else if (!strcmp(section, "quota")) {
		ret = quota_key(&ctx->cfg->quota, NULL, name, value) ? -EINVAL : 0;
	} else if (!strncmp(section, "uid.", 4)) {
		ret = uid_key(ctx->cfg, section + 4, name, value);
	}
	if (ret) {
		fprintf(stderr, "kvpoold: %s: [%s] %s = %s: %s\n", ctx->path, section, name, value,
			ret == -EINVAL ? "unknown key or bad value" : strerror(-ret));
		ctx->error = ret;
		return 0;
	}
	return 1;
}

int kvpd_config_load(struct kvpd_config *cfg, const char *path)
{
	struct load_ctx ctx = { .cfg = cfg, .path = path };
	int line = ini_parse(path, on_entry, &ctx);

	if (line == -1) {
		fprintf(stderr, "kvpoold: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	if (line > 0 && !ctx.error)
		fprintf(stderr, "kvpoold: %s: line %d: syntax error\n", path, line);
	if (line)
		return ctx.error ? ctx.error : -EINVAL;
	for (unsigned i = 0; i < cfg->npools; i++) {
		const struct kvp_pool_params *p = &cfg->pools[i].v1;

		if (!p->num_blocks || !p->block_size || !p->num_groups) {
			fprintf(stderr, "kvpoold: %s: [pool.%s] needs blocks, block_size and groups\n",
				path, p->name);
			return -EINVAL;
		}
	}
	return 0;
}

void kvpd_config_release(struct kvpd_config *cfg)
{
	free(cfg->uid_quotas);
	cfg->uid_quotas = NULL;
	cfg->nuid_quotas = 0;
	while (cfg->strings) {
		char *next = *(char **)cfg->strings;

		free(cfg->strings);
		cfg->strings = next;
	}
}
