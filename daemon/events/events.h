/* SPDX-License-Identifier: MIT */
/*
 * The events room: a pool's KV events in vLLM's wire format (vllm/distributed/
 * kv_events.py), so that the KV-aware routers of multi-node deployments
 * (llm-d, Dynamo) learn which blocks this machine can serve a hit from.
 *
 * What is announced is the union of the pool and its tier: BlockStored when a
 * (group, hash) becomes hittable here (the pool's first cached copy, or a disk
 * tier's block found at start), BlockRemoved when neither holds it anymore,
 * AllBlocksCleared at a reset (then the tier's blocks again); with a cluster
 * tier, what this machine wrote to it or read from it, medium "REMOTE", until
 * it learns the cluster lost it (remote.c). The core and the
 * tier report what moves, on the loop (announce.c); the turn's events leave
 * as one batch, encoded on the loop (encode.c) and handed to the pool's
 * publisher thread through a bounded queue (publish.c), which sends them on a
 * ZMQ PUB socket and serves replays on a ROUTER. docs/events.md has the rules.
 *
 * It may use the pools, tenants, observe, loop and config rooms, the core and
 * the shared headers.
 */
#ifndef KVPOOLD_EVENTS_H
#define KVPOOLD_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpoold.h"
#include "core/kvcore.h"

struct kvpd_events;
struct kvpd_pool;

/*
 * Gives @pool its publisher when its spec asks for one (kv_events; else 0 and
 * nothing): binds its endpoints and starts its thread. Before the tier's
 * attach, so that a disk tier's blocks found at start are announced first.
 * -errno with the reason in @why (a bind's names ZMQ's error and the endpoint).
 */
int kvpd_events_attach(struct kvpd *d, struct kvpd_pool *pool, char *why, size_t why_len);

/* A request on @ev's pool is done: the next block opens a new event. */
void kvpd_events_cut(struct kvpd_events *ev);

/* The loop's turn: each pool's events of the turn leave as one batch. */
void kvpd_events_turn(struct kvpd *d);

/* The events rows of the stats page, from the publishers' counters (housekeeping). */
void kvpd_events_stats(struct kvpd *d);

/*
 * Where a block's hash came from: what BlockStored says of it and what a disk
 * tier keeps to say it again after a restart.
 */
struct kvpd_block_origin {
	uint32_t pos;            /* the block's index in its sequence */
	bool has_parent;
	uint64_t parent;         /* the previous block's hash, low 64 bits */
	const uint32_t *tokens;  /* block_size tokens */
};

/*
 * The tier's side (tier.h's attach, store.c's entries). A tier makes @ev keep
 * an index of what is announced, with each block's origin: @slots entries at
 * most in the tier, beside the pool's blocks. -ENOMEM.
 */
int kvpd_events_tier_start(struct kvpd_events *ev, uint32_t slots, bool disk);
/* A tier entry became hittable (a copy down kept). */
void kvpd_events_tier_held(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key);
/* A hittable tier entry was dropped (room, a failed read, a reset of the tier). */
void kvpd_events_tier_gone(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key);
/*
 * A disk tier's entry found at start, with its origin (NULL: none was kept:
 * never announced); kvpd_events_tier_announce announces them all once the
 * tier is up, parents first.
 */
void kvpd_events_tier_restored(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key,
			       const struct kvpd_block_origin *origin);
void kvpd_events_tier_announce(struct kvpd_events *ev);
/* The origin of an announced (group, hash) into @o (its tokens @ev's): false when unknown. */
bool kvpd_events_origin(const struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key,
			struct kvpd_block_origin *o);

/*
 * restart.c: what a pool announced, handed to the next run by a planned
 * restart (the handover room writes the state): an entry of the index with its
 * origin (its tokens, block_size of them, in an array beside).
 */
struct kvpd_events_saved {
	struct kvc_hash key;
	uint64_t parent;
	uint32_t group, pos;
	uint8_t in_pool, in_tier, has_parent, pad[5];
};
/* The entries a save writes (@ev NULL, or no index: 0), and the tokens of each. */
uint32_t kvpd_events_saved_count(const struct kvpd_events *ev);
uint32_t kvpd_events_block_size(const struct kvpd_events *ev);
void kvpd_events_save(const struct kvpd_events *ev, struct kvpd_events_saved *out,
		      uint32_t *tokens);
/*
 * The next run, once the pool and its tier are restored: the saved entries
 * that the pool (in_pool) or its tier (in_tier, if @tier_back: the tier came
 * back) still hold join the index (merged with a disk tier's found at start),
 * then AllBlocksCleared and every entry announced. n 0: the clear alone (a
 * pool restarted empty).
 */
void kvpd_events_load(struct kvpd_events *ev, const struct kvpd_events_saved *in,
		      const uint32_t *tokens, uint32_t n, bool tier_back);

/*
 * The cluster tier's side (tier/remote*.c, remote.c here): medium "REMOTE",
 * what this machine knows the cluster holds, kept apart from the pool's and
 * its tier's. Started at the cluster tier's attach, bounded by @pool_blocks,
 * the values living @ttl_s (0: no end): 0 (@ev NULL: no events, nothing
 * kept), -ENOMEM.
 */
int kvpd_events_remote_start(struct kvpd_events *ev, uint32_t pool_blocks, uint32_t ttl_s);
/* Whether @ev says what the cluster holds (the sends then keep their blocks' origins). */
bool kvpd_events_remote_on(const struct kvpd_events *ev);
/*
 * The cluster holds (group, @key) since @at_ns (kvpd_now_ns; no later than
 * its TTL began): written or read. Announced with origin @o unless it is
 * already (then renewed); @o NULL: renewed only.
 */
void kvpd_events_remote_held(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key,
			     const struct kvpd_block_origin *o, uint64_t at_ns);
/* Block @pos of @seq (group @group) read whole from the cluster: held, its origin @seq's. */
void kvpd_events_remote_read(struct kvpd_events *ev, struct kvc_seq *seq, uint32_t group,
			     uint32_t pos, uint64_t at_ns);
/* The cluster lacks (group, @key): a miss, a read refused. Withdrawn if announced. */
void kvpd_events_remote_lost(struct kvpd_events *ev, uint32_t group, const struct kvc_hash *key);
/* The pool's keys purged from the cluster: every one withdrawn. */
void kvpd_events_remote_purged(struct kvpd_events *ev);
/* Housekeeping: each pool's REMOTE blocks past their TTL withdrawn. */
void kvpd_events_expire(struct kvpd *d);

#endif
