/* SPDX-License-Identifier: MIT */
/*
 * POOL_CREATE v3's text of pool keys: `key = value` lines read with the
 * [pool.NAME] section's table (config_keys.c), so that the config file, kvctl
 * and any client set a pool's keys in the same words and are refused in them.
 * The text is the client's: it was copied out of the arena before this runs,
 * and nothing is trusted about it but its length.
 */
#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "config/config.h"
#include "refuse.h"

static char *skip_blanks(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* Cuts trailing blanks off @s (the end of a key or a value). */
static char *cut_blanks(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

/* One line, NUL-terminated in place: skipped, or its key applied to @p. */
static int apply_line(struct kvpd_pool_spec *p, char *line, uint64_t *seen, char *why,
		      size_t why_len)
{
	char *eq, *key, *value, *c;
	char problem[KVP_REASON_MAX];
	bool blank = false;
	int idx, ret;

	line = cut_blanks(skip_blanks(line));
	if (!*line || *line == '#' || *line == ';')
		return 0;
	eq = strchr(line, '=');
	if (!eq)
		return kvpd_refuse(why, why_len, -EINVAL, "'%.40s': not key = value", line);
	*eq = '\0';
	key = cut_blanks(line);
	/* A comment after the value, as in the config file: ';' after a blank. */
	for (c = eq + 1; *c && !(*c == ';' && blank); c++)
		blank = isspace((unsigned char)*c);
	*c = '\0';
	value = cut_blanks(skip_blanks(eq + 1));
	if (!*key)
		return kvpd_refuse(why, why_len, -EINVAL, "'= %.40s': no key before '='", value);
	idx = kvpd_conf_key(KVPD_CONF_POOL, key);
	if (idx < 0)
		return kvpd_refuse(why, why_len, -EINVAL, "%.40s: unknown pool key", key);
	if (*seen & (1ull << idx))
		return kvpd_refuse(why, why_len, -EINVAL, "%s set twice", key);
	*seen |= 1ull << idx;
	/* A pool's keys are the config's: no daemon setting is reached through them. */
	ret = kvpd_conf_set(NULL, KVPD_CONF_POOL, p, idx, value, problem, sizeof(problem));
	if (ret == -EINVAL)
		return kvpd_refuse(why, why_len, ret, "%s = %.24s: %s", key, value, problem);
	return ret;
}

int kvpd_pool_keys_apply(struct kvpd_pool_spec *p, char *text, size_t len, char *why,
			 size_t why_len)
{
	_Static_assert(KVPD_CONF_MAX_KEYS <= 64, "seen's bits");
	uint64_t seen = 0;
	char *line = text, *end = text + len;

	if (memchr(text, '\0', len))
		return kvpd_refuse(why, why_len, -EINVAL, "the keys' text holds a NUL byte");
	while (line < end) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		char *next = nl ? nl + 1 : end;
		int ret;

		/* The text is @len bytes and a NUL after them (the caller's buffer). */
		if (nl)
			*nl = '\0';
		ret = apply_line(p, line, &seen, why, why_len);
		if (ret)
			return ret;
		line = next;
	}
	return 0;
}
