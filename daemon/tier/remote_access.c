/* SPDX-License-Identifier: MIT */
/*
 * Who a pool's cluster tier is to the cluster: its TLS context (rediss://),
 * its user and password (tier_remote_auth_file), its values' key
 * (tier_remote_key_file). The files are read at attach and again at every
 * SIGHUP, so that a rotation needs no restart; a pool's first contact with the
 * cluster, at its creation, refuses it when the cluster refuses its password
 * or the pool refuses the cluster's certificate, rather than miss forever.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "refuse.h"
#include "tier/remote.h"
#include "tier/tier.h"

/* The first contact: a seed that answers, in this long at most. */
#define PROBE_MS 1000u

/* tier_remote_auth_file: `USER PASSWORD`, or `PASSWORD` alone (the default user). */
static int read_auth(const char *path, char *user, char *pass, char *why, size_t why_len)
{
	char text[2 * REMOTE_CRED_MAX];
	char *sp, *end;
	int n = kvpd_secret_read("tier_remote_auth_file", path, (uint8_t *)text, sizeof(text) - 1,
				 why, why_len);

	if (n < 0)
		return n;
	text[n] = '\0';
	end = text + strlen(text);
	while (end > text && strchr(" \t\r\n", end[-1]))
		*--end = '\0';
	sp = strpbrk(text, " \t");
	n = 0;
	if (!*text || strpbrk(text, "\r\n") || (sp && strpbrk(sp + strspn(sp, " \t"), " \t")))
		n = kvpd_refuse_file(why, why_len, -EINVAL, "tier_remote_auth_file", path,
				     "not one line: USER PASSWORD");
	else if (sp && (size_t)(sp - text) >= REMOTE_CRED_MAX)
		n = kvpd_refuse_file(why, why_len, -EINVAL, "tier_remote_auth_file", path,
				     "a user over %u bytes", REMOTE_CRED_MAX - 1);
	else if (strlen(sp ? sp + strspn(sp, " \t") : text) >= REMOTE_CRED_MAX)
		n = kvpd_refuse_file(why, why_len, -EINVAL, "tier_remote_auth_file", path,
				     "a password over %u bytes", REMOTE_CRED_MAX - 1);
	if (!n && sp) {
		*sp = '\0';
		strcpy(user, text);
		strcpy(pass, sp + 1 + strspn(sp + 1, " \t"));
	} else if (!n) {
		user[0] = '\0';
		strcpy(pass, text);
	}
	explicit_bzero(text, sizeof(text));
	return n;
}

/* tier_remote_key_file: the key's bytes as they are, 32 to 64. */
static int read_key(const char *path, struct remote_tag_key *k, char *why, size_t why_len)
{
	int n = kvpd_secret_read("tier_remote_key_file", path, k->bytes, sizeof(k->bytes), why,
				 why_len);

	if (n == -EINVAL && strstr(why, "over "))
		n = kvpd_refuse_file(why, why_len, -EINVAL, "tier_remote_key_file", path,
				     "over 64 bytes; a key is 32 to 64 bytes");
	if (n < 0)
		return n;
	if ((unsigned)n < REMOTE_KEY_MIN) {
		explicit_bzero(k->bytes, sizeof(k->bytes));
		return kvpd_refuse_file(why, why_len, -EINVAL, "tier_remote_key_file", path,
					"holds %d bytes; a key is 32 to 64 bytes", n);
	}
	k->len = (uint32_t)n;
	return 0;
}

/* The secrets @spec names into @user, @pass and @tag ("" and 0 where it names none). */
static int read_secrets(const struct kvpd_pool_spec *spec, char *user, char *pass,
			struct remote_tag_key *tag, char *why, size_t why_len)
{
	int ret = 0;

	user[0] = pass[0] = '\0';
	memset(tag, 0, sizeof(*tag));
	if (*spec->tier_remote_auth_file)
		ret = read_auth(spec->tier_remote_auth_file, user, pass, why, why_len);
	if (!ret && *spec->tier_remote_key_file)
		ret = read_key(spec->tier_remote_key_file, tag, why, why_len);
	return ret;
}

