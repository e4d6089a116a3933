# SPDX-License-Identifier: MIT
"""kvpool.Client and Sequence against a live kvpoold (conftest's `daemon`).

Pools (conftest.CONFIG): `small` has 7 usable blocks of 4 tokens (block 0 is the null block),
no KV; `kv` holds f32 KV for groups full + swa:8, 2 layers each, 2 kv heads of 8; the
`shared-*` pools are restricted to namespace ns1; namespace `tight` may hold 2 blocks per pool.
"""
import errno
import json
import os
import subprocess
import time

import numpy as np
import pytest

import kvpool
from helpers import assert_clean, pool_stats, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KVCTL = os.environ.get("KVCTL", os.path.join(ROOT, "build", "bin", "kvctl"))


# ---------------------------------------------------------------------------------------------
# Client and PoolInfo
# ---------------------------------------------------------------------------------------------

def test_pool_info_of_config_pools(daemon):
    with daemon.client(pool="small") as c:
        info = c.pool
        assert isinstance(info, kvpool.PoolInfo)
        assert info.name == "small"
        assert info.num_blocks == 8
        assert info.block_size == 4
        assert info.groups == [("full", 0)]
        assert info.kv_heads == 0
        assert info.head_dim == 0
        assert info.max_len == 2**31 - 1
    with daemon.client(pool="kv") as c:
        assert tuple(c.pool) == ("kv", 64, 4, [("full", 0), ("swa", 8)], 2, 8, "f32", 2,
                                 2**31 - 1)
    with daemon.client(pool="bf16") as c:
        assert (c.pool.dtype, c.pool.groups, c.pool.layers_per_group) == \
            ("bf16", [("full", 0)], 2)
    with daemon.client(pool="shared-block", namespace="ns1") as c:
        assert (c.pool.name, c.pool.num_blocks, c.pool.dtype) == ("shared-block", 32, "f32")


def test_pool_generation_names_one_build_of_a_pool(daemon):
    """PoolInfo.generation: the same to every client of a pool and through attach, another for
    another pool and for the pool built again, never 0; not in the tuple."""
    with daemon.client(pool="small") as a, daemon.client(pool="small") as b, \
            daemon.client(pool="kv") as k, daemon.client(admin=True) as admin:
        g = a.pool.generation
        assert g != 0 and b.pool.generation == g and k.pool.generation not in (0, g)
        assert len(tuple(a.pool)) == 9
        admin.attach("small")
        assert admin.pool.generation == g
        generations = []
        for _ in range(2):  # an owned pool goes with its creator: then made again
            with daemon.client(admin=True) as owner:
                owner.create_pool("again", 8, 4, [("full", 0)], owned=True)
                owner.attach("again")
                generations.append(owner.pool.generation)
            deadline = time.monotonic() + 5
            while "again" in [p["name"] for p in admin.stats()["pools"]]:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert 0 not in generations and len({g, *generations}) == 3


def test_client_without_pool_then_attach(daemon):
    with daemon.client() as c:
        assert c.pool is None
        assert c.closed is False
        with pytest.raises(kvpool.NotFound) as ei:  # no pool attached: ENODEV
            c.open([1, 2, 3])
        assert ei.value.errno == errno.ENODEV
        c.attach("small")
        assert c.pool.name == "small"
        assert c.pool.num_blocks == 8
        with c.open([1, 2, 3]) as s:
            assert s.alloc(3) == 0
            assert len(s.table()) == 1
            # ATTACH with a sequence open: EBUSY, a plain kvpool.Error; still on `small`.
            with pytest.raises(kvpool.Error) as ei:
                c.attach("kv")
            assert type(ei.value) is kvpool.Error
            assert ei.value.errno == errno.EBUSY
            assert c.pool.name == "small"
        c.attach("kv")
        assert c.pool.name == "kv"
        assert c.pool.groups == [("full", 0), ("swa", 8)]
        with c.open([1, 2, 3]) as s:
            s.alloc(3)
            assert len(s.table()) == 2  # one table per group now


def test_detach_leaves_no_pool(daemon):
    """attach('') detaches (protocol: a 0-length name): .pool is then None, as for no pool."""
    with daemon.client(pool="small") as c:
        c.attach("")
        assert c.pool is None
        with pytest.raises(kvpool.NotFound):
            c.open([1])


