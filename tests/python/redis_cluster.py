# SPDX-License-Identifier: MIT
"""A Redis Cluster of the tests' own: N masters (and optionally a replica each) of redis-server
on free loopback ports in a temporary directory, joined by `redis-cli --cluster create`, in
plain TCP or TLS (a CA of the test's own, made with the openssl CLI), with ACL users; kill -9
of a master and its failover, reshards; and a small RESP client to look at what kvpoold wrote
(redis-cli's text output mangles binary values).

In a network namespace (Cluster(netns=NAME, bind=..., announce_ip=...)): the nodes and every
redis-cli run under `ip netns exec NAME`, and this helper's own connections are made from inside
it (setns(2) around socket() and connect(): a socket stays in the namespace it was made in), so
a test in the root namespace looks at a cluster it has no route to."""

import contextlib
import ctypes
import os
import random
import shutil
import socket
import ssl
import subprocess
import time

import pytest

SLOTS = 16384
ADMIN_NAME = "kvpool-tests"  # the client name of this helper's connections
CLONE_NEWNET = 0x40000000    # setns(2)'s nstype for a network namespace


def free_ports(n):
    """n loopback TCP ports free now, each with port + 10000 free too (the cluster bus), both
    below the kernel's ephemeral range: a port from within it could be taken, between this
    check and redis-server's bind, by any connection's local end (a CI run lost two clusters
    so)."""
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ports = []
    for port in random.sample(range(10000, low - 10000), max(0, low - 20000)):
        if len(ports) == n:
            break
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        ports.append(port)
    if len(ports) < n:
        raise RuntimeError("not %d free port pairs below %d" % (n, low))
    return ports


@contextlib.contextmanager
def in_netns(name):
    """This thread in network namespace `name` (ip netns add's, /run/netns/NAME) for the block,
    then back in the one it was in; name None: nothing. Root only (CAP_SYS_ADMIN)."""
    if name is None:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open("/run/netns/" + name, os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "setns(%s): %s" % (name, os.strerror(e)))
        try:
            yield
        finally:
            if libc.setns(back, CLONE_NEWNET) != 0:  # never go on in the wrong namespace
                os._exit(99)
    finally:
        os.close(there)
        os.close(back)


class Resp:
    """One connection to one node: commands in, replies out (errors as RespError).
    tls: an ssl.SSLContext (the node's certificate checked against it); user, password: AUTH
    at connect (password alone: the default user's); name: CLIENT SETNAME, so that CLIENT
    LIST tells this helper's connections from kvpoold's. host: the node's address; netns: the
    network namespace the connection is made in (None: this process's)."""

    def __init__(self, port, tls=None, user=None, password=None, name=None, host="127.0.0.1",
                 netns=None):
        with in_netns(netns):
            self.sock = socket.create_connection((host, port), timeout=10)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.buf = b""
        if password is not None:
            self.call("AUTH", *([user] if user else []), password)
        if name is not None:
            self.call("CLIENT", "SETNAME", name)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _more(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._more()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError("bad reply %r" % line)

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self._reply()


class RespError(Exception):
    pass


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=60)


def make_certs(d, ip="127.0.0.1"):
    """A CA, a server certificate it signed for 127.0.0.1 (and ip) and localhost, a client
    certificate it signed, and another CA that signed nothing here. P-256 keys: RSA's keygen
    costs seconds on a loaded 2-core machine."""
    if not shutil.which("openssl"):
        pytest.skip("no openssl (apt-get install openssl)")
    d.mkdir(exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-new", *ec, "-keyout", ca + ".key", "-out", ca + ".crt",
                 "-days", "2", "-subj", "/CN=kvpool test " + ca, cwd=d)
    ips = "".join(",IP:" + a for a in dict.fromkeys(["127.0.0.1", ip]))[1:]
    (d / "server.ext").write_text("subjectAltName=%s,DNS:localhost\n" % ips)
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who, cn in (("server", "localhost"), ("client", "kvpool-client")):
        _openssl("req", "-new", *ec, "-keyout", who + ".key", "-out", who + ".csr",
                 "-subj", "/CN=" + cn, cwd=d)
        _openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", who + ".crt", "-days", "2", "-extfile",
                 who + ".ext", cwd=d)
    for key in d.glob("*.key"):
        key.chmod(0o600)


