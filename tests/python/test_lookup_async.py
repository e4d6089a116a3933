# SPDX-License-Identifier: MIT
"""Lookups that do not wait (Sequence.lookup_async, libkvpool's kvp_lookup_start): the answer
is lookup()'s; up to 64 are out on a connection while its other calls, blocking or batched, go
on; and a pool whose cluster tier takes a whole round (its nodes stopped) holds only the
sequence looked up, not the connection. docs/python.md, "Lookups that do not wait"."""

import errno
import os
import signal
import time

import numpy as np
import pytest

import kvpool
from conftest import DAEMON
from daemon_proc import Daemon
from kv_helpers import LAYERS, written
from redis_cluster import Cluster

POOL = """
[pool.p]
blocks = 400
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
{extra}
"""
PROMPT = list(range(100, 117))  # 16 tokens a hit can cover, 4 blocks


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, POOL.format(extra=""), DAEMON)
    yield d
    d.stop()


def test_the_answer_is_lookups_and_is_kept(daemon):
    rng = np.random.default_rng(70)
    with daemon.client(pool="p") as c:
        written(c, PROMPT, rng)
        with c.open(PROMPT) as s, c.open(list(range(500, 517))) as cold:
            out, miss = s.lookup_async(), cold.lookup_async()
            assert out.sequence is s
            assert (out.result(), miss.result(timeout=5)) == (16, 0)
            assert out.done() and out.result() == 16
            assert s.lookup() == 16


def test_64_out_while_blocking_and_batched_calls_go_on(daemon):
    rng = np.random.default_rng(71)
    with daemon.client(pool="p") as c:
        written(c, PROMPT, rng)
        seqs = [c.open(PROMPT if i % 2 else [i] * 9) for i in range(65)]
        outs = [s.lookup_async() for s in seqs[:64]]
        with pytest.raises(kvpool.Error) as ei:
            seqs[64].lookup_async()
        assert ei.value.errno == errno.EAGAIN
        # Their completions come while these run: set aside, found by the polls after.
        with c.open(list(range(900, 909))) as other:
            assert other.alloc(8) == 0
            other.free()
        fresh = [c.open([1000 + i] * 9) for i in range(4)]
        with c.batch() as b:
            b.alloc(fresh, 8)
            for f in fresh:
                b.free(f)
        assert b.results == [0] * 4 + [None] * 4
        assert [o.result(timeout=5) for o in outs] == [16 if i % 2 else 0 for i in range(64)]
        assert seqs[64].lookup_async().result() == 0  # [64] * 9: a miss
        for s in seqs + fresh:
            s.close()


def test_lookups_let_go_while_out_give_their_tickets_back(daemon):
    with daemon.client(pool="p") as c:
        seqs = [c.open([i] * 9) for i in range(64)]
        for s in seqs:
            s.lookup_async()  # dropped at once: given back at the next call
        assert c.open([7] * 9).lookup() == 0
        assert [s.lookup_async().result() for s in seqs] == [0] * 64


def test_a_cluster_round_holds_the_sequence_not_the_connection(tmp_path):
    cluster = Cluster(tmp_path)
    extra = "tier_remote = %s\ntier_remote_timeout_ms = 400\n" % cluster.url
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = Daemon(tmp_path / "a", POOL.format(extra=extra), DAEMON)
    two = Daemon(tmp_path / "b", POOL.format(extra=extra), DAEMON)
    rng = np.random.default_rng(72)
    stopped = []
    try:
        with one.client(pool="p") as c1, one.client(admin=True) as a1:
            _, data = written(c1, PROMPT, rng)
            a1.pool_sync("p")
        with two.client(pool="p") as c2, two.client(admin=True) as a2:
            # Its first round (connections, the slot map) before the nodes stop.
            assert c2.open(list(range(600, 617))).lookup() == 0
            for port in cluster.ports:
                os.kill(cluster.procs[port].pid, signal.SIGSTOP)
                stopped.append(port)
            s = c2.open(PROMPT)
            t0 = time.monotonic()
            out = s.lookup_async()
            assert time.monotonic() - t0 < 0.2 and not out.done()
            # The connection serves meanwhile; the sequence waits for its answer.
            with c2.open(list(range(700, 709))) as other:
                assert other.alloc(8) == 0
                other.free()
            assert time.monotonic() - t0 < 0.3
            with pytest.raises(kvpool.Error) as ei:
                s.alloc(1, use_cache=True)
            assert ei.value.errno == errno.EBUSY
            assert out.result(timeout=10) == 0  # the round was late: a miss
            assert time.monotonic() - t0 >= 0.39
            r = next(p["tier_remote"] for p in a2.stats()["pools"] if p["name"] == "p")
            assert r["timeouts"] == 1
            for port in stopped:
                os.kill(cluster.procs[port].pid, signal.SIGCONT)
            stopped.clear()
            # Back: the cluster answers (its nodes' connections made again, backed off).
            deadline = time.monotonic() + 10
            while s.lookup_async().result(timeout=10) != 16:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert s.alloc(1, use_cache=True) == 16
            for layer in range(LAYERS):
                k, v = s.read_kv(0, layer, 0, 16)
                assert np.array_equal(k, data[0, layer][0][:16])
                assert np.array_equal(v, data[0, layer][1][:16])
            s.close()
    finally:
        for port in stopped:
            os.kill(cluster.procs[port].pid, signal.SIGCONT)
        one.stop()
        two.stop()
        cluster.stop()
