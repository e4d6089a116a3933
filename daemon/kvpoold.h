/* SPDX-License-Identifier: MIT */
/* kvpoold's shared structures: the daemon context, pools, clients, sequences. */
#ifndef KVPOOLD_H
#define KVPOOLD_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "charge.h"
#include "courier.h"
#include "evloop.h"
#include "jobs.h"
#include "kvcore.h"
#include "plugin.h"
#include "tenants.h"
#include "../uapi/kvpool.h"

#define KVPD_MAX_NAMESPACES 64
#define KVPD_STATS_OPS_WORDS (KVP_STATS_OPS / 64)
#define KVPD_MAX_NS_UIDS 16

struct kvpd_pool {
	char name[KVP_NAME_MAX];
	struct kvc_pool *core;
	struct kvp_pool_params params;
	uint32_t clients;   /* attached */
	uint32_t sequences; /* open, over all clients */
	struct kvpd_kv_layout layout; /* slot_bytes 0: the pool holds no KV */
	const struct kvpd_backend_ops *backend; /* where its memory is */
	uint32_t device;    /* cuda: the device ordinal */
	char namespace_[KVP_NAME_MAX]; /* "": open to every namespace; else only its clients */
	bool mapped;        /* a client mapped it: COMMIT takes the client's word for its KV */
	void *mem;          /* the backend's pool memory */
	uint32_t inflight;  /* data-path jobs using its blocks */
	unsigned stat_idx;  /* its entry in the stats page */
	struct kvc_pool_counters seen; /* the core's counters when last published */
	bool owned;         /* KVP_POOL_OWNED: attached to only by its creator's uid and root */
	uint32_t owner;     /* KVP_POOL_OWNED: the creating client's id while it is connected */
	uid_t owner_uid;
	bool orphaned;      /* KVP_POOL_OWNED, and its creator is gone: destroy once unused */
	bool frag_dirty;    /* its sequences changed since its fragmentation was counted */
	uint64_t frag_next_ns; /* counting it again before then would cost over 2% (statpage.c) */
	struct kvp_pool_params_v2 spec; /* as created: what a reload's [pool.NAME] must equal */
	bool configured;    /* made from the config file (at start or a reload) */
	bool removed;       /* configured, and a reload found it gone: destroy once unused */
};

/*
 * A sequence handle: client tag (24 bits) | slot generation (16) | slot (24),
 * slots per client; a slot whose generation is spent is retired (seqs.c).
 */
struct kvpd_seq_kv;

struct kvpd_seq_slot {
	struct kvc_seq *seq; /* NULL when free */
	struct kvpd_seq_kv *kv; /* what WRITE_KV wrote past computed; NULL until first used */
	uint32_t epoch;         /* bumped by FREE: a write from before lands in blocks now gone */
	uint32_t gen;
	uint32_t next_free;
};

/*
 * A client's requests completed since its last op_batch probe: a tracer that
 * counts requests traps once per batch instead of once per request. Filled
 * only while op_batch has a tracer attached.
 */
struct kvpd_op_batch {
	struct kvpd_client *next; /* in kvpd.batch_pending */
	uint32_t ops, errors;
	uint32_t hist[KVP_HIST_BUCKETS]; /* latency, log2 ns, as the stats page's */
};

struct kvpd_client {
	uint32_t slot, gen;  /* in kvpd.clients: an event's key names (slot, gen) */
	int sock;            /* handed to the courier to close, at release */
	int bell;            /* its own epoll set, holding its doorbell eventfd: the loop
			      * watches this, never the eventfd the client holds */
	int mem_fd, bell_efd, stats_fd; /* until the setup reply carries them away */
	void *ev_sock, *ev_bell; /* the event loop implementation's */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool admin;
	bool may_map;        /* KVP_FEAT_POOL_MAP agreed */
	bool monitor;        /* KVP_FEAT_MONITOR agreed: counted in d->nmonitors, never listed */
	uint64_t map_parcel; /* the courier's seq of its last POOL_MAP message */
	bool ready;          /* setup done, rings mapped */
	unsigned active_idx; /* in kvpd.active while ready */
	bool dead;           /* closed, kept only until its jobs come back */
	uint32_t inflight;   /* jobs on the workers; their completions have CQ room reserved */
	size_t job_bytes;    /* their memory (KVPD_CLIENT_JOB_BYTES) */
	bool data_blocked;   /* KVP_MAX_DATA_INFLIGHT reached with a data-path entry next */
	struct kvpd_tenant *tenant[2]; /* its uid's; its namespace's (NULL in the shared one) */
	struct kvpd_statview *stat_view; /* the page it was given, when not the full one */
	uint64_t arena_charged; /* arena bytes taken from its tenants' quotas */
	struct kvpd_lane lane; /* its jobs' tasks not yet taken, for the workers' round */
	uint64_t accepted_ns;
	char namespace_[KVP_NAME_MAX];
	struct kvpd_pool *pool;

