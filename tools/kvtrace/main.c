/* SPDX-License-Identifier: MIT */
/* kvtrace: replays a text trace of allocator commands and prints what they return. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

static const char usage[] =
	"Usage: kvtrace [OPTION]... FILE\n"
	"Replay a kvpool allocator trace (FILE, or - for standard input) and print\n"
	"one line for each command that prints.\n"
	"\n"
	"  -s, --socket PATH   replay through the kvpoold listening on PATH, as one admin\n"
	"                      client on a private pool made from the pool/group lines\n"
	"                      (destroyed at the end); the output is the same as in process\n"
	"  -h, --help          show this help and exit\n"
	"  -V, --version       print \"kvtrace VERSION\" and exit\n"
	"\n"
	"Trace language (one command per line; fields split on blanks; a line whose\n"
	"first non-blank character is # is a comment):\n"
	"  pool blocks=N block_size=BS [caching=on|off] [free_order=split|append]\n"
	"       [publish=alloc|commit] [max_len=L] [max_step_tokens=S]\n"
	"       [snapshots=on|off] [snapshot_every=E]\n"
	"  group full | group swa W | group rswa W | group chunked C | group cyclic W\n"
	"  seq ID TOKENS [salt=S] [prefix=P]   TOKENS: t or t*n (n copies of t)\n"
	"  append ID TOKENS                    add generated tokens\n"
	"  computed ID N                       set the computed-token count\n"
	"  lookup ID                           -> hit ID H [g0 ids] [g1 ids] ...\n"
	"  alloc ID NEW [hit] [lookahead=K]    -> alloc ID ok [new ids]... | alloc ID nospace\n"
	"  free ID                             -> free ID\n"
	"  table ID                            -> table ID [g0 ids] [g1 ids] ...\n"
	"  freeq                               -> freeq [ids, head first]\n"
	"  stats                               -> stats free=F used=U cached=C\n"
	"  reset                               -> reset ok | reset busy\n"
	"  evict BLOCK...                      -> evict ok | evict invalid\n"
	"  copies                              -> copies made [ring>snapshot,...]\n"
	"                                         hit [snapshot>ring,...]: the KV copies of\n"
	"                                         the last alloc or computed (done at once)\n"
	"  snapshots                           -> snapshots held=H made=M hit=X evicted=E\n"
	"                                         skipped=S (cyclic groups' window snapshots,\n"
	"                                         in blocks; in process only)\n"
	"  expect TEXT                         the last printed line must equal TEXT\n"
	"The first command is pool, then one or more group lines (at most 16), then the\n"
	"rest. Numbers are decimal. A count handed to the allocator (NEW, K, N, BLOCK,\n"
	"P) may have any number of digits: one too large is refused like any value\n"
	"out of the allocator's range.\n"
	"Defaults: caching=on free_order=split publish=commit max_len=2147483647\n"
	"max_step_tokens=1 snapshots=on snapshot_every=4096 (0: the prompt's end only).\n"
	"A refused command prints '<command> ID invalid'.\n"
	"\n"
	"Exit status: 0 when the trace ran to its end, 1 when an expect line did not\n"
	"match (or the replay failed), 2 for a usage or syntax error. Output printed\n"
	"before an error is kept.\n";

struct replay {
	const char *path;
	struct trace_parser parser;
	struct trace_target *target;
	bool daemon; /* target: kvpoold at --socket */
	struct kvc_pool_config pool;
	bool pool_created;
	struct trace_out out;
	char *last; /* the last printed line, for expect */
	size_t last_cap;
	unsigned long line;
};

__attribute__((format(printf, 3, 4)))
static int fail(struct replay *r, int status, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "kvtrace: line %lu: ", r->line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return status;
}

static int remember(struct replay *r)
{
	if (r->out.len + 1 > r->last_cap) {
		char *p = realloc(r->last, r->out.len + 1);

		if (!p)
			return -ENOMEM;
		r->last = p;
		r->last_cap = r->out.len + 1;
	}
	memcpy(r->last, r->out.buf, r->out.len + 1);
	return 0;
}