def test_client_close_idempotent_and_context_manager(daemon):
    with daemon.client(pool="small") as watcher:
        with daemon.client(pool="small") as c:
            assert c.closed is False
            assert pool_stats(watcher, "small")["clients"] == 2
        assert c.closed is True
        c.close()  # again: nothing
        assert c.closed is True
        assert wait_for(lambda: pool_stats(watcher, "small")["clients"] == 1)
        assert len(watcher.stats()["clients"]) == 1


# ---------------------------------------------------------------------------------------------
# Sequences
# ---------------------------------------------------------------------------------------------

def test_open_alloc_table(daemon):
    with daemon.client(pool="small") as c:
        with c.open([1, 2, 3, 4, 5, 6]) as s:
            assert s.table() == [[]]
            assert s.alloc(6) == 0
            t = s.table()
            assert len(t) == 1 and len(t[0]) == 2
            a, b = t[0]
            assert a != b and 0 not in (a, b)
            assert all(0 < i < 8 for i in (a, b))
            p = pool_stats(c, "small")
            assert (p["sequences"], p["blocks_used"], p["blocks_free"]) == (1, 2, 5)
            # Without a commit the 6 tokens are not computed: 3 new ones fit the 8 slots.
            assert s.alloc(3) == 0
            assert s.table() == t
            # Once they are, 3 more need 9 slots: exactly one more block.
            s.commit(6)
            assert s.alloc(3) == 0
            t2 = s.table()
            assert t2[0][:2] == [a, b] and len(t2[0]) == 3
            assert t2[0][2] not in (0, a, b)
            assert pool_stats(c, "small")["blocks_used"] == 3
            # The daemon's client row counts this sequence and its blocks.
            (row,) = c.stats()["clients"]
            assert (row["pool"], row["sequences"], row["blocks_held"]) == ("small", 1, 3)
        assert_clean(c, "small")


def test_lookahead_takes_slots(daemon):
    with daemon.client(pool="small") as c, c.open([1, 2, 3]) as s:
        assert s.alloc(3, lookahead=6) == 0  # 9 slots: 3 blocks
        assert len(s.table()[0]) == 3


def test_commit_then_lookup_on_second_sequence(daemon):
    with daemon.client(pool="small") as c:
        prompt = [11, 12, 13, 14, 15, 16]
        s1 = c.open(prompt)
        assert s1.lookup() == 0  # nothing cached yet
        s1.alloc(6)
        s1.commit(6)
        assert pool_stats(c, "small")["blocks_cached"] == 1  # only the full block is published
        s2 = c.open(prompt)
        assert s2.lookup() == 4  # full blocks only: 4 of the 6 tokens
        # A prompt that shares only the first block hits that block too.
        with c.open([11, 12, 13, 14, 99, 98, 97]) as s3:
            assert s3.lookup() == 4
        with c.open([11, 12, 13, 99, 15, 16]) as s4:
            assert s4.lookup() == 0
        s1.close()
        s2.close()
        assert_clean(c, "small")


def test_alloc_use_cache_takes_the_hit(daemon):
    with daemon.client(pool="small") as c:
        prompt = [21, 22, 23, 24, 25, 26]
        with c.open(prompt) as s1:
            s1.alloc(6)
            s1.commit(6)
            first = s1.table()[0]
            with c.open(prompt) as s2:
                # The hit's 4 tokens count as computed; 2 new ones fit the second block.
                assert s2.alloc(2, use_cache=True) == 4
                t = s2.table()[0]
                assert len(t) == 2
                assert t[0] == first[0]          # the cached block, shared
                assert t[1] not in (0, first[0], first[1])
                p = pool_stats(c, "small")
                assert (p["blocks_used"], p["sequences"]) == (3, 2)
                assert p["prefix_cache"]["hits_tokens"] == 4
            with c.open(prompt) as s3:
                assert s3.alloc(2) == 0  # without use_cache: no hit, fresh blocks
                assert s3.table()[0][0] != first[0]
        assert_clean(c, "small")


def test_append_extends_the_sequence(daemon):
    with daemon.client(pool="small") as c:
        with c.open([1, 2, 3, 4]) as s:
            s.alloc(4)
            s.commit(4)
            with pytest.raises(kvpool.Error) as ei:  # past the tokens it has
                s.commit(5)
            assert ei.value.errno == errno.EINVAL
            s.append([5, 6, 7, 8])
            assert s.alloc(4) == 0
            assert len(s.table()[0]) == 2
            s.commit(8)
            s.append([9])
        # Prompt + appended tokens were published: 8 tokens over 2 full blocks.
        with c.open([1, 2, 3, 4, 5, 6, 7, 8, 9]) as s2:
            assert s2.lookup() == 8
        with c.open([1, 2, 3, 4, 5, 6, 7, 0, 9]) as s3:
            assert s3.lookup() == 4


