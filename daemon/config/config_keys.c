/* SPDX-License-Identifier: MIT */
/*
 * The config file's keys, section by section: each one's parser and its range
 * or choices, from uapi/kvpool.h's limits and the daemon's own ([daemon]'s are
 * the command line's). A bad value is refused with what is wrong and what would
 * do; nothing is stored until the value is known to be good. config.c reads
 * the file and names the line.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "config/config.h"
#include "../../lib/libkvpool.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

enum key_type {
	KEY_NUMBER, /* min..max */
	KEY_CHOICE, /* one of choices[] */
	KEY_STRING, /* 1..max bytes (max 0: no limit) */
	KEY_NAME,   /* a namespace's name, or "" */
	KEY_GROUPS, /* "full swa:128 ..." */
	KEY_QUOTA,  /* a number or "unlimited" */
	KEY_UIDS,   /* "1000 1001" */
};

struct cfg_key {
	const char *name;
	enum key_type type;
	uint64_t min, max;
	const char *const *choices; /* NULL-terminated */
	const char *help;           /* what it is, for a value that is empty */
};

/* Designated, so that -Wextra does not ask for the fields a type leaves out. */
#define NUMBER(n, lo, hi) { .name = n, .type = KEY_NUMBER, .min = lo, .max = hi }
#define CHOICE(n, list) { .name = n, .type = KEY_CHOICE, .choices = list }
#define STRING(n, most, what) { .name = n, .type = KEY_STRING, .max = most, .help = what }
#define OF_TYPE(n, t) { .name = n, .type = t }

static const char *const evloop_names[] = { [KVPD_EVLOOP_AUTO] = "auto",
					    [KVPD_EVLOOP_IO_URING] = "io_uring",
					    [KVPD_EVLOOP_EPOLL] = "epoll", NULL };
static const char *const log_levels[] = { "error", "warning", "notice", "info", "debug", NULL };

/* Their order is daemon_set's. */
enum { D_SOCKET, D_SOCKET_GROUP, D_SPIN_US, D_BUDGET, D_MAX_CLIENTS, D_EVENT_LOOP, D_PLUGIN_DIR,
       D_THREADS, D_LOG_LEVEL, D_MAX_HOST_BYTES };

static const struct cfg_key daemon_keys[] = {
	[D_SOCKET] = STRING("socket", sizeof(((struct sockaddr_un *)0)->sun_path) - 1,
			    "the listening socket's path"),
	[D_SOCKET_GROUP] = STRING("socket_group", 0, "the socket's group"),
	[D_SPIN_US] = NUMBER("spin_us", 0, KVPD_SPIN_US_MAX),
	[D_BUDGET] = NUMBER("budget", 1, KVPD_BUDGET_MAX),
	[D_MAX_CLIENTS] = NUMBER("max_clients", 1, KVPD_MAX_CLIENTS_MAX),
	[D_EVENT_LOOP] = CHOICE("event_loop", evloop_names),
	[D_PLUGIN_DIR] = STRING("plugin_dir", PATH_MAX - 1, "the CUDA plugin's directory"),
	[D_THREADS] = NUMBER("threads", 1, KVPD_THREADS_MAX),
	[D_LOG_LEVEL] = CHOICE("log_level", log_levels),
	[D_MAX_HOST_BYTES] = NUMBER("max_host_bytes", 1, UINT64_MAX),
};

static const char *const on_off[] = { "on", "off", NULL };
static const char *const free_orders[] = { "split", "append", NULL };
static const char *const publishes[] = { "commit", "alloc", NULL };
static const char *const dtypes[] = { "f32", "f16", "bf16", NULL };
static const char *const backends[] = { "host", "cuda", NULL };
static const char *const layouts[] = { "default", "block", "layer", NULL };
static const char *const tier_policies[] = { [KVPD_TIER_LRU] = "lru",
					       [KVPD_TIER_SECOND_SIGHT] = "second_sight", NULL };

static const char *const events_forms[] = { [KVPD_EVENTS_FORM_MAP] = "map",
					      [KVPD_EVENTS_FORM_ARRAY] = "array", NULL };

