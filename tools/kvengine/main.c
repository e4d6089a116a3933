/* SPDX-License-Identifier: MIT */
/*
 * kvengine: a stand-in inference engine for the demo and for smoke tests. It
 * prefills one prompt (a shared system prompt plus its own question) through
 * kvpoold with the prefix cache, then decodes tokens one step at a time.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/libkvpool.h"
#include "model.h"

static const char usage[] =
	"Usage: kvengine [OPTION]...\n"
	"Run one sequence through kvpoold as an inference engine would: prefill a\n"
	"prompt (system prompt + question) with the prefix cache, then decode. When\n"
	"the pool holds KV (kv_heads, head_dim, layers_per_group), a small synthetic\n"
	"transformer (fixed random weights, the pool's groups as its layers) writes\n"
	"its KV and attends through the daemon, and the generated tokens are printed.\n"
	"\n"
	"  -s, --socket PATH     the daemon's socket (default $KVPOOL_SOCKET, else\n"
	"                        " KVP_DEFAULT_SOCKET ")\n"
	"  -p, --pool NAME       pool to attach to (default \"default\")\n"
	"  -n, --name NAME       name printed in the report (default \"engine\")\n"
	"      --namespace NS    cache namespace (default: the shared one)\n"
	"      --system N        system-prompt tokens shared by every engine (default 64)\n"
	"      --question N      tokens of this engine's own question (default 24)\n"
	"      --seed N          makes the question differ between engines (default pid)\n"
	"      --decode N        tokens to generate (default 32)\n"
	"      --hold-ms N       keep the sequence open N ms before closing (default 0)\n"
	"  -h, --help            show this help and exit\n"
	"  -V, --version         print \"kvengine VERSION\" and exit\n";

struct engine_opts {
	struct kvp_connect_opts conn;
	char why[KVP_REASON_MAX]; /* the daemon's reason for a refused connection */
	const char *name;
	unsigned system, question, seed, decode, hold_ms;
	const char *step;         /* what the engine was doing when it failed */
};

static int parse(int argc, char **argv, struct engine_opts *o)
{
	enum { OPT_NS = 256, OPT_SYSTEM, OPT_QUESTION, OPT_SEED, OPT_DECODE, OPT_HOLD };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' }, { "pool", required_argument, NULL, 'p' },
		{ "name", required_argument, NULL, 'n' },   { "namespace", required_argument, NULL, OPT_NS },
		{ "system", required_argument, NULL, OPT_SYSTEM },
		{ "question", required_argument, NULL, OPT_QUESTION },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "decode", required_argument, NULL, OPT_DECODE },
		{ "hold-ms", required_argument, NULL, OPT_HOLD }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "s:p:n:hV", opts, NULL)) != -1) {
		char *end = NULL;
		unsigned long v = optarg ? strtoul(optarg, &end, 10) : 0;
		bool numeric = optarg && *optarg && !*end && v <= 1000000;

		switch (c) {
		case 's': o->conn.socket_path = optarg; continue;
		case 'p': o->conn.pool = optarg; continue;
		case 'n': o->name = optarg; continue;
		case OPT_NS: o->conn.namespace_ = optarg; continue;
		case 'h': fputs(usage, stdout); exit(0);
		case 'V': puts("kvengine " KVPOOL_VERSION); exit(0);
		case OPT_SYSTEM: o->system = (unsigned)v; break;
		case OPT_QUESTION: o->question = (unsigned)v; break;
		case OPT_SEED: o->seed = (unsigned)v; break;
		case OPT_DECODE: o->decode = (unsigned)v; break;
		case OPT_HOLD: o->hold_ms = (unsigned)v; break;
		default: goto bad;
		}
		if (!numeric) {
			fprintf(stderr, "kvengine: bad number '%s'\n", optarg);
			goto bad;
		}
	}
	if (optind == argc && o->system + o->question > 0)
		return 0;
bad:
	fputs("Try 'kvengine --help' for more information.\n", stderr);
	return -EINVAL;
}

/* Prefill past the hit, then decode, with the model computing every token. */
static int run_model(struct kvp_client *c, struct engine_opts *o, uint64_t seq,
		     uint32_t *tokens, uint32_t hit)
{
	unsigned len = o->system + o->question;
	struct engine_model m;
	uint32_t next;
	int ret;

	o->step = "sizing its model to the pool";
	ret = engine_model_init(&m, kvp_pool_info(c));
	if (ret)
		return ret;
	o->step = "prefill (WRITE_KV, ATTEND, COMMIT)";
	ret = engine_model_forward(&m, c, seq, tokens, hit, len - hit, &next) ?:
	      kvp_commit(c, seq, len);
	if (!ret)
		o->step = "decode (APPEND, ALLOC, WRITE_KV, ATTEND, COMMIT)";
	printf("%s: generated", o->name);
	for (unsigned step = 0; step < o->decode && !ret; step++) {
		printf(" %u", next);
		tokens[len] = next;
		ret = kvp_append(c, seq, &next, 1) ?: kvp_alloc(c, seq, 1, 0, false, NULL, NULL, 0) ?:
		      engine_model_forward(&m, c, seq, tokens, len, 1, &next) ?:
		      kvp_commit(c, seq, len + 1);
		len++;
	}
	printf("\n");
	engine_model_free(&m);
	return ret;
}

