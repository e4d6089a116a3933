/* SPDX-License-Identifier: MIT */
/*
 * kvacct user space: load kvacct.bpf.c (through its skeleton), attach it to
 * the kvpool USDT probes of one kvpoold process, and read the per-client map.
 */
#include <errno.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kvacct.h"
#include "kvacct.skel.h"
#include "../../uapi/kvpool.h"

_Static_assert(KVACCT_BATCH_BUCKETS == KVP_HIST_BUCKETS,
	       "op_batch histograms are the daemon's latency histograms");
_Static_assert(KVACCT_BATCH_BUCKETS <= KVACCT_HIST_SLOTS, "a batch bucket is a slot");

#define NSEC_PER_SEC 1000000000ull

struct kvacct {
	struct kvacct_bpf *skel;
	pid_t pid;
	int map_fd;
};

static void set_why(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void set_why(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

/* libbpf's own messages: warnings always, the rest with KVACCT_DEBUG set. */
static int print_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level != LIBBPF_WARN && !getenv("KVACCT_DEBUG"))
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static bool has_cap(const struct __user_cap_data_struct *data, int cap)
{
	return data[cap / 32].effective & (1u << (cap % 32));
}

/* BPF with uprobes needs CAP_BPF and CAP_PERFMON (kernel >= 5.8), or CAP_SYS_ADMIN. */
bool kvacct_privileged(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { { 0 } };

	if (syscall(SYS_capget, &hdr, data))
		return geteuid() == 0;
	return has_cap(data, CAP_SYS_ADMIN) || (has_cap(data, 39 /* CAP_BPF */) &&
						 has_cap(data, 38 /* CAP_PERFMON */));
}

static __u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * NSEC_PER_SEC + (__u64)ts.tv_nsec;
}

int kvacct_open(pid_t pid, struct kvacct **out, char *why, size_t why_len)
{
	/* The probes kvacct needs, with their programs. */
	struct probe {
		const char *name;
		struct bpf_program *prog;
		struct bpf_link **link;
	};
	char proc_exe[64], exe[PATH_MAX];
	const char *path;
	struct kvacct *a;
	ssize_t n;
	int err;

	*out = NULL;
	if (pid <= 0) {
		set_why(why, why_len, "no daemon pid");
		return -EINVAL;
	}
	if (!kvacct_privileged()) {
		set_why(why, why_len, KVACCT_NEEDS_ROOT);
		return -EPERM;
	}
	snprintf(proc_exe, sizeof(proc_exe), "/proc/%d/exe", (int)pid);
	n = readlink(proc_exe, exe, sizeof(exe) - 1);
	if (n < 0) {
		err = errno;
		if (err == ENOENT) {
			set_why(why, why_len, "no process %d", (int)pid);
			return -ESRCH;
		}
		set_why(why, why_len, "%s: %s%s", proc_exe, strerror(err),
			err == EACCES || err == EPERM ? " (needs root)" : "");
		return -err;
	}
	exe[n] = '\0';
	/* A binary replaced on disk since it started: its probes are only in /proc/PID/exe. */
	path = n > 10 && !strcmp(exe + n - 10, " (deleted)") ? proc_exe : exe;

	if (access("/sys/bus/event_source/devices/uprobe/type", F_OK)) {
		set_why(why, why_len, "this kernel has no uprobe events (CONFIG_UPROBE_EVENTS), "
				      "which USDT probes need");
		return -ENOSYS;
	}

	a = calloc(1, sizeof(*a));
	if (!a) {
		set_why(why, why_len, "out of memory");
		return -ENOMEM;
	}
	a->pid = pid;
	libbpf_set_print(print_libbpf);
	a->skel = kvacct_bpf__open();
	if (!a->skel) {
		err = -errno;
		set_why(why, why_len, "opening the BPF object: %s", strerror(-err));
		goto fail;
	}
	err = kvacct_bpf__load(a->skel);
	if (err) {
		set_why(why, why_len, "loading the BPF program: %s%s", strerror(-err),
			err == -ENOSYS ? " (a kernel without BPF: CONFIG_BPF_SYSCALL)" :
			err == -EPERM || err == -EACCES ? " (not allowed: root, or a seccomp or "
							  "container policy forbids bpf())" : "");
		goto fail;
	}
	a->map_fd = bpf_map__fd(a->skel->maps.clients);
	{
		struct probe probes[] = {
			{ "client_connect", a->skel->progs.kvacct_client_connect,
			  &a->skel->links.kvacct_client_connect },
			{ "client_disconnect", a->skel->progs.kvacct_client_disconnect,
			  &a->skel->links.kvacct_client_disconnect },
			{ "blocks_held", a->skel->progs.kvacct_blocks_held,
			  &a->skel->links.kvacct_blocks_held },
			{ "op_batch", a->skel->progs.kvacct_op_batch,
			  &a->skel->links.kvacct_op_batch },
			{ "cache_evict", a->skel->progs.kvacct_cache_evict,
			  &a->skel->links.kvacct_cache_evict },
		};

		for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
			*probes[i].link = bpf_program__attach_usdt(probes[i].prog, pid, path, "kvpool",
								   probes[i].name, NULL);
			if (*probes[i].link)
				continue;
			err = -errno;
			if (err == -ENOENT)
				set_why(why, why_len, "%s (pid %d) has no USDT probe kvpool:%s: not a "
					"kvpoold built with its probes?", exe, (int)pid, probes[i].name);
			else
				set_why(why, why_len, "attaching to USDT probe kvpool:%s of %s (pid %d): %s",
					probes[i].name, exe, (int)pid, strerror(-err));
			goto fail;
		}
	}
	*out = a;
	return 0;