def test_free_returns_blocks_and_keeps_sequence(daemon):
    with daemon.client(pool="small") as c:
        before = pool_stats(c, "small")
        assert (before["blocks_free"], before["blocks_used"]) == (7, 0)
        with c.open([1, 2, 3, 4, 5, 6]) as s:
            s.alloc(6)
            p = pool_stats(c, "small")
            assert (p["blocks_free"], p["blocks_used"]) == (5, 2)
            s.free()
            assert s.table() == [[]]
            p = pool_stats(c, "small")
            assert (p["blocks_free"], p["blocks_used"], p["sequences"]) == (7, 0, 1)
            # A preempted sequence stays open and allocates again.
            assert s.alloc(6) == 0
            assert len(s.table()[0]) == 2
            assert pool_stats(c, "small")["blocks_used"] == 2
        assert_clean(c, "small")


def test_close_is_idempotent_and_a_closed_sequence_is_stale(daemon):
    with daemon.client(pool="small") as c:
        s = c.open([1, 2, 3])
        s.alloc(3)
        assert s.closed is False
        s.close()
        assert s.closed is True
        s.close()  # again: nothing
        assert pool_stats(c, "small")["sequences"] == 0
        for call in (lambda: s.alloc(1), lambda: s.commit(1), lambda: s.lookup(),
                     lambda: s.table(), lambda: s.free(), lambda: s.append([4])):
            with pytest.raises(kvpool.Error) as ei:
                call()
            assert ei.value.errno == errno.EBADF
            assert ei.value.reason == "closed"
            assert isinstance(ei.value, OSError)


def test_context_managers_close_sequences(daemon):
    with daemon.client(pool="small") as c:
        with c.open([1, 2, 3]) as s1, c.open([4, 5, 6]) as s2:
            s1.alloc(3)
            s2.alloc(3)
            assert pool_stats(c, "small")["sequences"] == 2
            assert c.stats()["clients"][0]["sequences"] == 2
        assert s1.closed and s2.closed
        assert_clean(c, "small")
        # An exception leaving the block closes it too.
        with pytest.raises(KeyError):
            with c.open([7, 8]) as s3:
                s3.alloc(2)
                raise KeyError("out")
        assert s3.closed
        assert_clean(c, "small")


def test_dropped_sequence_is_closed(daemon):
    with daemon.client(pool="small") as c:
        s = c.open([1, 2, 3])
        s.alloc(3)
        assert pool_stats(c, "small")["sequences"] == 1
        del s
        assert_clean(c, "small")


def test_sequences_of_a_closed_client_are_closed_by_the_daemon(daemon):
    with daemon.client(pool="small") as watcher:
        c = daemon.client(pool="small")
        s = c.open([1, 2, 3, 4, 5])
        s.alloc(5)
        assert pool_stats(watcher, "small")["blocks_used"] == 2
        c.close()
        assert wait_for(lambda: pool_stats(watcher, "small")["sequences"] == 0)
        assert_clean(watcher, "small")
        s.close()  # the client is gone: nothing to do, no error


def test_salt_separates_prefix_cache(daemon):
    with daemon.client(pool="small") as c:
        prompt = [31, 32, 33, 34, 35, 36]
        with c.open(prompt, salt="tenant-a") as s:
            s.alloc(6)
            s.commit(6)
        with c.open(prompt, salt="tenant-b") as s:
            assert s.lookup() == 0
        with c.open(prompt) as s:
            assert s.lookup() == 0
        with c.open(prompt, salt="tenant-a") as s:
            assert s.lookup() == 4
        with c.open(prompt, salt=b"tenant-a") as s:  # the same bytes
            assert s.lookup() == 4
        with c.open(prompt, salt="tenant-a") as s:
            assert s.alloc(2, use_cache=True) == 4


def test_namespace_separates_prefix_cache(daemon):
    prompt = [41, 42, 43, 44, 45]
    with daemon.client(pool="small") as c, c.open(prompt) as s:
        s.alloc(5)
        s.commit(5)
        with c.open(prompt) as again:
            assert again.lookup() == 4
        with daemon.client(pool="small", namespace="ns1") as other, other.open(prompt) as o:
            assert o.lookup() == 0


