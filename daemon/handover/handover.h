/* SPDX-License-Identifier: MIT */
/*
 * The handover room: a planned restart (kvctl daemon restart) that keeps the
 * cache. The daemon stops accepting and taking requests, finishes what it
 * took, ends every client's sequences (their blocks freed as FREE frees them:
 * cached blocks stay cached), writes each pool's state into a sealed memfd
 * (save.c, in state_file.c's container) and execs the binary it was started
 * from, or the one named, with the pools' and host tiers' memfds, the state,
 * the listening socket and SOCKET.lock inherited, in the same process
 * (exec.c). The next run finds them in its environment (KVPOOLD_HANDOVER) and
 * restores each pool whose parameters still match (restore.c): the same
 * blocks cached in the same free-queue order, the same tier entries in the
 * same LRU order, the same generation, so that every LOOKUP answers as before.
 * docs/reliability.md says what survives what.
 *
 * It may use the data, tier, events, session, pools, tenants, observe, loop
 * and config rooms, attn, the core and the shared headers.
 */
#ifndef KVPOOLD_HANDOVER_H
#define KVPOOLD_HANDOVER_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpoold.h"
#include "handover/state_file.h"
#include "pools/pools.h"
#include "tier/tier.h"

/* The state's sections: one a pool (its name the section's). */
#define KVPD_SECTION_POOL 1u
#define KVPD_SECTION_POOL_VERSION 1u

/* systemd's notify protocol (notify.c): descriptors a message, the store's names. */
#define KVPD_NOTIFY_FDS_MAX 8
#define KVPD_STORE_STATE "kvpool-state"
#define KVPD_STORE_FD "kvpool-fd-" /* then the number the state knows it by */
#define KVPD_STORED_MAX (3 * KVPD_MAX_POOLS + 1)

/* A descriptor systemd's store passed back (LISTEN_FDNAMES), until start-up has used it. */
struct kvpd_stored_fd {
	char name[32];
	int old;                  /* the number the state knows it by; -1: the state itself */
	int fd;                   /* this run's */
};

/* A section of the state the last run handed over, until start-up has used it. */
struct kvpd_handed {
	char name[KVPD_STATE_NAME_MAX];
	const void *data;
	uint64_t bytes;
	uint32_t version;
	bool intact;
	bool used;                /* restored, or judged and logged */
	bool cold;                /* judged: the pool starts empty (logged) */
	bool kv_taken;            /* its KV memfd is the pool's now */
	bool settled;             /* its memfds taken or closed */
	struct kvpd_pool *pool;   /* the pool that took it */
	struct kvpd_tier_handed tier; /* what the pool's tier attach adopts */
};

struct kvpd_handover {
	/* This run */
	char start_path[PATH_MAX]; /* the binary it was started from, resolved at start */
	char **argv;               /* its command line, for the next run */
	/* A restart asked for (KVP_OP_DAEMON_RESTART) */
	bool requested;
	char exe_path[PATH_MAX];   /* what it execs */
	int exe_fd;                /* ...opened when asked: replaced later, it is still this */
	int self_fd;               /* this run's own binary: what runs if that exec fails */
	int state_fd;              /* the state written, once it is; -1 before */
	uint64_t asked_ns, drained_ns, written_ns; /* kvpd_now_ns, for the log's parts */
	uint64_t state_bytes;
	int kept[3 * KVPD_MAX_POOLS];  /* the memfds the sections name, kept for the exec */
	unsigned nkept;
	/* systemd */
	char notify[108];          /* $NOTIFY_SOCKET, or "": not under Type=notify */
	bool to_store;             /* a stop hands the cache to systemd's store, no exec */
	struct kvpd_stored_fd stored[KVPD_STORED_MAX]; /* what the store passed back */
	unsigned nstored;
	/* What the last run handed over (state_fd >= 0 at start) */
	uint64_t start_ns;         /* this run's start */
	int listen_fd, lock_fd;    /* the listening socket and SOCKET.lock handed over; -1: none */
	bool listen_systemd;       /* ...the socket systemd's (no lock, the path not ours) */
	char socket_path[108];     /* the listening socket's path, handed over */
	bool restoring;
	struct kvpd_state st;
	struct kvpd_handed *sections;
	uint32_t nsections;
	uint64_t last_asked_ns, last_drained_ns, last_written_ns, exec_ns, last_state_bytes;
	uint32_t pools_restored, pools_cold;
	pid_t holders[8];          /* the last runs' memory holders (exec.c), until reaped */
};

