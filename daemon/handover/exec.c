/* SPDX-License-Identifier: MIT */
/*
 * The exec of a planned restart: the same process runs the next binary, with
 * what the state names inherited (the memfds, the state itself), the
 * listening socket (connections made meanwhile wait in its backlog for the
 * next run) and SOCKET.lock, held throughout, so that no other kvpoold can
 * judge the socket dead and take its path. Their numbers go in the
 * environment, KVPOOLD_HANDOVER. If the binary cannot be run after all, this
 * run's own binary (opened at start: the file, even if replaced since) runs
 * instead with the same state: the cache survives, the log says why.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handover/handover.h"

extern char **environ;

bool kvpd_handover_keeps_socket(const struct kvpd *d)
{
	return d->handover->state_fd >= 0;
}

static int inheritable(int fd)
{
	int flags = fd >= 0 ? fcntl(fd, F_GETFD) : 0;

	return fd < 0 || (flags >= 0 && fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) == 0) ? 0 : -errno;
}

void kvpd_handover_exec(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;
	char env[256];
	int ret;

	ret = inheritable(h->state_fd) ?: inheritable(d->listen_fd) ?: inheritable(d->lock_fd);
	if (ret) {
		kvpd_log(d, KVPD_LOG_ERR, "restart: the descriptors cannot be handed on: %s; "
			 "exiting, the cache lost", strerror(-ret));
		return;
	}
	snprintf(env, sizeof(env), "state=%d,listen=%d,lock=%d,systemd=%d,asked=%llu,drained=%llu,"
		 "written=%llu,exec=%llu,bytes=%llu", h->state_fd, d->listen_fd, d->lock_fd,
		 d->inherited_path != NULL, (unsigned long long)h->asked_ns,
		 (unsigned long long)h->drained_ns, (unsigned long long)h->written_ns,
		 (unsigned long long)kvpd_now_ns(), (unsigned long long)h->state_bytes);
	if (setenv("KVPOOLD_HANDOVER", env, 1)) {
		kvpd_log(d, KVPD_LOG_ERR, "restart: setenv: %s; exiting, the cache lost",
			 strerror(errno));
		return;
	}
	/* The next run's "path it was started from" is the one it was started from now. */
	h->argv[0] = h->exe_path;
	fexecve(h->exe_fd, h->argv, environ);
	kvpd_log(d, KVPD_LOG_ERR, "restart: exec %s: %s: this build runs again instead, the cache "
		 "handed over", h->exe_path, strerror(errno));
	h->argv[0] = h->start_path;
	if (h->self_fd >= 0)
		fexecve(h->self_fd, h->argv, environ);
	kvpd_log(d, KVPD_LOG_ERR, "restart: this build cannot run again either (%s): exiting, "
		 "the cache lost", strerror(errno));
}
