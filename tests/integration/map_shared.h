/* SPDX-License-Identifier: MIT */
/*
 * A mapped pool shared by two processes of one namespace, on a host pool
 * (test_pool_map_shared) or a cuda pool (test_cuda_shared), the same scenario
 * on both (map_shared.c): a pool in the layer layout with two groups (full,
 * swa:8), two layers, two f16 kv heads:
 *   1. A maps the pool, writes the KV of a 14-token prompt of every group and
 *      layer through its mapping at the blocks its table names and COMMITs
 *      (refused with -ENODATA before any mapping: the daemon takes the word
 *      of a mapped pool's clients only). B, another process, opens the same
 *      prompt and hits exactly A's 3 full blocks (12 tokens; the swa group's
 *      first one a null), maps the pool itself, reads A's bytes bit for bit
 *      at its own table's blocks, and its ATTEND through the daemon equals
 *      the double reference (kvref.c) within TOL_F32.
 *   2. A is SIGKILLed in the middle of its run (an ATTEND after another, on
 *      its own sequence), holding two sequences and its mapping: exactly its
 *      own blocks come back (used/free/cached counts, invariants checked), and
 *      B still reads the same bytes, attends the same, and allocates (A's
 *      freed blocks), writes and commits more.
 * Through a cuda pool's mapping, the bytes go with the driver's copies.
 */
#ifndef KVPOOL_TEST_MAP_SHARED_H
#define KVPOOL_TEST_MAP_SHARED_H

#include <stdbool.h>
#include <stdint.h>

#include "harness.h"

#define POOL "p"
#define NS "ns1"
#define NBLOCKS 24
#define BS 4
#define KVH 2
#define HD 8

/* The daemon the scenario runs on; @cuda: its pool POOL is a cuda pool. */
void map_shared_init(struct daemon *d, bool cuda);
/* Parts 1 and 2, the caller being B; @adm: an admin client attached to POOL. */
void map_shared_prefix(struct kvp_client *adm);
/* A client of NS attached to @pool, with or without .pool_map. */
struct kvp_client *map_connect_ns(const char *pool, bool pool_map);
/* The layout the pool must report, one piece. */
void map_check(const struct kvp_pool_map *m);
/* Element (block @b, token @t, kv head @h, dim @d) of K (@w 0) or V (@w 1) of layer @l. */
uint8_t *map_elem(const struct kvp_pool_map *m, uint32_t w, uint32_t l, uint32_t b, uint32_t t,
		  uint32_t h, uint32_t d);
void map_expect_stats(struct kvp_client *adm, uint32_t free_, uint32_t used, uint32_t cached);

#endif
