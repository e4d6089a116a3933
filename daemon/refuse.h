/* SPDX-License-Identifier: MIT */
/*
 * A refusal with its reason: shared by every room and by the backend plugins,
 * which link nothing of the daemon's.
 */
#ifndef KVPOOLD_REFUSE_H
#define KVPOOLD_REFUSE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/*
 * Returns @err with a refusal's reason in @why (why_len bytes, NUL-terminated):
 * for the daemon and its plugins alike, which link nothing of each other.
 */
static inline int __attribute__((format(printf, 4, 5)))
kvpd_refuse(char *why, size_t why_len, int err, const char *fmt, ...)
{
	va_list ap;

	if (why && why_len) {
		va_start(ap, fmt);
		vsnprintf(why, why_len, fmt, ap);
		va_end(ap);
	}
	return err;
}

#endif
