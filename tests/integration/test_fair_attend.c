/* SPDX-License-Identifier: MIT */
/*
 * One tenant's ATTENDs must not monopolize the workers. The defect this guards
 * against: four ATTENDs, each naming one 4096-token sequence 65,536 times
 * (2^24 key positions), stalled another tenant's NOP for 1.9 s and its
 * WRITE_KV for over 3 s, and the queued work went on for 8 s after the
 * attacker died. The rules now (uapi/kvpool.h, docs/kvdata.md):
 *
 * 1. Limits, exact: more than KVP_ATTEND_MAX_SEQS entries, more than
 *    KVP_ATTEND_MAX_KEYS key positions summed over the entries, more than
 *    KVP_ATTEND_MAX_QUERIES queries summed over them, or more than
 *    KVP_ATTEND_MAX_Q_HEADS query heads is -E2BIG; each limit exactly is
 *    accepted (4096 entries of 1024 keys each: both at once), but the
 *    queries' (2^16 queries' work is too long for a test).
 * 2. Fairness: an attacker (uid 65534 when we are root) keeps the worst
 *    ATTENDs the limits allow in flight (1024 entries, each one decode query
 *    over its 4096 tokens, 256 query heads, every entry on the same Q and
 *    output: 2048 tasks, seconds of both cores each) and resubmits as they
 *    complete. A bystander's decode step (WRITE_KV of one token, ATTEND of one
 *    query over 4096 tokens, a NOP) stays fast: ATTEND p50 <= 50 ms and max
 *    <= 250 ms, WRITE_KV max <= 250 ms, NOP max <= 100 ms (the target is 50 ms
 *    on 2 cores), and its output the same bits. A bystander waits for the
 *    attacker's tasks that are running when it comes, never for its queue; so
 *    where one such task is slow (under ASan it takes 0.15-0.25 s, not 3 ms)
 *    the bounds are that many tasks' time instead (p50 4 tasks, maxima 8),
 *    measured here before the attack. The attack really holds the workers:
 *    more of its taken ATTENDs are unfinished than there are workers to the
 *    end, and the daemon burns CPU while the bystander sleeps.
 * 3. Cancellation: once the daemon has noticed the attacker's SIGKILL, its
 *    queued work is cancelled, not run for nobody: within 200 ms (or 3 tasks'
 *    time) a bystander decode runs at baseline speed again (<= 3 x baseline
 *    p50 + 5 ms) and the attacker's pinned blocks are back.
 * Then the daemon exits 0 on SIGTERM.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvref.h"

#define POOL "fair"
#define BS 16
#define KV_HEADS 2
#define HD 128
#define CTX 4096                  /* tokens of each sequence */
#define SPARE BS                  /* the bystander's slots past CTX, for its decode WRITE_KV */
#define BY_Q_HEADS 8              /* the bystander: GQA 4 */
#define ATK_Q_HEADS KVP_ATTEND_MAX_Q_HEADS
#define ATK_SEQS (KVP_ATTEND_MAX_KEYS / CTX) /* 1024 decode entries of CTX keys */
#define ATK_FIRST 8               /* ATTENDs the daemon has taken when the attacker is ready */
#define ATK_SQ 64
#define SCALE 0.08838834764831845f /* 1 / sqrt(HD) */
#define MS 1000000ull

/* Arenas: the blocking calls stage from 0; raw requests go above, on one Q and output. */
#define BY_ARENA (8u << 20)
#define ATK_ARENA (8u << 20)
#define RAW_HDR (4u << 20)
#define RAW_Q (5u << 20)
#define RAW_OUT (6u << 20)
#define ATTEND_LEN(n) ((uint32_t)(sizeof(struct kvp_attend) + (n) * sizeof(struct kvp_attend_seq)))

static struct daemon dmn;
static uint16_t kbuf[CTX + SPARE][KV_HEADS][HD], vbuf[CTX + SPARE][KV_HEADS][HD];
static float q_by[BY_Q_HEADS][HD], out_base[BY_Q_HEADS][HD], out_now[BY_Q_HEADS][HD];
static pid_t main_pid, attacker_pid;

