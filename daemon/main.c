/* SPDX-License-Identifier: MIT */
/* kvpoold: options, the listening socket, pools from the config, then the loop. */
#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "serve.h"
#include "handover/handover.h"
#include "pools/pools.h"

static const char usage[] =
	"Usage: kvpoold [OPTION]...\n"
	"Own the KV-cache memory of LLM inference and serve it to engine processes.\n"
	"\n"
	"  -s, --socket PATH      listen on PATH (default " KVP_DEFAULT_SOCKET ")\n"
	"  -c, --config FILE      read daemon settings, pools and namespaces from FILE (INI)\n"
	"  -g, --group NAME       give the socket to group NAME (mode 0660)\n"
	"      --spin-us N        spin on the clients' rings N µs before sleeping (default 50;\n"
	"                         0 sleeps at once; spinning stops when clients outnumber cores);\n"
	"                         a worker thread out of tasks spins as long for the next one\n"
	"      --budget N         entries taken from one client per loop turn (default 64)\n"
	"      --max-clients N    connections served at once (default 128; lowered to what\n"
	"                         RLIMIT_NOFILE allows, which is raised to its hard limit)\n"
	"      --event-loop KIND  auto (default), io_uring or epoll: auto runs io_uring when\n"
	"                         it works and has multishot accept and poll, else epoll\n"
	"                         (containers whose seccomp profile refuses io_uring,\n"
	"                         gVisor, kernel.io_uring_disabled); clients see no\n"
	"                         difference. io_uring where it is unavailable exits 1\n"
	"      --plugin-dir DIR   load the CUDA backend (libkvpool_cuda.so) from DIR only;\n"
	"                         without it: %s, else gpu/ beside\n"
	"                         the daemon (a build tree). It is loaded when the first\n"
	"                         backend=cuda pool is created\n"
	"  -t, --threads N        worker threads for WRITE_KV, READ_KV and ATTEND, and the\n"
	"                         most tasks running at once, the event loop's included\n"
	"                         (default: the online cores)\n"
	"  -v, --verbose          log at level debug (kvctl's connections too)\n"
	"  -q, --quiet            log warnings and errors only; twice: errors only\n"
	"  -h, --help             show this help and exit\n"
	"  -V, --version          print \"kvpoold VERSION\" and exit\n"
	"\n"
	"The config file (INI; options on the command line win over [daemon]):\n"
	"  [daemon]          socket, socket_group, spin_us, budget, max_clients,\n"
	"                    event_loop, plugin_dir, threads, log_level (error,\n"
	"                    warning, notice, info or debug)\n"
	"  [pool.NAME]       blocks, block_size, groups (\"full swa:128\"; kinds full,\n"
	"                    swa:W, rswa:W, chunked:C, cyclic:W), caching=on|off,\n"
	"                    free_order=split|append, publish=commit|alloc, max_len,\n"
	"                    max_step_tokens; to hold KV: kv_heads, head_dim,\n"
	"                    dtype=f32|f16|bf16, layers_per_group; where it lies:\n"
	"                    backend=host|cuda, device=N (cuda), layout=block|layer\n"
	"                    (default block for host, layer for cuda),\n"
	"                    namespace=NAME (only that namespace's clients attach,\n"
	"                    and they may map the pool's memory; default: all)\n"
	"  [namespace.NAME]  uids = 1000 1001   (the uids that may use namespace NAME;\n"
	"                    the shared namespace \"\" is open to all, and root and the\n"
	"                    daemon's uid may use any), and the quota keys below for\n"
	"                    all of its clients together\n"
	"  [quota]           quota keys: every uid's (root's and the daemon's uid's\n"
	"                    only in a [uid.N] section of their own)\n"
	"  [uid.N]           quota keys of uid N (the others: [quota]'s)\n"
	"Quota keys, a number or \"unlimited\": max_clients (connections, default 32;\n"
	"past it a connection is refused with EUSERS), max_sequences (65536),\n"
	"max_tokens (tokens in open sequences, 16777216), max_arena_bytes (the\n"
	"connections' arenas, 268435456), max_blocks (distinct blocks held in one\n"
	"pool, unlimited); past one a request fails with EDQUOT, an ALLOC before free\n"
	"space is looked at. The last 4 --max-clients slots are kept for root and the\n"
	"daemon's uid; a connection that sends no setup within 1 s is closed. See\n"
	"docs/reliability.md.\n"
	"\n"
	"Logging: to stderr, at level info unless -v, -q or log_level say otherwise:\n"
	"start-up and the event loop it runs (\"event loop: io_uring\" or \"event loop:\n"
	"epoll (io_uring unavailable: REASON)\"; kvctl stats shows it too) at notice,\n"
	"a line per client connect, disconnect and kill (pid, uid, namespace, pool)\n"
	"and per pool created or destroyed at info, kvctl's connections at debug;\n"
	"nothing per request. Started by systemd (JOURNAL_STREAM set), a\n"
	"line starts with its syslog priority, \"<6>\", for the journal.\n"
	"\n"
	"It holds SOCKET.lock (flock) beside the socket while it runs: a socket whose\n"
	"lock is free and at which nothing answers is a dead daemon's, and is replaced.\n"
	"Socket activation: given a listening socket by systemd (LISTEN_PID and\n"
	"LISTEN_FDS=1, kvpoold.socket's ListenSequentialPacket=), the daemon serves\n"
	"on it, takes no lock and leaves the path to systemd at exit; --socket and\n"
	"socket= are then not used.\n"
	"\n"
	"A planned restart (kvctl daemon restart) keeps the cache: the daemon finishes\n"
	"the requests it took, closes every connection and execs the binary it was\n"
	"started from (or the one named) in the same process, handing over its pools'\n"
	"KV memory, prefix cache and host tiers, its socket and SOCKET.lock; a pool\n"
	"whose shape changed in the config starts empty, logged (docs/reliability.md).\n"
	"Under systemd (Type=notify, $NOTIFY_SOCKET) it sends READY=1 once it serves,\n"
	"and SIGTERM hands the same to the service's file descriptor store (FDSTORE=1)\n"
	"for the next start, which takes it back beside the socket (LISTEN_FDNAMES).\n"
	"\n"
	"Without --config the daemon starts with no pool; admin clients (root or the\n"
	"daemon's uid) create pools with `kvctl pool create`. SIGTERM or SIGINT stops\n"
	"accepting and taking requests, finishes the ones it took and exits 0. SIGHUP\n"
	"reads the config file again, keeping every client: new pools are created;\n"
	"namespaces, grants and quotas apply to new requests at once; a pool gone\n"
	"from the file is destroyed once nothing uses it; a pool whose parameters\n"
	"changed keeps its own (logged, naming the key); of [daemon] only log_level\n"
	"applies before a restart; a file that does not load changes nothing.\n"
	"\n"
	"A pool's KV lives in a memfd, on 2 MiB huge pages when enough are reserved\n"
	"(/proc/sys/vm/nr_hugepages) when the pool is created, else on small pages;\n"
	"its \"pool ... created\" log line says which. Huge pages spare a TLB miss on\n"
	"every block read.\n"
	"\n"
	"A config pool that cannot be created stops the daemon at start, with the\n"
	"reason (\"pool g1: cuda backend not available: ...\"); one created at run\n"
	"time (kvctl pool create) is refused with the reason and the daemon goes on.\n"
	"\n"
	"Exit status: 0 after SIGTERM or SIGINT; 1 for a bad option or when the config,\n"
	"a pool, the socket or the event loop cannot be set up. See kvpoold(8),\n"
	"kvpool.conf(5) and docs/protocol.md.\n";

