/* SPDX-License-Identifier: MIT */
/* tier_remote's URL: the seed nodes of a Redis Cluster, or one standalone server. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "refuse.h"

bool kvpd_remote_host_loopback(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (!strcmp(host, "localhost"))
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

int kvpd_remote_url_parse(const char *url, struct kvpd_remote_addr *out, bool *tls, char *why,
			  size_t why_len)
{
	static const char plain[] = "redis://", secure[] = "rediss://";
	const char *p = url;
	int n = 0;

	*tls = !strncmp(p, secure, sizeof(secure) - 1);
	if (!*tls && strncmp(p, plain, sizeof(plain) - 1))
		return kvpd_refuse(why, why_len, -EINVAL, "not redis://HOST:PORT[,HOST:PORT...] "
				   "(or rediss://, TLS)");
	p += *tls ? sizeof(secure) - 1 : sizeof(plain) - 1;
	for (;;) {
		const char *colon, *end = strchr(p, ',');
		char *port_end;
		unsigned long port;
		size_t host_len;

		if (!end)
			end = p + strlen(p);
		colon = memrchr(p, ':', (size_t)(end - p));
		if (!colon || colon == p)
			return kvpd_refuse(why, why_len, -EINVAL, "'%.*s': not HOST:PORT",
					   (int)(end - p > 64 ? 64 : end - p), p);
		host_len = (size_t)(colon - p);
		if (host_len >= KVPD_REMOTE_HOST_MAX)
			return kvpd_refuse(why, why_len, -EINVAL, "a host of over %u characters",
					   KVPD_REMOTE_HOST_MAX - 1);
		errno = 0;
		port = strtoul(colon + 1, &port_end, 10);
		if (port_end != end || colon + 1 == end || !port || port > 65535 || errno)
			return kvpd_refuse(why, why_len, -EINVAL, "'%.*s': a port is 1..65535",
					   (int)(end - colon - 1 > 16 ? 16 : end - colon - 1), colon + 1);
		if (n == KVPD_REMOTE_MAX_SEEDS)
			return kvpd_refuse(why, why_len, -EINVAL, "more than %d nodes listed",
					   KVPD_REMOTE_MAX_SEEDS);
		memcpy(out[n].host, p, host_len);
		out[n].host[host_len] = '\0';
		out[n++].port = (uint16_t)port;
		if (!*end)
			return n;
		p = end + 1;
	}
}
