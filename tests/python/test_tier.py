# SPDX-License-Identifier: MIT
"""A pool's host-memory tier (tier_host_bytes): blocks the pool evicts stay hittable there.

Each pool below has 8 usable blocks of 4 tokens and a tier of 64 blocks, so a prompt of 32
tokens from another sequence evicts everything the pool cached; `pool_sync` waits for the
copies down before the test counts. Expected hits are worked out by hand from vLLM's rules."""

import fcntl
import os
import signal
import time

import numpy as np
import pytest

import kvpool
from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_helpers import D, KVH, LAYERS, SCALE, assert_close, bits32, rows, written

SLOT = 2 * LAYERS * 4 * KVH * D * 4  # K and V of every layer of one block, f32
POOL = """
[pool.{name}]
blocks = 9
block_size = 4
groups = {groups}
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_host_bytes = {tier}
"""
CONFIG = "".join(POOL.format(name=n, groups=g, tier=64 * SLOT) for n, g in [
    ("full", "full"), ("swa", "swa:8"), ("chunked", "chunked:8"), ("rswa", "rswa:8"),
    ("hybrid", "full swa:8")]) + POOL.format(name="plain", groups="full", tier=0) + """
[pool.cyclic]
blocks = 17
block_size = 4
groups = full cyclic:4
max_step_tokens = 17
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_host_bytes = %d
""" % (64 * SLOT) + """
[namespace.ns1]
uids = 0

[namespace.ns2]
uids = 0

[namespace.tight]
uids = 0
max_blocks = 3

[namespace.small]
uids = 0
max_tier_bytes = %d
""" % (2 * SLOT)
# The test build (ASan), whose tier copies KVPOOL_TIER_DELAY_US slows.
HOOKS = os.path.join(ROOT, "build", "asan", "bin", "kvpoold")


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, CONFIG, DAEMON)
    yield d
    d.stop()


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


def tier_of(client, pool):
    """The pool's TIERS row of `kvctl stats --json`."""
    return next(p["tier"] for p in client.stats()["pools"] if p["name"] == pool)


def flush(client, admin, pool, groups):
    """Another prompt takes all 8 blocks: the pool's cached blocks are gone (to the tier; those
    the window had not copied are copied after their hand-out, before the prompt writes)."""
    n = 32 // len(groups)
    admin.pool_sync(pool)
    with client.open(list(range(5000, 5000 + n))) as other:
        assert other.alloc(n) == 0
        admin.pool_sync(pool)
        for g in groups:
            for layer in range(LAYERS):
                other.write_kv(g, layer, 0, rows(np.random.default_rng(1), n),
                               rows(np.random.default_rng(2), n))
    admin.pool_sync(pool)


def test_full_prefix_comes_back_from_the_tier_bit_for_bit(daemon, rng):
    prompt = list(range(100, 117))  # 17 tokens: 4 full blocks
    with daemon.client(pool="full") as c, daemon.client(admin=True) as admin:
        q = rows(rng, 1, heads=2 * KVH)
        a, data = written(c, prompt, rng, [0])
        with a:
            ref = a.attend(0, 1, q, 16, SCALE)
            before = {layer: a.read_kv(0, layer, 0, 16) for layer in range(LAYERS)}
        flush(c, admin, "full", [0])
        t = tier_of(admin, "full")
        assert t["held"] == 4 and t["stored"] == 4 and t["abandoned"] == 0
        with c.open(prompt) as b:
            assert b.lookup() == 16
            assert b.alloc(1, use_cache=True) == 16
            for layer in range(LAYERS):
                k, v = b.read_kv(0, layer, 0, 16)
                assert np.array_equal(bits32(k), bits32(before[layer][0]))
                assert np.array_equal(bits32(v), bits32(before[layer][1]))
            for layer in range(LAYERS):  # the last token's KV, as A computed it
                k, v = data[0, layer]
                b.write_kv(0, layer, 16, k[16:], v[16:])
            assert_close(b.attend(0, 1, q, 16, SCALE), ref)
            # Up, not copied: the pool has them now, so the tier lets them go.
            t = tier_of(admin, "full")
            assert t["promoted"] == 4 and t["hit_tokens"] == 16 and t["held"] == 0
            assert t["bytes_up"] == 4 * SLOT and t["bytes_down"] == 4 * SLOT
        # B freed them: next to be evicted, they go down again.
        admin.pool_sync("full")
        t = tier_of(admin, "full")
        assert (t["held"], t["stored"], t["bytes_down"]) == (4, 8, 8 * SLOT)


