/* SPDX-License-Identifier: MIT */
/* kvctl: operate a running kvpoold (stats, pools). */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/libkvpool.h"

static const char usage[] =
	"Usage: kvctl [--socket PATH] COMMAND [ARG]...\n"
	"Inspect and operate a running kvpoold.\n"
	"\n"
	"Commands:\n"
	"  stats [--json]                  pools (blocks total/free/used/cached, usage) and\n"
	"                                  connected clients (pid, uid, namespace, pool,\n"
	"                                  sequences, distinct blocks held, requests)\n"
	"  pool create NAME KEY=VALUE...   create a pool (admin); keys: blocks, block_size,\n"
	"                                  groups (e.g. \"full swa:128\"), caching=on|off,\n"
	"                                  free_order=split|append, publish=commit|alloc,\n"
	"                                  max_len, max_step_tokens, kv_heads, head_dim,\n"
	"                                  dtype=f32|f16|bf16, layers_per_group\n"
	"  pool destroy NAME               destroy a pool nobody uses (admin)\n"
	"\n"
	"Options:\n"
	"  -s, --socket PATH   the daemon's socket (default $KVPOOL_SOCKET, else\n"
	"                      " KVP_DEFAULT_SOCKET ")\n"
	"  -h, --help          show this help and exit\n"
	"\n"
	"Admin commands need root or the daemon's uid. Exit status: 0 on success,\n"
	"1 when the daemon refuses or cannot be reached, 2 for a usage error.\n";

struct snapshot {
	struct kvp_stats_header h;
	const struct kvp_pool_entry *pools;
	const struct kvp_client_entry *clients;
	void *buf;
};

static int fetch(struct kvp_client *c, struct snapshot *s)
{
	uint64_t arena;

	kvp_arena(c, &arena);
	for (size_t bytes = 64 << 10; bytes <= arena; bytes *= 2) {
		int ret;

		free(s->buf);
		s->buf = malloc(bytes);
		if (!s->buf)
			return -ENOMEM;
		ret = kvp_stats(c, s->buf, bytes);
		if (ret == -EOVERFLOW || ret == -E2BIG)
			continue;
		if (ret < 0)
			return ret;
		memcpy(&s->h, s->buf, sizeof(s->h));
		s->pools = (const void *)((char *)s->buf + sizeof(s->h));
		s->clients = (const void *)(s->pools + s->h.num_pools);
		return 0;
	}
	return -EOVERFLOW;
}

static double usage_of(const struct kvp_pool_stats *st)
{
	return st->blocks_total > 1 ? (double)st->blocks_used / (st->blocks_total - 1) : 0.0;
}

static void print_table(const struct snapshot *s)
{
	printf("%-20s %6s %9s %9s %9s %9s %7s %7s %5s\n", "POOL", "BLOCK", "TOTAL", "FREE", "USED",
	       "CACHED", "USAGE", "CLIENTS", "SEQS");
	for (uint32_t i = 0; i < s->h.num_pools; i++) {
		const struct kvp_pool_entry *p = &s->pools[i];

		printf("%-20.*s %6u %9u %9u %9u %9u %6.1f%% %7u %5u\n", KVP_NAME_MAX, p->name,
		       p->block_size, p->stats.blocks_total, p->stats.blocks_free, p->stats.blocks_used,
		       p->stats.blocks_cached, 100.0 * usage_of(&p->stats), p->clients, p->sequences);
	}
	printf("\n%-8s %8s %6s %-16s %-20s %5s %9s %10s\n", "CLIENT", "PID", "UID", "NAMESPACE",
	       "POOL", "SEQS", "BLOCKS", "OPS");
	for (uint32_t i = 0; i < s->h.num_clients; i++) {
		const struct kvp_client_entry *c = &s->clients[i];

		printf("%-8u %8d %6u %-16.*s %-20.*s %5u %9llu %10llu\n", c->client_id, c->pid, c->uid,
		       KVP_NAME_MAX, c->namespace_, KVP_NAME_MAX, c->pool, c->sequences,
		       (unsigned long long)c->blocks_held, (unsigned long long)c->ops);
	}
	printf("\nclients: %llu connected, %llu disconnected, %llu killed with sequences open\n",
	       (unsigned long long)s->h.clients_connected,
	       (unsigned long long)s->h.clients_disconnected,
	       (unsigned long long)s->h.clients_killed);
}

static json_object *json_name(const char *name)
{
	return json_object_new_string_len(name, (int)strnlen(name, KVP_NAME_MAX));
}

