/* SPDX-License-Identifier: MIT */
/*
 * The config file (kvpool.conf(5)), INI read with inih:
 *
 *   [daemon]            the command line's settings, and log_level
 *   [pool.NAME]         kvctl's pool keys: blocks, block_size, groups, ...
 *   [namespace.NAME]    uids = 1000 1001   (who may use the namespace), and quotas
 *   [quota]             quotas of every uid
 *   [uid.N]             quotas of uid N (keys it does not set: [quota]'s)
 *
 * Every error is one line "FILE:LINE: what is wrong", and every one in the
 * file is told, not only the first. inih calls its handler without the line
 * (Debian builds it without INI_HANDLER_LINENO), so it reads through
 * next_line, which counts lines and sees each one before inih does. It keeps
 * to itself what inih would let through or get wrong:
 *   - section headers: inih says nothing of an unknown or repeated one, and
 *     files the keys after an unclosed "[pool.a" under the previous section;
 *   - indentation: inih takes an indented line for the continuation of the
 *     value above and hands it over as that key again, so "  blocks = 2"
 *     under "groups = full" would set groups to "blocks = 2", and a key set
 *     twice would pass for a continuation. Leading blanks are stripped here:
 *     inih never sees a continuation, and a value is one line;
 *   - a line inih's buffer cannot hold: it would take its rest for a line;
 *   - a line that is not key = value, or a key before any section (inih
 *     gives only the first one's number).
 * inih is handed "key=value", comment cut and blanks stripped, or an empty
 * line, so that its line count stays ours; it calls on_key, which knows the
 * section and the line from here. config_keys.c knows the keys.
 */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "../../lib/libkvpool.h"

/* Past it only a count: a file that is no config at all would fill the log. */
#define ERRORS_SHOWN 100

enum sect_state {
	SECT_NONE, /* before the first header: a key here is an error */
	SECT_OPEN, /* in a section: kind and obj say which */
	SECT_SKIP, /* after a header that was wrong (said there): its keys are not looked at */
};

struct load_ctx {
	struct kvpd_config *cfg;
	const struct kvpd_log *log;
	const char *path;
	FILE *file;
	char *buf; /* getline's */
	size_t cap;
	unsigned lineno;
	unsigned errors;
	int fatal; /* -ENOMEM, or the file could not be read: stop */

	/* The section being read. */
	enum sect_state state;
	enum kvpd_conf_section kind;
	void *obj;
	char name[48]; /* "namespace." and a name of at most 31 bytes */
	unsigned header_line, errors_at_header;
	unsigned key_line[KVPD_CONF_MAX_KEYS]; /* where each of its keys was set; 0: not */

	/* Where each section was first seen, to name it when it comes again. */
	unsigned daemon_line, quota_line;
	unsigned pool_line[KVPD_MAX_POOLS];
	unsigned namespace_line[KVPD_MAX_NAMESPACES];
	unsigned *uid_line; /* by index in cfg->uid_quotas */
};