def test_a_host_tier_lives_in_a_sealed_memfd(daemon):
    """A restart hands a host tier on as it does a pool: its memory is a memfd, sealed at
    its size, held by the daemon beside the pools' (its index is one too, kvpool-tier-index)."""
    seals = []
    fds = "/proc/%d/fd" % daemon.proc.pid
    for fd in os.listdir(fds):
        if os.readlink(os.path.join(fds, fd)).startswith("/memfd:kvpool-tier "):
            mine = os.open(os.path.join(fds, fd), os.O_RDONLY)
            try:
                seals.append(fcntl.fcntl(mine, 1034))  # F_GET_SEALS: the inode's
            finally:
                os.close(mine)
    # F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW, one a pool with a tier: all but "plain".
    assert seals == [0x7] * 6


@pytest.mark.parametrize("pool,needed", [("swa", 2), ("chunked", 1), ("rswa", 5)])
def test_windows_read_only_the_blocks_their_mask_needs(daemon, rng, pool, needed):
    # 21 tokens, 5 full blocks: the hit is 20 tokens. Its last token attends to the
    # blocks its mask needs, and only those come up: swa:8 the 2 blocks of the window
    # (positions 13..19); chunked:8 the block of its chunk (16..19); rswa:8 every block,
    # the whole prompt being its prefix. The rest of the table is null blocks.
    prompt = list(range(200, 221))
    with daemon.client(pool=pool) as c, daemon.client(admin=True) as admin:
        a, _ = written(c, prompt, rng, [0])
        a.close()
        flush(c, admin, pool, [0])
        with c.open(prompt) as b:
            assert b.alloc(1, use_cache=True) == 20
            table = b.table()[0]
        t = tier_of(admin, pool)
        assert t["promoted"] == needed
        assert sum(1 for blk in table[:5] if blk) == needed


def test_hybrid_pool_promotes_each_groups_needed_blocks(daemon, rng):
    # 13 tokens, 4 blocks a group: the pool's 8. The hit is 12 tokens (3 blocks): full
    # needs all 3, swa:8 the 2 before position 12; 5 blocks come up.
    prompt = list(range(400, 413))
    with daemon.client(pool="hybrid") as c, daemon.client(admin=True) as admin:
        a, data = written(c, prompt, rng, [0, 1])
        a.close()
        flush(c, admin, "hybrid", [0, 1])
        # 3 full blocks and 3 swa blocks: the one swa dropped at commit stayed cached
        assert tier_of(admin, "hybrid")["held"] == 6
        with c.open(prompt) as b:
            assert b.lookup() == 12
            assert b.alloc(1, use_cache=True) == 12
            full, swa = b.table()
            assert sum(1 for x in full[:3] if x) == 3 and swa[0] == 0
            assert all(swa[1:3])
            for g, lo in ((0, 0), (1, 4)):
                for layer in range(LAYERS):
                    k, v = b.read_kv(g, layer, lo, 12 - lo)
                    assert np.array_equal(bits32(k), bits32(data[g, layer][0][lo:12]))
                    assert np.array_equal(bits32(v), bits32(data[g, layer][1][lo:12]))
        t = tier_of(admin, "hybrid")
        assert t["promoted"] == 5 and t["hit_tokens"] == 12


