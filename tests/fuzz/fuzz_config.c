/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the config file (daemon/config/config.c, read with inih) as
 * kvpoold reads it at start. The input is the file; it is handed over as
 * /proc/self/fd/N of a memfd, since kvpd_config_load takes a path (and inih
 * opens it). A config that loads must be one the daemon can start from: what
 * it holds is checked against the limits the rest of the daemon relies on,
 * and its pools are created, as main() does, in the in-process daemon of
 * fuzz_daemon.c (their sizes clamped, so that a config asking for a 16M-block
 * pool costs the fuzzer nothing), then destroyed. The config is released
 * after every input, loaded or not: nothing may leak. The same input is also
 * POOL_CREATE v3's key text (pool_keys.c, the [pool.NAME] table over a
 * client's bytes): applied over the defaults, it is refused with a reason or
 * gives parameters that pool_check.c judges, and the pool they make is made.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_daemon.h"
#include "../../lib/libkvpool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool name_ok(const char *name)
{
	size_t len = strnlen(name, KVP_NAME_MAX);

	return len > 0 && len < KVP_NAME_MAX;
}

static void check_config(const struct kvpd_config *cfg)
{
	if (!cfg->socket_path || !cfg->budget || !cfg->max_clients || cfg->npools > KVPD_MAX_POOLS ||
	    cfg->nnamespaces > KVPD_MAX_NAMESPACES || cfg->event_loop > KVPD_EVLOOP_EPOLL ||
	    (cfg->nuid_quotas && !cfg->uid_quotas))
		fz_fail("config: loaded with socket %p budget %u max_clients %u, %u pools, "
			"%u namespaces, event loop %d", (const void *)cfg->socket_path, cfg->budget,
			cfg->max_clients, cfg->npools, cfg->nnamespaces, (int)cfg->event_loop);
	(void)strlen(cfg->socket_path); /* a string, kept alive (ASan sees a freed one) */
	if (cfg->socket_group)
		(void)strlen(cfg->socket_group);
	for (unsigned i = 0; i < cfg->npools; i++) {
		const struct kvp_pool_params *p = &cfg->pools[i].v2.v1;

		if (!name_ok(p->name) || !p->num_blocks || !p->block_size || !p->num_groups ||
		    p->num_groups > KVP_MAX_GROUPS)
			fz_fail("config: pool %u '%.32s': %u blocks of %u, %u groups", i, p->name,
				p->num_blocks, p->block_size, p->num_groups);
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(p->name, cfg->pools[j].v2.v1.name))
				fz_fail("config: pool %s twice", p->name);
	}
	for (unsigned i = 0; i < cfg->nnamespaces; i++) {
		const struct kvpd_namespace *n = &cfg->namespaces[i];

		if (!name_ok(n->name) || n->nuids > KVPD_MAX_NS_UIDS)
			fz_fail("config: namespace %u '%.32s' with %u uids", i, n->name, n->nuids);
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(n->name, cfg->namespaces[j].name))
				fz_fail("config: namespace %s twice", n->name);
	}
	for (unsigned i = 0; i < cfg->nuid_quotas; i++) {
		if (cfg->uid_quotas[i].set >> KVPD_QUOTA_KEYS)
			fz_fail("config: [uid.%u] sets keys %#x", (unsigned)cfg->uid_quotas[i].uid,
				cfg->uid_quotas[i].set);
		for (unsigned j = 0; j < i; j++)
			if (cfg->uid_quotas[i].uid == cfg->uid_quotas[j].uid)
				fz_fail("config: [uid.%u] twice", (unsigned)cfg->uid_quotas[i].uid);
	}
}

/* main()'s next step: every pool of the config is created; a refusal is the config's error. */
static void start_pools(const struct kvpd_config *cfg)
{
	struct kvpd *d = fz_daemon();

	for (unsigned i = 0; i < cfg->npools; i++) {
		struct kvpd_pool_spec p = cfg->pools[i];
		char why[KVP_REASON_MAX];
		int ret;

		/* No CUDA plugin here: a cuda pool is refused for that, which says nothing of the config. */
		if (p.v2.backend == KVP_BACKEND_CUDA)
			continue;
		fz_clamp_pool_spec(&p);
		ret = kvpd_pool_create(d, &p, NULL, why, sizeof(why));
		if (ret && ret != -EINVAL)
			fz_fail("config: pool %s: %s", p.v2.v1.name, strerror(-ret));
		if (ret && !*why)
			fz_fail("config: pool %s refused without a reason", p.v2.v1.name);
	}
	fz_teardown(d);
}

/* The input as POOL_CREATE v3's keys: the daemon's copy of them, NUL after, cut in place. */
static void pool_keys(const uint8_t *data, size_t size)
{
	static char text[KVP_POOL_KEYS_MAX + 1];
	struct kvpd_pool_spec p = { 0 };
	char why[KVP_REASON_MAX] = "";
	struct kvpd *d;
	int ret;

	if (size > KVP_POOL_KEYS_MAX)
		return;
	memcpy(text, data, size);
	text[size] = '\0';
	kvp_pool_params_v2_init(&p.v2, "keys");
	ret = kvpd_pool_keys_apply(&p, text, size, why, sizeof(why));
	if (ret && (ret != -EINVAL || !*why))
		fz_fail("pool keys: %s, reason '%s'", strerror(-ret), why);
	if (ret || p.v2.backend == KVP_BACKEND_CUDA)
		return;
	d = fz_daemon();
	fz_clamp_pool_spec(&p);
	ret = kvpd_pool_create(d, &p, NULL, why, sizeof(why));
	if (ret && (ret != -EINVAL || !*why))
		fz_fail("pool keys: pool refused: %s, reason '%s'", strerror(-ret), why);
	fz_teardown(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int memfd = -1;
	static char path[64];
	struct kvpd_config cfg = { .socket_path = KVP_DEFAULT_SOCKET, .spin_us = 50, .budget = 64,
				   .max_clients = 128 };

	if (memfd < 0) {
		memfd = memfd_create("fuzz.ini", MFD_CLOEXEC);
		if (memfd < 0)
			fz_fail("memfd_create: %s", strerror(errno));
		snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	}
	fz_daemon();
	fz_begin(false);
	if (ftruncate(memfd, 0) || pwrite(memfd, data, size, 0) != (ssize_t)size)
		fz_fail("writing the config: %s", strerror(errno));
	kvpd_quota_defaults(&cfg.quota);
	if (kvpd_config_load(&cfg, path, &(struct kvpd_log){ .level = fz_verbose ? KVPD_LOG_DEBUG : 0 }) == 0) {
		check_config(&cfg);
		start_pools(&cfg);
	}
	kvpd_config_release(&cfg);
	pool_keys(data, size);
	return 0;
}
