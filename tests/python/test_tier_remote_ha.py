# SPDX-License-Identifier: MIT
"""The cluster tier (tier_remote) while the cluster changes under it: a master killed (its
slots miss, the others hit, until its replica takes over or it is back: no daemon restart,
one log line an outage), a slot half migrated (ASK), a reshard under load (redirects
followed, hits go on), keys that expire
(tier_remote_ttl_s: a block sent again once its key is gone) and `kvctl pool purge-remote`.
docs/tiers.md, "The cluster tier"."""

import struct
import threading
import time

import numpy as np
import pytest

from conftest import DAEMON
from daemon_proc import Daemon
from kv_helpers import BS, D, KVH, LAYERS, written
from redis_cluster import Cluster
from test_tier_remote import POOL, TIMEOUT, kvctl, remote_of

# A value's header, format 2: magic, version, geometry, XXH3-64 of the data, its bytes, tag.
HEAD = struct.Struct("<4sIQQQ32s")
NO_TAG = bytes(32)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


@pytest.fixture
def ha(tmp_path):
    """3 masters, a replica each, failing over in seconds; the live masters serve their slots
    while a dead one's are not served (as a cache's cluster would be set up)."""
    c = Cluster(tmp_path, replicas=1, node_timeout_ms=1000, full_coverage=False)
    yield c
    c.stop()


def config(url, pools):
    """kvpool.conf text: pools as (name, groups, extra keys)."""
    return "".join(POOL.format(name=n, groups=g, url=url,
                               extra=x if "timeout" in x else x + "\n" + TIMEOUT)
                   for n, g, x in pools)


def daemon_at(path, url, pools, env=None):
    path.mkdir(exist_ok=True)
    return Daemon(path, config(url, pools), DAEMON, env=env)


def two_daemons(tmp_path, url, pools, env=None):
    """Two kvpoold (two machines, as far as the pool goes) on one cluster."""
    return (daemon_at(tmp_path / "a", url, pools, env),
            daemon_at(tmp_path / "b", url, pools, env))


def log_of(daemon):
    with open(daemon.log.name) as f:
        return f.read()


def prompts(n, base=1000):
    """n prompts of 17 tokens (4 full blocks), no token shared."""
    return [list(range(base + 100 * i, base + 100 * i + 17)) for i in range(n)]


def write_all(client, admin, pool, ps, rng, groups=(0,)):
    """Each prompt written, committed and its sends waited for, one at a time (a pool of 17
    blocks: each closed to leave room, each synced so that no send queue fills)."""
    datas = []
    for p in ps:
        seq, data = written(client, p, rng, groups=groups)
        seq.close()
        admin.pool_sync(pool)
        datas.append(data)
    return datas


def block_kv(data, group, b):
    """Block b's KV as a value carries it: layer by layer, K then V, [kv_heads][bs][dim]."""
    return b"".join(np.ascontiguousarray(data[group, layer][kv][b * BS:(b + 1) * BS]
                                         .transpose(1, 0, 2)).tobytes()
                    for layer in range(LAYERS) for kv in (0, 1))


def block_keys(cluster, datas, group=0):
    """Per prompt (written()'s data) the cluster's key of each of its 4 blocks, by position."""
    values = {k: bytes(cluster.get(k)) for k in cluster.keys()
              if k.split(b":")[2] == b"%d" % group}
    out = []
    for data in datas:
        keys = []
        for b in range(4):
            want = block_kv(data, group, b)
            assert len(want) == 2 * LAYERS * BS * KVH * D * 4
            keys.append(next(k for k, v in values.items() if v.endswith(want)))
        out.append(keys)
    return out


def lookups(client, ps):
    """Each prompt's LOOKUP hit (a LOOKUP promotes nothing: it asks the cluster every time)."""
    out = []
    for p in ps:
        with client.open(p) as s:
            out.append(s.lookup())
    return out