/* [pool.NAME]'s keys past v2's 16 (stored in struct kvpd_pool_spec itself, not by libkvpool). */
enum {
	P_TIER_HOST_BYTES = 16, P_TIER_POLICY, P_TIER_DISK_PATH, P_TIER_DISK_BYTES,
	P_KV_EVENTS, P_KV_EVENTS_TOPIC, P_KV_EVENTS_REPLAY, P_KV_EVENTS_BUFFER, P_KV_EVENTS_FORMAT,
	P_SNAPSHOT_EVERY, P_TIER_REMOTE, P_TIER_REMOTE_PREFIX, P_TIER_REMOTE_TIMEOUT_MS,
	P_TIER_REMOTE_TTL_S, P_TIER_REMOTE_INSECURE, P_TIER_REMOTE_AUTH_FILE, P_TIER_REMOTE_KEY_FILE,
	P_TIER_REMOTE_CA_FILE, P_TIER_REMOTE_CERT_FILE, P_TIER_REMOTE_CERT_KEY_FILE,
};
static const char *const yes_no[] = { "no", "yes", NULL };

/* Stored by libkvpool's kvp_pool_params_v2_set, as kvctl's; the ranges are pool_check.c's. */
static const struct cfg_key pool_keys[] = {
	NUMBER("blocks", 2, KVC_MAX_BLOCKS),
	NUMBER("block_size", 1, KVC_MAX_TOKENS),
	OF_TYPE("groups", KEY_GROUPS),
	CHOICE("caching", on_off),
	CHOICE("free_order", free_orders),
	CHOICE("publish", publishes),
	NUMBER("max_len", 1, UINT32_MAX),
	NUMBER("max_step_tokens", 1, KVC_MAX_TOKENS),
	NUMBER("kv_heads", 1, 1024),
	NUMBER("head_dim", 1, 1024),
	CHOICE("dtype", dtypes),
	NUMBER("layers_per_group", 1, 1024),
	CHOICE("backend", backends),
	NUMBER("device", 0, UINT32_MAX),
	CHOICE("layout", layouts),
	OF_TYPE("namespace", KEY_NAME),
	[P_TIER_HOST_BYTES] = NUMBER("tier_host_bytes", 0, UINT64_MAX),
	[P_TIER_POLICY] = CHOICE("tier_policy", tier_policies),
	[P_TIER_DISK_PATH] = STRING("tier_disk_path", KVPD_TIER_PATH_MAX - 1,
				    "a directory for the pool's disk tier"),
	[P_TIER_DISK_BYTES] = NUMBER("tier_disk_bytes", 0, UINT64_MAX),
	[P_KV_EVENTS] = STRING("kv_events", KVPD_EVENTS_ENDPOINT_MAX - 1,
			       "on, off, ipc://PATH or tcp://HOST:PORT"),
	[P_KV_EVENTS_TOPIC] = STRING("kv_events_topic", KVPD_EVENTS_TOPIC_MAX - 1,
				     "the events' ZMQ topic"),
	[P_KV_EVENTS_REPLAY] = STRING("kv_events_replay", KVPD_EVENTS_ENDPOINT_MAX - 1,
				      "on, off, ipc://PATH or tcp://HOST:PORT"),
	[P_KV_EVENTS_BUFFER] = NUMBER("kv_events_buffer", 0, KVPD_EVENTS_BUFFER_MAX),
	[P_KV_EVENTS_FORMAT] = CHOICE("kv_events_format", events_forms),
	[P_SNAPSHOT_EVERY] = NUMBER("snapshot_every", 0, KVC_MAX_TOKENS),
	[P_TIER_REMOTE] = STRING("tier_remote", KVPD_REMOTE_URL_MAX - 1,
				 "redis:// or rediss://HOST:PORT[,HOST:PORT...]"),
	[P_TIER_REMOTE_PREFIX] = STRING("tier_remote_prefix", KVPD_REMOTE_PREFIX_MAX - 1,
					"the cluster tier's key prefix"),
	[P_TIER_REMOTE_TIMEOUT_MS] = NUMBER("tier_remote_timeout_ms", 1, 60000),
	[P_TIER_REMOTE_TTL_S] = NUMBER("tier_remote_ttl_s", 0, INT32_MAX),
	[P_TIER_REMOTE_INSECURE] = CHOICE("tier_remote_insecure", yes_no),
	[P_TIER_REMOTE_AUTH_FILE] = STRING("tier_remote_auth_file", KVPD_REMOTE_FILE_MAX - 1,
					   "a file: USER PASSWORD"),
	[P_TIER_REMOTE_KEY_FILE] = STRING("tier_remote_key_file", KVPD_REMOTE_FILE_MAX - 1,
					  "a file: the values' key, 32 to 64 bytes"),
	[P_TIER_REMOTE_CA_FILE] = STRING("tier_remote_ca_file", KVPD_REMOTE_FILE_MAX - 1,
					 "a PEM file: the CA of the nodes' certificates"),
	[P_TIER_REMOTE_CERT_FILE] = STRING("tier_remote_cert_file", KVPD_REMOTE_FILE_MAX - 1,
					   "a PEM file: the client's certificate"),
	[P_TIER_REMOTE_CERT_KEY_FILE] = STRING("tier_remote_cert_key_file",
					       KVPD_REMOTE_FILE_MAX - 1,
					       "a PEM file: the client certificate's key"),
};

