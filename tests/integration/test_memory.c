/* SPDX-License-Identifier: MIT */
/*
 * Memory goes back, and nothing a client asks for grows the daemon without
 * bound. The defect: APPEND ignored the pool's max_len (268M tokens into a
 * max_len-4096 pool: +1.37 GB of RSS), a million sequences on one connection
 * left the daemon 536 MB bigger after they closed, and arenas were faulted in
 * by the daemon. Now: SEQ_OPEN of more than max_len tokens and APPEND past it
 * are -EINVAL, the daemon touches no more of an arena than the requests name,
 * and it trims its heap once many sequences have closed (serve.c).
 *
 * 1. Arena: a root client with a 256 MiB arena connects: the daemon's RSS in
 *    the client mappings grows < 1 MiB before any request. After 100 NOPs, 64
 *    SEQ_OPENs whose tokens lie 4 MiB apart over the whole arena, 64 at small
 *    offsets, their 128 SEQ_CLOSEs and 100 STATS into an 8 KiB buffer (the
 *    client writes only what they name), it has grown < 2 MiB + those pages.
 * 2. max_len 4096: SEQ_OPEN of 4097 tokens is -EINVAL, of 4096 fine (APPEND
 *    of 1 then -EINVAL); after an open of 4000, APPEND of 97 is -EINVAL,
 *    APPEND of 96 then succeeds (nothing of the refused one was kept) and
 *    APPEND of 1 is -EINVAL. A hostile client's 65536 APPENDs of 4096 tokens
 *    (268M tokens) onto a 1-token sequence are all -EINVAL, within 5 s, the
 *    sequence still takes 4095 more, and the daemon's RSS grows < 4 MiB.
 * 3. RSS (printed on stdout, KiB: rss start, then rss peak and rss end of each
 *    phase): the start is taken after a warm-up round of opens and closes on
 *    the connection (its slot table keeps its largest round's size while it
 *    is connected) and a trim. Then 1,000,000 sequences of 16 tokens are
 *    opened and closed on it in rounds of 50,000; then uid 65534, its quota
 *    raised to 1,000,000 by the config, holds that many open at once (one
 *    more is -EDQUOT) and hangs up. After each, within 3 s, the daemon's RSS
 *    is back within 10% of the start.
 *
 * RSS figures come from /proc/PID/smaps (page tables: exact), not from the
 * status counters, which are per-CPU and folded in batches. Requests go raw,
 * SQ_ENTRIES in flight, so a million take a second or two.
 *
 * Under ASan (the daemon's path contains "asan") the core checks the pool's
 * invariants after every close, walking every open sequence: the million go
 * in rounds of 1000 and 20,000 are held (the quota set to match). The return
 * is not checked there: ASan's allocator keeps freed memory in its
 * quarantine and ignores malloc_trim, so its RSS says nothing of the daemon's.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NOBODY 65534
#define POOL "mem"
#define MAX_LEN 4096
#define SQ_ENTRIES 4096
#define SEQ_TOKENS 16
#define MILLION 1000000u
#define BIG_ARENA (256ull << 20)
/* The daemon maps each client's rings and arena from this memfd (client.c). */
#define ARENAS "/memfd:kvpool-client"

static struct daemon dmn;
static uint64_t *handles; /* by user_data, of the SEQ_OPENs of one pump */
static bool asan;
/* Sequences opened and closed in rounds of round_seqs, and held open at once. */
static uint32_t round_seqs = 50000, held_seqs = MILLION;

/*
 * The Rss of the daemon's mappings whose smaps header line contains @name
 * ("": all of them), in KiB. Exact, from the page tables: /proc/PID/status
 * figures are per-CPU counters folded in batches, off by up to a batch of
 * pages for each CPU the daemon ran on.
 */
static long rss_kib(const char *name)
{
	char path[64], line[512];
	bool in = false;
	long sum = 0, v;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)dmn.pid);
	f = fopen(path, "r");
	CHECK(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');

		if (!sp || sp == line || sp[-1] != ':')
			in = strstr(line, name) != NULL; /* a mapping's header */
		else if (in && sscanf(line, "Rss: %ld kB", &v) == 1)
			sum += v;
	}
	fclose(f);
	return sum;
}

