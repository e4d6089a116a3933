/* SPDX-License-Identifier: MIT */
/* kvctl pool: create, destroy, sync and reset the daemon's pools; purge a cluster tier's keys. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvctl.h"

static const char pool_help[] =
	"Usage: kvctl pool create NAME KEY=VALUE... [--socket PATH]\n"
	"       kvctl pool destroy NAME [--drop-tier] [--socket PATH]\n"
	"       kvctl pool sync NAME [--socket PATH]\n"
	"       kvctl pool reset NAME [--socket PATH]\n"
	"       kvctl pool purge-remote NAME [--socket PATH]\n"
	"Create or destroy a pool, wait for its tier's copies, forget its prefix cache,\n"
	"or delete its keys from its cluster tier (admin: root or the daemon's uid).\n"
	"'kvctl pool create --help' lists the keys.\n"
	"\n"
	"Options:\n"
	SOCKET_HELP;

static const char pool_create_help[] =
	"Usage: kvctl pool create NAME KEY=VALUE... [--socket PATH]\n"
	"Create pool NAME (admin: root or the daemon's uid). The keys are those of the\n"
	"config file's [pool.NAME] sections:\n"
	"  blocks=N            blocks, the null block included (required)\n"
	"  block_size=N        tokens per block (required)\n"
	"  groups=SPEC         its KV cache groups, blank or comma separated (required):\n"
	"                      full, swa:W, rswa:W, chunked:C, cyclic:W\n"
	"  caching=on|off      prefix caching (default on)\n"
	"  free_order=split|append, publish=commit|alloc, max_len=N, max_step_tokens=N\n"
	"  kv_heads=N, head_dim=N, layers_per_group=N\n"
	"                      the KV it holds (all three, or none: allocation only)\n"
	"  dtype=f32|f16|bf16  the KV's element type (default f32)\n"
	"  backend=host|cuda, device=N, layout=block|layer\n"
	"  namespace=NAME      only NAME's clients attach, and they may map the pool\n"
	"  tier_host_bytes=N   a host-memory tier of N bytes under the pool's prefix\n"
	"                      cache: blocks the pool evicts stay hittable there (needs\n"
	"                      KV and caching; default 0, none)\n"
	"  tier_disk_bytes=N   a disk tier instead, of N bytes of KV (as many blocks as\n"
	"                      that holds): a file, NAME.kvtier, that outlives the daemon\n"
	"                      (preallocated; its blocks are hit again after a restart\n"
	"                      with the same geometry)\n"
	"  tier_disk_path=DIR  the disk tier's directory (default /var/lib/kvpool)\n"
	"  tier_policy=lru|second_sight\n"
	"                      what goes down to the tier (lru: all, the default;\n"
	"                      second_sight: a block seen leaving twice)\n"
	"  kv_events=on|ipc://PATH|tcp://HOST:PORT\n"
	"                      publish KV events in vLLM's wire format (ZMQ PUB; on:\n"
	"                      NAME.events beside the daemon's socket); tcp discloses\n"
	"                      every cached token to whoever reaches it (docs/events.md)\n"
	"  kv_events_topic=T, kv_events_replay=on|off|ENDPOINT, kv_events_buffer=N,\n"
	"  kv_events_format=map|array\n"
	"                      the topic (kv@HOST@NAME), the replay ROUTER (on:\n"
	"                      NAME.replay), batches kept for it (10000), the events'\n"
	"                      msgpack form (map, the default)\n"
	"Every KEY=VALUE goes to the daemon as it is (POOL_CREATE v3's key text), so\n"
	"keys a newer kvpoold takes pass through; kvctl itself checks the keys above.\n"
	"\n"
	"Prints one line:\n"
	"  pool NAME created: N blocks of BS tokens, groups G, KV SIZE\n"
	"G the groups as given; SIZE the memory of its K and V (every layer of every\n"
	"block) in B, or in KiB, MiB or GiB with one decimal, or \"none\" for a pool\n"
	"without KV. A refusal prints the daemon's reason, \"kvctl: pool create NAME:\n"
	"REASON\", and exits 1.\n"
	"\n"
	"Options:\n"
	SOCKET_HELP;

static const char pool_destroy_help[] =
	"Usage: kvctl pool destroy NAME [--drop-tier] [--socket PATH]\n"
	"Destroy pool NAME (admin: root or the daemon's uid): refused while a client is\n"
	"attached to it or a sequence is open. Prints \"pool NAME destroyed\". A disk\n"
	"tier's file is kept, so that a pool of the same name and geometry made later\n"
	"hits what it holds, unless --drop-tier.\n"
	"\n"
	"Options:\n"
	"  --drop-tier          remove the pool's disk tier file (NAME.kvtier) too\n"
	SOCKET_HELP;

/* What the options after a command set. */
static const char pool_sync_help[] =
	"Usage: kvctl pool sync NAME [--socket PATH]\n"
	"Wait until every copy into pool NAME's tier queued before it has finished\n"
	"(admin: root or the daemon's uid), so that what the pool evicted since is\n"
	"hittable in the tier and its counters are settled: tests and benchmarks sync\n"
	"before they count. Returns at once for a pool without a tier. Prints \"pool\n"
	"NAME synced\".\n"
	"\n"
	"Options:\n"
	SOCKET_HELP;

