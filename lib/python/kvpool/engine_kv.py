# SPDX-License-Identifier: MIT
"""Where kvpool.engine keeps its KV: in kvpool, written and attended through the daemon
(DaemonStore) or in place through a mapping of the pool (LocalStore); or, for --reference, in
a plain per-sequence torch cache (ReferenceStore). The scheduler (engine.py) drives them all
through the same calls: admit, prepare, grow, preempt, attend, finish."""
import errno

import numpy as np
import torch

import kvpool

from . import engine_model as em

TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16}


class EngineError(Exception):
    """A refusal the engine cannot work around, with what to do about it."""


def _kv_array(x, dtype):
    """K or V rows as the binding takes them: f32 as is, bf16 as its bits in int16."""
    x = x.detach().to("cpu")
    if dtype == "bf16":
        return x.to(torch.bfloat16).view(torch.int16).numpy()
    return x.numpy()


class ReferenceStore:
    """Every position's K and V in a tensor per sequence and layer, masked as kvpool masks
    them, rounded to the pool dtype as kvpool stores them; no pool, so no preemption."""

    def __init__(self, model, dtype, max_new):
        self.model = model
        self.dtype = TORCH_DTYPE[dtype]
        self.max_new = max_new
        self.cache = {}

    def admit(self, req):
        shape = (len(self.model.pattern), 2, req.prompt_len + self.max_new, em.KV_HEADS,
                 em.HEAD_DIM)
        self.cache[req.id] = torch.empty(shape, dtype=self.dtype, device=self.model.device)
        req.computed = 0
        req.slots = shape[2]
        return 0

    def prepare(self, spans):
        return {}

    def computed(self, req, n):
        req.computed = n

    def attend(self, layer, items, q, k, v):
        out = torch.empty_like(q)
        slot = self.model.slots[layer]
        for it in items:
            keys, values = self.cache[it.req.id][layer]
            keys[it.first:it.end] = k[it.lo:it.hi]
            values[it.first:it.end] = v[it.lo:it.hi]
            kpos = torch.arange(it.end, device=q.device)
            out[it.lo:it.hi] = em.attend_torch(q[it.lo:it.hi], keys[:it.end], values[:it.end],
                                               kpos[it.first:], kpos, slot, it.req.prompt_len,
                                               self.model.scale, self.model.softcap)
        return out

    def finish(self, req):
        del self.cache[req.id]

    def close(self):
        pass


def connect(args, model):
    """A client attached to the pool engine-PRESET-SEED-DTYPE, created when missing."""
    name = f"engine-{args.model}-{args.seed}-{args.dtype}"
    backend = "cuda" if args.device.startswith("cuda") else "host"
    try:
        client = kvpool.Client(args.socket, pool=name, namespace=args.namespace)
    except kvpool.NotFound:
        client = _create(args, model, name, backend)
    except kvpool.PermissionDenied as e:
        raise _refused(name, args, e) from e
    info = client.pool
    want = (model.groups, model.layers_per_group, em.KV_HEADS, em.HEAD_DIM, args.dtype,
            em.BLOCK_SIZE)
    have = (info.groups, info.layers_per_group, info.kv_heads, info.head_dim, info.dtype,
            info.block_size)
    if [tuple(g) for g in have[0]] != list(want[0]) or have[1:] != want[1:]:
        client.close()
        raise EngineError(f"pool {name} exists with another geometry: groups {have[0]}, "
                          f"layers_per_group {have[1]}, kv_heads {have[2]}, head_dim {have[3]}, "
                          f"dtype {have[4]}, block_size {have[5]}; this model needs {want}")
    return client


def _create(args, model, name, backend):
    try:
        client = kvpool.Client(args.socket, namespace=args.namespace, admin=True)
    except kvpool.PermissionDenied as e:
        raise EngineError(f"pool {name} does not exist, and creating it needs the admin "
                          "feature (root or the daemon's uid)") from e
    blocks = args.blocks or default_blocks(args, model)
    try:
        client.create_pool(name, blocks, em.BLOCK_SIZE, model.groups, kv_heads=em.KV_HEADS,
                           head_dim=em.HEAD_DIM, layers_per_group=model.layers_per_group,
                           dtype=args.dtype, namespace=args.namespace, backend=backend,
                           device=_ordinal(args.device) if backend == "cuda" else None,
                           max_step_tokens=em.STEP_TOKENS)
    except (kvpool.Error, ValueError) as e:
        # EEXIST: another engine created it first; take that one.
        if not isinstance(e, kvpool.Error) or e.errno != errno.EEXIST:
            client.close()
            raise EngineError(f"creating pool {name}: {getattr(e, 'reason', None) or e}") from e
    try:
        client.attach(name)
    except kvpool.Error as e:
        client.close()
        raise _refused(name, args, e) from e
    return client


