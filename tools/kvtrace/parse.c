/* SPDX-License-Identifier: MIT */
/* The kvtrace parser: syntax only; what a command means is the target's business. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

struct fields {
	char **v; /* sized for the line: a line of L bytes has at most L / 2 + 1 fields */
	unsigned n;
};

static int syntax(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static int split(char *line, struct fields *f)
{
	f->n = 0;
	f->v = malloc((strlen(line) / 2 + 1) * sizeof(*f->v));
	if (!f->v)
		return -ENOMEM;
	for (char *s = line; *s;) {
		while (is_blank(*s))
			s++;
		if (!*s)
			break;
		f->v[f->n++] = s;
		while (*s && !is_blank(*s))
			s++;
		if (*s)
			*s++ = '\0';
	}
	return 0;
}

/* Decimal digits only: no sign, no blanks, no hex; [min, max]. */
/* Decimal digits only (no sign, blanks or hex); a value past @cap reads as @cap. */
static int parse_digits(const char *s, uint64_t cap, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v > (cap - (uint64_t)(*s - '0')) / 10 ? cap : v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

/* [min, max], else -ERANGE. */
static int parse_num(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v;
	int ret = parse_digits(s, UINT64_MAX, &v);

	if (ret)
		return ret;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static int num_field(const char *what, const char *s, uint64_t min, uint64_t max,
		     uint64_t *out, char *err, size_t len)
{
	int ret = parse_num(s, min, max, out);

	if (ret == -ERANGE)
		return syntax(err, len, "%s %s out of range [%llu, %llu]", what, s,
			      (unsigned long long)min, (unsigned long long)max);
	if (ret)
		return syntax(err, len, "bad number for %s: '%s'", what, s);
	return 0;
}

/*
 * A count a command hands to the allocator (NEW, lookahead, computed N, an
 * evicted block, a prefix): any decimal, however long, saturating at @max.
 * Every rule that sees a count that large refuses it or caps it below @max
 * anyway (a block >= N, computed above the tokens, slots capped at max_len),
 * so the trace gets the refusal the rule gives, not a syntax error.
 */
static int count_field(const char *what, const char *s, uint64_t max, uint64_t *out,
		       char *err, size_t len)
{
	if (parse_digits(s, max, out))
		return syntax(err, len, "bad number for %s: '%s'", what, s);
	return 0;
}

static int push_value(struct trace_parser *p, uint32_t *n, uint64_t v, uint64_t copies)
{
	if (*n + copies > KVC_MAX_TOKENS)
		return -E2BIG;
	if (*n + copies > p->values_cap) {
		uint64_t cap = p->values_cap ? p->values_cap : 256;
		uint32_t *vals;

		while (cap < *n + copies)
			cap *= 2;
		vals = realloc(p->values, cap * sizeof(*vals));
		if (!vals)
			return -ENOMEM;
		p->values = vals;
		p->values_cap = (uint32_t)cap;
	}
	for (uint64_t i = 0; i < copies; i++)
		p->values[(*n)++] = (uint32_t)v;
	return 0;
}

/* TOKENS: items `t` or `t*n`. */
static int parse_token(struct trace_parser *p, struct trace_cmd *cmd, char *item,
		       char *err, size_t len)
{
	char *star = strchr(item, '*');
	uint64_t t, n = 1;
	int ret;

	if (star)
		*star = '\0';
	ret = num_field("token", item, 0, UINT32_MAX, &t, err, len);
	if (!ret && star)
		ret = num_field("repeat count", star + 1, 1, KVC_MAX_TOKENS, &n, err, len);
	if (ret)
		return ret;
	ret = push_value(p, &cmd->nvalues, t, n);
	if (ret == -E2BIG)
		return syntax(err, len, "more than %u tokens", KVC_MAX_TOKENS);
	return ret;
}

static int parse_id(struct trace_cmd *cmd, const struct fields *f, char *err, size_t len)
{
	if (f->n < 2)
		return syntax(err, len, "%s needs a sequence ID", f->v[0]);
	if (strchr(f->v[1], '='))
		return syntax(err, len, "bad sequence ID '%s'", f->v[1]);
	cmd->id = f->v[1];
	return 0;
}

static int want_args(const struct fields *f, unsigned n, const char *usage, char *err, size_t len)
{
	if (f->n != n)
		return syntax(err, len, "usage: %s", usage);
	return 0;
}

/*
 * Matches @field against "KEY=value" for each of @keys; returns the key's index
 * (value in *val), or a syntax error for an unknown or repeated key, so a
 * trace line never means two things.
 */
static int key_value(char *field, const char *const *keys, unsigned nkeys, unsigned *seen,
		     char **val, char *err, size_t len)
{
	char *eq = strchr(field, '=');

	for (unsigned k = 0; eq && k < nkeys; k++) {
		if (strlen(keys[k]) != (size_t)(eq - field) || strncmp(field, keys[k], eq - field))
			continue;
		if (*seen & (1u << k))
			return syntax(err, len, "%s given twice", keys[k]);
		*seen |= 1u << k;
		*val = eq + 1;
		return (int)k;
	}
	return syntax(err, len, "unknown argument '%s'", field);
}

static int parse_choice(const char *val, const char *a, const char *b, bool *is_a,
			const char *key, char *err, size_t len)
{
	if (strcmp(val, a) && strcmp(val, b))
		return syntax(err, len, "%s must be %s or %s", key, a, b);
	*is_a = !strcmp(val, a);
	return 0;
}

static int parse_pool(struct trace_cmd *cmd, const struct fields *f, char *err, size_t len)
{
	enum { BLOCKS, BLOCK_SIZE, CACHING, FREE_ORDER, PUBLISH, MAX_LEN, MAX_STEP, SNAPSHOTS,
	       SNAPSHOT_EVERY, NKEYS };
	static const char *const keys[NKEYS] = {
		"blocks", "block_size", "caching", "free_order", "publish", "max_len", "max_step_tokens",
		"snapshots", "snapshot_every",
	};
	struct kvc_pool_config *c = &cmd->pool;
	unsigned seen = 0;

	kvc_pool_config_init(c, 0, 0);
	for (unsigned i = 1; i < f->n; i++) {
		uint64_t v = 0;
		bool is_a = false;
		char *val;
		int k = key_value(f->v[i], keys, NKEYS, &seen, &val, err, len), ret = 0;

		switch (k) {
		case BLOCKS:
			ret = num_field("blocks", val, KVC_MIN_BLOCKS, KVC_MAX_BLOCKS, &v, err, len);
			c->num_blocks = (uint32_t)v;
			break;
		case BLOCK_SIZE:
			ret = num_field("block_size", val, 1, 1u << 20, &v, err, len);
			c->block_size = (uint32_t)v;
			break;
		case CACHING:
			ret = parse_choice(val, "on", "off", &is_a, "caching", err, len);
			c->caching = is_a;
			break;
		case FREE_ORDER:
			ret = parse_choice(val, "split", "append", &is_a, "free_order", err, len);
			c->free_order = is_a ? KVC_FREE_SPLIT : KVC_FREE_APPEND;
			break;
		case PUBLISH:
			ret = parse_choice(val, "commit", "alloc", &is_a, "publish", err, len);
			c->publish = is_a ? KVC_PUBLISH_COMMIT : KVC_PUBLISH_ALLOC;
			break;
		case MAX_LEN:
			ret = num_field("max_len", val, 1, UINT32_MAX, &v, err, len);
			c->max_len = (uint32_t)v;
			break;
		case MAX_STEP:
			ret = num_field("max_step_tokens", val, 1, KVC_MAX_TOKENS, &v, err, len);
			c->max_step_tokens = (uint32_t)v;
			break;
		case SNAPSHOTS:
			ret = parse_choice(val, "on", "off", &is_a, "snapshots", err, len);
			c->snapshots = is_a;
			break;
		case SNAPSHOT_EVERY:
			ret = num_field("snapshot_every", val, 0, KVC_MAX_TOKENS, &v, err, len);
			c->snapshot_every = (uint32_t)v;
			break;
		default:
			ret = k;
		}
		if (ret)
			return ret;
	}
	if (!(seen & (1u << BLOCKS)) || !(seen & (1u << BLOCK_SIZE)))
		return syntax(err, len, "pool needs blocks= and block_size=");
	return 0;
}

static int parse_group(struct trace_parser *p, struct trace_cmd *cmd, const struct fields *f,
		       char *err, size_t len)
{
	static const struct {
		const char *name;
		enum kvc_kind kind;
		uint64_t min;
	} kinds[] = {
		{ "full", KVC_FULL, 0 },    { "swa", KVC_SWA, 2 },
		{ "rswa", KVC_RSWA, 1 },    { "chunked", KVC_CHUNKED, 1 },
		{ "cyclic", KVC_CYCLIC, 1 },
	};
	uint64_t v = 0;

	if (p->ngroups == KVC_MAX_GROUPS)
		return syntax(err, len, "more than %d groups", KVC_MAX_GROUPS);
	if (f->n < 2)
		return syntax(err, len, "usage: group full|swa W|rswa W|chunked C|cyclic W");
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		if (strcmp(f->v[1], kinds[k].name))
			continue;
		if (kinds[k].kind == KVC_FULL) {
			if (f->n != 2)
				return syntax(err, len, "usage: group full");
		} else {
			if (f->n != 3)
				return syntax(err, len, "usage: group %s N", kinds[k].name);
			if (num_field(kinds[k].name, f->v[2], kinds[k].min, KVC_MAX_TOKENS, &v, err, len))
				return -EINVAL;
		}
		cmd->group = (struct kvc_group_spec){ .kind = kinds[k].kind, .param = (uint32_t)v };
		p->ngroups++;
		return 0;
	}
	return syntax(err, len, "unknown group kind '%s'", f->v[1]);
}

static int parse_seq(struct trace_parser *p, struct trace_cmd *cmd, const struct fields *f,
		     char *err, size_t len)
{
	static const char *const keys[] = { "salt", "prefix" };
	unsigned seen = 0;
	int ret = parse_id(cmd, f, err, len);

	for (unsigned i = 2; !ret && i < f->n; i++) {
		uint64_t v = 0;
		char *val;

		if (!strchr(f->v[i], '=')) {
			ret = parse_token(p, cmd, f->v[i], err, len);
			continue;
		}
		ret = key_value(f->v[i], keys, 2, &seen, &val, err, len);
		if (ret == 0) {
			cmd->salt = val;
		} else if (ret == 1) {
			ret = count_field("prefix", val, INT64_MAX, &v, err, len);
			cmd->prefix = (int64_t)v;
		}
	}
	if (!ret && cmd->nvalues == 0)
		ret = syntax(err, len, "seq needs at least one token");
	return ret;
}

static int parse_append(struct trace_parser *p, struct trace_cmd *cmd, const struct fields *f,
			char *err, size_t len)
{
	int ret = parse_id(cmd, f, err, len);

	for (unsigned i = 2; !ret && i < f->n; i++)
		ret = parse_token(p, cmd, f->v[i], err, len);
	if (!ret && cmd->nvalues == 0)
		ret = syntax(err, len, "append needs at least one token");
	return ret;
}

static int parse_alloc(struct trace_cmd *cmd, const struct fields *f, char *err, size_t len)
{
	static const char *const keys[] = { "lookahead" };
	unsigned seen = 0;
	uint64_t v = 0;
	int ret = parse_id(cmd, f, err, len);

	if (!ret && f->n < 3)
		ret = syntax(err, len, "usage: alloc ID NEW [hit] [lookahead=K]");
	if (!ret)
		ret = count_field("NEW", f->v[2], UINT32_MAX, &v, err, len);
	cmd->count = (uint32_t)v;
	for (unsigned i = 3; !ret && i < f->n; i++) {
		char *val;

		if (!strcmp(f->v[i], "hit")) {
			if (cmd->hit)
				ret = syntax(err, len, "hit given twice");
			cmd->hit = true;
			continue;
		}
		ret = key_value(f->v[i], keys, 1, &seen, &val, err, len);
		if (ret == 0) {
			ret = count_field("lookahead", val, UINT32_MAX, &v, err, len);
			cmd->lookahead = (uint32_t)v;
		}
	}
	return ret;
}

static int parse_evict(struct trace_parser *p, struct trace_cmd *cmd, const struct fields *f,
		       char *err, size_t len)
{
	if (f->n < 2)
		return syntax(err, len, "usage: evict BLOCK...");
	for (unsigned i = 1; i < f->n; i++) {
		uint64_t v;
		int ret = count_field("block", f->v[i], UINT32_MAX, &v, err, len);

		if (!ret)
			ret = push_value(p, &cmd->nvalues, v, 1);
		if (ret)
			return ret;
	}
	return 0;
}

static const struct {
	const char *name;
	enum trace_op op;
} commands[] = {
	{ "pool", TRACE_POOL },       { "group", TRACE_GROUP },   { "seq", TRACE_SEQ },
	{ "append", TRACE_APPEND },   { "computed", TRACE_COMPUTED },
	{ "lookup", TRACE_LOOKUP },   { "alloc", TRACE_ALLOC },   { "free", TRACE_FREE },
	{ "table", TRACE_TABLE },     { "freeq", TRACE_FREEQ },   { "stats", TRACE_STATS },
	{ "reset", TRACE_RESET },     { "evict", TRACE_EVICT },   { "expect", TRACE_EXPECT },
	{ "copies", TRACE_COPIES },   { "snapshots", TRACE_SNAPSHOTS },
};

/* pool first, then one or more group lines, then everything else. */
static int check_section(struct trace_parser *p, enum trace_op op, char *err, size_t len)
{
	switch (p->section) {
	case TRACE_WANT_POOL:
		if (op != TRACE_POOL)
			return syntax(err, len, "the first command must be pool");
		p->section = TRACE_WANT_GROUP;
		return 0;
	case TRACE_WANT_GROUP:
		if (op != TRACE_GROUP)
			return syntax(err, len, op == TRACE_POOL ? "a second pool" : "pool needs a group first");
		p->section = TRACE_IN_GROUPS;
		return 0;
	case TRACE_IN_GROUPS:
	case TRACE_BODY:
		if (op == TRACE_POOL)
			return syntax(err, len, "a second pool");
		if (op == TRACE_GROUP && p->section == TRACE_BODY)
			return syntax(err, len, "group after the first non-group command");
		if (op != TRACE_GROUP)
			p->section = TRACE_BODY;
		return 0;
	}
	return 0;
}

/* One command's fields: which command, in which section, with which arguments. */
static int parse_command(struct trace_parser *p, struct trace_cmd *cmd, const struct fields *f,
			 char *err, size_t len)
{
	size_t i;
	int ret;

	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(f->v[0], commands[i].name))
			break;
	if (i == sizeof(commands) / sizeof(commands[0]))
		return syntax(err, len, "unknown command '%s'", f->v[0]);
	cmd->op = commands[i].op;
	cmd->name = commands[i].name;
	ret = check_section(p, cmd->op, err, len);
	if (ret)
		return ret;

	switch (cmd->op) {
	case TRACE_POOL:
		ret = parse_pool(cmd, f, err, len);
		break;
	case TRACE_GROUP:
		ret = parse_group(p, cmd, f, err, len);
		break;
	case TRACE_SEQ:
		ret = parse_seq(p, cmd, f, err, len);
		break;
	case TRACE_APPEND:
		ret = parse_append(p, cmd, f, err, len);
		break;
	case TRACE_COMPUTED: {
		uint64_t v = 0;

		ret = want_args(f, 3, "computed ID N", err, len);
		if (!ret)
			ret = parse_id(cmd, f, err, len);
		if (!ret)
			ret = count_field("N", f->v[2], UINT32_MAX, &v, err, len);
		cmd->count = (uint32_t)v;
		break;
	}
	case TRACE_LOOKUP:
	case TRACE_FREE:
	case TRACE_TABLE:
		ret = want_args(f, 2, cmd->op == TRACE_LOOKUP ? "lookup ID"
				       : cmd->op == TRACE_FREE ? "free ID" : "table ID", err, len);
		if (!ret)
			ret = parse_id(cmd, f, err, len);
		break;
	case TRACE_ALLOC:
		ret = parse_alloc(cmd, f, err, len);
		break;
	case TRACE_FREEQ:
	case TRACE_STATS:
	case TRACE_RESET:
	case TRACE_COPIES:
	case TRACE_SNAPSHOTS:
		ret = want_args(f, 1, cmd->name, err, len);
		break;
	case TRACE_EVICT:
		ret = parse_evict(p, cmd, f, err, len);
		break;
	case TRACE_EXPECT:
		break;
	}
	return ret;
}

int trace_parse_line(struct trace_parser *p, char *line, struct trace_cmd *cmd,
		     char *err, size_t len)
{
	struct fields f;
	char *start = line;
	int ret;

	while (is_blank(*start))
		start++;
	if (!*start || *start == '\n' || *start == '#')
		return 0;
	start[strcspn(start, "\n")] = '\0';

	memset(cmd, 0, sizeof(*cmd));
	cmd->prefix = -1;
	if (!strncmp(start, "expect", 6) && (is_blank(start[6]) || !start[6])) {
		char *text = start + 6, *end;

		ret = check_section(p, TRACE_EXPECT, err, len);
		if (ret)
			return ret;
		while (is_blank(*text))
			text++;
		end = text + strlen(text);
		while (end > text && is_blank(end[-1]))
			*--end = '\0';
		cmd->op = TRACE_EXPECT;
		cmd->name = "expect";
		cmd->text = text;
		return 1;
	}

	ret = split(start, &f);
	if (!ret) {
		ret = parse_command(p, cmd, &f, err, len);
		free(f.v);
	}
	if (ret == -ENOMEM)
		snprintf(err, len, "out of memory");
	cmd->values = p->values;
	return ret ? ret : 1;
}

void trace_parser_init(struct trace_parser *p)
{
	*p = (struct trace_parser){ .section = TRACE_WANT_POOL };
}

void trace_parser_release(struct trace_parser *p)
{
	free(p->values);
	p->values = NULL;
	p->values_cap = 0;
}