static int create_pool(struct replay *r)
{
	int ret = r->target->create_pool(r->target, &r->pool);

	/* kvpoold's target said why already, in the daemon's words. */
	if (ret && r->daemon)
		return 1;
	if (ret)
		return fail(r, 1, "cannot create the pool: %s", strerror(-ret));
	r->pool_created = true;
	return 0;
}

static int run_command(struct replay *r, const struct trace_cmd *cmd)
{
	int ret;

	switch (cmd->op) {
	case TRACE_POOL:
		r->pool = cmd->pool;
		return 0;
	case TRACE_GROUP:
		r->pool.groups[r->pool.num_groups++] = cmd->group;
		return 0;
	case TRACE_EXPECT:
		if (strcmp(cmd->text, r->last ? r->last : ""))
			return fail(r, 1, "expected '%s', got '%s'", cmd->text, r->last ? r->last : "");
		return 0;
	default:
		break;
	}
	if (!r->pool_created && (ret = create_pool(r)))
		return ret;
	trace_out_reset(&r->out);
	ret = r->target->exec(r->target, cmd, &r->out);
	if (!ret && r->out.failed)
		ret = -ENOMEM;
	if (ret)
		return fail(r, 1, "%s: %s", cmd->name, strerror(-ret));
	if (r->out.len) {
		fwrite(r->out.buf, 1, r->out.len, stdout);
		fputc('\n', stdout);
		if (remember(r))
			return fail(r, 1, "%s", strerror(ENOMEM));
	}
	return 0;
}

static int replay_file(struct replay *r, FILE *in)
{
	char *buf = NULL, err[256];
	size_t cap = 0;
	int status = 0;

	while (!status && getline(&buf, &cap, in) >= 0) {
		struct trace_cmd cmd;
		int ret;

		r->line++;
		ret = trace_parse_line(&r->parser, buf, &cmd, err, sizeof(err));
		if (ret < 0)
			status = fail(r, 2, "%s", err);
		else if (ret > 0)
			status = run_command(r, &cmd);
	}
	if (!status && ferror(in))
		status = fail(r, 2, "read error: %s", strerror(errno));
	if (!status && r->parser.section == TRACE_WANT_POOL)
		status = fail(r, 2, "no pool command");
	else if (!status && r->parser.section == TRACE_WANT_GROUP)
		status = fail(r, 2, "pool needs a group");
	else if (!status && !r->pool_created)
		status = create_pool(r);
	free(buf);
	return status;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket = NULL;
	struct replay r = { 0 };
	FILE *in;
	int c, status, ret;

	while ((c = getopt_long(argc, argv, "s:hV", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage, stdout);
			return 0;
		}
		if (c == 'V') {
			puts("kvtrace " KVPOOL_VERSION);
			return 0;
		}
		if (c == 's') {
			socket = optarg;
			continue;
		}
		fputs("Try 'kvtrace --help' for more information.\n", stderr);
		return 2;
	}
	if (optind != argc - 1) {
		fputs("kvtrace: expected one FILE (or -)\nTry 'kvtrace --help' for more information.\n",
		      stderr);
		return 2;
	}
	r.path = argv[optind];
	in = strcmp(r.path, "-") ? fopen(r.path, "r") : stdin;
	if (!in) {
		fprintf(stderr, "kvtrace: %s: %s\n", r.path, strerror(errno));
		return 2;
	}
	r.daemon = socket != NULL;
	ret = socket ? trace_daemon_target(socket, &r.target) : trace_core_target(&r.target);
	if (ret) {
		fprintf(stderr, "kvtrace: %s\n", strerror(-ret));
		return 1;
	}
	trace_parser_init(&r.parser);
	status = replay_file(&r, in);
	if (fflush(stdout) && !status) {
		fprintf(stderr, "kvtrace: write error: %s\n", strerror(errno));
		status = 1;
	}
	r.target->destroy(r.target);
	trace_parser_release(&r.parser);
	free(r.out.buf);
	free(r.last);
	if (in != stdin)
		fclose(in);
	return status;
}
