# SPDX-License-Identifier: MIT
"""A host tier's window (docs/tiers.md, "Going down"): the cached blocks nearest the free
queue's head are copied into the window's room while the pool still has them; a burst past
the window is copied after the hand-out (a rescue) where the daemon sees every write, or
counted unoffered, by reason; a promotion landing in such a block swaps the two.

Each pool has 40 usable blocks of 4 tokens (K and V of 2 layers, 2 kv heads of 8, f32: a
1024-byte slot) and a tier of 64 blocks, whose window room is a quarter of it: 16 blocks. A
prompt of 81 tokens caches 20 blocks and frees its partial one to the queue's head, so that
the queue reads: the 19 blocks never used and that partial one, then its 20 cached blocks,
last first. A prompt of 160 new tokens takes all 40: the window's 16, and 4 past it."""

import os
import subprocess

import numpy as np
import pytest

import kvpool
from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_helpers import LAYERS, bits32, rows

SLOT = 2 * LAYERS * 4 * 2 * 8 * 4
POOL = """
[pool.{name}]
blocks = 41
block_size = 4
groups = full
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_host_bytes = {tier}
"""
CONFIG = POOL.format(name="p", tier=64 * SLOT) + POOL.format(name="mapped", tier=64 * SLOT) + \
    "namespace = ns1\n" + """
[namespace.ns1]
uids = 0
"""
REASONS = ["window", "queue_full", "no_slot", "quota", "overwritten", "declined", "dropped",
           "write_failed"]
HOOKS = os.path.join(ROOT, "build", "asan", "bin", "kvpoold")
KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, CONFIG, DAEMON)
    yield d
    d.stop()


def tier_of(client, pool):
    return next(p["tier"] for p in client.stats()["pools"] if p["name"] == pool)


def written(client, tokens, seed):
    """A closed sequence whose KV at every position of tokens was written and committed;
    {layer: (k, v)}."""
    rng = np.random.default_rng(seed)
    data = {}
    with client.open(tokens) as seq:
        assert seq.alloc(len(tokens)) == 0
        for layer in range(LAYERS):
            k, v = rows(rng, len(tokens)), rows(rng, len(tokens))
            seq.write_kv(0, layer, 0, k, v)
            data[layer] = (k, v)
        seq.commit(len(tokens))
    return data


def assert_kv(seq, data, n):
    for layer in range(LAYERS):
        k, v = seq.read_kv(0, layer, 0, n)
        assert np.array_equal(bits32(k), bits32(data[layer][0][:n]))
        assert np.array_equal(bits32(v), bits32(data[layer][1][:n]))


A = list(range(100, 181))   # 81 tokens: 20 cached blocks, a partial one
B = list(range(1000, 1160))  # 160 tokens: every block of the pool
C = list(range(2000, 2160))


def test_a_hit_takes_the_window_copies_back(daemon):
    with daemon.client(pool="p") as c, daemon.client(admin=True) as admin:
        written(c, A, 1)
        admin.pool_sync("p")
        t = tier_of(admin, "p")
        # The 16 cached blocks nearest the head, copied while the pool has them.
        assert (t["stored"], t["held"], t["slots"]) == (16, 16, 64)
        with c.open(A) as again:
            assert again.alloc(1, use_cache=True) == 80  # the pool's own 20
            admin.pool_sync("p")  # a turn later: the stats the ALLOC's turn wrote
            t = tier_of(admin, "p")
            assert (t["held"], t["evicted"], t["abandoned"]) == (0, 0, 0)
            assert t["unoffered"] == dict.fromkeys(REASONS, 0)


def test_blocks_past_the_window_are_rescued_and_swapped_bit_for_bit(daemon):
    with daemon.client(pool="p") as c, daemon.client(admin=True) as admin:
        a = written(c, A, 1)
        admin.pool_sync("p")
        # B takes A's 20: the window's 16 are the tier's now, the 4 past it are copied
        # after the hand-out (the sync waits for them before B writes a byte).
        with c.open(B) as b:
            assert b.alloc(len(B)) == 0
            admin.pool_sync("p")
            t = tier_of(admin, "p")
            assert (t["stored"], t["held"], t["abandoned"]) == (20, 20, 0)
        cdata = written(c, C, 3)
        admin.pool_sync("p")
        # A comes up whole from the tier: 20 promotions pop C's blocks at the queue's
        # head; those the window had not copied swap places with the slots they empty.
        with c.open(A) as again:
            assert again.lookup() == 80
            assert again.alloc(1, use_cache=True) == 80
            assert_kv(again, a, 80)
        admin.pool_sync("p")
        with c.open(C) as again:
            assert again.lookup() == 156
            assert again.alloc(1, use_cache=True) == 156
            assert_kv(again, cdata, 156)
        t = tier_of(admin, "p")
        assert t["abandoned"] == 0 and t["read_failures"] == 0
        assert t["unoffered"] == dict.fromkeys(REASONS, 0)


