# SPDX-License-Identifier: MIT
"""Mapped views of host pools (Client.map, PoolMap.kv_cache), both layouts.

Pools (conftest.py): kv (f32, groups full + swa:8, 2 kv heads, head_dim 8, 2 layers, block 4),
bf16 (the same in bf16, full only), shared-block / shared-layer (ns1 only, so mappable)."""
import gc

import numpy as np
import pytest

import kvpool
from kv_helpers import BS, D, KVH, LAYERS, SCALE, assert_close, bf16_bits, ref_attend, rows


# ---- 6. mapped views of host pools ----

SHARED = [("shared-block", "block", "f32", np.float32),
          ("shared-layer", "layer", "bf16", np.uint16)]


def pool_rows(rng, n, dtype):
    f = rows(rng, n)
    return f if dtype == np.float32 else bf16_bits(f)


def at(view, table, positions):
    """Rows of positions from a view [blocks][block_size][kv_heads][head_dim]."""
    return np.stack([view[table[p // BS], p % BS] for p in positions])


def mapped_kv(address):
    """Whether address lies in a mapping of a kvpool-kv memfd (the pool's memory)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return "kvpool-kv" in line
    return False


@pytest.mark.parametrize("pool,layout,dtype_name,dtype", SHARED, ids=["block", "layer"])
def test_map_view_equals_read_kv(daemon, rng, pool, layout, dtype_name, dtype):
    with daemon.client(pool=pool, namespace="ns1") as c:
        m = c.map()
        assert (m.memory, m.layout, m.dtype) == ("host", layout, dtype_name)
        assert (m.num_layers, m.num_blocks, m.block_size, m.kv_heads, m.head_dim) == \
            (LAYERS, 32, BS, KVH, D)
        T = 10
        seq = c.open(list(range(T)))
        seq.alloc(T)
        table = seq.table()[0]
        assert len(table) == 3 and 0 not in table
        written = {}
        for layer in range(LAYERS):
            k, v = pool_rows(rng, T, dtype), pool_rows(rng, T, dtype)
            seq.write_kv(0, layer, 0, k, v)
            written[layer] = (k, v)
        for layer in range(LAYERS):
            K, V = m.kv_cache(layer)
            assert isinstance(K, np.ndarray) and K.dtype == dtype and V.dtype == dtype
            assert K.shape == (32, BS, KVH, D) and V.shape == (32, BS, KVH, D)
            rk, rv = seq.read_kv(0, layer, 0, T)
            assert np.array_equal(rk, written[layer][0])
            assert np.array_equal(at(K, table, range(T)), rk)
            assert np.array_equal(at(V, table, range(T)), rv)
        # no copy: KV written after the views were taken shows in them
        K1, V1 = m.kv_cache(1)
        seq.commit(T)
        seq.alloc(2)
        table = seq.table()[0]
        k, v = pool_rows(rng, 2, dtype), pool_rows(rng, 2, dtype)
        seq.write_kv(0, 1, T, k, v)
        assert np.array_equal(at(K1, table, [T, T + 1]), k)
        assert np.array_equal(at(V1, table, [T, T + 1]), v)
        with pytest.raises(ValueError):
            m.kv_cache(LAYERS)
        with pytest.raises(ValueError):
            m.kv_cache(-1)


def write_then_read_through_view(daemon, rng, pool, dtype, via):
    with daemon.client(pool=pool, namespace="ns1") as c:
        m = c.map()
        T = 6
        seq = c.open(list(range(200, 200 + T)))
        seq.alloc(T)
        table = seq.table()[0]
        written = {}
        for layer in range(LAYERS):
            K, V = (via(x) for x in m.kv_cache(layer))
            k, v = pool_rows(rng, T, dtype), pool_rows(rng, T, dtype)
            for p in range(T):
                K[table[p // BS], p % BS] = k[p]
                V[table[p // BS], p % BS] = v[p]
            written[layer] = (k, v)
        # not written through WRITE_KV and not committed: the daemon does not read it
        with pytest.raises(kvpool.NoData):
            seq.read_kv(0, 0, 0, 1)
        # a mapped pool: COMMIT takes the client's word
        seq.commit(T)
        for layer in range(LAYERS):
            rk, rv = seq.read_kv(0, layer, 0, T)
            assert np.array_equal(rk, written[layer][0])
            assert np.array_equal(rv, written[layer][1])
        if dtype == np.float32:
            q = rows(rng, 1, 4)
            out = seq.attend(0, 1, q, T - 1, SCALE)
            assert_close(out, ref_attend(*written[1], q, T - 1, SCALE))


@pytest.mark.parametrize("pool,layout,dtype_name,dtype", SHARED, ids=["block", "layer"])
def test_map_write_through_view_then_commit(daemon, rng, pool, layout, dtype_name, dtype):
    """What an engine running its own kernels does: K[b, t] = ... on the kv_cache views."""
    write_then_read_through_view(daemon, rng, pool, dtype, lambda view: view)


@pytest.mark.parametrize("pool,layout,dtype_name,dtype", SHARED, ids=["block", "layer"])
def test_map_views_are_writable_and_torch_shares_them(daemon, pool, layout, dtype_name, dtype):
    """torch.from_numpy of a view is the pool's memory too (bf16 bits through int16)."""
    torch = pytest.importorskip("torch")
    with daemon.client(pool=pool, namespace="ns1") as c:
        K, V = c.map().kv_cache(1)
        assert K.flags.writeable and V.flags.writeable
        t = torch.from_numpy(K.view(np.int16) if K.dtype == np.uint16 else K)
        assert t.data_ptr() == K.__array_interface__["data"][0]
        assert t.stride() == tuple(st // K.itemsize for st in K.strides)
        t[3, 2, 1, 5] = 7
        assert K[3, 2, 1, 5] == 7
        assert np.count_nonzero(K) == 1


@pytest.mark.parametrize("pool,layout,dtype_name,dtype", SHARED, ids=["block", "layer"])
def test_map_view_outlives_the_map(daemon, rng, pool, layout, dtype_name, dtype):
    with daemon.client(pool=pool, namespace="ns1") as c:
        T = 7
        seq = c.open(list(range(T)))
        seq.alloc(T)
        table = seq.table()[0]
        k, v = pool_rows(rng, T, dtype), pool_rows(rng, T, dtype)
        seq.write_kv(0, 1, 0, k, v)
        m = c.map()
        K, V = m.kv_cache(1)
        k_at = K.__array_interface__["data"][0]
        v_at = V.__array_interface__["data"][0]
        assert mapped_kv(k_at) and mapped_kv(v_at)
        del m
        gc.collect()
        assert mapped_kv(k_at) and mapped_kv(v_at)
        assert np.array_equal(at(K, table, range(T)), k)
        assert np.array_equal(at(V, table, range(T)), v)
        # still the live memory, not a copy
        seq.commit(T)
        seq.alloc(1)
        table = seq.table()[0]
        k1, v1 = pool_rows(rng, 1, dtype), pool_rows(rng, 1, dtype)
        seq.write_kv(0, 1, T, k1, v1)
        assert np.array_equal(at(K, table, [T]), k1)
        assert np.array_equal(at(V, table, [T]), v1)
        # one view left: still mapped; none: unmapped
        del K
        gc.collect()
        assert mapped_kv(v_at)
        assert np.array_equal(at(V, table, range(T)), v)
        del V
        gc.collect()
        assert not mapped_kv(v_at)


def test_map_unrestricted_pool_is_permission_denied(kv, daemon):
    with pytest.raises(kvpool.PermissionDenied) as e:
        kv.map()
    assert e.value.errno == 1
    with daemon.client(pool="bf16") as c:
        with pytest.raises(kvpool.PermissionDenied):
            c.map()
