# SPDX-License-Identifier: MIT
"""The KV data path through the binding: write_kv / read_kv, attend against a float64 numpy
reference, bf16 bits, torch tensors in.

Pools (conftest.py): kv (f32, groups full + swa:8, 2 kv heads, head_dim 8, 2 layers, block 4),
bf16 (the same in bf16, full only), shared-block / shared-layer (ns1 only, so mappable)."""

import numpy as np
import pytest

import kvpool
from kv_helpers import (
    D, KVH, LAYERS, SCALE, WINDOW, assert_close, bf16_bits, bf16_value, bits32, filled,
    op_count, ref_attend, rows, window_of,
)


# ---- 1. write_kv / read_kv, f32 ----

def test_f32_round_trip_every_group_and_layer(kv, rng):
    seq, data = filled(kv, list(range(13)), rng)
    for (g, layer), (k, v) in data.items():
        rk, rv = seq.read_kv(g, layer, 0, 13)
        assert rk.dtype == np.float32 and rv.dtype == np.float32
        assert rk.shape == (13, KVH, D) and rv.shape == (13, KVH, D)
        assert np.array_equal(bits32(rk), bits32(k))
        assert np.array_equal(bits32(rv), bits32(v))
        # a range inside, across a block boundary
        rk, rv = seq.read_kv(g, layer, 3, 6)
        assert np.array_equal(bits32(rk), bits32(k[3:9]))
        assert np.array_equal(bits32(rv), bits32(v[3:9]))
    # every (group, layer) kept its own data: no two of them alias
    keys = [bits32(seq.read_kv(g, layer, 0, 13)[0]).tobytes() for g, layer in data]
    assert len(set(keys)) == len(keys)


def test_f32_round_trip_is_bit_exact_for_special_values(kv):
    seq = kv.open([1, 2, 3, 4])
    seq.alloc(4)
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.17549435e-38,
                        3.4028235e38], dtype=np.float32)
    k = np.resize(special, (4, KVH, D)).astype(np.float32)
    v = k[::-1].copy()
    nan = np.array([0x7fc00001, 0xffc12345], dtype=np.uint32).view(np.float32)
    k[3, 1, :2] = nan
    seq.write_kv(0, 1, 0, k, v)
    rk, rv = seq.read_kv(0, 1, 0, 4)
    assert np.array_equal(bits32(rk), bits32(k))
    assert np.array_equal(bits32(rv), bits32(v))


def test_long_write_40_tokens(kv, rng):
    n = 40
    seq, data = filled(kv, list(range(100, 100 + n)), rng)
    for (g, layer), (k, v) in data.items():
        rk, rv = seq.read_kv(g, layer, 0, n)
        assert np.array_equal(rk, k) and np.array_equal(rv, v)
    seq.commit(n)
    # committed: the full group keeps every position
    for layer in range(LAYERS):
        rk, rv = seq.read_kv(0, layer, 0, n)
        assert np.array_equal(rk, data[0, layer][0]) and np.array_equal(rv, data[0, layer][1])
    # swa:8 keeps the window of the next query (positions 33..40) and drops the old blocks
    for layer in range(LAYERS):
        rk, rv = seq.read_kv(1, layer, n - WINDOW, WINDOW)
        assert np.array_equal(rk, data[1, layer][0][n - WINDOW:])
        assert np.array_equal(rv, data[1, layer][1][n - WINDOW:])
        with pytest.raises(kvpool.NoData):
            seq.read_kv(1, layer, 0, 1)
    # a query that would need a dropped position: NoData, not stale memory
    with pytest.raises(kvpool.NoData):
        seq.attend(1, 0, rows(rng, 1, 4), 20, SCALE)


def test_long_write_in_chunks_through_a_small_arena(daemon, rng):
    """4 KiB of arena holds 32 rows of f32 K and V: 40 go as more than one WRITE_KV."""
    with daemon.client(pool="kv", arena_bytes=4096) as c:
        n = 40
        seq = c.open(list(range(n)))
        seq.alloc(n)
        k, v = rows(rng, n), rows(rng, n)
        before = op_count(c, "WRITE_KV")
        seq.write_kv(0, 1, 0, k, v)
        assert op_count(c, "WRITE_KV") - before >= 2
        rk, rv = seq.read_kv(0, 1, 0, n)
        assert np.array_equal(rk, k) and np.array_equal(rv, v)
        rk, rv = seq.read_kv(0, 1, 5, 33)
        assert np.array_equal(rk, k[5:38]) and np.array_equal(rv, v[5:38])


