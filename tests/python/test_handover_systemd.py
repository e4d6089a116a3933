# SPDX-License-Identifier: MIT
"""kvpoold under systemd (Type=notify, socket activation, a file descriptor store), the test
playing systemd: it owns the listening socket and the notify socket, keeps what a stop hands
it with FDSTORE=1 and passes it back to the next start in LISTEN_FDS / LISTEN_FDNAMES, as
`systemctl restart` does. The next start answers every LOOKUP as before, KV byte-equal, and
asks the store to let the descriptors go."""

import os
import signal
import socket
import subprocess
import time

import pytest

import kvpool
from conftest import DAEMON
from test_handover import check_kv, config, fill, lookups, pool_row


class Systemd:
    """The listening socket and the notify socket of a service, in tmp."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.path = str(tmp / "kvpool.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(self.path)
        self.listener.listen(128)
        self.notify_path = str(tmp / "notify.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.store = {}  # FDNAME -> descriptor
        (tmp / "kvpool.ini").write_text(config(tmp))
        self.proc = None

    @property
    def socket(self):
        return self.path

    def client(self, **kw):
        return kvpool.Client(self.path, **kw)

    def start(self):
        """The service started with the socket and the store's descriptors, in that order."""
        names = ["kvpoold.socket"] + list(self.store)
        fds = [self.listener.fileno()] + list(self.store.values())
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path, LISTEN_FDS=str(len(fds)),
                   LISTEN_FDNAMES=":".join(names))

        def to_listen_fds():
            high = [os.dup(f) for f in fds]
            for i, f in enumerate(high):
                os.dup2(f, 3 + i)

        self.log = open(self.tmp / "kvpoold.log", "a")
        # LISTEN_PID is the daemon's: the shell's, which execs it.
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", 'LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"', DAEMON,
             "--config", str(self.tmp / "kvpool.ini")], env=env, stdout=self.log,
            stderr=subprocess.STDOUT, preexec_fn=to_listen_fds,
            pass_fds=tuple(range(3, 3 + len(fds))))
        return self.messages(until="READY=1")

    def messages(self, until=None, timeout=20.0):
        """The notify messages until one is `until` (or the daemon exits): [(text, fds)];
        FDSTORE=1 ones kept in the store, FDSTOREREMOVE=1 ones taken out of it."""
        out, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.notify.settimeout(0.1)
            try:
                msg, fds, _, _ = socket.recv_fds(self.notify, 4096, 16)
            except socket.timeout:
                if self.proc.poll() is not None:
                    break
                continue
            text = msg.decode()
            fields = dict(line.split("=", 1) for line in text.split("\n") if "=" in line)
            if fields.get("FDSTORE") == "1":
                self.store[fields["FDNAME"]] = fds[0]
            elif fields.get("FDSTOREREMOVE") == "1":
                os.close(self.store.pop(fields["FDNAME"]))
            out.append((text, len(fds)))
            if text == until:
                return out
        assert until is None, "no %s from kvpoold: %s" % (until, self.read_log())
        return out

    def stop(self):
        """SIGTERM, as systemctl stop sends: the daemon's messages until it has exited."""
        self.proc.send_signal(signal.SIGTERM)
        got = self.messages()
        assert self.proc.wait(timeout=20) == 0
        return got

    def read_log(self):
        self.log.flush()
        return (self.tmp / "kvpoold.log").read_text()

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for fd in self.store.values():
            os.close(fd)
        self.listener.close()
        self.notify.close()


@pytest.fixture
def systemd(tmp_path):
    s = Systemd(tmp_path)
    yield s
    s.close()


def test_systemctl_restart_keeps_the_cache_through_the_fd_store(systemd):
    systemd.start()
    daemon = systemd  # what test_handover's helpers need of a daemon: socket, client()
    full = fill(daemon, "full", [0], 100)
    hyb = fill(daemon, "hybrid", [0, 1], 200)
    before = {p: (lookups(daemon, p, seed), pool_row(daemon, p))
              for p, seed in (("full", 100), ("hybrid", 200))}
    with daemon.client(pool="full") as c:
        gen = c.pool.generation
    stopped = systemd.stop()
    texts = [t for t, _ in stopped]
    assert texts[0] == "STOPPING=1"
    # The state and the memfds it names: a pool's KV, its tier's memory and index.
    names = sorted(systemd.store)
    assert "kvpool-state" in names and all(n.startswith("kvpool-") for n in names)
    assert len(names) == 1 + 5 + 2 * 2  # 5 pools with KV, 2 tiers: memory and index
    assert "handing the cache to systemd's descriptor store" in systemd.read_log()
    started = systemd.start()
    # What it took, systemd is told to let go: the store is empty again.
    assert sum(t.startswith("FDSTOREREMOVE=1") for t, _ in started) == len(names)
    assert systemd.store == {}
    for p, seed in (("full", 100), ("hybrid", 200)):
        assert (lookups(daemon, p, seed), pool_row(daemon, p)) == before[p]
    with daemon.client(pool="full") as c:
        assert c.pool.generation == gen
    check_kv(daemon, "full", [0], 100, full, before["full"][0])
    check_kv(daemon, "hybrid", [0, 1], 200, hyb, before["hybrid"][0])
    assert "restart: 6 pools restored, 0 started empty; restore " in systemd.read_log()


def test_a_start_without_the_store_is_cold(systemd):
    """A store systemd did not keep (FileDescriptorStoreMax=0): the next start is a cold one."""
    systemd.start()
    daemon = systemd
    fill(daemon, "other", [0], 300, n=4)
    systemd.stop()
    for fd in systemd.store.values():
        os.close(fd)
    systemd.store = {}
    systemd.start()
    assert lookups(daemon, "other", 300, 4) == [0] * 4
