/* SPDX-License-Identifier: MIT */
/*
 * kvctl exporter: kvpoold's stats for Prometheus (/metrics) and a health probe
 * (/healthz), served over HTTP by libmicrohttpd from one monitor connection.
 */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvctl.h"

#define DEFAULT_LISTEN "127.0.0.1:9464"
/*
 * The bounds on HTTP clients (kvctl(8)). Each connection has a thread of its
 * own, so an idle or slow one delays nobody else; past the limit new
 * connections are closed at once.
 */
#define HTTP_CONNECTIONS 64
/*
 * MHD counts a connection until its polling thread cleans it up, and that
 * thread accepts a new one first: a client that closes and connects again (a
 * scrape after a scrape) would be refused at the limit. The limit is ours, of
 * connections whose clients have not hung up; MHD's, above it, bounds those
 * hung up and not yet cleaned up.
 */
#define HTTP_CLOSING_SLACK 16
#define HTTP_SLOTS (HTTP_CONNECTIONS + HTTP_CLOSING_SLACK)
#define HTTP_IDLE_S 10           /* a connection silent this long is closed */
#define HTTP_REQUEST_BYTES 16384 /* MHD's memory per connection: request and reply headers */
#define HTTP_THREAD_STACK (256 * 1024)
/* How long a scrape or a probe waits for the daemon: a connection, a NOP. */
#define DAEMON_WAIT_MS 1000

#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"

static const char exporter_help[] =
	"Usage: kvctl exporter [--listen ADDR:PORT] [--socket PATH]\n"
	"Serve kvpoold's stats over HTTP until SIGTERM or SIGINT:\n"
	"  GET /metrics   what kvctl stats --prometheus prints, read from the stats\n"
	"                 page at each scrape (no request to the daemon), and\n"
	"                 kvpool_up 1 and kvpool_exporter_scrape_seconds (the time\n"
	"                 the scrape took); while the daemon is away, kvpool_up 0\n"
	"                 alone (status 200, so Prometheus records it)\n"
	"  GET /healthz   200 \"ok\" when the daemon answers a NOP within 1 s; 503\n"
	"                 and the reason otherwise\n"
	"Anything else is 404, another method 405. The exporter is a monitor: one\n"
	"connection to the daemon, made again at the next request once the daemon is\n"
	"back (with socket activation, that request starts a stopped daemon). It\n"
	"starts without a daemon, and says so on stderr.\n"
	"\n"
	"Run as root or the daemon's uid it sees every tenant, as kvctl stats does;\n"
	"anyone who reaches the port then reads every uid's and namespace's series:\n"
	"hence loopback by default.\n"
	"\n"
	"HTTP clients are bounded: 64 connections at once (past that new ones are\n"
	"closed unanswered), each closed after 10 s without a byte, 16 KiB of memory\n"
	"each for the request and the answer's headers (a longer request line is\n"
	"414, longer headers 431), no request body (413). Each connection has a\n"
	"thread of its own: idle or slow clients below the limit never delay a scrape.\n"
	"\n"
	"Options:\n"
	"      --listen ADDR:PORT\n"
	"                      where to listen (default " DEFAULT_LISTEN "); ADDR an\n"
	"                      IPv4 address, [IPv6] or a host name; PORT 0 picks one\n"
	SOCKET_HELP
	"Exit status: 0 after a signal, 1 when it cannot listen, 2 for a usage error.\n";

struct exporter {
	const char *socket;         /* --socket, or NULL: socket_path()'s */
	pthread_mutex_t lock;       /* the connection and view: one request at a time */
	struct kvp_client *c;       /* NULL while the daemon is away */
	struct kvp_stats_view view; /* c's page, copied out; its buffer sized for c */
	char away[512];             /* why the daemon is away, as said last ("" while up) */
	uint64_t retry_ns;          /* no connection before: the last one timed out */
	pthread_mutex_t http_lock;  /* http_fds */
	int http_fds[HTTP_SLOTS];   /* the HTTP connections' sockets, -1 where none */
	bool serving;               /* libmicrohttpd started: its log lines are not said */
};