def test_open_prefix(daemon):
    with daemon.client(pool="small") as c:
        with c.open([1, 2, 3, 4, 5], prefix=2) as s:
            assert s.alloc(5) == 0
        with c.open([1, 2], prefix=0) as s:
            assert s.alloc(2) == 0
        with pytest.raises(kvpool.Error) as ei:  # a prefix past the tokens: the daemon's EINVAL
            c.open([1, 2], prefix=5)
        assert type(ei.value) is kvpool.Error
        assert ei.value.errno == errno.EINVAL
        assert_clean(c, "small")


def test_tokens_from_iterables(daemon):
    with daemon.client(pool="small") as c:
        with c.open(range(1, 7)) as s:
            s.alloc(6)
            s.commit(6)
        with c.open((1, 2, 3, 4, 5, 6)) as s:
            assert s.lookup() == 4
        with c.open([1, 2, 3, 4, 5, 6]) as s:
            s.append([7, 8])
            assert s.lookup() == 4


def test_tokens_from_an_iterator(daemon):
    """kvpool_py.h promises 'any iterable of ints': a generator has no len()."""
    with daemon.client(pool="small") as c:
        with c.open(t for t in range(1, 7)) as s:
            s.alloc(6)
            s.commit(6)
            s.append(iter([7, 8]))
            s.alloc(2)
            s.commit(8)
        with c.open(list(range(1, 10))) as s:
            assert s.lookup() == 8


@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.int32])
def test_tokens_from_numpy(daemon, dtype):
    """Token ids in a numpy array (kvpool_py.h: 'a list, any iterable of ints, or a buffer of
    integers'), for open and append."""
    with daemon.client(pool="small") as c:
        with c.open(np.arange(1, 7, dtype=dtype)) as s:
            s.alloc(6)
            s.commit(6)
            s.append(np.array([7, 8], dtype=dtype))
            s.alloc(2)
            s.commit(8)
        with c.open([1, 2, 3, 4, 5, 6, 7, 8, 9]) as s:
            assert s.lookup() == 8


# ---------------------------------------------------------------------------------------------
# create_pool
# ---------------------------------------------------------------------------------------------

def test_create_pool_kv_geometry(daemon):
    with daemon.client(admin=True) as a:
        a.create_pool("geo", 16, 8, [("full", 0), ("swa", 16)], kv_heads=2, head_dim=4,
                      layers_per_group=3, dtype="f16", max_len=64)
        with daemon.client(pool="geo") as c:
            assert tuple(c.pool) == ("geo", 16, 8, [("full", 0), ("swa", 16)], 2, 4, "f16", 3, 64)
            with c.open(list(range(10))) as s:
                s.alloc(10)
                assert [len(t) for t in s.table()] == [2, 2]
            with pytest.raises(kvpool.Error) as ei:  # more tokens than max_len
                c.open(list(range(65)))
            assert ei.value.errno == errno.EINVAL
        p = pool_stats(a, "geo")
        assert (p["block_size"], p["blocks_total"]) == (8, 16)
        assert [(g["kind"], g["param"]) for g in p["groups"]] == [("full", 0), ("swa", 16)]
        a.attach("geo")
        assert a.pool.name == "geo" and a.pool.dtype == "f16"


def test_create_pool_keys(daemon):
    """keys: POOL_CREATE v3's text, applied by the daemon over the arguments, refused naming
    the key."""
    with daemon.client(admin=True) as a:
        a.create_pool("keyed", 16, 8, [("full", 0)],
                      keys="blocks = 32\n# the window\ngroups = full swa:16\nmax_len = 64\n")
        with daemon.client(pool="keyed") as c:
            assert tuple(c.pool) == ("keyed", 32, 8, [("full", 0), ("swa", 16)], 0, 0, "bf16",
                                     0, 64)
        with pytest.raises(kvpool.Error) as ei:
            a.create_pool("bad", 16, 8, [("full", 0)], keys="bogus = 1\n")
        assert (ei.value.errno, ei.value.reason) == (errno.EINVAL, "bogus: unknown pool key")
        with pytest.raises(kvpool.Error) as ei:
            a.create_pool("bad", 16, 8, [("full", 0)], keys="blocks = 1\n")
        assert ei.value.reason == "blocks = 1: out of range (2..16777216)"


