/* SPDX-License-Identifier: MIT */
/*
 * kvacct: per-client accounting of a running kvpoold from its USDT probes
 * (docs/probes.md), with BPF. Two halves share this header:
 *
 *  - the layout of the BPF map kvacct.bpf.c fills (struct kvacct_stats, keyed
 *    by the client id): plain fixed-size types only, as the BPF side sees it
 *    through vmlinux.h;
 *  - the user-space API (kvacct.c) that loads the program, attaches it to one
 *    daemon and reads the map: kvacct_open, kvacct_read, kvacct_close.
 *
 * Everything counts from the moment of attaching: a client that held blocks
 * before shows them at its next `blocks_held` probe.
 */
#ifndef KVACCT_H
#define KVACCT_H

#ifndef __bpf__
#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#endif

#define KVACCT_MAX_CLIENTS 8192 /* entries of the map; the oldest gone clients make room */
#define KVACCT_HIST_SLOTS 48    /* log2 ns: slot s counts latencies in [2^s, 2^(s+1)), 0 and 1 in slot 0 */
/* Buckets of an op_batch probe's histogram: KVP_HIST_BUCKETS of uapi/kvpool.h (checked in kvacct.c). */
#define KVACCT_BATCH_BUCKETS 40
#define KVACCT_CAUSES 3         /* cache_evict causes: 0 reuse, 1 evict (admin), 2 reset (admin) */

/* One client, as the BPF side keeps it. The event loop, one thread, is the only writer. */
struct kvacct_stats {
	__u64 blocks_held;    /* from the last blocks_held probe */
	__u64 held_since_ns;  /* bpf_ktime_get_ns (CLOCK_MONOTONIC) of that probe */
	__u64 block_sec;      /* integral of blocks_held over time up to held_since_ns: */
	__u64 block_ns;       /* block_sec block-seconds plus block_ns (< 1e9) block-ns */
	__u64 ops;            /* requests completed (op_batch probes) */
	__u64 op_errors;      /* of which result < 0 */
	__u64 gone_ns;        /* client_disconnect time; 0 while connected (or not seen) */
	__s32 pid;            /* from client_connect; 0 when attached after the client connected */
	__u32 uid;
	__u64 evictions[KVACCT_CAUSES]; /* cache entries removed, by cause, that this client caused */
	__u64 lat_hist[KVACCT_HIST_SLOTS]; /* op latency ns, log2 */
};

#ifndef __bpf__

struct kvacct;

/* One row of kvacct_read: a client seen since attaching, its open interval closed at the read. */
struct kvacct_client {
	__u32 client_id;
	__s32 pid;    /* 0: unknown (connected before attaching) */
	__u32 uid;
	bool connected; /* false: its client_disconnect probe fired */
	__u64 blocks_held;
	double block_seconds;
	__u64 ops;
	__u64 op_errors;
	__u64 latency_p50_ns; /* upper bound of the log2 bucket holding the quantile; 0: no ops */
	__u64 latency_p99_ns;
	__u64 evictions[KVACCT_CAUSES];
	__u64 lat_hist[KVACCT_HIST_SLOTS];
};

/* Whether this process may load BPF programs and attach uprobes; else the reason is: */
bool kvacct_privileged(void);
#define KVACCT_NEEDS_ROOT \
	"needs root: loading BPF programs and attaching uprobes need CAP_BPF and CAP_PERFMON " \
	"(or CAP_SYS_ADMIN)"

/*
 * Loads the BPF program and attaches it to the kvpool USDT probes of process
 * pid (a running kvpoold; its binary is /proc/PID/exe). Returns 0 and *out,
 * or -errno: -EPERM without root (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN),
 * -ENOSYS when the kernel lacks BPF or uprobes, -ESRCH when pid is gone,
 * -ENOENT when the binary has no kvpool probes. When why is not NULL it
 * receives a one-line reason on failure.
 */
int kvacct_open(pid_t pid, struct kvacct **out, char *why, size_t why_len);

/*
 * Fills up to max rows, ordered by client id, and returns how many clients the
 * map holds (may exceed max), or -errno. Block-seconds include the interval
 * from each client's last blocks_held probe up to now (or its disconnect).
 */
int kvacct_read(struct kvacct *a, struct kvacct_client *rows, size_t max);

/* Forgets clients that disconnected before the given CLOCK_MONOTONIC ns; returns how many. */
int kvacct_prune(struct kvacct *a, __u64 gone_before_ns);

/* The quantile q (0..1) of a log2 histogram: the upper bound of its bucket; 0 when empty. */
__u64 kvacct_hist_quantile(const __u64 *hist, unsigned slots, double q);

/* Events the BPF side could not account because its map was full. */
__u64 kvacct_missed(const struct kvacct *a);

void kvacct_close(struct kvacct *a);

/* kvctl acct [--json] [--pid PID] [--interval SEC] [--count N]; argv[0] is "acct". */
int kvctl_acct(int argc, char **argv, const char *socket_path);

#endif /* !__bpf__ */
#endif /* KVACCT_H */
