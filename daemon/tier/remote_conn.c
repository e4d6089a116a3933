/* SPDX-License-Identifier: MIT */
/*
 * The cluster tier's connections: TCP, TLS over it for rediss:// (OpenSSL 3:
 * Debian's hiredis 0.14 has no TLS, so its reader parses what OpenSSL
 * decrypts), then AUTH when the pool has an auth file. All non-blocking,
 * under the caller's deadline: a node that does not answer costs a round its
 * deadline. The password is sent, never logged: a failure's cause is the
 * server's reply (WRONGPASS...), which holds none of it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "log.h"
#include "refuse.h"
#include "tier/remote.h"

static int ms_left(uint64_t deadline_ns)
{
	uint64_t now = kvpd_now_ns();

	return now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
}

/* Waits for @events on @fd until @deadline_ns: 0, or -ETIMEDOUT. */
static int wait_for(int fd, short events, uint64_t deadline_ns)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int ms = ms_left(deadline_ns);

	return ms && poll(&pfd, 1, ms) == 1 ? 0 : -ETIMEDOUT;
}

static int tcp_connect(struct remote_link *l, struct remote_node *nd, uint64_t deadline_ns)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai, *a;
	char port[8];
	int ret = -EHOSTUNREACH, one = 1;

	snprintf(port, sizeof(port), "%u", nd->addr.port);
	if (getaddrinfo(nd->addr.host, port, &hints, &ai)) {
		snprintf(l->why, sizeof(l->why), "its name does not resolve");
		return -EHOSTUNREACH;
	}
	for (a = ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		socklen_t len = sizeof(ret);

		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
			ret = -errno;
			close(fd);
			continue;
		}
		if (wait_for(fd, POLLOUT, deadline_ns) ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &ret, &len) || ret) {
			ret = ret > 0 ? -ret : -ETIMEDOUT;
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		nd->fd = fd;
		ret = 0;
		break;
	}
	freeaddrinfo(ai);
	if (ret)
		snprintf(l->why, sizeof(l->why), "%s", strerror(-ret));
	return ret;
}

/* OpenSSL's reason for the last failure, the certificate's verdict first. */
static void tls_why(struct remote_link *l, SSL *ssl)
{
	long verdict = SSL_get_verify_result(ssl);
	unsigned long e = ERR_peek_last_error();
	const char *reason = e ? ERR_reason_error_string(e) : NULL;

	if (verdict != X509_V_OK)
		snprintf(l->why, sizeof(l->why), "TLS: certificate verify failed (%s)",
			 X509_verify_cert_error_string(verdict));
	else
		snprintf(l->why, sizeof(l->why), "TLS: %s", reason ? reason : "handshake failed");
	ERR_clear_error();
}

static int tls_handshake(struct remote_link *l, struct remote_node *nd, uint64_t deadline_ns)
{
	struct in6_addr ip;
	int ret;

	nd->ssl = SSL_new(l->access->tls);
	if (!nd->ssl || !SSL_set_fd(nd->ssl, nd->fd)) {
		snprintf(l->why, sizeof(l->why), "TLS: no memory");
		return -ENOMEM;
	}
	/* The node's certificate must name the address or host the pool reaches it by. */
	if (inet_pton(AF_INET, nd->addr.host, &ip) == 1 || inet_pton(AF_INET6, nd->addr.host, &ip) == 1) {
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(nd->ssl), nd->addr.host);
	} else {
		SSL_set_tlsext_host_name(nd->ssl, nd->addr.host);
		SSL_set1_host(nd->ssl, nd->addr.host);
	}
	while ((ret = SSL_connect(nd->ssl)) != 1) {
		int err = SSL_get_error(nd->ssl, ret);

		if ((err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) ||
		    wait_for(nd->fd, err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline_ns)) {
			if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
				snprintf(l->why, sizeof(l->why), "TLS: no handshake in time");
				return -ETIMEDOUT;
			}
			tls_why(l, nd->ssl);
			return -EPROTO;
		}
	}
	return 0;
}

