/* SPDX-License-Identifier: MIT */
/*
 * The listening socket (top level): made at a path guarded by SOCKET.lock, or
 * taken from systemd (socket activation). A planned restart hands both to the
 * next run instead (handover/).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "serve.h"
#include "handover/handover.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83 /* Linux 6.16 */
#endif

/* A daemon killed a moment ago holds its lock until the kernel has closed its files. */
#define LOCK_WAIT_MS 1000

/*
 * SOCKET.lock, flock(2)ed for the daemon's life: a live daemon holds it, a dead
 * one does not, however it died. A held lock is tried again for LOCK_WAIT_MS:
 * a restart right after a kill -9 finds the old daemon still exiting. The
 * lock file is removed at exit while still held; one whose path no longer
 * names it was removed by a daemon exiting while we opened it, so it is
 * opened again.
 */
static int lock_socket_path(const char *path, int *out)
{
	char lock[PATH_MAX];
	struct stat held, named;
	unsigned waited_ms = 0;
	int fd, ret;

	if (snprintf(lock, sizeof(lock), "%s.lock", path) >= (int)sizeof(lock))
		return -ENAMETOOLONG;
	for (;;) {
		fd = open(lock, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			ret = errno == EWOULDBLOCK ? -EADDRINUSE : -errno;
			close(fd);
			if (ret != -EADDRINUSE || waited_ms >= LOCK_WAIT_MS)
				return ret;
			usleep(10000);
			waited_ms += 10;
			continue;
		}
		if (fstat(fd, &held) == 0 && stat(lock, &named) == 0 && held.st_ino == named.st_ino &&
		    held.st_dev == named.st_dev)
			break;
		close(fd);
	}
	*out = fd;
	return 0;
}

void kvpd_unlock_socket_path(const char *path, int fd)
{
	char lock[PATH_MAX];

	if (fd < 0)
		return;
	snprintf(lock, sizeof(lock), "%s.lock", path);
	unlink(lock);
	close(fd);
}

/* Whether something accepts connections at @path. */
static bool socket_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	bool answers;

	if (fd < 0)
		return false;
	strcpy(sa.sun_path, path);
	/* EAGAIN: a full backlog, someone is listening. */
	answers = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN;
	close(fd);
	return answers;
}

/*
 * With the lock held, a socket file at the path is a dead daemon's and is
 * replaced. Unless it still answers: a daemon killed a moment ago closes its
 * lock before its listening socket, and one that takes no lock (older than
 * the lock, or not a kvpoold) must keep its socket. Tried for LOCK_WAIT_MS.
 */
static int claim_path(const char *path)
{
	struct stat st;

	if (lstat(path, &st))
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	for (unsigned waited_ms = 0; socket_answers(path); waited_ms += 10) {
		if (waited_ms >= LOCK_WAIT_MS)
			return -EADDRINUSE;
		usleep(10000);
	}
	return unlink(path) ? -errno : 0;
}

/* The first descriptor systemd passes (sd_listen_fds(3)'s SD_LISTEN_FDS_START). */
#define LISTEN_FDS_START 3

/* LISTEN_FDNAMES's @i-th name (colon separated) into @out, or "" when it has none. */
static void fd_name(const char *names, unsigned i, char *out, size_t len)
{
	*out = '\0';
	while (names && i--)
		names = (names = strchr(names, ':')) ? names + 1 : NULL;
	if (names)
		snprintf(out, len, "%.*s", (int)strcspn(names, ":"), names);
}

/*
 * Descriptor @fd, passed by @whom, made the daemon's listening socket: a
 * listening AF_UNIX SOCK_SEQPACKET socket with a path, which it returns
 * (allocated); NULL with @why filled otherwise.
 */
static char *take_listening(int fd, const char *whom, char *why, size_t why_len)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa), optlen = sizeof(int);
	int type = 0, listening = 0;
	char *path;

	if (getsockname(fd, (struct sockaddr *)&sa, &len) || sa.sun_family != AF_UNIX ||
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &optlen) || type != SOCK_SEQPACKET ||
	    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) || !listening ||
	    len <= offsetof(struct sockaddr_un, sun_path) || !sa.sun_path[0]) {
		snprintf(why, why_len, "the socket %s (fd %d) is not a listening AF_UNIX "
			 "SOCK_SEQPACKET socket with a path (ListenSequentialPacket=)", whom, fd);
		return NULL;
	}
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)) {
		snprintf(why, why_len, "the socket %s: %s", whom, strerror(errno));
		return NULL;
	}
	path = strndup(sa.sun_path, len - offsetof(struct sockaddr_un, sun_path));
	if (!path) {
		snprintf(why, why_len, "the socket %s: %s", whom, strerror(ENOMEM));
		return NULL;
	}
	/* As listen_on's: descriptors a client would send are refused at its end. */
	setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &(int){ 0 }, sizeof(int));
	return path;
}

