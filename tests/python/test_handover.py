# SPDX-License-Identifier: MIT
"""A planned restart (`kvctl daemon restart`): the daemon execs itself in the same process and
hands its pools' KV memory, prefix cache, host tiers, generations and KV events' index to the
next run, which answers every LOOKUP as before. A pool whose shape changed, or whose state is
damaged, starts empty with one log line; the others are kept."""

import os
import subprocess
import threading
import time

import numpy as np
import pytest

import kvpool
from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_events_sub import CLEARED, chain, replay, stored
from kv_helpers import KVH, LAYERS, D, bits32, rows, written

KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))
HOOKS = os.path.join(ROOT, "build", "asan", "bin", "kvpoold")
SLOT = 2 * LAYERS * 4 * KVH * D * 4  # K and V of every layer of one block, f32
KV = """kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
"""
CONFIG = """
[pool.full]
blocks = 33
block_size = 4
groups = full
{kv}tier_host_bytes = {tier}
kv_events = ipc://{tmp}/full.events
kv_events_replay = ipc://{tmp}/full.replay

[pool.hybrid]
blocks = 33
block_size = 4
groups = full swa:8
{kv}tier_host_bytes = {tier}

[pool.other]
blocks = {other_blocks}
block_size = 4
groups = full
{kv}
[pool.load]
blocks = 257
block_size = 4
groups = full
{kv}
[pool.shared]
blocks = 17
block_size = 4
groups = full
{kv}namespace = ns1
{gone}
[namespace.ns1]
uids = 0
"""
GONE = """
[pool.gone]
blocks = 9
block_size = 4
groups = full
"""


def config(tmp, other_blocks=17, gone=True):
    return CONFIG.format(kv=KV, tier=64 * SLOT, tmp=tmp, other_blocks=other_blocks,
                         gone=GONE if gone else "")


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, config(tmp_path), DAEMON)
    d.tmp = tmp_path
    yield d
    d.stop()


def kvctl(daemon, *args):
    return subprocess.run([KVCTL, "--socket", daemon.socket] + list(args), capture_output=True,
                          text=True, timeout=120)