class Cluster:
    """`masters` redis-server processes in cluster mode, a cluster once started, each with
    `replicas` replicas. node_timeout_ms: cluster-node-timeout (how soon a dead master is
    failed over). tls: TLS only (no plain port), node to node too. acl: [(user, password,
    rules)] set on every node; the default user stays open, for this helper's own calls.
    full_coverage: cluster-require-full-coverage (no: the live masters keep serving their slots
    while a dead one's are not failed over yet).
    netns: a network namespace (ip netns add's) the nodes run in, redis-cli too, and this
    helper's connections are made in (in_netns); the caller makes it, with the addresses.
    bind: the nodes' --bind (default 127.0.0.1; "0.0.0.0": every address). announce_ip: the
    address the nodes give clients and each other (cluster-announce-ip) and the one this helper,
    redis-cli and `url` use; default: bind's, or 127.0.0.1 for 0.0.0.0."""

    def __init__(self, tmp_path, masters=3, replicas=0, node_timeout_ms=2000, tls=None, acl=None,
                 full_coverage=True, netns=None, bind="127.0.0.1", announce_ip=None):
        if not shutil.which("redis-server") or not shutil.which("redis-cli"):
            pytest.skip("no redis-server or redis-cli (apt-get install redis-server redis-tools)")
        self.netns = netns
        self.bind = bind
        self.announce_ip = announce_ip
        self.host = announce_ip or ("127.0.0.1" if bind in ("0.0.0.0", "*") else bind)
        self.dir = tmp_path / "redis"
        self.dir.mkdir()
        self.tls = bool(tls)
        self.node_timeout_ms = node_timeout_ms
        self.full_coverage = full_coverage
        self.users = []
        self.ctx = None
        if self.tls:
            certs = self.dir / "tls"
            make_certs(certs, self.host)
            self.ca_file = str(certs / "ca.crt")
            self.other_ca_file = str(certs / "other-ca.crt")
            self.server_cert, self.server_key = str(certs / "server.crt"), str(certs / "server.key")
            self.client_cert, self.client_key = str(certs / "client.crt"), str(certs / "client.key")
            self.ctx = ssl.create_default_context(cafile=self.ca_file)
        self.ports = free_ports(masters * (1 + replicas))
        self.procs = {}
        self.ids = {}
        self.held = {}  # a killed master's port: its replicas, told not to fail over yet
        self.lost = {}  # a killed master's port: the slots it served
        try:
            for port in self.ports:
                self.start_node(port)
            # redis-cli takes the first `masters` addresses as the masters (one host: no
            # interleaving), and gives each the next ones as replicas.
            addrs = ["%s:%d" % (self.host, p) for p in self.ports]
            self.cli("--cluster", "create", *addrs, "--cluster-replicas", str(replicas),
                     "--cluster-yes")
            for port in self.ports:
                with self.resp(port) as c:
                    self.ids[port] = c.call("CLUSTER", "MYID").decode()
            for user in acl or []:
                self.add_user(*user)
            self.wait_ok()
        except BaseException:  # a skip too: no redis-server left behind
            self.stop()
            raise

    # ---- processes ----

    def cmd(self, *args):
        """A command line to run in the cluster's namespace (as is without one)."""
        return (["ip", "netns", "exec", self.netns] if self.netns else []) + list(args)

    def start_node(self, port):
        d = self.dir / str(port)
        d.mkdir(exist_ok=True)
        args = ["redis-server", "--bind", self.bind, "--cluster-enabled", "yes",
                "--cluster-config-file", str(d / "nodes.conf"), "--dir", str(d),
                "--logfile", str(d / "redis.log"), "--save", "", "--appendonly", "no",
                "--cluster-node-timeout", str(self.node_timeout_ms), "--protected-mode", "no",
                # A replica fails over however long its link was down (the default: not after
                # 10 node timeouts), and stays with its master.
                "--cluster-replica-validity-factor", "0",
                "--cluster-allow-replica-migration", "no",
                "--cluster-require-full-coverage", "yes" if self.full_coverage else "no",
                # A replica's first sync at once (7.0 waits 5 s for more replicas by default).
                "--repl-diskless-sync-delay", "0"]
        if self.announce_ip:
            args += ["--cluster-announce-ip", self.announce_ip]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", self.server_cert,
                     "--tls-key-file", self.server_key, "--tls-ca-cert-file", self.ca_file,
                     "--tls-cluster", "yes", "--tls-replication", "yes",
                     "--tls-auth-clients", "optional"]
        else:
            args += ["--port", str(port)]
        err = open(d / "stderr", "w")
        # ip netns exec execs the command: the Popen's process is redis-server itself.
        self.procs[port] = subprocess.Popen(self.cmd(*args), stdout=err,
                                            stderr=subprocess.STDOUT)
        err.close()
        for _ in range(250):
            if self.procs[port].poll() is not None:
                # Its own words are in its log file; ip netns exec's on stderr.
                log = d / "redis.log"
                why = ((d / "stderr").read_text() + (log.read_text() if log.exists() else ""))[-800:]
                if self.tls and "tls" in why.lower():
                    pytest.skip("redis-server without TLS? it said: " + why)
                raise RuntimeError("redis-server on %d exited: %s" % (port, why))
            try:
                self.resp(port).close()
                return
            except (OSError, ssl.SSLError):
                time.sleep(0.02)
        raise RuntimeError("redis-server on %d did not start" % port)

    def alive(self, port):
        return self.procs[port].poll() is None

    def live(self):
        return [p for p in self.ports if self.alive(p)]

    def resp(self, port, user=None, password=None):
        """A connection to the node on port (TLS when the cluster is), AUTHed when given; the
        helper's own (the default user's) named ADMIN_NAME."""
        return Resp(port, self.ctx, user, password, None if user else ADMIN_NAME,
                    host=self.host, netns=self.netns)

    def cli_args(self):
        """redis-cli's arguments for this cluster's transport."""
        return ["--tls", "--cacert", self.ca_file] if self.tls else []

    def cli(self, *args, timeout=120):
        r = subprocess.run(self.cmd("redis-cli", *self.cli_args(), *args),
                           stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 or "[ERR]" in r.stdout:
            raise RuntimeError("redis-cli %s: %s%s" % (" ".join(args), r.stdout[-2000:],
                                                      r.stderr[-2000:]))
        return r.stdout

    # ---- the cluster's state ----

    def nodes(self):
        """CLUSTER NODES of the first live node that answers: {port: (flags, master's port or
        None, [slot ranges as (first, last)])}."""
        for port in self.live():
            try:
                with self.resp(port) as c:
                    text = c.call("CLUSTER", "NODES").decode()
            except (OSError, RespError):
                continue
            by_id = {}
            for line in text.splitlines():
                f = line.split()
                addr = f[1].split(",")[0].split("@")[0]
                ranges = []
                for s in f[8:]:
                    if s.startswith("["):  # a slot being migrated or imported
                        continue
                    a, _, b = s.partition("-")
                    ranges.append((int(a), int(b or a)))
                by_id[f[0]] = (int(addr.rsplit(":", 1)[1]), set(f[2].split(",")), f[3], ranges)
            return {p: (flags, by_id[m][0] if m in by_id else None, ranges)
                    for p, flags, m, ranges in by_id.values()}
        raise RuntimeError("no node answers")

    def masters(self):
        """The ports now master, not failed, live."""
        nodes = self.nodes()
        return [p for p in self.ports if p in nodes and "master" in nodes[p][0] and
                not nodes[p][0] & {"fail", "fail?"} and self.alive(p)]

    def replicas_of(self, port):
        nodes = self.nodes()
        return [p for p in self.ports if p in nodes and nodes[p][1] == port and
                "slave" in nodes[p][0]]

    def node_id(self, port):
        return self.ids[port]

    def ranges(self, port=None):
        """CLUSTER SLOTS of the node on port (default: a live one), as [(first, last, master's
        port)]. The port it gives is the one clients use: with TLS, the TLS port."""
        with self.resp(port or self.live()[0]) as c:
            return sorted((r[0], r[1], r[2][1]) for r in c.call("CLUSTER", "SLOTS"))

    def slot_map(self, port=None):
        """{slot: master's port}, as the node on port (default: a live one) maps them."""
        return {s: p for a, b, p in self.ranges(port) for s in range(a, b + 1)}

    def slots_of(self, port):
        """The slots the master on port serves, ascending."""
        return [s for a, b, p in self.ranges() if p == port for s in range(a, b + 1)]

    def keyslot(self, key):
        with self.resp(self.live()[0]) as c:
            return c.call("CLUSTER", "KEYSLOT", key)

    def master_of(self, key):
        """The port of the master serving key's slot now."""
        slot = self.keyslot(key)
        return next(p for a, b, p in self.ranges() if a <= slot <= b)

    def _all_ok(self, ports):
        for port in ports:
            with self.resp(port) as c:
                if b"cluster_state:ok" not in c.call("CLUSTER", "INFO"):
                    return False
        return True

    def wait_ok(self, timeout=30):
        """Every live node says cluster_state:ok, and every replica's link to its master is
        up (its first sync done)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._all_ok(self.live()) and all(
                        self._info(p, "master_link_status") == "up"
                        for p, (flags, _, _) in self.nodes().items()
                        if "slave" in flags and self.alive(p)):
                    return
            except (OSError, RespError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not come up")
            time.sleep(0.05)

    def _info(self, port, field, section="replication"):
        with self.resp(port) as c:
            text = c.call("INFO", section).decode()
        for line in text.splitlines():
            if line.startswith(field + ":"):
                return line.split(":", 1)[1]
        return None

    def wait_replicated(self, timeout=10):
        """Until every live replica has all its master wrote (their offsets equal): a master
        killed after this loses nothing."""
        deadline = time.monotonic() + timeout
        while True:
            lag = []
            for p, (flags, m, _) in self.nodes().items():
                if "slave" in flags and self.alive(p) and m is not None and self.alive(m):
                    got = self._info(p, "slave_repl_offset")
                    want = self._info(m, "master_repl_offset")
                    if got != want:
                        lag.append((p, got, m, want))
            if not lag:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("replicas behind: %r" % lag)
            time.sleep(0.02)

    # ---- failures and changes ----

    def kill_master(self, port, hold_failover=False):
        """kill -9 the node on port. hold_failover: its replicas are first told not to fail
        over (cluster-replica-no-failover) until wait_failover: the dead master's slots stay
        unserved for as long as a test looks at that."""
        self.lost[port] = self.slots_of(port)
        if hold_failover:
            self.held[port] = self.replicas_of(port)
            for r in self.held[port]:
                with self.resp(r) as c:
                    c.call("CONFIG", "SET", "cluster-replica-no-failover", "yes")
        self.procs[port].kill()
        self.procs[port].wait()

    def wait_failover(self, port, timeout=30):
        """Until a live node flags the dead node on port `fail`, every live node maps every
        slot to a live master and says cluster_state:ok. Returns the port of the master that
        now serves the slots the dead one did."""
        for r in self.held.pop(port, []):
            with self.resp(r) as c:
                c.call("CONFIG", "SET", "cluster-replica-no-failover", "no")
        deadline = time.monotonic() + timeout
        dead = self.ids[port]
        while True:
            try:
                live = self.live()
                with self.resp(live[0]) as c:
                    text = c.call("CLUSTER", "NODES").decode()
                failed = any(line.startswith(dead + " ") and
                             "fail" in line.split()[2].split(",") for line in text.splitlines())
                maps = [self.ranges(p) for p in live] if failed else []
                if failed and all(m == maps[0] for m in maps) and \
                        sum(b - a + 1 for a, b, _ in maps[0]) == SLOTS and \
                        {p for _, _, p in maps[0]} <= set(live) and self._all_ok(live):
                    lost = self.lost.pop(port, [])
                    heirs = {p for a, b, p in maps[0] for s in lost if a <= s <= b}
                    return heirs.pop() if len(heirs) == 1 else None
            except (OSError, RespError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("no failover of %d in %ss" % (port, timeout))
            time.sleep(0.05)

    def revive(self, port):
        """The node on port started again (its nodes.conf, its dump.rdb if a SAVE left one),
        its ACL users set again."""
        self.start_node(port)
        for user in self.users:
            self._set_user(port, *user)
        self.wait_ok()

    def begin_migration(self, slot, from_port, to_port):
        """Slot half moved, as a reshard leaves it between its steps: from_port's master
        MIGRATING it, to_port's IMPORTING it; a key of it moved by migrate_keys is answered
        ASK by the first (and served by the second after ASKING)."""
        with self.resp(to_port) as c:
            c.call("CLUSTER", "SETSLOT", slot, "IMPORTING", self.ids[from_port])
        with self.resp(from_port) as c:
            c.call("CLUSTER", "SETSLOT", slot, "MIGRATING", self.ids[to_port])

    def migrate_keys(self, slot, from_port, to_port):
        """The keys of slot moved (MIGRATE) from from_port's master to to_port's; how many."""
        with self.resp(from_port) as c:
            keys = c.call("CLUSTER", "GETKEYSINSLOT", slot, 1000)
            if keys:
                c.call("MIGRATE", self.host, to_port, "", 0, 5000, "KEYS", *keys)
        return len(keys)

    def end_migration(self, slot, to_port):
        """Slot to_port's, as every master is told (the slot's owners first)."""
        order = [to_port] + [p for p in self.masters() if p != to_port]
        for port in order:
            with self.resp(port) as c:
                c.call("CLUSTER", "SETSLOT", slot, "NODE", self.ids[to_port])

    def reshard(self, from_port, to_port, slots, wait=True):
        """Moves the `slots` lowest slots of from_port's master to to_port's (redis-cli
        --cluster reshard: keys by MIGRATE, clients answered ASK meanwhile). wait=False: the
        running redis-cli (a Popen, output in the cluster's directory); reshard_done() waits."""
        args = self.cmd("redis-cli", *self.cli_args(), "--cluster", "reshard",
                        "%s:%d" % (self.host, from_port), "--cluster-from", self.ids[from_port],
                        "--cluster-to", self.ids[to_port], "--cluster-slots", str(slots),
                        "--cluster-yes")
        out = open(self.dir / "reshard.log", "w")
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
        out.close()
        return self.reshard_done(proc) if wait else proc

    def reshard_done(self, proc, timeout=120):
        rc = proc.wait(timeout=timeout)
        log = (self.dir / "reshard.log").read_text()
        if rc != 0 or "[ERR]" in log:
            raise RuntimeError("reshard failed (%d): %s" % (rc, log[-2000:]))
        return log

    def add_user(self, name, password, rules):
        """ACL SETUSER name on every live node (replicas too: ACLs are a node's own, and a
        replica that takes over must know the user). rules: as ACL SETUSER takes them, space
        separated ("~kvpool:* +get +set ...")."""
        self.users.append((name, password, rules))
        for port in self.live():
            self._set_user(port, name, password, rules)

    def _set_user(self, port, name, password, rules):
        with self.resp(port) as c:
            c.call("ACL", "SETUSER", name, "reset", "on", ">" + password, *rules.split())

    @property
    def url(self):
        scheme = "rediss://" if self.tls else "redis://"
        return scheme + ",".join("%s:%d" % (self.host, p) for p in self.ports[:2])

    # ---- keys ----

    def keys(self):
        """Every key of every live master."""
        out = []
        for port in self.masters():
            with self.resp(port) as c:
                out += c.call("KEYS", "*")
        return out

    def call(self, *args):
        """A command on a key (args[1]) at the master serving it, following one MOVED."""
        port = self.masters()[0]
        for _ in range(2):
            with self.resp(port) as c:
                try:
                    return c.call(*args)
                except RespError as e:
                    if not str(e).startswith("MOVED"):
                        raise
                    port = int(str(e).split()[2].rsplit(":", 1)[1])
        raise RespError("MOVED twice")

    def get(self, key):
        return self.call("GET", key)

    def set(self, key, value):
        return self.call("SET", key, value)

    def restart(self):
        """Every node started again on its port, with its nodes.conf: the same cluster (its
        ACL users set again: they live in no file)."""
        self.stop()
        for port in self.ports:
            self.start_node(port)
        for user in self.users:
            for port in self.ports:
                self._set_user(port, *user)
        self.wait_ok()

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        for p in self.procs.values():
            p.wait()