/* What the attacker tells the parent, in memory shared across the fork. */
static struct attack_state {
	uint64_t submitted, completed;
	int64_t error; /* the first failed ATTEND's res */
} *atk;

/* A sequence of CTX tokens from @base, CTX + @spare slots, KV of @seed written, CTX committed. */
static uint64_t kv_sequence(struct kvp_client *c, uint32_t base, uint64_t seed, uint32_t spare)
{
	static uint32_t tokens[CTX];
	uint64_t h;

	for (uint32_t t = 0; t < CTX; t++)
		tokens[t] = base + t;
	for (uint32_t t = 0; t < CTX + SPARE; t++)
		for (uint32_t kh = 0; kh < KV_HEADS; kh++)
			for (uint32_t d = 0; d < HD; d++) {
				kbuf[t][kh][d] = to_f16(val(seed, WHICH_K, 0, 0, t, kh, d));
				vbuf[t][kh][d] = to_f16(val(seed, WHICH_V, 0, 0, t, kh, d));
			}
	CHECK_EQ(kvp_seq_open(c, tokens, CTX, NULL, 0, -1, &h), 0);
	CHECK_EQ(kvp_alloc(c, h, CTX, spare, false, NULL, NULL, 0), 0);
	CHECK_EQ(kvp_write_kv(c, h, 0, 0, 0, CTX, kbuf, vbuf), 0);
	CHECK_EQ(kvp_commit(c, h, CTX), 0);
	return h;
}

static struct kvp_cqe wait_one(struct kvp_client *c)
{
	struct kvp_cqe *cqe, copy;
	int ret = kvp_wait_cqe(c, &cqe);

	if (ret == -ECONNRESET && getpid() != main_pid)
		_exit(3); /* the attacker, once a failing test has killed the daemon */
	CHECK_EQ(ret, 0);
	copy = *cqe;
	kvp_cqe_seen(c, cqe);
	return copy;
}

/* At RAW_HDR: an ATTEND of @n decode entries (@h, position @pos), all on RAW_Q and RAW_OUT. */
static void attend_header(struct kvp_client *c, uint64_t h, uint32_t n, uint32_t pos,
			  uint32_t q_heads, uint64_t seed)
{
	uint8_t *arena = kvp_arena(c, NULL);
	struct kvp_attend *a = (struct kvp_attend *)(arena + RAW_HDR);

	*a = (struct kvp_attend){ .num_seqs = n, .q_heads = q_heads, .flags = KVP_ATTEND_Q_F32,
				  .scale = SCALE };
	for (uint32_t s = 0; s < n; s++)
		a->seqs[s] = (struct kvp_attend_seq){ .handle = h, .first_pos = pos, .count = 1,
						      .q_off = RAW_Q, .out_off = RAW_OUT };
	for (uint32_t i = 0; i < q_heads * HD; i++)
		((float *)(arena + RAW_Q))[i] = val(seed, WHICH_Q, 0, 0, pos, i / HD, i % HD);
}

static void submit(struct kvp_client *c, uint8_t opcode, uint32_t len, uint64_t user_data)
{
	struct kvp_sqe *sqe = kvp_get_sqe(c);

	CHECK(sqe != NULL);
	*sqe = (struct kvp_sqe){ .opcode = opcode, .addr = RAW_HDR, .len = len,
				 .user_data = user_data };
}

/* An ATTEND straight on the ring, so that the daemon's checks answer, not the library's. */
static int raw_attend(struct kvp_client *c, uint64_t h, uint32_t n, uint32_t pos, uint32_t q_heads)
{
	struct kvp_cqe cqe;

	attend_header(c, h, n, pos, q_heads, 3);
	submit(c, KVP_OP_ATTEND, ATTEND_LEN(n), 77);
	CHECK_EQ(kvp_submit(c), 1);
	cqe = wait_one(c);
	CHECK_EQ(cqe.user_data, 77);
	return cqe.res;
}