fail:
	kvacct_close(a);
	return err < 0 ? err : -EIO;
}

__u64 kvacct_hist_quantile(const __u64 *hist, unsigned slots, double q)
{
	__u64 total = 0, rank, seen = 0;

	for (unsigned s = 0; s < slots; s++)
		total += hist[s];
	if (!total)
		return 0;
	/* The smallest rank with at least q of the samples at or below it. */
	rank = (__u64)(q * (double)total);
	if ((double)rank < q * (double)total)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > total)
		rank = total;
	for (unsigned s = 0; s < slots; s++) {
		seen += hist[s];
		if (seen >= rank)
			return s >= 63 ? UINT64_MAX : (2ull << s) - 1;
	}
	return 0;
}

static int cmp_u32(const void *x, const void *y)
{
	__u32 a = *(const __u32 *)x, b = *(const __u32 *)y;

	return a < b ? -1 : a > b;
}

/* The map's keys, sorted; returns how many, or -errno. */
static int map_keys(int fd, __u32 *keys, size_t cap)
{
	__u32 key, next;
	size_t n = 0;
	int err;

	for (err = bpf_map_get_next_key(fd, NULL, &next); !err && n < cap;
	     err = bpf_map_get_next_key(fd, &key, &next)) {
		keys[n++] = next;
		key = next;
	}
	if (err && errno != ENOENT)
		return -errno;
	qsort(keys, n, sizeof(*keys), cmp_u32);
	return (int)n;
}

static void fill_row(struct kvacct_client *r, __u32 id, const struct kvacct_stats *s, __u64 now)
{
	double held = (double)s->block_sec + (double)s->block_ns / NSEC_PER_SEC;

	memset(r, 0, sizeof(*r));
	/* The open interval since the last change, up to now; a gone client's is closed. */
	if (!s->gone_ns && s->held_since_ns && now > s->held_since_ns)
		held += (double)s->blocks_held * (double)(now - s->held_since_ns) / NSEC_PER_SEC;
	r->client_id = id;
	r->pid = s->pid;
	r->uid = s->uid;
	r->connected = !s->gone_ns;
	r->blocks_held = s->blocks_held;
	r->block_seconds = held;
	r->ops = s->ops;
	r->op_errors = s->op_errors;
	memcpy(r->evictions, s->evictions, sizeof(r->evictions));
	memcpy(r->lat_hist, s->lat_hist, sizeof(r->lat_hist));
	r->latency_p50_ns = kvacct_hist_quantile(s->lat_hist, KVACCT_HIST_SLOTS, 0.50);
	r->latency_p99_ns = kvacct_hist_quantile(s->lat_hist, KVACCT_HIST_SLOTS, 0.99);
}

int kvacct_read(struct kvacct *a, struct kvacct_client *rows, size_t max)
{
	__u32 *keys = malloc(KVACCT_MAX_CLIENTS * sizeof(*keys));
	size_t filled = 0;
	__u64 now = now_ns();
	int n;

	if (!keys)
		return -ENOMEM;
	n = map_keys(a->map_fd, keys, KVACCT_MAX_CLIENTS);
	for (int i = 0; i < n && filled < max; i++) {
		struct kvacct_stats s;

		/* A client pruned between the two calls is simply left out. */
		if (bpf_map_lookup_elem(a->map_fd, &keys[i], &s))
			continue;
		fill_row(&rows[filled++], keys[i], &s, now);
	}
	free(keys);
	return n < 0 ? n : (int)(filled < max ? filled : (size_t)n);
}

int kvacct_prune(struct kvacct *a, __u64 gone_before_ns)
{
	__u32 *keys = malloc(KVACCT_MAX_CLIENTS * sizeof(*keys));
	int n, pruned = 0;

	if (!keys)
		return -ENOMEM;
	n = map_keys(a->map_fd, keys, KVACCT_MAX_CLIENTS);
	for (int i = 0; i < n; i++) {
		struct kvacct_stats s;

		if (!bpf_map_lookup_elem(a->map_fd, &keys[i], &s) && s.gone_ns &&
		    s.gone_ns < gone_before_ns && !bpf_map_delete_elem(a->map_fd, &keys[i]))
			pruned++;
	}
	free(keys);
	return n < 0 ? n : pruned;
}

__u64 kvacct_missed(const struct kvacct *a)
{
	return a->skel->bss->missed;
}

void kvacct_close(struct kvacct *a)
{
	if (!a)
		return;
	kvacct_bpf__destroy(a->skel);
	free(a);
}
