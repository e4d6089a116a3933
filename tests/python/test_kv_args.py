# SPDX-License-Identifier: MIT
"""KV arguments checked before anything is sent, and batches mixing writes and attends.

Pools (conftest.py): kv (f32, groups full + swa:8, 2 kv heads, head_dim 8, 2 layers, block 4),
bf16 (the same in bf16, full only), shared-block / shared-layer (ns1 only, so mappable)."""

import numpy as np
import pytest

import kvpool
from kv_helpers import (
    D, KVH, LAYERS, SCALE, WINDOW, assert_close, bf16_bits, filled, op_count, ref_attend, rows,
)


# ---- 5. ValueError before anything is sent ----

def test_write_kv_bad_arrays_send_nothing(kv, rng):
    seq = kv.open(list(range(4)))
    seq.alloc(4)
    good = rows(rng, 4)
    doubled = rows(rng, 4, KVH, 2 * D)
    bad_arrays = [
        rows(rng, 4, 3),                         # kv_heads 3
        rows(rng, 4, KVH, D - 1),                # head_dim 7
        good.reshape(4, KVH * D),                # 2 dimensions
        good.reshape(1, 4, KVH, D),              # 4 dimensions
        good.astype(np.float64),                 # wrong dtypes for an f32 pool
        good.astype(np.int16),
        good.astype(np.float16),
        bf16_bits(good),
        doubled[:, :, ::2],                      # non-contiguous, right shape
        np.asfortranarray(good),                 # Fortran order
        good[:0],                                # no rows
        good.tolist(),                           # not an array
    ]
    assert bad_arrays[8].shape == (4, KVH, D) and not bad_arrays[8].flags.c_contiguous
    before = op_count(kv, "WRITE_KV")
    for bad in bad_arrays:
        with pytest.raises(ValueError):
            seq.write_kv(0, 0, 0, bad, good)
        with pytest.raises(ValueError):
            seq.write_kv(0, 0, 0, good, bad)
    with pytest.raises(ValueError):  # v's rows differ from k's
        seq.write_kv(0, 0, 0, good, good[:3])
    assert op_count(kv, "WRITE_KV") == before
    with pytest.raises(kvpool.NoData):
        seq.read_kv(0, 0, 0, 1)
    # the count moves when something is sent (so the check above can fail)
    seq.write_kv(0, 0, 0, good, good)
    assert op_count(kv, "WRITE_KV") == before + 1
    rk, _ = seq.read_kv(0, 0, 0, 4)
    assert np.array_equal(rk, good)


def test_attend_bad_arguments_send_nothing(kv, rng):
    seq, _ = filled(kv, list(range(6)), rng, groups=(0,), layers=(0,))
    q = rows(rng, 1, 4)
    before = op_count(kv, "ATTEND")
    bad_q = [
        rows(rng, 1, 3),                 # q_heads not a multiple of kv_heads
        rows(rng, 1, 5),
        rows(rng, 1, 4, D + 1),          # head_dim
        q.astype(np.float64),            # q is float32
        q.astype(np.float16),
        rows(rng, 1, 4, 2 * D)[:, :, ::2],
        q[:0],
    ]
    for bad in bad_q:
        with pytest.raises(ValueError):
            seq.attend(0, 0, bad, 5, SCALE)
        with pytest.raises(ValueError):
            kv.attend(0, 0, [(seq, bad, 5)], SCALE)
    bad_items = [
        [],                                   # none
        [[seq, q, 5]],                        # a list, not a tuple
        [(seq, q)],                           # two items
        [(seq, q, 5, 0)],                     # four
        [seq],
        [(q, seq, 5)],                        # not a sequence first
        [(seq, q, 5), (seq, rows(rng, 1, 2), 5)],  # q_heads differ between items
        [(seq, q, 5), "x"],
        None,
    ]
    for items in bad_items:
        with pytest.raises((ValueError, TypeError)):
            kv.attend(0, 0, items, SCALE)
    for scale, softcap in [(float("nan"), 0.0), (float("inf"), 0.0), (SCALE, -1.0),
                           (SCALE, float("nan"))]:
        with pytest.raises(ValueError):
            seq.attend(0, 0, q, 5, scale, softcap=softcap)
    assert op_count(kv, "ATTEND") == before
    out = seq.attend(0, 0, q, 5, SCALE)
    assert op_count(kv, "ATTEND") == before + 1
    assert out.shape == q.shape