static int parse_count(const char *s, unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/*
 * Descriptors kept for everything but clients: the ones open now, the loop's
 * own (listening socket, lock, signalfd, timerfd, event loop, workers'
 * eventfd, each courier lane's socketpair and pidfd), and room for short-lived ones
 * (a setup's memfd and doorbell eventfd until the courier has sent them, a
 * pool's memfd, a connection accepted only to be refused).
 */
#define FDS_RESERVED (16 + 3 * KVPD_COURIER_LANES)
#define FDS_PER_CLIENT 2 /* its socket and its doorbell set */

static unsigned fds_open(void)
{
	DIR *dir = opendir("/proc/self/fd");
	unsigned n = 0;

	if (!dir)
		return 64; /* no /proc: assume plenty are */
	while (readdir(dir))
		n++;
	closedir(dir);
	return n > 3 ? n - 3 : 0; /* ".", ".." and the directory's own */
}

/*
 * Raises RLIMIT_NOFILE's soft limit to its hard one and lowers max_clients to
 * what fits: with more, accept would fail with EMFILE while slots look free.
 */
/* This run's id: random (never 0, which says "a daemon before boot ids"), or -errno. */
static int make_boot_id(uint64_t *id)
{
	do {
		if (getrandom(id, sizeof(*id), 0) != (ssize_t)sizeof(*id))
			return -errno ?: -EIO;
	} while (!*id);
	return 0;
}

static void fit_descriptors(struct kvpd *d)
{
	struct rlimit rl;
	rlim_t used, fit;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t soft = rl.rlim_cur;

		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			rl.rlim_cur = soft;
	}
	used = fds_open() + FDS_RESERVED;
	fit = rl.rlim_cur > used + FDS_PER_CLIENT ? (rl.rlim_cur - used) / FDS_PER_CLIENT : 1;
	if (d->cfg.max_clients > fit) {
		kvpd_log(d, KVPD_LOG_WARNING, "max_clients %u capped to %llu: RLIMIT_NOFILE is %llu", d->cfg.max_clients,
			  (unsigned long long)fit, (unsigned long long)rl.rlim_cur);
		d->cfg.max_clients = (unsigned)fit;
	}
}

