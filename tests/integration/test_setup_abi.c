/* SPDX-License-Identifier: MIT */
/*
 * The setup exchange of ABI 2, byte for byte: the reply carries the ring
 * memfd and the doorbell eventfd (and the stats page when asked), nothing a
 * client could use to stall the daemon's wake-ups (ABI 1 passed a CQ eventfd
 * the daemon wrote, whose flags a client could flip). A client of ABI 1 is
 * refused with -EPROTO and told the daemon's ABI; libkvpool, refused by a
 * daemon of another ABI, says which one on stderr. Descriptors sent to the
 * daemon are refused at the sender's end (Linux 6.16 on), even before the
 * daemon has accepted the connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct daemon dmn;

static int dial_or_die(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0 && strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* One setup exchange by hand; returns how many descriptors came, stored in @fds. */
static int raw_setup(uint32_t abi, uint64_t features, struct kvp_setup_reply *r, int fds[8])
{
	struct kvp_setup s = { .magic = KVP_MAGIC, .abi_version = abi, .sq_entries = 8,
			       .arena_bytes = 4096, .features = features };
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = r, .iov_len = sizeof(*r) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	int sock = dial_or_die(dmn.socket), n = 0;

	CHECK_EQ(send(sock, &s, sizeof(s), 0), sizeof(s));
	CHECK_EQ(recvmsg(sock, &msg, MSG_CMSG_CLOEXEC), sizeof(*r));
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		CHECK(cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS);
		n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		CHECK(n <= 8);
		memcpy(fds, CMSG_DATA(cm), (size_t)n * sizeof(int));
	}
	close(sock);
	return n;
}

/* What /proc says @fd is: "/memfd:kvpool-client (deleted)", "anon_inode:[eventfd]". */
static void fd_is(int fd, const char *what)
{
	char path[64], target[128];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	CHECK(n > 0);
	target[n] = '\0';
	if (strcmp(target, what)) {
		fprintf(stderr, "descriptor %d is %s, expected %s\n", fd, target, what);
		exit(1);
	}
}

static void descriptors(void)
{
	struct kvp_setup_reply r;
	int fds[8], n;

	n = raw_setup(KVP_ABI_VERSION, 0, &r, fds);
	CHECK_EQ(r.result, 0);
	CHECK_EQ(r.abi_version, KVP_ABI_VERSION);
	CHECK_EQ(r.version, KVPOOL_VERSION_CODE);
	CHECK_EQ(n, 2);
	fd_is(fds[KVP_FD_MEM], "/memfd:kvpool-client (deleted)");
	fd_is(fds[KVP_FD_DOORBELL], "anon_inode:[eventfd]");
	CHECK(fcntl(fds[KVP_FD_DOORBELL], F_GETFL) & O_NONBLOCK);
	for (int i = 0; i < n; i++)
		close(fds[i]);

	n = raw_setup(KVP_ABI_VERSION, KVP_FEAT_STATS_PAGE, &r, fds);
	CHECK_EQ(r.result, 0);
	CHECK_EQ(n, 3);
	fd_is(fds[KVP_FD_MEM], "/memfd:kvpool-client (deleted)");
	fd_is(fds[KVP_FD_DOORBELL], "anon_inode:[eventfd]");
	/* Without the admin feature, even root's reader gets its uid's view. */
	fd_is(fds[KVP_FD_STATS], "/memfd:kvpool-stats-uid (deleted)");
	for (int i = 0; i < n; i++)
		close(fds[i]);

	n = raw_setup(KVP_ABI_VERSION, KVP_FEAT_STATS_PAGE | KVP_FEAT_ADMIN, &r, fds);
	CHECK_EQ(r.result, 0);
	CHECK_EQ(n, 3);
	fd_is(fds[KVP_FD_STATS], "/memfd:kvpool-stats (deleted)");
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static void abi1_refused(void)
{
	struct kvp_setup_reply r;
	int fds[8];

	CHECK_EQ(raw_setup(1, 0, &r, fds), 0);
	CHECK_EQ(r.result, -EPROTO);
	CHECK_EQ(r.abi_version, KVP_ABI_VERSION);
	CHECK_EQ(r.version, KVPOOL_VERSION_CODE); /* so the client can say which daemon refused */
	CHECK_EQ(r.mmap_bytes, 0);
}

/* A daemon of ABI @abi[0], release @abi[1]: refuses one setup with -EPROTO, as it would. */
static int fake_daemon(void *arg)
{
	const uint32_t *abi = arg;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvp_setup_reply r = { .result = -EPROTO, .abi_version = abi[0], .version = abi[1] };
	struct kvp_setup s;
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET, 0), fd;

	CHECK(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/fake.sock", dmn.dir) <
	      (int)sizeof(sa.sun_path));
	unlink(sa.sun_path);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 1) == 0);
	printf("listening\n");
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0);
	CHECK_EQ(recv(fd, &s, sizeof(s), 0), sizeof(s));
	CHECK_EQ(s.abi_version, KVP_ABI_VERSION);
	CHECK_EQ(send(fd, &r, sizeof(r), 0), sizeof(r));
	close(fd);
	return 0;
}