	/* The shared mapping; every field in it is written by a hostile peer. */
	void *map;
	size_t map_bytes;
	uint32_t *sq_head, *sq_tail, *sq_flags;
	uint32_t *cq_head, *cq_tail, *cq_flags;
	struct kvp_sqe *sqes;
	struct kvp_cqe *cqes;
	uint8_t *arena;
	uint64_t arena_bytes;
	uint32_t sq_entries, cq_entries;
	uint32_t sq_next;    /* our own copies of the indices we own */
	uint32_t cq_next;
	uint32_t cq_head_seen; /* the client's CQ head when last read and checked */
	bool sleeping_flag_set;

	struct kvpd_seq_slot *seqs;
	uint32_t seqs_cap, seqs_open, seq_free_head;
	uint64_t ops;
	struct kvpd_charge charge; /* distinct blocks its sequences hold */
	bool touched_pool;         /* this batch changed its pool: republish it */
	struct kvpd_op_batch batch;
};

struct kvpd_namespace {
	char name[KVP_NAME_MAX];
	uid_t uids[KVPD_MAX_NS_UIDS];
	uint32_t nuids;
	struct kvpd_quota quota; /* its clients together; unset keys: no limit */
};

/* A [uid.N] section: the keys it sets (bit k: KVP_QUOTA_k) replace [quota]'s. */
struct kvpd_uid_quota {
	uid_t uid;
	unsigned set;
	struct kvpd_quota quota;
};

enum kvpd_evloop_choice { KVPD_EVLOOP_AUTO, KVPD_EVLOOP_IO_URING, KVPD_EVLOOP_EPOLL };

/* The most [daemon] (and the command line) takes; the least is 1, spin_us's 0. */
#define KVPD_SPIN_US_MAX 1000000
#define KVPD_BUDGET_MAX (1u << 20)
#define KVPD_MAX_CLIENTS_MAX (1u << 16)
#define KVPD_THREADS_MAX 1024

struct kvpd_config {
	const char *socket_path;
	const char *socket_group; /* NULL: the daemon's group */
	unsigned spin_us;
	unsigned budget;          /* entries per client per loop iteration */
	unsigned max_clients;
	unsigned threads;         /* data-path workers; 0: the online cores */
	enum kvpd_evloop_choice event_loop;
	int log_level;            /* KVPD_LOG_*; 0: not set */
	const char *plugin_dir;   /* --plugin-dir: where libkvpool_cuda.so is; NULL: the default */
	struct kvp_pool_params_v2 pools[KVPD_MAX_POOLS];
	unsigned npools;
	struct kvpd_namespace namespaces[KVPD_MAX_NAMESPACES];
	unsigned nnamespaces;
	struct kvpd_quota quota;  /* [quota]: every uid's, over the built-in defaults */
	struct kvpd_uid_quota *uid_quotas;
	unsigned nuid_quotas;
	char *strings;            /* storage for the config file's strings */
};

struct kvpd_statpage {
	int fd;
	size_t bytes;
	struct kvp_stats_page *page;
	struct kvp_stats_pool *pools;
	struct kvp_stats_client *clients;
	struct kvp_stats_op *ops;
	struct kvp_stats_tenant *tenants;
	unsigned depth;            /* nested writers: the seqlock moves at the outermost */
	/* The full page's entries written since its views were last brought up to date. */
	uint64_t ops_dirty[KVPD_STATS_OPS_WORDS];
	uint64_t pools_dirty;      /* bit: stat_idx */
};

/*
 * The page of a uid's readers without the admin feature: the same layout,
 * the daemon's pools and operations, but only that uid's client rows and
 * tenant rows (statview.c).
 */
struct kvpd_statview {
	struct kvpd_statview *next;
	uid_t uid;
	unsigned readers;          /* clients that were given it */
	unsigned own_clients;      /* its rows in use */
	struct kvpd_statpage pg;
};

/* Syslog priorities: what the journal files a line under (log.c). */
enum { KVPD_LOG_ERR = 3, KVPD_LOG_WARNING, KVPD_LOG_NOTICE, KVPD_LOG_INFO, KVPD_LOG_DEBUG };
#define KVPD_LOG_DEFAULT KVPD_LOG_INFO