/* A change of the daemon's state, once, on stderr (the journal under systemd). */
static void daemon_state(struct exporter *x, const char *why)
{
	if (!strcmp(x->away, why))
		return;
	if (*why)
		fprintf(stderr, "kvctl exporter: %s; kvpool_up 0\n", why);
	else
		fprintf(stderr, "kvctl exporter: kvpoold at %s is back; kvpool_up 1\n",
			socket_path(x->socket));
	snprintf(x->away, sizeof(x->away), "%s", why);
}

static void daemon_drop(struct exporter *x)
{
	kvp_stats_view_release(&x->view);
	kvp_close(x->c);
	x->c = NULL;
}

/* Under x->lock. */
static int daemon_connect(struct exporter *x, char *why, size_t len)
{
	int ret;

	if (x->c)
		return 0;
	/* A stopped daemon: one request waits for it, not every one after. */
	if (kvctl_now_ns() < x->retry_ns) {
		snprintf(why, len, "%s", x->away);
		return -ETIMEDOUT;
	}
	ret = monitor_connect(x->socket, false, DAEMON_WAIT_MS, &x->c, why, len);
	if (ret == -ETIMEDOUT)
		x->retry_ns = kvctl_now_ns() + DAEMON_WAIT_MS * 1000000ull;
	return ret;
}

/*
 * @op on the daemon's connection, connected first if need be. A connection the
 * daemon hung up on is made again once, before @deadline: it may have
 * restarted since.
 */
static int daemon_do(struct exporter *x, int (*op)(struct exporter *x, char *why, size_t len),
		     uint64_t deadline, char *why, size_t len)
{
	int ret = -ECONNRESET;

	for (int tries = 0; tries < 2 && ret == -ECONNRESET; tries++) {
		if (tries && kvctl_now_ns() >= deadline)
			break;
		ret = daemon_connect(x, why, len);
		if (ret)
			break;
		ret = op(x, why, len);
		if (ret)
			daemon_drop(x);
	}
	daemon_state(x, ret ? why : "");
	return ret;
}

static int take_stats(struct exporter *x, char *why, size_t len)
{
	int ret = kvp_stats_view_take(x->c, &x->view);

	if (ret)
		snapshot_error(ret, x->socket, why, len);
	return ret;
}

static int send_nop(struct exporter *x, char *why, size_t len)
{
	int ret = kvp_nop(x->c);

	if (ret)
		nop_error(ret, x->socket, DAEMON_WAIT_MS, why, len);
	return ret;
}

/*
 * The lock by @deadline. Requests ahead hold it long only while the daemon
 * does not answer: each waits at most DAEMON_WAIT_MS for it.
 */
static int lock_exporter(struct exporter *x, uint64_t deadline, char *why, size_t len)
{
	uint64_t now = kvctl_now_ns(), wait = deadline > now ? deadline - now : 0;
	struct timespec ts;

	/*
	 * timedlock's clock is the wall clock: a step of it stretches or cuts one
	 * wait. (pthread_mutex_clocklock would not, but the sanitizers do not see
	 * it take the lock.)
	 */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(wait / 1000000000ull);
	ts.tv_nsec += (long)(wait % 1000000000ull);
	if (ts.tv_nsec >= 1000000000l) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000l;
	}
	if (pthread_mutex_timedlock(&x->lock, &ts)) {
		snprintf(why, len, "busy: the requests before this one kept waiting on kvpoold "
			 "at %s", socket_path(x->socket));
		return -EBUSY;
	}
	return 0;
}