#define QUOTA_KEYS                                                                             \
	[KVP_QUOTA_CLIENTS] = OF_TYPE("max_clients", KEY_QUOTA),                               \
	[KVP_QUOTA_SEQUENCES] = OF_TYPE("max_sequences", KEY_QUOTA),                           \
	[KVP_QUOTA_TOKENS] = OF_TYPE("max_tokens", KEY_QUOTA),                                 \
	[KVP_QUOTA_ARENA_BYTES] = OF_TYPE("max_arena_bytes", KEY_QUOTA),                       \
	[KVP_QUOTA_BLOCKS] = OF_TYPE("max_blocks", KEY_QUOTA),                                 \
	[KVPD_QUOTA_TIER_BYTES] = OF_TYPE("max_tier_bytes", KEY_QUOTA)

static const struct cfg_key quota_keys[] = { QUOTA_KEYS };
/* A namespace's keys: the quota keys at their KVP_QUOTA_* index, then uids. */
#define NS_UIDS KVPD_QUOTA_KEYS
static const struct cfg_key namespace_keys[] = {
	QUOTA_KEYS,
	/* Each 0..max: -1 is no uid. */
	[NS_UIDS] = { .name = "uids", .type = KEY_UIDS, .max = (uid_t)-1 - 1 },
};

static const struct {
	const struct cfg_key *keys;
	unsigned n;
} sections[] = {
	[KVPD_CONF_DAEMON] = { daemon_keys, ARRAY_SIZE(daemon_keys) },
	[KVPD_CONF_POOL] = { pool_keys, ARRAY_SIZE(pool_keys) },
	[KVPD_CONF_NAMESPACE] = { namespace_keys, ARRAY_SIZE(namespace_keys) },
	[KVPD_CONF_QUOTA] = { quota_keys, ARRAY_SIZE(quota_keys) },
	[KVPD_CONF_UID] = { quota_keys, ARRAY_SIZE(quota_keys) },
};

_Static_assert(ARRAY_SIZE(pool_keys) <= KVPD_CONF_MAX_KEYS, "KVPD_CONF_MAX_KEYS");
_Static_assert(ARRAY_SIZE(daemon_keys) <= KVPD_CONF_MAX_KEYS, "KVPD_CONF_MAX_KEYS");
_Static_assert(ARRAY_SIZE(namespace_keys) <= KVPD_CONF_MAX_KEYS, "KVPD_CONF_MAX_KEYS");