def test_out_of_range_arguments_are_value_errors(kv, rng):
    """Positions, counts, groups and layers past their fields are refused, not wrapped."""
    seq = kv.open(list(range(8)))
    seq.alloc(8)
    k = rows(rng, 8)
    seq.write_kv(0, 0, 0, k, k)
    one = rows(rng, 1)
    q = rows(rng, 1, 4)
    before = {op: op_count(kv, op) for op in ("WRITE_KV", "READ_KV", "ATTEND")}
    calls = [
        lambda: seq.read_kv(0, 0, 2**32, 1),          # would wrap to position 0
        lambda: seq.read_kv(0, 0, -1, 1),
        lambda: seq.read_kv(0, 0, 0, 2**32 + 1),
        lambda: seq.read_kv(2**32, 0, 0, 1),
        lambda: seq.read_kv(0, 2**32, 0, 1),
        lambda: seq.read_kv(0, 0, 0, 0),
        lambda: seq.write_kv(0, 0, 2**32 + 7, one, one),  # would wrap to position 7
        lambda: seq.write_kv(2**32, 0, 7, one, one),
        lambda: seq.attend(0, 0, q, 2**32 + 3, SCALE),
        lambda: kv.attend(0, 0, [(seq, q, -1)], SCALE),
        lambda: seq.attend(0, 70000, q, 3, SCALE),
        lambda: seq.attend(70000, 0, q, 3, SCALE),
        lambda: seq.commit(-1),
        # the uint16 group and layer fields, as Batch.write_kv and attend check them
        lambda: seq.write_kv(70000, 0, 7, one, one),
        lambda: seq.read_kv(0, 70000, 0, 1),
    ]
    wrong = []
    for i, call in enumerate(calls):
        try:
            call()
            wrong.append((i, "no error"))
        except ValueError:
            pass
        except Exception as e:  # noqa: BLE001 - reported below
            wrong.append((i, repr(e)))
    assert wrong == []
    with pytest.raises(ValueError):
        with kv.batch() as b:
            b.write_kv(seq, 0, 0, 2**32 + 6, one, one)
    with pytest.raises(ValueError):
        with kv.batch() as b:
            b.write_kv(seq, 70000, 0, 6, one, one)
    assert {op: op_count(kv, op) for op in before} == before
    rk, _ = seq.read_kv(0, 0, 0, 8)
    assert np.array_equal(rk, k)


def test_attend_zero_q_heads_is_value_error(kv, rng):
    """q of 0 heads (0 is a multiple of kv_heads) is a bad argument like q of 0 rows."""
    seq, _ = filled(kv, list(range(4)), rng, groups=(0,), layers=(0,))
    before = op_count(kv, "ATTEND")
    with pytest.raises(ValueError):
        seq.attend(0, 0, np.zeros((1, 0, D), np.float32), 3, SCALE)
    with pytest.raises(ValueError):
        kv.attend(0, 0, [(seq, np.zeros((1, 0, D), np.float32), 3)], SCALE)
    assert op_count(kv, "ATTEND") == before


def test_sequence_of_another_client_is_value_error(daemon, kv, rng):
    seq, _ = filled(kv, list(range(4)), rng, groups=(0,), layers=(0,))
    with daemon.client(pool="kv") as other:
        q = rows(rng, 1, 4)
        with pytest.raises(ValueError):
            other.attend(0, 0, [(seq, q, 3)], SCALE)
        with pytest.raises(ValueError):
            with other.batch() as b:
                b.write_kv(seq, 0, 0, 0, rows(rng, 1), rows(rng, 1))


def test_batch_with_a_bad_array_sends_nothing(kv, rng):
    seq = kv.open(list(range(4)))
    seq.alloc(4)
    k = rows(rng, 4)
    before = op_count(kv, "WRITE_KV")
    with pytest.raises(ValueError):
        with kv.batch() as b:
            b.write_kv(seq, 0, 0, 0, k, k)
            b.write_kv(seq, 0, 1, 0, k.astype(np.float64), k)
    assert op_count(kv, "WRITE_KV") == before
    with pytest.raises(kvpool.NoData):
        seq.read_kv(0, 0, 0, 1)
    with pytest.raises(ValueError):
        with kv.batch() as b:
            b.write_kv(seq, 0, 0, 0, k, k)
            b.attend(0, 0, [(seq, rows(rng, 1, 3), 3)], SCALE)
    assert op_count(kv, "WRITE_KV") == before
    with pytest.raises(kvpool.NoData):
        seq.read_kv(0, 0, 0, 1)


# ---- 7. batches ----