/* The body, or -ENOMEM. */
static int metrics(struct exporter *x, char **body, size_t *len)
{
	uint64_t t0 = kvctl_now_ns();
	char why[512];
	FILE *out;
	int ret;

	*body = NULL;
	*len = 0;
	out = open_memstream(body, len);
	if (!out)
		return -ENOMEM;
	/* A scrape waits longer than a probe: Prometheus gives it 10 s by default. */
	ret = lock_exporter(x, t0 + 2 * DAEMON_WAIT_MS * 1000000ull, why, sizeof(why));
	if (!ret) {
		ret = daemon_do(x, take_stats, t0 + DAEMON_WAIT_MS * 1000000ull, why, sizeof(why));
		if (!ret)
			print_prometheus(out, &x->view);
		pthread_mutex_unlock(&x->lock);
	}
	fprintf(out, "# HELP kvpool_up Whether kvpoold answered this scrape (0: it is away, and "
		"no other series).\n# TYPE kvpool_up gauge\nkvpool_up %d\n", !ret);
	if (!ret)
		fprintf(out, "# HELP kvpool_exporter_scrape_seconds The time this scrape took: "
			"the stats page copied and rendered.\n"
			"# TYPE kvpool_exporter_scrape_seconds gauge\n"
			"kvpool_exporter_scrape_seconds %.9f\n", (double)(kvctl_now_ns() - t0) / 1e9);
	/* glibc: a last growth that failed leaves *body NULL, fclose says nothing. */
	if (fclose(out) || !*body) {
		free(*body);
		return -ENOMEM;
	}
	return 0;
}

/* 200 "ok", or 503 and why. */
static unsigned healthz(struct exporter *x, char **body, size_t *len)
{
	uint64_t deadline = kvctl_now_ns() + DAEMON_WAIT_MS * 1000000ull;
	char why[512];
	int ret;

	ret = lock_exporter(x, deadline, why, sizeof(why));
	if (!ret) {
		ret = daemon_do(x, send_nop, deadline, why, sizeof(why));
		pthread_mutex_unlock(&x->lock);
	}
	*body = NULL;
	if (ret)
		*len = (size_t)asprintf(body, "%s\n", why);
	else
		*len = (size_t)asprintf(body, "ok\n");
	if (!*body || *len == (size_t)-1)
		return 500;
	return ret ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type,
			       char *body, size_t len, bool allow)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, body, body ? MHD_RESPMEM_MUST_FREE :
							      MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result text(struct MHD_Connection *conn, unsigned status, const char *fmt,
			    const char *arg, bool allow)
{
	char *body = NULL;
	int len = asprintf(&body, fmt, arg);

	if (len < 0)
		return MHD_NO;
	return respond(conn, status, "text/plain; charset=utf-8", body, (size_t)len, allow);
}

static bool has_body(struct MHD_Connection *conn)
{
	const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							 MHD_HTTP_HEADER_CONTENT_LENGTH);

	return (length && strcmp(length, "0")) ||
	       MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
					   MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **request)
{
	bool is_metrics = !strcmp(url, "/metrics"), is_health = !strcmp(url, "/healthz");
	struct exporter *x = cls;
	unsigned status;
	char *body;
	size_t len;

	(void)version;
	(void)upload;
	if (!is_metrics && !is_health)
		return text(conn, MHD_HTTP_NOT_FOUND, "%s: not found (/metrics or /healthz)\n", url,
			    false);
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "%s: GET or HEAD only\n", method,
			    true);
	/*
	 * Answered at the second call, once the request is read whole: a response
	 * queued at the first makes MHD close the connection, and Prometheus would
	 * connect again for every scrape.
	 */
	if (!*request) {
		/* A body would be read for as long as it came: refused, and MHD closes. */
		if (has_body(conn))
			return text(conn, MHD_HTTP_CONTENT_TOO_LARGE, "%s: a GET carries no body\n",
				    url, false);
		*request = x;
		return MHD_YES;
	}
	if (*upload_size)
		return MHD_NO;
	if (is_health) {
		status = healthz(x, &body, &len);
		if (status == 500)
			return MHD_NO;
		return respond(conn, status, "text/plain; charset=utf-8", body, len, false);
	}
	if (metrics(x, &body, &len))
		return MHD_NO; /* out of memory: the connection is closed */
	return respond(conn, MHD_HTTP_OK, METRICS_TYPE, body, len, false);
}

