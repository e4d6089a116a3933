# SPDX-License-Identifier: MIT
"""The cluster tier (tier_remote), going out: a pool writes every hashed block a COMMIT
completes through to a real Redis Cluster (3 masters of the test's own), one key a block,
its value a header and the block's KV; a block the cluster holds is not sent again; a
stopped cluster costs skipped sends, never a client error. docs/tiers.md, "The cluster
tier"."""

import errno
import os
import struct
import subprocess

import numpy as np
import pytest
import xxhash

import kvpool
from conftest import DAEMON, ROOT
from daemon_proc import Daemon
from kv_helpers import D, KVH, LAYERS, written
from redis_cluster import Cluster

BS = 4
SLOT = 2 * LAYERS * BS * KVH * D * 4  # K and V of every layer of one block, f32
POOL = """
[pool.{name}]
blocks = 17
block_size = 4
groups = {groups}
kv_heads = 2
head_dim = 8
dtype = f32
layers_per_group = 2
tier_remote = {url}
{extra}
"""
# A round's deadline for tests on a loaded machine: the first one connects and reads the slot
# map too. The stopped cluster's test sets its own.
TIMEOUT = "tier_remote_timeout_ms = 1000\n"

HEAD = struct.Struct("<4sIQQQ32s")  # magic, version, geometry, sum, bytes, tag
KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))


