# SPDX-License-Identifier: MIT
"""The connector's worker side: the pool mapped into this process, and the copies between
vLLM's KV tensors and the pool's, block for block and layer for layer. The same copies run
on CPU tensors (this repository's tests) and on a GPU's (vLLM on a GPU: a cuda pool's
mapping, or a host pool's through a copy to the device)."""

import re

import numpy as np
import torch

import kvpool

from .geometry import ConfigError, check, connect, from_vllm, pool_dtype

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def layer_index(name):
    """vLLM's layer names carry their index: model.layers.7.self_attn.attn."""
    m = _LAYER_INDEX.search(name)
    if not m:
        raise ConfigError(f"KV cache layer '{name}': no layer index in its name")
    return int(m.group(1))


def as_tensor(view, dtype):
    """A torch tensor over a pool view, without a copy: numpy for a host pool (bf16 as uint16
    bits), DLPack for a cuda pool."""
    if isinstance(view, np.ndarray):
        t = torch.from_numpy(view)
        return t.view(torch.bfloat16) if dtype == "bf16" else t
    return torch.from_dlpack(view)


def split_kv(name, t, block_size, kv_heads, head_dim):
    """(K, V) views, each [blocks, block_size, kv_heads, head_dim], of one vLLM layer tensor,
    in the shapes vLLM's attention backends give it: [blocks, kv_heads, block_size,
    2 * head_dim] (0.33's default: K and V side by side per head and token), [blocks,
    block_size, kv_heads, 2 * head_dim], [2, blocks, block_size, kv_heads, head_dim] or
    [blocks, 2, block_size, kv_heads, head_dim]. Strides are the tensor's: no copy."""
    D, shape = head_dim, tuple(t.shape[1:])
    if t.dim() == 4 and shape == (kv_heads, block_size, 2 * D):
        return t[..., :D].permute(0, 2, 1, 3), t[..., D:].permute(0, 2, 1, 3)
    if t.dim() == 4 and shape == (block_size, kv_heads, 2 * D):
        return t[..., :D], t[..., D:]
    if t.dim() == 5 and t.shape[0] == 2 and tuple(t.shape[2:]) == (block_size, kv_heads, D):
        return t[0], t[1]
    if t.dim() == 5 and t.shape[1] == 2 and tuple(t.shape[2:]) == (block_size, kv_heads, D):
        return t[:, 0], t[:, 1]
    raise ConfigError(f"KV cache layer '{name}': shape {tuple(t.shape)} holds no blocks of "
                      f"{block_size} tokens x {kv_heads} kv heads x head_dim {head_dim} (the "
                      "pool's)")


class WorkerSide:
    def __init__(self, vllm_config, kv_cache_config, extra):
        # What vLLM's KV cache is, checked against the pool as the scheduler side does.
        self.want = from_vllm(vllm_config, kv_cache_config) if kv_cache_config else None
        self.extra = extra
        self.client = None
        self.map = None
        self.layers = []          # [(vllm K, vllm V, pool K, pool V)] in layer order
        self.received = set()     # loads done, to report
        self.sent = set()         # saves done, to report once vLLM has said the request ended
        self.ended = {}           # requests vLLM said ended -> the call it said so in
        self.calls = 0
        self.load_errors = set()
        self.on_gpu = False

    def register(self, kv_caches):
        self.client = connect(self.extra)
        pool = self.extra["pool"]
        if self.want is not None:
            check(pool, self.client.pool, self.want)
        try:
            self.map = self.client.map()
        except kvpool.Error as e:
            raise ConfigError(f"pool '{pool}' cannot be mapped: {e}") from None
        m = self.map
        if m.layout != "layer":
            raise ConfigError(f"pool '{pool}' has layout={m.layout}: vLLM's blocks need "
                              "layout=layer")
        names = sorted(kv_caches, key=layer_index)
        if len(names) != m.num_layers:
            raise ConfigError(f"pool '{pool}' holds {m.num_layers} layers, vLLM has "
                              f"{len(names)} KV cache layers")
        for i, name in enumerate(names):
            t = kv_caches[name]
            if pool_dtype(t.dtype) != m.dtype:
                raise ConfigError(f"KV cache layer '{name}': {t.dtype}; pool '{pool}' holds "
                                  f"{m.dtype}")
            k, v = split_kv(name, t, m.block_size, m.kv_heads, m.head_dim)
            pk, pv = (as_tensor(x, m.dtype) for x in m.kv_cache(i))
            self.layers.append((k, v, pk, pv))
            self.on_gpu |= "cuda" in (k.device.type, pk.device.type)

    def _copy(self, c, to_pool):
        """c's blocks, every layer's K and V: vLLM's into the pool's, or back."""
        if not c.pool_blocks:
            return
        for k, v, pk, pv in self.layers:
            for ours, pools in ((k, pk), (v, pv)):
                vi = torch.tensor(c.vllm_blocks, dtype=torch.long, device=ours.device)
                pi = torch.tensor(c.pool_blocks, dtype=torch.long, device=pools.device)
                src, si, dst, di = (ours, vi, pools, pi) if to_pool else (pools, pi, ours, vi)
                dst.index_copy_(0, di, src.index_select(0, si).to(dst.device))

    def load(self, meta):
        for c in meta.loads:
            self._copy(c, to_pool=False)
            self.received.add(c.req_id)
        self.load_errors.update(meta.load_errors)

    def save(self, meta):
        for c in meta.saves:
            self._copy(c, to_pool=True)
            self.sent.add(c.req_id)
        if meta.saves and self.on_gpu:
            torch.cuda.synchronize()  # in the pool before the scheduler side publishes it

    def finished(self, finished_req_ids):
        # vLLM takes a save as done only for a request it has said ended (this call or before).
        # It says so in the step whose metadata carries the save: an id kept 64 calls is one
        # that was not saved.
        self.calls += 1
        for req_id in finished_req_ids:
            self.ended[req_id] = self.calls
        sent = {r for r in self.sent if r in self.ended}
        self.sent -= sent
        for req_id in sent:
            del self.ended[req_id]
        if len(self.ended) > 1024:
            self.ended = {r: n for r, n in self.ended.items() if self.calls - n < 64}
        received, self.received = self.received, set()
        return sent or None, received or None

    def take_load_errors(self):
        errors, self.load_errors = self.load_errors, set()
        return errors

    def close(self):
        self.layers = []
        self.map = None
        if self.client is not None:
            self.client.close()