ssize_t remote_conn_send(struct remote_node *nd, const void *buf, size_t len)
{
	ssize_t w;
	int ret;

	if (!nd->ssl) {
		w = send(nd->fd, buf, len, MSG_NOSIGNAL);
		return w >= 0 ? w : errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
	}
	ret = SSL_write(nd->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (ret > 0)
		return ret;
	ret = SSL_get_error(nd->ssl, ret);
	ERR_clear_error();
	return ret == SSL_ERROR_WANT_WRITE || ret == SSL_ERROR_WANT_READ ? -EAGAIN : -EPIPE;
}

ssize_t remote_conn_recv(struct remote_node *nd, void *buf, size_t len)
{
	ssize_t r;
	int ret;

	if (!nd->ssl) {
		r = recv(nd->fd, buf, len, 0);
		if (r == 0)
			return -ECONNRESET;
		return r > 0 ? r : errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
	}
	ret = SSL_read(nd->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
	if (ret > 0)
		return ret;
	ret = SSL_get_error(nd->ssl, ret);
	ERR_clear_error();
	return ret == SSL_ERROR_WANT_READ || ret == SSL_ERROR_WANT_WRITE ? -EAGAIN : -ECONNRESET;
}

/* AUTH [USER] PASSWORD, its reply read under @deadline_ns: 0, or -EACCES with the server's words. */
static int authenticate(struct remote_link *l, struct remote_node *nd, const char *user,
			const char *pass, uint64_t deadline_ns)
{
	const char *argv[] = { "AUTH", user, pass };
	char *cmd = NULL, buf[512];
	int len = *user ? redisFormatCommandArgv(&cmd, 3, argv, NULL) :
		  redisFormatCommandArgv(&cmd, 2, (const char *[]){ "AUTH", pass }, NULL);
	size_t off = 0;
	redisReply *reply = NULL;
	int ret = 0;

	if (len < 0)
		return -ENOMEM;
	while (!ret && off < (size_t)len) {
		ssize_t w = remote_conn_send(nd, cmd + off, (size_t)len - off);

		if (w >= 0)
			off += (size_t)w;
		else
			ret = w == -EAGAIN ? wait_for(nd->fd, POLLOUT, deadline_ns) : (int)w;
	}
	explicit_bzero(cmd, (size_t)len);
	redisFreeCommand(cmd);
	while (!ret && !reply) {
		ssize_t r = remote_conn_recv(nd, buf, sizeof(buf));

		if (r > 0 && redisReaderFeed(nd->reader, buf, (size_t)r) != REDIS_OK)
			ret = -EPROTO;
		else if (r > 0 && redisReaderGetReply(nd->reader, (void **)&reply) != REDIS_OK)
			ret = -EPROTO;
		else if (r == -EAGAIN && !(nd->ssl && SSL_pending(nd->ssl)))
			ret = wait_for(nd->fd, POLLIN, deadline_ns);
		else if (r < 0 && r != -EAGAIN)
			ret = (int)r;
	}
	if (ret) {
		snprintf(l->why, sizeof(l->why), "AUTH: %s", ret == -ETIMEDOUT ? "no answer in time" :
			 strerror(-ret));
		return ret;
	}
	if (reply->type == REDIS_REPLY_STATUS && !strcmp(reply->str, "OK")) {
		remote_reply_free(reply);
		return 0;
	}
	snprintf(l->why, sizeof(l->why), "AUTH refused: %.100s",
		 reply->type == REDIS_REPLY_ERROR ? reply->str : "an answer that is not OK");
	remote_reply_free(reply);
	return -EACCES;
}

int remote_conn_open(struct remote_link *l, struct remote_node *nd, uint64_t deadline_ns)
{
	struct remote_access *a = l->access;
	char user[REMOTE_CRED_MAX], pass[REMOTE_CRED_MAX];
	int ret;

	l->why[0] = '\0';
	ret = tcp_connect(l, nd, deadline_ns);
	if (!ret && a && a->tls)
		ret = tls_handshake(l, nd, deadline_ns);
	if (ret || !a)
		goto out;
	pthread_mutex_lock(&a->lock);
	nd->generation = a->generation;
	memcpy(user, a->user, sizeof(user));
	memcpy(pass, a->pass, sizeof(pass));
	pthread_mutex_unlock(&a->lock);
	if (*pass)
		ret = authenticate(l, nd, user, pass, deadline_ns);
	explicit_bzero(pass, sizeof(pass));
out:
	if (ret)
		remote_conn_close(nd);
	return ret;
}

void remote_conn_close(struct remote_node *nd)
{
	if (nd->ssl)
		SSL_free(nd->ssl); /* no close_notify: a node dropped is late or gone */
	nd->ssl = NULL;
	if (nd->fd >= 0)
		close(nd->fd);
	nd->fd = -1;
}

int remote_tls_context(const struct kvpd_pool_spec *spec, SSL_CTX **out, char *why,
		       size_t why_len)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	const char *key = NULL, *path = NULL;
	unsigned long e;

	if (!ctx)
		return kvpd_refuse(why, why_len, -ENOMEM, "tier_remote: no TLS context");
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	/* A write retried after WANT_WRITE may come from the same bytes at a new place. */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (*spec->tier_remote_ca_file) {
		key = "tier_remote_ca_file";
		path = spec->tier_remote_ca_file;
		if (SSL_CTX_load_verify_locations(ctx, path, NULL) != 1)
			goto out_refuse;
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		key = "tier_remote";
		path = "the system's CAs";
		goto out_refuse;
	}
	if (*spec->tier_remote_cert_file) {
		key = "tier_remote_cert_file";
		path = spec->tier_remote_cert_file;
		if (SSL_CTX_use_certificate_chain_file(ctx, path) != 1)
			goto out_refuse;
		key = "tier_remote_cert_key_file";
		path = spec->tier_remote_cert_key_file;
		if (SSL_CTX_use_PrivateKey_file(ctx, path, SSL_FILETYPE_PEM) != 1 ||
		    SSL_CTX_check_private_key(ctx) != 1)
			goto out_refuse;
	}
	*out = ctx;
	return 0;
out_refuse:
	e = ERR_peek_last_error();
	ERR_clear_error();
	SSL_CTX_free(ctx);
	return kvpd_refuse(why, why_len, -EINVAL, "%s: %.60s: %s", key, path,
			   e && ERR_reason_error_string(e) ? ERR_reason_error_string(e) :
			   "not loaded");
}

void remote_tls_free(SSL_CTX *ctx)
{
	SSL_CTX_free(ctx);
}
