/* SPDX-License-Identifier: MIT */
/*
 * The kvtrace language: one command per line, parsed into a struct trace_cmd
 * and run by a trace_target (the in-process core, or a daemon).
 */
#ifndef KVPOOL_TRACE_H
#define KVPOOL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvcore.h"

enum trace_op {
	TRACE_POOL,
	TRACE_GROUP,
	TRACE_SEQ,
	TRACE_APPEND,
	TRACE_COMPUTED,
	TRACE_LOOKUP,
	TRACE_ALLOC,
	TRACE_FREE,
	TRACE_TABLE,
	TRACE_FREEQ,
	TRACE_STATS,
	TRACE_RESET,
	TRACE_EVICT,
	TRACE_COPIES,
	TRACE_SNAPSHOTS,
	TRACE_EXPECT,
};

struct trace_cmd {
	enum trace_op op;
	const char *name;             /* the command's word, for "<command> ID invalid" */
	const char *id;               /* sequence ID, or NULL */
	struct kvc_pool_config pool;  /* TRACE_POOL */
	struct kvc_group_spec group;  /* TRACE_GROUP */
	const uint32_t *values;       /* tokens (SEQ, APPEND) or block ids (EVICT) */
	uint32_t nvalues;
	const char *salt;             /* SEQ: NULL when none */
	int64_t prefix;               /* SEQ: -1 when none */
	uint32_t count;               /* COMPUTED: N; ALLOC: NEW */
	uint32_t lookahead;           /* ALLOC */
	bool hit;                     /* ALLOC */
	const char *text;             /* EXPECT */
};

enum trace_section { TRACE_WANT_POOL, TRACE_WANT_GROUP, TRACE_IN_GROUPS, TRACE_BODY };

struct trace_parser {
	enum trace_section section;
	uint32_t ngroups;
	uint32_t *values;
	uint32_t values_cap;
};

void trace_parser_init(struct trace_parser *p);
void trace_parser_release(struct trace_parser *p);

/*
 * Parses one line (modified in place; @cmd points into it). Returns 1 for a
 * command, 0 for a blank or comment line, -EINVAL for a syntax error (reason in
 * @err), -ENOMEM.
 */
int trace_parse_line(struct trace_parser *p, char *line, struct trace_cmd *cmd,
		     char *err, size_t err_len);

/* A growing output line. */
struct trace_out {
	char *buf;
	size_t len, cap;
	bool failed; /* out of memory: the line is incomplete */
};
void trace_out_reset(struct trace_out *o);
void trace_out_printf(struct trace_out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void trace_out_ids(struct trace_out *o, const uint32_t *ids, uint32_t n);

/* Where a trace runs. The core target is in core.c. */
struct trace_target {
	/* Runs a command (never POOL/GROUP/EXPECT); prints at most one line into @out. */
	int (*exec)(struct trace_target *t, const struct trace_cmd *cmd, struct trace_out *out);
	/* Creates the pool once its groups are known. */
	int (*create_pool)(struct trace_target *t, const struct kvc_pool_config *cfg);
	void (*destroy)(struct trace_target *t);
};

int trace_core_target(struct trace_target **out);
/* Replays through kvpoold at @socket on a private pool (daemon.c). */
int trace_daemon_target(const char *socket, struct trace_target **out);

#endif
