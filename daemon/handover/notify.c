/* SPDX-License-Identifier: MIT */
/*
 * systemd's side of a restart, by its notify protocol (sd_notify(3), without
 * libsystemd, as the socket activation is taken): READY=1 once the daemon
 * serves (Type=notify), and at a stop the cache's descriptors into the
 * service's file descriptor store (FDSTORE=1, one FDNAME= each), which
 * systemd passes to the next start beside the listening socket (LISTEN_FDS,
 * LISTEN_FDNAMES). The next run takes them as a planned restart's exec would
 * (restore.c) and then asks systemd to let them go (FDSTOREREMOVE=1): the
 * store holds a memfd's memory for as long as it holds the descriptor.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "handover/handover.h"

void kvpd_notify_init(struct kvpd *d)
{
	const char *path = getenv("NOTIFY_SOCKET");

	if (path && (*path == '/' || *path == '@') && strlen(path) < sizeof(d->handover->notify))
		strcpy(d->handover->notify, path);
}

int kvpd_notify(struct kvpd *d, const char *msg, const int *fds, unsigned nfds)
{
	const char *path = d->handover->notify;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char control[CMSG_SPACE(sizeof(int) * KVPD_NOTIFY_FDS_MAX)] = { 0 };
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = strlen(msg) };
	struct msghdr mh = { .msg_name = &sa, .msg_iov = &iov, .msg_iovlen = 1 };
	socklen_t len;
	int fd, ret = 0;

	if (!*path)
		return -ENOTCONN;
	if (nfds > KVPD_NOTIFY_FDS_MAX)
		return -E2BIG;
	strcpy(sa.sun_path, path);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	if (*path == '@')
		sa.sun_path[0] = '\0'; /* the abstract namespace, as systemd names it */
	else
		len++;
	mh.msg_namelen = len;
	if (nfds) {
		struct cmsghdr *c;

		mh.msg_control = control;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* One descriptor into the store under @name, never polled (a memfd never hangs up). */
static int store_one(struct kvpd *d, const char *name, int fd)
{
	char msg[96];

	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s\nFDPOLL=0", name);
	return kvpd_notify(d, msg, &fd, 1);
}

int kvpd_handover_store(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;
	char name[32];
	int ret = store_one(d, KVPD_STORE_STATE, h->state_fd);

	for (unsigned i = 0; i < h->nkept && !ret; i++) {
		snprintf(name, sizeof(name), KVPD_STORE_FD "%d", h->kept[i]);
		ret = store_one(d, name, h->kept[i]);
	}
	if (ret)
		kvpd_log(d, KVPD_LOG_ERR, "stop: the cache's descriptors cannot be handed to systemd "
			 "(%s): the next start is cold", strerror(-ret));
	else
		kvpd_log(d, KVPD_LOG_NOTICE, "stop: the cache handed to systemd's descriptor store "
			 "(%u descriptors and the state): the next start restores it", h->nkept);
	/* The store holds its own: this run's go, and the exit is a stop's. */
	for (unsigned i = 0; i < h->nkept; i++)
		close(h->kept[i]);
	h->nkept = 0;
	close(h->state_fd);
	h->state_fd = -1;
	return ret;
}

bool kvpd_handover_stop(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;

	kvpd_notify(d, "STOPPING=1", NULL, 0);
	kvpd_handover_refused(d); /* a restart under way is called off */
	if (!*h->notify)
		return false;
	h->requested = true;
	h->to_store = true;
	return true;
}

void kvpd_handover_unstore(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;
	char msg[96];

	for (unsigned i = 0; i < h->nstored; i++) {
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", h->stored[i].name);
		kvpd_notify(d, msg, NULL, 0);
	}
	h->nstored = 0;
}
