/* SPDX-License-Identifier: MIT */
/*
 * The daemon's log line and its clock: kept out of main.c so that what links
 * the daemon without its main (the fuzzers) logs and tells time as it does.
 *
 * Lines go to stderr. Started by systemd (JOURNAL_STREAM set), each line
 * starts with its syslog priority, "<6>", which the journal strips and files
 * the line under; the "kvpoold: " a terminal needs the journal already says.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvpoold.h"

static const char *const level_names[] = {
	[KVPD_LOG_ERR] = "error", [KVPD_LOG_WARNING] = "warning", [KVPD_LOG_NOTICE] = "notice",
	[KVPD_LOG_INFO] = "info", [KVPD_LOG_DEBUG] = "debug",
};

int kvpd_parse_log_level(const char *s, int *out)
{
	for (int l = KVPD_LOG_ERR; l <= KVPD_LOG_DEBUG; l++) {
		if (!strcmp(s, level_names[l])) {
			*out = l;
			return 0;
		}
	}
	return -EINVAL;
}

/*
 * systemd sets JOURNAL_STREAM ("DEV:INODE" of the stream) for a service whose
 * stderr goes to the journal. Its presence is the sign, as sd-daemon(3)'s
 * SD_* prefixes expect; a unit that sends stderr elsewhere does not set it.
 */
bool kvpd_log_to_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");

	return env && *env;
}

/* @log NULL: what a daemon not yet configured logs (the fuzzers' courier). */
void kvpd_logf(const struct kvpd_log *log, int prio, const char *fmt, ...)
{
	static const struct kvpd_log fallback = { .level = KVPD_LOG_DEFAULT };
	char line[1024];
	va_list ap;
	int n;

	if (!log)
		log = &fallback;
	if (prio > log->level)
		return;
	/* One write a line: lines of concurrent threads never interleave. */
	n = log->journal ? snprintf(line, sizeof(line), "<%d>", prio) :
			   snprintf(line, sizeof(line), "kvpoold: ");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	fputs(line, stderr);
}

uint64_t kvpd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
