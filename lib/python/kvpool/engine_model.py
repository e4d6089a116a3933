# SPDX-License-Identifier: MIT
"""kvpool.engine's model: a small decoder-only transformer in torch (RMSNorm, rotary
positions, grouped-query attention, SwiGLU), its presets by layer pattern, the pool groups
vLLM would form from them, and the attention masks kvpool's kinds define."""
import math
from dataclasses import dataclass

import numpy as np
import torch

VOCAB = 512
DIM = 256
Q_HEADS = 8
KV_HEADS = 2          # GQA 4
HEAD_DIM = 32
FFN = 512
BLOCK_SIZE = 16
STEP_TOKENS = 32      # the pool's max_step_tokens: the longest prefill chunk
ROPE_THETA = 10000.0
# Init gains, fixed: sharper attention than a plain 1/sqrt(fan_in) init (so the window a
# mask keeps changes what a layer sees) and logits of a few units, so greedy picks have
# clear winners (top-2 margins of 1e-2 and more for most steps).
Q_GAIN = 2.0
LOGIT_GAIN = 8.0

# Layer patterns: (kind, param) per layer; windows small enough that short runs drop blocks.
PRESETS = {
    "llama": [("full", 0)] * 4,
    "mistral": [("swa", 24)] * 4,
    "gemma3": [("swa", 16)] * 5 + [("full", 0)],
    "llama4": [("chunked", 32)] * 3 + [("full", 0)],
    "rswa": [("rswa", 12)] * 4,
    "cyclic": [("cyclic", 24)] * 4,
}
# Attention logit soft-capping per preset (Gemma 2's form; 0: off).
SOFTCAP = {"gemma3": 10.0}


@dataclass
class LayerSlot:
    """Where a model layer's KV lives in the pool: its group and the layer inside it."""
    group: int
    layer: int
    kind: str
    param: int


def vllm_groups(pattern):
    """The pool's groups as vLLM forms them (kv_cache_utils: uniform page size): layers of
    one kind in order of first appearance, cut into groups of the smallest kind's layer
    count (of the largest when that is within 1.25 of it). Returns (groups, layers_per_group,
    slots) with groups [(kind, param)] and slots a LayerSlot per model layer."""
    kinds = {}
    for index, spec in enumerate(pattern):
        kinds.setdefault(spec, []).append(index)
    counts = [len(layers) for layers in kinds.values()]
    size = min(counts)
    if max(counts) < size * 1.25:
        size = max(counts)
    groups, slots = [], [None] * len(pattern)
    for (kind, param), layers in kinds.items():
        if len(layers) % size:
            # vLLM pads the last group; a pool that holds KV wants every layer written
            # before a commit, so the presets avoid it.
            raise ValueError(f"{len(layers)} {kind} layers do not fill groups of {size}")
        for start in range(0, len(layers), size):
            for inner, index in enumerate(layers[start:start + size]):
                slots[index] = LayerSlot(len(groups), inner, kind, param)
            groups.append((kind, param))
    return groups, size, slots


def ring_slots(param, block_size=BLOCK_SIZE, step_tokens=STEP_TOKENS):
    """Positions a cyclic group's ring holds: R = cdiv(W - 1 + S, bs) blocks (docs/design.md)."""
    return -(-(param - 1 + step_tokens) // block_size) * block_size


def visible(kind, param, prefix, qpos, kpos):
    """Which keys each query sees (docs/kvdata.md, Masks): qpos [n, 1], kpos [1, m] -> [n, m]."""
    causal = kpos <= qpos
    if kind == "full":
        return causal
    if kind in ("swa", "cyclic"):
        return causal & (kpos > qpos - param)
    if kind == "rswa":
        return causal & ((kpos < prefix) | (kpos > qpos - param))
    if kind == "chunked":
        return causal & (torch.div(kpos, param, rounding_mode="floor") ==
                         torch.div(qpos, param, rounding_mode="floor"))
    raise ValueError(f"unknown attention kind {kind!r}")


def attend_torch(q, keys, values, qpos, kpos, slot, prefix, scale, softcap):
    """softmax(scale q.K^T) V over the visible keys, in f32: q [n, qh, hd], keys and values
    [m, kvh, hd] at positions kpos [m]; the query heads of a kv head share it (GQA)."""
    group = q.shape[1] // keys.shape[1]
    k = keys.float().repeat_interleave(group, dim=1)
    v = values.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,mhd->hnm", q, k) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    mask = visible(slot.kind, slot.param, prefix, qpos[:, None], kpos[None, :])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hnm,mhd->nhd", torch.softmax(scores, dim=-1), v)


