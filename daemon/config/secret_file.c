/* SPDX-License-Identifier: MIT */
/*
 * A secret a pool's config names by path (tier_remote_auth_file,
 * tier_remote_key_file): read only if no uid but root's and the daemon's can
 * read it, by its mode and its POSIX ACL both, so that systemd's
 * LoadCredential= files (0400 root, an ACL entry for the service's user) are
 * taken and a file a careless chmod opened is refused. What it holds is never
 * logged nor put in a reason.
 */
#include <acl/libacl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/acl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "refuse.h"

int kvpd_refuse_file(char *why, size_t why_len, int err, const char *key, const char *path,
	    const char *fmt, ...)
{
	char cause[KVPD_SECRET_WHY_MAX];
	size_t room, plen = strlen(path);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cause, sizeof(cause), fmt, ap);
	va_end(ap);
	room = why_len > strlen(key) + strlen(cause) + 5 ? why_len - strlen(key) - strlen(cause) - 5 :
	       4;
	if (plen <= room)
		return kvpd_refuse(why, why_len, err, "%s: %s: %s", key, path, cause);
	return kvpd_refuse(why, why_len, err, "%s: ...%s: %s", key, path + plen - (room - 3), cause);
}

/* Whom the ACL of @fd lets read it, besides root and the daemon: 0 (none), or refused. */
static int readers_check(int fd, const char *key, const char *path, char *why, size_t why_len)
{
	acl_t acl = acl_get_fd(fd);
	acl_permset_t mask_perms = NULL;
	acl_entry_t e;
	int ret = 0, id;

	if (!acl)
		return errno == ENOTSUP ? 1 : kvpd_refuse_file(why, why_len, -errno, key, path,
							  "its ACL: %s", strerror(errno));
	/* The mask bounds what named entries and the owning group get. */
	for (id = ACL_FIRST_ENTRY; acl_get_entry(acl, id, &e) == 1; id = ACL_NEXT_ENTRY) {
		acl_tag_t tag;

		if (!acl_get_tag_type(e, &tag) && tag == ACL_MASK)
			acl_get_permset(e, &mask_perms);
	}
	for (id = ACL_FIRST_ENTRY; !ret && acl_get_entry(acl, id, &e) == 1; id = ACL_NEXT_ENTRY) {
		acl_permset_t perms;
		acl_tag_t tag;
		void *q;
		unsigned who;

		if (acl_get_tag_type(e, &tag) || acl_get_permset(e, &perms) ||
		    acl_get_perm(perms, ACL_READ) != 1)
			continue;
		if ((tag == ACL_USER || tag == ACL_GROUP || tag == ACL_GROUP_OBJ) && mask_perms &&
		    acl_get_perm(mask_perms, ACL_READ) != 1)
			continue;
		if (tag == ACL_OTHER) {
			ret = kvpd_refuse_file(why, why_len, -EACCES, key, path, "readable by others");
		} else if (tag == ACL_GROUP_OBJ) {
			ret = kvpd_refuse_file(why, why_len, -EACCES, key, path, "readable by its group");
		} else if (tag == ACL_USER || tag == ACL_GROUP) {
			q = acl_get_qualifier(e);
			who = q ? *(unsigned *)q : 0;
			acl_free(q);
			if (tag == ACL_GROUP)
				ret = kvpd_refuse_file(why, why_len, -EACCES, key, path,
						  "readable by group %u (its ACL)", who);
			else if (who != 0 && who != (unsigned)geteuid())
				ret = kvpd_refuse_file(why, why_len, -EACCES, key, path,
						  "readable by uid %u (its ACL)", who);
		}
	}
	acl_free(acl);
	return ret;
}

int kvpd_secret_read(const char *key, const char *path, uint8_t *buf, size_t cap, char *why,
		     size_t why_len)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	char full[KVPD_REMOTE_FILE_MAX + 4096];
	struct stat st;
	ssize_t got;
	int fd, ret;

	/* A relative name is a credential systemd loaded for the unit (LoadCredential=). */
	if (path[0] != '/') {
		if (!dir || !*dir)
			return kvpd_refuse_file(why, why_len, -EINVAL, key, path, "relative, and no "
					   "$CREDENTIALS_DIRECTORY");
		snprintf(full, sizeof(full), "%s/%s", dir, path);
		path = full;
	}
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return kvpd_refuse_file(why, why_len, -errno, key, path, "%s", strerror(errno));
	if (fstat(fd, &st)) {
		ret = kvpd_refuse_file(why, why_len, -errno, key, path, "%s", strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = kvpd_refuse_file(why, why_len, -EINVAL, key, path, "not a regular file");
		goto out_close;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		ret = kvpd_refuse_file(why, why_len, -EACCES, key, path, "owned by uid %u, neither root "
				  "nor the daemon", (unsigned)st.st_uid);
		goto out_close;
	}
	ret = readers_check(fd, key, path, why, why_len);
	if (ret == 1) /* a file system without ACLs: the mode says it all */
		ret = st.st_mode & S_IROTH ? kvpd_refuse_file(why, why_len, -EACCES, key, path,
							 "readable by others (mode %04o)",
							 (unsigned)st.st_mode & 07777) :
		      st.st_mode & S_IRGRP ? kvpd_refuse_file(why, why_len, -EACCES, key, path,
							 "readable by its group (mode %04o)",
							 (unsigned)st.st_mode & 07777) : 0;
	if (ret)
		goto out_close;
	got = read(fd, buf, cap);
	if (got < 0) {
		ret = kvpd_refuse_file(why, why_len, -errno, key, path, "%s", strerror(errno));
		goto out_close;
	}
	if ((size_t)got == cap && read(fd, &(char){ 0 }, 1) == 1) {
		ret = kvpd_refuse_file(why, why_len, -EINVAL, key, path, "over %zu bytes", cap);
		explicit_bzero(buf, cap);
		goto out_close;
	}
	ret = (int)got;
out_close:
	close(fd);
	return ret;
}