def _refused(name, args, error):
    return EngineError(f"pool {name}: {error.reason or error.strerror} (namespace "
                       f"'{args.namespace}')")


def _ordinal(device):
    return int(device.split(":")[1]) if ":" in device else 0


def default_blocks(args, model):
    """Enough for every request at its longest at once, the null block included, and for
    each request's window snapshot at its prompt's end (a cyclic group's, docs/design.md)."""
    per_group = -(-(args.prompt_tokens + args.max_new) // em.BLOCK_SIZE)
    total = 1
    for kind, param in model.groups:
        ring = em.ring_slots(param) // em.BLOCK_SIZE if kind == "cyclic" else per_group
        total += args.requests * min(per_group, ring)
        if kind == "cyclic":
            total += args.requests * -(-min(param - 1, args.prompt_tokens) // em.BLOCK_SIZE)
    return total


class PoolStore:
    """Allocation through kvpool: sequences, the prefix cache, commits, preemption."""

    def __init__(self, client, model, dtype):
        self.client = client
        self.model = model
        self.dtype = dtype
        self.pending = {}  # req -> computed count to commit with the next step's batch

    def admit(self, req):
        """Opens (or re-admits) @req with its prefix-cache hit and slots for its first chunk;
        the hit, tokens. NoSpace when the pool is short."""
        if req.seq is None:
            req.seq = self.client.open(req.tokens[:req.prompt_len])
            req.known = req.prompt_len
        # LOOKUP is advisory: it sizes the chunk; the ALLOC takes the hit atomically.
        hint = req.seq.lookup()
        want = min(em.STEP_TOKENS, len(req.tokens) - hint)
        try:
            hit = req.seq.alloc(want, use_cache=True)
        except kvpool.Error as e:
            if e.errno == errno.EINVAL and any(k == "cyclic" for k, _ in self.model.groups):
                raise EngineError(f"pool {self.client.pool.name} refuses an alloc of {want} "
                                  f"tokens: its max_step_tokens is below the {em.STEP_TOKENS} "
                                  "this engine's prefill chunks need (a pool made elsewhere: "
                                  "destroy it, or use another --seed)") from e
            raise
        req.computed = hit
        req.slots = hit + want
        self.allocated([req])
        return hit

    def prepare(self, spans):
        """One batch: last step's commits, the tokens the store lacks, slots up to each span's
        end. Returns {request: NoSpace} for those whose allocation found the pool short."""
        reqs = [req for req, _ in spans]
        appends = [(req, end) for req, end in spans if req.known < end]
        b = self.client.batch()
        try:
            with b:
                if self.pending:
                    b.commit([req.seq for req in self.pending], list(self.pending.values()))
                for req, end in appends:
                    b.append(req.seq, req.tokens[req.known:end])
                b.alloc([req.seq for req in reqs], [end - req.computed for req, end in spans])
        except kvpool.BatchError as e:
            for result in e.results[:-len(spans)]:
                if isinstance(result, Exception):
                    raise result
        self.pending.clear()
        for req, end in appends:
            req.known = end
        short = {}
        for (req, end), result in zip(spans, b.results[-len(spans):]):
            if isinstance(result, kvpool.NoSpace):
                short[req] = result
            elif isinstance(result, Exception):
                raise result
            else:
                req.slots = max(req.slots, end)
        self.allocated([req for req in reqs if req not in short])
        return short

    def grow(self, req, end):
        """Slots up to @end for one request, after a preemption made room; NoSpace if not."""
        req.seq.alloc(end - req.computed)
        req.slots = max(req.slots, end)
        self.allocated([req])

    def preempt(self, req):
        """Frees @req's blocks, keeping its tokens for a re-admission with the cache."""
        if req.known < len(req.tokens):
            req.seq.append(req.tokens[req.known:])
            req.known = len(req.tokens)
        self.pending.pop(req, None)
        req.seq.free()
        req.computed = req.slots = 0

    def computed(self, req, n):
        req.computed = n
        self.pending[req] = n

    def finish(self, req):
        self.pending.pop(req, None)
        req.seq.commit(req.computed)
        req.seq.close()
        req.seq = None

    def allocated(self, reqs):
        """Hook: what a store does once @reqs have new blocks."""

    def usage(self):
        """(usable blocks, blocks in use) of the pool, whoever uses them."""
        name = self.client.pool.name
        pool = next(p for p in self.client.stats()["pools"] if p["name"] == name)
        return pool["blocks_total"] - 1, pool["blocks_used"]

    def close(self):
        self.client.close()


class DaemonStore(PoolStore):
    """Each layer's new K and V go to the daemon (WRITE_KV) and its attention is the daemon's
    ATTEND over every running sequence: one batch per layer."""

    def attend(self, layer, items, q, k, v):
        slot = self.model.slots[layer]
        with self.client.batch() as b:
            for it in items:
                b.write_kv(it.req.seq, slot.group, slot.layer, it.first,
                           _kv_array(k[it.lo:it.hi], self.dtype),
                           _kv_array(v[it.lo:it.hi], self.dtype))
            b.attend(slot.group, slot.layer,
                     [(it.req.seq, q[it.lo:it.hi].detach().to("cpu").numpy(), it.first)
                      for it in items], self.model.scale, self.model.softcap)
        out = b.results[-1]
        return torch.from_numpy(out[0] if len(out) == 1 else np.concatenate(out)).to(q.device)


class LocalStore(PoolStore):
    """KV written and attended in torch over the pool's memory mapped into this process,
    at the places kvpool's block tables give; the daemon only allocates."""

    def __init__(self, client, model, dtype, namespace):
        super().__init__(client, model, dtype)
        try:
            self.map = client.map()
        except kvpool.PermissionDenied as e:
            raise EngineError(f"--attend local maps the pool, and only a pool restricted to "
                              f"the client's namespace can be mapped: pool {client.pool.name} "
                              f"is not restricted to namespace '{namespace}' (a new pool is, "
                              "with --namespace NAME)") from e
        on_gpu = model.device.type == "cuda"
        if on_gpu != (self.map.memory == "cuda"):
            raise EngineError(f"pool {client.pool.name} lies in {self.map.memory} memory: "
                              f"--attend local with --device {model.device.type} needs a "
                              f"{'cuda' if on_gpu else 'host'} pool")
        self.kv = [tuple(self._tensor(x) for x in self.map.kv_cache(layer))
                   for layer in range(model.layers_per_group)]

    def _tensor(self, view):
        if self.map.memory == "cuda":
            return torch.from_dlpack(view)
        if self.dtype == "bf16":
            return torch.from_numpy(view.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(view)

    def allocated(self, reqs):
        for req in reqs:
            req.table = [torch.tensor(t, dtype=torch.long, device=self.model.device)
                         for t in req.seq.table()]

    def _locate(self, req, slot, positions):
        """(block, offset) of @positions in @req's table of @slot's group."""
        if slot.kind == "cyclic":
            positions = positions % em.ring_slots(slot.param)
        blocks = req.table[slot.group][torch.div(positions, em.BLOCK_SIZE,
                                                 rounding_mode="floor")]
        return blocks, positions % em.BLOCK_SIZE

    def attend(self, layer, items, q, k, v):
        slot = self.model.slots[layer]
        keys, values = self.kv[slot.layer]
        out = torch.empty_like(q)
        for it in items:
            qpos = torch.arange(it.first, it.end, device=q.device)
            blocks, offsets = self._locate(it.req, slot, qpos)
            keys[blocks, offsets] = k[it.lo:it.hi].to(keys.dtype)
            values[blocks, offsets] = v[it.lo:it.hi].to(values.dtype)
            kpos = torch.arange(it.end, device=q.device)
            seen = em.visible(slot.kind, slot.param, it.req.prompt_len, qpos[:, None],
                              kpos[None, :]).any(0)
            kpos = kpos[seen]
            blocks, offsets = self._locate(it.req, slot, kpos)
            if bool((blocks == 0).any()):
                raise EngineError(f"request {it.req.id}: a visible key at position "
                                  f"{int(kpos[blocks == 0][0])} has no block (group "
                                  f"{slot.group})")
            out[it.lo:it.hi] = em.attend_torch(q[it.lo:it.hi], keys[blocks, offsets],
                                               values[blocks, offsets], qpos, kpos, slot,
                                               it.req.prompt_len, self.model.scale,
                                               self.model.softcap)
        return out
