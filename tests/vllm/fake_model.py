# SPDX-License-Identifier: MIT
"""The fake model the vLLM harness runs, and what it promises: a tiny Llama config
directory, the K and V it writes for each token, the token it samples, and the record
kept per request. No vLLM import here, so tests can compute expectations without it."""
import json
import os
from dataclasses import dataclass, field

import torch

VOCAB_SIZE = 1000
LAYER_NAME = "model.layers.{}.self_attn.attn"  # what vLLM names a Llama layer's Attention


def write_model_dir(path, num_layers=2, num_kv_heads=2, num_heads=4, head_dim=16,
                    dtype="bfloat16", max_positions=4096, layer_types=None,
                    sliding_window=None):
    """A model directory holding only a tiny Llama config.json: enough for vLLM's
    ModelConfig; no tokenizer and no weights (nothing loads a model). layer_types
    ("sliding_attention", "full_attention" per layer) and sliding_window make it hybrid."""
    os.makedirs(path, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": VOCAB_SIZE, "hidden_size": num_heads * head_dim,
        "intermediate_size": 2 * num_heads * head_dim, "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads, "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim, "max_position_embeddings": max_positions, "torch_dtype": dtype,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False,
    }
    if layer_types is not None:
        config.update(layer_types=list(layer_types), sliding_window=sliding_window)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return path


def kv_value(token_id, position, layer, num_kv_heads=2, head_size=16):
    """The K and V (float32) the fake model writes for a token at a position in a layer:
    [..., num_kv_heads, head_size], the leading dims those of token_id/position (ints or
    sequences, broadcast). Every head and dim differs; K >= 0 and V < 0, so a K/V swap
    shows. Values are n/8 and -(n+1)/4 with n < 251: at most 8 significant bits, so
    bf16, f16 and f32 hold them exactly."""
    tok = torch.as_tensor(token_id, dtype=torch.int64)
    pos = torch.as_tensor(position, dtype=torch.int64)
    tok, pos = torch.broadcast_tensors(tok, pos)
    tok, pos = tok[..., None, None], pos[..., None, None]
    h = torch.arange(num_kv_heads).view(-1, 1)
    d = torch.arange(head_size).view(1, -1)
    k = ((tok * 7 + pos * 3 + layer * 11 + h * 37 + d * 5) % 251).float() / 8
    v = -(((tok * 13 + pos * 5 + layer * 17 + h * 41 + d * 3) % 251) + 1).float() / 4
    return k, v


def next_token(last_token_id):
    """The fake sampler: the token after a sequence ending in last_token_id."""
    return (last_token_id * 31 + 7) % VOCAB_SIZE


def expected_outputs(prompt_token_ids, max_tokens):
    """The tokens a request with this prompt generates (ignore_eos, so all max_tokens)."""
    out, last = [], prompt_token_ids[-1]
    for _ in range(max_tokens):
        last = next_token(last)
        out.append(last)
    return out


@dataclass
class RequestRecord:
    """What the harness saw of one request."""
    req_id: str
    prompt_token_ids: list
    max_tokens: int
    computed_positions: list = field(default_factory=list)  # positions our forward wrote,
    #   in order; a position recomputed (preemption, failed load) appears again
    num_external_tokens: int | None = None  # the scheduler's PrefillStats (first output):
    num_local_cached_tokens: int | None = None  # tokens at admission from connector/cache
    output_tokens: list = field(default_factory=list)
    block_ids: list = field(default_factory=list)  # its block table at its last forward
    tables: list = field(default_factory=list)     # every group's (block_ids: the first's)
    finish_reason: str | None = None  # "length", "error", ...
    kv_transfer_params: dict | None = None  # from the connector's request_finished
    error: object = None

    @property
    def computed_tokens(self):
        return len(self.computed_positions)

    @property
    def prompt_tokens_computed(self):
        return sum(p < len(self.prompt_token_ids) for p in self.computed_positions)

    @property
    def finished(self):
        return self.finish_reason is not None