/* Decimal digits only: no sign, no blank, no base prefix. -ERANGE past 2^64 - 1. */
static int parse_number(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (!len)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* "not a number (2..16777216)" or "out of range (2..16777216)"; NULL when in range. */
static const char *range_problem(const char *s, size_t len, uint64_t min, uint64_t max,
				 uint64_t *out, char *buf, size_t buf_len)
{
	int ret = parse_number(s, len, out);

	if (!ret && *out >= min && *out <= max)
		return NULL;
	snprintf(buf, buf_len, "%s (%llu..%llu)", ret == -EINVAL ? "not a number" : "out of range",
		 (unsigned long long)min, (unsigned long long)max);
	return buf;
}

/* @item after what @buf holds, ", " before it unless @first. */
static void list_append(char *buf, size_t len, bool first, const char *item)
{
	size_t used = strlen(buf);

	if (used + 1 < len)
		snprintf(buf + used, len - used, "%s%s", first ? "" : ", ", item);
}

static int choice_index(const char *const *choices, const char *s)
{
	for (int i = 0; choices[i]; i++)
		if (!strcmp(s, choices[i]))
			return i;
	return -1;
}

const char *kvpd_conf_name_problem(const char *name)
{
	if (!*name)
		return "empty";
	if (strlen(name) >= KVP_NAME_MAX)
		return "too long (at most 31 bytes)";
	return kvpd_name_valid(name) ? NULL : "not printable ASCII without blanks";
}

static const char kinds_help[] = "kinds: full, swa:W, rswa:W, chunked:C, cyclic:W";

/* What libkvpool's parse_groups takes, each refusal saying which group and why. */
static int check_groups(const char *spec, char *why, size_t len)
{
	static const char *const kinds[] = { "full", "swa", "rswa", "chunked", "cyclic" };
	static const uint32_t min_param[] = { 0, 2, 1, 1, 1 };
	const char *s = spec;
	unsigned n = 0;

	for (s += strspn(s, " ,\t"); *s; s += strspn(s, " ,\t")) {
		int tl = (int)strcspn(s, " ,\t");
		const char *colon = memchr(s, ':', (size_t)tl);
		size_t klen = colon ? (size_t)(colon - s) : (size_t)tl;
		const char *what, *bad;
		char range[64];
		uint64_t param;
		unsigned k;

		for (k = 0; k < ARRAY_SIZE(kinds); k++)
			if (strlen(kinds[k]) == klen && !strncmp(s, kinds[k], klen))
				break;
		if (k == ARRAY_SIZE(kinds))
			return kvpd_refuse(why, len, -EINVAL, "unknown kind '%.*s' (%s)", (int)klen, s, kinds_help);
		if (++n > KVP_MAX_GROUPS)
			return kvpd_refuse(why, len, -EINVAL, "more than %u groups (%s)", KVP_MAX_GROUPS, kinds_help);
		what = k == KVP_KIND_CHUNKED ? "chunk size" : "window";
		if (k == KVP_KIND_FULL && colon)
			return kvpd_refuse(why, len, -EINVAL, "'%.*s': full takes no parameter (%s)", tl, s, kinds_help);
		if (k != KVP_KIND_FULL && !colon)
			return kvpd_refuse(why, len, -EINVAL, "'%.*s': needs a %s (%s)", tl, s, what, kinds_help);
		if (colon) {
			bad = range_problem(colon + 1, (size_t)(s + tl - colon - 1), min_param[k],
					    KVC_MAX_TOKENS, &param, range, sizeof(range));
			if (bad)
				return kvpd_refuse(why, len, -EINVAL, "'%.*s': %s %s (%s)", tl, s, what, bad, kinds_help);
		}
		s += tl;
	}
	return n ? 0 : kvpd_refuse(why, len, -EINVAL, "no group (%s)", kinds_help);
}

/* A list of at most KVPD_MAX_NS_UIDS uids, blank or comma separated; "" is none. */
static int parse_uids(const struct cfg_key *key, const char *s, struct kvpd_namespace *ns,
		      char *why, size_t len)
{
	uid_t uids[KVPD_MAX_NS_UIDS];
	uint32_t n = 0;
	uint64_t uid;

	for (s += strspn(s, " ,\t"); *s; s += strspn(s, " ,\t")) {
		int tl = (int)strcspn(s, " ,\t");
		int ret = parse_number(s, (size_t)tl, &uid);

		if (ret == -EINVAL)
			return kvpd_refuse(why, len, -EINVAL, "not a list of uids (numbers): '%.*s'", tl, s);
		if (ret || uid > key->max)
			return kvpd_refuse(why, len, -EINVAL, "uid %.*s out of range (0..%llu)", tl, s,
				       (unsigned long long)key->max);
		if (n == KVPD_MAX_NS_UIDS)
			return kvpd_refuse(why, len, -EINVAL, "more than %u uids", KVPD_MAX_NS_UIDS);
		uids[n++] = (uid_t)uid;
		s += tl;
	}
	memcpy(ns->uids, uids, n * sizeof(uids[0]));
	ns->nuids = n;
	return 0;
}

/* Config strings live as long as the config: a list of one allocation each, freed at release. */
static const char *keep_string(struct kvpd_config *cfg, const char *s)
{
	size_t len = strlen(s) + 1;
	char **slot, *copy = malloc(sizeof(char *) + len);

	if (!copy)
		return NULL;
	slot = (char **)copy;
	*slot = cfg->strings;
	cfg->strings = copy;
	return memcpy(copy + sizeof(char *), s, len);
}

static int daemon_set(struct kvpd_config *cfg, int idx, const char *value, uint64_t num, int choice)
{
	const char *s;

	switch (idx) {
	case D_SOCKET:
	case D_SOCKET_GROUP:
	case D_PLUGIN_DIR:
		s = keep_string(cfg, value);
		if (!s)
			return -ENOMEM;
		*(idx == D_SOCKET ? &cfg->socket_path :
		  idx == D_SOCKET_GROUP ? &cfg->socket_group : &cfg->plugin_dir) = s;
		return 0;
	case D_SPIN_US: cfg->spin_us = (unsigned)num; return 0;
	case D_BUDGET: cfg->budget = (unsigned)num; return 0;
	case D_MAX_CLIENTS: cfg->max_clients = (unsigned)num; return 0;
	case D_THREADS: cfg->threads = (unsigned)num; return 0;
	case D_EVENT_LOOP: cfg->event_loop = (enum kvpd_evloop_choice)choice; return 0;
	case D_LOG_LEVEL: return kvpd_parse_log_level(value, &cfg->log_level);
	case D_MAX_HOST_BYTES: cfg->max_host_bytes = num; return 0;
	}
	return -EINVAL;
}

/* The value's problem into @why (-EINVAL), else 0 with a number's value or a choice's index. */
static int check_value(const struct cfg_key *key, const char *value, uint64_t *num, int *choice,
		       char *why, size_t len)
{
	char range[64];
	const char *bad;

	switch (key->type) {
	case KEY_NUMBER:
		bad = range_problem(value, strlen(value), key->min, key->max, num, range, sizeof(range));
		return bad ? kvpd_refuse(why, len, -EINVAL, "%s", bad) : 0;
	case KEY_CHOICE:
		*choice = choice_index(key->choices, value);
		if (*choice >= 0)
			return 0;
		snprintf(why, len, "not one of ");
		for (int i = 0; key->choices[i]; i++)
			list_append(why, len, !i, key->choices[i]);
		return -EINVAL;
	case KEY_STRING:
		if (!*value)
			return kvpd_refuse(why, len, -EINVAL, "empty (%s)", key->help);
		if (key->max && strlen(value) > key->max)
			return kvpd_refuse(why, len, -EINVAL, "too long (at most %llu bytes)",
				       (unsigned long long)key->max);
		return 0;
	case KEY_NAME:
		bad = *value ? kvpd_conf_name_problem(value) : NULL;
		return bad ? kvpd_refuse(why, len, -EINVAL, "%s", bad) : 0;
	case KEY_GROUPS:
		return check_groups(value, why, len);
	case KEY_QUOTA:
		if (!strcmp(value, "unlimited")) {
			*num = KVP_QUOTA_UNLIMITED;
			return 0;
		}
		return parse_number(value, strlen(value), num) ?
			       kvpd_refuse(why, len, -EINVAL, "not a number or unlimited") : 0;
	case KEY_UIDS:
		return 0; /* parsed where they are stored */
	}
	return -EINVAL;
}

int kvpd_conf_key(enum kvpd_conf_section kind, const char *name)
{
	for (unsigned i = 0; i < sections[kind].n; i++)
		if (!strcmp(sections[kind].keys[i].name, name))
			return (int)i;
	return -ENOENT;
}

void kvpd_conf_keys(enum kvpd_conf_section kind, char *buf, size_t len)
{
	*buf = '\0';
	for (unsigned i = 0; i < sections[kind].n; i++)
		list_append(buf, len, !i, sections[kind].keys[i].name);
}

/* The kv_events keys, checked for their kind of value already. */
static int events_set(struct kvpd_pool_spec *p, int idx, const char *value, uint64_t num,
		      int choice)
{
	switch (idx) {
	case P_KV_EVENTS:
		/* "off" is no events, as not setting the key. */
		strcpy(p->kv_events, strcmp(value, "off") ? value : "");
		return 0;
	case P_KV_EVENTS_TOPIC:
		strcpy(p->kv_events_topic, value);
		return 0;
	case P_KV_EVENTS_REPLAY:
		strcpy(p->kv_events_replay, strcmp(value, "on") ? value : "");
		return 0;
	case P_KV_EVENTS_BUFFER:
		p->kv_events_buffer = (uint32_t)num;
		p->kv_events_buffer_set = true;
		return 0;
	case P_KV_EVENTS_FORMAT:
		p->kv_events_format = (uint32_t)choice;
		return 0;
	}
	return -EINVAL;
}

/* The cluster tier's keys, checked for their kind of value already. */
static int remote_set(struct kvpd_pool_spec *p, int idx, const char *value, uint64_t num,
		      int choice)
{
	char *path[] = {
		[P_TIER_REMOTE_AUTH_FILE - P_TIER_REMOTE_AUTH_FILE] = p->tier_remote_auth_file,
		[P_TIER_REMOTE_KEY_FILE - P_TIER_REMOTE_AUTH_FILE] = p->tier_remote_key_file,
		[P_TIER_REMOTE_CA_FILE - P_TIER_REMOTE_AUTH_FILE] = p->tier_remote_ca_file,
		[P_TIER_REMOTE_CERT_FILE - P_TIER_REMOTE_AUTH_FILE] = p->tier_remote_cert_file,
		[P_TIER_REMOTE_CERT_KEY_FILE - P_TIER_REMOTE_AUTH_FILE] = p->tier_remote_cert_key_file,
	};

	switch (idx) {
	case P_TIER_REMOTE:
		strcpy(p->tier_remote, value);
		return 0;
	case P_TIER_REMOTE_PREFIX:
		strcpy(p->tier_remote_prefix, value);
		return 0;
	case P_TIER_REMOTE_TIMEOUT_MS:
		p->tier_remote_timeout_ms = (uint32_t)num;
		return 0;
	case P_TIER_REMOTE_TTL_S:
		p->tier_remote_ttl_s = (uint32_t)num;
		p->tier_remote_ttl_set = true;
		return 0;
	case P_TIER_REMOTE_INSECURE:
		p->tier_remote_insecure = choice == 1;
		return 0;
	}
	if (idx < P_TIER_REMOTE_AUTH_FILE || idx > P_TIER_REMOTE_CERT_KEY_FILE)
		return -EINVAL;
	strcpy(path[idx - P_TIER_REMOTE_AUTH_FILE], value);
	return 0;
}

int kvpd_conf_set(struct kvpd_config *cfg, enum kvpd_conf_section kind, void *obj, int idx,
		  const char *value, char *why, size_t why_len)
{
	const struct cfg_key *key = &sections[kind].keys[idx];
	struct kvpd_namespace *ns = obj;
	struct kvpd_uid_quota *uq = obj;
	uint64_t num = 0;
	int choice = 0, ret;

	ret = check_value(key, value, &num, &choice, why, why_len);
	if (ret)
		return ret;
	switch (kind) {
	case KVPD_CONF_DAEMON:
		return daemon_set(cfg, idx, value, num, choice);
	case KVPD_CONF_POOL:
		if (idx == P_TIER_HOST_BYTES) {
			((struct kvpd_pool_spec *)obj)->tier_host_bytes = num;
			return 0;
		}
		if (idx == P_TIER_POLICY) {
			((struct kvpd_pool_spec *)obj)->tier_policy = (uint32_t)choice;
			return 0;
		}
		if (idx == P_TIER_DISK_PATH) {
			strcpy(((struct kvpd_pool_spec *)obj)->tier_disk_path, value);
			return 0;
		}
		if (idx == P_TIER_DISK_BYTES) {
			((struct kvpd_pool_spec *)obj)->tier_disk_bytes = num;
			return 0;
		}
		if (idx == P_SNAPSHOT_EVERY) {
			((struct kvpd_pool_spec *)obj)->snapshot_every = (uint32_t)num;
			((struct kvpd_pool_spec *)obj)->snapshot_every_set = true;
			return 0;
		}
		if (idx >= P_TIER_REMOTE)
			return remote_set(obj, idx, value, num, choice);
		if (idx >= P_KV_EVENTS)
			return events_set(obj, idx, value, num, choice);
		/* In range here, so refused there only if the two parsers disagree. */
		ret = kvp_pool_params_v2_set(&((struct kvpd_pool_spec *)obj)->v2, key->name, value);
		return ret ? kvpd_refuse(why, why_len, -EINVAL, "refused by kvp_pool_params_v2_set") : 0;
	case KVPD_CONF_NAMESPACE:
		if (idx != NS_UIDS) {
			ns->quota.limit[idx] = num;
			return 0;
		}
		return parse_uids(key, value, ns, why, why_len);
	case KVPD_CONF_QUOTA:
		((struct kvpd_quota *)obj)->limit[idx] = num;
		return 0;
	case KVPD_CONF_UID:
		uq->quota.limit[idx] = num;
		uq->set |= 1u << idx;
		return 0;
	}
	return -EINVAL;
}

int kvpd_parse_event_loop(const char *s, enum kvpd_evloop_choice *out)
{
	int i = choice_index(evloop_names, s);

	if (i < 0)
		return -EINVAL;
	*out = (enum kvpd_evloop_choice)i;
	return 0;
}

bool kvpd_name_valid(const char *name)
{
	size_t len = strnlen(name, KVP_NAME_MAX);

	if (len == 0 || len == KVP_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (name[i] <= ' ' || name[i] > '~')
			return false;
	return true;
}