def test_a_dead_master_costs_its_slots_until_its_replica_serves_them(tmp_path, ha):
    one, two = two_daemons(tmp_path, ha.url, [("full", "full", "")])
    rng = np.random.default_rng(70)
    ps = prompts(6)
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            datas = write_all(c1, admin1, "full", ps, rng)
            assert remote_of(admin1, "full")["sent"] == 24
        keys = block_keys(ha, datas)
        owner = {k: ha.master_of(k) for ks in keys for k in ks}
        assert set(owner.values()) == set(ha.masters()), "every master holds some block"
        ha.wait_replicated()

        def expected(dead):
            """A prompt's hit while dead's slots are unserved: up to its first block there."""
            return [next((4 * b for b, k in enumerate(ks) if owner[k] == dead), 16)
                    for ks in keys]
        # The master to kill: one that leaves some prompts whole and cuts others (the keys are
        # the same every run: the hashes of the tokens).
        dead = next((m for m in ha.masters() if 0 < expected(m).count(16) < len(ps)), None)
        assert dead, "a master that cuts some prompts only"
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            assert lookups(c2, ps) == [16] * len(ps)
            ha.kill_master(dead, hold_failover=True)
            # Its replica holds off: whatever time the rounds take, the slots stay unserved.
            for _ in range(3):
                assert lookups(c2, ps) == expected(dead), str(remote_of(admin2, "full"))
                time.sleep(0.3)
            heir = ha.wait_failover(dead)
            assert heir is not None and heir != dead
            deadline = time.monotonic() + 10
            while (got := lookups(c2, ps)) != [16] * len(ps):
                assert time.monotonic() < deadline, (got, remote_of(admin2, "full"))
                time.sleep(0.2)
            r = remote_of(admin2, "full")
            assert r["outages"] >= 1, str(r)
            assert two.proc.poll() is None
        log = log_of(two)
        down = "pool full: remote tier: 127.0.0.1:%d unreachable (" % dead
        down = [line for line in log.splitlines() if down in line]
        assert len(down) == 1, log
        assert "misses until it is back" in down[0], log
        assert ("pool full: remote tier: 127.0.0.1:%d's slots are served by 127.0.0.1:%d"
                % (dead, heir)) in log, log
    finally:
        one.stop()
        two.stop()


@pytest.fixture
def lone(tmp_path):
    """3 masters, no replica: a dead one's slots stay its own; the others serve theirs."""
    c = Cluster(tmp_path, full_coverage=False)
    yield c
    c.stop()


def test_a_master_restarted_is_back_and_hits_again(tmp_path, lone):
    cluster = lone
    one, two = two_daemons(tmp_path, cluster.url, [("full", "full", "")])
    rng = np.random.default_rng(74)
    ps = prompts(6)
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            datas = write_all(c1, admin1, "full", ps, rng)
        keys = block_keys(cluster, datas)
        owner = {k: cluster.master_of(k) for ks in keys for k in ks}
        cut = {m: [next((4 * b for b, k in enumerate(ks) if owner[k] == m), 16) for ks in keys]
               for m in cluster.masters()}
        dead = next((m for m in cut if 0 < cut[m].count(16) < len(ps)), None)
        assert dead, "a master that cuts some prompts only"
        with cluster.resp(dead) as c:
            c.call("SAVE")  # so that it comes back with its keys
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            assert lookups(c2, ps) == [16] * len(ps)
            cluster.kill_master(dead)
            for _ in range(3):  # rounds that meet it down: one outage, said once
                assert lookups(c2, ps) == cut[dead], str(remote_of(admin2, "full"))
                time.sleep(0.3)
            cluster.revive(dead)
            deadline = time.monotonic() + 15  # however long the reconnects' back-off
            while (got := lookups(c2, ps)) != [16] * len(ps):
                assert time.monotonic() < deadline, (got, remote_of(admin2, "full"))
                time.sleep(0.2)
            r = remote_of(admin2, "full")
            assert r["outages"] == 1 and r["nodes_down"] == 0, str(r)
        log = log_of(two)
        node = "pool full: remote tier: 127.0.0.1:%d" % dead
        assert sum(node + " unreachable (" in line for line in log.splitlines()) == 1, log
        assert sum(line.endswith(node + " is back") for line in log.splitlines()) == 1, log
    finally:
        one.stop()
        two.stop()


