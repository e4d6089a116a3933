/* SPDX-License-Identifier: MIT */
/*
 * The daemon's log line and its clock (log.c): shared by every room, so it
 * depends on nothing of theirs. kvpd_log() takes anything with a `log` member
 * (the daemon's context, struct kvpd).
 */
#ifndef KVPOOLD_LOG_H
#define KVPOOLD_LOG_H

#include <stdbool.h>
#include <stdint.h>

/* Syslog priorities: what the journal files a line under. */
enum { KVPD_LOG_ERR = 3, KVPD_LOG_WARNING, KVPD_LOG_NOTICE, KVPD_LOG_INFO, KVPD_LOG_DEBUG };
#define KVPD_LOG_DEFAULT KVPD_LOG_INFO

struct kvpd_log {
	int level;    /* lines of a priority above it are dropped */
	bool journal; /* stderr is systemd's journal stream: "<PRIO>" prefixes */
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

#endif