/* HTTP connections whose clients have not hung up. Under x->http_lock. */
static unsigned http_open(struct exporter *x)
{
	struct pollfd pfd[HTTP_SLOTS];
	unsigned n = 0, open = 0;

	for (unsigned i = 0; i < HTTP_SLOTS; i++)
		if (x->http_fds[i] >= 0)
			pfd[n++] = (struct pollfd){ .fd = x->http_fds[i], .events = POLLRDHUP };
	if (poll(pfd, n, 0) < 0)
		return n;
	for (unsigned i = 0; i < n; i++)
		open += !(pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
	return open;
}

/* Past the limit a new connection is closed, unanswered. */
static enum MHD_Result admit(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct exporter *x = cls;
	bool room;

	(void)addr;
	(void)len;
	pthread_mutex_lock(&x->http_lock);
	room = http_open(x) < HTTP_CONNECTIONS;
	pthread_mutex_unlock(&x->http_lock);
	return room ? MHD_YES : MHD_NO;
}

/*
 * Each connection's socket, from MHD's start of it to its clean-up (which
 * closes it: till then the descriptor is the connection's). *slot holds where.
 */
static void track_connection(void *cls, struct MHD_Connection *conn, void **slot,
			     enum MHD_ConnectionNotificationCode what)
{
	const union MHD_ConnectionInfo *info;
	struct exporter *x = cls;
	int *fd;

	pthread_mutex_lock(&x->http_lock);
	if (what == MHD_CONNECTION_NOTIFY_STARTED) {
		info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		for (fd = x->http_fds; info && fd < x->http_fds + HTTP_SLOTS; fd++)
			if (*fd < 0) {
				*fd = info->connect_fd;
				*slot = fd;
				break;
			}
	} else if (what == MHD_CONNECTION_NOTIFY_CLOSED && *slot) {
		*(int *)*slot = -1;
		*slot = NULL;
	}
	pthread_mutex_unlock(&x->http_lock);
}

/* "ADDR:PORT": ADDR an IPv4 address, [IPv6] or a name; split at the last colon. */
static int split_listen(const char *spec, char *host, size_t hlen, char *port, size_t plen)
{
	const char *colon = strrchr(spec, ':');
	const char *h = spec;
	unsigned long p;
	size_t n;
	char *end;

	if (!colon || colon == spec || !colon[1])
		return -EINVAL;
	n = (size_t)(colon - spec);
	if (*h == '[') {
		if (n < 3 || spec[n - 1] != ']')
			return -EINVAL;
		h++;
		n -= 2;
	}
	/* An IPv6 address needs its brackets: "::1:9464" would be a guess. */
	if (h == spec && memchr(spec, ':', n))
		return -EINVAL;
	if (strspn(colon + 1, "0123456789") != strlen(colon + 1))
		return -EINVAL;
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || p > 65535 || n >= hlen || strlen(colon + 1) >= plen)
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = '\0';
	snprintf(port, plen, "%lu", p);
	return 0;
}

/* A socket listening on @spec, or -1 having said why. */
static int listen_on(const char *spec)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai, *a;
	char host[256], port[8];
	int fd = -1, err = 0, one = 1, ret;

	if (split_listen(spec, host, sizeof(host), port, sizeof(port)))
		return -2;
	ret = getaddrinfo(host, port, &hints, &ai);
	if (ret) {
		fprintf(stderr, "kvctl: exporter: cannot listen on %s: %s\n", spec, gai_strerror(ret));
		return -1;
	}
	for (a = ai; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		/* A restart must not wait out the last run's TIME_WAIT connections. */
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, HTTP_CONNECTIONS)) {
			err = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(ai);
	if (fd < 0)
		fprintf(stderr, "kvctl: exporter: cannot listen on %s: %s%s\n", spec, strerror(err),
			err == EADDRINUSE ? " (another program, or another exporter, holds the port)" :
			err == EACCES ? " (ports below 1024 need privilege)" :
			err == EADDRNOTAVAIL ? " (no interface of this machine has that address)" : "");
	return fd;
}

