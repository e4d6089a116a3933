# SPDX-License-Identifier: MIT
"""K and V as kvpool reads each GPU attention backend's tensor (kvpool.vllm.kv_layout) are what
the backend's own forward reads, in every KV cache layout (stride order) vLLM may give it:
vLLM 0.33's allocation on synthetic tensors (these backends cannot run here; CPU_ATTN's
layout is checked against its real kernels and a reference model in tests/vllm_engine). And
what kvpool does not know is refused, named."""
import importlib
import inspect
from types import SimpleNamespace

import pytest
import torch

import harness
from kvpool.vllm.geometry import ConfigError
from kvpool.vllm.kv_layout import (CPU_K_TRANSPOSED, SIDE_BY_SIDE, backend_layout,
                                   layer_layouts, split_kv)
from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts

BACKENDS = [("flash_attn", "FlashAttentionBackend"), ("flashinfer", "FlashInferBackend"),
            ("triton_attn", "TritonAttentionBackend"),
            ("flex_attention", "FlexAttentionBackend")]
# Their forward's split of a layer's [blocks, kv_heads, block_size, 2 * head_size] view.
FORWARD_SPLIT = "kv_cache.transpose(1,2).split(self.head_size,dim=-1)"


def backend_class(module, name):
    return getattr(importlib.import_module(f"vllm.v1.attention.backends.{module}"), name)


@pytest.mark.parametrize("module,name", BACKENDS)
def test_gpu_backend_split_is_the_forwards(model_dir, module, name):
    backend = backend_class(module, name)
    source = "".join(inspect.getsource(backend.get_impl_cls()).split())
    assert FORWARD_SPLIT in source, f"{name}'s forward no longer splits K and V as kvpool does"
    assert backend_layout(backend.get_name()) == SIDE_BY_SIDE
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([backend])]
    assert layouts
    g = torch.Generator().manual_seed(1)
    for kv_layout in layouts:
        with harness.Engine(model_dir, kv_layout=kv_layout) as e:
            for layer in e.layer_names:
                t = e.kv_caches[layer]
                t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))
                want_k, want_v = t.transpose(1, 2).split(e.head_size, dim=-1)
                k, v = split_kv(layer, t, SIDE_BY_SIDE, e.block_size, e.num_kv_heads,
                                e.head_size)
                for ours, theirs in ((k, want_k), (v, want_v)):
                    assert ours.data_ptr() == theirs.data_ptr(), (kv_layout, layer)
                    assert ours.stride() == theirs.stride(), (kv_layout, layer)
                    assert torch.equal(ours, theirs), (kv_layout, layer)


def test_cpu_split_reads_k_transposed():
    """CPU_ATTN's vec kernels: a block's head is K as [head_dim][block_size], then V as
    [block_size][head_dim] (tests/vllm_engine checks it against the kernels themselves)."""
    blocks, heads, bs, d = 3, 2, 32, 8
    t = torch.arange(blocks * heads * bs * 2 * d, dtype=torch.float32).view(blocks, heads, bs,
                                                                            2 * d)
    k, v = split_kv("l", t, CPU_K_TRANSPOSED, bs, heads, d)
    base = lambda b, h: (b * heads + h) * bs * 2 * d  # noqa: E731
    for b, tok, h, i in ((0, 0, 0, 0), (1, 5, 1, 3), (2, 31, 0, 7), (2, 17, 1, 0)):
        assert k[b, tok, h, i].item() == base(b, h) + i * bs + tok
        assert v[b, tok, h, i].item() == base(b, h) + bs * d + tok * d + i


def _config(backend_name, isa=None):
    backend = type("B", (), {"get_name": staticmethod(lambda: backend_name)})
    layer = SimpleNamespace(get_attn_backend=lambda: backend, isa=isa, head_size=64)
    ctx = {"model.layers.0.self_attn.attn": layer}
    return SimpleNamespace(compilation_config=SimpleNamespace(static_forward_context=ctx))


def test_layouts_by_backend():
    name = "model.layers.0.self_attn.attn"
    assert layer_layouts(_config("FLASH_ATTN"), [name]) == {name: SIDE_BY_SIDE}
    assert layer_layouts(_config("CPU_ATTN", "vec16"), [name]) == {name: CPU_K_TRANSPOSED}


@pytest.mark.parametrize("backend,isa,message", [
    ("ROCM_ATTN", None, "KV cache layer 'model.layers.0.self_attn.attn': attention backend "
     "ROCM_ATTN: kvpool knows the K and V layout of FLASHINFER, FLASH_ATTN, FLEX_ATTENTION, "
     "TRITON_ATTN and CPU_ATTN"),
    ("CPU_ATTN", "amx", "KV cache layer 'model.layers.0.self_attn.attn': attention backend "
     "CPU_ATTN with its 'amx' kernels: kvpool knows the K and V layout of its vec, vec16 "
     "kernels only"),
])
def test_unknown_layouts_refused(backend, isa, message):
    with pytest.raises(ConfigError) as e:
        layer_layouts(_config(backend, isa), ["model.layers.0.self_attn.attn"])
    assert str(e.value) == message


def test_a_layer_without_attention_refused():
    cfg = _config("FLASH_ATTN")
    with pytest.raises(ConfigError, match="KV cache layer 'x': no attention layer of that name"):
        layer_layouts(cfg, ["x"])
