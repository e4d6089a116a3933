/* SPDX-License-Identifier: MIT */
/*
 * Private stats. STATS and the stats page used to show every tenant's pid,
 * uid and namespace to any client. Now a client without the admin feature
 * sees the clients of its own uid only, the others counted in other_clients;
 * on the page, its uid's tenant row and those of namespaces it may join;
 * pools stay visible. Clients: U1, U2 (uid 65534), V (65533, in namespace
 * "secret" that only 65533 may join), A (root, admin), R and P (root, no
 * admin; P maps the page). Checked, with exact rows (pid, uid) and counts:
 * - STATS as A (everyone), as R (root's only), and as an observer of uid
 *   65534 (its uid's, its own connections included); the pool is there;
 * - the stats page as the observer: only 65534's rows and tenant row (its
 *   clients, 32 allowed, its arena bytes), not root's, 65533's or secret's;
 *   live: V's hang-up lowers other_clients, a new 65534 client (U3) adds a
 *   row, the observer's STATS connection hanging up takes its row away;
 * - P's page: root's rows, its tenant row and secret's (root may join it),
 *   secret's gone with V; an admin page: every row and tenant;
 * - `kvctl clients` and `kvctl clients --json` as 65534: its uid's rows,
 *   "other clients: N", nothing of 65533's; as root: everyone. kvctl is a
 *   monitor: in no row and no other_clients, but in its uid's clients quota.
 * Needs root: exit 77 otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534
#define OTHER 65533

struct row { int32_t pid; uint32_t uid; };
struct seen { unsigned n, other, pool_clients; struct row r[64]; };
struct strs { unsigned n; char s[64][128]; }; /* tenant rows, as text */

/* Parent-side pipe ends: a child closes them, so that the parent's exit reads as EOF. */
static int parent_fds[8];
static unsigned nparent_fds;

static void close_parent_fds(void)
{
	for (unsigned i = 0; i < nparent_fds; i++)
		close(parent_fds[i]);
}

static struct kvp_client *conn(const struct daemon *d, const char *pool, bool admin, bool page)
{
	struct kvp_connect_opts o = { .socket_path = d->socket, .pool = pool, .admin = admin,
				      .stats_page = page };
	struct kvp_client *c;

	CHECK_EQ(kvp_connect(&o, &c), 0);
	CHECK_EQ(kvp_features(c) & (KVP_FEAT_ADMIN | KVP_FEAT_STATS_PAGE),
		 (admin ? KVP_FEAT_ADMIN : 0) | (page ? KVP_FEAT_STATS_PAGE : 0));
	return c;
}

/* Exactly the rows @want (as a multiset) and other_clients @other. */
static void expect_rows(int line, const struct seen *s, unsigned other, const struct row *want,
			unsigned n)
{
	bool taken[64] = { false };
	unsigned found = 0;

	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < s->n; j++)
			if (!taken[j] && s->r[j].pid == want[i].pid && s->r[j].uid == want[i].uid) {
				taken[j] = true;
				found++;
				break;
			}
	if (s->n == n && found == n && s->other == other)
		return;
	fprintf(stderr, "%s:%d: %u rows, %u as expected, other_clients %u; expected %u rows, "
		"other_clients %u. Rows:\n", __FILE__, line, s->n, found, s->other, n, other);
	for (unsigned i = 0; i < s->n; i++)
		fprintf(stderr, "  pid %d uid %u\n", s->r[i].pid, s->r[i].uid);
	exit(1);
}
#define ROWS(...) (const struct row[]){ __VA_ARGS__ }, \
	(unsigned)(sizeof((const struct row[]){ __VA_ARGS__ }) / sizeof(struct row))
#define EXPECT_ROWS(s, other, ...) expect_rows(__LINE__, s, other, ROWS(__VA_ARGS__))