def test_a_slot_being_migrated_is_read_through_ask(tmp_path, cluster):
    one, two = two_daemons(tmp_path, cluster.url, [("full", "full", "")])
    rng = np.random.default_rng(75)
    prompt = prompts(1)[0]
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            (data,) = write_all(c1, admin1, "full", [prompt], rng)
        key = block_keys(cluster, [data])[0][1]
        slot, src = cluster.keyslot(key), cluster.master_of(key)
        dst = next(m for m in cluster.masters() if m != src)
        # Half way through a reshard: the key moved, the slot still src's in every map.
        cluster.begin_migration(slot, src, dst)
        assert cluster.migrate_keys(slot, src, dst) >= 1
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            with c2.open(prompt) as s:
                assert s.lookup() == 16, str(remote_of(admin2, "full"))
                assert s.alloc(1, use_cache=True) == 16, str(remote_of(admin2, "full"))
                for layer in range(LAYERS):
                    k, v = s.read_kv(0, layer, 0, 16)
                    assert np.array_equal(k, data[0, layer][0][:16])
                    assert np.array_equal(v, data[0, layer][1][:16])
            r = remote_of(admin2, "full")
            assert r["asked"] >= 2 and r["promoted"] == 4, str(r)  # the EXISTS, the read
        cluster.end_migration(slot, dst)
        assert cluster.master_of(key) == dst
    finally:
        one.stop()
        two.stop()


def test_a_reshard_under_load_keeps_the_hits(tmp_path, cluster):
    one, two = two_daemons(tmp_path, cluster.url, [("full", "full", "")])
    rng = np.random.default_rng(71)
    looked, taken = prompts(6), prompts(5, base=5000)  # taken: more than the pool holds
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            datas = write_all(c1, admin1, "full", looked + taken, rng)
        slot = {k: cluster.keyslot(k)
                for ks in block_keys(cluster, datas[:len(looked)]) for k in ks}
        # redis-cli moves the source's lowest slots: the source whose lowest 2000 hold the
        # most of the looked-up keys, so that the reshard moves some.
        masters = cluster.masters()
        lowest = {m: set(cluster.slots_of(m)[:2000]) for m in masters}
        moving = {m: [k for k in slot if slot[k] in lowest[m]] for m in masters}
        src = max(masters, key=lambda m: len(moving[m]))
        dst = next(m for m in masters if m != src)
        assert moving[src], "some looked-up key in the slots moved"

        errors, results, stop = [], [], threading.Event()

        def load():
            """LOOKUPs of some prompts (never held by this pool: each asks the cluster), an
            ALLOC with the cache of another (read, promoted, evicted by the next ones)."""
            try:
                with two.client(pool="full") as c2:
                    i = 0
                    while not stop.is_set():
                        hits = lookups(c2, looked)
                        with c2.open(taken[i % len(taken)]) as s:
                            hits.append(s.alloc(1, use_cache=True))
                        results.append(hits)
                        i += 1
                        time.sleep(0.005)
            except Exception as e:  # noqa: BLE001 - the test fails on it below
                errors.append(e)

        t = threading.Thread(target=load)
        t.start()
        try:
            deadline = time.monotonic() + 10
            while len(results) < 3 and not errors:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            cluster.reshard(src, dst, 2000)
            at, deadline = len(results), time.monotonic() + 10
            while len(results) < at + 3 and not errors:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            stop.set()
            t.join(timeout=30)
        assert not errors, errors
        assert all(cluster.master_of(k) == dst for k in moving[src])
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            r = remote_of(admin2, "full")
            whole = sum(h == [16] * (len(looked) + 1) for h in results)
            assert whole >= 0.8 * len(results), (whole, len(results), r)
            assert lookups(c2, looked + taken) == [16] * (len(looked) + len(taken)), str(r)
    finally:
        one.stop()
        two.stop()


