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
from .kv_layout import layer_layouts, split_kv
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


def tp_rank(vllm_config):
    """(rank, size) of this worker among the tensor-parallel ranks."""
    size = vllm_config.parallel_config.tensor_parallel_size if vllm_config else 1
    if size == 1:
        return 0, 1
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

    return get_tensor_model_parallel_rank(), size


def layer_groups(kv_cache_config, caches):
    """The layer names of each vLLM KV cache group, in vLLM's order within the group: layer j
    of every group lives in the pool's layer j (vLLM aliases them the same way)."""
    if kv_cache_config is not None and kv_cache_config.kv_cache_groups:
        return [list(g.layer_names) for g in kv_cache_config.kv_cache_groups]
    return [sorted(caches, key=layer_index)]


def runs(a, b):
    """[(a0, b0, n)]: the stretches where a and b (block id lists of equal length) both count
    up by one, in order."""
    out, start = [], 0
    for i in range(1, len(a) + 1):
        if i == len(a) or a[i] != a[i - 1] + 1 or b[i] != b[i - 1] + 1:
            out.append((a[start], b[start], i - start))
            start = i
    return out


class WorkerSide:
    def __init__(self, vllm_config, kv_cache_config, extra, rank=None, layout=None):
        """rank: (rank, size) among the tensor-parallel ranks; default vLLM's. layout: every
        layer's (kv_layout), where there is no vLLM to ask (tests); default each layer's
        attention backend's."""
        self.rank = rank or tp_rank(vllm_config)
        self.vllm_config = vllm_config
        self.layout = layout
        self.layouts = {}         # layer name -> kv_layout's name, from register()
        # What vLLM's KV cache is, checked against the pool as the scheduler side does.
        self.want = from_vllm(vllm_config, kv_cache_config) if kv_cache_config else None
        self.kv_cache_config = kv_cache_config
        self.pool = extra.get("pool")
        self.counts = dict(loaded_blocks=0, saved_blocks=0, loaded_bytes=0, saved_bytes=0)
        self.interval = Interval(self.counts)
        self.link = Link(extra, self._map, Failures(self.counts))
        self.group_bytes = []     # per group: one block of each of its layers, K and V
        self.caches = None
        self.map = None
        self.generation = 0       # the mapped pool's (PoolInfo.generation)
        self.connected = False    # the link's connection is the one the views were made for
        self.layers = []          # per group: [(vllm K, vllm V, pool K, pool V)] by layer
        self.received = set()     # loads done (or failed whole), to report
        self.failed_loads = set() # of those, the ones vLLM must recompute whole
        self.answer = None        # (step, saves not made) for the step's saves
        self.load_errors = set()
        self.cuda_devices = set()  # the devices of vLLM's and the pool's tensors, if any
        self.ready = None         # (the metadata, whether its copies may be made)

    def register(self, kv_caches):
        """Refuses (ConfigError, vLLM's start fails with it) a layer whose backend keeps K and
        V in a layout kvpool does not know."""
        if self.layout is not None:
            self.layouts = dict.fromkeys(kv_caches, self.layout)
        else:
            self.layouts = layer_layouts(self.vllm_config, list(kv_caches))
        self.caches = kv_caches
        self.link.start()

    def _map(self, client):
        """At every (re)connect: the geometry, then the pool mapped and viewed layer by layer;
        or the views it has kept, when the pool is the same one (its generation: a planned
        restart of the daemon kept the pool, its memory, its blocks)."""
        pool = self.pool
        if self.want is not None:
            check(pool, client.pool, self.want)
        generation = getattr(client.pool, "generation", 0)
        if self.layers and generation and generation == self.generation:
            self.connected = True
            return
        try:
            m = client.map()
        except kvpool.Error as e:
            raise ConfigError(f"pool '{pool}' cannot be mapped: {e}", e.errno) from None
        if m.layout != "layer":
            raise ConfigError(f"pool '{pool}' has layout={m.layout}: vLLM's blocks need "
                              "layout=layer")
        groups = layer_groups(self.kv_cache_config, self.caches)
        widest = max(len(names) for names in groups)
        if widest != m.num_layers:
            raise ConfigError(f"pool '{pool}' holds {m.num_layers} layers, vLLM has "
                              f"{widest} KV cache layers" +
                              (" per group" if len(groups) > 1 else ""))
        h0, h1 = rank_heads(m.kv_heads, self.rank[1], self.rank[0])
        # This rank's heads of the pool's blocks, per pool layer: [blocks, block_size, heads,
        # head_dim].
        pool_kv = [tuple(as_tensor(x, m.dtype)[:, :, h0:h1] for x in m.kv_cache(j))
                   for j in range(m.num_layers)]
        layers = []
        for names in groups:
            group = []
            for j, name in enumerate(names):
                t = self.caches[name]
                if pool_dtype(t.dtype) != m.dtype:
                    raise ConfigError(f"KV cache layer '{name}': {t.dtype}; pool '{pool}' "
                                      f"holds {m.dtype}")
                k, v = split_kv(name, t, self.layouts[name], m.block_size, h1 - h0, m.head_dim)
                pk, pv = pool_kv[j]
                group.append((k, v, pk, pv))
                self.cuda_devices |= {t.device for t in (k, pk) if t.device.type == "cuda"}
            layers.append(group)
        self.map, self.layers, self.generation = m, layers, generation
        self.connected = True
        self.group_bytes = [sum(pk[0].numel() * pk.element_size() * 2 for _, _, pk, _ in g)
                            for g in layers]

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
                # The scheduler side planned them on the daemon this connection reaches,
                # not on one that died and was replaced since.
                ok = bool(self.layers) and self.connected and getattr(meta, "boot_id", 0) in (
                    0, self.link.client.boot_id)
            except kvpool.Error as e:
                self.link.failed(e, "the worker's connection")
        if self.link.client is None:
            # Its views stay for a daemon back with the same pool (a planned restart); the
            # steps planned on the run that went are not made (their blocks went with it).
            self.connected = False
            self.link.get()  # mapped again, or kept, (if the daemon is back) for the next step
        self.ready = (meta, ok)
        return ok

    def _copy(self, c, to_pool):
        """c's blocks, group by group, every layer's K and V: vLLM's into the pool's, or
        back. Returns the bytes copied."""
        copied = 0
        for g, (pools, vllms) in enumerate(zip(c.pool_blocks, c.vllm_blocks)):
            if not pools:
                continue
            group = self.layers[g]
            stretches = runs(vllms, pools)
            if 2 * len(stretches) <= len(pools):
                # Blocks mostly consecutive in both tables (a new request's, a fresh pool's):
                # a slice copy a stretch. torch's index_copy_ and index_select move bf16 on
                # the CPU at a tenth of a slice copy's speed (4000 tokens of the tests' Llama:
                # 13-23 ms against 4-5).
                for k, v, pk, pv in group:
                    for ours, theirs in ((k, pk), (v, pv)):
                        for a, b, n in stretches:
                            if to_pool:
                                theirs[b:b + n].copy_(ours[a:a + n])
                            else:
                                ours[a:a + n].copy_(theirs[b:b + n])
                copied += len(pools) * self.group_bytes[g]
                continue
            device = group[0][0].device
            vi = torch.tensor(vllms, dtype=torch.long, device=device)
            pi = torch.tensor(pools, dtype=torch.long, device=group[0][2].device)
            for k, v, pk, pv in group:
                for ours, theirs in ((k, pk), (v, pv)):
                    src, si, dst, di = (ours, vi, theirs, pi) if to_pool else \
                        (theirs, pi, ours, vi)
                    dst.index_copy_(0, di.to(dst.device), src.index_select(0, si).to(dst.device))
            copied += len(pools) * self.group_bytes[g]
        return copied

    def load(self, meta):
        ok = (meta.loads or meta.saves) and self._ready(meta)
        for c in meta.loads:
            if not (ok and self._try(c, to_pool=False)):
                if len(c.vllm_blocks) > 1:
                    self.failed_loads.add(c.req_id)
                else:
                    self.load_errors.update(b for g in c.vllm_blocks for b in g)
            self.received.add(c.req_id)
        self.load_errors.update(meta.load_errors)
        for req_id in getattr(meta, "failed_loads", ()):
            self.failed_loads.add(req_id)
            self.received.add(req_id)

    def save(self, meta):
        ok = (meta.loads or meta.saves) and self._ready(meta)
        failed = set()
        for c in meta.saves:
            if not (ok and self._try(c, to_pool=True)):
                failed.add(c.req_id)
        if meta.saves:
            self.answer = (getattr(meta, "step", 0), failed)
        if meta.saves and ok:
            for device in self.cuda_devices:  # in the pool before the scheduler publishes it
                torch.cuda.synchronize(device)

    def _try(self, c, to_pool):
        try:
            copied = self._copy(c, to_pool)
            way = "saved" if to_pool else "loaded"
            self.counts[f"{way}_blocks"] += sum(len(g) for g in c.pool_blocks)
            self.counts[f"{way}_bytes"] += copied
            return True
        except Exception as e:  # a copy vLLM must never see fail: counted, logged
            self.link.failures.note("copy_failed", f"request {c.req_id}: copy failed: {e!r}")
            return False

    def take_answer(self):
        """(step, saves not made) for the last step that had saves, once."""
        answer, self.answer = self.answer, None
        return answer

    def finished(self, finished_req_ids):
        """(None, loads done): saves are made within their step, nothing waits on them."""
        received, self.received = self.received, set()
        return None, received or None

    def take_failed_loads(self):
        failed, self.failed_loads = self.failed_loads, set()
        return failed

    def take_load_errors(self):
        errors, self.load_errors = self.load_errors, set()
        return errors

    def close(self):
        self.layers = []
        self.map, self.layers = None, []
        self.link.close()