def prompt_tokens(seed, request_id, length, shared):
    """A request's prompt: the shared prefix from the seed, the rest from (seed, id)."""
    head = np.random.default_rng([seed, 1]).integers(0, VOCAB, shared)
    tail = np.random.default_rng([seed, 2, request_id]).integers(0, VOCAB, length - shared)
    return [int(t) for t in np.concatenate([head, tail])]


def _rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate(x, positions):
    """Rotary positions (the half-split form Llama uses) on [t, heads, head_dim]."""
    half = x.shape[-1] // 2
    freq = ROPE_THETA ** (-torch.arange(half, dtype=torch.float32, device=x.device) / half)
    angle = positions.float()[:, None] * freq[None, :]
    cos, sin = torch.cos(angle)[:, None, :], torch.sin(angle)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Model:
    """The transformer. Weights are drawn from the seed with numpy's PCG64 (the same on every
    machine and torch version) and kept in f32 on @device."""

    def __init__(self, preset, seed, device="cpu"):
        if preset not in PRESETS:
            raise ValueError(f"unknown model {preset!r} (one of {', '.join(PRESETS)})")
        self.preset = preset
        self.pattern = PRESETS[preset]
        self.groups, self.layers_per_group, self.slots = vllm_groups(self.pattern)
        self.scale = 1.0 / math.sqrt(HEAD_DIM)
        self.softcap = SOFTCAP.get(preset, 0.0)
        self.device = torch.device(device)
        rng = np.random.default_rng(seed)

        def draw(rows, cols, gain=1.0):
            w = rng.standard_normal((rows, cols), dtype=np.float32) * (gain / math.sqrt(rows))
            return torch.from_numpy(w).to(self.device)

        self.embed = torch.from_numpy(rng.standard_normal((VOCAB, DIM), dtype=np.float32))
        self.embed = self.embed.to(self.device)
        self.layers = []
        for _ in self.pattern:
            self.layers.append({
                "wq": draw(DIM, Q_HEADS * HEAD_DIM, Q_GAIN),
                "wk": draw(DIM, KV_HEADS * HEAD_DIM, Q_GAIN),
                "wv": draw(DIM, KV_HEADS * HEAD_DIM),
                "wo": draw(Q_HEADS * HEAD_DIM, DIM),
                "w1": draw(DIM, FFN), "w3": draw(DIM, FFN), "w2": draw(FFN, DIM),
            })
        self.lm_head = draw(DIM, VOCAB, LOGIT_GAIN)
        self.ones = torch.ones(DIM, device=self.device)

    def forward(self, tokens, positions, attend, rows):
        """Logits at @rows of a ragged batch: @tokens and @positions [t] (every sequence's new
        tokens one after the other); attend(layer, q, k, v) returns the attention output
        [t, q_heads, head_dim] for q [t, q_heads, head_dim], k and v [t, kv_heads, head_dim]."""
        t = tokens.shape[0]
        x = self.embed[tokens]
        for index, w in enumerate(self.layers):
            h = _rms_norm(x, self.ones)
            q = _rotate((h @ w["wq"]).view(t, Q_HEADS, HEAD_DIM), positions)
            k = _rotate((h @ w["wk"]).view(t, KV_HEADS, HEAD_DIM), positions)
            v = (h @ w["wv"]).view(t, KV_HEADS, HEAD_DIM)
            out = attend(index, q.contiguous(), k.contiguous(), v.contiguous())
            x = x + out.reshape(t, Q_HEADS * HEAD_DIM) @ w["wo"]
            h = _rms_norm(x, self.ones)
            x = x + (torch.nn.functional.silu(h @ w["w1"]) * (h @ w["w3"])) @ w["w2"]
        return _rms_norm(x[rows], self.ones) @ self.lm_head