/* "127.0.0.1:9464", "[::1]:9464": where @fd listens, the port picked for 0 included. */
static void bound_name(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(buf, len, "?");
		return;
	}
	snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

/*
 * libmicrohttpd's own words, while it starts: why it could not. Once serving,
 * they would be a line per refused or broken HTTP connection, and say nothing
 * of the daemon.
 */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct exporter *x = cls;

	if (!__atomic_load_n(&x->serving, __ATOMIC_RELAXED)) {
		fputs("kvctl: exporter: libmicrohttpd: ", stderr);
		vfprintf(stderr, fmt, ap);
	}
}

static bool is_ipv6(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	return !getsockname(fd, (struct sockaddr *)&ss, &sl) && ss.ss_family == AF_INET6;
}

/* Until a signal; @fd is closed at the end. */
static int serve(struct exporter *x, int fd)
{
	struct MHD_Daemon *http;
	sigset_t stop;
	char name[NI_MAXHOST + NI_MAXSERV + 4], why[512];
	int sig;

	/* Blocked before MHD's threads start, so that they inherit it: sigwait takes them. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	http = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				MHD_USE_POLL | MHD_USE_ERROR_LOG | (is_ipv6(fd) ? MHD_USE_IPv6 : 0),
				0, admit, x, answer, x,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, x,
				MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_NOTIFY_CONNECTION, track_connection, x,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_SLOTS,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_REQUEST_BYTES,
				MHD_OPTION_THREAD_STACK_SIZE, (size_t)HTTP_THREAD_STACK,
				MHD_OPTION_END);
	if (!http) {
		/* Its words came before; it closed @fd, or exit does. */
		fprintf(stderr, "kvctl: exporter: libmicrohttpd could not start serving\n");
		return 1;
	}
	__atomic_store_n(&x->serving, true, __ATOMIC_RELAXED);
	bound_name(fd, name, sizeof(name));
	fprintf(stderr, "kvctl exporter: serving http://%s/metrics and /healthz for kvpoold at %s\n",
		name, socket_path(x->socket));
	/* Said now, not at the first scrape: a daemon that is not there yet. */
	pthread_mutex_lock(&x->lock);
	daemon_do(x, take_stats, kvctl_now_ns() + DAEMON_WAIT_MS * 1000000ull, why, sizeof(why));
	pthread_mutex_unlock(&x->lock);
	while (sigwait(&stop, &sig))
		;
	fprintf(stderr, "kvctl exporter: %s, stopping\n", strsignal(sig));
	MHD_stop_daemon(http); /* it closes @fd */
	return 0;
}

int cmd_exporter(int argc, char **argv, struct cmd_opts *o)
{
	struct exporter x = { .lock = PTHREAD_MUTEX_INITIALIZER,
			      .http_lock = PTHREAD_MUTEX_INITIALIZER };
	const char *listen = DEFAULT_LISTEN;
	int ret, fd;

	ret = parse_cmd("exporter", exporter_help, TAKES(OPT_LISTEN), argc, argv, o);
	if (ret)
		return ret;
	if (o->nargs)
		return usage_error("exporter", "unexpected argument '%s'", o->args[0]);
	if (o->listen)
		listen = o->listen;
	x.socket = o->socket;
	for (unsigned i = 0; i < HTTP_SLOTS; i++)
		x.http_fds[i] = -1;
	fd = listen_on(listen);
	if (fd == -2)
		return usage_error("exporter", "bad value for --listen: '%s' (ADDR:PORT, such as "
				   DEFAULT_LISTEN " or [::1]:9464)", listen);
	if (fd < 0)
		return 1;
	ret = serve(&x, fd);
	if (x.c)
		daemon_drop(&x);
	return ret;
}
