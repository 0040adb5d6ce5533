"""Tiny Hugging Face models and their save_pretrained directories, for the tests.

One place for every test that builds a Hugging Face model directory: `tiny_model` makes
the model (transformers is imported, or the test skipped), `randomized` gives it seeded
weights, `save_dir` saves it and edits its config.json; `hf_dir` is the three in one
for the config-binding tests.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

DELETE = object()  # a config_changes value: remove the field from config.json


def tiny_model(kind: str, *, vocab: int = 5, positions: int = 3, layers: int = 1,
               act: str = "relu", **config):
    """A transformers causal LM with d_model 8 and 2 heads, in its library's random init.

    kind: "neox" (GPTNeoXForCausalLM, d_mlp 16), "gpt2" (GPT2LMHeadModel, d_mlp 32) or
    "llama" (LlamaForCausalLM, d_mlp 12, its SiLU-gated MLP: `act` is not used).
    `config`: further arguments of the config class (e.g. rotary_pct=0.5)."""
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "neox":
            cfg = transformers.GPTNeoXConfig(
                vocab_size=vocab, hidden_size=8, num_hidden_layers=layers, num_attention_heads=2,
                intermediate_size=16, hidden_act=act, max_position_embeddings=positions,
                **config)
            return transformers.GPTNeoXForCausalLM(cfg)
        if kind == "gpt2":
            cfg = transformers.GPT2Config(vocab_size=vocab, n_embd=8, n_layer=layers, n_head=2,
                                          n_positions=positions, activation_function=act,
                                          **config)
            return transformers.GPT2LMHeadModel(cfg)
        if kind == "llama":
            cfg = transformers.LlamaConfig(
                vocab_size=vocab, hidden_size=8, intermediate_size=12, num_hidden_layers=layers,
                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=positions,
                **config)
            return transformers.LlamaForCausalLM(cfg)
    raise ValueError(f"unknown kind {kind!r}")


def randomized(model, seed: int, *, norm_offset: bool = False):
    """`model` in eval mode with N(0, 0.5²) weights drawn from `seed`; with `norm_offset`,
    1 is added to every 8-vector (the norms' gains, and the d_model biases) so that the
    norms are far from degenerate."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            value = torch.randn(p.shape, generator=g) * 0.5
            if norm_offset and p.ndim == 1 and p.shape[0] == 8:
                value = value + 1.0
            p.copy_(value)
    return model.eval()


def save_dir(model, path: Path, **config_changes) -> Path:
    """model.save_pretrained(path); then each given config.json field set (DELETE: removed)."""
    model.save_pretrained(path)
    if config_changes:
        config = json.loads((path / "config.json").read_text())
        for key, value in config_changes.items():
            if value is DELETE:
                config.pop(key, None)
            else:
                config[key] = value
        (path / "config.json").write_text(json.dumps(config))
    return path


def hf_dir(tmp_path: Path, kind: str, **config_changes) -> Path:
    """The default tiny model of `kind` (a two-layer Llama; one layer otherwise), in its
    random init, saved to tmp_path / kind with `config_changes` made to its config.json."""
    model = tiny_model(kind, layers=2 if kind == "llama" else 1)
    return save_dir(model, tmp_path / kind, **config_changes)