static void print_json(const struct snapshot *s)
{
	json_object *root = json_object_new_object(), *pools = json_object_new_array(),
		    *clients = json_object_new_array();

	for (uint32_t i = 0; i < s->h.num_pools; i++) {
		const struct kvp_pool_entry *p = &s->pools[i];
		json_object *o = json_object_new_object();

		json_object_object_add(o, "name", json_name(p->name));
		json_object_object_add(o, "block_size", json_object_new_int64(p->block_size));
		json_object_object_add(o, "blocks_total", json_object_new_int64(p->stats.blocks_total));
		json_object_object_add(o, "blocks_free", json_object_new_int64(p->stats.blocks_free));
		json_object_object_add(o, "blocks_used", json_object_new_int64(p->stats.blocks_used));
		json_object_object_add(o, "blocks_cached", json_object_new_int64(p->stats.blocks_cached));
		json_object_object_add(o, "usage", json_object_new_double(usage_of(&p->stats)));
		json_object_object_add(o, "clients", json_object_new_int64(p->clients));
		json_object_object_add(o, "sequences", json_object_new_int64(p->sequences));
		json_object_array_add(pools, o);
	}
	for (uint32_t i = 0; i < s->h.num_clients; i++) {
		const struct kvp_client_entry *c = &s->clients[i];
		json_object *o = json_object_new_object();

		json_object_object_add(o, "client_id", json_object_new_int64(c->client_id));
		json_object_object_add(o, "pid", json_object_new_int64(c->pid));
		json_object_object_add(o, "uid", json_object_new_int64(c->uid));
		json_object_object_add(o, "namespace", json_name(c->namespace_));
		json_object_object_add(o, "pool", json_name(c->pool));
		json_object_object_add(o, "sequences", json_object_new_int64(c->sequences));
		json_object_object_add(o, "blocks_held", json_object_new_int64((int64_t)c->blocks_held));
		json_object_object_add(o, "ops", json_object_new_int64((int64_t)c->ops));
		json_object_array_add(clients, o);
	}
	json_object_object_add(root, "pools", pools);
	json_object_object_add(root, "clients", clients);
	json_object_object_add(root, "clients_connected",
			       json_object_new_int64((int64_t)s->h.clients_connected));
	json_object_object_add(root, "clients_disconnected",
			       json_object_new_int64((int64_t)s->h.clients_disconnected));
	json_object_object_add(root, "clients_killed",
			       json_object_new_int64((int64_t)s->h.clients_killed));
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
}

static int connect_to(const char *socket, bool admin, struct kvp_client **c)
{
	struct kvp_connect_opts opts = { .socket_path = socket, .admin = admin,
					 .arena_bytes = 4u << 20 };
	int ret = kvp_connect(&opts, c);

	if (ret)
		fprintf(stderr, "kvctl: %s: %s%s\n", socket ? socket : "kvpoold", strerror(-ret),
			ret == -EPERM && admin ? " (admin commands need root or the daemon's uid)" : "");
	return ret;
}

static int cmd_stats(const char *socket, int argc, char **argv)
{
	struct snapshot s = { 0 };
	struct kvp_client *c;
	bool json = argc == 2 && !strcmp(argv[1], "--json");
	int ret;

	if (argc > 2 || (argc == 2 && !json)) {
		fputs("kvctl: usage: kvctl stats [--json]\n", stderr);
		return 2;
	}
	if (connect_to(socket, false, &c))
		return 1;
	ret = fetch(c, &s);
	kvp_close(c);
	if (ret) {
		fprintf(stderr, "kvctl: stats: %s\n", strerror(-ret));
		free(s.buf);
		return 1;
	}
	if (json)
		print_json(&s);
	else
		print_table(&s);
	free(s.buf);
	return 0;
}

static int cmd_pool(const char *socket, int argc, char **argv)
{
	struct kvp_pool_params params;
	struct kvp_client *c;
	int ret;

	if (argc < 3 || (strcmp(argv[1], "create") && strcmp(argv[1], "destroy")) ||
	    (!strcmp(argv[1], "destroy") && argc != 3)) {
		fputs("kvctl: usage: kvctl pool create NAME KEY=VALUE... | kvctl pool destroy NAME\n",
		      stderr);
		return 2;
	}
	if (strlen(argv[2]) >= KVP_NAME_MAX) {
		fprintf(stderr, "kvctl: pool name longer than %d bytes\n", KVP_NAME_MAX - 1);
		return 2;
	}
	if (!strcmp(argv[1], "create")) {
		kvp_pool_params_init(&params, argv[2]);
		for (int i = 3; i < argc; i++) {
			char *eq = strchr(argv[i], '=');

			if (eq)
				*eq = '\0';
			if (!eq || kvp_pool_params_set(&params, argv[i], eq + 1)) {
				fprintf(stderr, "kvctl: bad pool setting '%s%s%s'\n", argv[i], eq ? "=" : "",
					eq ? eq + 1 : "");
				return 2;
			}
		}
		if (!params.num_blocks || !params.block_size || !params.num_groups) {
			fputs("kvctl: pool create needs blocks=, block_size= and groups=\n", stderr);
			return 2;
		}
	}
	if (connect_to(socket, true, &c))
		return 1;
	ret = !strcmp(argv[1], "create") ? kvp_pool_create(c, &params) : kvp_pool_destroy(c, argv[2]);
	kvp_close(c);
	if (ret) {
		fprintf(stderr, "kvctl: pool %s %s: %s\n", argv[1], argv[2],
			ret == -EBUSY ? "in use" : strerror(-ret));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket = NULL;
	int c;

	/* '+': options after the command belong to the command. */
	while ((c = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
		if (c == 's') {
			socket = optarg;
		} else if (c == 'h') {
			fputs(usage, stdout);
			return 0;
		} else {
			fputs("Try 'kvctl --help' for more information.\n", stderr);
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc >= 1 && !strcmp(argv[0], "stats"))
		return cmd_stats(socket, argc, argv);
	if (argc >= 1 && !strcmp(argv[0], "pool"))
		return cmd_pool(socket, argc, argv);
	fprintf(stderr, argc ? "kvctl: unknown command '%s'\n" : "kvctl: no command%s\n",
		argc ? argv[0] : "");
	fputs("Try 'kvctl --help' for more information.\n", stderr);
	return 2;
}
