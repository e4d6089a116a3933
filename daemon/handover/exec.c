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
 *
 * An exec tears the old process's memory down before the new image runs:
 * gigabytes of a host tier's pages mapped are a tenth of a second of page
 * tables. The pools and tiers are freed without unmapping theirs (save.c), and
 * a helper sharing the old memory (clone CLONE_VM, a process of its own) holds
 * it across the exec and exits once the exec has closed its pipe: the
 * teardown is its exit's, on another core, while the next run starts. The next
 * run reaps it (its pid in KVPOOLD_HANDOVER, with those of earlier runs' still
 * unreaped).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
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

#define HOLDER_STACK_BYTES (64u << 10)

/* The holder: raw system calls only, on its own stack, in memory it shares with the exec'er. */
static int hold_memory(void *arg)
{
	const int *pipefd = arg;
	char byte;

	syscall(SYS_close, pipefd[1]);
	while (syscall(SYS_read, pipefd[0], &byte, 1) > 0)
		;
	syscall(SYS_exit, 0);
	return 0;
}

/* The holder started: its pid, or 0 (the exec then tears the memory down itself). */
static pid_t start_holder(void)
{
	static int pipefd[2]; /* read by the holder after this frame is gone */
	void *stack = malloc(HOLDER_STACK_BYTES);
	pid_t pid;

	if (!stack || pipe2(pipefd, O_CLOEXEC)) {
		free(stack);
		return 0;
	}
	pid = clone(hold_memory, (uint8_t *)stack + HOLDER_STACK_BYTES, CLONE_VM | SIGCHLD, pipefd);
	close(pipefd[0]);
	if (pid <= 0) {
		close(pipefd[1]);
		free(stack);
		return 0;
	}
	return pid; /* the write end closes at the exec; the stack goes with the old memory */
}

void kvpd_handover_exec(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;
	char env[320];
	pid_t holder;
	int ret;

	ret = inheritable(h->state_fd) ?: inheritable(d->listen_fd) ?: inheritable(d->lock_fd);
	if (ret) {
		kvpd_log(d, KVPD_LOG_ERR, "restart: the descriptors cannot be handed on: %s; "
			 "exiting, the cache lost", strerror(-ret));
		return;
	}
	holder = start_holder();
	kvpd_handover_reap(d);
	snprintf(env, sizeof(env), "state=%d,listen=%d,lock=%d,systemd=%d,asked=%llu,drained=%llu,"
		 "written=%llu,exec=%llu,bytes=%llu,holders=%d", h->state_fd, d->listen_fd, d->lock_fd,
		 d->inherited_path != NULL, (unsigned long long)h->asked_ns,
		 (unsigned long long)h->drained_ns, (unsigned long long)h->written_ns,
		 (unsigned long long)kvpd_now_ns(), (unsigned long long)h->state_bytes, (int)holder);
	/* Those of the runs before, not reaped yet: the next run reaps them. */
	for (unsigned i = 0; i < 7; i++)
		if (h->holders[i] > 0)
			snprintf(env + strlen(env), sizeof(env) - strlen(env), ":%d", (int)h->holders[i]);
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