struct kvpd_log {
	int level;    /* lines of a priority above it are dropped */
	bool journal; /* stderr is systemd's journal stream: "<PRIO>" prefixes */
};

/*
 * What the command line set: it wins over the config file's [daemon], at
 * start and at every reload. NULL, 0 (~0u for spin_us, -1 for event_loop): not set.
 */
struct kvpd_cli {
	const char *socket, *group, *plugin_dir;
	unsigned spin_us, budget, max_clients, threads;
	int event_loop;
	int log_level;
};

/* The daemon: every piece of mutable state lives here. */
struct kvpd {
	struct kvpd_config cfg;
	struct kvpd_cli cli;
	const char *config_path; /* --config, re-read at SIGHUP; NULL: none */
	char *inherited_path;    /* the socket systemd passed (LISTEN_FDS): no lock, no unlink */
	struct kvpd_log log;
	const struct kvpd_evloop_ops *ev;
	void *ev_state;           /* the implementation's */
	struct kvpd_courier courier;
	int listen_fd, lock_fd, signal_fd, timer_fd;
	bool stopping;
	bool accept_paused;       /* accept failed (out of descriptors): until a client leaves */
	bool accept_paused_logged;
	long ncpus;

	struct kvpd_pool *pools[KVPD_MAX_POOLS];
	unsigned npools;

	struct kvpd_tenant *tenants;
	uint64_t seqs_released;       /* since the heap was last trimmed */
	unsigned ticks;               /* housekeeping's */
	struct kvpd_client **clients; /* by slot */
	unsigned nclients;
	struct kvpd_client **active;  /* set up, dense: what the loop polls */
	unsigned nactive;
	unsigned nmonitors;           /* of the active, KVP_FEAT_MONITOR's: not listed in stats */
	uint64_t client_gen;

	struct kvpd_workers workers;
	struct kvpd_plugin cuda;          /* the CUDA backend, loaded by the first cuda pool */
	uint32_t jobs_inflight;
	struct kvpd_statpage stats;       /* the full page, for admin readers */
	struct kvpd_statview *stat_views; /* the uids' pages */
	uint64_t taken_ns; /* when the entry being dispatched was taken */
	struct kvpd_client *batch_pending; /* clients with an op_batch to fire */

	uint64_t connected, disconnected, killed;
	uint8_t *stats_buf;
	size_t stats_cap;
};

#define kvpd_log(d, prio, ...)                                            \
	do {                                                              \
		if ((prio) <= (d)->log.level)                             \
			kvpd_logf(&(d)->log, prio, __VA_ARGS__);           \
	} while (0)
