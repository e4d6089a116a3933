/* SPDX-License-Identifier: MIT */
/*
 * The run after a planned restart: what the last one handed over, taken back.
 * Each pool whose state-shaping parameters are unchanged gets its KV memory,
 * its core (the blocks cached, the free queue's order), its host tier (the
 * entries, their LRU order and charges) and its generation back; its KV
 * events say AllBlocksCleared and then every block again. Anything else
 * starts empty, with one line naming the pool and the cause.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handover/handover.h"
#include "handover/pool_state.h"
#include "events/events.h"
#include "tier/tier.h"

/* The binary this run was started from: argv[0] as a path, or found on PATH; else ours. */
static void resolve_start_path(struct kvpd_handover *h, const char *argv0)
{
	const char *path = getenv("PATH");
	char cand[PATH_MAX];

	if (strchr(argv0, '/') && realpath(argv0, h->start_path))
		return;
	while (path && *path && !strchr(argv0, '/')) {
		size_t n = strcspn(path, ":");

		if (snprintf(cand, sizeof(cand), "%.*s/%s", (int)n, path, argv0) < (int)sizeof(cand) &&
		    access(cand, X_OK) == 0 && realpath(cand, h->start_path))
			return;
		path += n + (path[n] == ':');
	}
	ssize_t n = readlink("/proc/self/exe", h->start_path, sizeof(h->start_path) - 1);

	h->start_path[n > 0 ? n : 0] = '\0';
}

/* KVPOOLD_HANDOVER's value of @key, or @dflt. */
static long long env_value(const char *env, const char *key, long long dflt)
{
	size_t klen = strlen(key);

	for (const char *p = env; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, key, klen) && p[klen] == '=')
			return strtoll(p + klen + 1, NULL, 10);
	return dflt;
}

/* KVPOOLD_HANDOVER's holders=PID:PID...: the runs' before this one, not reaped yet. */
static void take_holders(struct kvpd_handover *h, const char *env)
{
	const char *p = strstr(env, "holders=");
	unsigned n = 0;

	for (p = p ? p + 8 : NULL; p && *p && *p != ',' && n < 8; p += *p == ':') {
		char *end;
		long pid = strtol(p, &end, 10);

		if (end == p)
			break;
		if (pid > 0)
			h->holders[n++] = (pid_t)pid;
		p = end;
	}
}

static int list_sections(struct kvpd_handover *h)
{
	struct kvpd_state_section sec;
	const void *data;
	bool intact;

	h->sections = calloc(h->st.head.sections + 1, sizeof(*h->sections));
	if (!h->sections)
		return -ENOMEM;
	while ((data = kvpd_state_next(&h->st, &sec, &intact))) {
		struct kvpd_handed *s = &h->sections[h->nsections++];

		if (sec.kind != KVPD_SECTION_POOL) {
			s->used = true; /* a later build's: nothing of ours */
			continue;
		}
		*s = (struct kvpd_handed){ .data = data, .bytes = sec.bytes, .version = sec.version,
					   .intact = intact };
		memcpy(s->name, sec.name, sizeof(s->name));
	}
	return 0;
}