static struct kvp_client *connect_big(const char *pool, uint32_t sq_entries, uint64_t arena)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = pool,
				      .sq_entries = sq_entries, .arena_bytes = arena };
	struct kvp_client *c;

	CHECK_EQ(kvp_connect(&o, &c), 0);
	return c;
}

/*
 * @n entries like @tmpl, at most SQ_ENTRIES in flight: entry i reads at
 * tmpl->addr + i * stride, a SEQ_CLOSE closes handles[i]. Each must complete
 * with @want; a SEQ_OPEN's handle goes to handles[i].
 */
static void pump(struct kvp_client *c, const struct kvp_sqe *tmpl, uint64_t stride, uint32_t n,
		 int32_t want)
{
	uint32_t sent = 0, reaped = 0;

	while (reaped < n) {
		struct kvp_sqe *sqe;
		struct kvp_cqe *cqe;

		while (sent < n && sent - reaped < SQ_ENTRIES && (sqe = kvp_get_sqe(c))) {
			*sqe = *tmpl;
			sqe->addr = tmpl->addr + sent * stride;
			if (tmpl->opcode == KVP_OP_SEQ_CLOSE)
				sqe->handle = handles[sent];
			sqe->user_data = sent++;
		}
		CHECK(kvp_submit(c) >= 0);
		CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
		do {
			CHECK(cqe->user_data < n);
			if (cqe->res != want) {
				fprintf(stderr, "opcode %u entry %llu: %d, expected %d\n", tmpl->opcode,
					(unsigned long long)cqe->user_data, cqe->res, want);
				exit(1);
			}
			if (tmpl->opcode == KVP_OP_SEQ_OPEN && want == 0)
				handles[cqe->user_data] = cqe->aux;
			kvp_cqe_seen(c, cqe);
			reaped++;
		} while (kvp_peek_cqe(c, &cqe) == 0);
	}
}

static void open_seqs(struct kvp_client *c, uint32_t n, int32_t want)
{
	struct kvp_sqe t = { .opcode = KVP_OP_SEQ_OPEN, .addr = 0, .len = SEQ_TOKENS };

	pump(c, &t, 0, n, want);
}

static void close_seqs(struct kvp_client *c, uint32_t n)
{
	struct kvp_sqe t = { .opcode = KVP_OP_SEQ_CLOSE };

	pump(c, &t, 0, n, 0);
}

/* Tokens 1..n at arena offset @off. */
static void put_tokens(struct kvp_client *c, uint64_t off, uint32_t n)
{
	uint64_t bytes;
	uint32_t *t = (uint32_t *)((uint8_t *)kvp_arena(c, &bytes) + off);

	CHECK(off + n * 4ull <= bytes);
	for (uint32_t i = 0; i < n; i++)
		t[i] = i + 1;
}

/* One entry; its completion's result (and aux in *aux, if given). */
static int32_t raw(struct kvp_client *c, const struct kvp_sqe *in, uint64_t *aux)
{
	struct kvp_sqe *sqe = kvp_get_sqe(c);
	struct kvp_cqe *cqe;
	int32_t res;

	CHECK(sqe != NULL);
	*sqe = *in;
	sqe->user_data = 0xfeed;
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(kvp_wait_cqe(c, &cqe), 0);
	CHECK_EQ(cqe->user_data, 0xfeed);
	res = cqe->res;
	if (aux)
		*aux = cqe->aux;
	kvp_cqe_seen(c, cqe);
	return res;
}

/* ---- 1. the arena ---- */