def kvctl(daemon, *args):
    return subprocess.run([KVCTL, "--socket", daemon.socket, *args], check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.stop()


def daemon_with(tmp_path, cluster, pools):
    text = "".join(POOL.format(name=n, groups=g, url=cluster.url,
                               extra=x if "timeout" in x else x + "\n" + TIMEOUT)
                   for n, g, x in pools)
    return Daemon(tmp_path, text, DAEMON)


def remote_of(client, pool):
    return next(p["tier_remote"] for p in client.stats()["pools"] if p["name"] == pool)


def test_committed_blocks_go_to_the_cluster_with_their_kv(tmp_path, cluster):
    d = daemon_with(tmp_path, cluster, [("full", "full", "")])
    rng = np.random.default_rng(56)
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            a, data = written(c, list(range(100, 117)), rng)  # 17 tokens: 4 full blocks
            admin.pool_sync("full")
            r = remote_of(admin, "full")
            assert (r["sent"], r["skipped"], r["deduplicated"], r["queued"]) == (4, 0, 0, 0)
            assert r["cluster"] is True and r["nodes_known"] == 3
            assert r["bytes_out"] > 4 * SLOT
            keys = sorted(cluster.keys())
            assert len(keys) == 4
            geometry = {k.split(b":")[1] for k in keys}
            assert len(geometry) == 1 and all(k.startswith(b"kvpool:") for k in keys)
            geometry = geometry.pop()
            # Each value: the header, then the block's chunks (layer by layer, K then V, each
            # [kv_heads][block_size][head_dim]), as the pool holds them.
            values = {}
            for k in keys:
                v = cluster.get(k)
                magic, version, geo, total, n, tag = HEAD.unpack_from(v)
                assert (magic, version, n, len(v)) == (b"KVPR", 2, SLOT, HEAD.size + SLOT)
                assert tag == bytes(32)  # no key file: untagged
                assert b"%016x" % geo == geometry
                assert xxhash.xxh3_64_intdigest(v[HEAD.size:]) == total
                values[bytes(v[HEAD.size:])] = k
            chunk = BS * KVH * D * 4
            for b in range(4):
                want = b"".join(
                    np.ascontiguousarray(data[0, layer][kv][b * BS:(b + 1) * BS]
                                         .transpose(1, 0, 2)).tobytes()
                    for layer in range(LAYERS) for kv in (0, 1))
                assert len(want) == 2 * LAYERS * chunk
                assert want in values, "block %d's KV is a value in the cluster" % b
            # The same prompt computed again: its blocks are known held, none is sent.
            b, _ = written(c, list(range(100, 117)), rng)
            admin.pool_sync("full")
            r = remote_of(admin, "full")
            assert (r["sent"], r["deduplicated"]) == (4, 4)
            assert len(cluster.keys()) == 4
            # kvctl stats: a remote row in TIERS; Prometheus: tier="remote".
            lines = kvctl(d, "stats").splitlines()
            at = next(i for i, line in enumerate(lines) if line.startswith("TIERS"))
            row = next(line for line in lines[at:] if line.startswith("full "))
            cols = dict(zip(lines[at].split(), row.split()))
            assert (cols["KIND"], cols["STORED"], cols["SKIPPED"]) == ("remote", "4", "0")
            prom = kvctl(d, "stats", "--prometheus").splitlines()
            assert 'kvpool_tier_stored_blocks_total{pool="full",tier="remote"} 4' in prom
            assert ('kvpool_tier_remote_deduplicated_blocks_total{pool="full",tier="remote"} 4'
                    in prom)
            assert 'kvpool_tier_remote_nodes{pool="full",state="known"} 3' in prom
    finally:
        d.stop()


def test_a_hybrid_pool_sends_every_group_and_pools_of_other_geometry_other_keys(tmp_path,
                                                                                cluster):
    d = daemon_with(tmp_path, cluster, [("hybrid", "full swa:8", ""),
                                        ("other", "full", "tier_remote_prefix = team2")])
    rng = np.random.default_rng(57)
    try:
        with d.client(pool="hybrid") as c, d.client(pool="other") as o, \
                d.client(admin=True) as admin:
            written(c, list(range(100, 117)), rng, groups=(0, 1))
            written(o, list(range(100, 117)), rng)
            admin.pool_sync("hybrid")
            admin.pool_sync("other")
            # full: 4 blocks; swa: the 4 its commit completed, before the window drops them.
            assert remote_of(admin, "hybrid")["sent"] == 8
            assert remote_of(admin, "other")["sent"] == 4
            keys = cluster.keys()
            assert sum(k.startswith(b"team2:") for k in keys) == 4
            hybrid = [k for k in keys if k.startswith(b"kvpool:")]
            assert sorted(k.split(b":")[2] for k in hybrid) == [b"0"] * 4 + [b"1"] * 4
    finally:
        d.stop()


def test_a_stopped_cluster_skips_sends_and_no_client_sees_an_error(tmp_path, cluster):
    d = daemon_with(tmp_path, cluster, [("full", "full", "tier_remote_timeout_ms = 50")])
    rng = np.random.default_rng(58)
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            cluster.stop()
            a, _ = written(c, list(range(100, 117)), rng)
            admin.pool_sync("full")
            r = remote_of(admin, "full")
            assert (r["sent"], r["skipped"]) == (0, 4)
            # Local hits as ever.
            with c.open(list(range(100, 117))) as b:
                assert b.alloc(1, use_cache=True) == 16
    finally:
        d.stop()


@pytest.mark.parametrize("keys,reason", [
    ("tier_remote = http://x:1",
     "tier_remote: not redis://HOST:PORT[,HOST:PORT...] (or rediss://, TLS)"),
    ("tier_remote = redis://h:0", "tier_remote: '0': a port is 1..65535"),
    ("tier_remote = redis://:6379", "tier_remote: ':6379': not HOST:PORT"),
    ("tier_remote_prefix = x", "tier_remote_prefix: set without tier_remote"),
    ("tier_remote = redis://127.0.0.1:1\ntier_remote_prefix = a:b",
     "tier_remote_prefix 'a:b': letters, digits, '_', '-' and '.' only"),
    ("tier_remote = redis://127.0.0.1:1\ncaching = off",
     "tier_remote: caching is off, so no block is ever hit from a tier"),
    ("tier_remote = redis://127.0.0.1:1\ngroups = cyclic:8\nmax_step_tokens = 8",
     "tier_remote: a pool of cyclic groups only has no block to share (its windows' snapshots "
     "stay here)"),
])
def test_refused_keys_name_their_cause(tmp_path, keys, reason):
    d = Daemon(tmp_path, "", DAEMON)
    try:
        with d.client(admin=True) as a:
            with pytest.raises(kvpool.Error) as ei:
                a.create_pool("r", 16, 4, [("full", 0)], kv_heads=2, head_dim=8, dtype="f32",
                              keys=keys + "\n")
            assert (ei.value.errno, ei.value.reason) == (errno.EINVAL, reason)
            with pytest.raises(kvpool.Error) as ei:
                a.create_pool("r", 16, 4, [("full", 0)], keys="tier_remote = redis://h:1\n")
            assert ei.value.reason == ("tier_remote: the pool holds no KV (kv_heads, head_dim, "
                                       "layers_per_group) for a tier to keep")
    finally:
        d.stop()


def two_daemons(tmp_path, cluster, pools):
    """Two kvpoold (two machines, as far as the pool goes) on one cluster."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    return daemon_with(a_dir, cluster, pools), daemon_with(b_dir, cluster, pools)


def hits_whole(client, prompt, data):
    """LOOKUP and ALLOC hit a 17-token prompt's 16 tokens, their KV (data's) byte for byte."""
    with client.open(prompt) as b:
        assert b.lookup() == 16
        assert b.alloc(1, use_cache=True) == 16
        for layer in range(LAYERS):
            k, v = b.read_kv(0, layer, 0, 16)
            assert np.array_equal(k, data[0, layer][0][:16])
            assert np.array_equal(v, data[0, layer][1][:16])


def test_a_prompt_committed_on_one_daemon_is_hit_on_another(tmp_path, cluster):
    one, two = two_daemons(tmp_path, cluster, [("full", "full", "")])
    rng = np.random.default_rng(59)
    prompt = list(range(100, 117))
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            a, data = written(c1, prompt, rng)
            admin1.pool_sync("full")
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            hits_whole(c2, prompt, data)
            r = remote_of(admin2, "full")
            assert (r["promoted"], r["hit_tokens"], r["rounds"]) == (4, 16, 2)
            assert r["bytes_in"] == 4 * (HEAD.size + SLOT)
            assert r["refused"] == dict(header=0, geometry=0, checksum=0, missing=0, late=0,
                                       tag=0)
            # Now the pool has them: a local hit asks nothing.
            with c2.open(prompt) as b2:
                assert b2.alloc(1, use_cache=True) == 16
            assert remote_of(admin2, "full")["rounds"] == 2
    finally:
        one.stop()
        two.stop()


def block_keys(cluster, data, group=0):
    """The cluster's key of each block of a 4-block prompt whose KV is data's, by position."""
    chunk = BS * KVH * D * 4
    by_value = {bytes(cluster.get(k)[HEAD.size:]): k for k in cluster.keys()
                if k.split(b":")[2] == b"%d" % group}
    keys = []
    for b in range(4):
        want = b"".join(
            np.ascontiguousarray(data[group, layer][kv][b * BS:(b + 1) * BS]
                                 .transpose(1, 0, 2)).tobytes()
            for layer in range(LAYERS) for kv in (0, 1))
        assert len(want) == 2 * LAYERS * chunk
        keys.append(by_value[want])
    return keys


def test_a_hybrid_pool_reads_only_the_window_of_its_swa_group(tmp_path, cluster):
    one, two = two_daemons(tmp_path, cluster, [("hybrid", "full swa:8", "")])
    rng = np.random.default_rng(60)
    prompt = list(range(100, 117))
    try:
        with one.client(pool="hybrid") as c1, one.client(admin=True) as admin1:
            a, data = written(c1, prompt, rng, groups=(0, 1))
            admin1.pool_sync("hybrid")
        with two.client(pool="hybrid") as c2, two.client(admin=True) as admin2:
            with c2.open(prompt) as b:
                assert b.alloc(1, use_cache=True) == 16
                for layer in range(LAYERS):
                    k, v = b.read_kv(1, layer, 9, 7)  # the window before 16: W-1 = 7 tokens
                    assert np.array_equal(k, data[1, layer][0][9:16])
                    assert np.array_equal(v, data[1, layer][1][9:16])
            r = remote_of(admin2, "hybrid")
            # full: 4 blocks; swa:8: cdiv(7, 4) = 2 blocks before 16, positions 2 and 3.
            assert (r["promoted"], r["bytes_in"]) == (6, 6 * (HEAD.size + SLOT))
    finally:
        one.stop()
        two.stop()


@pytest.mark.parametrize("pools", [
    [("full", "full", "")],                               # the same: hits (the control)
    [("full", "full swa:8", "")],                         # another geometry
    [("full", "full", "tier_remote_prefix = elsewhere")],  # another prefix
    [("full", "full", "namespace = ns1")],               # another namespace: another salt
])
def test_only_the_same_geometry_prefix_and_namespace_hit(tmp_path, cluster, pools):
    one_dir, two_dir = tmp_path / "a", tmp_path / "b"
    one_dir.mkdir()
    two_dir.mkdir()
    one = daemon_with(one_dir, cluster, [("full", "full", "")])
    ns = "\n[namespace.ns1]\nuids = 0\n"
    two = Daemon(two_dir, "".join(POOL.format(name=n, groups=g, url=cluster.url,
                                              extra=x + "\n" + TIMEOUT)
                                  for n, g, x in pools) + ns, DAEMON)
    rng = np.random.default_rng(61)
    prompt = list(range(100, 117))
    same = pools[0][1:] == ("full", "")
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            written(c1, prompt, rng)
            admin1.pool_sync("full")
        kw = dict(namespace="ns1") if "namespace" in pools[0][2] else {}
        with two.client(pool="full", **kw) as c2, two.client(admin=True) as admin2:
            with c2.open(prompt) as b:
                assert b.lookup() == (16 if same else 0)
                assert b.alloc(1, use_cache=True) == (16 if same else 0)
            r = remote_of(admin2, "full")
            assert r["promoted"] == (4 if same else 0)
            assert sum(r["refused"].values()) == 0
    finally:
        one.stop()
        two.stop()


@pytest.mark.parametrize("kind", ["header", "checksum", "geometry"])
def test_a_bad_value_is_refused_and_cuts_the_hit_before_it(tmp_path, cluster, kind):
    one, two = two_daemons(tmp_path, cluster, [("full", "full", "")])
    rng = np.random.default_rng(62)
    prompt = list(range(100, 117))
    try:
        with one.client(pool="full") as c1, one.client(admin=True) as admin1:
            a, data = written(c1, prompt, rng)
            admin1.pool_sync("full")
        key = block_keys(cluster, data)[2]
        value = bytearray(cluster.get(key))
        if kind == "header":
            value = b"garbage"
        elif kind == "checksum":
            value[HEAD.size + 100] ^= 1  # a valid header, its data changed
        else:
            magic, version, geo, total, n, tag = HEAD.unpack_from(value)
            HEAD.pack_into(value, 0, magic, version, geo ^ 1, total, n, tag)  # sound, elsewhere's
        cluster.set(key, bytes(value))
        with two.client(pool="full") as c2, two.client(admin=True) as admin2:
            with c2.open(prompt) as b:
                got = b.alloc(1, use_cache=True)
                assert got == 8, str(remote_of(admin2, "full"))  # blocks 0 and 1, cut before 2
                for layer in range(LAYERS):
                    k, v = b.read_kv(0, layer, 0, 8)
                    assert np.array_equal(k, data[0, layer][0][:8])
            r = remote_of(admin2, "full")
            assert r["refused"] == dict(dict(header=0, geometry=0, checksum=0, missing=0,
                                             late=0, tag=0), **{kind: 1})
            assert r["promoted"] == 2
    finally:
        one.stop()
        two.stop()


def test_a_block_promoted_from_the_local_tier_goes_to_the_cluster_it_missed(tmp_path, cluster):
    tier = "tier_host_bytes = %d" % (64 * SLOT)
    d = daemon_with(tmp_path, cluster, [("full", "full", tier)])
    rng = np.random.default_rng(63)
    prompt = list(range(100, 117))
    try:
        with d.client(pool="full") as c, d.client(admin=True) as admin:
            cluster.stop()
            a, data = written(c, prompt, rng)
            a.close()
            admin.pool_sync("full")
            assert remote_of(admin, "full")["skipped"] == 4
            cluster.restart()
            # Another prompt takes the pool's 16 blocks: A's go to the local tier only.
            with c.open(list(range(5000, 5064))) as other:
                assert other.alloc(64) == 0
            admin.pool_sync("full")
            assert cluster.keys() == []
            with c.open(prompt) as b:
                assert b.alloc(1, use_cache=True) == 16  # from the local tier
            admin.pool_sync("full")
            r = remote_of(admin, "full")
            assert (r["sent"], r["skipped"]) == (4, 4)
            assert len(cluster.keys()) == 4
    finally:
        d.stop()


def test_a_tenant_at_its_max_tier_bytes_sends_no_more(tmp_path, cluster):
    """Blocks in the cluster count against the max_tier_bytes of the tenant whose request
    made them: 2 blocks' worth lets 2 of a 4-block prompt go; another tenant sends its 4."""
    text = POOL.format(name="full", groups="full", url=cluster.url, extra=TIMEOUT) + """
[namespace.small]
uids = 0
max_tier_bytes = %d

[namespace.roomy]
uids = 0
""" % (2 * SLOT)
    d = Daemon(tmp_path, text, DAEMON)
    rng = np.random.default_rng(64)
    try:
        with d.client(pool="full", namespace="small") as small, \
                d.client(pool="full", namespace="roomy") as roomy, \
                d.client(admin=True) as admin:
            written(small, list(range(100, 117)), rng)
            admin.pool_sync("full")
            r = remote_of(admin, "full")
            assert (r["sent"], r["skipped"]) == (2, 2)
            written(roomy, list(range(200, 217)), rng)
            admin.pool_sync("full")
            r = remote_of(admin, "full")
            assert (r["sent"], r["skipped"]) == (6, 2)
            assert len(cluster.keys()) == 6
            # Purged, the tenant's bytes are its own again.
            assert admin.pool_purge_remote("full") == 6
            written(small, list(range(300, 317)), rng)
            admin.pool_sync("full")
            assert remote_of(admin, "full")["sent"] == 8
    finally:
        d.stop()
