# SPDX-License-Identifier: MIT
"""What a pool must be to hold a vLLM model's KV, from the model's config.json (pool-config)
or from vLLM's own configs (the connector's check at start), and the connection to it. No
vLLM import here."""

import json
import os
from dataclasses import dataclass


class ConfigError(ValueError):
    """The pool cannot hold this vLLM engine's KV cache, or kvpoold refused or could not be
    reached (errno: the daemon's answer, None for a check of the connector's own)."""

    def __init__(self, message, errno=None):
        super().__init__(message)
        self.errno = errno


# vLLM's and Hugging Face's dtype names, to the pool's.
_DTYPES = {"bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32",
           "float": "f32"}


@dataclass(frozen=True)
class Geometry:
    """Everything that decides where a block's KV lives in the pool."""
    block_size: int
    layers: int   # per group
    kv_heads: int
    head_dim: int
    dtype: str    # the pool's name: bf16, f16, f32
    groups: tuple = (("full", 0),)  # (kind, window) per vLLM KV cache group, in its order

    def __str__(self):
        return (f"groups {groups_text(self.groups)}, block_size {self.block_size}, "
                f"{self.layers} layers, {self.kv_heads} kv heads, head_dim {self.head_dim}, "
                f"{self.dtype}")


def groups_text(groups):
    """The groups as kvpool.conf(5) writes them: full swa:1024 ..."""
    return " ".join(kind if not param else f"{kind}:{param}" for kind, param in groups)


def pool_dtype(name):
    """The pool's dtype for a torch or config dtype name ("torch.bfloat16", "bfloat16")."""
    short = str(name).removeprefix("torch.")
    if short not in _DTYPES:
        raise ConfigError(f"dtype {short}: a kvpool pool holds bf16, f16 or f32 KV")
    return _DTYPES[short]


def from_model_dir(model_dir, block_size):
    """The geometry of the model whose config.json is in model_dir (a text config's fields)."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not JSON: {e}") from None
    cfg = cfg.get("text_config", cfg)
    if cfg.get("kv_lora_rank"):
        raise ConfigError(f"{path}: multi-head latent attention (kv_lora_rank): a kvpool pool "
                          "holds per-head K and V, not MLA's latent cache")
    missing = [k for k in ("num_hidden_layers", "num_attention_heads") if k not in cfg]
    if missing:
        raise ConfigError(f"{path}: no {' nor '.join(missing)}: not a decoder's config")
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    groups, layers = vllm_groups(layer_kinds(cfg, path))
    return Geometry(block_size=block_size, layers=layers,
                    kv_heads=cfg.get("num_key_value_heads") or heads, head_dim=head_dim,
                    dtype=pool_dtype(dtype), groups=tuple(groups))


# config.json's layer_types, to kvpool's kinds (the window is the config's sliding_window).
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "swa",
                "chunked_attention": "chunked"}


def layer_kinds(cfg, path):
    """(kind, window) of every layer, as vLLM's attention layers get them from the config:
    layer_types (gpt-oss, Gemma 3 and later), else sliding_window_pattern (Gemma 2 and 3's
    older configs: every pattern-th layer full), else full everywhere."""
    n = cfg["num_hidden_layers"]
    window = cfg.get("sliding_window") or 0
    types = cfg.get("layer_types")
    if types is None and cfg.get("sliding_window_pattern") and window:
        pattern = cfg["sliding_window_pattern"]
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                 for i in range(n)]
    if types is None:
        return [("full", 0)] * n
    if len(types) != n:
        raise ConfigError(f"{path}: {len(types)} layer_types for {n} layers")
    kinds = []
    for t in types:
        if t not in _LAYER_TYPES:
            raise ConfigError(f"{path}: layer type '{t}': a kvpool pool holds "
                              f"{', '.join(_LAYER_TYPES)} layers")
        kind = _LAYER_TYPES[t]
        param = window if kind == "swa" else cfg.get("attention_chunk_size", 0) \
            if kind == "chunked" else 0
        if kind != "full" and not param:
            raise ConfigError(f"{path}: {t} layers but no "
                              f"{'sliding_window' if kind == 'swa' else 'attention_chunk_size'}")
        kinds.append((kind, param))
    return kinds


def vllm_groups(kinds):
    """vLLM's KV cache groups for layers of these (kind, window)s, as its planner forms them
    for one page size (v1/core/kv_cache_planning.py): the kinds in order of first appearance,
    each cut into groups of the smallest kind's layer count (the largest's when within 1.5 of
    it), its last group padded. Returns ([(kind, window)] per group, layers per group)."""
    buckets = {}
    for kind in kinds:
        buckets[kind] = buckets.get(kind, 0) + 1
    size = min(buckets.values())
    if max(buckets.values()) < size * 1.5:
        size = max(buckets.values())
    groups = []
    for kind, count in buckets.items():
        groups += [kind] * -(-count // size)
    return groups, size


def from_pool(info):
    """The geometry of an attached pool (kvpool.PoolInfo)."""
    return Geometry(block_size=info.block_size, layers=info.layers_per_group,
                    kv_heads=info.kv_heads, head_dim=info.head_dim, dtype=info.dtype,
                    groups=tuple((kind, param) for kind, param in info.groups))


def pool_section(geo, name, namespace, blocks):
    """The [pool.NAME] section that holds geo's KV: restricted to namespace, so mappable."""
    return (f"[pool.{name}]\n"
            f"blocks = {blocks}\n"
            f"block_size = {geo.block_size}\n"
            f"groups = {groups_text(geo.groups)}\n"
            f"kv_heads = {geo.kv_heads}\n"
            f"head_dim = {geo.head_dim}\n"
            f"dtype = {geo.dtype}\n"
            f"layers_per_group = {geo.layers}\n"
            f"layout = layer\n"
            f"namespace = {namespace}\n")