static const char pool_reset_help[] =
	"Usage: kvctl pool reset NAME [--socket PATH]\n"
	"Forget pool NAME's prefix cache (admin: root or the daemon's uid), as vLLM's\n"
	"reset_prefix_cache: every cached block forgets its hash, so nothing hits until\n"
	"new KV is committed. Refused while any of its blocks is in use (a sequence\n"
	"holds it): the reset needs every block free. The pool's tier keeps what it\n"
	"holds. Prints \"pool NAME reset\".\n"
	"\n"
	"Options:\n"
	SOCKET_HELP;

static const char pool_purge_remote_help[] =
	"Usage: kvctl pool purge-remote NAME [--socket PATH]\n"
	"Delete pool NAME's keys from its cluster tier (admin: root or the daemon's\n"
	"uid): every key of its prefix and geometry (PREFIX:GEOMETRY:*), found with\n"
	"SCAN on every master and deleted with UNLINK. Every pool of that prefix and\n"
	"geometry, on any machine, shares those keys and loses them too. Prints \"pool\n"
	"NAME: N keys purged from the cluster tier\". A master that cannot be reached\n"
	"keeps its keys: kvctl says so and exits 1, the others' keys deleted.\n"
	"\n"
	"Options:\n"
	SOCKET_HELP;

/* Why a destroy or a reset found pool @name busy, from the stats page. */
static void busy_pool(struct kvp_client *c, const char *name, bool reset, char *buf, size_t len)
{
	struct kvp_stats_view s = { 0 };

	snprintf(buf, len, reset ? "blocks in use: a reset needs every block free" : "in use");
	if (!kvp_stats_view_take(c, &s)) {
		KVP_STATS_FOR_EACH_POOL(&s, p) {
			if (strncmp(p->name, name, KVP_NAME_MAX))
				continue;
			if (reset)
				snprintf(buf, len, "%u blocks in use (sequences open %u): a reset "
					 "needs every block free", p->blocks_used, p->sequences);
			else
				snprintf(buf, len, "in use: clients attached %u, sequences open %u",
					 p->clients, p->sequences);
		}
	}
	kvp_stats_view_release(&s);
}

/*
 * The keys kvctl knows, checked into @params; every KEY=VALUE, known or not,
 * into @keys as "KEY = VALUE" lines for the daemon (POOL_CREATE v3). The
 * first unknown key's argument in @unknown (NULL: none), for a daemon that
 * takes no key text.
 */
static int pool_settings(const char *cmd, struct cmd_opts *o, struct kvp_pool_params_v2 *params,
			 char *keys, size_t keys_len, const char **unknown)
{
	size_t used = 0;

	kvp_pool_params_v2_init(params, o->args[1]);
	*keys = '\0';
	*unknown = NULL;
	for (int i = 2; i < o->nargs; i++) {
		char *eq = strchr(o->args[i], '=');
		const char *help;
		int ret, n;

		if (!eq || eq == o->args[i] || strchr(o->args[i], '\n'))
			return usage_error(cmd, "bad pool setting '%s': not KEY=VALUE", o->args[i]);
		*eq = '\0';
		ret = kvp_pool_params_v2_set(params, o->args[i], eq + 1);
		help = kvp_pool_param_help(o->args[i]);
		n = snprintf(keys + used, keys_len - used, "%s = %s\n", o->args[i], eq + 1);
		*eq = '=';
		if (n < 0 || (size_t)n >= keys_len - used)
			return usage_error(cmd, "the pool settings are longer than %zu bytes",
					   keys_len - 1);
		used += (size_t)n;
		if (ret && help)
			return usage_error(cmd, "%s: %.*s is %s", o->args[i], (int)(eq - o->args[i]),
					   o->args[i], help);
		if (ret && !*unknown)
			*unknown = o->args[i];
	}
	if (!params->v1.num_blocks || !params->v1.block_size || !params->v1.num_groups)
		return usage_error(cmd, "blocks=, block_size= and groups= are required");
	return 0;
}

