/* SPDX-License-Identifier: MIT */
/*
 * no_io_uring PROGRAM [ARG]...: runs PROGRAM where io_uring is refused, as
 * Docker's default seccomp profile (since Docker 25) and gVisor refuse it:
 * io_uring_setup, io_uring_enter and io_uring_register fail with EPERM. A
 * classic BPF seccomp filter, installed after PR_SET_NO_NEW_PRIVS so that no
 * privilege is needed; every other system call is allowed.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_ARCH AUDIT_ARCH_AARCH64
#else
#error "no_io_uring: add this architecture's AUDIT_ARCH_"
#endif

#define REFUSE(nr)                                                \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),          \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))

int main(int argc, char **argv)
{
	struct sock_filter filter[] = {
		/* Another architecture's calls (x32, compat) have other numbers: refuse them all. */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		REFUSE(__NR_io_uring_setup),
		REFUSE(__NR_io_uring_enter),
		REFUSE(__NR_io_uring_register),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(filter) / sizeof(filter[0]), .filter = filter };

	if (argc < 2) {
		fprintf(stderr, "usage: no_io_uring PROGRAM [ARG]...\n");
		return 2;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		fprintf(stderr, "no_io_uring: seccomp: %s\n", strerror(errno));
		return 1;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no_io_uring: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