def test_namespaces_never_hit_each_others_tier_blocks(daemon, rng):
    prompt = list(range(500, 517))
    with daemon.client(pool="full", namespace="ns1") as c1, \
            daemon.client(pool="full", namespace="ns2") as c2, daemon.client(admin=True) as admin:
        a, _ = written(c1, prompt, rng, [0])
        a.close()
        flush(c2, admin, "full", [0])
        assert tier_of(admin, "full")["held"] == 4
        with c2.open(prompt) as b:
            assert b.lookup() == 0 and b.alloc(1, use_cache=True) == 0
        assert tier_of(admin, "full")["promoted"] == 0
        with c1.open(prompt) as b:
            assert b.alloc(1, use_cache=True) == 16
        assert tier_of(admin, "full")["promoted"] == 4


def test_promoted_blocks_count_against_block_quotas(daemon, rng):
    # namespace tight holds 3 blocks: a hit of 3 tier blocks and 1 new block is 4.
    prompt = list(range(600, 613))
    with daemon.client(pool="full", namespace="tight") as c, \
            daemon.client(pool="full") as other, daemon.client(admin=True) as admin:
        a = c.open(prompt[:12])
        assert a.alloc(12) == 0
        for layer in range(LAYERS):
            a.write_kv(0, layer, 0, rows(rng, 12), rows(rng, 12))
        a.commit(12)
        a.close()
        flush(other, admin, "full", [0])
        with c.open(prompt) as b:
            with pytest.raises(kvpool.QuotaExceeded):
                b.alloc(1, use_cache=True)
            assert b.table() == [[]]
        assert tier_of(admin, "full")["promoted"] == 0


def test_a_pool_without_a_tier_is_as_before(daemon, rng):
    prompt = list(range(700, 717))
    with daemon.client(pool="plain") as c, daemon.client(admin=True) as admin:
        a, _ = written(c, prompt, rng, [0])
        a.close()
        admin.pool_sync("plain")  # at once: nothing to wait for
        flush(c, admin, "plain", [0])
        with c.open(prompt) as b:
            assert b.lookup() == 0
        assert tier_of(admin, "plain") is None


@pytest.fixture
def slow_daemon(tmp_path):
    if not os.access(HOOKS, os.X_OK):
        pytest.skip("no test build of kvpoold (make VARIANT=asan): tier copies cannot be slowed")
    d = Daemon(tmp_path, CONFIG, HOOKS, env=dict(os.environ, KVPOOL_TIER_DELAY_US="100000"))
    yield d
    d.stop()


def timed(fn, *args, **kw):
    t0 = time.monotonic()
    ret = fn(*args, **kw)
    return ret, time.monotonic() - t0


def test_slow_copies_hold_nothing_up_and_a_reused_block_never_hits(slow_daemon, rng):
    # Each copy down takes 100 ms. A's 4 blocks are queued as A closes; B takes them at
    # once, mid-copy: no request of B's (or of a bystander on another pool) waits for
    # the copies, and none of A's blocks becomes a tier entry, since B may have written
    # them while they were read. B's own 8 blocks go down once B frees them.
    prompt = list(range(800, 817))
    d = slow_daemon
    with d.client(pool="full") as c, d.client(pool="plain") as bystander, \
            d.client(admin=True) as admin:
        a, _ = written(c, prompt, rng, [0])
        _, t_close = timed(a.close)
        b = c.open(list(range(6000, 6032)))
        hit, t_alloc = timed(b.alloc, 32)
        assert hit == 0
        assert tier_of(admin, "full")["queued"] == 4  # still copying A's
        for layer in range(LAYERS):
            b.write_kv(0, layer, 0, rows(rng, 32), rows(rng, 32))
        _, t_commit = timed(b.commit, 32)
        _, t_free = timed(b.free)
        _, t_nop = timed(bystander.nop)
        with bystander.open([1, 2, 3, 4, 5]) as s:
            _, t_by = timed(s.alloc, 5)
        assert max(t_close, t_alloc, t_commit, t_free, t_nop, t_by) < 0.05
        admin.pool_sync("full")
        t = tier_of(admin, "full")
        assert (t["abandoned"], t["stored"], t["held"], t["queued"]) == (4, 8, 8, 0)
        b.close()
        with c.open(prompt) as again:
            assert again.lookup() == 0


