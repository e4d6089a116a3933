# SPDX-License-Identifier: MIT
"""The KV tests' geometry, a float64 attention reference and bf16 bit helpers."""
import numpy as np

BS = 4        # block_size of every pool here
KVH = 2       # kv_heads
D = 8         # head_dim
LAYERS = 2    # layers_per_group
WINDOW = 8    # kv's group 1: swa:8
SCALE = 1.0 / np.sqrt(D)

# Tolerance of the f32 kernels against the float64 reference (outputs are O(1)).
RTOL = 1e-5
ATOL = 1e-5


# ---- helpers ----

def rows(rng, n, heads=KVH, dim=D):
    return rng.standard_normal((n, heads, dim)).astype(np.float32)


def bf16_bits(f32):
    """bf16 bit patterns of float32 values, truncated (the top 16 bits)."""
    return (np.ascontiguousarray(f32, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_value(bits):
    """float32 values of bf16 bit patterns (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def bits32(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def window_of(group):
    """kv's groups: 0 full (None: no window), 1 swa:8."""
    return None if group == 0 else WINDOW


def ref_attend(K, V, q, first, scale, window=None, softcap=0.0):
    """softmax(softcap(scale * q.K^T)) . V over the visible keys, in float64.

    K, V: [positions][kv_heads][head_dim] from position 0; q: [n][q_heads][head_dim] for
    positions first .. first + n - 1; full mask j <= i, swa W: i - W < j <= i."""
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    n, q_heads, _ = q.shape
    group_size = q_heads // K.shape[1]
    out = np.empty(q.shape)
    for r in range(n):
        i = first + r
        lo = 0 if window is None else max(0, i - window + 1)
        for h in range(q_heads):
            kh = h // group_size
            s = scale * (K[lo:i + 1, kh] @ q[r, h])
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            p = np.exp(s - s.max())
            p /= p.sum()
            out[r, h] = p @ V[lo:i + 1, kh]
    return out


def assert_close(out, ref):
    assert out.dtype == np.float32
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def op_count(client, op):
    return client.stats()["operations"].get(op, {}).get("count", 0)


def filled(client, tokens, rng, groups=(0, 1), layers=(0, 1), commit=False):
    """A sequence with KV written at every position of `tokens`, distinct per (group, layer).
    Returns (seq, {(group, layer): (k, v)})."""
    n = len(tokens)
    seq = client.open(tokens)
    assert seq.alloc(n) == 0
    data = {}
    for g in groups:
        for layer in layers:
            k, v = rows(rng, n), rows(rng, n)
            seq.write_kv(g, layer, 0, k, v)
            data[g, layer] = (k, v)
    if commit:
        seq.commit(n)
    return seq, data


def written(client, tokens, rng, groups=(0,)):
    """A sequence with KV at every position of tokens, committed; {(g, layer): (k, v)}."""
    seq = client.open(tokens)
    assert seq.alloc(len(tokens)) == 0
    data = {}
    for g in groups:
        for layer in range(LAYERS):
            k, v = rows(rng, len(tokens)), rows(rng, len(tokens))
            seq.write_kv(g, layer, 0, k, v)
            data[g, layer] = (k, v)
    seq.commit(len(tokens))
    return seq, data