def test_create_pool_restricted_namespace(daemon):
    with daemon.client(admin=True) as a:
        a.create_pool("ns1only", 8, 4, [("full", 0)], namespace="ns1", kv_heads=1, head_dim=4,
                      dtype="f32", layout="layer")
        with pytest.raises(kvpool.PermissionDenied) as ei:
            daemon.client(pool="ns1only")
        assert ei.value.reason == "pool 'ns1only' is restricted to namespace 'ns1'"
        with daemon.client(pool="ns1only", namespace="ns1") as c:
            assert tuple(c.pool) == ("ns1only", 8, 4, [("full", 0)], 1, 4, "f32", 1, 2**31 - 1)


def test_create_pool_owned_and_not(daemon):
    with daemon.client(pool="small") as watcher:
        a = daemon.client(admin=True)
        a.create_pool("kept", 10, 2, [("full", 0)])
        a.create_pool("owned", 12, 4, [("full", 0), ("swa", 8)], owned=True)
        names = [p["name"] for p in watcher.stats()["pools"]]
        assert names[:5] == ["small", "kv", "bf16", "shared-block", "shared-layer"]
        assert "kept" in names and "owned" in names
        kept = pool_stats(watcher, "kept")
        assert (kept["blocks_total"], kept["block_size"], kept["blocks_free"]) == (10, 2, 9)
        user = daemon.client(pool="owned")
        info = user.pool
        assert (info.name, info.num_blocks, info.block_size, info.groups) == \
            ("owned", 12, 4, [("full", 0), ("swa", 8)])
        assert (info.kv_heads, info.head_dim) == (0, 0)
        with daemon.client(pool="kept") as k:
            assert (k.pool.name, k.pool.num_blocks, k.pool.block_size, k.pool.groups) == \
                ("kept", 10, 2, [("full", 0)])
        a.close()
        # Owned, but still used by `user`: it stays.
        time.sleep(0.1)
        assert "owned" in [p["name"] for p in watcher.stats()["pools"]]
        with user.open([1, 2, 3]) as s:
            s.alloc(3)
        user.close()
        assert wait_for(lambda: "owned" not in [p["name"] for p in watcher.stats()["pools"]])
        assert "kept" in [p["name"] for p in watcher.stats()["pools"]]
        with pytest.raises(kvpool.NotFound):
            daemon.client(pool="owned")
        with daemon.client(pool="kept") as k:
            assert k.pool.name == "kept"


# ---------------------------------------------------------------------------------------------
# stats() and kvctl
# ---------------------------------------------------------------------------------------------

def key_shape(obj):
    """The keys of @obj, recursively; a list by its items' shape (all alike)."""
    if isinstance(obj, dict):
        return {k: key_shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        shapes = [key_shape(v) for v in obj]
        assert all(s == shapes[0] for s in shapes)
        return shapes[:1]
    return type(obj).__name__ if obj is not None else None


def test_stats_is_kvctl_stats_json(daemon):
    with daemon.client(pool="small") as c, c.open([1, 2, 3, 4, 5]) as s:
        s.alloc(5)
        s.commit(5)
        mine = c.stats()
        out = subprocess.run([KVCTL, "-s", daemon.socket, "stats", "--json"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        theirs = json.loads(out.stdout)
    assert set(mine) == set(theirs)
    assert {"pools", "clients", "operations"} <= set(mine)
    assert [p["name"] for p in mine["pools"]] == [p["name"] for p in theirs["pools"]]
    for a, b in zip(mine["pools"], theirs["pools"]):
        assert set(a) == set(b)
        assert key_shape(a) == key_shape(b)
        for key in ("block_size", "blocks_total", "blocks_used", "blocks_cached", "sequences"):
            assert a[key] == b[key], (a["name"], key)
    small = mine["pools"][0]
    assert (small["name"], small["blocks_used"], small["sequences"]) == ("small", 2, 1)
    assert set(mine["operations"]) == {"SEQ_OPEN", "ALLOC", "COMMIT"}
    assert set(mine["operations"]) <= set(theirs["operations"])
    for name, op in mine["operations"].items():
        assert set(op) == set(theirs["operations"][name])
        assert op["count"] == theirs["operations"][name]["count"] == 1
    assert key_shape(mine["clients"][0]) == key_shape(theirs["clients"][0])