def restart(daemon, *args):
    pid = daemon.proc.pid
    r = kvctl(daemon, "daemon", "restart", *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("kvpoold at %s restarted in " % daemon.socket), r.stdout
    assert daemon.proc.poll() is None and daemon.proc.pid == pid  # the same process
    return r


def log(daemon):
    daemon.log.flush()
    with open(daemon.tmp / "kvpoold.log") as f:
        return f.read()


def prompts(base, n, length=13):
    return [list(range(base + 1000 * i, base + 1000 * i + length)) for i in range(n)]


def fill(daemon, pool, groups, seed, n=12):
    """n prompts of 13 tokens written and committed (3 cached blocks each): past 8 the pool's
    32 blocks are full and the oldest go down to the tier. {prompt index: KV written}."""
    rng = np.random.default_rng(seed)
    data = {}
    with daemon.client(pool=pool) as c, daemon.client(admin=True) as admin:
        for i, p in enumerate(prompts(seed, n)):
            s, data[i] = written(c, p, rng, groups)
            s.close()
        admin.pool_sync(pool)
    return data


def lookups(daemon, pool, seed, n=12):
    with daemon.client(pool=pool) as c:
        out = []
        for p in prompts(seed, n):
            with c.open(p) as s:
                out.append(s.lookup())
        return out


def pool_row(daemon, pool):
    with daemon.client(admin=True) as admin:
        row = next(p for p in admin.stats()["pools"] if p["name"] == pool)
    tier = row.get("tier") or {}
    return ({k: row["blocks_" + k] for k in ("total", "free", "used", "cached")},
            tier.get("held"))


def check_kv(daemon, pool, groups, seed, data, hits):
    """Each prompt's hit taken (promoted from the tier where it lies) and read back byte for
    byte; a sync between them keeps every block hittable in the pool or its tier."""
    with daemon.client(pool=pool) as c, daemon.client(admin=True) as admin:
        for i, p in enumerate(prompts(seed, len(hits))):
            admin.pool_sync(pool)
            with c.open(p) as s:
                assert s.alloc(len(p), use_cache=True) == hits[i]
                for g in groups:
                    lo = 4 if g == 1 else 0  # swa:8 dropped the first block
                    if hits[i] <= lo:
                        continue  # nothing of this group hit (the fill's copies raced)
                    for layer in range(LAYERS):
                        k, v = s.read_kv(g, layer, lo, hits[i] - lo)
                        assert np.array_equal(bits32(k), bits32(data[i][g, layer][0][lo:hits[i]]))
                        assert np.array_equal(bits32(v), bits32(data[i][g, layer][1][lo:hits[i]]))


def test_a_restart_answers_every_lookup_as_before(daemon):
    full = fill(daemon, "full", [0], 100)
    hyb = fill(daemon, "hybrid", [0, 1], 200)
    before = {p: (lookups(daemon, p, seed), pool_row(daemon, p))
              for p, seed in (("full", 100), ("hybrid", 200))}
    # 8 prompts fit the pool; the tier holds the oldest (unless a copy raced a loaded machine).
    assert sum(before["full"][0]) >= 8 * 12 and before["full"][1][1] > 0
    with daemon.client(pool="full") as c:
        gen, boot = c.pool.generation, c.boot_id
    restart(daemon)
    for p, seed in (("full", 100), ("hybrid", 200)):
        assert (lookups(daemon, p, seed), pool_row(daemon, p)) == before[p]
    with daemon.client(pool="full") as c:
        assert c.pool.generation == gen and c.boot_id != boot
    check_kv(daemon, "full", [0], 100, full, before["full"][0])
    check_kv(daemon, "hybrid", [0, 1], 200, hyb, before["hybrid"][0])
    text = log(daemon)
    assert "restart: 6 pools restored, 0 started empty; drain " in text
    assert "restart: pool" not in text  # nothing cold, nothing dropped


def test_a_changed_pool_starts_empty_and_the_others_are_kept(daemon):
    fill(daemon, "full", [0], 100)
    full = lookups(daemon, "full", 100)
    fill(daemon, "other", [0], 300, n=4)
    r = kvctl(daemon, "pool", "create", "made", "blocks=17", "block_size=4", "groups=full",
              "kv_heads=2", "head_dim=8", "layers_per_group=2")
    assert r.returncode == 0, r.stderr
    fill(daemon, "made", [0], 400, n=4)
    kept = daemon.client(pool="other")
    other_gen = kept.pool.generation
    with daemon.client(pool="made") as c:
        made_gen = c.pool.generation
    assert lookups(daemon, "other", 300, 4) == [12] * 4
    (daemon.tmp / "kvpool.ini").write_text(config(daemon.tmp, other_blocks=33, gone=False))
    restart(daemon)
    text = log(daemon)
    assert "restart: pool other: blocks changed since the last run: started empty" in text
    assert "restart: pool gone is no longer in the config: dropped" in text
    assert "restart: 5 pools restored, 1 started empty;" in text
    assert lookups(daemon, "other", 300, 4) == [0] * 4
    assert lookups(daemon, "full", 100) == full
    assert lookups(daemon, "made", 400, 4) == [12] * 4  # kvctl pool create's, made again
    with daemon.client(pool="other") as c:
        assert c.pool.num_blocks == 33 and c.pool.generation != other_gen
    # A client that reconnects learns it is another pool: another generation, 33 blocks.
    assert kept.reconnect() not in (0, other_gen) and kept.pool.num_blocks == 33
    kept.close()
    with daemon.client(pool="made") as c:
        assert c.pool.generation == made_gen
    with daemon.client(admin=True) as admin:
        assert "gone" not in [p["name"] for p in admin.stats()["pools"]]


@pytest.mark.skipif(not os.path.exists(HOOKS), reason="needs the test build (make VARIANT=asan)")
@pytest.mark.parametrize("damage,cause", [
    ("flip", "its state is damaged (checksum)"),
    ("version", "its state is section format 2, this build reads 1")])
def test_a_damaged_pool_state_costs_that_pool_alone(tmp_path, damage, cause):
    d = Daemon(tmp_path, config(tmp_path), HOOKS,
               env=dict(os.environ, KVPOOLD_TEST_DAMAGE="full:" + damage))
    d.tmp = tmp_path
    try:
        fill(d, "full", [0], 100)
        fill(d, "hybrid", [0, 1], 200)
        with d.client(pool="full") as c:
            gen = c.pool.generation
        hybrid = lookups(d, "hybrid", 200)
        restart(d)
        assert "restart: pool full: %s: started empty" % cause in log(d)
        assert lookups(d, "full", 100) == [0] * 12
        assert pool_row(d, "full") == ({"total": 33, "free": 32, "used": 0, "cached": 0}, 0)
        assert lookups(d, "hybrid", 200) == hybrid
        with d.client(pool="full") as c:
            assert c.pool.generation != gen
    finally:
        d.stop()


def decode_loop(daemon, i, stop, restarted, out):
    """A client decoding a token at a time, a sequence of up to 40 tokens after another.
    Disconnected once: it reconnects, and its next LOOKUP hits what it committed before."""
    resets, committed, base = 0, [], 50000 + 1000 * i
    c = daemon.client(pool="load")
    try:
        while not stop.is_set():
            tokens = list(range(base, base + 8))
            base += 100
            try:
                s = c.open(tokens)
                s.alloc(8)
                for layer in range(LAYERS):
                    s.write_kv(0, layer, 0, np.ones((8, KVH, D), np.float32),
                               np.ones((8, KVH, D), np.float32))
                s.commit(8)
                while len(tokens) < 40 and not stop.is_set():
                    committed = list(tokens)
                    s.append([base + len(tokens)])
                    tokens.append(base + len(tokens))
                    s.alloc(1)
                    for layer in range(LAYERS):
                        s.write_kv(0, layer, len(tokens) - 1, np.ones((1, KVH, D), np.float32),
                                   np.ones((1, KVH, D), np.float32))
                    s.commit(len(tokens))
                s.close()
            except kvpool.Disconnected:
                resets += 1
                c.close()
                restarted.wait(60)
                c = daemon.client(pool="load")
                with c.open(committed) as s:
                    out[i] = (resets, s.lookup(), len(committed))
    finally:
        c.close()
        out.setdefault(i, (resets, None, None))


def test_clients_decoding_across_a_restart_each_reconnect_once(daemon):
    stop, restarted, out = threading.Event(), threading.Event(), {}
    threads = [threading.Thread(target=decode_loop, args=(daemon, i, stop, restarted, out))
               for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    restart(daemon)
    restarted.set()
    time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(60)
    assert sorted(out) == [0, 1, 2, 3]
    for i, (resets, hit, n) in out.items():
        # One reset each, mid-decode; what was committed before it hits whole blocks after.
        assert resets == 1 and n >= 8 and hit == (n - 1) // 4 * 4, (i, resets, hit, n)
    row, _ = pool_row(daemon, "load")
    assert row["used"] == 0 and row["free"] == 256  # no block leaked across the handover


def test_a_mapped_pool_keeps_its_memory_and_generation(daemon):
    rng = np.random.default_rng(7)
    tokens = list(range(700, 713))
    c = daemon.client(pool="shared", namespace="ns1")
    m = c.map()
    gen = c.pool.generation
    s = c.open(tokens)
    s.alloc(13)
    k, v = rows(rng, 13), rows(rng, 13)
    s.write_kv(0, 0, 0, k, v)
    s.commit(13)
    table = s.table()[0]
    K, _ = m.kv_cache(0)
    seen = np.array(K[table[:3]])
    restart(daemon)
    with pytest.raises(kvpool.Disconnected):
        s.lookup()
    # The old mapping is the same memory: still valid, the same bytes.
    assert np.array_equal(np.array(K[table[:3]]), seen)
    with daemon.client(pool="shared", namespace="ns1") as c2:
        assert c2.pool.generation == gen
        K2, _ = c2.map().kv_cache(0)
        assert np.array_equal(np.array(K2[table[:3]]), seen)
        with c2.open(tokens) as s2:
            assert s2.lookup() == 12
    c.close()


def test_reconnect_finds_the_same_pool_after_a_restart(daemon):
    """Client.reconnect(): the same socket, pool and namespace; the generation it finds. The
    old connection's sequences and lookups are gone with it."""
    fill(daemon, "other", [0], 300, n=4)
    p = prompts(300, 1)[0]
    c = daemon.client(pool="other")
    gen = c.pool.generation
    s = c.open(p)
    pending = c.open(p).lookup_async()
    restart(daemon)
    with pytest.raises(kvpool.Disconnected):
        s.lookup()
    assert c.reconnect() == gen and c.pool.generation == gen
    with pytest.raises(kvpool.Disconnected):
        s.lookup()  # its handle meant the old connection's sequence
    with pytest.raises(kvpool.Disconnected):
        pending.result(timeout=1)
    with c.open(p) as s2:
        assert s2.lookup() == 12
    s.close()  # nothing to close: gone with its connection
    c.close()


def test_an_exec_that_cannot_run_leaves_the_daemon_serving(daemon):
    fill(daemon, "other", [0], 300, n=4)
    with daemon.client(pool="other") as c:
        boot = c.boot_id
    r = kvctl(daemon, "daemon", "restart", "--exec", "/nonexistent")
    assert r.returncode == 1
    assert r.stderr == "kvctl: daemon restart: /nonexistent: No such file or directory\n"
    r = kvctl(daemon, "daemon", "restart", "--exec", "/bin/true")
    assert r.returncode == 1
    assert r.stderr.startswith("kvctl: daemon restart: /usr/bin/true --version printed \"true ")
    assert r.stderr.endswith("\": not a kvpoold that runs here\n")
    with daemon.client(pool="other") as c:
        assert c.boot_id == boot  # the same run, still serving
    assert lookups(daemon, "other", 300, 4) == [12] * 4
    assert "refused: /nonexistent: No such file or directory; serving on" in log(daemon)


def test_kv_events_after_a_restart_clear_then_say_every_block_again(daemon):
    ps = prompts(100, 2)
    with daemon.client(pool="full") as c:
        for p in ps:
            s, _ = written(c, p, np.random.default_rng(1), [0])
            s.close()
    restart(daemon)
    got = replay("ipc://%s/full.replay" % daemon.tmp, 0)
    events = [e for _, payload in got[:-1] for e in kvpool_events(payload)]
    assert events[0] == CLEARED
    want = sorted([stored(chain(p, 4), None, p[:12], 4) for p in ps],
                  key=lambda e: e["block_hashes"][0])
    assert sorted(events[1:], key=lambda e: e["block_hashes"][0]) == want


def kvpool_events(payload):
    from kv_events_sub import unpack
    return unpack(payload)[1]
