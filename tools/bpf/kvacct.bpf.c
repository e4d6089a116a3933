// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * kvacct: per-client accounting of kvpoold from its USDT probes (provider
 * kvpool, docs/probes.md). One hash map, keyed by client id: blocks held now,
 * the integral of blocks held over time, ops, a log2 histogram of op latency
 * and the cache evictions the client caused, by cause. User space (kvacct.c)
 * attaches each program with bpf_program__attach_usdt to one daemon pid.
 *
 * Every probe fires on the daemon's event-loop thread, so each entry has one
 * writer; user space reads it while it changes, a field at a time.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "kvacct.h"

#define NSEC_PER_SEC 1000000000ull

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, KVACCT_MAX_CLIENTS);
	__type(key, __u32);
	__type(value, struct kvacct_stats);
} clients SEC(".maps");

/* The value a new entry starts from (too big for the 512-byte BPF stack). */
static struct kvacct_stats zero_stats;
/* Events lost because the map was full (user space prunes gone clients). */
__u64 missed = 0;

static __always_inline struct kvacct_stats *client_stats(__u32 client)
{
	struct kvacct_stats *s = bpf_map_lookup_elem(&clients, &client);

	if (s)
		return s;
	bpf_map_update_elem(&clients, &client, &zero_stats, BPF_NOEXIST);
	s = bpf_map_lookup_elem(&clients, &client);
	if (!s)
		__sync_fetch_and_add(&missed, 1);
	return s;
}

/* Adds blocks_held * (now - held_since) to the integral, in whole seconds plus a remainder. */
static __always_inline void integrate(struct kvacct_stats *s, __u64 now)
{
	__u64 dt, blocks = s->blocks_held;

	if (s->held_since_ns && now > s->held_since_ns && blocks) {
		dt = now - s->held_since_ns;
		s->block_sec += blocks * (dt / NSEC_PER_SEC);
		s->block_ns += blocks * (dt % NSEC_PER_SEC);
		if (s->block_ns >= NSEC_PER_SEC) {
			s->block_sec += s->block_ns / NSEC_PER_SEC;
			s->block_ns %= NSEC_PER_SEC;
		}
	}
	s->held_since_ns = now;
}

SEC("usdt")
int BPF_USDT(kvacct_client_connect, __u32 client, __s32 pid, __u32 uid)
{
	struct kvacct_stats *s = client_stats(client);

	if (!s)
		return 0;
	s->pid = pid;
	s->uid = uid;
	s->gone_ns = 0;
	return 0;
}

SEC("usdt")
int BPF_USDT(kvacct_client_disconnect, __u32 client, __s32 pid, __u32 uid, __u32 killed,
	     __u32 sequences)
{
	struct kvacct_stats *s = bpf_map_lookup_elem(&clients, &client);
	__u64 now = bpf_ktime_get_ns();

	if (!s)
		s = client_stats(client);
	if (!s)
		return 0;
	if (!s->pid) {
		s->pid = pid;
		s->uid = uid;
	}
	/* Gone: the last probe of its teardown; it holds nothing from now on. */
	integrate(s, now);
	s->blocks_held = 0;
	s->gone_ns = now;
	return 0;
}

SEC("usdt")
int BPF_USDT(kvacct_blocks_held, __u32 client, __u64 blocks)
{
	struct kvacct_stats *s = bpf_map_lookup_elem(&clients, &client);

	/* A drop to 0 of a client not seen since attaching is not worth a row. */
	if (!s && blocks)
		s = client_stats(client);
	if (!s)
		return 0;
	integrate(s, bpf_ktime_get_ns());
	s->blocks_held = blocks;
	return 0;
}

/*
 * One trap per batch of a client's requests, not one per request: a uprobe
 * costs microseconds, a request a few hundred nanoseconds. The batch's
 * latency histogram stays in the daemon; @hist is its address there.
 */
SEC("usdt")
int BPF_USDT(kvacct_op_batch, __u32 client, __u32 ops, __u32 errors, __u64 hist)
{
	struct kvacct_stats *s = client_stats(client);
	__u32 counts[KVACCT_BATCH_BUCKETS];

	if (!s)
		return 0;
	s->ops += ops;
	s->op_errors += errors;
	if (bpf_probe_read_user(counts, sizeof(counts), (const void *)hist))
		return 0;
	for (int i = 0; i < KVACCT_BATCH_BUCKETS; i++)
		s->lat_hist[i] += counts[i];
	return 0;
}

SEC("usdt")
int BPF_USDT(kvacct_cache_evict, __u32 client, __u32 cause, __u32 count)
{
	struct kvacct_stats *s;

	if (cause >= KVACCT_CAUSES)
		return 0;
	s = client_stats(client);
	if (!s)
		return 0;
	s->evictions[cause] += count;
	return 0;
}