static int parse_args(struct kvpd *d, int argc, char **argv)
{
	enum { OPT_SPIN = 256, OPT_BUDGET, OPT_MAX_CLIENTS, OPT_EVENT_LOOP, OPT_PLUGIN_DIR };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "config", required_argument, NULL, 'c' },
		{ "group", required_argument, NULL, 'g' },
		{ "spin-us", required_argument, NULL, OPT_SPIN },
		{ "budget", required_argument, NULL, OPT_BUDGET },
		{ "max-clients", required_argument, NULL, OPT_MAX_CLIENTS },
		{ "event-loop", required_argument, NULL, OPT_EVENT_LOOP },
		{ "plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR },
		{ "threads", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	/* Command-line values win over the config file's: remember them, apply after loading. */
	const char *socket = NULL, *group = NULL, *plugin_dir = NULL;
	enum kvpd_evloop_choice event_loop = KVPD_EVLOOP_AUTO;
	bool event_loop_set = false;
	unsigned spin = ~0u, budget = 0, max_clients = 0, threads = 0, verbose = 0, quiet = 0;
	int c, ret;

	while ((c = getopt_long(argc, argv, "s:c:g:t:vqhV", opts, NULL)) != -1) {
		switch (c) {
		case 's': socket = optarg; break;
		case 'c': d->config_path = optarg; break;
		case 'g': group = optarg; break;
		case OPT_PLUGIN_DIR: plugin_dir = optarg; break;
		case 'v': verbose++; break;
		case 'q': quiet++; break;
		case 'h': printf(usage, kvpd_plugin_install_dir()); exit(0);
		case 'V': puts("kvpoold " KVPOOL_VERSION); exit(0);
		case OPT_SPIN:
			if (parse_count(optarg, KVPD_SPIN_US_MAX, &spin))
				goto bad_value;
			break;
		case OPT_BUDGET:
			if (parse_count(optarg, KVPD_BUDGET_MAX, &budget) || !budget)
				goto bad_value;
			break;
		case 't':
			if (parse_count(optarg, KVPD_THREADS_MAX, &threads) || !threads)
				goto bad_value;
			break;
		case OPT_MAX_CLIENTS:
			if (parse_count(optarg, KVPD_MAX_CLIENTS_MAX, &max_clients) || !max_clients)
				goto bad_value;
			break;
		case OPT_EVENT_LOOP:
			if (kvpd_parse_event_loop(optarg, &event_loop))
				goto bad_value;
			event_loop_set = true;
			break;
		default:
			goto usage;
		}
	}
	if (optind != argc)
		goto usage;
	if (d->config_path && (ret = kvpd_config_load(&d->cfg, d->config_path, &d->log)))
		return ret;
	d->cli = (struct kvpd_cli){ .socket = socket, .group = group, .plugin_dir = plugin_dir,
				    .spin_us = spin, .budget = budget, .max_clients = max_clients,
				    .threads = threads, .event_loop = event_loop_set ? (int)event_loop : -1 };
	if (quiet)
		d->cli.log_level = quiet > 1 ? KVPD_LOG_ERR : KVPD_LOG_WARNING;
	else if (verbose)
		d->cli.log_level = KVPD_LOG_DEBUG;
	kvpd_cli_apply(&d->cfg, &d->cli);
	d->log.level = d->cfg.log_level ?: KVPD_LOG_DEFAULT;
	return 0;

bad_value:
	fprintf(stderr, "kvpoold: bad value '%s' for --%s\n", optarg,
		c == OPT_SPIN ? "spin-us" : c == OPT_BUDGET ? "budget" : c == 't' ? "threads" :
		c == OPT_EVENT_LOOP ? "event-loop" : "max-clients");
	return -EINVAL;
usage:
	fputs("Try 'kvpoold --help' for more information.\n", stderr);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	/* The rooms' state that the context only points to (kvpoold.h). */
	struct kvpd_workers workers = { 0 };
	struct kvpd_plugin cuda = { 0 };
	struct kvpd_statpage stats = { .fd = -1 };
	struct kvpd_handover handover = { .exe_fd = -1, .self_fd = -1, .state_fd = -1,
					  .listen_fd = -1, .lock_fd = -1 };
	struct kvpd d = {
		.log = { .level = KVPD_LOG_DEFAULT, .journal = kvpd_log_to_journal() },
		.listen_fd = -1, .lock_fd = -1, .signal_fd = -1, .timer_fd = -1,
		.workers = &workers, .cuda = &cuda, .stats = &stats, .handover = &handover,
	};
	char why[KVP_REASON_MAX];
	sigset_t stop;
	int ret, inherited;

	/*
	 * Held from the start, for the signalfd that reads them once the loop
	 * runs: a SIGTERM the moment the socket appears must not kill the daemon
	 * half set up, leaving its socket and lock behind.
	 */
	kvpd_signal_set(&stop);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	kvpd_config_defaults(&d.cfg);
	ret = parse_args(&d, argc, argv);
	if (ret)
		goto out_config;
	/*
	 * systemd's socket, and what a stop put in its descriptor store; or a
	 * planned restart's socket and lock: the state, restored with the pools.
	 */
	kvpd_notify_init(&d);
	inherited = kvpd_inherit_socket(&d, why, sizeof(why));
	if (inherited < 0) {
		kvpd_log(&d, KVPD_LOG_ERR, "%s", why);
		ret = inherited;
		goto out_config;
	}
	ret = kvpd_handover_start(&d, argc, argv);
	if (!ret && handover.listen_fd >= 0 && (ret = kvpd_listen_handed(&d, why, sizeof(why))))
		kvpd_log(&d, KVPD_LOG_ERR, "restart: %s", why);
	if (ret)
		goto out_config;
	if (d.cfg.socket_group && !getgrnam(d.cfg.socket_group)) {
		kvpd_log(&d, KVPD_LOG_ERR, "socket group '%s': no such group", d.cfg.socket_group);
		ret = -ENOENT;
		goto out_config;
	}
	ret = make_boot_id(&d.boot_id);
	if (ret) {
		kvpd_log(&d, KVPD_LOG_ERR, "getrandom: %s", strerror(-ret));
		goto out_config;
	}
	fit_descriptors(&d);
	d.ncpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (!d.cfg.threads)
		d.cfg.threads = d.ncpus > 0 ? (unsigned)d.ncpus : 1;
	d.clients = calloc(d.cfg.max_clients, sizeof(*d.clients));
	d.active = calloc(d.cfg.max_clients, sizeof(*d.active));
	if (!d.clients || !d.active) {
		ret = -ENOMEM;
		goto out_config;
	}
	d.courier.log = &d.log;
	ret = kvpd_courier_spawn(&d.courier);
	if (ret)
		kvpd_log(&d, KVPD_LOG_WARNING, "courier process: %s; a lane without one makes its "
			 "calls on its thread, and a client's wake-ups can stall the loop's "
			 "page-table changes", strerror(-ret));
	ret = kvpd_statpage_init(&d, &kvpd_stats_hooks);
	if (ret) {
		kvpd_log(&d, KVPD_LOG_ERR, "stats page: %s", strerror(-ret));
		goto out_clients;
	}
	ret = kvpd_pools_start(&d);
	if (ret)
		goto out_pools;
	if (d.listen_fd < 0) {
		ret = kvpd_listen_on(&d);
		if (ret) {
			kvpd_log(&d, KVPD_LOG_ERR, "%s: %s", d.cfg.socket_path,
				 ret == -EADDRINUSE ? "another kvpoold is listening there" :
				 strerror(-ret));
			goto out_pools;
		}
	} else {
		if (d.inherited_path && d.cli.socket && strcmp(d.cli.socket, d.cfg.socket_path))
			kvpd_log(&d, KVPD_LOG_WARNING, "--socket %s ignored: systemd passed %s",
				 d.cli.socket, d.cfg.socket_path);
		ret = 0;
	}
	ret = kvpd_workers_start(d.workers, d.cfg.threads, d.cfg.spin_us, kvpd_job_run);
	if (ret) {
		kvpd_log(&d, KVPD_LOG_ERR, "worker threads: %s", strerror(-ret));
		goto out_listen;
	}
	ret = kvpd_courier_start(&d.courier);
	if (ret) {
		kvpd_log(&d, KVPD_LOG_ERR, "courier thread: %s", strerror(-ret));
		goto out_workers;
	}
	ret = kvpd_loop_init(&d); /* says why it failed */
	if (ret)
		goto out_courier;
	kvpd_log(&d, KVPD_LOG_NOTICE, "listening on %s%s, %ld cores, spin %u us, kvpoold %s",
		 d.cfg.socket_path, d.inherited_path ? " (from systemd)" : "", d.ncpus, d.cfg.spin_us,
		 KVPOOL_VERSION);
	kvpd_notify(&d, "READY=1", NULL, 0); /* Type=notify: serving */
	ret = kvpd_loop_run(&d);
	/*
	 * A restart, or a stop under systemd: the cache's state written once every
	 * client is gone; then the exec, or systemd's store. A restart that cannot
	 * write it serves on; a stop exits.
	 */
	while (!ret && handover.requested) {
		kvpd_clients_close_all(&d, handover.to_store ? "daemon stopping" : "daemon restarting");
		if (!kvpd_handover_save(&d)) {
			if (handover.to_store)
				kvpd_handover_store(&d);
			break;
		}
		if (handover.to_store)
			break;
		ret = kvpd_loop_resume(&d) ?: kvpd_loop_run(&d);
	}
	if (ret)
		kvpd_log(&d, KVPD_LOG_ERR, "event loop: %s", strerror(-ret));
	kvpd_loop_exit(&d);
out_courier:
	kvpd_courier_stop(&d.courier);
out_workers:
	kvpd_workers_stop(d.workers);
out_listen:
	/* A restart hands the socket and the lock to the next run: no gap, no other daemon. */
	if (!kvpd_handover_keeps_socket(&d)) {
		close(d.listen_fd);
		if (!d.inherited_path) { /* else the path is systemd's, as is the socket */
			unlink(d.cfg.socket_path);
			kvpd_unlock_socket_path(d.cfg.socket_path, d.lock_fd);
		}
	}
out_pools:
	kvpd_pools_release(&d);
	kvpd_plugin_unload(d.cuda); /* after every cuda pool's pool_fini */
	kvpd_statpage_fini(&d);
out_clients:
	kvpd_courier_stop(&d.courier); /* the process, when the thread never started */
	free(d.clients);
	free(d.active);
out_config:
	if (kvpd_handover_keeps_socket(&d) && !ret)
		kvpd_handover_exec(&d); /* returns only when nothing could run */
	kvpd_config_release(&d.cfg);
	free(d.inherited_path);
	return ret || handover.state_fd >= 0 ? 1 : 0;
}
