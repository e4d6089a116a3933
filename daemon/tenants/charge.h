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
};

/* The kvc_hold_fn of every pool; the owner of a sequence is its client's charge. */
void kvpd_charge_hold(void *owner, uint32_t block, bool held);
/*
 * A client's charge and its tenants' (also[], at the time), as a data-path job
 * keeps them: a block the job pins counts as held by each, from launch to
 * completion, so a FREE while the job runs does not uncharge what stays out of
 * the free queue (docs/reliability.md). NULL entries are skipped, and so are
 * null ids, as kvc_pin skips them.
 */
#define KVPD_CHARGES 3
void kvpd_charge_pins(struct kvpd_charge *const charges[KVPD_CHARGES], const uint32_t *ids,
		      uint32_t n, bool pinned);
/* Whether @ch counts @block. */
bool kvpd_charge_holds(const struct kvpd_charge *ch, uint32_t block);
void kvpd_charge_release(struct kvpd_charge *ch);

#endif