/* STATS: its rows; the pool "p" is there for everyone, whoever asks. */
static void stats_rows(struct kvp_client *c, struct seen *s)
{
	static uint8_t buf[65536];
	struct kvp_stats_header h;
	struct kvp_pool_entry p;
	struct kvp_client_entry e;
	int n = kvp_stats(c, buf, sizeof(buf));

	CHECK(n >= (int)sizeof(h));
	memcpy(&h, buf, sizeof(h));
	CHECK_EQ(n, sizeof(h) + h.num_pools * sizeof(p) + h.num_clients * sizeof(e));
	CHECK_EQ(h.num_pools, 1);
	CHECK(h.num_clients <= 64);
	memcpy(&p, buf + sizeof(h), sizeof(p));
	CHECK_EQ(strcmp(p.name, "p"), 0);
	CHECK_EQ(p.block_size, 4);
	CHECK_EQ(p.stats.blocks_total, 16);
	s->n = h.num_clients;
	s->other = h.other_clients;
	s->pool_clients = p.clients;
	for (unsigned i = 0; i < h.num_clients; i++) {
		memcpy(&e, buf + sizeof(h) + sizeof(p) + i * sizeof(e), sizeof(e));
		s->r[i] = (struct row){ e.pid, e.uid };
	}
}

/* Exactly the strings @want, in any order. */
static void expect_strs(int line, const struct strs *got, const char *const *want, unsigned n)
{
	bool taken[64] = { false };
	unsigned found = 0;

	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < got->n; j++)
			if (!taken[j] && !strcmp(got->s[j], want[i])) {
				taken[j] = true;
				found++;
				break;
			}
	if (got->n == n && found == n)
		return;
	fprintf(stderr, "%s:%d: %u tenant rows, %u as expected (of %u):\n", __FILE__, line, got->n,
		found, n);
	for (unsigned j = 0; j < got->n; j++)
		fprintf(stderr, "  '%s'\n", got->s[j]);
	exit(1);
}
#define EXPECT_STRS(got, ...) expect_strs(__LINE__, got, (const char *const[]){ __VA_ARGS__ }, \
	(unsigned)(sizeof((const char *const[]){ __VA_ARGS__ }) / sizeof(const char *)))

/*
 * The stats page: a snapshot's client rows and other_clients; its tenant rows
 * as "uid 65534 3/32 8192K" (clients used/limit, "-" for none; arena used).
 * The pool "p" is there, and no other.
 */
static void page_rows(const struct kvp_client *c, struct seen *s, struct strs *t)
{
	static uint8_t buf[4 << 20];
	const struct kvp_stats_page *pg = (const struct kvp_stats_page *)buf;
	const struct kvp_stats_pool *pools;
	const struct kvp_stats_client *cl;
	const struct kvp_stats_tenant *te;
	size_t bytes = kvp_stats_bytes(c);
	unsigned npools = 0;
	char who[48], limit[24];

	CHECK(bytes >= sizeof(*pg) && bytes <= sizeof(buf));
	CHECK_EQ(kvp_stats_snapshot(c, buf, bytes), bytes);
	CHECK_EQ(pg->magic, KVP_STATS_MAGIC);
	CHECK_EQ(pg->page_bytes, bytes);
	pools = (const struct kvp_stats_pool *)(buf + pg->pools_off);
	for (unsigned i = 0; i < pg->max_pools; i++) {
		npools += pools[i].in_use != 0;
		CHECK(!pools[i].in_use || (!strcmp(pools[i].name, "p") && pools[i].blocks_total == 16));
	}
	CHECK_EQ(npools, 1);
	cl = (const struct kvp_stats_client *)(buf + pg->clients_off);
	s->n = 0;
	for (unsigned i = 0; i < pg->max_clients; i++)
		if (cl[i].in_use && s->n < 64)
			s->r[s->n++] = (struct row){ cl[i].pid, cl[i].uid };
	s->other = pg->other_clients;
	te = (const struct kvp_stats_tenant *)(buf + pg->tenants_off);
	t->n = 0;
	for (unsigned i = 0; i < pg->max_tenants && t->n < 64; i++) {
		if (!te[i].in_use)
			continue;
		if (te[i].kind == KVP_TENANT_UID)
			snprintf(who, sizeof(who), "uid %u", te[i].uid);
		else
			snprintf(who, sizeof(who), "namespace %.31s", te[i].namespace_);
		snprintf(limit, sizeof(limit), "%llu", (unsigned long long)te[i].limit[KVP_QUOTA_CLIENTS]);
		snprintf(t->s[t->n++], sizeof(t->s[0]), "%s %llu/%s %lluK", who,
			 (unsigned long long)te[i].used[KVP_QUOTA_CLIENTS],
			 te[i].limit[KVP_QUOTA_CLIENTS] == KVP_QUOTA_UNLIMITED ? "-" : limit,
			 (unsigned long long)te[i].used[KVP_QUOTA_ARENA_BYTES] >> 10);
	}
}