static void arena_untouched(void)
{
	struct kvp_sqe seq_open = { .opcode = KVP_OP_SEQ_OPEN, .len = SEQ_TOKENS };
	struct kvp_sqe nop = { .opcode = KVP_OP_NOP };
	struct kvp_sqe stats = { .opcode = KVP_OP_STATS, .out_addr = 256 << 10, .out_len = 8192 };
	const uint64_t far = 4 << 20, near = 1024;
	long shm0, shm1, shm2, named_kib, huge = 0;
	struct kvp_client *c;
	char thp[128] = "";
	FILE *f;

	/* Shared memory in huge pages makes a touched page 2 MiB: count what is named so. */
	f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
	if (f && fgets(thp, sizeof(thp), f))
		huge = strstr(thp, "[always]") || strstr(thp, "[within_size]") ||
		       strstr(thp, "[force]");
	if (f)
		fclose(f);
	shm0 = rss_kib(ARENAS);
	c = connect_big(POOL, 0, BIG_ARENA);
	shm1 = rss_kib(ARENAS);
	printf("arena: the daemon's client mappings' RSS %ld KiB before a 256 MiB arena's connect, "
	       "%ld after\n", shm0, shm1);
	CHECK(shm1 - shm0 < 1024);

	/* The client writes only what its requests name. */
	for (uint32_t i = 0; i < 64; i++) {
		put_tokens(c, i * far, SEQ_TOKENS);
		put_tokens(c, i * near, SEQ_TOKENS);
	}
	pump(c, &nop, 0, 100, 0);
	pump(c, &seq_open, far, 64, 0);
	close_seqs(c, 64);
	pump(c, &seq_open, near, 64, 0);
	close_seqs(c, 64);
	for (uint32_t i = 0; i < 100; i++)
		CHECK(raw(c, &stats, NULL) > (int32_t)sizeof(struct kvp_stats_header));
	shm2 = rss_kib(ARENAS);
	/* Named: 64 pages 4 MiB apart, 64 KiB at the start (16 pages), the 8 KiB STATS buffer. */
	named_kib = huge ? (64 + 2) * 2048 : (64 + 16 + 2) * 4;
	printf("arena: %ld KiB after 456 requests naming %ld KiB of it\n", shm2, named_kib);
	CHECK(shm2 - shm1 < 2048 + named_kib);
	kvp_close(c);
}

/* ---- 2. max_len ---- */