def group_kind(index, spec):
    """kvpool's (kind, window) for a vLLM KV cache group's spec, or ConfigError."""
    name = type(spec).__name__
    if name == "FullAttentionSpec":
        return ("full", 0)
    if name == "SlidingWindowSpec":
        if getattr(spec, "extra_retained_tokens", 0):
            raise ConfigError(f"KV cache group {index} keeps {spec.extra_retained_tokens} "
                              "tokens past its sliding window (speculative decoding's "
                              "re-prefill): a kvpool swa group keeps the window only")
        return ("swa", spec.sliding_window)
    if name == "ChunkedLocalAttentionSpec":
        return ("chunked", spec.attention_chunk_size)
    raise ConfigError(f"KV cache group {index} is {name}: a kvpool pool holds full, sliding "
                      "window and chunked local attention")


def from_vllm(vllm_config, kv_cache_config):
    """The geometry vLLM's KV cache has (duck-typed: no vLLM import), or ConfigError for what
    no kvpool pool holds."""
    model = vllm_config.model_config
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    if cache_dtype.startswith("fp8"):
        raise ConfigError(f"kv cache dtype {cache_dtype}: a kvpool pool holds bf16, f16 or "
                          "f32 KV")
    if getattr(model, "use_mla", False):
        raise ConfigError("multi-head latent attention: a kvpool pool holds per-head K and V, "
                          "not MLA's latent cache")
    groups = kv_cache_config.kv_cache_groups
    if not groups:
        raise ConfigError("no KV cache groups: the model keeps no KV")
    kinds = tuple(group_kind(i, g.kv_cache_spec) for i, g in enumerate(groups))
    first = groups[0].kv_cache_spec
    shape = (first.block_size, first.num_kv_heads, first.head_size, str(first.dtype))
    for i, g in enumerate(groups[1:], 1):
        spec = g.kv_cache_spec
        if (spec.block_size, spec.num_kv_heads, spec.head_size, str(spec.dtype)) != shape:
            raise ConfigError(f"KV cache group {i} has blocks of {spec.block_size} tokens x "
                              f"{spec.num_kv_heads} kv heads x head size {spec.head_size} "
                              f"({spec.dtype}), group 0 {shape[0]} x {shape[1]} x {shape[2]} "
                              f"({shape[3]}): a kvpool pool's groups share one block shape")
    # The pool holds every KV head; a tensor-parallel rank holds a slice (or, with fewer KV
    # heads than ranks, a copy of one).
    tp = vllm_config.parallel_config.tensor_parallel_size
    total = model.get_total_num_kv_heads() if hasattr(model, "get_total_num_kv_heads") \
        else first.num_kv_heads * tp
    # vLLM pads a group short of layers; the pool's groups are as wide as the widest.
    layers = max(len(g.layer_names) for g in groups)
    return Geometry(block_size=first.block_size, layers=layers, kv_heads=total,
                    head_dim=first.head_size, dtype=pool_dtype(first.dtype), groups=kinds)


def rank_heads(total, tp, rank):
    """The KV heads [first, end) of the pool that tensor-parallel rank holds, as vLLM splits
    them: an equal slice each, or one head copied to several ranks when they outnumber it."""
    if tp <= total:
        per = total // tp
        return rank * per, (rank + 1) * per
    head = rank * total // tp
    return head, head + 1


def check(pool_name, info, want):
    """Refuses a pool (kvpool.PoolInfo) that does not hold exactly the geometry want."""
    have = from_pool(info)
    if have.groups != want.groups:
        raise ConfigError(f"pool '{pool_name}' has groups '{groups_text(have.groups)}': "
                          f"vLLM's KV cache groups are '{groups_text(want.groups)}'")
    if have != want:
        raise ConfigError(f"pool '{pool_name}' does not match vLLM's KV cache: pool {have}; "
                          f"vLLM {want}")


DEFAULT_SOCKET = "/run/kvpool/kvpool.sock"


def connect(extra):
    """The kvpool client the extra config names (socket, pool, namespace)."""
    socket = extra.get("socket") or os.environ.get("KVPOOL_SOCKET") or DEFAULT_SOCKET
    pool = extra.get("pool")
    if not pool:
        raise ConfigError("kv_connector_extra_config: no 'pool' (the kvpool pool's name)")
    import kvpool  # here: pool-config needs no built binding

    try:
        return kvpool.Client(socket=socket, pool=pool, namespace=extra.get("namespace", ""))
    except kvpool.Error as e:
        # "connect SOCKET pool NAME: cause: the reason"
        raise ConfigError(str(e), e.errno) from None
