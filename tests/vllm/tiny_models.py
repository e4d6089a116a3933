# SPDX-License-Identifier: MIT
"""Model directories written from nothing, for engines that run real forward passes without a
hub: a Llama-shaped model and a Gemma-3-shaped hybrid one (sliding window and full layers),
config.json from transformers' own config classes and seeded weights in model.safetensors.

The weights are of a trained model's scale (std 0.1), not vLLM's dummy ones (uniform +-1e-3):
with those attention adds about 1e-7 of the residual and in bf16 the tokens ignore the KV, so
a test comparing tokens would prove nothing. Here a token depends on what the KV holds.
A byte-level BPE tokenizer trained here (tokenizer.json) lets vLLM's OpenAI server take text.

reference_kv() runs the same weights through transformers in float32 and returns every
layer's K (after RoPE) and V: what an engine's KV cache must hold, whoever wrote it."""
import json
import os

import torch
from safetensors.torch import save_file

LLAMA = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64,
             max_position_embeddings=8192)
GEMMA3_WINDOW = 64
GEMMA3 = dict(LLAMA, sliding_window=GEMMA3_WINDOW, query_pre_attn_scalar=64,
              layer_types=["sliding_attention", "full_attention"] * 2)
SCALE = 0.1


def _config(kind):
    if kind == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**LLAMA, dtype="bfloat16", tie_word_embeddings=False,
                           bos_token_id=1, eos_token_id=2, architectures=["LlamaForCausalLM"])
    if kind == "gemma3":
        from transformers import Gemma3TextConfig

        return Gemma3TextConfig(**GEMMA3, dtype="bfloat16", bos_token_id=1, eos_token_id=2,
                                architectures=["Gemma3ForCausalLM"])
    raise ValueError(f"model kind '{kind}': llama or gemma3")


def _weights(config, seed):
    """Every parameter of the model transformers builds from config: matrices and
    embeddings N(0, SCALE), norms neutral (1 for Llama's, 0 for Gemma's 1 + w), in bf16."""
    from transformers import AutoModelForCausalLM

    g = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    gemma = config.model_type.startswith("gemma")
    out = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        if p.dim() == 1:
            t = torch.zeros(p.shape) if gemma else torch.ones(p.shape)
        else:
            t = torch.randn(p.shape, generator=g) * SCALE
        out[name] = t.to(torch.bfloat16).contiguous()
    return out


# The tokenizer's training text: the words of English prose that a test or a demo sends.
_CORPUS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "so no will more other its who time what about up out them into some than only could "
    "prompt cache block token engine server request kvpool model shared prefix memory "
    "system user assistant question answer hello world first second next last long short"
).split()
SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2: the configs' bos and eos


def write_tokenizer(path, vocab_size=None):
    """A byte-level BPE tokenizer of the models' vocabulary size, trained here on _CORPUS
    (tokenizer.json, tokenizer_config.json): any text encodes (bytes at worst), so vLLM's
    OpenAI server takes text without a hub."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    vocab_size = vocab_size or LLAMA["vocab_size"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    text = [" ".join(_CORPUS[i:] + _CORPUS[:i]) for i in range(len(_CORPUS))]
    tok.train_from_iterator(text, trainer=trainer)
    assert tok.get_vocab_size() <= vocab_size
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
                   "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 8192,
                   "add_bos_token": False}, f, indent=1)


def write_model(path, kind="llama", seed=0):
    """Writes kind's model directory at path (config.json, model.safetensors, the tokenizer);
    returns path."""
    config = _config(kind)
    os.makedirs(path, exist_ok=True)
    config.save_pretrained(path)
    save_file(_weights(config, seed), os.path.join(path, "model.safetensors"),
              metadata={"format": "pt"})
    write_tokenizer(path)
    return path


def reference_kv(path, token_ids):
    """[(K, V)] per layer, each [tokens, kv_heads, head_dim] float32: the model at path on
    token_ids, by transformers in float32 (K after RoPE, as attention caches it)."""
    from transformers import AutoModelForCausalLM, DynamicCache

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    cache = DynamicCache()  # every layer keeps every token, sliding ones too
    with torch.no_grad():
        model(torch.tensor([token_ids]), past_key_values=cache, use_cache=True)
    return [(layer.keys[0].transpose(0, 1).contiguous(),
             layer.values[0].transpose(0, 1).contiguous()) for layer in cache.layers]