/* POOL_CREATE v3 where the daemon takes key text; else v2, which cannot carry @unknown. */
static int pool_create(struct kvp_client *c, const struct kvp_pool_params_v2 *p, const char *keys,
		       const char *unknown, char *why, size_t why_len)
{
	if (kvp_features(c) & KVP_FEAT_POOL_KEYS)
		return kvp_pool_create_v3(c, p, keys, 0, why, why_len);
	if (unknown) {
		snprintf(why, why_len, "%s: unknown key (keys: %s)", unknown,
			 kvp_pool_param_help(NULL));
		return -EINVAL;
	}
	return kvp_pool_create_v2(c, p, 0, why, why_len);
}

/* The subcommand: the first word that is neither an option nor --socket's value. */
static const char *first_operand(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-s") || !strcmp(argv[i], "--socket"))
			i++;
		else if (!strcmp(argv[i], "--"))
			return i + 1 < argc ? argv[i + 1] : NULL;
		else if (argv[i][0] != '-')
			return argv[i];
	}
	return NULL;
}

/*
 * pool create NAME KEY=VALUE... | destroy NAME | sync NAME | reset NAME |
 * purge-remote NAME: one line of output, or the refusal's reason.
 */
int cmd_pool(int argc, char **argv, struct cmd_opts *o)
{
	const char *sub = first_operand(argc, argv);
	bool create = sub && !strcmp(sub, "create"), destroy = sub && !strcmp(sub, "destroy");
	bool sync = sub && !strcmp(sub, "sync"), reset = sub && !strcmp(sub, "reset");
	bool purge = sub && !strcmp(sub, "purge-remote");
	const char *cmd = create ? "pool create" : destroy ? "pool destroy" : sync ? "pool sync" :
			  reset ? "pool reset" : purge ? "pool purge-remote" : "pool";
	const char *help = create ? pool_create_help : destroy ? pool_destroy_help :
			   sync ? pool_sync_help : reset ? pool_reset_help :
			   purge ? pool_purge_remote_help : pool_help;
	uint64_t purged = 0;
	struct kvp_pool_params_v2 params;
	char why[KVP_REASON_MAX] = "", keys[KVP_POOL_KEYS_MAX + 1];
	const char *unknown = NULL;
	struct kvp_client *c;
	const char *name;
	int ret;

	ret = parse_cmd(cmd, help, destroy ? TAKES(OPT_DROP_TIER) : 0, argc, argv, o);
	if (ret)
		return ret;
	if (!create && !destroy && !sync && !reset && !purge)
		return o->nargs ? usage_error("pool", "unknown command '%s'", o->args[0]) :
				  usage_error("pool", "missing command: create, destroy, sync, "
					      "reset or purge-remote");
	if (o->nargs < 2)
		return usage_error(cmd, "missing the pool's NAME");
	name = o->args[1];
	if (!create && o->nargs > 2)
		return usage_error(cmd, "unexpected argument '%s'", o->args[2]);
	if (strlen(name) >= KVP_NAME_MAX)
		return usage_error(cmd, "pool name '%s': longer than %d bytes", name, KVP_NAME_MAX - 1);
	if (create && (ret = pool_settings(cmd, o, &params, keys, sizeof(keys), &unknown)))
		return ret;
	if (connect_to(o->socket, true, &c))
		return 1;
	ret = create ? pool_create(c, &params, keys, unknown, why, sizeof(why))
		     : destroy ? kvp_pool_destroy_flags(c, name, o->drop_tier ?
							   KVP_POOL_DESTROY_DROP_TIER : 0)
		     : sync ? kvp_pool_sync(c, name)
		     : purge ? kvp_pool_purge_remote(c, name, &purged) : kvp_pool_reset(c, name);
	if (ret == -EBUSY && (destroy || reset))
		busy_pool(c, name, reset, why, sizeof(why));
	kvp_close(c);
	if (!ret && create)
		print_pool_created(&params);
	else if (!ret && purge)
		printf("pool %s: %llu keys purged from the cluster tier\n", name,
		       (unsigned long long)purged);
	else if (ret == -EOPNOTSUPP && purge)
		fprintf(stderr, "kvctl: %s %s: the pool has no cluster tier (tier_remote)\n", cmd,
			name);
	else if (ret == -EHOSTUNREACH && purge)
		fprintf(stderr, "kvctl: %s %s: a master of the cluster could not be reached: its "
			"keys stay (the others' were deleted)\n", cmd, name);
	else if (!ret)
		printf("pool %s %s\n", name, destroy ? "destroyed" : sync ? "synced" : "reset");
	else if (*why)
		fprintf(stderr, "kvctl: %s %s: %s\n", cmd, name, why);
	else if (ret == -ENOENT && !create)
		fprintf(stderr, "kvctl: %s %s: no pool '%s' on %s\n", cmd, name, name,
			socket_path(o->socket));
	else
		fprintf(stderr, "kvctl: %s %s: refused by kvpoold at %s (%s)\n", cmd, name,
			socket_path(o->socket), strerror(-ret));
	return ret ? 1 : 0;
}

