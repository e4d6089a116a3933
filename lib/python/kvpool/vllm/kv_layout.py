# SPDX-License-Identifier: MIT
"""Where each vLLM attention backend keeps a layer's K and V inside the tensor vLLM hands
register_kv_caches, so that the pool holds K and V themselves, not a backend's private
arrangement of them: READ_KV, ATTEND, KV events' consumers and an engine on another backend
read what the model computed.

vLLM 0.32 and 0.33 hand every backend the same logical view, [blocks, kv_heads, block_size,
2 * head_dim]; what differs is how the backend's kernels use a block's bytes:
- "kv-side-by-side" (FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION): per head and
  token, K's head_dim values then V's; their forward takes kv.transpose(1, 2).split(head_dim).
- "cpu-k-transposed" (CPU_ATTN with its vec and vec16 kernels, what x86 without AMX runs):
  per block and head, K transposed ([head_dim][block_size]) then V ([block_size][head_dim]);
  the backend views the block as [2 * block_size, head_dim] and chunks it in two, and its
  kernels write K column-wise into the first half.
Any other backend (or CPU_ATTN's AMX, NEON, ... kernels, whose K is packed for their
instructions) is refused when the worker starts, naming it: a guessed split would store
scrambled KV that engines round-trip without noticing.

LAYOUT_VERSION salts the connector's sequences (scheduler.salt_of): a pool written before
the CPU split was fixed (K read as the GPU backends keep it) never feeds this connector."""

from .geometry import ConfigError

LAYOUT_VERSION = 2

SIDE_BY_SIDE = "kv-side-by-side"
CPU_K_TRANSPOSED = "cpu-k-transposed"

_BACKENDS = {"FLASH_ATTN": SIDE_BY_SIDE, "FLASHINFER": SIDE_BY_SIDE,
             "TRITON_ATTN": SIDE_BY_SIDE, "FLEX_ATTENTION": SIDE_BY_SIDE}
_CPU_ISAS = {"vec": CPU_K_TRANSPOSED, "vec16": CPU_K_TRANSPOSED}


def backend_layout(backend, isa=None):
    """The layout of a backend (its get_name()) and, for CPU_ATTN, the kernels' ISA."""
    if backend == "CPU_ATTN":
        if isa in _CPU_ISAS:
            return _CPU_ISAS[isa]
        raise ConfigError(f"attention backend CPU_ATTN with its '{isa}' kernels: kvpool "
                          f"knows the K and V layout of its {', '.join(sorted(_CPU_ISAS))} "
                          "kernels only")
    if backend in _BACKENDS:
        return _BACKENDS[backend]
    raise ConfigError(f"attention backend {backend}: kvpool knows the K and V layout of "
                      f"{', '.join(sorted(_BACKENDS))} and CPU_ATTN")


def layer_layouts(vllm_config, names):
    """name -> layout for vLLM's layers: each layer's Attention module (static_forward_context)
    names its backend; CPU_ATTN's metadata builder has set the kernels' ISA on it by the time
    vLLM registers the KV caches."""
    context = vllm_config.compilation_config.static_forward_context
    layouts = {}
    for name in names:
        layer = context.get(name)
        if layer is None or not hasattr(layer, "get_attn_backend"):
            raise ConfigError(f"KV cache layer '{name}': no attention layer of that name in "
                              "vLLM's forward context, so no backend to read its K and V by")
        backend = layer.get_attn_backend().get_name()
        isa = getattr(layer, "isa", None)
        if backend == "CPU_ATTN" and isa is None:
            from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

            spec = vllm_config.cache_config
            isa = _get_attn_isa(vllm_config.model_config.dtype, spec.block_size,
                                layer.head_size, spec.cache_dtype)
        try:
            layouts[name] = backend_layout(backend, isa)
        except ConfigError as e:
            raise ConfigError(f"KV cache layer '{name}': {e}") from None
    return layouts


def split_kv(name, t, layout, block_size, kv_heads, head_dim):
    """(K, V) views, each [blocks, block_size, kv_heads, head_dim], of one vLLM layer tensor
    t ([blocks, kv_heads, block_size, 2 * head_dim], any strides vLLM's KV cache layout gave
    it) kept in layout. No copy."""
    D = head_dim
    if t.dim() != 4 or tuple(t.shape[1:]) != (kv_heads, block_size, 2 * D):
        raise ConfigError(f"KV cache layer '{name}': shape {tuple(t.shape)}, where the pool "
                          f"holds blocks of {kv_heads} kv heads x {block_size} tokens x 2 x "
                          f"head_dim {D} (this tensor-parallel rank's)")
    if layout == SIDE_BY_SIDE:
        return t[..., :D].transpose(1, 2), t[..., D:].transpose(1, 2)
    if layout == CPU_K_TRANSPOSED:
        n, s = t.shape[0], t.stride()
        if s[3] != 1 or s[2] != 2 * D:
            raise ConfigError(f"KV cache layer '{name}': strides {tuple(s)}: CPU_ATTN's "
                              "blocks are dense per head")
        # A block's head holds K[d][t] at d * block_size + t, then V[t][d] at
        # block_size * D + t * D + d.
        k = t.as_strided((n, block_size, kv_heads, D), (s[0], 1, s[1], block_size),
                         t.storage_offset())
        v = t.as_strided((n, block_size, kv_heads, D), (s[0], D, s[1], 1),
                         t.storage_offset() + block_size * D)
        return k, v
    raise ConfigError(f"KV cache layer '{name}': layout '{layout}' unknown")
