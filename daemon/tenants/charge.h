/* SPDX-License-Identifier: MIT */
/*
 * The charging rule: a client is charged one block for each distinct block its
 * sequences hold; a block two of its sequences share counts once, and one
 * shared with another client counts for both. Kept exact, incrementally, from
 * the core's hold hook: per client, a map block -> how many of its table
 * entries name it.
 */
#ifndef KVPOOLD_CHARGE_H
#define KVPOOLD_CHARGE_H

#include <stdbool.h>
#include <stdint.h>

struct kvc_pool;

struct kvpd_charge {
	uint32_t *keys;   /* block id + 1; 0 = empty slot */
	uint32_t *counts;
	uint32_t cap, len;
	uint64_t blocks;  /* distinct blocks: the charge */
	uint64_t limit;   /* a tenant's max_blocks (KVP_QUOTA_UNLIMITED: none) */
	bool failed;      /* out of memory once: the charge is no longer exact */
	bool failure_logged;
	/*
	 * A client's charge feeds its tenants' in the same pool (its uid's, its
	 * namespace's): each counts the same holds, distinct over its own clients.
	 */
	struct kvpd_charge *also[2];
	/*
	 * A client's, set by the session: while it has requests in flight
	 * (*inflight), a block its sequences let go of that a request still pins
	 * (kvc_block_pins in @pool) stays out of the free queue, so it stays
	 * charged, to it and to the tenants it fed then (deferred), until
	 * kvpd_charge_settle: a FREE under its own requests must not make room
	 * for its next ALLOC out of blocks it still keeps (docs/reliability.md).
	 */
	const uint32_t *inflight;
	const struct kvc_pool *pool;
	struct kvpd_deferred {
		struct kvpd_charge *ch;
		uint32_t block;
	} *deferred;
	uint32_t ndeferred, deferred_cap;
};

/* The kvc_hold_fn of every pool; the owner of a sequence is its client's charge. */
void kvpd_charge_hold(void *owner, uint32_t block, bool held);
/*
 * Once @ch's client has no request in flight: the holds kept for blocks it let
 * go of while they were pinned are let go too.
 */
void kvpd_charge_settle(struct kvpd_charge *ch);
bool kvpd_charge_holds(const struct kvpd_charge *ch, uint32_t block);
void kvpd_charge_release(struct kvpd_charge *ch);

#endif