static void limits(struct kvp_client *c, uint64_t h)
{
	/* Entries: 4097 of one key each is refused; 4096 of 1024 keys (2^22 in all) is not. */
	CHECK_EQ(raw_attend(c, h, KVP_ATTEND_MAX_SEQS + 1, 0, KV_HEADS), -E2BIG);
	CHECK_EQ(raw_attend(c, h, KVP_ATTEND_MAX_SEQS, KVP_ATTEND_MAX_KEYS / KVP_ATTEND_MAX_SEQS - 1,
			    KV_HEADS), 0);
	/* Keys: 1025 decode queries over 4096 tokens read 2^22 + 4096; 1024 exactly 2^22. */
	CHECK_EQ(raw_attend(c, h, ATK_SEQS + 1, CTX - 1, KV_HEADS), -E2BIG);
	CHECK_EQ(raw_attend(c, h, ATK_SEQS, CTX - 1, KV_HEADS), 0);
	/* Query heads: 258 (a multiple of the 2 kv heads) is refused, 256 is not. */
	CHECK_EQ(raw_attend(c, h, 1, CTX - 1, KVP_ATTEND_MAX_Q_HEADS + KV_HEADS), -E2BIG);
	CHECK_EQ(raw_attend(c, h, 1, CTX - 1, KVP_ATTEND_MAX_Q_HEADS), 0);
	/*
	 * Queries, summed over entries: 1 + 2^16 is refused at the second entry,
	 * before any of its queries is looked at (they would not even fit the arena).
	 */
	attend_header(c, h, 2, 0, KV_HEADS, 3);
	((struct kvp_attend *)((uint8_t *)kvp_arena(c, NULL) + RAW_HDR))->seqs[1].count =
		KVP_ATTEND_MAX_QUERIES;
	submit(c, KVP_OP_ATTEND, ATTEND_LEN(2), 78);
	CHECK_EQ(kvp_submit(c), 1);
	CHECK_EQ(wait_one(c).res, -E2BIG);
	printf("test_fair_attend: -E2BIG past %u entries, %u keys, %u queries, %u query heads; "
	       "each limit but the queries' exactly accepted\n", KVP_ATTEND_MAX_SEQS,
	       KVP_ATTEND_MAX_KEYS, KVP_ATTEND_MAX_QUERIES, KVP_ATTEND_MAX_Q_HEADS);
}

/* ---- the attacker ---- */

static void attack_submit(struct kvp_client *c, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		submit(c, KVP_OP_ATTEND, ATTEND_LEN(ATK_SEQS), 1);
	CHECK_EQ(kvp_submit(c), (int)n);
	__atomic_add_fetch(&atk->submitted, n, __ATOMIC_RELAXED);
}

static void attack_done(const struct kvp_cqe *cqe)
{
	CHECK_EQ(cqe->user_data, 1);
	if (cqe->res && !atk->error)
		atk->error = cqe->res;
	__atomic_add_fetch(&atk->completed, 1, __ATOMIC_RELAXED);
}

static int attacker(void *arg)
{
	struct kvp_connect_opts o = { .socket_path = dmn.socket, .pool = POOL, .sq_entries = ATK_SQ,
				      .arena_bytes = ATK_ARENA, .timeout_ms = 120000 };
	struct kvp_client *c;
	struct kvp_cqe cqe;

	(void)arg;
	if (geteuid() == 0)
		drop_to_uid(65534);
	CHECK_EQ(kvp_connect(&o, &c), 0);
	attend_header(c, kv_sequence(c, 1000000, 2, 0), ATK_SEQS, CTX - 1, ATK_Q_HEADS, 2);
	/*
	 * A NOP behind the first ones completes when it is taken, so once it is
	 * back the daemon has taken every ATTEND ahead of it; any it refused
	 * would have completed before it.
	 */
	attack_submit(c, ATK_FIRST);
	submit(c, KVP_OP_NOP, 0, 2);
	CHECK_EQ(kvp_submit(c), 1);
	while ((cqe = wait_one(c)).user_data != 2)
		attack_done(&cqe);
	CHECK_EQ(atk->error, 0);
	/* Then the whole SQ: what the daemon does not take yet waits there. */
	attack_submit(c, ATK_SQ - ATK_FIRST);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		cqe = wait_one(c);
		attack_done(&cqe);
		attack_submit(c, 1);
	}
}

