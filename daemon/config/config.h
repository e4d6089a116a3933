/* SPDX-License-Identifier: MIT */
/*
 * The config room: the config file (kvpool.conf(5), config.c), each
 * section's keys with their parsers and ranges (config_keys.c), and the checks
 * a pool's parameters pass wherever they come from, the file or POOL_CREATE
 * (pool_check.c). It owns the settings (struct kvpd_config) every room reads,
 * and the vocabulary they share: names, quotas, namespaces.
 *
 * The lowest of the daemon's rooms: it may use the core, the uapi, lib's pool
 * parameter parser and the shared log.h; nothing of any other room.
 */
#ifndef KVPOOLD_CONFIG_H
#define KVPOOLD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "log.h"
#include "refuse.h"
#include "core/kvcore.h"
#include "../uapi/kvpool.h"

#define KVPD_MAX_POOLS 64
#define KVPD_MAX_NAMESPACES 64
#define KVPD_MAX_NS_UIDS 16

/* A limit per key; KVP_QUOTA_UNLIMITED for none. */
/*
 * The quotas: the ABI's KVP_QUOTA_* (in the stats page's tenant rows), then
 * the daemon's own: max_tier_bytes, what the tier entries of a namespace's
 * clients (of a uid's in the shared namespace) may take of each pool's tier.
 */