def test_read_unwritten_is_nodata(kv, rng):
    seq = kv.open(list(range(8)))
    seq.alloc(8)
    k, v = rows(rng, 4), rows(rng, 4)
    seq.write_kv(0, 0, 0, k, v)
    rk, rv = seq.read_kv(0, 0, 0, 4)
    assert np.array_equal(rk, k) and np.array_equal(rv, v)
    for g, layer, first, n in [(0, 0, 4, 1),   # past what was written
                               (0, 0, 2, 3),   # partly written
                               (0, 0, 7, 1),   # allocated, never written
                               (0, 1, 0, 1),   # the other layer
                               (1, 0, 0, 1)]:  # the other group
        with pytest.raises(kvpool.NoData) as e:
            seq.read_kv(g, layer, first, n)
        assert e.value.errno == 61
    # NoData is a kvpool.Error, an OSError
    assert issubclass(kvpool.NoData, kvpool.Error) and issubclass(kvpool.Error, OSError)


def test_commit_needs_every_group_and_layer_written(kv, rng):
    seq = kv.open(list(range(4)))
    seq.alloc(4)
    seq.write_kv(0, 0, 0, rows(rng, 4), rows(rng, 4))
    seq.write_kv(0, 1, 0, rows(rng, 4), rows(rng, 4))
    seq.write_kv(1, 0, 0, rows(rng, 4), rows(rng, 4))
    with pytest.raises(kvpool.NoData):
        seq.commit(4)
    seq.write_kv(1, 1, 0, rows(rng, 2), rows(rng, 2))
    seq.commit(2)
    with pytest.raises(kvpool.NoData):
        seq.commit(4)


def test_draft_kv_past_commit_is_dropped_by_the_next_commit(kv, rng):
    seq, data = filled(kv, list(range(8)), rng)
    seq.commit(4)
    rk, _ = seq.read_kv(0, 0, 0, 4)
    assert np.array_equal(rk, data[0, 0][0][:4])
    with pytest.raises(kvpool.NoData):
        seq.read_kv(0, 0, 4, 1)


def test_rewrite_below_commit_is_permission_denied(kv, rng):
    seq, data = filled(kv, list(range(8)), rng, commit=True)
    seq.alloc(4)
    for first, n in [(0, 1), (7, 1), (6, 3)]:  # (6, 3): straddles the committed count
        with pytest.raises(kvpool.PermissionDenied) as e:
            seq.write_kv(0, 0, first, rows(rng, n), rows(rng, n))
        assert e.value.errno == 1
    # nothing changed
    rk, rv = seq.read_kv(0, 0, 0, 8)
    assert np.array_equal(rk, data[0, 0][0]) and np.array_equal(rv, data[0, 0][1])
    with pytest.raises(kvpool.NoData):
        seq.read_kv(0, 0, 8, 1)
    # at and past the committed count it may be written
    k, v = rows(rng, 4), rows(rng, 4)
    seq.write_kv(0, 0, 8, k, v)
    rk, rv = seq.read_kv(0, 0, 8, 4)
    assert np.array_equal(rk, k) and np.array_equal(rv, v)
    # past the allocated slots: EINVAL
    with pytest.raises(kvpool.Error) as e:
        seq.write_kv(0, 0, 12, rows(rng, 1), rows(rng, 1))
    assert e.value.errno == 22


# ---- 2. attend against the float64 reference ----

@pytest.mark.parametrize("group", [0, 1], ids=["full", "swa8"])
@pytest.mark.parametrize("q_heads", [2, 4, 8], ids=["mha", "gqa2", "gqa4"])
@pytest.mark.parametrize("softcap", [0.0, 1.5], ids=["nocap", "softcap"])
def test_attend_matches_reference(kv, rng, group, q_heads, softcap):
    T = 13
    seq, data = filled(kv, list(range(T)), rng)
    scale = 0.9 if softcap else SCALE  # logits of a few units: the cap matters
    for layer in range(LAYERS):
        K, V = data[group, layer]
        for first, n in [(T - 1, 1), (T - 5, 5), (0, 5), (3, 1)]:  # decode, prefills
            q = rows(rng, n, q_heads)
            out = seq.attend(group, layer, q, first, scale, softcap=softcap)
            ref = ref_attend(K, V, q, first, scale, window_of(group), softcap)
            assert_close(out, ref)
        # the reference discriminates: the other layer's KV gives another answer
        q = rows(rng, 1, q_heads)
        out = seq.attend(group, layer, q, T - 1, scale, softcap)
        other = data[group, 1 - layer]
        assert not np.allclose(out, ref_attend(*other, q, T - 1, scale, window_of(group),
                                               softcap), rtol=1e-3, atol=1e-3)