/*
 * Start-up, first: this run's binary and command line noted; the environment's
 * KVPOOLD_HANDOVER taken (and unset): the listening socket and SOCKET.lock
 * noted (listen_fd, lock_fd: main makes them the daemon's), the state opened
 * and its sections listed (or the state systemd's store passed back). A state
 * that cannot be read is logged and the run starts cold: 0 then too; -errno
 * only when memory is short.
 */
int kvpd_handover_start(struct kvpd *d, int argc, char **argv);
/*
 * A pool just created at start (from the config, or made again for a kvctl
 * pool create the last run made) takes what the last run handed over of it,
 * when its parameters allow, in two steps: before its tier's attach, the
 * section judged (one log line, naming the pool and the cause, when the pool
 * must start empty) and the tier's handover set for the attach to adopt;
 * after it, its KV memory, core and generation, and its KV events said.
 */
void kvpd_handover_prepare(struct kvpd *d, struct kvpd_pool *pool);
void kvpd_handover_pool(struct kvpd *d, struct kvpd_pool *pool);
/*
 * Start-up, once the config's pools are made: the pools the last run created
 * with kvctl pool create made again and restored; a configured pool the
 * config dropped, dropped (logged); every descriptor not taken closed; the
 * line that sums the restart up. A created pool that cannot be made again is
 * logged; the daemon starts all the same.
 */
void kvpd_handover_finish(struct kvpd *d);

/*
 * KVP_OP_DAEMON_RESTART: @path (len bytes; 0: the binary this run was
 * started from) is checked: a regular executable file that runs and says
 * it is a kvpoold (--version). 0: the daemon stops accepting and taking
 * requests, and restarts once what it took is done; else -errno with @why.
 */
int kvpd_restart_request(struct kvpd *d, const char *path, uint32_t len, uint32_t pid,
			 uint32_t uid, char *why, size_t why_len);
/*
 * The loop ended for a restart and every client is gone: each pool's state
 * written (state_fd). 0; -errno (logged) when it cannot be, and the daemon
 * serves on.
 */
int kvpd_handover_save(struct kvpd *d);
/*
 * SIGTERM: under systemd (Type=notify) the stop hands the cache to the
 * service's descriptor store once what was taken is done (true); else a
 * plain stop (false). A restart under way is called off either way.
 */
bool kvpd_handover_stop(struct kvpd *d);
/* The save failed and the daemon serves on: the restart forgotten. */
void kvpd_handover_refused(struct kvpd *d);
/*
 * Everything else torn down: exec the next run with what save wrote. Returns
 * only if no binary could be run (logged): the daemon then exits 1.
 */
void kvpd_handover_exec(struct kvpd *d);
/*
 * notify.c: $NOTIFY_SOCKET noted at start; @msg sent there (with @nfds
 * descriptors, SCM_RIGHTS): 0, -ENOTCONN without one, -errno.
 */
void kvpd_notify_init(struct kvpd *d);
int kvpd_notify(struct kvpd *d, const char *msg, const int *fds, unsigned nfds);
/* A stop under systemd, the state written: it and the memfds it names into the store. */
int kvpd_handover_store(struct kvpd *d);
/* The store's descriptors taken (or closed): systemd told to let them go. */
void kvpd_handover_unstore(struct kvpd *d);
/*
 * Start-up, LISTEN_FDS: descriptor @fd named @name is the store's (the state,
 * or a memfd it names): noted for the restore, true; false when not ours.
 */
bool kvpd_handover_stored(struct kvpd *d, const char *name, int fd);
/* Housekeeping: the last runs' memory holders reaped once they have exited. */
void kvpd_handover_reap(struct kvpd *d);
/* The descriptors a restart hands on that the daemon's own teardown must leave open. */
bool kvpd_handover_keeps_socket(const struct kvpd *d);

#endif
