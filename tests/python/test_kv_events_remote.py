# SPDX-License-Identifier: MIT
"""KV events of a pool with a cluster tier: medium "REMOTE" says what this machine can hit
through the cluster as far as it knows (the blocks it wrote or read), once; withdrawn when it
learns the cluster lost them (a miss, the TTL, a purge). Two kvpoold on one Redis Cluster of
the test's own, and a router (kv_router.py) that predicts each machine's LOOKUP from the
events alone. docs/events.md, "The cluster's blocks"."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import DAEMON
from daemon_proc import Daemon
from kv_events_sub import Subscriber, chain, removed, stored
from kv_helpers import LAYERS, rows, written
from redis_cluster import Cluster
from test_tier_remote import POOL, TIMEOUT

HERE = os.path.dirname(os.path.abspath(__file__))
BS = 4
# test_tier_remote.py's pool, its events on endpoints in its machine's directory.
EVENTS = """kv_events = ipc://{dir}/llm.events
kv_events_replay = ipc://{dir}/llm.replay
"""
PROMPT = list(range(100, 117))  # 4 full blocks and a token
H = chain(PROMPT, BS)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


class Machine:
    """A kvpoold of its own directory on the cluster, its pool's events subscribed."""

    def __init__(self, tmp_path, name, cluster, extra=""):
        self.dir = tmp_path / name
        self.dir.mkdir()
        text = POOL.format(name="llm", groups="full", url=cluster.url,
                           extra=TIMEOUT + EVENTS.format(dir=self.dir) + extra)
        self.daemon = Daemon(self.dir, text, DAEMON)
        self.events = Subscriber("ipc://%s/llm.events" % self.dir)
        self.c = self.daemon.client(pool="llm")
        self.admin = self.daemon.client(pool="llm", admin=True)

    def sync(self):
        """The sends queued are back: their REMOTE announcements made."""
        self.admin.pool_sync("llm")

    def read(self, tokens, hit, rng=np.random.default_rng(1)):
        """An ALLOC with the cache hitting `hit` tokens, the rest's KV written, committed."""
        with self.c.open(tokens) as q:
            assert q.alloc(len(tokens) - hit, use_cache=True) == hit
            for layer in range(LAYERS):
                n = len(tokens) - hit
                q.write_kv(0, layer, hit, rows(rng, n), rows(rng, n))
            table = q.table()[0]
            q.commit(len(tokens))
        return table

    def lookup(self, tokens):
        with self.c.open(tokens) as q:
            return q.lookup()

    def evict_all(self):
        self.admin.evict(self.admin.free_queue())

    def latest_seq(self):
        self.c.nop()  # the turn that made the last batch has published it
        ev = [p for p in self.c.stats()["pools"] if p["name"] == "llm"][0]["events"]
        return ev["batches"] - 1

    def stop(self):
        self.events.close()
        self.c.close()
        self.admin.close()
        self.daemon.stop()


@pytest.fixture
def machines(tmp_path, cluster, request):
    extra = getattr(request, "param", "")
    ms = [Machine(tmp_path, n, cluster, extra) for n in ("a", "b")]
    yield ms
    for m in ms:
        m.stop()


def flushall(cluster):
    for port in cluster.masters():
        with cluster.resp(port) as r:
            r.call("FLUSHALL")