/* A client that connects as @uid (in @ns) and holds on until a byte comes on @release. */
struct holder { const struct daemon *d; uid_t uid; const char *ns; int release; };

static int hold(void *arg)
{
	const struct holder *h = arg;
	struct kvp_client *c;
	char b;

	close_parent_fds();
	drop_to_uid(h->uid);
	c = connect_or_die(h->d, "p", h->ns, false); /* arena 4 MiB */
	printf("ready\n");
	fflush(stdout);
	if (read(h->release, &b, 1) != 1)
		_exit(1); /* the parent is gone: it said why */
	kvp_close(c);
	return 0;
}

static pid_t start_holder(struct holder *h, const struct daemon *d, uid_t uid, const char *ns)
{
	int fds[2];
	pid_t pid;

	CHECK_EQ(pipe(fds), 0);
	*h = (struct holder){ d, uid, ns, fds[0] };
	parent_fds[nparent_fds++] = fds[1];
	fflush(NULL);
	pid = fork_child_ready(hold, h);
	close(fds[0]);
	h->release = fds[1];
	return pid;
}

static void release(const struct holder *h, pid_t pid)
{
	CHECK_EQ(write(h->release, "x", 1), 1);
	CHECK_EQ(wait_child(pid), 0);
}

/* Until the admin's STATS shows @n clients: closed connections hang up asynchronously. */
static void settle(struct kvp_client *admin, unsigned n)
{
	uint64_t end = test_now_ns() + 2000000000ull;
	struct seen s;

	do
		stats_rows(admin, &s);
	while (s.n != n && test_now_ns() < end && !usleep(1000));
	CHECK_EQ(s.n, n);
}

/* The observer, uid 65534: its STATS (S) and page (P), while the parent changes who is connected. */
struct observer { const struct daemon *d; pid_t u1, u2; int cmd, report; };