@pytest.mark.parametrize("args,keys,reason", [
    ((16, 4, [("full", 0)]), "tier_host_bytes = 1048576\n",
     "tier_host_bytes: the pool holds no KV (kv_heads, head_dim, layers_per_group) for a tier "
     "to keep"),
    ((16, 4, [("full", 0)], 2, 8), "tier_host_bytes = 1048576\ncaching = off\n",
     "tier_host_bytes: caching is off, so no block is ever hit from a tier"),
    ((16, 4, [("full", 0)], 2, 8), "tier_policy = fifo\n",
     "tier_policy = fifo: not one of lru, second_sight"),
    ((16, 4, [("full", 0)], 2, 8), "tier_host_bytes = -1\n",
     "tier_host_bytes = -1: not a number (0..18446744073709551615)"),
])
def test_tier_keys_refused_with_their_reason(daemon, args, keys, reason):
    with daemon.client(admin=True) as a:
        with pytest.raises(kvpool.Error) as ei:
            a.create_pool("bad", *args, keys=keys)
        assert ei.value.reason == reason


def test_a_tier_smaller_than_a_block_is_refused_and_one_block_is_taken(daemon):
    # f32, 2 kv heads of 8, 4-token blocks, 1 layer: a block's K and V are 512 bytes.
    with daemon.client(admin=True) as a:
        with pytest.raises(kvpool.Error) as ei:
            a.create_pool("bad", 16, 4, [("full", 0)], 2, 8, 1, "f32",
                          keys="tier_host_bytes = 511\n")
        assert ei.value.reason == "tier_host_bytes 511: holds 0 blocks of 512 bytes, must be " \
                                  "1..16777216"
        a.create_pool("one", 16, 4, [("full", 0)], 2, 8, 1, "f32", keys="tier_host_bytes = 512\n")
        assert tier_of(a, "one")["slots"] == 1 and tier_of(a, "one")["bytes"] == 512


def test_a_reload_that_changes_tier_keys_is_refused(tmp_path, daemon):
    conf = tmp_path / "kvpool.ini"
    conf.write_text(CONFIG.replace("tier_host_bytes = %d" % (64 * SLOT),
                                   "tier_host_bytes = %d" % (32 * SLOT), 1))
    daemon.proc.send_signal(signal.SIGHUP)
    want = "reload: pool full: tier_host_bytes changed: refused"
    deadline = time.monotonic() + 10
    while want not in (tmp_path / "kvpoold.log").read_text():
        assert time.monotonic() < deadline, (tmp_path / "kvpoold.log").read_text()
        time.sleep(0.01)
    with daemon.client(admin=True) as a:
        assert tier_of(a, "full")["slots"] == 64


def test_tiers_count_against_max_host_bytes(tmp_path):
    # 4 MiB for the host's KV: a pool of 0.5 MiB of KV with a tier of 4 MiB, and its window's
    # 1 MiB (a quarter of its 8192 slots), is past it.
    slot = 2 * 1 * 4 * 2 * 8 * 4
    d = Daemon(tmp_path, "[daemon]\nmax_host_bytes = 4194304\n", DAEMON)
    try:
        with d.client(admin=True) as a:
            with pytest.raises(kvpool.Error) as ei:
                a.create_pool("big", 1024, 4, [("full", 0)], 2, 8, 1, "f32",
                              keys="tier_host_bytes = 4194304\n")
            assert ei.value.reason.startswith("KV memory and tier of 5.5 MiB: with the host "
                                              "pools' 0.0 MiB, past max_host_bytes 4194304")
            a.create_pool("fits", 1024, 4, [("full", 0)], 2, 8, 1, "f32",
                          keys="tier_host_bytes = %d\n" % (1024 * slot))
            assert tier_of(a, "fits")["slots"] == 1024
    finally:
        d.stop()


