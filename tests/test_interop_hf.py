"""Hugging Face interop: one-layer GPT-NeoX (rotary, parallel or sequential residual) and
GPT-2 models with random weights, saved by save_pretrained, loaded (converted to
TransformerLens layout by checker/hf.py), compared with the library's own forward, and
certified with --model bound to the directory.  Skipped without `transformers`."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from checker.cli import main as check_cert  # noqa: E402
from checker.errors import Malformed  # noqa: E402
from generator.cli import generate  # noqa: E402
from generator.model import family_logits_float64, family_weights  # noqa: E402
from generator.modelfile import load_model  # noqa: E402

V, K = 5, 3


def neox(parallel: bool, pct: float, bias: bool = True, act: str = "relu"):
    cfg = transformers.GPTNeoXConfig(
        vocab_size=V, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, hidden_act=act, max_position_embeddings=K, rotary_pct=pct,
        use_parallel_residual=parallel, attention_bias=bias)
    return transformers.GPTNeoXForCausalLM(cfg)


def gpt2(tied: bool = True, act: str = "relu"):
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=8, n_layer=1, n_head=2, n_positions=K,
                                  activation_function=act, tie_word_embeddings=tied)
    return transformers.GPT2LMHeadModel(cfg)


MODELS = {
    "neox_parallel": lambda: neox(True, 0.5),
    "neox_sequential_full_rotary": lambda: neox(False, 1.0),
    "neox_no_attention_bias": lambda: neox(True, 0.5, bias=False),
    "gpt2": gpt2,
    # issue 21: the libraries' default activations (and SiLU)
    "neox_gelu": lambda: neox(True, 0.5, act="gelu"),
    "gpt2_gelu_new": lambda: gpt2(act="gelu_new"),
    "gpt2_silu": lambda: gpt2(act="silu"),
    "gpt2_gelu_fast": lambda: gpt2(act="gelu_fast"),
}


def randomized(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p.ndim == 1 and
                                                               p.shape[0] == 8 else 0.0))
    return model.eval()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_equals_transformers(tmp_path, name):
    model = randomized(MODELS[name])
    model.save_pretrained(tmp_path)
    weights = family_weights(load_model(tmp_path).weights)
    tokens = torch.randint(0, V, (64, K), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        theirs = model(tokens).logits[:, -1].double().numpy()
    ours = family_logits_float64(weights, tokens.numpy())
    assert np.allclose(ours, theirs, rtol=1e-5, atol=1e-5), np.abs(ours - theirs).max()


@pytest.mark.parametrize("name", ["neox_parallel", "gpt2", "gpt2_gelu_new"])
def test_certificate_binds_to_hf_directory(tmp_path, name):
    model = randomized(MODELS[name])
    model.save_pretrained(tmp_path / "m")
    lines, _ = generate(str(tmp_path / "m"), "forward-brute-force")
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    assert check_cert([str(cert), "--model", str(tmp_path / "m")]) == 0
    import json

    config_path = tmp_path / "m" / "config.json"
    config = json.loads(config_path.read_text())
    key = "layer_norm_eps" if "layer_norm_eps" in config else "layer_norm_epsilon"
    config[key] = 1e-3  # another model: the certificate's family no longer matches
    config_path.write_text(json.dumps(config))
    assert check_cert([str(cert), "--model", str(tmp_path / "m")]) == 1


def test_unsupported_hf_models_are_named(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.GPT2Config(vocab_size=V, n_embd=8, n_layer=2, n_head=2,
                                      n_positions=K, activation_function="relu")
        transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "two")
        cfg = transformers.GPT2Config(vocab_size=V, n_embd=8, n_layer=1, n_head=2,
                                      n_positions=K, activation_function="quick_gelu")
        transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "quick")
    with pytest.raises(Malformed, match="n_layer = 2"):
        load_model(tmp_path / "two")
    with pytest.raises(Malformed, match="activation_function = 'quick_gelu'"):
        load_model(tmp_path / "quick")