/*
 * kvp_connect against a daemon of @abi (0: one of ABI 1, which left the field 0) and
 * release @version (0: one before 0.2.0, which sent none).
 */
static void library_says(uint32_t abi, uint32_t version, const char *expected)
{
	uint32_t daemon[2] = { abi, version };
	char path[160], said[256] = "";
	struct kvp_connect_opts o = { .socket_path = path, .timeout_ms = 5000 };
	struct kvp_client *c;
	pid_t pid = fork_child_ready(fake_daemon, daemon);
	int saved = dup(STDERR_FILENO), ret;
	FILE *log = tmpfile();

	CHECK(saved >= 0 && log);
	snprintf(path, sizeof(path), "%s/fake.sock", dmn.dir);
	fflush(stderr);
	dup2(fileno(log), STDERR_FILENO);
	ret = kvp_connect(&o, &c);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	CHECK_EQ(ret, -EPROTO);
	rewind(log);
	CHECK(fgets(said, sizeof(said), log));
	fclose(log);
	if (strcmp(said, expected)) {
		fprintf(stderr, "libkvpool said '%s', expected '%s'\n", said, expected);
		exit(1);
	}
	CHECK_EQ(wait_child(pid), 0);
	unlink(path);
}

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif

/* A setup message with a descriptor attached, sent while the daemon is stopped. */
static void descriptors_refused(void)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct kvp_setup s = { .magic = KVP_MAGIC, .abi_version = KVP_ABI_VERSION, .sq_entries = 8 };
	struct iovec iov = { .iov_base = &s, .iov_len = sizeof(s) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	struct cmsghdr *cm;
	struct kvp_setup_reply r;
	int probe[2], fd, zero = 0;

	/* Kernels before 6.16 have no way to refuse them: they stay queued, unread. */
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, probe) == 0);
	if (setsockopt(probe[0], SOL_SOCKET, SO_PASSRIGHTS, &zero, sizeof(zero))) {
		fprintf(stderr, "no SO_PASSRIGHTS here: descriptors are not refused\n");
		close(probe[0]);
		close(probe[1]);
		return;
	}
	close(probe[0]);
	memset(&ctl, 0, sizeof(ctl));
	cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &probe[1], sizeof(int));
	CHECK_EQ(kill(dmn.pid, SIGSTOP), 0);
	fd = dial_or_die(dmn.socket);
	CHECK_EQ(sendmsg(fd, &msg, 0), -1);
	CHECK_EQ(errno, EPERM);
	CHECK_EQ(kill(dmn.pid, SIGCONT), 0);
	/* Without the descriptor the same message is taken. */
	CHECK_EQ(send(fd, &s, sizeof(s), 0), sizeof(s));
	CHECK_EQ(recv(fd, &r, sizeof(r), 0), sizeof(r));
	CHECK_EQ(r.result, 0);
	close(fd);
	close(probe[1]);
}

int main(void)
{
	watchdog_start("test_setup_abi", 60);
	CHECK_EQ(daemon_start(&dmn, NULL), 0);
	watchdog_watch(&dmn);

	descriptors();
	abi1_refused();
	descriptors_refused();
	library_says(0, 0, "libkvpool: kvpoold speaks ABI 1, libkvpool " KVPOOL_VERSION " ABI 2\n");
	library_says(3, KVP_VERSION_CODE(1, 4, 2),
		     "libkvpool: kvpoold 1.4.2 speaks ABI 3, libkvpool " KVPOOL_VERSION " ABI 2\n");
	/* The daemon served all that and still does. */
	kvp_close(connect_or_die(&dmn, "", "", false));

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