def test_max_tier_bytes_holds_and_spares_other_tenants(daemon, rng):
    # ns2 has no limit; namespace small may keep 2 blocks in a pool's tier. small's prompts
    # go down after ns2's: past its 2 blocks, they push out its own entries or are skipped,
    # never ns2's.
    pb = list(range(900, 917))
    with daemon.client(pool="full", namespace="ns2") as b, \
            daemon.client(pool="full", namespace="small") as a, \
            daemon.client(pool="full") as other, daemon.client(admin=True) as admin:
        written(b, pb, rng, [0])[0].close()
        admin.pool_sync("full")
        assert tier_of(admin, "full")["held"] == 4
        for first in (1000, 2000, 3000):
            written(a, list(range(first, first + 17)), rng, [0])[0].close()
            flush(other, admin, "full", [0])
            t = tier_of(admin, "full")
            assert t["held"] == 4 + 2, t  # ns2's 4, and 2 of small's
        assert t["skipped"] + t["evicted"] >= 3 * 4 - 2
        with b.open(pb) as again:
            assert again.alloc(1, use_cache=True) == 16  # all 4 of ns2's blocks still there


def test_a_pool_with_a_cyclic_group_sends_its_snapshots_down_and_hits_them(daemon, rng):
    # The tier takes window snapshots like any block (docs/design.md); a hit promotes the
    # full group's blocks into the pool and the snapshot straight into the new ring.
    prompt = list(range(300, 317))
    with daemon.client(pool="cyclic") as c, daemon.client(admin=True) as admin:
        a, data = written(c, prompt, rng, [0, 1])  # its prompt's end: 1 snapshot block
        a.close()
        admin.pool_sync("cyclic")
        # Another prompt takes all 16 blocks (11 full, a ring of 5), in steps of 17 tokens.
        with c.open(list(range(5000, 5044))) as other:
            done = 0
            for n in (17, 17, 10):
                assert other.alloc(n) == 0
                admin.pool_sync("cyclic")
                for g in (0, 1):
                    for layer in range(LAYERS):
                        other.write_kv(g, layer, done, rows(rng, n), rows(rng, n))
                done += n
                other.commit(done)
        admin.pool_sync("cyclic")
        t = tier_of(admin, "cyclic")
        # Every full block either prompt cached (a's 4, the other's 11) and a's snapshot.
        assert (t["held"], t["stored"], t["slots"]) == (16, 16, 64)
        # a's snapshot went with its block; the other's found no free block.
        snap = next(p for p in admin.stats()["pools"] if p["name"] == "cyclic")["snapshots"]
        assert (snap["made"], snap["evicted"], snap["skipped"], snap["held"]) == (1, 1, 1, 0)
        with c.open(prompt + [1]) as b:
            assert b.alloc(1, use_cache=True) == 16
            for layer in range(LAYERS):
                k, v = b.read_kv(1, layer, 13, 3)  # the window before 16: W-1 = 3 tokens
                assert np.array_equal(k, data[1, layer][0][13:16])
                assert np.array_equal(v, data[1, layer][1][13:16])
                k, v = b.read_kv(0, layer, 0, 16)
                assert np.array_equal(k, data[0, layer][0][:16])
            t = tier_of(admin, "cyclic")
            # 4 full blocks up into the pool (their entries gone), the snapshot's entry kept.
            assert (t["promoted"], t["held"]) == (5, 12)
        snap = next(p for p in admin.stats()["pools"] if p["name"] == "cyclic")["snapshots"]
        assert snap["hit"] == 1