static int observe(void *arg)
{
	const struct observer *o = arg;
	struct kvp_connect_opts admin = { .socket_path = o->d->socket, .admin = true };
	pid_t me = getpid(), u3;
	struct kvp_client *sc, *pc;
	struct seen s;
	struct strs t;
	uint64_t end;
	char b;

	close_parent_fds();
	drop_to_uid(NOBODY);
	/* U1, U2 and S are 65534's; V (65533), A, R and P (root) are not. */
	sc = conn(o->d, "", false, false);
	stats_rows(sc, &s);
	EXPECT_ROWS(&s, 4, { o->u1, NOBODY }, { o->u2, NOBODY }, { me, NOBODY });
	CHECK_EQ(s.pool_clients, 5); /* pools stay whole: U1, U2, V, A, R are attached to "p" */
	pc = conn(o->d, "", false, true);
	page_rows(pc, &s, &t);
	EXPECT_ROWS(&s, 4, { o->u1, NOBODY }, { o->u2, NOBODY }, { me, NOBODY }, { me, NOBODY });
	/* Neither uid 0's row nor 65533's nor namespace secret's. Arenas: 4 + 4 + 1 + 1 MiB. */
	EXPECT_STRS(&t, "uid 65534 4/32 10240K");
	stats_rows(sc, &s);
	EXPECT_ROWS(&s, 4, { o->u1, NOBODY }, { o->u2, NOBODY }, { me, NOBODY }, { me, NOBODY });
	CHECK_EQ(write(o->report, "1", 1), 1);

	/* V hangs up: other_clients drops by one, within 2 s. */
	CHECK_EQ(read(o->cmd, &b, 1), 1);
	end = test_now_ns() + 2000000000ull;
	do
		page_rows(pc, &s, &t);
	while (s.other != 3 && test_now_ns() < end && !usleep(1000));
	EXPECT_ROWS(&s, 3, { o->u1, NOBODY }, { o->u2, NOBODY }, { me, NOBODY }, { me, NOBODY });
	EXPECT_STRS(&t, "uid 65534 4/32 10240K");
	stats_rows(sc, &s);
	EXPECT_ROWS(&s, 3, { o->u1, NOBODY }, { o->u2, NOBODY }, { me, NOBODY }, { me, NOBODY });
	CHECK_EQ(write(o->report, "2", 1), 1);

	/* U3 (65534) connects: its row is there once its connect has returned. */
	CHECK_EQ(read(o->cmd, &u3, sizeof(u3)), sizeof(u3));
	page_rows(pc, &s, &t);
	EXPECT_ROWS(&s, 3, { o->u1, NOBODY }, { o->u2, NOBODY }, { u3, NOBODY }, { me, NOBODY },
		    { me, NOBODY });
	EXPECT_STRS(&t, "uid 65534 5/32 14336K");
	/* S hangs up: its row goes, within 2 s; other_clients stays. */
	kvp_close(sc);
	end = test_now_ns() + 2000000000ull;
	do
		page_rows(pc, &s, &t);
	while (s.n != 4 && test_now_ns() < end && !usleep(1000));
	EXPECT_ROWS(&s, 3, { o->u1, NOBODY }, { o->u2, NOBODY }, { u3, NOBODY }, { me, NOBODY });
	EXPECT_STRS(&t, "uid 65534 4/32 13312K");
	kvp_close(pc);
	/* And the admin feature stays refused to it. */
	CHECK_EQ(kvp_connect(&admin, &sc), -EPERM);
	return 0;
}