int remote_access_init(struct remote_access *a, const struct kvpd_pool_spec *spec, char *why,
		       size_t why_len)
{
	struct kvpd_remote_addr seeds[KVPD_REMOTE_MAX_SEEDS];
	bool tls = false;
	int ret;

	memset(a, 0, sizeof(*a));
	ret = kvpd_remote_url_parse(spec->tier_remote, seeds, &tls, why, why_len);
	if (ret < 0)
		return ret;
	ret = read_secrets(spec, a->user, a->pass, &a->tag, why, why_len);
	if (!ret && tls)
		ret = remote_tls_context(spec, &a->tls, why, why_len);
	if (ret) {
		explicit_bzero(a, sizeof(*a));
		return ret;
	}
	pthread_mutex_init(&a->lock, NULL);
	return 0;
}

int remote_access_reload(struct remote_access *a, const struct kvpd_pool_spec *spec, char *why,
			 size_t why_len)
{
	char user[REMOTE_CRED_MAX], pass[REMOTE_CRED_MAX];
	struct remote_tag_key tag;
	int ret = read_secrets(spec, user, pass, &tag, why, why_len);

	if (!ret) {
		pthread_mutex_lock(&a->lock);
		if (strcmp(user, a->user) || strcmp(pass, a->pass)) {
			memcpy(a->user, user, sizeof(user));
			memcpy(a->pass, pass, sizeof(pass));
			__atomic_add_fetch(&a->generation, 1, __ATOMIC_RELEASE);
		}
		a->tag = tag;
		pthread_mutex_unlock(&a->lock);
	}
	explicit_bzero(pass, sizeof(pass));
	explicit_bzero(&tag, sizeof(tag));
	return ret;
}

void remote_access_tag(struct remote_access *a, struct remote_tag_key *out)
{
	pthread_mutex_lock(&a->lock);
	*out = a->tag;
	pthread_mutex_unlock(&a->lock);
}

void remote_access_free(struct remote_access *a)
{
	if (a->tls)
		remote_tls_free(a->tls);
	pthread_mutex_destroy(&a->lock);
	explicit_bzero(a, sizeof(*a));
}

/*
 * The pool's first contact, on a worker while the pool is built: the seeds in
 * turn until one is reached. Refused when a seed refuses the password or the
 * pool refuses a seed's certificate; a cluster that cannot be reached is not a
 * reason (misses until it can), nor is anything else.
 */
int kvpd_tier_probe(struct kvpd_pool *pool, char *why, size_t why_len)
{
	const struct kvpd_pool_spec *spec = &pool->spec;
	struct kvpd_remote_addr seeds[KVPD_REMOTE_MAX_SEEDS];
	struct remote_access access;
	struct remote_link *l;
	uint64_t deadline;
	bool tls;
	int n, ret = 0;

	if (!*spec->tier_remote)
		return 0;
	n = kvpd_remote_url_parse(spec->tier_remote, seeds, &tls, why, why_len);
	if (n < 0)
		return n;
	ret = remote_access_init(&access, spec, why, why_len);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l) {
		remote_access_free(&access);
		return -ENOMEM;
	}
	remote_link_init(l, seeds, (uint32_t)n, PROBE_MS, &access);
	deadline = kvpd_now_ns() + PROBE_MS * 1000000ull;
	for (int i = 0; i < n; i++) {
		ret = remote_link_probe(l, (uint32_t)i, deadline);
		if (!ret)
			break;
		if (ret == -EACCES) {
			ret = kvpd_refuse_file(why, why_len, -EACCES, "tier_remote_auth_file",
					       spec->tier_remote_auth_file, "%s", l->why);
			break;
		}
		if (ret == -EPROTO && strstr(l->why, "certificate")) {
			ret = *spec->tier_remote_ca_file ?
			      kvpd_refuse_file(why, why_len, -EPROTO, "tier_remote_ca_file",
					       spec->tier_remote_ca_file, "%s", l->why + 5) :
			      kvpd_refuse(why, why_len, -EPROTO, "tier_remote: %s: %s",
					  seeds[i].host, l->why);
			break;
		}
		ret = 0;
	}
	remote_link_close(l);
	free(l);
	remote_access_free(&access);
	return ret;
}