def test_written_and_read_blocks_are_announced_remote_until_the_cluster_is_known_to_lose_them(
        machines, cluster):
    a, b = machines
    rng = np.random.default_rng(71)
    # A computes the prompt: its pool's copies, then, its sends back, the cluster's.
    written(a.c, PROMPT, rng)[0].close()
    a.sync()
    assert a.events.events() == [stored(H, None, PROMPT[:16], BS),
                                 stored(H, None, PROMPT[:16], BS, medium="REMOTE")]
    # Computed again: the cluster is known to hold it, nothing is said again.
    written(a.c, PROMPT, rng)[0].close()
    a.sync()
    assert a.events.events() == []
    # B reads it from the cluster: the blocks it read, then its pool's copies.
    table = b.read(PROMPT, 16)
    b.sync()
    assert b.events.events() == [stored(H, None, PROMPT[:16], BS, medium="REMOTE"),
                                 stored(H, None, PROMPT[:16], BS)]
    # B's pool lets them go: the cluster's copies are hittable still.
    assert b.admin.evict(table[:4]) == 4
    assert b.events.events() == [removed(H)]
    # The cluster loses them: B learns it at its next miss, A not yet.
    flushall(cluster)
    assert b.lookup(PROMPT) == 0
    assert b.events.events() == [removed(H, medium="REMOTE")]
    assert a.events.events() == []
    # A purges the pool's keys: every block it announced REMOTE withdrawn, its pool's kept.
    assert a.admin.pool_purge_remote("llm") == 0
    assert a.events.events() == [removed(H, medium="REMOTE")]
    assert a.lookup(PROMPT) == 16
    # A reset clears all, then says again what the cluster holds (a reset does not touch it).
    other = list(range(400, 417))
    ho = chain(other, BS)
    written(a.c, other, rng)[0].close()
    a.sync()
    assert a.events.events() == [stored(ho, None, other[:16], BS),
                                 stored(ho, None, other[:16], BS, medium="REMOTE")]
    out = subprocess.run([os.path.join(os.path.dirname(DAEMON), "kvctl"), "--socket",
                          a.daemon.socket, "pool", "reset", "llm"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert a.events.events() == [{"type": "AllBlocksCleared"},
                                 stored(ho, None, other[:16], BS, medium="REMOTE")]


@pytest.mark.parametrize("machines", ["tier_remote_ttl_s = 3"], indirect=True)
def test_a_block_not_renewed_within_its_ttl_is_withdrawn(machines):
    a, b = machines
    rng = np.random.default_rng(72)
    t0 = time.monotonic()
    written(a.c, PROMPT, rng)[0].close()
    a.sync()
    assert a.events.events() == [stored(H, None, PROMPT[:16], BS),
                                 stored(H, None, PROMPT[:16], BS, medium="REMOTE")]
    # B reads it 1.5 s on: its GETEX renews the key; B's TTL runs from then, A's from t0.
    time.sleep(max(0, t0 + 1.5 - time.monotonic()))
    b.read(PROMPT, 16)
    t1 = time.monotonic()
    assert b.events.events(quiet=0.2) == [stored(H, None, PROMPT[:16], BS, medium="REMOTE"),
                                          stored(H, None, PROMPT[:16], BS)]
    time.sleep(max(0, t0 + 2.5 - time.monotonic()))
    assert a.events.events(quiet=0.2) == []
    time.sleep(max(0, t0 + 3.4 - time.monotonic()))
    assert a.events.events(quiet=0.2) == [removed(H, medium="REMOTE")]
    assert time.monotonic() < t1 + 2.9, "the machine was too slow for the test's timing"
    assert b.events.events(quiet=0.1) == []
    time.sleep(max(0, t1 + 3.4 - time.monotonic()))
    assert b.events.events(quiet=0.2) == [removed(H, medium="REMOTE")]
    # Computed again past its TTL: sent again, announced again.
    written(a.c, PROMPT, rng)[0].close()
    a.sync()
    assert a.events.events() == [stored(H, None, PROMPT[:16], BS, medium="REMOTE")]


def test_a_router_predicts_each_machines_lookup_through_the_cluster(machines, cluster):
    a, b = machines
    rng = np.random.default_rng(73)
    env = dict(os.environ, PYTHONPATH=HERE)
    router = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "kv_router.py")] +
        ["%s=ipc://%s/llm.events,ipc://%s/llm.replay" % (n, m.dir, m.dir)
         for n, m in (("a", a), ("b", b))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert json.loads(router.stdout.readline()) == {"ready": True}

        def ask(cmd):
            router.stdin.write(json.dumps(cmd) + "\n")
            router.stdin.flush()
            return json.loads(router.stdout.readline())

        p1, p2, p3 = PROMPT, list(range(200, 217)), list(range(300, 317))
        p4 = p1[:8] + list(range(500, 509))  # p1's first 2 blocks, 2 of its own
        p5 = p1[:12] + [7] * 5                # p1's first 3 blocks
        # Each machine announces what it wrote or read: p1 and p4 written on A and read on
        # B, p2 written on B and read on A; p3 never computed.
        written(a.c, p1, rng)[0].close()
        a.sync()
        b.read(p1, 16)
        written(b.c, p2, rng)[0].close()
        b.sync()
        a.read(p2, 16)
        a.read(p4, 8)
        a.sync()
        b.read(p4, 16)
        # Both pools let every block go: only the cluster has them.
        a.evict_all()
        b.evict_all()
        a.sync()
        b.sync()
        assert ask({"wait": {"a": a.latest_seq(), "b": b.latest_seq()}})["ok"]
        want = [16, 16, 0, 16, 12]
        for tokens, hit in zip((p1, p2, p3, p4, p5), want):
            assert ask({"predict": tokens, "block_size": BS}) == {"a": hit, "b": hit}
            for m in (a, b):
                assert m.lookup(tokens) == hit, tokens
        # The prediction holds for an ALLOC too: A gets p1 from the cluster.
        a.read(p1, 16)
        # The cluster loses everything; each machine learns it at a miss of its own and
        # withdraws: the router then predicts what each pool holds again.
        flushall(cluster)
        assert b.lookup(p2) == 0
        assert a.lookup(p2) == 0
        a.sync()
        b.sync()
        assert ask({"wait": {"a": a.latest_seq(), "b": b.latest_seq()}})["ok"]
        assert ask({"predict": p2, "block_size": BS}) == {"a": 0, "b": 0}
        assert ask({"predict": p1, "block_size": BS}) == {"a": 16, "b": 16}
        assert a.lookup(p1) == 16  # A's pool holds it again
        # B learns p1 is gone at its lookup: its withdrawal reaches the router.
        assert b.lookup(p1) == 0
        assert ask({"wait": {"b": b.latest_seq()}})["ok"]
        assert ask({"predict": p1, "block_size": BS}) == {"a": 16, "b": 0}
    finally:
        router.kill()
        router.wait()