/* `kvctl --socket S clients [--json]` run as @uid: its output; *pid: kvctl's. */
static char *kvctl(const struct daemon *d, uid_t uid, bool json, pid_t *pid)
{
	static char out[65536], bin[192];
	size_t len = 0;
	ssize_t n;
	int fds[2];

	if (!*bin)
		daemon_copy_program(d, getenv("KVCTL") ? getenv("KVCTL") : "build/bin/kvctl", bin,
				    sizeof(bin));
	CHECK_EQ(pipe2(fds, O_CLOEXEC), 0);
	fflush(NULL);
	*pid = fork();
	CHECK(*pid >= 0);
	if (*pid == 0) {
		close_parent_fds();
		CHECK_EQ(dup2(fds[1], STDOUT_FILENO), STDOUT_FILENO);
		drop_to_uid(uid);
		execl(bin, bin, "--socket", d->socket, "clients", json ? "--json" : NULL, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	while ((n = read(fds[0], out + len, sizeof(out) - 1 - len)) > 0)
		len += (size_t)n;
	close(fds[0]);
	out[len] = '\0';
	CHECK_EQ(wait_child(*pid), 0);
	return out;
}

/*
 * kvctl clients: the table's rows, other_clients from its "other clients: N"
 * line (none: 0), and the QUOTAS table's rows as "uid 65534 3/32" (the name,
 * the clients cell).
 */
static void text_rows(const char *out, struct seen *s, struct strs *t)
{
	const char *l = strstr(out, "CLIENT "), *other = strstr(out, "\nother clients: ");
	char kind[16], name[40], cell[40], line[80];
	unsigned id, uid;
	int pid;

	CHECK(l != NULL);
	s->n = 0;
	for (l = strchr(l, '\n'); l && sscanf(l + 1, "%u %d %u", &id, &pid, &uid) == 3 && s->n < 64;
	     l = strchr(l + 1, '\n'))
		s->r[s->n++] = (struct row){ pid, uid };
	s->other = other ? (unsigned)strtoul(other + 16, NULL, 10) : 0;
	snprintf(line, sizeof(line), "\nother clients: %u (other uids': not shown)\n", s->other);
	CHECK(!other || (other == strstr(out, line) && !strstr(other + strlen(line), "other clients")));
	l = strstr(out, "\nQUOTAS (USED/LIMIT)");
	CHECK(l != NULL);
	t->n = 0;
	for (l = strchr(l + 1, '\n'); l && sscanf(l + 1, "%15s %39s %39s", kind, name, cell) == 3 &&
	     t->n < 64 && (!strcmp(kind, "uid") || !strcmp(kind, "namespace"));
	     l = strchr(l + 1, '\n'))
		snprintf(t->s[t->n++], sizeof(t->s[0]), "%s %s %s", kind, name, cell);
}

/* The numbers after each "@key": in @json, in order; returns how many. */
static unsigned json_values(const char *json, const char *key, long long *v)
{
	char k[40];
	unsigned n = 0;

	snprintf(k, sizeof(k), "\"%s\":", key);
	for (const char *p = strstr(json, k); p; p = strstr(p + 1, k)) {
		CHECK(n < 64);
		v[n++] = strtoll(p + strlen(k), NULL, 10);
	}
	return n;
}

/* kvctl clients --json: the clients' pids and uids, other_clients; the tenants' uids ("uid N"). */
static void json_rows(const char *out, struct seen *s, struct strs *t)
{
	long long pids[64], uids[64], other[64];
	unsigned np = json_values(out, "pid", pids), nu = json_values(out, "uid", uids);

	CHECK_EQ(json_values(out, "other_clients", other), 1);
	CHECK(nu >= np);
	s->n = np;
	s->other = (unsigned)other[0];
	for (unsigned i = 0; i < np; i++) /* "clients" comes before "tenants" */
		s->r[i] = (struct row){ (int32_t)pids[i], (uint32_t)uids[i] };
	t->n = 0;
	for (unsigned i = np; i < nu; i++)
		snprintf(t->s[t->n++], sizeof(t->s[0]), "uid %lld", uids[i]);
}

int main(void)
{
	static const char cfg[] = "[pool.p]\nblocks = 16\nblock_size = 4\ngroups = full\n\n"
				  "[namespace.secret]\nuids = 65533\n";
	const char *args[3] = { "--config", NULL, NULL };
	pid_t me = getpid(), u1, u2, u3, v, kp, obs;
	struct holder h1, h2, h3, hv;
	struct kvp_client *a, *r, *pr, *pa;
	struct observer o;
	struct seen s;
	struct strs t;
	struct daemon d;
	int to_obs[2], from_obs[2];
	char *out, b;

	watchdog_start("test_private_stats", 30);
	if (geteuid() != 0) {
		printf("needs root: the test runs clients as uids 65534 and 65533\n");
		return 77;
	}
	args[1] = config_file(cfg);
	CHECK_EQ(daemon_start(&d, args), 0);
	watchdog_watch(&d);
	daemon_open_to_all(&d);

	/* U1, U2 (65534), V (65533, namespace "secret"); A (admin), R and P (page) are root's. */
	u1 = start_holder(&h1, &d, NOBODY, "");
	u2 = start_holder(&h2, &d, NOBODY, "");
	v = start_holder(&hv, &d, OTHER, "secret");
	a = connect_or_die(&d, "p", "", true);
	r = connect_or_die(&d, "p", "", false);
	pr = conn(&d, "", false, true);
	settle(a, 6);
	stats_rows(a, &s);
	EXPECT_ROWS(&s, 0, { u1, NOBODY }, { u2, NOBODY }, { v, OTHER }, { me, 0 }, { me, 0 },
		    { me, 0 });
	stats_rows(r, &s);
	EXPECT_ROWS(&s, 3, { me, 0 }, { me, 0 }, { me, 0 });
	page_rows(pr, &s, &t);
	EXPECT_ROWS(&s, 3, { me, 0 }, { me, 0 }, { me, 0 });
	/* Root may join any namespace: it sees secret's row. Arenas: 4 + 4 + 1 MiB, V's 4. */
	EXPECT_STRS(&t, "uid 0 3/- 9216K", "namespace secret 1/- 4096K");

	/*
	 * kvctl as 65534: U1 and U2 (not itself: a monitor); the others counted, not shown;
	 * nothing of "secret". Its connection counts in its uid's clients quota.
	 */
	out = kvctl(&d, NOBODY, false, &kp);
	text_rows(out, &s, &t);
	EXPECT_ROWS(&s, 4, { u1, NOBODY }, { u2, NOBODY });
	EXPECT_STRS(&t, "uid 65534 3/32");
	CHECK(strstr(out, "secret") == NULL);
	settle(a, 6);
	out = kvctl(&d, NOBODY, true, &kp);
	json_rows(out, &s, &t);
	EXPECT_ROWS(&s, 4, { u1, NOBODY }, { u2, NOBODY });
	EXPECT_STRS(&t, "uid 65534");
	CHECK(strstr(out, "secret") == NULL);
	settle(a, 6);
	/* kvctl as root (admin): everyone but itself. */
	out = kvctl(&d, 0, false, &kp);
	text_rows(out, &s, &t);
	EXPECT_ROWS(&s, 0, { u1, NOBODY }, { u2, NOBODY }, { v, OTHER }, { me, 0 }, { me, 0 },
		    { me, 0 });
	EXPECT_STRS(&t, "uid 65534 2/32", "uid 65533 1/32", "uid 0 4/unlimited",
		    "namespace secret 1/unlimited");
	settle(a, 6);

	/* The observer (65534) watches while V hangs up and U3 (65534) connects. */
	CHECK_EQ(pipe(to_obs), 0);
	CHECK_EQ(pipe(from_obs), 0);
	parent_fds[nparent_fds++] = to_obs[1];
	parent_fds[nparent_fds++] = from_obs[0];
	o = (struct observer){ &d, u1, u2, to_obs[0], from_obs[1] };
	fflush(NULL);
	obs = fork_child(observe, &o);
	CHECK(obs > 0);
	close(to_obs[0]);
	close(from_obs[1]);
	CHECK_EQ(read(from_obs[0], &b, 1), 1);
	release(&hv, v);
	CHECK_EQ(write(to_obs[1], "v", 1), 1);
	CHECK_EQ(read(from_obs[0], &b, 1), 1);
	/* The observer saw V go: root's page has lost secret's row (others: U1, U2, S, P). */
	page_rows(pr, &s, &t);
	EXPECT_ROWS(&s, 4, { me, 0 }, { me, 0 }, { me, 0 });
	EXPECT_STRS(&t, "uid 0 3/- 9216K");
	u3 = start_holder(&h3, &d, NOBODY, "");
	CHECK_EQ(write(to_obs[1], &u3, sizeof(u3)), sizeof(u3));
	CHECK_EQ(wait_child(obs), 0);
	settle(a, 6);

	/* Root: the admin sees U1, U2, U3 and root's; root without admin, root's only. */
	stats_rows(a, &s);
	EXPECT_ROWS(&s, 0, { u1, NOBODY }, { u2, NOBODY }, { u3, NOBODY }, { me, 0 }, { me, 0 },
		    { me, 0 });
	stats_rows(r, &s);
	EXPECT_ROWS(&s, 3, { me, 0 }, { me, 0 }, { me, 0 });
	pa = conn(&d, "", true, true);
	page_rows(pa, &s, &t);
	EXPECT_ROWS(&s, 0, { u1, NOBODY }, { u2, NOBODY }, { u3, NOBODY }, { me, 0 }, { me, 0 },
		    { me, 0 }, { me, 0 });
	EXPECT_STRS(&t, "uid 65534 3/32 12288K", "uid 0 4/- 10240K");
	page_rows(pr, &s, &t); /* live: pa's row came */
	EXPECT_ROWS(&s, 3, { me, 0 }, { me, 0 }, { me, 0 }, { me, 0 });
	EXPECT_STRS(&t, "uid 0 4/- 10240K");

	release(&h1, u1);
	release(&h2, u2);
	release(&h3, u3);
	kvp_close(pa);
	kvp_close(pr);
	kvp_close(r);
	kvp_close(a);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&d), 0);
	return 0;
}