def test_batch_attend_sees_kv_written_earlier_in_the_batch(kv, rng):
    T = 9
    seq = kv.open(list(range(T)))
    data = {(g, layer): (rows(rng, T), rows(rng, T)) for g in (0, 1) for layer in range(LAYERS)}
    q1, q2, q3 = rows(rng, 1, 4), rows(rng, 3, 4), rows(rng, 1, 4)
    with kv.batch() as b:
        b.alloc(seq, T - 1)                                              # 0
        for (g, layer), (k, v) in data.items():                          # 1..4
            b.write_kv(seq, g, layer, 0, k[:T - 1], v[:T - 1])
        b.attend(seq, 1, 1, q1, T - 2, SCALE)                            # 5
        b.attend(0, 0, [(seq, q2, T - 4)], SCALE)                        # 6
        b.commit(seq, T - 1)                                             # 7
        b.alloc(seq, 1)                                                  # 8
        for (g, layer), (k, v) in data.items():                          # 9..12
            b.write_kv(seq, g, layer, T - 1, k[T - 1:], v[T - 1:])
        b.attend(seq, 1, 1, q3, T - 1, SCALE, softcap=1.5)               # 13
        b.commit(seq, T)                                                 # 14
    res = b.results
    assert len(res) == 15
    assert res[0] == 0 and res[8] == 0
    assert all(res[i] is None for i in (1, 2, 3, 4, 7, 9, 10, 11, 12, 14))
    assert_close(res[5], ref_attend(*(x[:T - 1] for x in data[1, 1]), q1, T - 2, SCALE, WINDOW))
    assert isinstance(res[6], list) and len(res[6]) == 1
    assert_close(res[6][0], ref_attend(*(x[:T - 1] for x in data[0, 0]), q2, T - 4, SCALE))
    ref3 = ref_attend(*data[1, 1], q3, T - 1, SCALE, WINDOW, 1.5)
    assert_close(res[13], ref3)
    # the same unbatched, now that all is committed
    assert np.array_equal(seq.attend(1, 1, q3, T - 1, SCALE, softcap=1.5), res[13])
    for (g, layer), (k, v) in data.items():
        if g == 0:
            rk, rv = seq.read_kv(g, layer, 0, T)
            assert np.array_equal(rk, k) and np.array_equal(rv, v)
    with pytest.raises(kvpool.PermissionDenied):
        seq.write_kv(0, 0, T - 1, rows(rng, 1), rows(rng, 1))


def test_batch_rewrite_between_attends(kv, rng):
    """Each attend sees the KV as the operations before it in the batch left it."""
    T = 6
    seq = kv.open(list(range(T)))
    seq.alloc(T)
    k, v = rows(rng, T), rows(rng, T)
    k2, v2 = rows(rng, 1), rows(rng, 1)
    q = rows(rng, 1, 4)
    with kv.batch() as b:
        b.write_kv(seq, 0, 0, 0, k, v)
        b.attend(seq, 0, 0, q, T - 1, SCALE)
        b.write_kv(seq, 0, 0, T - 1, k2, v2)    # not committed: may be written again
        b.attend(seq, 0, 0, q, T - 1, SCALE)
    first, second = b.results[1], b.results[3]
    assert_close(first, ref_attend(k, v, q, T - 1, SCALE))
    k[T - 1:], v[T - 1:] = k2, v2
    assert_close(second, ref_attend(k, v, q, T - 1, SCALE))
    assert not np.allclose(first, second, atol=1e-4)


def test_batch_write_eight_sequences_then_one_attend(kv, rng):
    seqs, data, items = [], [], []
    with kv.batch() as b:
        for s in range(8):
            T = 3 + s   # 3..10 tokens
            seq = kv.open(list(range(1000 * s, 1000 * s + T)))
            b.alloc(seq, T)
            k, v = rows(rng, T), rows(rng, T)
            b.write_kv(seq, 1, 0, 0, k, v)
            seqs.append(seq)
            data.append((k, v))
            n = 1 if s % 2 else 2
            items.append((seq, rows(rng, n, 4), T - n))
        b.attend(1, 0, items, SCALE)
    res = b.results
    assert len(res) == 17
    assert res[0:16:2] == [0] * 8 and res[1:16:2] == [None] * 8
    outs = res[16]
    assert isinstance(outs, list) and len(outs) == 8
    for (seq, q, first), (k, v), out in zip(items, data, outs):
        assert_close(out, ref_attend(k, v, q, first, SCALE, WINDOW))
    # the same over the ring one call at a time
    again = kv.attend(1, 0, items, SCALE)
    for a, o in zip(again, outs):
        assert np.array_equal(a, o)


def test_batch_failure_is_reported_in_results(kv, rng):
    seq, _ = filled(kv, list(range(4)), rng, commit=True)
    k = rows(rng, 1)
    with pytest.raises(kvpool.BatchError) as e:
        with kv.batch() as b:
            b.alloc(seq, 1)
            b.write_kv(seq, 0, 0, 0, k, k)     # below the commit: EPERM
            b.write_kv(seq, 0, 0, 4, k, k)
    assert e.value.errno == 1
    res = e.value.results
    assert res[0] == 0
    assert isinstance(res[1], kvpool.PermissionDenied)
    assert res[2] is None
    rk, _ = seq.read_kv(0, 0, 4, 1)
    assert np.array_equal(rk, k)
