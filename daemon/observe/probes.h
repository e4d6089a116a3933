/* SPDX-License-Identifier: MIT */
/*
 * USDT probes (provider kvpool; the contract is docs/probes.md). Each probe's
 * semaphore counts attached tracers, so an unattached probe costs a test of a
 * global short; the semaphores are the one global state the daemon allows.
 */
#ifndef KVPOOLD_PROBES_H
#define KVPOOLD_PROBES_H

#define _SDT_HAS_SEMAPHORES 1
#define SDT_USE_VARIADIC 1
#include <sys/sdt.h>

#define KVPD_PROBES(X)                                                              \
	X(client_connect) X(client_disconnect) X(seq_open) X(seq_close) X(seq_free) \
	X(alloc) X(prefix_admit) X(lookup) X(window_drop) X(cache_evict) X(nospace) \
	X(write_kv) X(read_kv) X(attend) X(op) X(op_batch) X(blocks_held) X(ring_sleep)  \
	X(ring_wake) X(tier_store) X(tier_load) X(tier_evict) X(tier_promote) \
	X(snapshot_copy) X(remote_send) \
	X(remote_round) X(remote_fill)

#define KVPD_DECLARE_SEMAPHORE(name) extern unsigned short kvpool_##name##_semaphore;
KVPD_PROBES(KVPD_DECLARE_SEMAPHORE)

#define KVPD_PROBE_ENABLED(name) __builtin_expect(kvpool_##name##_semaphore != 0, 0)

/* Arguments are evaluated only when a tracer is attached. */
#define KVPD_PROBE(name, ...)                                  \
	do {                                                   \
		if (KVPD_PROBE_ENABLED(name))                  \
			STAP_PROBEV(kvpool, name, __VA_ARGS__); \
	} while (0)

#endif