void kvpd_logf(const struct kvpd_log *log, int prio, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* "error", "warning", "notice", "info" or "debug"; -EINVAL for anything else. */
int kvpd_parse_log_level(const char *s, int *out);
bool kvpd_log_to_journal(void);
uint64_t kvpd_now_ns(void);

/* reload.c */
/* The command line's settings over @cfg's (they win over the file's). */
void kvpd_cli_apply(struct kvpd_config *cfg, const struct kvpd_cli *cli);
/* SIGHUP: read the config file again (see reload.c for what applies). */
void kvpd_reload(struct kvpd *d);

/* config.c: the config file (kvpool.conf(5)). */
/* Before a load: the built-in settings (socket, spin 50 us, budget 64, 128 clients, quotas). */
void kvpd_config_defaults(struct kvpd_config *cfg);
/*
 * Errors, one a line "FILE:LINE: ...", every one in the file, go to @log;
 * then -EINVAL. Nothing is logged on success. Whatever it returns, the
 * config is released with kvpd_config_release.
 */
int kvpd_config_load(struct kvpd_config *cfg, const char *path, const struct kvpd_log *log);
/* The built-in quota defaults: 32 clients a uid, 65536 sequences, 2^24 tokens, 256 MiB of arenas. */
void kvpd_quota_defaults(struct kvpd_quota *q);
void kvpd_config_release(struct kvpd_config *cfg);

/* config_keys.c: each section's keys, their parsers and ranges. */
enum kvpd_conf_section {
	KVPD_CONF_DAEMON, KVPD_CONF_POOL, KVPD_CONF_NAMESPACE, KVPD_CONF_QUOTA, KVPD_CONF_UID
};
#define KVPD_CONF_MAX_KEYS 16 /* the most keys a section has ([pool.NAME]'s) */
/* "auto", "io_uring" or "epoll"; -EINVAL for anything else. */
int kvpd_parse_event_loop(const char *s, enum kvpd_evloop_choice *out);
/* Key @name's index in a section of @kind; -ENOENT when it has no such key. */
int kvpd_conf_key(enum kvpd_conf_section kind, const char *name);
/* "a, b, c": the keys of a section of @kind. */
void kvpd_conf_keys(enum kvpd_conf_section kind, char *buf, size_t len);
/*
 * Key @idx of a section of @kind, from @value, into @obj: @cfg's [daemon] or
 * the section's struct kvp_pool_params_v2, kvpd_namespace, kvpd_quota or
 * kvpd_uid_quota. -EINVAL with @why saying what is wrong and what would do
 * (nothing stored); -ENOMEM.
 */
int kvpd_conf_set(struct kvpd_config *cfg, enum kvpd_conf_section kind, void *obj, int idx,
		  const char *value, char *why, size_t why_len);
/* What is wrong with a pool or namespace name; NULL when nothing is. */
const char *kvpd_conf_name_problem(const char *name);

/* pools.c */
/* @owner: the client a KVP_POOL_OWNED pool belongs to, else NULL. */
/* A refusal's reason goes to @why (why_len bytes; "" when it says nothing more than its errno). */
int kvpd_pool_create(struct kvpd *d, const struct kvp_pool_params_v2 *params,
		     const struct kvpd_client *owner, char *why, size_t why_len);
/* pool_layout.c: POOL_LAYOUT's output; its bytes, or -EOVERFLOW with *needed what it takes. */
int kvpd_pool_layout(const struct kvpd_pool *pool, void *out, uint32_t out_len, __u64 *needed);
/* POOL_MAP (pool_map.c): how many descriptors follow on the socket, or -errno and @why. */
int kvpd_pool_map(struct kvpd *d, struct kvpd_client *c, uint64_t tag, char *why,
		  size_t why_len);
/* pool_check.c: every parameter in its range; -EINVAL naming the first that is not. */
int kvpd_pool_params_check(const struct kvp_pool_params_v2 *p, char *why, size_t why_len);
int kvpd_pool_destroy(struct kvpd *d, const char *name, struct kvpd_client *by);
struct kvpd_pool *kvpd_pool_find(struct kvpd *d, const char *name);
/* Pool and namespace names: 1 to KVP_NAME_MAX - 1 printable ASCII bytes, no blanks. */
bool kvpd_name_valid(const char *name);
void kvpd_pools_release(struct kvpd *d);
/* Client @owner is gone: its owned pools are destroyed now, or once unused (kvpd_pools_reap). */
void kvpd_pools_owner_gone(struct kvpd *d, uint32_t owner);
void kvpd_pools_reap(struct kvpd *d);

/* client.c */
int kvpd_client_accept(struct kvpd *d, int fd);
/* Its socket has news (@revents: POLL* bits): the setup message, or its hang-up. */
void kvpd_client_event(struct kvpd *d, struct kvpd_client *c, int revents);
void kvpd_client_close(struct kvpd *d, struct kvpd_client *c, const char *why);
/* The last of a closed client's jobs is back: unmap and free it. */
void kvpd_client_free(struct kvpd_client *c);
struct kvpd_client *kvpd_client_lookup(struct kvpd *d, uint64_t user_data);
/* A refusal's reason goes to @why. */
/* The attached pool's geometry as the setup reply and ATTACH give it (zeros: none). */
void kvpd_fill_pool_info(const struct kvpd_client *c, struct kvp_pool_info *info);
int kvpd_client_attach(struct kvpd *d, struct kvpd_client *c, const char *pool, char *why,
		       size_t why_len);
bool kvpd_namespace_allowed(const struct kvpd *d, const char *ns, uid_t uid);

/* ring.c: returns entries consumed, or -EPROTO after disconnecting a corrupt client. */
int kvpd_ring_process(struct kvpd *d, struct kvpd_client *c, unsigned budget);
bool kvpd_ring_pending(struct kvpd_client *c);
/* Posts a completion whose CQ room was reserved when its entry was taken. */
void kvpd_ring_post(struct kvpd_client *c, const struct kvp_cqe *cqe);
void kvpd_ring_set_sleeping(struct kvpd_client *c, bool sleeping);

/* dispatch.c: false when the request went to the workers (completed later). */
bool kvpd_dispatch(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe,
		   struct kvp_cqe *cqe);

/* kvdata.c: 0 when the job is launched, else -errno (complete at once). */
int kvpd_kv_io(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe);
int kvpd_attend(struct kvpd *d, struct kvpd_client *c, const struct kvp_sqe *sqe);
int kvpd_kv_commit(struct kvpd_client *c, uint64_t handle, uint32_t n);
void kvpd_jobs_complete(struct kvpd *d);
void kvpd_seq_kv_free(struct kvpd_seq_kv *kv, uint32_t ngroups);
void kvpd_seq_kv_reset(struct kvpd_seq_kv *kv, uint32_t ngroups);

/* seqs.c: per-client handle table */
int kvpd_seq_put(struct kvpd_client *c, struct kvc_seq *seq, __u64 *handle);
struct kvc_seq *kvpd_seq_get(struct kvpd_client *c, uint64_t handle);
struct kvpd_seq_slot *kvpd_seq_slot(struct kvpd_client *c, uint64_t handle);
int kvpd_seq_close(struct kvpd_client *c, uint64_t handle);
void kvpd_seqs_close_all(struct kvpd_client *c);

/* stats.c */
/* What @reader may see of the daemon: its own uid's clients unless it is admin. */
int kvpd_stats(struct kvpd *d, const struct kvpd_client *reader, uint8_t *out, uint32_t out_len,
	       __u64 *needed);

/* statpage.c */
int kvpd_statpage_init(struct kvpd *d);
void kvpd_statpage_fini(struct kvpd *d);
/* A sealed page of the stats layout, mapped writable by us only (one per view). */
int kvpd_statpage_make(struct kvpd *d, struct kvpd_statpage *sp, const char *name);
void kvpd_statpage_unmake(struct kvpd_statpage *sp);
static inline void kvpd_stats_dirty(uint64_t *words, unsigned bit)
{
	words[bit / 64] |= 1ull << (bit % 64);
}
/* A pool's entry in the full page, to be written (its views follow at the bracket's end). */
static inline struct kvp_stats_pool *kvpd_stats_pool_entry(struct kvpd *d,
							   const struct kvpd_pool *pool)
{
	kvpd_stats_dirty(&d->stats.pools_dirty, pool->stat_idx);
	return &d->stats.pools[pool->stat_idx];
}
void kvpd_stats_begin(struct kvpd *d);
void kvpd_stats_end(struct kvpd *d);
void kvpd_stats_op(struct kvpd *d, struct kvpd_client *c, uint8_t opcode, int32_t res,
		   uint64_t ns);
/* Fires @c's pending op_batch now (before it disconnects). */
void kvpd_stats_batch_flush(struct kvpd *d, struct kvpd_client *c);
void kvpd_stats_pool(struct kvpd *d, struct kvpd_pool *pool, struct kvpd_client *c);
void kvpd_stats_pool_add(struct kvpd *d, struct kvpd_pool *pool);
void kvpd_stats_pool_remove(struct kvpd *d, struct kvpd_pool *pool);
void kvpd_stats_client(struct kvpd *d, struct kvpd_client *c);
void kvpd_stats_client_remove(struct kvpd *d, struct kvpd_client *c);
void kvpd_stats_fragmentation(struct kvpd *d);

/* statview.c */
/* The view a reader of @uid without the admin feature maps: made on first use; NULL without memory. */
struct kvpd_statview *kvpd_statview_get(struct kvpd *d, uid_t uid);
void kvpd_statview_put(struct kvpd *d, struct kvpd_statview *v);
/* @uid's view, if a reader holds one. */
struct kvpd_statview *kvpd_statview_of(struct kvpd *d, uid_t uid);
/* The full page's changes since the last call, into every view (at a bracket's end). */
void kvpd_statviews_sync(struct kvpd *d);
/* A tenant's row, in the full page and in the views that may see it. */
void kvpd_stats_tenant_add(struct kvpd *d, struct kvpd_tenant *t);
void kvpd_stats_tenant(struct kvpd *d, struct kvpd_tenant *t);
void kvpd_stats_tenant_remove(struct kvpd *d, struct kvpd_tenant *t);

/* loop.c */
/* The signals the loop reads from its signalfd (SIGTERM, SIGINT, SIGHUP), into @set. */
void kvpd_signal_set(sigset_t *set);
/* Picks the implementation (logging which, and why), watches the daemon's descriptors. */
int kvpd_loop_init(struct kvpd *d);
int kvpd_loop_run(struct kvpd *d);
void kvpd_loop_exit(struct kvpd *d);
/* Accepting again after accept failed, unless the daemon is stopping. */
void kvpd_loop_accept_resume(struct kvpd *d);

#endif
