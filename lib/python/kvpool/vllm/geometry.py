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
    layers: int
    kv_heads: int
    head_dim: int
    dtype: str  # the pool's name: bf16, f16, f32

    def __str__(self):
        return (f"block_size {self.block_size}, {self.layers} layers, {self.kv_heads} kv heads, "
                f"head_dim {self.head_dim}, {self.dtype}")


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
    return Geometry(block_size=block_size, layers=cfg["num_hidden_layers"],
                    kv_heads=cfg.get("num_key_value_heads") or heads, head_dim=head_dim,
                    dtype=pool_dtype(dtype))


def from_pool(info):
    """The geometry of an attached pool (kvpool.PoolInfo)."""
    return Geometry(block_size=info.block_size, layers=info.layers_per_group,
                    kv_heads=info.kv_heads, head_dim=info.head_dim, dtype=info.dtype)


def pool_section(geo, name, namespace, blocks):
    """The [pool.NAME] section that holds geo's KV: restricted to namespace, so mappable."""
    return (f"[pool.{name}]\n"
            f"blocks = {blocks}\n"
            f"block_size = {geo.block_size}\n"
            f"groups = full\n"
            f"kv_heads = {geo.kv_heads}\n"
            f"head_dim = {geo.head_dim}\n"
            f"dtype = {geo.dtype}\n"
            f"layers_per_group = {geo.layers}\n"
            f"layout = layer\n"
            f"namespace = {namespace}\n")


def from_vllm(vllm_config, kv_cache_config):
    """The geometry vLLM's KV cache has (duck-typed: no vLLM import), or ConfigError for what
    no kvpool pool holds or this connector does not share yet."""
    model = vllm_config.model_config
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    if cache_dtype.startswith("fp8"):
        raise ConfigError(f"kv cache dtype {cache_dtype}: a kvpool pool holds bf16, f16 or "
                          "f32 KV")
    if getattr(model, "use_mla", False):
        raise ConfigError("multi-head latent attention: a kvpool pool holds per-head K and V, "
                          "not MLA's latent cache")
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ConfigError(f"{len(groups)} KV cache groups: this connector shares one, of full "
                          "attention")
    spec = groups[0].kv_cache_spec
    if type(spec).__name__ != "FullAttentionSpec":
        raise ConfigError(f"KV cache group 0 is {type(spec).__name__}: this connector shares "
                          "full attention only")
    # The pool holds every KV head; a tensor-parallel rank holds a slice (or, with fewer KV
    # heads than ranks, a copy of one).
    tp = vllm_config.parallel_config.tensor_parallel_size
    total = model.get_total_num_kv_heads() if hasattr(model, "get_total_num_kv_heads") \
        else spec.num_kv_heads * tp
    return Geometry(block_size=spec.block_size, layers=len(groups[0].layer_names),
                    kv_heads=total, head_dim=spec.head_size, dtype=pool_dtype(spec.dtype))


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
    if [kind for kind, _ in info.groups] != ["full"]:
        groups = " ".join(kind if not p else f"{kind}:{p}" for kind, p in info.groups)
        raise ConfigError(f"pool '{pool_name}' has groups '{groups}': vLLM's KV cache needs "
                          "one group, full")
    have = from_pool(info)
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