bool kvpd_handover_stored(struct kvpd *d, const char *name, int fd)
{
	struct kvpd_handover *h = d->handover;
	size_t prefix = strlen(KVPD_STORE_FD);
	struct kvpd_stored_fd *e;
	char *end;
	long old;

	if (strcmp(name, KVPD_STORE_STATE) && strncmp(name, KVPD_STORE_FD, prefix))
		return false;
	old = strcmp(name, KVPD_STORE_STATE) ? strtol(name + prefix, &end, 10) : -1;
	if (h->nstored >= KVPD_STORED_MAX || (old >= 0 && (*end || end == name + prefix))) {
		close(fd); /* ours, but of no use: systemd is told to let it go all the same */
		fd = -1;
	} else {
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	if (h->nstored < KVPD_STORED_MAX) {
		e = &h->stored[h->nstored++];
		snprintf(e->name, sizeof(e->name), "%s", name);
		e->old = (int)old;
		e->fd = fd;
	}
	return true;
}

/* The state systemd's store passed back: its descriptor, or -1. */
static int stored_state(struct kvpd_handover *h)
{
	for (unsigned i = 0; i < h->nstored; i++)
		if (h->stored[i].old == -1 && h->stored[i].fd >= 0) {
			int fd = h->stored[i].fd;

			h->stored[i].fd = -1;
			return fd;
		}
	return -1;
}

int kvpd_handover_start(struct kvpd *d, int argc, char **argv)
{
	struct kvpd_handover *h = d->handover;
	const char *env = getenv("KVPOOLD_HANDOVER");
	const char *from = "kvpoold";
	char why[160];
	int state_fd, ret;

	(void)argc;
	h->argv = argv;
	h->start_ns = kvpd_now_ns();
	resolve_start_path(h, argv[0]);
	h->self_fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (env) {
		env = strdup(env);
		unsetenv("KVPOOLD_HANDOVER"); /* nothing this run starts takes it for its own */
		if (!env)
			return -ENOMEM;
		state_fd = (int)env_value(env, "state", -1);
		h->last_asked_ns = (uint64_t)env_value(env, "asked", 0);
		h->last_drained_ns = (uint64_t)env_value(env, "drained", 0);
		h->last_written_ns = (uint64_t)env_value(env, "written", 0);
		h->exec_ns = (uint64_t)env_value(env, "exec", 0);
		h->last_state_bytes = (uint64_t)env_value(env, "bytes", 0);
		take_holders(h, env);
		/* Checked and made the daemon's by main (listen.c), as systemd's socket is. */
		h->listen_fd = (int)env_value(env, "listen", -1);
		h->lock_fd = (int)env_value(env, "lock", -1);
		h->listen_systemd = env_value(env, "systemd", 0) != 0;
		free((void *)env);
	} else if (h->nstored) {
		state_fd = stored_state(h);
		from = "systemd's descriptor store, from kvpoold";
	} else {
		return 0;
	}
	h->restoring = true;
	if (state_fd < 0) {
		kvpd_log(d, KVPD_LOG_WARNING, "restart: no state handed over: every pool starts empty");
		return 0;
	}
	ret = kvpd_state_open(state_fd, &h->st, why, sizeof(why));
	close(state_fd);
	if (!ret)
		ret = list_sections(h);
	if (ret) {
		kvpd_log(d, KVPD_LOG_WARNING, "restart: the state handed over is refused: %s: every "
			 "pool starts empty", ret == -ENOMEM ? strerror(ENOMEM) : why);
		kvpd_state_close(&h->st);
		return 0;
	}
	kvpd_log(d, KVPD_LOG_INFO, "restart: state of %u pools handed over by %s %.*s",
		 h->nsections, from, (int)sizeof(h->st.head.build), h->st.head.build);
	return 0;
}

void kvpd_handover_reap(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;

	for (unsigned i = 0; i < sizeof(h->holders) / sizeof(h->holders[0]); i++)
		if (h->holders[i] > 0 && waitpid(h->holders[i], NULL, WNOHANG) != 0)
			h->holders[i] = 0; /* reaped, or not ours: forgotten */
}

static struct kvpd_handed *section_of(struct kvpd_handover *h, const char *name)
{
	for (uint32_t i = 0; i < h->nsections; i++)
		if (!h->sections[i].used && !strncmp(h->sections[i].name, name, KVP_NAME_MAX))
			return &h->sections[i];
	return NULL;
}

/* Every array inside the section, and every count what its bytes allow. */
static bool fits(const struct kvpd_pool_state *ps, uint64_t bytes)
{
	const struct kvpd_tier_head *t = &ps->tier;
	struct { uint64_t off, n, size; } a[] = {
		{ ps->blocks_off, ps->num_blocks ? ps->num_blocks - 1 : 0, sizeof(struct kvc_saved_block) },
		{ ps->owners_off, ps->has_tier && t->nowners ? t->nowners - 1 : 0,
		  sizeof(struct kvpd_tier_saved_owner) },
		{ ps->block_owner_off, ps->has_tier ? ps->num_blocks : 0, sizeof(uint32_t) },
		{ ps->walk_off, ps->has_tier ? ps->num_blocks : 0, sizeof(uint32_t) },
		{ ps->events_off, ps->events, sizeof(struct kvpd_events_saved) },
		{ ps->tokens_off, (uint64_t)ps->events * ps->event_block_size, sizeof(uint32_t) },
	};

	if (ps->end != bytes || ps->event_block_size > (1u << 16) || (ps->has_tier && !t->nowners))
		return false;
	for (unsigned i = 0; i < sizeof(a) / sizeof(a[0]); i++)
		if (a[i].off % 8 || a[i].off > bytes || a[i].n > (bytes - a[i].off) / a[i].size)
			return false;
	return true;
}

/*
 * This run's descriptor for the one the state knows as @old: the same number
 * after an exec; the store's, by its name, after systemd passed them (-1:
 * it did not).
 */
static int fd_of(const struct kvpd_handover *h, int old)
{
	if (!h->nstored)
		return old;
	for (unsigned i = 0; i < h->nstored; i++)
		if (h->stored[i].old == old && old >= 0)
			return h->stored[i].fd;
	return -1;
}

/* Descriptor @old's fate: a pool's now (@taken), or closed, a memfd the state names. */
static void settle_fd(struct kvpd_handover *h, int old, bool taken)
{
	int fd = fd_of(h, old);

	for (unsigned i = 0; i < h->nstored; i++)
		if (h->stored[i].fd == fd)
			h->stored[i].fd = -1; /* accounted for: the final sweep leaves it */
	if (!taken && fd >= 3 && fcntl(fd, F_GET_SEALS) >= 0)
		close(fd);
}

/* The memfds a section names: the pool's where it took them, else closed. Once. */
static void close_named(struct kvpd_handover *h, struct kvpd_handed *s)
{
	struct kvpd_pool_state ps;

	if (s->settled || !s->intact || s->version != KVPD_SECTION_POOL_VERSION ||
	    s->bytes < sizeof(ps))
		return; /* their numbers cannot be trusted: the store's are swept, an exec's left */
	memcpy(&ps, s->data, sizeof(ps));
	settle_fd(h, ps.kv_fd, s->kv_taken);
	settle_fd(h, ps.tier_fd, s->tier.taken);
	settle_fd(h, ps.tier_index_fd, s->tier.taken);
	s->settled = true;
}

/* Whether @pool may take section @s: NULL, or the cause it may not (in @cause). */
static const char *judge(struct kvpd_pool *pool, struct kvpd_handed *s,
			 struct kvpd_pool_state *ps, char *cause, size_t cause_len)
{
	const char *key;

	if (s->version != KVPD_SECTION_POOL_VERSION) {
		snprintf(cause, cause_len, "its state is section format %u, this build reads %u",
			 s->version, KVPD_SECTION_POOL_VERSION);
		return cause;
	}
	if (!s->intact)
		return "its state is damaged (checksum)";
	if (s->bytes < sizeof(*ps))
		return "its state is damaged (short)";
	memcpy(ps, s->data, sizeof(*ps));
	if (!fits(ps, s->bytes))
		return "its state is damaged (bounds)";
	key = kvpd_pool_shape_changed(&ps->spec, &pool->spec);
	if (key) {
		snprintf(cause, cause_len, "%s changed since the last run", key);
		return cause;
	}
	if (ps->num_blocks != pool->params.num_blocks)
		return "a block was still in use at the handover";
	return NULL;
}

static void cold(struct kvpd *d, struct kvpd_pool *pool, struct kvpd_handed *s, const char *cause)
{
	kvpd_log(d, KVPD_LOG_WARNING, "restart: pool %s: %s: started empty", pool->name, cause);
	d->handover->pools_cold++;
	s->cold = true;
	close_named(d->handover, s);
}

void kvpd_handover_prepare(struct kvpd *d, struct kvpd_pool *pool)
{
	struct kvpd_handover *h = d->handover;
	struct kvpd_handed *s = h->restoring ? section_of(h, pool->name) : NULL;
	char buf[KVP_REASON_MAX + 64] = "";
	const uint8_t *sec;
	struct kvpd_pool_state ps;
	const char *cause;

	if (!s)
		return; /* new since the last run: nothing to say */
	s->used = true;
	s->pool = pool;
	cause = judge(pool, s, &ps, buf, sizeof(buf));
	if (cause) {
		cold(d, pool, s, cause);
		return;
	}
	sec = s->data;
	if (!ps.has_tier || fd_of(h, ps.tier_fd) < 0 || fd_of(h, ps.tier_index_fd) < 0)
		return;
	s->tier = (struct kvpd_tier_handed){
		.head = ps.tier, .mem_fd = fd_of(h, ps.tier_fd), .index_fd = fd_of(h, ps.tier_index_fd),
		.owners = (const void *)(sec + ps.owners_off),
		.block_owner = (const void *)(sec + ps.block_owner_off),
		.walk = (const void *)(sec + ps.walk_off) };
	pool->tier_handed = &s->tier;
}

static struct kvpd_handed *section_taken_by(struct kvpd_handover *h, const struct kvpd_pool *pool)
{
	for (uint32_t i = 0; i < h->nsections; i++)
		if (h->sections[i].pool == pool)
			return &h->sections[i];
	return NULL;
}

/* The rest of the section once the tier is attached: NULL, or the cause (the pool empty). */
static const char *take_section(struct kvpd *d, struct kvpd_pool *pool, struct kvpd_handed *s,
				char *cause, size_t cause_len)
{
	const uint8_t *sec = s->data;
	struct kvpd_pool_state ps;
	int ret;

	memcpy(&ps, sec, sizeof(ps));
	if (pool->layout.slot_bytes) {
		int fd = fd_of(d->handover, ps.kv_fd);

		ret = fd >= 3 ? kvpd_pool_adopt_kv(pool, fd, cause, cause_len) : -EBADF;
		if (ret)
			return ret == -EBADF ? "its KV memory was not handed over" : cause;
		s->kv_taken = true;
	}
	ret = kvc_pool_restore(pool->core, (const void *)(sec + ps.blocks_off), ps.num_blocks - 1);
	if (ret) {
		snprintf(cause, cause_len, "its cache does not fit it (%s)", strerror(-ret));
		return cause;
	}
	pool->generation = ps.generation;
	if (ps.has_tier && !s->tier.taken)
		kvpd_log(d, KVPD_LOG_WARNING, "restart: pool %s: the tier handed over does not fit "
			 "it: its tier started empty", pool->name);
	/* No block size: the last run had no events for this pool, so there is nothing to say again. */
	kvpd_events_load(pool->events, (const void *)(sec + ps.events_off),
			 (const void *)(sec + ps.tokens_off),
			 ps.event_block_size == pool->params.block_size ? ps.events : 0,
			 s->tier.taken);
	return NULL;
}

void kvpd_handover_pool(struct kvpd *d, struct kvpd_pool *pool)
{
	struct kvpd_handover *h = d->handover;
	struct kvpd_handed *s = h->restoring ? section_taken_by(h, pool) : NULL;
	char buf[KVP_REASON_MAX + 64] = "";
	const char *cause;

	pool->tier_handed = NULL;
	if (!h->restoring)
		return;
	if (!s || s->cold) {
		kvpd_events_load(pool->events, NULL, NULL, 0, false);
		return;
	}
	cause = take_section(d, pool, s, buf, sizeof(buf));
	if (cause) {
		cold(d, pool, s, cause);
		kvpd_events_load(pool->events, NULL, NULL, 0, false);
		return;
	}
	close_named(h, s); /* what it did not take */
	kvpd_stats_pool(d, pool, 0);
	h->pools_restored++;
}

/* A pool the last run made with kvctl pool create: made again, then restored. */
static void create_again(struct kvpd *d, struct kvpd_handed *s, const struct kvpd_pool_state *ps)
{
	struct kvpd_handover *h = d->handover;
	char why[KVP_REASON_MAX] = "";
	struct kvpd_pool *pool;
	int ret = kvpd_pool_create(d, &ps->spec, NULL, why, sizeof(why));

	if (!ret) {
		pool = kvpd_pool_find(d, s->name);
		ret = kvpd_tier_probe(pool, why, sizeof(why)) ?:
		      kvpd_events_attach(d, pool, why, sizeof(why));
		if (!ret) {
			kvpd_handover_prepare(d, pool);
			ret = kvpd_tier_attach(d, pool, why, sizeof(why));
		}
		if (ret) {
			pool->tier_handed = NULL;
			kvpd_pool_destroy(d, s->name, false);
		}
	}
	if (ret) {
		close_named(h, s);
		s->used = true;
		d->handover->pools_cold++;
		kvpd_log(d, KVPD_LOG_ERR, "restart: pool %s (kvctl pool create) not made again: %s",
			 s->name, *why ? why : strerror(-ret));
		return;
	}
	kvpd_handover_pool(d, pool);
}

void kvpd_handover_finish(struct kvpd *d)
{
	struct kvpd_handover *h = d->handover;

	if (!h->restoring)
		return;
	for (uint32_t i = 0; i < h->nsections; i++) {
		struct kvpd_handed *s = &h->sections[i];
		struct kvpd_pool_state ps;

		if (s->used)
			continue;
		if (!s->intact || s->version != KVPD_SECTION_POOL_VERSION || s->bytes < sizeof(ps)) {
			kvpd_log(d, KVPD_LOG_WARNING, "restart: pool %s: its state is damaged or of "
				 "another format: not made again", s->name);
			continue;
		}
		memcpy(&ps, s->data, sizeof(ps));
		ps.spec.v2.v1.name[KVP_NAME_MAX - 1] = '\0';
		if (ps.configured || strncmp(ps.spec.v2.v1.name, s->name, KVP_NAME_MAX)) {
			close_named(h, s);
			s->used = true;
			kvpd_log(d, KVPD_LOG_NOTICE, "restart: pool %s is no longer in the config: "
				 "dropped", s->name);
			continue;
		}
		create_again(d, s, &ps);
	}
	for (uint32_t i = 0; i < h->nsections; i++)
		if (!h->sections[i].used)
			close_named(h, &h->sections[i]);
	free(h->sections);
	h->sections = NULL;
	kvpd_state_close(&h->st);
	h->restoring = false;
	/* The store's descriptors no section accounted for; then systemd lets them all go. */
	for (unsigned i = 0; i < h->nstored; i++)
		if (h->stored[i].fd >= 0)
			close(h->stored[i].fd);
	kvpd_handover_unstore(d);
	if (!h->last_asked_ns) { /* systemd's store: the stop's parts are not known here */
		kvpd_log(d, KVPD_LOG_NOTICE, "restart: %u pools restored, %u started empty; restore "
			 "%.1f ms", h->pools_restored, h->pools_cold,
			 (kvpd_now_ns() - h->start_ns) / 1e6);
		return;
	}
	kvpd_log(d, KVPD_LOG_NOTICE, "restart: %u pools restored, %u started empty; drain %.1f ms, "
		 "state %.1f ms (%.1f MiB), teardown %.1f ms, exec %.1f ms, restore %.1f ms",
		 h->pools_restored, h->pools_cold, (h->last_drained_ns - h->last_asked_ns) / 1e6,
		 (h->last_written_ns - h->last_drained_ns) / 1e6, h->last_state_bytes / 1048576.0,
		 (h->exec_ns - h->last_written_ns) / 1e6, (h->start_ns - h->exec_ns) / 1e6,
		 (kvpd_now_ns() - h->start_ns) / 1e6);
}
