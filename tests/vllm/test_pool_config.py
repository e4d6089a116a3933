# SPDX-License-Identifier: MIT
"""python3 -m kvpool.vllm pool-config: the [pool.NAME] section for a model's config.json,
exact, for two full-attention models and two hybrid ones (Gemma 3, gpt-oss: vLLM's KV cache
groups), and its refusals (no vLLM needed; test_hybrid.py checks the groups against vLLM's
own planner)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LLAMA = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
QWEN = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 2048, "head_dim": 128,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "torch_dtype": "float16"}


def pool_config(tmp_path, cfg, *args):
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "lib", "python"))
    return subprocess.run([sys.executable, "-m", "kvpool.vllm", "pool-config", "--model-dir",
                           str(d), *args], capture_output=True, text=True, env=env)


def test_llama_defaults(tmp_path):
    r = pool_config(tmp_path, LLAMA)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == ("[pool.vllm]\nblocks = 16384\nblock_size = 16\ngroups = full\n"
                        "kv_heads = 8\nhead_dim = 128\ndtype = bf16\nlayers_per_group = 32\n"
                        "layout = layer\nnamespace = vllm\n")


def test_qwen_head_dim_and_options(tmp_path):
    r = pool_config(tmp_path, QWEN, "--block-size", "32", "--blocks", "4096", "--name", "qwen",
                    "--namespace", "team-a")
    assert (r.returncode, r.stderr) == (0, "")
    # head_dim is the config's (128), not hidden_size / heads (2048 / 16 = 128 here too,
    # so a third config tells them apart below).
    assert r.stdout == ("[pool.qwen]\nblocks = 4096\nblock_size = 32\ngroups = full\n"
                        "kv_heads = 8\nhead_dim = 128\ndtype = f16\nlayers_per_group = 28\n"
                        "layout = layer\nnamespace = team-a\n")
    r = pool_config(tmp_path, dict(QWEN, head_dim=256, num_key_value_heads=None))
    assert r.returncode == 0
    assert "kv_heads = 16\nhead_dim = 256\n" in r.stdout


# Gemma 3 1B's text config: every 6th layer full (sliding_window_pattern), the rest a
# 512-token window; vLLM groups 22 sliding layers and 4 full ones in groups of 4 (the last
# sliding group padded).
GEMMA3 = {"architectures": ["Gemma3ForCausalLM"], "hidden_size": 1152, "head_dim": 256,
          "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
          "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16"}
# gpt-oss-20b: layer_types alternating, from a 128-token window.
GPT_OSS = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "head_dim": 64,
           "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
           "sliding_window": 128, "torch_dtype": "bfloat16",
           "layer_types": ["sliding_attention", "full_attention"] * 12}


def test_hybrid_models(tmp_path):
    r = pool_config(tmp_path, {"text_config": GEMMA3}, "--name", "gemma3")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == ("[pool.gemma3]\nblocks = 16384\nblock_size = 16\n"
                        "groups = swa:512 swa:512 swa:512 swa:512 swa:512 swa:512 full\n"
                        "kv_heads = 1\nhead_dim = 256\ndtype = bf16\nlayers_per_group = 4\n"
                        "layout = layer\nnamespace = vllm\n")
    r = pool_config(tmp_path, GPT_OSS, "--name", "gpt-oss")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == ("[pool.gpt-oss]\nblocks = 16384\nblock_size = 16\n"
                        "groups = swa:128 full\nkv_heads = 8\nhead_dim = 64\ndtype = bf16\n"
                        "layers_per_group = 12\nlayout = layer\nnamespace = vllm\n")
    # The same model written with layer_types gives the same pool.
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)]
    gemma = dict(GEMMA3, layer_types=types)
    del gemma["sliding_window_pattern"]
    assert pool_config(tmp_path, gemma, "--name", "gemma3").stdout == \
        pool_config(tmp_path, GEMMA3, "--name", "gemma3").stdout


def test_refusals(tmp_path):
    r = pool_config(tmp_path, dict(LLAMA, kv_lora_rank=512))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"pool-config: {tmp_path}/model/config.json: multi-head latent "
                        "attention (kv_lora_rank): a kvpool pool holds per-head K and V, not "
                        "MLA's latent cache\n")
    r = pool_config(tmp_path, dict(LLAMA, torch_dtype="float8_e4m3fn"))
    assert (r.returncode, r.stderr) == (1, "pool-config: dtype float8_e4m3fn: a kvpool pool "
                                           "holds bf16, f16 or f32 KV\n")
    r = pool_config(tmp_path, {"hidden_size": 64})
    assert (r.returncode, r.stderr) == (1, f"pool-config: {tmp_path}/model/config.json: no "
                                           "num_hidden_layers nor num_attention_heads: not a "
                                           "decoder's config\n")
    r = pool_config(tmp_path, dict(GPT_OSS, layer_types=["sliding_attention"] * 23))
    assert (r.returncode, r.stderr) == (1, f"pool-config: {tmp_path}/model/config.json: 23 "
                                           "layer_types for 24 layers\n")
    r = pool_config(tmp_path, dict(GPT_OSS, layer_types=["linear_attention"] * 24))
    assert (r.returncode, r.stderr) == (1, f"pool-config: {tmp_path}/model/config.json: layer "
                                           "type 'linear_attention': a kvpool pool holds "
                                           "full_attention, sliding_attention, "
                                           "chunked_attention layers\n")
    r = pool_config(tmp_path, dict(GPT_OSS, sliding_window=None))
    assert (r.returncode, r.stderr) == (1, f"pool-config: {tmp_path}/model/config.json: "
                                           "sliding_attention layers but no sliding_window\n")
    r = pool_config(tmp_path, LLAMA, "--block-size", "0")
    assert r.returncode == 2 and "--block-size must be positive" in r.stderr
