/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "trace.h"

void trace_out_reset(struct trace_out *o)
{
	o->len = 0;
	o->failed = false;
	if (o->buf)
		o->buf[0] = '\0';
}

static bool reserve(struct trace_out *o, size_t more)
{
	size_t cap = o->cap ? o->cap : 256;
	char *buf;

	if (o->len + more + 1 <= o->cap)
		return true;
	while (cap < o->len + more + 1)
		cap *= 2;
	buf = realloc(o->buf, cap);
	if (!buf) {
		o->failed = true;
		return false;
	}
	o->buf = buf;
	o->cap = cap;
	return true;
}

void trace_out_printf(struct trace_out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !reserve(o, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(o->buf + o->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	o->len += (size_t)n;
}

/* " [1,2,3]": ids print in decimal, 0 for a null position. */
void trace_out_ids(struct trace_out *o, const uint32_t *ids, uint32_t n)
{
	if (!reserve(o, 3 + (size_t)n * 11))
		return;
	o->len += (size_t)sprintf(o->buf + o->len, " [");
	for (uint32_t i = 0; i < n; i++)
		o->len += (size_t)sprintf(o->buf + o->len, i ? ",%u" : "%u", ids[i]);
	o->len += (size_t)sprintf(o->buf + o->len, "]");
}