def test_attend_mask_and_softcap_order_matter(kv, rng):
    """The references that would be wrong are far from what the daemon returns."""
    T = 13
    seq, data = filled(kv, list(range(T)), rng)
    K, V = data[1, 0]
    q = rows(rng, 1, 4) * 3
    out = seq.attend(1, 0, q, T - 1, 0.9)
    assert_close(out, ref_attend(K, V, q, T - 1, 0.9, WINDOW))
    assert not np.allclose(out, ref_attend(K, V, q, T - 1, 0.9, None), atol=1e-3)
    assert not np.allclose(out, ref_attend(K, V, q, T - 1, 0.9, WINDOW + 1), atol=1e-3)
    # softcap applies to the scaled logits: softcap * tanh(scale * s / softcap)
    capped = seq.attend(1, 0, q, T - 1, 0.9, softcap=1.0)
    assert_close(capped, ref_attend(K, V, q, T - 1, 0.9, WINDOW, 1.0))
    assert not np.allclose(capped, out, atol=1e-3)
    # not scale * softcap * tanh(s / softcap)
    Kd, Vd, qd = K.astype(np.float64), V.astype(np.float64), q.astype(np.float64)
    wrong = np.empty_like(qd)
    for h in range(4):
        s = Kd[T - WINDOW:T, h // 2] @ qd[0, h]
        s = 0.9 * np.tanh(s)
        p = np.exp(s - s.max())
        wrong[0, h] = (p / p.sum()) @ Vd[T - WINDOW:T, h // 2]
    assert not np.allclose(capped, wrong, atol=1e-3)


def test_attend_decode_after_commit(kv, rng):
    """The usual decode loop: prompt committed, one more token allocated, written, attended."""
    T = 11
    seq, data = filled(kv, list(range(T)), rng, commit=True)
    seq.append([T])
    seq.alloc(1)
    for g in range(2):
        for layer in range(LAYERS):
            k, v = rows(rng, 1), rows(rng, 1)
            seq.write_kv(g, layer, T, k, v)
            K = np.concatenate([data[g, layer][0], k])
            V = np.concatenate([data[g, layer][1], v])
            q = rows(rng, 1, 4)
            out = seq.attend(g, layer, q, T, SCALE)
            assert_close(out, ref_attend(K, V, q, T, SCALE, window_of(g)))
    seq.commit(T + 1)


def test_attend_unwritten_position_is_nodata(kv, rng):
    seq = kv.open(list(range(8)))
    seq.alloc(8)
    seq.write_kv(0, 0, 0, rows(rng, 5), rows(rng, 5))
    seq.attend(0, 0, rows(rng, 1, 4), 4, SCALE)
    with pytest.raises(kvpool.NoData):
        seq.attend(0, 0, rows(rng, 1, 4), 5, SCALE)
    with pytest.raises(kvpool.NoData):
        seq.attend(0, 0, rows(rng, 3, 4), 3, SCALE)
    with pytest.raises(kvpool.NoData):
        seq.attend(0, 1, rows(rng, 1, 4), 0, SCALE)


def test_client_attend_over_two_sequences_in_order(kv, rng):
    a, da = filled(kv, list(range(13)), rng)
    b, db = filled(kv, list(range(50, 57)), rng)
    for group in (0, 1):
        qa, qb = rows(rng, 1, 4), rows(rng, 3, 4)
        ref_a = ref_attend(*da[group, 1], qa, 12, SCALE, window_of(group))
        ref_b = ref_attend(*db[group, 1], qb, 4, SCALE, window_of(group))
        outs = kv.attend(group, 1, [(a, qa, 12), (b, qb, 4)], SCALE)
        assert isinstance(outs, list) and len(outs) == 2
        assert_close(outs[0], ref_a)
        assert_close(outs[1], ref_b)
        outs = kv.attend(group, 1, [(b, qb, 4), (a, qa, 12)], SCALE)
        assert_close(outs[0], ref_b)
        assert_close(outs[1], ref_a)
        # the same request twice gives the same bits, and the single-sequence call too
        again = kv.attend(group, 1, [(b, qb, 4), (a, qa, 12)], SCALE)
        assert np.array_equal(again[1], outs[1])
        assert_close(a.attend(group, 1, qa, 12, SCALE), ref_a)
    # softcap passes through the many-sequence call as well
    qa, qb = rows(rng, 2, 4) * 2, rows(rng, 1, 4) * 2
    outs = kv.attend(0, 0, [(a, qa, 11), (b, qb, 6)], 0.9, softcap=1.25)
    assert_close(outs[0], ref_attend(*da[0, 0], qa, 11, 0.9, None, 1.25))
    assert_close(outs[1], ref_attend(*db[0, 0], qb, 6, 0.9, None, 1.25))


# ---- 3. bf16 ----

BF16_SPECIAL = np.array([0x0000, 0x8000, 0x7f80, 0xff80, 0x0001, 0x8001, 0x7f7f, 0x3f80],
                        dtype=np.uint16)  # +-0, +-inf, +-smallest subnormal, max, 1.0


def torch_bf16(torch, bits):
    """A numpy uint16 array of bf16 bits as a torch bfloat16 tensor (no copy).

    torch.from_numpy(bits).view(torch.bfloat16) is what the binding documents; torch before
    2.3 has no uint16, so there the same bits go through int16."""
    try:
        t = torch.from_numpy(bits)
    except TypeError:
        t = torch.from_numpy(bits.view(np.int16))
    return t.view(torch.bfloat16)


def test_bf16_bits_round_trip(daemon, rng):
    with daemon.client(pool="bf16") as c:
        assert c.pool.dtype == "bf16"
        seq = c.open(list(range(10)))
        seq.alloc(10)
        written = {}
        for layer in range(LAYERS):
            k, v = bf16_bits(rows(rng, 10)), bf16_bits(rows(rng, 10))
            k[0, 0] = BF16_SPECIAL
            seq.write_kv(0, layer, 0, k, v)
            written[layer] = (k, v)
        for layer in range(LAYERS):
            rk, rv = seq.read_kv(0, layer, 0, 10)
            assert rk.dtype == np.uint16 and rv.dtype == np.uint16
            assert rk.shape == (10, KVH, D)
            assert np.array_equal(rk, written[layer][0])
            assert np.array_equal(rv, written[layer][1])
        # float32 or float16 numpy arrays are not bf16
        for bad in (rows(rng, 1), rows(rng, 1).astype(np.float16)):
            with pytest.raises(ValueError):
                seq.write_kv(0, 0, 0, bad, bad)


def test_bf16_attend_matches_reference(daemon, rng):
    with daemon.client(pool="bf16") as c:
        T = 9
        seq = c.open(list(range(T)))
        seq.alloc(T)
        k, v = bf16_bits(rows(rng, T)), bf16_bits(rows(rng, T))
        seq.write_kv(0, 1, 0, k, v)
        for first, n in [(T - 1, 1), (T - 4, 4)]:
            q = rows(rng, n, 4)
            out = seq.attend(0, 1, q, first, SCALE)
            ref = ref_attend(bf16_value(k), bf16_value(v), q, first, SCALE)
            # f32 math over the exact bf16 values; q stays f32
            assert_close(out, ref)


def test_bf16_torch_tensors(daemon, rng):
    torch = pytest.importorskip("torch")
    with daemon.client(pool="bf16") as c:
        seq = c.open(list(range(6)))
        seq.alloc(6)
        fk, fv = rows(rng, 6), rows(rng, 6)
        tk = torch.from_numpy(fk).to(torch.bfloat16)   # round to nearest even
        tv = torch.from_numpy(fv).to(torch.bfloat16)
        seq.write_kv(0, 0, 0, tk, tv)
        rk, rv = seq.read_kv(0, 0, 0, 6)
        assert rk.dtype == np.uint16
        assert torch.equal(torch_bf16(torch, rk), tk)
        assert torch.equal(torch_bf16(torch, rv), tv)
        # the same values as numpy bits
        assert np.array_equal(rk, tk.view(torch.int16).numpy().view(np.uint16))
        # a torch bf16 tensor and uint16 bits of the same values store the same
        bits = bf16_bits(rows(rng, 6))
        seq.write_kv(0, 1, 0, torch_bf16(torch, bits), torch_bf16(torch, bits[::-1].copy()))
        rk, rv = seq.read_kv(0, 1, 0, 6)
        assert np.array_equal(rk, bits) and np.array_equal(rv, bits[::-1])
        # float32 / float16 tensors are not bf16
        for bad in (torch.zeros(6, KVH, D), torch.zeros(6, KVH, D, dtype=torch.float16)):
            with pytest.raises(ValueError):
                seq.write_kv(0, 0, 0, bad, bad)


# ---- 4. torch f32 tensors ----

def test_torch_f32_tensors_as_numpy(kv, rng):
    torch = pytest.importorskip("torch")
    T = 10
    k = {g: rows(rng, T) for g in (0, 1)}
    v = {g: rows(rng, T) for g in (0, 1)}
    a = kv.open(list(range(T)))
    b = kv.open(list(range(T)))
    a.alloc(T)
    b.alloc(T)
    for g in (0, 1):
        a.write_kv(g, 0, 0, k[g], v[g])
        b.write_kv(g, 0, 0, torch.from_numpy(k[g].copy()), torch.from_numpy(v[g].copy()))
        ra, rb = a.read_kv(g, 0, 0, T), b.read_kv(g, 0, 0, T)
        assert np.array_equal(ra[0], rb[0]) and np.array_equal(ra[1], rb[1])
        assert np.array_equal(rb[0], k[g]) and np.array_equal(rb[1], v[g])
        q = rows(rng, 3, 4)
        out_np = a.attend(g, 0, q, T - 3, SCALE)
        out_t = b.attend(g, 0, torch.from_numpy(q.copy()), T - 3, SCALE)
        assert isinstance(out_t, np.ndarray)
        assert np.array_equal(out_np, out_t)
        assert_close(out_t, ref_attend(k[g], v[g], q, T - 3, SCALE, window_of(g)))
        outs = kv.attend(g, 0, [(a, torch.from_numpy(q.copy()), T - 3), (b, q, T - 3)], SCALE)
        assert np.array_equal(outs[0], out_np) and np.array_equal(outs[1], out_np)


def test_torch_tensor_with_storage_offset(kv, rng):
    """A contiguous slice of a larger tensor: its data starts past the storage's."""
    torch = pytest.importorskip("torch")
    seq = kv.open(list(range(4)))
    seq.alloc(4)
    big = torch.from_numpy(rows(rng, 9))
    k, v = big[1:5], big[5:9]
    assert k.is_contiguous() and k.storage_offset() == KVH * D
    seq.write_kv(0, 0, 0, k, v)
    rk, rv = seq.read_kv(0, 0, 0, 4)
    assert np.array_equal(rk, k.numpy()) and np.array_equal(rv, v.numpy())


def test_torch_non_contiguous_is_value_error(kv, rng):
    torch = pytest.importorskip("torch")
    seq = kv.open(list(range(4)))
    seq.alloc(4)
    good = torch.from_numpy(rows(rng, 4))
    transposed = torch.from_numpy(rows(rng, KVH, 4)).transpose(0, 1)  # [4][KVH][D]
    assert transposed.shape == (4, KVH, D) and not transposed.is_contiguous()
    strided = torch.from_numpy(rows(rng, 4, KVH, 2 * D))[:, :, ::2]
    before = op_count(kv, "WRITE_KV")
    for bad in (transposed, strided):
        with pytest.raises(ValueError):
            seq.write_kv(0, 0, 0, bad, good)
        with pytest.raises(ValueError):
            seq.write_kv(0, 0, 0, good, bad)
    with pytest.raises(ValueError):
        seq.write_kv(0, 0, 0, good.double(), good.double())
    assert op_count(kv, "WRITE_KV") == before
    with pytest.raises(kvpool.NoData):
        seq.read_kv(0, 0, 0, 1)
    # q too
    seq.write_kv(0, 0, 0, good, good)
    q_t = torch.from_numpy(rows(rng, 4, 2)).transpose(0, 1)  # [2][4][D]
    assert not q_t.is_contiguous()
    before = op_count(kv, "ATTEND")
    with pytest.raises(ValueError):
        seq.attend(0, 0, q_t, 2, SCALE)
    with pytest.raises(ValueError):
        kv.attend(0, 0, [(seq, q_t, 2)], SCALE)
    assert op_count(kv, "ATTEND") == before
    out = seq.attend(0, 0, q_t.contiguous(), 2, SCALE)
    assert_close(out, ref_attend(good.numpy(), good.numpy(), q_t.contiguous().numpy(), 2, SCALE))


def test_torch_cuda_tensor_is_value_error(kv):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    seq = kv.open(list(range(4)))
    seq.alloc(4)
    k = torch.zeros(4, KVH, D, device="cuda")
    with pytest.raises(ValueError):
        seq.write_kv(0, 0, 0, k, k)
    with pytest.raises(kvpool.NoData):
        seq.read_kv(0, 0, 0, 1)
