/* SPDX-License-Identifier: MIT */
/*
 * KVP_OP_DAEMON_RESTART: the binary to exec is checked before anything
 * stops, so that a restart that cannot happen costs nothing: a regular file
 * this process may execute, an ELF, that runs (its libraries load) and says
 * it is a kvpoold. Once it passes, the daemon stops accepting and taking
 * requests; the loop ends when what it took is done, and main.c goes on
 * with the save and the exec.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handover/handover.h"

/* How long the candidate may take to print its version (an ASan build starts slowly). */
#define DRY_RUN_MS 5000

extern char **environ;

/* The candidate run as "PATH --version": 0 when it prints "kvpoold " and exits 0. */
static int dry_run(const char *path, char *why, size_t why_len)
{
	char *argv[] = { (char *)path, "--version", NULL };
	posix_spawn_file_actions_t fa;
	char out[128] = "";
	size_t got = 0;
	int pipefd[2], status = 0, ret;
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC))
		return kvpd_refuse(why, why_len, -errno, "a pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
	ret = -posix_spawn(&pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	if (ret) {
		close(pipefd[0]);
		return kvpd_refuse(why, why_len, ret, "%s: %s", path, strerror(-ret));
	}
	for (uint64_t deadline = kvpd_now_ns() + DRY_RUN_MS * 1000000ull; got < sizeof(out) - 1;) {
		struct pollfd p = { .fd = pipefd[0], .events = POLLIN };
		uint64_t now = kvpd_now_ns();
		ssize_t n;

		if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000000) + 1) <= 0)
			break;
		n = read(pipefd[0], out + got, sizeof(out) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(pipefd[0]);
	kill(pid, SIGKILL); /* gone already, unless it hung */
	waitpid(pid, &status, 0);
	out[strcspn(out, "\n")] = '\0';
	if (strncmp(out, "kvpoold ", 8) || !WIFEXITED(status) || WEXITSTATUS(status))
		return kvpd_refuse(why, why_len, -ENOEXEC, "%s --version %s%s%s: not a kvpoold "
				   "that runs here", path, *out ? "printed \"" : "printed nothing",
				   out, *out ? "\"" : "");
	return 0;
}

/* @path opened, checked an executable ELF file: its descriptor, or -errno with @why. */
static int open_binary(const char *path, char *why, size_t why_len)
{
	unsigned char magic[4];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return kvpd_refuse(why, why_len, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return kvpd_refuse(why, why_len, -EACCES, "%s: not a regular file", path);
	}
	if (access(path, X_OK)) {
		int err = errno;

		close(fd);
		return kvpd_refuse(why, why_len, -err, "%s: %s", path, strerror(err));
	}
	if (pread(fd, magic, sizeof(magic), 0) != (ssize_t)sizeof(magic) ||
	    memcmp(magic, "\x7f" "ELF", 4)) {
		close(fd);
		return kvpd_refuse(why, why_len, -ENOEXEC, "%s: not an ELF executable", path);
	}
	return fd;
}

int kvpd_restart_request(struct kvpd *d, const char *path, uint32_t len, uint32_t pid,
			 uint32_t uid, char *why, size_t why_len)
{
	struct kvpd_handover *h = d->handover;
	char named[PATH_MAX];
	int fd, ret;

	if (h->requested)
		return kvpd_refuse(why, why_len, -EALREADY, "a restart is under way");
	if (d->stopping)
		return kvpd_refuse(why, why_len, -ESHUTDOWN, "the daemon is stopping");
	if (len >= sizeof(named))
		return kvpd_refuse(why, why_len, -ENAMETOOLONG, "the path is %u bytes long", len);
	if (len) {
		memcpy(named, path, len);
		named[len] = '\0';
		if (memchr(named, '\0', len))
			return kvpd_refuse(why, why_len, -EINVAL, "the path holds a NUL byte");
		if (!realpath(named, h->exe_path))
			return kvpd_refuse(why, why_len, -errno, "%s: %s", named, strerror(errno));
	} else {
		snprintf(h->exe_path, sizeof(h->exe_path), "%s", h->start_path);
	}
	fd = open_binary(h->exe_path, why, why_len);
	if (fd < 0)
		return fd;
	ret = dry_run(h->exe_path, why, why_len);
	if (ret) {
		close(fd);
		return ret;
	}
	h->exe_fd = fd;
	h->requested = true;
	h->asked_ns = kvpd_now_ns();
	d->stopping = true;
	d->ev->accept_stop(d);
	kvpd_log(d, KVPD_LOG_NOTICE, "restart asked by pid %u uid %u: exec %s once in-flight work "
		 "is done, the cache handed over", pid, uid, h->exe_path);
	return 0;
}