@pytest.fixture
def slow_daemon(tmp_path):
    if not os.access(HOOKS, os.X_OK):
        pytest.skip("no test build of kvpoold (make VARIANT=asan): tier copies cannot be slowed")
    d = Daemon(tmp_path, CONFIG, HOOKS, env=dict(os.environ, KVPOOL_TIER_DELAY_US="100000"))
    yield d
    d.stop()


def test_a_rescue_a_write_overtakes_is_counted_overwritten(slow_daemon):
    # Each copy takes 100 ms: B writes its blocks while the 4 rescues are on their way.
    d = slow_daemon
    with d.client(pool="p") as c, d.client(admin=True) as admin:
        written(c, A, 1)
        admin.pool_sync("p")
        written(c, B, 2)
        admin.pool_sync("p")
        t = tier_of(admin, "p")
        assert (t["abandoned"], t["unoffered"]["overwritten"]) == (4, 4)
        assert sum(t["unoffered"].values()) == 4
        # B's 40 go down after A's 16: the window's room holds 16 of them as B's copies.
        assert (t["stored"], t["held"]) == (32, 32)
        with c.open(A) as again:
            assert again.lookup() == 0  # A's block 0 was among the 4 lost


def test_a_pool_its_clients_may_map_counts_what_passed_the_window(daemon):
    # A mapped pool's blocks are written out of the daemon's sight: nothing is rescued.
    with daemon.client(pool="mapped", namespace="ns1") as c, daemon.client(admin=True) as admin:
        written(c, A, 1)
        admin.pool_sync("mapped")
        written(c, B, 2)
        admin.pool_sync("mapped")
        t = tier_of(admin, "mapped")
        assert t["unoffered"] == dict(dict.fromkeys(REASONS, 0), window=4)
        assert (t["stored"], t["abandoned"]) == (32, 0)
        with c.open(A) as again:
            assert again.lookup() == 0  # its first 4 blocks went
        lines = kvctl(daemon, "stats").splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("TIERS"))
        row = next(line for line in lines[at:] if line.startswith("mapped "))
        cols = dict(zip(lines[at].split(), row.split()))
        assert (cols["UNOFFERED"], cols["STORED"]) == ("4", "32")
        prom = kvctl(daemon, "stats", "--prometheus")
        samples = [line for line in prom.splitlines()
                   if line.startswith("kvpool_tier_unoffered_blocks_total{pool=\"mapped\"")]
        assert samples == ['kvpool_tier_unoffered_blocks_total{pool="mapped",tier="host",'
                           'reason="%s"} %d' % (r, 4 if r == "window" else 0) for r in REASONS]


def kvctl(daemon, *args):
    return subprocess.run([KVCTL, "--socket", daemon.socket, *args], check=True,
                          capture_output=True, text=True).stdout


def test_a_copy_a_hit_overtakes_serves_once_its_block_is_free_again(slow_daemon):
    # Each copy takes 100 ms. S's 10 window copies are on their way when a hit takes S's
    # blocks back into use, and still when S frees them again: the walk finds them coming,
    # and they are S's window copies again, kept as they land. When B then takes every
    # block, S's are in the tier at once: no copy after the hand-out to wait for.
    short = list(range(300, 341))  # 41 tokens: 10 cached blocks, all in the window
    d = slow_daemon
    with d.client(pool="p") as c, d.client(admin=True) as admin:
        s = written(c, short, 1)
        with c.open(short) as again:
            assert again.alloc(1, use_cache=True) == 40
        admin.pool_sync("p")
        t = tier_of(admin, "p")
        assert (t["stored"], t["held"], t["abandoned"]) == (10, 10, 0)
        with c.open(B) as b:
            assert b.alloc(len(B)) == 0
            with c.open(short) as again:
                assert again.lookup() == 40
        admin.pool_sync("p")
        with c.open(short) as again:
            assert again.alloc(1, use_cache=True) == 40
            assert_kv(again, s, 40)
