/* SPDX-License-Identifier: MIT */
/*
 * kvp_connect's failures in words: the errno alone ("No such device") does
 * not say which socket, pool or namespace could not be had, nor what to do.
 */
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "libkvpool.h"

static const char *opt_name(const char *name)
{
	return name ? name : "";
}

static bool starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static void put(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void put(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

/* EACCES: the socket's mode and group say who may connect; an unreadable directory, nobody. */
static void access_denied(const char *path, char *buf, size_t len)
{
	struct stat st;
	struct group *gr;
	char group[32];

	if (stat(path, &st)) {
		put(buf, len, "%s: permission denied (a directory on the way is closed to uid %u)",
		    path, (unsigned)geteuid());
		return;
	}
	gr = getgrgid(st.st_gid);
	if (gr)
		snprintf(group, sizeof(group), "%s", gr->gr_name);
	else
		snprintf(group, sizeof(group), "%u", (unsigned)st.st_gid);
	put(buf, len, "%s: permission denied (the socket is mode %04o, group %s)", path,
	    (unsigned)(st.st_mode & 07777), group);
}

/* -EPERM: the daemon names the namespace or the pool; admin it refuses without a word. */
static void not_permitted(const struct kvp_connect_opts *o, const char *path, const char *why,
			  char *buf, size_t len)
{
	const char *ns = opt_name(o->namespace_), *pool = opt_name(o->pool);
	struct stat st;

	if (*ns && starts_with(why, "namespace '"))
		put(buf, len, "namespace '%s' refused on %s: uid %u is not granted it "
		    "(config [namespace.%s] uids)", ns, path, (unsigned)geteuid(), ns);
	else if (*why && *pool)
		put(buf, len, "pool '%s' refused on %s: %s", pool, path, why);
	else if (*why)
		put(buf, len, "%s refused the connection: %s", path, why);
	else if (o->admin && !stat(path, &st))
		put(buf, len, "%s: admin refused to uid %u (admin needs root or the daemon's uid %u)",
		    path, (unsigned)geteuid(), (unsigned)st.st_uid);
	else
		put(buf, len, "%s: permission denied%s", path, o->admin ? " (admin needs root or the "
		    "daemon's uid)" : "");
}

const char *kvp_connect_error(const struct kvp_connect_opts *o, int err, char *buf, size_t len)
{
	static const struct kvp_connect_opts none;
	const char *path, *why, *pool;
	struct sockaddr_un sa;

	if (!buf || !len)
		return buf;
	o = o ? o : &none;
	path = o->socket_path ? o->socket_path : getenv("KVPOOL_SOCKET");
	path = path ? path : KVP_DEFAULT_SOCKET;
	why = o->why && o->why_len ? o->why : "";
	pool = opt_name(o->pool);
	switch (err) {
	case -ENOENT:
	case -ECONNREFUSED:
		put(buf, len, "no kvpoold at %s (is it running? kvpoold -s %s)", path, path);
		break;
	case -EACCES:
		access_denied(path, buf, len);
		break;
	case -EPERM:
		not_permitted(o, path, why, buf, len);
		break;
	case -ENODEV:
		/* The daemon's "no pool 'NAME'" says no more than this; another reason is its own. */
		if (!*why || starts_with(why, "no pool '"))
			put(buf, len, "pool '%s' not found on %s (kvctl pool create ...)", pool, path);
		else
			put(buf, len, "pool '%s' refused on %s: %s", pool, path, why);
		break;
	case -ENAMETOOLONG:
		if (strlen(path) >= sizeof(sa.sun_path))
			put(buf, len, "socket path longer than %zu bytes: %s", sizeof(sa.sun_path) - 1,
			    path);
		else
			put(buf, len, "%s name longer than %d bytes: '%s'",
			    strlen(pool) >= KVP_NAME_MAX ? "pool" : "namespace", KVP_NAME_MAX - 1,
			    strlen(pool) >= KVP_NAME_MAX ? pool : opt_name(o->namespace_));
		break;
	case -ETIMEDOUT:
		put(buf, len, "no answer from kvpoold at %s within %u ms (stopped, or swamped?)", path,
		    o->timeout_ms ? o->timeout_ms : 30000);
		break;
	case -EUSERS:
		put(buf, len, "%s turned the connection away: %s", path,
		    *why ? why : "too many clients");
		break;
	case -EPROTO:
		/* An ABI mismatch was printed by kvp_connect itself, naming both releases. */
		put(buf, len, "%s: %s", path, *why ? why : "not the kvpool protocol of this library");
		break;
	case -ECONNRESET:
		put(buf, len, "kvpoold at %s hung up during the setup%s%s", path, *why ? ": " : "", why);
		break;
	default:
		if (*why)
			put(buf, len, "%s refused the connection: %s", path, why);
		else
			put(buf, len, "%s: %s", path, strerror(-err));
		break;
	}
	return buf;
}
