# SPDX-License-Identifier: MIT
"""What KvpoolConnector refuses at start, each with its exact message: a pool whose geometry is
not vLLM's (both named), one with other groups or the block layout, and what no pool holds or
the pool's groups cannot hold (fp8 KV, MLA, other kinds, groups of other shapes)."""
import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import vllm  # noqa: F401
except Exception as e:
    pytest.skip(f"vllm is not importable: {e!r}", allow_module_level=True)

from conftest import BLOCK, connector_config  # noqa: E402
import harness  # noqa: E402
from kvpool.vllm import ConfigError  # noqa: E402
from kvpool.vllm.geometry import from_vllm, rank_heads  # noqa: E402


def start(model_dir, daemon, pool, **extra):
    cfg = connector_config(daemon, pool)
    cfg["kv_connector_extra_config"].update(extra)
    with harness.Engine(model_dir, block_size=BLOCK, kv_transfer_config=cfg):
        pass


@pytest.mark.parametrize("pool,message", [
    ("heads4", "pool 'heads4' does not match vLLM's KV cache: pool groups full, block_size "
               "16, 2 layers, 4 kv heads, head_dim 16, bf16; vLLM groups full, block_size 16, "
               "2 layers, 2 kv heads, head_dim 16, bf16"),
    ("hybrid", "pool 'hybrid' has groups 'full swa:32': vLLM's KV cache groups are 'full'"),
    ("blocklayout", "pool 'blocklayout' has layout=block: vLLM's blocks need layout=layer"),
])
def test_pool_refused(daemon, model_dir, pool, message):
    with pytest.raises(ConfigError) as e:
        start(model_dir, daemon, pool)
    assert str(e.value) == message


def test_connection_refused(daemon, model_dir, tmp_path):
    with pytest.raises(ConfigError) as e:
        start(model_dir, daemon, "")
    assert str(e.value) == "kv_connector_extra_config: no 'pool' (the kvpool pool's name)"
    with pytest.raises(ConfigError) as e:
        start(model_dir, daemon, "nosuch")
    assert str(e.value) == (f"[Errno 19] connect {daemon.socket} pool nosuch: No such device: "
                            "no pool 'nosuch'")
    with pytest.raises(ConfigError) as e:
        start(model_dir, daemon, "vllm", namespace="other")
    assert str(e.value) == (f"[Errno 1] connect {daemon.socket} pool vllm: Operation not "
                            "permitted: pool 'vllm' is restricted to namespace 'team'")
    with pytest.raises(ConfigError) as e:
        start(model_dir, daemon, "open")
    assert str(e.value) == ("pool 'open' cannot be mapped: [Errno 1] map: Operation not "
                            "permitted: pool 'open' is shared by all namespaces: only a pool "
                            "restricted to one namespace is mapped")


def spec(name, **kw):
    fields = dict(block_size=16, num_kv_heads=2, head_size=16, dtype="torch.bfloat16")
    return type(name, (), dict(fields, **kw))()


def vllm_config(cache_dtype="auto", use_mla=False, tp=1, specs=(spec("FullAttentionSpec"),),
                layers=1):
    """The fields from_vllm reads, as vLLM's configs carry them."""
    groups = [SimpleNamespace(layer_names=[f"model.layers.{i}.self_attn.attn"
                                           for i in range(layers)], kv_cache_spec=s)
              for s in specs]
    return (SimpleNamespace(model_config=SimpleNamespace(use_mla=use_mla),
                            cache_config=SimpleNamespace(cache_dtype=cache_dtype),
                            parallel_config=SimpleNamespace(tensor_parallel_size=tp)),
            SimpleNamespace(kv_cache_groups=groups))


@pytest.mark.parametrize("kw,message", [
    (dict(cache_dtype="fp8_e4m3"), "kv cache dtype fp8_e4m3: a kvpool pool holds bf16, f16 or "
                                   "f32 KV"),
    (dict(use_mla=True), "multi-head latent attention: a kvpool pool holds per-head K and V, "
                         "not MLA's latent cache"),
    (dict(specs=(spec("FullAttentionSpec"), spec("MambaSpec"))),
     "KV cache group 1 is MambaSpec: a kvpool pool holds full, sliding window and chunked "
     "local attention"),
    (dict(specs=(spec("SlidingWindowSpec", sliding_window=64, extra_retained_tokens=3),)),
     "KV cache group 0 keeps 3 tokens past its sliding window (speculative decoding's "
     "re-prefill): a kvpool swa group keeps the window only"),
    (dict(specs=(spec("FullAttentionSpec"), spec("SlidingWindowSpec", sliding_window=64,
                                                 head_size=32))),
     "KV cache group 1 has blocks of 16 tokens x 2 kv heads x head size 32 (torch.bfloat16), "
     "group 0 16 x 2 x 16 (torch.bfloat16): a kvpool pool's groups share one block shape"),
])
def test_vllm_config_refused(kw, message):
    with pytest.raises(ConfigError) as e:
        from_vllm(*vllm_config(**kw))
    assert str(e.value) == message


def test_vllm_geometry():
    g = from_vllm(*vllm_config())
    assert str(g) == "groups full, block_size 16, 1 layers, 2 kv heads, head_dim 16, bf16"
    # 2 ranks of 2 heads each: the pool holds all 4.
    assert from_vllm(*vllm_config(tp=2)).kv_heads == 4
    # Hybrid: one kvpool group per vLLM group, same kind and window, in vLLM's order.
    g = from_vllm(*vllm_config(layers=3, specs=(
        spec("SlidingWindowSpec", sliding_window=512, extra_retained_tokens=0),
        spec("FullAttentionSpec"), spec("ChunkedLocalAttentionSpec",
                                        attention_chunk_size=8192))))
    assert str(g) == ("groups swa:512 full chunked:8192, block_size 16, 3 layers, 2 kv heads, "
                      "head_dim 16, bf16")


def test_rank_heads():
    assert [rank_heads(8, 4, r) for r in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [rank_heads(2, 4, r) for r in range(4)] == [(0, 1), (0, 1), (1, 2), (1, 2)]
    assert rank_heads(2, 1, 0) == (0, 2)
