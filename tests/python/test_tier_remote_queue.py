# SPDX-License-Identifier: MIT
"""The cluster tier's send queue (daemon/tier/remote_wait.c): a block waiting for its SET is
pinned, so the queue holds a part of the pool; a prompt's blocks past it wait unpinned and go
as sends come back, every one (a POOL_SYNC waits for them too); one the pool hands out for new
data meanwhile is skipped, never sent with another block's KV, and is sent when computed
again."""

import os
import signal

import numpy as np
import pytest

from conftest import DAEMON
from daemon_proc import Daemon
from kv_helpers import LAYERS, written
from redis_cluster import Cluster

# 199 usable blocks: the send queue holds 50 of them (a quarter of a small pool).
POOL = """
[pool.p]
blocks = 200
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_remote = {url}
tier_remote_timeout_ms = 1000
"""
QUEUE = 50
PROMPT = list(range(1000, 1481))  # 481 tokens: 120 full blocks, committed at once


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


def remote_of(client):
    return next(p["tier_remote"] for p in client.stats()["pools"] if p["name"] == "p")


def daemon(tmp_path, cluster, name):
    (tmp_path / name).mkdir()
    return Daemon(tmp_path / name, POOL.format(url=cluster.url), DAEMON)


def hit_is(client, data, blocks):
    """A sequence of PROMPT hits exactly @blocks blocks, their KV data's byte for byte."""
    with client.open(PROMPT) as s:
        assert s.lookup() == 4 * blocks
        assert s.alloc(1, use_cache=True) == 4 * blocks
        for layer in range(LAYERS):
            k, v = s.read_kv(0, layer, 0, 4 * blocks)
            assert np.array_equal(k, data[0, layer][0][:4 * blocks])
            assert np.array_equal(v, data[0, layer][1][:4 * blocks])


def test_a_prompts_blocks_past_the_queue_wait_and_all_go(tmp_path, cluster):
    one, two = daemon(tmp_path, cluster, "a"), daemon(tmp_path, cluster, "b")
    rng = np.random.default_rng(80)
    try:
        with one.client(pool="p") as c, one.client(admin=True) as admin:
            seq, data = written(c, PROMPT, rng)
            admin.pool_sync("p")  # the offers that waited too
            r = remote_of(admin)
            assert (r["sent"], r["skipped"], r["queued"]) == (120, 0, 0)
            seq.close()
        assert len(cluster.keys()) == 120
        with two.client(pool="p") as c2:
            hit_is(c2, data, 120)
    finally:
        one.stop()
        two.stop()


def test_a_waiting_block_handed_out_meanwhile_is_skipped_not_sent_wrong(tmp_path, cluster):
    one, two = daemon(tmp_path, cluster, "a"), daemon(tmp_path, cluster, "b")
    rng = np.random.default_rng(81)
    stopped = []
    try:
        with one.client(pool="p") as c, one.client(admin=True) as admin:
            written(c, list(range(5000, 5009)), rng)[0].close()  # connections, the slot map
            admin.pool_sync("p")
            # The masters stopped: the first 50 blocks' sends wait for them (pinned), the 70
            # after wait in the ring, unpinned.
            for port in cluster.ports:
                os.kill(cluster.procs[port].pid, signal.SIGSTOP)
                stopped.append(port)
            seq, first = written(c, PROMPT, rng)
            seq.close()  # its blocks to the free queue, its last first
            # 149 blocks: the 78 never used, the prompt's partial one and its last 70 (the
            # waiting ones); the 50 pinned are not in the queue.
            with c.open(list(range(9000, 9597))) as other:
                assert other.alloc(596) == 0
            for port in stopped:
                os.kill(cluster.procs[port].pid, signal.SIGCONT)
            stopped.clear()
            admin.pool_sync("p")
            r = remote_of(admin)
            assert (r["sent"], r["skipped"], r["queued"]) == (2 + QUEUE, 70, 0)
            assert len(cluster.keys()) == 2 + QUEUE
            # Skipped, forgotten: computed again, they go.
            seq, second = written(c, PROMPT, rng)
            admin.pool_sync("p")
            r = remote_of(admin)
            assert (r["sent"], r["skipped"], r["deduplicated"]) == (2 + 120, 70, QUEUE)
            seq.close()
        with two.client(pool="p") as c2:
            # The first 50 blocks hold the first computation's KV, the rest the second's: the
            # hit is the second's from block 50 on, and the first's before.
            cut = 4 * QUEUE
            with c2.open(PROMPT) as s:
                assert s.alloc(1, use_cache=True) == 480
                for layer in range(LAYERS):
                    k, v = s.read_kv(0, layer, 0, 480)
                    for got, kv in ((k, 0), (v, 1)):
                        assert np.array_equal(got[:cut], first[0, layer][kv][:cut])
                        assert np.array_equal(got[cut:], second[0, layer][kv][cut:480])
    finally:
        for port in stopped:
            os.kill(cluster.procs[port].pid, signal.SIGCONT)
        one.stop()
        two.stop()