#define KVPD_QUOTA_TIER_BYTES KVP_QUOTA_KEYS
#define KVPD_QUOTA_KEYS (KVP_QUOTA_KEYS + 1)
struct kvpd_quota {
	uint64_t limit[KVPD_QUOTA_KEYS];
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

/* A disk tier's directory when its pool names none (systemd's StateDirectory=kvpool). */
#define KVPD_TIER_DISK_PATH "/var/lib/kvpool"
#define KVPD_TIER_PATH_MAX 4096

enum kvpd_tier_policy {
	KVPD_TIER_LRU,          /* every block about to be evicted goes down; LRU makes room */
	KVPD_TIER_SECOND_SIGHT, /* only a block seen about to be evicted once before goes down */
};

/*
 * KV events (kv_events): an endpoint is ZMQ's, "ipc://PATH" or "tcp://HOST:PORT";
 * "on" is the ipc default, NAME.events (and NAME.replay) in the directory of
 * the daemon's socket. kv_events_buffer's default is vLLM's.
 */
#define KVPD_EVENTS_ENDPOINT_MAX 256
#define KVPD_EVENTS_TOPIC_MAX 256
#define KVPD_EVENTS_BUFFER 10000u
#define KVPD_EVENTS_BUFFER_MAX 1000000u
enum kvpd_events_form { KVPD_EVENTS_FORM_MAP, KVPD_EVENTS_FORM_ARRAY };

#define KVPD_REMOTE_URL_MAX 512
#define KVPD_REMOTE_PREFIX_MAX 48
#define KVPD_REMOTE_PREFIX "kvpool"
#define KVPD_REMOTE_TIMEOUT_MS 5u
#define KVPD_REMOTE_HOST_MAX 64
#define KVPD_REMOTE_MAX_SEEDS 8 /* HOST:PORT entries a tier_remote URL may list */
#define KVPD_REMOTE_TTL_S 86400u
#define KVPD_REMOTE_FILE_MAX 256 /* the secret and TLS files' paths */

/* A node of tier_remote's URL. */
struct kvpd_remote_addr {
	char host[KVPD_REMOTE_HOST_MAX];
	uint16_t port;
};

/*
 * Parses `redis://HOST:PORT[,HOST:PORT...]` (or `rediss://`, TLS: @tls) into
 * @out (KVPD_REMOTE_MAX_SEEDS at most): their count, or -EINVAL with the
 * reason in @why (remote_url.c).
 */
int kvpd_remote_url_parse(const char *url, struct kvpd_remote_addr *out, bool *tls, char *why,
			  size_t why_len);
/*
 * The secret file @path names (relative: under $CREDENTIALS_DIRECTORY) into
 * @buf, @cap bytes at most, if no uid but root's and the daemon's may read
 * it (its mode and its ACL): its length, or -errno with the reason, naming
 * @key and the path, in @why (secret_file.c).
 */
#define KVPD_SECRET_WHY_MAX 100
/* A refusal naming @key and @path, the path's tail kept when the whole does not fit. */
int kvpd_refuse_file(char *why, size_t why_len, int err, const char *key, const char *path,
		     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
int kvpd_secret_read(const char *key, const char *path, uint8_t *buf, size_t cap, char *why,
		     size_t why_len);
/* @host is a loopback address (127.0.0.0/8, ::1) or "localhost": nothing leaves the machine. */
bool kvpd_remote_host_loopback(const char *host);

/*
 * A pool as the config file's [pool.NAME] or POOL_CREATE v3's keys describe it:
 * v2's fields, and the keys that only the text sets (no struct of the ABI has
 * them).
 */
struct kvpd_pool_spec {
	struct kvp_pool_params_v2 v2;
	uint64_t tier_host_bytes; /* a host-memory tier under the pool's cache; 0: none */
	uint32_t tier_policy;     /* enum kvpd_tier_policy */
	uint64_t tier_disk_bytes; /* a disk tier's file, NAME.kvtier; 0: none */
	char tier_disk_path[KVPD_TIER_PATH_MAX]; /* its directory; "": KVPD_TIER_DISK_PATH */
	char kv_events[KVPD_EVENTS_ENDPOINT_MAX];        /* the PUB socket's; "": no events */
	char kv_events_topic[KVPD_EVENTS_TOPIC_MAX];     /* "": kv@HOSTNAME@POOL */
	char kv_events_replay[KVPD_EVENTS_ENDPOINT_MAX]; /* the ROUTER's; "": the ipc default,
							  * "off": no replay */
	uint32_t kv_events_buffer;  /* batches kept for replay, if kv_events_buffer_set */
	bool kv_events_buffer_set;
	uint32_t kv_events_format;  /* enum kvpd_events_form */
	/* Cyclic groups' window snapshots: every this many tokens too (0: prompt ends only). */
	uint32_t snapshot_every;    /* if snapshot_every_set, else KVC_SNAPSHOT_EVERY */
	bool snapshot_every_set;
	/* The cluster tier (docs/tiers.md): a Redis Cluster's seeds, or one server; "": none */
	char tier_remote[KVPD_REMOTE_URL_MAX];
	char tier_remote_prefix[KVPD_REMOTE_PREFIX_MAX]; /* its keys' first part; "": "kvpool" */
	uint32_t tier_remote_timeout_ms; /* an existence round's deadline; 0: not set, 5 */
	uint32_t tier_remote_ttl_s;      /* every value's, if tier_remote_ttl_set, else
					  * KVPD_REMOTE_TTL_S; 0: none */
	bool tier_remote_ttl_set;
	bool tier_remote_insecure;       /* redis:// to a host not on loopback: KV in the clear */
	/* Secrets (a user and password; the values' tag key), read at attach and SIGHUP */
	char tier_remote_auth_file[KVPD_REMOTE_FILE_MAX];
	char tier_remote_key_file[KVPD_REMOTE_FILE_MAX];
	/* rediss://: the CA that signs the nodes' certificates; a client certificate and its key */
	char tier_remote_ca_file[KVPD_REMOTE_FILE_MAX];
	char tier_remote_cert_file[KVPD_REMOTE_FILE_MAX];
	char tier_remote_cert_key_file[KVPD_REMOTE_FILE_MAX];
};

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
	uint64_t max_host_bytes;  /* the host pools' KV memory, all together; 0: kvpd_host_bytes_max's */
	struct kvpd_pool_spec pools[KVPD_MAX_POOLS];
	unsigned npools;
	struct kvpd_namespace namespaces[KVPD_MAX_NAMESPACES];
	unsigned nnamespaces;
	struct kvpd_quota quota;  /* [quota]: every uid's, over the built-in defaults */
	struct kvpd_uid_quota *uid_quotas;
	unsigned nuid_quotas;
	char *strings;            /* storage for the config file's strings */
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

/* The command line's settings over @cfg's (they win over the file's). */
void kvpd_cli_apply(struct kvpd_config *cfg, const struct kvpd_cli *cli);

/*
 * The most KV memory the host pools may hold together: max_host_bytes, or by
 * default the machine's RAM less an eighth of it (at least 1 GiB where the RAM
 * is over 2 GiB): a memfd is sparse, so what is not checked at creation is
 * found by the OOM killer once the blocks fill.
 */
uint64_t kvpd_host_bytes_max(const struct kvpd_config *cfg, uint64_t *ram);

/* config.c */
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
/* Whether a client of @uid may join namespace @ns ("": the shared one, open to all). */
bool kvpd_namespace_allowed(const struct kvpd_config *cfg, const char *ns, uid_t uid);

/* config_keys.c: each section's keys, their parsers and ranges. */
enum kvpd_conf_section {
	KVPD_CONF_DAEMON, KVPD_CONF_POOL, KVPD_CONF_NAMESPACE, KVPD_CONF_QUOTA, KVPD_CONF_UID
};
#define KVPD_CONF_MAX_KEYS 64 /* the most keys a section has ([pool.NAME]'s) */
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
/* Pool and namespace names: 1 to KVP_NAME_MAX - 1 printable ASCII bytes, no blanks. */
bool kvpd_name_valid(const char *name);

/*
 * pool_keys.c: POOL_CREATE v3's text of pool keys (@len bytes at @text, a NUL
 * after them; the text is cut in place) applied over @p with the [pool.NAME]
 * table: -EINVAL with @why naming the key (unknown, set twice, a bad value, a
 * line without '='; a NUL byte in the text); -ENOMEM.
 */
int kvpd_pool_keys_apply(struct kvpd_pool_spec *p, char *text, size_t len, char *why,
			 size_t why_len);

/* pool_check.c: every parameter in its range; -EINVAL naming the first that is not. */
int kvpd_pool_params_check(const struct kvp_pool_params_v2 *p, char *why, size_t why_len);
/*
 * The first key of @b whose value differs from @a's and shapes what a pool
 * holds (blocks, block_size, groups, caching, the KV geometry, backend, layout,
 * tier_host_bytes), in the config's words; NULL when none does. A pool's cache
 * carries over (a planned restart) only where none does.
 */
const char *kvpd_pool_shape_changed(const struct kvpd_pool_spec *a, const struct kvpd_pool_spec *b);
/* v2's check, then the keys only the spec has (a tier needs KV and the prefix cache). */
int kvpd_pool_spec_check(const struct kvpd_pool_spec *spec, char *why, size_t why_len);

#endif
