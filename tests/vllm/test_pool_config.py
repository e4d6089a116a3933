# SPDX-License-Identifier: MIT
"""python3 -m kvpool.vllm pool-config: the [pool.NAME] section for a model's config.json,
exact, for two models, and its refusals (no vLLM needed)."""
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
    r = pool_config(tmp_path, LLAMA, "--block-size", "0")
    assert r.returncode == 2 and "--block-size must be positive" in r.stderr