def test_keys_expire_after_tier_remote_ttl_s_and_are_sent_again(tmp_path, cluster):
    d = daemon_at(tmp_path / "d", cluster.url, [
        ("short", "full", "tier_remote_ttl_s = 2"),
        ("day", "full", "tier_remote_prefix = day"),                        # the default
        ("none", "full", "tier_remote_prefix = none\ntier_remote_ttl_s = 0"),
    ])
    rng = np.random.default_rng(72)
    prompt = list(range(100, 117))
    try:
        with d.client(admin=True) as admin:
            for pool in ("short", "day", "none"):
                with d.client(pool=pool) as c:
                    write_all(c, admin, pool, [prompt], rng)
            ttl = {}
            for k in cluster.keys():
                ttl.setdefault(k.split(b":")[0], []).append(cluster.call("TTL", k))
            assert all(1 <= t <= 2 for t in ttl[b"kvpool"]) and len(ttl[b"kvpool"]) == 4, ttl
            assert all(86000 < t <= 86400 for t in ttl[b"day"]) and len(ttl[b"day"]) == 4, ttl
            assert ttl[b"none"] == [-1] * 4, ttl  # no expiry
            deadline = time.monotonic() + 6
            while any(k.startswith(b"kvpool:") for k in cluster.keys()):
                assert time.monotonic() < deadline, "the keys outlived their TTL"
                time.sleep(0.1)
            time.sleep(0.5)  # the daemon's clock and Redis's: a margin, not a race
            assert remote_of(admin, "short")["sent"] == 4
            # Computed again: the daemon no longer takes the cluster to hold it.
            with d.client(pool="short") as c:
                write_all(c, admin, "short", [prompt], rng)
            r = remote_of(admin, "short")
            assert (r["sent"], r["deduplicated"]) == (8, 0), str(r)
            back = [k for k in cluster.keys() if k.startswith(b"kvpool:")]
            assert len(back) == 4 and all(1 <= cluster.call("TTL", k) <= 2 for k in back)
            # The others, within their TTL, are still known held.
            with d.client(pool="day") as c:
                write_all(c, admin, "day", [prompt], rng)
            assert remote_of(admin, "day")["deduplicated"] == 4
    finally:
        d.stop()


def test_purge_remote_deletes_its_pools_keys_only(tmp_path, cluster):
    d = daemon_at(tmp_path / "d", cluster.url, [
        ("a", "full", ""),
        ("b", "full swa:8", ""),                     # the same prefix, another geometry
        ("c", "full", "tier_remote_prefix = team2"),  # the same geometry, another prefix
    ])
    rng = np.random.default_rng(73)
    try:
        with d.client(admin=True) as admin:
            with d.client(pool="a") as c:
                write_all(c, admin, "a", prompts(3), rng)
            with d.client(pool="b") as c:
                write_all(c, admin, "b", prompts(1), rng, groups=(0, 1))
            with d.client(pool="c") as c:
                write_all(c, admin, "c", prompts(1), rng)
        keys = cluster.keys()
        geometry = {k.split(b":")[1] for k in keys if k.startswith(b"team2:")}
        assert len(geometry) == 1
        geometry = geometry.pop()
        of_a = [k for k in keys if k.startswith(b"kvpool:" + geometry + b":")]
        rest = sorted(k for k in keys if k not in of_a)
        assert len(of_a) == 12 and len(rest) == 8 + 4
        assert len({cluster.master_of(k) for k in of_a}) == 3, "a's keys on every master"
        out = kvctl(d, "pool", "purge-remote", "a")
        assert out.strip() == "pool a: 12 keys purged from the cluster tier"
        assert sorted(cluster.keys()) == rest
        # Nothing left to purge: 0, and the other pools' keys still there.
        assert kvctl(d, "pool", "purge-remote", "a").strip() == \
            "pool a: 0 keys purged from the cluster tier"
        assert sorted(cluster.keys()) == rest
    finally:
        d.stop()