/* ---- the bystander ---- */

/* A failing test must not leave its attacker behind. */
static void kill_attacker_at_exit(void)
{
	if (getpid() == main_pid && attacker_pid > 0)
		kill(attacker_pid, SIGKILL);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts @v; returns its median, *max its largest. */
static uint64_t p50(uint64_t *v, uint32_t n, uint64_t *max)
{
	qsort(v, n, sizeof(v[0]), cmp_u64);
	*max = v[n - 1];
	return v[n / 2];
}

/* The time since @t0 of a bystander's request that returned @ret; a failure ends the test. */
static uint64_t took(const char *what, int ret, uint64_t t0)
{
	uint64_t ns = test_now_ns() - t0;

	if (ret) {
		fprintf(stderr, "%s: %s after %.0f ms\n", what, strerror(-ret), (double)ns / 1e6);
		exit(1);
	}
	return ns;
}

/* The bystander's decode ATTEND: one query at CTX - 1 over the CTX tokens; its time. */
static uint64_t decode(struct kvp_client *c, uint64_t h, float (*out)[HD], const char *what)
{
	struct kvp_attend_req r = { .handle = h, .first_pos = CTX - 1, .count = 1, .q = q_by,
				    .out = out };
	uint64_t t0 = test_now_ns();

	return took(what, kvp_attend(c, 0, 0, BY_Q_HEADS, SCALE, 0, true, &r, 1), t0);
}

/* How long one of the attacker's tasks (CTX keys, 128 query heads) runs here, alone: ns. */
static uint64_t task_ns(struct kvp_client *c, uint64_t h, unsigned threads)
{
	uint64_t t[3], max;

	/* 4 entries x 2 kv heads: 8 such tasks (too many to split the keys), 8 / threads a worker. */
	for (int i = 0; i < 3; i++) {
		t[i] = test_now_ns();
		CHECK_EQ(raw_attend(c, h, 4, CTX - 1, ATK_Q_HEADS), 0);
		t[i] = test_now_ns() - t[i];
	}
	return p50(t, 3, &max) * threads / (4 * KV_HEADS);
}

static uint64_t at_least(uint64_t floor, uint64_t v)
{
	return v > floor ? v : floor;
}

/* Decode steps while the attacker runs, timed and checked. */
static void under_attack(struct kvp_client *c, uint64_t h, unsigned threads, uint64_t task)
{
	uint64_t atk_t[30], nop_t[30], wr_t[30], t0 = test_now_ns(), wall, amax, ap50, nmax, wmax;
	long cpu0, cpu1;
	uint32_t n = 0;
	double cores;

	/* 30 steps, or as many as 4 s allow (5 at least). */
	while (n < 30 && (n < 5 || test_now_ns() - t0 < 4000 * MS)) {
		uint64_t t = test_now_ns();

		wr_t[n] = took("WRITE_KV under attack",
			       kvp_write_kv(c, h, 0, 0, CTX, 1, kbuf[CTX], vbuf[CTX]), t);
		memset(out_now, 0xee, sizeof(out_now));
		atk_t[n] = decode(c, h, out_now, "decode ATTEND under attack");
		CHECK(memcmp(out_now, out_base, sizeof(out_now)) == 0);
		t = test_now_ns();
		nop_t[n++] = took("NOP under attack", kvp_nop(c), t);
		usleep(5000);
	}
	/* The daemon's CPU while the bystander asks nothing: the attacker's work alone. */
	cpu0 = daemon_cpu_ticks(&dmn);
	wall = test_now_ns();
	usleep(300000);
	cpu1 = daemon_cpu_ticks(&dmn);
	wall = test_now_ns() - wall;
	CHECK(cpu0 >= 0 && cpu1 >= 0);
	cores = (double)(cpu1 - cpu0) / (double)sysconf(_SC_CLK_TCK) / ((double)wall / 1e9);
	wall = test_now_ns() - t0;
	ap50 = p50(atk_t, n, &amax);
	p50(nop_t, n, &nmax);
	p50(wr_t, n, &wmax);
	printf("test_fair_attend: under attack decode ATTEND: p50 %.2f ms, max %.2f ms (%u steps)\n",
	       (double)ap50 / 1e6, (double)amax / 1e6, n);
	printf("test_fair_attend: under attack NOP max %.2f ms, decode WRITE_KV max %.2f ms\n",
	       (double)nmax / 1e6, (double)wmax / 1e6);
	printf("test_fair_attend: attacker: %llu worst ATTENDs submitted, %llu completed in %.0f "
	       "ms; daemon busy %.2f of %u cores meanwhile\n",
	       (unsigned long long)__atomic_load_n(&atk->submitted, __ATOMIC_RELAXED),
	       (unsigned long long)__atomic_load_n(&atk->completed, __ATOMIC_RELAXED),
	       (double)wall / 1e6, cores, threads);
	CHECK_EQ(atk->error, 0);
	/*
	 * The workers were the attacker's all along: with more of its taken
	 * ATTENDs unfinished than there are workers, one still has tasks not yet
	 * taken, and those go to any worker that is free.
	 */
	CHECK(__atomic_load_n(&atk->completed, __ATOMIC_RELAXED) + threads < ATK_FIRST);
	CHECK(cores >= 0.15 * threads); /* idle, it spins 50 us and sleeps: 0.0 */
	CHECK(ap50 <= at_least(50 * MS, 4 * task));
	CHECK(amax <= at_least(250 * MS, 8 * task));
	CHECK(wmax <= at_least(250 * MS, 8 * task));
	CHECK(nmax <= at_least(100 * MS, 8 * task));
}

static uint64_t clients_killed(struct kvp_client *admin)
{
	static uint8_t buf[1 << 16];
	struct kvp_stats_header hdr;

	CHECK(kvp_stats(admin, buf, sizeof(buf)) >= (int)sizeof(hdr));
	memcpy(&hdr, buf, sizeof(hdr));
	return hdr.clients_killed;
}

/* SIGKILL: once the daemon notices, the attacker's queued work is cancelled. */
static void kill_attacker(struct kvp_client *c, uint64_t h, pid_t pid, uint64_t base_p50,
			  uint64_t task, uint32_t by_blocks)
{
	struct kvp_client *admin = connect_or_die(&dmn, "", "", true);
	uint64_t killed0 = clients_killed(admin), t0, noticed, fast_at = 0, blocks_at = 0;
	uint64_t bound = 3 * base_p50 + 5 * MS, window = at_least(200 * MS, 3 * task);
	struct kvp_pool_stats st;

	CHECK_EQ(kill(pid, SIGKILL), 0);
	CHECK_EQ(wait_child(pid), 128 + SIGKILL);
	attacker_pid = 0;
	t0 = test_now_ns();
	while (clients_killed(admin) == killed0) {
		CHECK(test_now_ns() - t0 < 5000 * MS);
		usleep(1000);
	}
	noticed = test_now_ns();
	while (!fast_at || !blocks_at) {
		uint64_t ns = decode(c, h, out_now, "decode ATTEND after the kill");

		if (!fast_at && ns <= bound)
			fast_at = test_now_ns() - noticed;
		CHECK_EQ(kvp_pool_stats(c, &st), 0);
		if (!blocks_at && st.blocks_used == by_blocks)
			blocks_at = test_now_ns() - noticed;
		if (test_now_ns() - noticed > window) {
			fprintf(stderr, "%.0f ms after the daemon noticed the kill: %s (decode %.2f "
				"ms, bound %.2f ms; %u blocks used, the bystander's %u)\n",
				(double)window / 1e6, fast_at ? "blocks still pinned" :
				"decode still slow", (double)ns / 1e6, (double)bound / 1e6,
				st.blocks_used, by_blocks);
			exit(1);
		}
	}
	CHECK(memcmp(out_now, out_base, sizeof(out_now)) == 0);
	printf("test_fair_attend: after the kill: decode at baseline speed %.1f ms and the "
	       "attacker's blocks back %.1f ms after the daemon noticed\n", (double)fast_at / 1e6,
	       (double)blocks_at / 1e6);
	kvp_close(admin);
}

int main(void)
{
	static const char *const pool_kv[] = {
		"blocks=600", "block_size=16", "groups=full", "caching=off", "max_len=8192",
		"kv_heads=2", "head_dim=128", "dtype=f16", "layers_per_group=1", NULL,
	};
	cpu_set_t cpus;
	unsigned threads = sched_getaffinity(0, sizeof(cpus), &cpus) || CPU_COUNT(&cpus) >= 2 ? 2 : 1;
	const char *args[] = { "--threads", threads == 2 ? "2" : "1", NULL };
	struct kvp_connect_opts o = { .pool = POOL, .arena_bytes = BY_ARENA, .timeout_ms = 10000 };
	uint64_t base_t[20], h, base_p50, base_max, task;
	struct kvp_client *c;
	struct kvp_pool_stats st;
	pid_t pid;

	watchdog_start("test_fair_attend", 120);
	main_pid = getpid();
	atexit(kill_attacker_at_exit);
	atk = mmap(NULL, sizeof(*atk), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(atk != MAP_FAILED);
	CHECK_EQ(daemon_start(&dmn, args), 0);
	watchdog_watch(&dmn);
	daemon_open_to_all(&dmn);
	create_pool_or_die(&dmn, POOL, pool_kv);
	o.socket_path = dmn.socket;
	CHECK_EQ(kvp_connect(&o, &c), 0);

	/* The bystander's sequence: CTX tokens of KV, SPARE slots past them for its decode writes. */
	h = kv_sequence(c, 1, 1, SPARE);
	CHECK_EQ(kvp_pool_stats(c, &st), 0);
	CHECK_EQ(st.blocks_used, (CTX + SPARE) / BS);
	for (uint32_t qh = 0; qh < BY_Q_HEADS; qh++)
		for (uint32_t d = 0; d < HD; d++)
			q_by[qh][d] = val(1, WHICH_Q, 0, 0, CTX - 1, qh, d);

	limits(c, h);

	/* Baseline: the decode step alone, and one of the attacker's tasks alone. */
	for (uint32_t i = 0; i < 20; i++)
		base_t[i] = decode(c, h, i ? out_now : out_base, "decode ATTEND alone");
	CHECK(memcmp(out_now, out_base, sizeof(out_now)) == 0);
	base_p50 = p50(base_t, 20, &base_max);
	task = task_ns(c, h, threads);
	printf("test_fair_attend: baseline decode ATTEND (1 query, %u tokens): p50 %.2f ms, "
	       "max %.2f ms; one attacker task alone %.2f ms\n", CTX, (double)base_p50 / 1e6,
	       (double)base_max / 1e6, (double)task / 1e6);

	/* The attack, ready once the daemon has taken its first ATTENDs; then the kill. */
	fflush(NULL);
	pid = attacker_pid = fork_child_ready(attacker, NULL);
	under_attack(c, h, threads, task);
	kill_attacker(c, h, pid, base_p50, task, st.blocks_used);

	CHECK_EQ(kvp_seq_close(c, h), 0);
	kvp_close(c);
	watchdog_watch(NULL);
	CHECK_EQ(daemon_stop(&dmn), 0);
	return 0;
}