/* Descriptor @fd is the listening socket systemd passed: 0, or -errno with @why. */
static int take_listener(struct kvpd *d, int fd, char *why, size_t why_len)
{
	char *path;

	if (d->listen_fd >= 0) {
		snprintf(why, why_len, "systemd passed more than one socket (fds %d and %d): "
			 "kvpoold takes exactly one", d->listen_fd, fd);
		return -EINVAL;
	}
	path = take_listening(fd, "systemd passed", why, why_len);
	if (!path)
		return -EINVAL;
	d->inherited_path = path;
	d->cfg.socket_path = path;
	d->listen_fd = fd;
	return 0;
}

int kvpd_listen_handed(struct kvpd *d, char *why, size_t why_len)
{
	struct kvpd_handover *h = d->handover;
	char *path = take_listening(h->listen_fd, "the last run handed over", why, why_len);

	if (!path)
		return -EBADF;
	if (strcmp(d->cfg.socket_path, path))
		kvpd_log(d, KVPD_LOG_WARNING, "restart: socket %s kept (the socket setting says %s: "
			 "a stop and a start moves it)", path, d->cfg.socket_path);
	d->listen_fd = h->listen_fd;
	if (h->listen_systemd) {
		d->inherited_path = path; /* systemd's still: no lock, no unlink */
		d->cfg.socket_path = path;
		return 0;
	}
	snprintf(h->socket_path, sizeof(h->socket_path), "%s", path);
	free(path);
	d->cfg.socket_path = h->socket_path;
	if (h->lock_fd >= 0) {
		fcntl(h->lock_fd, F_SETFD, FD_CLOEXEC);
		d->lock_fd = h->lock_fd;
	}
	return 0;
}

/*
 * Socket activation, by the LISTEN_FDS protocol (no libsystemd): 1 and the
 * socket in d->listen_fd when systemd passed one, 0 when it passed none,
 * else -errno with @why filled. Beside it may come what a stop put in the
 * service's file descriptor store (LISTEN_FDNAMES kvpool-*: the handover
 * room's, restored with the pools). The variables are unset so that nothing
 * the daemon starts takes them for its own.
 */
int kvpd_inherit_socket(struct kvpd *d, char *why, size_t why_len)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	const char *names = getenv("LISTEN_FDNAMES");
	char *end, name[64];
	long n;
	int ret = 0;

	if (!pid || !fds || strtol(pid, NULL, 10) != getpid())
		return 0;
	n = strtol(fds, &end, 10);
	if (*end || end == fds || n < 1 || n > 1024) {
		snprintf(why, why_len, "LISTEN_FDS=%s: not a count of descriptors", fds);
		ret = -EINVAL;
	}
	for (long i = 0; !ret && i < n; i++) {
		fd_name(names, (unsigned)i, name, sizeof(name));
		if (!kvpd_handover_stored(d, name, LISTEN_FDS_START + (int)i))
			ret = take_listener(d, LISTEN_FDS_START + (int)i, why, why_len);
	}
	if (!ret && d->listen_fd < 0) {
		snprintf(why, why_len, "LISTEN_FDS=%s: no listening socket among them", fds);
		ret = -EINVAL;
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return ret ? ret : 1;
}

int kvpd_listen_on(struct kvpd *d)
{
	const char *path = d->cfg.socket_path;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)];
	char *slash;
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) && errno != EEXIST)
			return -errno;
	}
	ret = lock_socket_path(path, &d->lock_fd);
	if (ret)
		return ret;
	ret = claim_path(path);
	if (ret)
		goto err_unlock;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		ret = -errno;
		goto err_unlock;
	}
	/*
	 * Descriptors a client sends would be ours to release, and a release can
	 * be slow (an epoll set with many watches): refused at the client's end
	 * (Linux 6.16 on; connections inherit it from here, also while they wait
	 * for accept). Older kernels queue them with the setup message, which is
	 * only peeked at: they leave with the socket, on the courier.
	 */
	setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &(int){ 0 }, sizeof(int));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || chmod(path, 0660))
		goto err_close;
	if (d->cfg.socket_group) {
		struct group *gr = getgrnam(d->cfg.socket_group);

		if (!gr) {
			errno = ENOENT;
			goto err_unlink;
		}
		if (chown(path, (uid_t)-1, gr->gr_gid))
			goto err_unlink;
	}
	if (listen(fd, 128))
		goto err_unlink;
	d->listen_fd = fd;
	return 0;

err_unlink:
	ret = -errno;
	unlink(path);
	close(fd);
	goto err_unlock;
err_close:
	ret = -errno;
	close(fd);
err_unlock:
	kvpd_unlock_socket_path(path, d->lock_fd);
	d->lock_fd = -1;
	return ret;
}

