# SPDX-License-Identifier: MIT
"""The connector's worker side: the pool mapped into this process, and the copies between
vLLM's KV tensors and the pool's, block for block and layer for layer. The same copies run
on CPU tensors (this repository's tests) and on a GPU's (vLLM on a GPU: a cuda pool's
mapping, or a host pool's through a copy to the device)."""

import re

import numpy as np
import torch

import kvpool

from .geometry import ConfigError, check, from_vllm, pool_dtype, rank_heads
from .link import Failures, Interval, Link

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
                      "pool's, for this tensor-parallel rank)")


def tp_rank(vllm_config):
    """(rank, size) of this worker among the tensor-parallel ranks."""
    size = vllm_config.parallel_config.tensor_parallel_size if vllm_config else 1
    if size == 1:
        return 0, 1
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

    return get_tensor_model_parallel_rank(), size


class WorkerSide:
    def __init__(self, vllm_config, kv_cache_config, extra, rank=None):
        """rank: (rank, size) among the tensor-parallel ranks; default vLLM's."""
        self.rank = rank or tp_rank(vllm_config)
        # What vLLM's KV cache is, checked against the pool as the scheduler side does.
        self.want = from_vllm(vllm_config, kv_cache_config) if kv_cache_config else None
        self.pool = extra.get("pool")
        self.counts = dict(loaded_blocks=0, saved_blocks=0, loaded_bytes=0, saved_bytes=0)
        self.interval = Interval(self.counts)
        self.link = Link(extra, self._map, Failures(self.counts))
        self.block_bytes = 0      # one block of every layer, K and V
        self.caches = None
        self.map = None
        self.layers = []          # [(vllm K, vllm V, pool K, pool V)] in layer order
        self.received = set()     # loads done, to report
        self.sent = set()         # saves done, to report once vLLM has said the request ended
        self.failed_saves = set() # saves not made: the scheduler side must not publish them
        self.reporting = set()    # the saves finished() reported last
        self.ended = {}           # requests vLLM said ended -> the call it said so in
        self.calls = 0
        self.load_errors = set()
        self.on_gpu = False
        self.ready = None         # (the metadata, whether its copies may be made)

    def register(self, kv_caches):
        self.caches = kv_caches
        self.link.start()

    def _map(self, client):
        """At every (re)connect: the geometry, then the pool mapped and viewed layer by layer."""
        pool = self.pool
        if self.want is not None:
            check(pool, client.pool, self.want)
        try:
            m = client.map()
        except kvpool.Error as e:
            raise ConfigError(f"pool '{pool}' cannot be mapped: {e}", e.errno) from None
        if m.layout != "layer":
            raise ConfigError(f"pool '{pool}' has layout={m.layout}: vLLM's blocks need "
                              "layout=layer")
        names = sorted(self.caches, key=layer_index)
        if len(names) != m.num_layers:
            raise ConfigError(f"pool '{pool}' holds {m.num_layers} layers, vLLM has "
                              f"{len(names)} KV cache layers")
        layers = []
        for i, name in enumerate(names):
            t = self.caches[name]
            if pool_dtype(t.dtype) != m.dtype:
                raise ConfigError(f"KV cache layer '{name}': {t.dtype}; pool '{pool}' holds "
                                  f"{m.dtype}")
            h0, h1 = rank_heads(m.kv_heads, self.rank[1], self.rank[0])
            k, v = split_kv(name, t, m.block_size, h1 - h0, m.head_dim)
            # This rank's heads of the pool's blocks: [blocks, block_size, heads, head_dim].
            pk, pv = (as_tensor(x, m.dtype)[:, :, h0:h1] for x in m.kv_cache(i))
            layers.append((k, v, pk, pv))
            self.on_gpu |= "cuda" in (k.device.type, pk.device.type)
        self.map, self.layers = m, layers
        self.block_bytes = sum(pk[0].numel() * pk.element_size() * 2 for _, _, pk, _ in layers)

    def _ready(self, meta):
        """Whether this step's copies may be made: the mapping's daemon is alive (a NOP). One
        that died may have been replaced since the scheduler side planned them, with other
        blocks at those ids: then none is made (loads fail, saves are not published), and
        the pool is mapped again for the next step."""
        if self.ready is not None and self.ready[0] is meta:
            return self.ready[1]
        ok = False
        if self.link.client is not None:
            try:
                self.link.client.nop()
                ok = bool(self.layers)
            except kvpool.Error as e:
                self.link.failed(e, "the worker's connection")
        if self.link.client is None:
            self.map, self.layers = None, []
            self.link.get()  # mapped again (if the daemon is back) for the next step
        self.ready = (meta, ok)
        return ok

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
        ok = (meta.loads or meta.saves) and self._ready(meta)
        for c in meta.loads:
            if not (ok and self._try(c, to_pool=False)):
                self.load_errors.update(c.vllm_blocks)
            self.received.add(c.req_id)
        self.load_errors.update(meta.load_errors)

    def save(self, meta):
        ok = (meta.loads or meta.saves) and self._ready(meta)
        for c in meta.saves:
            if not (ok and self._try(c, to_pool=True)):
                self.failed_saves.add(c.req_id)
            self.sent.add(c.req_id)
        if meta.saves and ok and self.on_gpu:
            torch.cuda.synchronize()  # in the pool before the scheduler side publishes it

    def _try(self, c, to_pool):
        try:
            self._copy(c, to_pool)
            way = "saved" if to_pool else "loaded"
            self.counts[f"{way}_blocks"] += len(c.pool_blocks)
            self.counts[f"{way}_bytes"] += len(c.pool_blocks) * self.block_bytes
            return True
        except Exception as e:  # a copy vLLM must never see fail: counted, logged
            self.link.failures.note("copy_failed", f"request {c.req_id}: copy failed: {e!r}")
            return False

    def take_failed_saves(self):
        """The failed among the saves finished() just reported: vLLM asks for both in one
        step's output, finished() first, and the scheduler side reads them together."""
        failed = self.failed_saves & self.reporting
        self.failed_saves -= failed
        self.reporting = set()
        return failed

    def finished(self, finished_req_ids):
        # vLLM takes a save as done only for a request it has said ended (this call or before).
        # It says so in the step whose metadata carries the save: an id kept 64 calls is one
        # that was not saved.
        self.calls += 1
        for req_id in finished_req_ids:
            self.ended[req_id] = self.calls
        sent = {r for r in self.sent if r in self.ended}
        self.sent -= sent
        self.reporting = sent
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
        self.link.close()