static void report(struct load_ctx *ctx, unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void report(struct load_ctx *ctx, unsigned line, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (++ctx->errors > ERRORS_SHOWN)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	kvpd_logf(ctx->log, KVPD_LOG_ERR, "%s:%u: %s", ctx->path, line, msg);
}

/* isspace, as inih strips. */
static char *skip_blanks(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return s;
}

static char *cut_blanks(char *s)
{
	size_t n = strlen(s);

	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* The end of a section: what only the whole of it can say. */
static void close_section(struct load_ctx *ctx)
{
	static const char *const required[] = { "blocks", "block_size", "groups" };
	char missing[64] = "", why[KVP_REASON_MAX];

	if (ctx->state != SECT_OPEN || ctx->kind != KVPD_CONF_POOL)
		return;
	for (unsigned i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		size_t used = strlen(missing);

		if (!ctx->key_line[kvpd_conf_key(KVPD_CONF_POOL, required[i])])
			snprintf(missing + used, sizeof(missing) - used, "%s%s", used ? ", " : "",
				 required[i]);
	}
	if (*missing)
		report(ctx, ctx->header_line, "[%s] needs blocks, block_size and groups (missing: %s)",
		       ctx->name, missing);
	/* Limits across keys (KV and publish=alloc, device of a host pool, ...), here with a line. */
	else if (ctx->errors == ctx->errors_at_header &&
		 kvpd_pool_params_check(ctx->obj, why, sizeof(why)))
		report(ctx, ctx->header_line, "[%s] %s", ctx->name, why);
}

static void enter(struct load_ctx *ctx, enum kvpd_conf_section kind, void *obj, const char *name)
{
	ctx->state = SECT_OPEN;
	ctx->kind = kind;
	ctx->obj = obj;
	snprintf(ctx->name, sizeof(ctx->name), "%s", name);
}

/* [daemon] and [quota]: one of each. */
static void open_single(struct load_ctx *ctx, const char *name, unsigned *first,
			enum kvpd_conf_section kind, void *obj)
{
	if (*first) {
		report(ctx, ctx->lineno, "[%s] appears twice (first at line %u)", name, *first);
		return;
	}
	*first = ctx->lineno;
	enter(ctx, kind, obj, name);
}

static void open_pool(struct load_ctx *ctx, const char *section, const char *name)
{
	struct kvpd_config *cfg = ctx->cfg;
	const char *bad = kvpd_conf_name_problem(name);

	if (bad) {
		report(ctx, ctx->lineno, "[%s] pool name: %s", section, bad);
		return;
	}
	for (unsigned i = 0; i < cfg->npools; i++) {
		if (!strcmp(cfg->pools[i].v2.v1.name, name)) {
			report(ctx, ctx->lineno, "[%s] appears twice (first at line %u)", section,
			       ctx->pool_line[i]);
			return;
		}
	}
	if (cfg->npools == KVPD_MAX_POOLS) {
		report(ctx, ctx->lineno, "[%s] too many pools (at most %u)", section, KVPD_MAX_POOLS);
		return;
	}
	ctx->pool_line[cfg->npools] = ctx->lineno;
	cfg->pools[cfg->npools] = (struct kvpd_pool_spec){ 0 };
	kvp_pool_params_v2_init(&cfg->pools[cfg->npools].v2, name);
	enter(ctx, KVPD_CONF_POOL, &cfg->pools[cfg->npools++], section);
}

static void open_namespace(struct load_ctx *ctx, const char *section, const char *name)
{
	struct kvpd_config *cfg = ctx->cfg;
	const char *bad = kvpd_conf_name_problem(name);
	struct kvpd_namespace *n;

	if (bad) {
		report(ctx, ctx->lineno, "[%s] namespace name: %s", section, bad);
		return;
	}
	for (unsigned i = 0; i < cfg->nnamespaces; i++) {
		if (!strcmp(cfg->namespaces[i].name, name)) {
			report(ctx, ctx->lineno, "[%s] appears twice (first at line %u)", section,
			       ctx->namespace_line[i]);
			return;
		}
	}
	if (cfg->nnamespaces == KVPD_MAX_NAMESPACES) {
		report(ctx, ctx->lineno, "[%s] too many namespaces (at most %u)", section,
		       KVPD_MAX_NAMESPACES);
		return;
	}
	ctx->namespace_line[cfg->nnamespaces] = ctx->lineno;
	n = &cfg->namespaces[cfg->nnamespaces++];
	memset(n, 0, sizeof(*n));
	strcpy(n->name, name);
	/* Its clients together: no limit but the ones it sets. */
	for (unsigned k = 0; k < KVPD_QUOTA_KEYS; k++)
		n->quota.limit[k] = KVP_QUOTA_UNLIMITED;
	enter(ctx, KVPD_CONF_NAMESPACE, n, section);
}

static void open_uid(struct load_ctx *ctx, const char *section, const char *text)
{
	const unsigned long long max = (uid_t)-1 - 1; /* -1 is no uid */
	struct kvpd_config *cfg = ctx->cfg;
	struct kvpd_uid_quota *grown;
	unsigned n = cfg->nuid_quotas, *lines;
	unsigned long long uid;
	char *end;

	errno = 0;
	uid = strtoull(text, &end, 10);
	if (!isdigit((unsigned char)*text) || *end || errno || uid > max) {
		report(ctx, ctx->lineno, "[%s] uid: %s (0..%llu)", section,
		       isdigit((unsigned char)*text) && !*end ? "out of range" : "not a number", max);
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		if (cfg->uid_quotas[i].uid == uid) {
			report(ctx, ctx->lineno, "[%s] appears twice (first at line %u)", section,
			       ctx->uid_line[i]);
			return;
		}
	}
	grown = realloc(cfg->uid_quotas, (n + 1) * sizeof(*grown));
	if (grown)
		cfg->uid_quotas = grown;
	lines = grown ? realloc(ctx->uid_line, (n + 1) * sizeof(*lines)) : NULL;
	if (!lines) {
		ctx->fatal = -ENOMEM;
		return;
	}
	ctx->uid_line = lines;
	lines[n] = ctx->lineno;
	cfg->uid_quotas[n] = (struct kvpd_uid_quota){ .uid = (uid_t)uid };
	cfg->nuid_quotas++;
	enter(ctx, KVPD_CONF_UID, &cfg->uid_quotas[n], section);
}

/* "[NAME]", with anything after it; a header ends the section before it, right or wrong. */
static void header(struct load_ctx *ctx, char *s)
{
	char *end = strchr(s, ']'), *rest, *name;

	close_section(ctx);
	ctx->state = SECT_SKIP;
	ctx->header_line = ctx->lineno;
	ctx->errors_at_header = ctx->errors;
	memset(ctx->key_line, 0, sizeof(ctx->key_line));
	if (!end) {
		report(ctx, ctx->lineno, "unclosed section header '%s' (no ']')", s);
		return;
	}
	*end = '\0';
	name = cut_blanks(skip_blanks(s + 1));
	rest = skip_blanks(end + 1);
	if (*rest && *rest != ';' && *rest != '#')
		report(ctx, ctx->lineno, "syntax error: '%s' after [%s] (a comment starts with ; or #)",
		       rest, name);
	if (!strcmp(name, "daemon"))
		open_single(ctx, name, &ctx->daemon_line, KVPD_CONF_DAEMON, ctx->cfg);
	else if (!strcmp(name, "quota"))
		open_single(ctx, name, &ctx->quota_line, KVPD_CONF_QUOTA, &ctx->cfg->quota);
	else if (!strncmp(name, "pool.", 5))
		open_pool(ctx, name, name + 5);
	else if (!strncmp(name, "namespace.", 10))
		open_namespace(ctx, name, name + 10);
	else if (!strncmp(name, "uid.", 4))
		open_uid(ctx, name, name + 4);
	else
		report(ctx, ctx->lineno, "unknown section [%s] (sections: [daemon], [pool.NAME], "
		       "[namespace.NAME], [quota], [uid.N])", name);
}

/*
 * A key line, as inih will split it, into @out (@num bytes: inih's buffer) as
 * "key=value": the value's comment cut (a ';' after a blank, as inih's) and
 * blanks stripped. NULL when it is not one (said here) or its section is
 * skipped.
 */
static char *key_line(struct load_ctx *ctx, char *s, char *out, int num)
{
	bool blank = false;
	char *p, *key, *value;

	/* inih's split: at the first '=' or ':', unless a comment comes first. */
	for (p = s; *p && *p != '=' && *p != ':' && !(*p == ';' && blank); p++)
		blank = isspace((unsigned char)*p);
	if (*p != '=') {
		report(ctx, ctx->lineno, "syntax error: '%s' is not key = value", s);
		return NULL;
	}
	*p = '\0';
	key = cut_blanks(s);
	value = p + 1;
	for (p = value, blank = false; *p && !(*p == ';' && blank); p++)
		blank = isspace((unsigned char)*p);
	*p = '\0';
	value = cut_blanks(skip_blanks(value));
	if (!*key) {
		report(ctx, ctx->lineno, "syntax error: no key before '='");
		return NULL;
	}
	if (ctx->state == SECT_NONE) {
		report(ctx, ctx->lineno, "syntax error: key '%s' before any [section]", key);
		return NULL;
	}
	if (ctx->state == SECT_SKIP)
		return NULL;
	if (snprintf(out, (size_t)num, "%s=%s\n", key, value) >= num) {
		report(ctx, ctx->lineno, "syntax error: line too long (key and value: at most %d bytes)",
		       num - 3);
		return NULL;
	}
	return out;
}

/* inih's reader (fgets's contract): the next line for it to parse; NULL at the end. */
static char *next_line(char *str, int num, void *stream)
{
	struct load_ctx *ctx = stream;
	char *s, *line = NULL;
	ssize_t n;

	if (ctx->fatal || num < 2)
		return NULL;
	errno = 0;
	n = getline(&ctx->buf, &ctx->cap, ctx->file);
	if (n < 0) {
		if (ferror(ctx->file))
			ctx->fatal = errno ? -errno : -EIO;
		return NULL;
	}
	ctx->lineno++;
	s = ctx->buf;
	/* A UTF-8 byte order mark, as some editors write: not part of the first line. */
	if (ctx->lineno == 1 && !strncmp(s, "\xef\xbb\xbf", 3))
		s += 3;
	if (strlen(ctx->buf) != (size_t)n) {
		report(ctx, ctx->lineno, "syntax error: a NUL byte");
	} else {
		s = cut_blanks(skip_blanks(s));
		if (*s == '[')
			header(ctx, s);
		else if (*s && *s != ';' && *s != '#')
			line = key_line(ctx, s, str, num);
	}
	return line ? line : strcpy(str, "\n");
}

/* Called for "key=value" lines only, in a section that is open. */
static int on_key(void *user, const char *section, const char *name, const char *value)
{
	struct load_ctx *ctx = user;
	char why[512], keys[512];
	int idx, ret;

	(void)section; /* always "": next_line keeps the headers */
	if (ctx->state != SECT_OPEN)
		return 1;
	idx = kvpd_conf_key(ctx->kind, name);
	if (idx < 0) {
		kvpd_conf_keys(ctx->kind, keys, sizeof(keys));
		report(ctx, ctx->lineno, "[%s] unknown key '%s' (keys: %s)", ctx->name, name, keys);
		return 1;
	}
	if (ctx->key_line[idx]) {
		report(ctx, ctx->lineno, "[%s] %s set twice (first at line %u)", ctx->name, name,
		       ctx->key_line[idx]);
		return 1;
	}
	ctx->key_line[idx] = ctx->lineno;
	ret = kvpd_conf_set(ctx->cfg, ctx->kind, ctx->obj, idx, value, why, sizeof(why));
	if (ret == -ENOMEM)
		ctx->fatal = ret;
	else if (ret)
		report(ctx, ctx->lineno, "[%s] %s = %s: %s", ctx->name, name, value, why);
	return 1;
}

int kvpd_config_load(struct kvpd_config *cfg, const char *path, const struct kvpd_log *log)
{
	struct load_ctx ctx = { .cfg = cfg, .log = log, .path = path };
	int ret;

	ctx.file = fopen(path, "re");
	if (!ctx.file) {
		ret = -errno;
		kvpd_logf(log, KVPD_LOG_ERR, "%s: %s", path, strerror(-ret));
		return ret;
	}
	ret = ini_parse_stream(next_line, &ctx, on_key, &ctx);
	if (ret == -2)
		ctx.fatal = -ENOMEM;
	if (!ctx.fatal)
		close_section(&ctx);
	/* What inih refused and next_line let through: only if the two disagree. */
	if (ret > 0 && !ctx.errors)
		report(&ctx, (unsigned)ret, "syntax error");
	if (ctx.errors > ERRORS_SHOWN)
		kvpd_logf(log, KVPD_LOG_ERR, "%s: %u errors, the first %u shown", path, ctx.errors,
			  ERRORS_SHOWN);
	if (ctx.fatal)
		kvpd_logf(log, KVPD_LOG_ERR, "%s: %s", path, strerror(-ctx.fatal));
	fclose(ctx.file);
	free(ctx.buf);
	free(ctx.uid_line);
	if (ctx.fatal)
		return ctx.fatal;
	return ctx.errors ? -EINVAL : 0;
}

void kvpd_config_defaults(struct kvpd_config *cfg)
{
	*cfg = (struct kvpd_config){ .socket_path = KVP_DEFAULT_SOCKET, .spin_us = 50, .budget = 64,
				     .max_clients = 128 };
	kvpd_quota_defaults(&cfg->quota);
}

void kvpd_quota_defaults(struct kvpd_quota *q)
{
	q->limit[KVP_QUOTA_CLIENTS] = 32;
	q->limit[KVP_QUOTA_SEQUENCES] = 65536;
	q->limit[KVP_QUOTA_TOKENS] = 1u << 24;
	q->limit[KVP_QUOTA_ARENA_BYTES] = 256u << 20;
	q->limit[KVP_QUOTA_BLOCKS] = KVP_QUOTA_UNLIMITED;
	q->limit[KVPD_QUOTA_TIER_BYTES] = KVP_QUOTA_UNLIMITED;
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

void kvpd_cli_apply(struct kvpd_config *cfg, const struct kvpd_cli *cli)
{
	if (cli->socket)
		cfg->socket_path = cli->socket;
	if (cli->group)
		cfg->socket_group = cli->group;
	if (cli->plugin_dir)
		cfg->plugin_dir = cli->plugin_dir;
	if (cli->spin_us != ~0u)
		cfg->spin_us = cli->spin_us;
	if (cli->budget)
		cfg->budget = cli->budget;
	if (cli->max_clients)
		cfg->max_clients = cli->max_clients;
	if (cli->threads)
		cfg->threads = cli->threads;
	if (cli->event_loop >= 0)
		cfg->event_loop = (enum kvpd_evloop_choice)cli->event_loop;
	if (cli->log_level)
		cfg->log_level = cli->log_level;
}

bool kvpd_namespace_allowed(const struct kvpd_config *cfg, const char *ns, uid_t uid)
{
	if (!*ns || uid == 0 || uid == geteuid())
		return true;
	for (unsigned i = 0; i < cfg->nnamespaces; i++) {
		const struct kvpd_namespace *n = &cfg->namespaces[i];

		if (strcmp(n->name, ns))
			continue;
		for (unsigned u = 0; u < n->nuids; u++)
			if (n->uids[u] == uid)
				return true;
	}
	return false;
}

uint64_t kvpd_host_bytes_max(const struct kvpd_config *cfg, uint64_t *ram)
{
	const uint64_t gib = 1ull << 30;
	uint64_t margin;

	*ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	if (cfg->max_host_bytes)
		return cfg->max_host_bytes;
	margin = *ram / 8;
	if (margin < gib && *ram > 2 * gib)
		margin = gib;
	return *ram - margin;
}