static int run(struct kvp_client *c, struct engine_opts *o)
{
	unsigned prompt_len = o->system + o->question;
	uint32_t *tokens = calloc(prompt_len + o->decode + 1, sizeof(*tokens));
	bool model = kvp_pool_info(c)->kv_heads != 0;
	uint32_t hit = 0, hint;
	uint64_t seq;
	int ret;

	o->step = "its prompt";
	if (!tokens)
		return -ENOMEM;
	for (unsigned i = 0; i < prompt_len; i++)
		tokens[i] = i < o->system ? 1000 + i : 100000 + (o->seed * 2654435761u + i * 40503u) % 100000;
	o->step = "SEQ_OPEN";
	ret = kvp_seq_open(c, tokens, prompt_len, NULL, 0, -1, &seq);
	if (ret)
		goto out;
	/*
	 * Slots for the tokens past the hit only: the hit's are shared and computed.
	 * The LOOKUP is advisory; the ALLOC takes the hit atomically, and if
	 * another client's eviction made it shorter, a second ALLOC covers the rest.
	 */
	o->step = "LOOKUP";
	ret = kvp_lookup(c, seq, NULL, 0);
	if (ret < 0)
		goto out;
	hint = (uint32_t)ret;
	o->step = "ALLOC of its prompt";
	ret = kvp_alloc(c, seq, prompt_len - hint, 0, true, &hit, NULL, 0);
	if (!ret && hit < hint)
		ret = kvp_alloc(c, seq, prompt_len - hit, 0, false, NULL, NULL, 0);
	if (ret)
		goto out;
	printf("%s: prompt %u tokens (system %u), prefix-cache hit %u tokens\n", o->name, prompt_len,
	       o->system, hit);
	if (model) {
		ret = run_model(c, o, seq, tokens, hit);
		goto out_hold;
	}
	o->step = "COMMIT of its prompt";
	ret = kvp_commit(c, seq, prompt_len);
	fflush(stdout);
	if (!ret)
		o->step = "decode (APPEND, ALLOC, COMMIT)";
	for (unsigned step = 0; step < o->decode && !ret; step++) {
		uint32_t token = 7 + step;

		ret = kvp_append(c, seq, &token, 1) ?: kvp_alloc(c, seq, 1, 0, false, NULL, NULL, 0) ?:
		      kvp_commit(c, seq, prompt_len + step + 1);
	}
out_hold:
	if (!ret) {
		printf("%s: decoded %u tokens\n", o->name, o->decode);
		fflush(stdout);
		usleep(o->hold_ms * 1000u);
		o->step = "SEQ_CLOSE";
		ret = kvp_seq_close(c, seq);
	}
out:
	free(tokens);
	return ret;
}

/* A request refused mid-run: what it was, where, and the cause in words. */
static void run_error(const struct engine_opts *o, int err)
{
	const char *pool = o->conn.pool, *path = o->conn.socket_path ? o->conn.socket_path :
						   getenv("KVPOOL_SOCKET");
	const char *cause;

	switch (err) {
	case -ENOSPC:
		cause = "no free blocks left in the pool";
		break;
	case -EDQUOT:
		cause = "over a quota of its uid or namespace (kvctl clients shows them)";
		break;
	case -ECONNRESET:
		cause = "kvpoold hung up";
		break;
	case -ETIMEDOUT:
		cause = "no answer from kvpoold within 30 s";
		break;
	case -EOPNOTSUPP:
		cause = "the pool's geometry is not one the model runs";
		break;
	default:
		cause = strerror(-err);
		break;
	}
	fprintf(stderr, "kvengine: %s: %s in pool '%s' on %s: %s\n", o->name, o->step, pool,
		path ? path : KVP_DEFAULT_SOCKET, cause);
}

int main(int argc, char **argv)
{
	struct engine_opts o = {
		.conn = { .pool = "default" }, .name = "engine", .system = 64, .question = 24,
		.seed = (unsigned)getpid(), .decode = 32,
	};
	struct kvp_client *c;
	char msg[512];
	int ret;

	if (parse(argc, argv, &o))
		return 2;
	o.conn.why = o.why;
	o.conn.why_len = sizeof(o.why);
	ret = kvp_connect(&o.conn, &c);
	if (ret) {
		fprintf(stderr, "kvengine: %s\n", kvp_connect_error(&o.conn, ret, msg, sizeof(msg)));
		return 1;
	}
	ret = run(c, &o);
	kvp_close(c);
	if (ret) {
		run_error(&o, ret);
		return 1;
	}
	return 0;
}