static void append_bounded(void)
{
	static uint32_t tokens[MAX_LEN + 1];
	struct kvp_sqe hostile = { .opcode = KVP_OP_APPEND_TOKENS, .addr = 0, .len = MAX_LEN };
	struct kvp_client *c = connect_or_die(&dmn, POOL, "", false);
	uint64_t h, h2, t0, ms;
	long rss0, rss1;

	for (uint32_t i = 0; i <= MAX_LEN; i++)
		tokens[i] = 1000 + i;
	CHECK_EQ(kvp_pool_info(c)->max_len, MAX_LEN);
	CHECK_EQ(kvp_seq_open(c, tokens, MAX_LEN + 1, NULL, 0, -1, &h), -EINVAL);
	CHECK_EQ(kvp_seq_open(c, tokens, MAX_LEN, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_append(c, h, tokens, 1), -EINVAL);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	CHECK_EQ(kvp_seq_open(c, tokens, 4000, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_append(c, h, tokens, 97), -EINVAL);
	CHECK_EQ(kvp_append(c, h, tokens, 96), 0);
	CHECK_EQ(kvp_append(c, h, tokens, 1), -EINVAL);
	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);

	/* The hostile client: one token, then 4096 more, 65536 times. */
	rss0 = rss_kib("");
	c = connect_big(POOL, SQ_ENTRIES, 0);
	put_tokens(c, 0, MAX_LEN);
	CHECK_EQ(kvp_seq_open(c, tokens, 1, NULL, 0, -1, &h2), 0);
	hostile.handle = h2;
	t0 = test_now_ns();
	pump(c, &hostile, 0, 65536, -EINVAL);
	ms = (test_now_ns() - t0) / 1000000;
	CHECK_EQ(kvp_append(c, h2, tokens, MAX_LEN - 1), 0); /* it still has 1 token */
	rss1 = rss_kib("");
	printf("append: 65536 APPENDs of %u tokens refused in %llu ms; daemon RSS %ld -> %ld KiB\n",
	       MAX_LEN, (unsigned long long)ms, rss0, rss1);
	CHECK(ms < 5000);
	CHECK(rss1 - rss0 < 4096);
	kvp_close(c);
}

/* ---- 3. a million sequences ---- */

static long rss_start, rss_peak;

static void peak(void)
{
	long rss = rss_kib("");

	CHECK(rss > 0);
	if (rss > rss_peak)
		rss_peak = rss;
}

/* Waits (at most 3 s) for the RSS to come back within 10% of the start; not under ASan. */
static void settled(const char *phase)
{
	uint64_t t0 = test_now_ns();
	long rss;

	for (;;) {
		rss = rss_kib("");
		CHECK(rss > 0);
		if (asan ? test_now_ns() - t0 > 600000000ull :
			   rss <= rss_start + rss_start / 10 || test_now_ns() - t0 > 3000000000ull)
			break;
		usleep(50000);
	}
	printf("rss peak: %ld KiB (%s)\n", rss_peak, phase);
	printf("rss end: %ld KiB (%s, after %llu ms)\n", rss, phase,
	       (unsigned long long)(test_now_ns() - t0) / 1000000);
	if (!asan)
		CHECK(rss <= rss_start + rss_start / 10);
	rss_peak = rss;
}

static int ctl[2]; /* the held phase's child waits for its end on ctl[0] */

static int hold_million(void *arg)
{
	struct kvp_sqe one = { .opcode = KVP_OP_SEQ_OPEN, .addr = 0, .len = SEQ_TOKENS };
	struct kvp_client *c;
	char b;

	(void)arg;
	close(ctl[1]);
	drop_to_uid(NOBODY);
	c = connect_big(POOL, SQ_ENTRIES, 0);
	put_tokens(c, 0, SEQ_TOKENS);
	open_seqs(c, held_seqs, 0);
	CHECK_EQ(raw(c, &one, NULL), -EDQUOT); /* its max_sequences */
	printf("ready\n");
	fflush(stdout);
	CHECK(read(ctl[0], &b, 1) == 0);
	return 0; /* hangs up with a million sequences open */
}

static void million(void)
{
	struct kvp_client *c = connect_big(POOL, SQ_ENTRIES, 0);
	uint64_t t0;
	pid_t child;

	put_tokens(c, 0, SEQ_TOKENS);
	open_seqs(c, round_seqs, 0);
	close_seqs(c, round_seqs);
	usleep(600000); /* two housekeeping ticks: a trim */
	rss_start = rss_peak = rss_kib("");
	CHECK(rss_start > 0);
	printf("rss start: %ld KiB\n", rss_start);
	t0 = test_now_ns();
	for (uint32_t done = 0; done < MILLION; done += round_seqs) {
		open_seqs(c, round_seqs, 0);
		peak();
		close_seqs(c, round_seqs);
	}
	printf("rounds: %u sequences opened and closed in %llu ms\n", MILLION,
	       (unsigned long long)(test_now_ns() - t0) / 1000000);
	settled("rounds");

	t0 = test_now_ns();
	CHECK_EQ(pipe(ctl), 0);
	child = fork_child_ready(hold_million, NULL);
	close(ctl[0]);
	peak();
	printf("held: %u sequences opened by uid %d in %llu ms\n", held_seqs, NOBODY,
	       (unsigned long long)(test_now_ns() - t0) / 1000000);
	close(ctl[1]);
	CHECK_EQ(wait_child(child), 0);
	settled("held");
	/* The daemon still serves, and its connection's sequences still open and close. */
	open_seqs(c, round_seqs, 0);
	close_seqs(c, round_seqs);
	kvp_close(c);
}

int main(void)
{
	const char *kvpoold = getenv("KVPOOLD");
	const char *args[] = { "--config", NULL, NULL };
	static char cfg[512];

	asan = kvpoold && strstr(kvpoold, "asan");
	/* Closing a million held at once would take hours, rounds of 50,000 minutes. */
	if (asan) {
		round_seqs = 1000;
		held_seqs = 20000;
	}
	watchdog_start("test_memory", asan ? 280 : 120);
	if (geteuid() != 0) {
		printf("needs root (runs a client as uid %d)\n", NOBODY);
		return 77;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(cfg, sizeof(cfg),
		 "[pool.%s]\nblocks = 1024\nblock_size = 16\ngroups = full\nmax_len = %u\n\n"
		 "[uid.%d]\nmax_sequences = %u\nmax_tokens = unlimited\n",
		 POOL, MAX_LEN, NOBODY, held_seqs);
	args[1] = config_file(cfg);
	handles = calloc(MILLION, sizeof(*handles));
	CHECK(handles != NULL);
	CHECK_EQ(daemon_start(&dmn, args), 0);
	watchdog_watch(&dmn);
	daemon_open_to_all(&dmn);

	arena_untouched();
	append_bounded();
	million();

	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	printf("test_memory: ok\n");
	return 0;
}
