"""Hugging Face interop: GPT-NeoX (rotary, parallel or sequential residual), GPT-2 and
Llama (RMSNorm, SiLU-gated MLP, RoPE) models of one or two layers with random weights,
saved by save_pretrained, loaded (converted to TransformerLens layout by checker/hf.py),
compared with the library's own forward, and certified with --model bound to the
directory.  Skipped without `transformers`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_fixtures import randomized as randomized_weights  # noqa: E402
from hf_fixtures import save_dir, tiny_model  # noqa: E402

from checker.cli import main as check_cert  # noqa: E402
from checker.errors import Malformed  # noqa: E402
from generator.cli import generate  # noqa: E402
from generator.model import family_logits_float64, family_weights  # noqa: E402
from generator.modelfile import load_model  # noqa: E402

V, K = 5, 3


def neox(parallel: bool, pct: float, bias: bool = True, act: str = "relu", layers: int = 1):
    return tiny_model("neox", vocab=V, positions=K, layers=layers, act=act, rotary_pct=pct,
                      use_parallel_residual=parallel, attention_bias=bias)


def gpt2(tied: bool = True, act: str = "relu", layers: int = 1):
    return tiny_model("gpt2", vocab=V, positions=K, layers=layers, act=act,
                      tie_word_embeddings=tied)


def llama(layers: int = 2, tied: bool = False, bias: bool = False, head_dim=None):
    """A tiny Llama (RMSNorm, SiLU-gated MLP, RoPE; issue 21)."""
    return tiny_model("llama", vocab=V, positions=K, layers=layers, tie_word_embeddings=tied,
                      attention_bias=bias, head_dim=head_dim)


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
    # issue 21: several layers, and Llama
    "neox_2layers_gelu": lambda: neox(True, 0.5, act="gelu", layers=2),
    "gpt2_2layers_gelu_new": lambda: gpt2(act="gelu_new", layers=2),
    "llama_2layers": llama,
    "llama_1layer_tied_bias_head6": lambda: llama(1, tied=True, bias=True, head_dim=6),
}


def randomized(make):
    return randomized_weights(make(), 3, norm_offset=True)


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


@pytest.mark.parametrize("name", ["neox_2layers_gelu", "gpt2_2layers_gelu_new", "llama_2layers",
                                  "llama_1layer_tied_bias_head6"])
def test_deep_forward_equals_transformers_in_float64(tmp_path, name):
    """With the library run in float64 the passes agree far below float32 rounding
    (rotary: up to ~1e-7, the library's float32 inverse frequencies against exact angles)."""
    model = randomized(MODELS[name])
    model.save_pretrained(tmp_path)
    weights = family_weights(load_model(tmp_path).weights)
    tokens = torch.randint(0, V, (64, K), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        theirs = model.to(torch.float64)(tokens).logits[:, -1].numpy()
    ours = family_logits_float64(weights, tokens.numpy())
    tolerance = 1e-10 if name.startswith("gpt2") else 1e-6
    assert np.abs(ours - theirs).max() < tolerance * max(1.0, float(np.abs(theirs).max()))


@pytest.mark.parametrize("name", ["neox_parallel", "gpt2", "gpt2_gelu_new", "llama_2layers",
                                  "gpt2_2layers_gelu_new"])
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
    key = next(k for k in ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps")
               if k in config)
    config[key] = 1e-3  # another model: the certificate's family no longer matches
    config_path.write_text(json.dumps(config))
    assert check_cert([str(cert), "--model", str(tmp_path / "m")]) == 1


def test_unsupported_hf_models_are_named(tmp_path):
    save_dir(tiny_model("gpt2", vocab=V, positions=K, layers=65), tmp_path / "two")
    save_dir(tiny_model("gpt2", vocab=V, positions=K, act="quick_gelu"), tmp_path / "quick")
    with pytest.raises(Malformed, match="n_layer = 65"):
        load_model(tmp_path / "two")
    with pytest.raises(Malformed, match="activation_function = 'quick_gelu'"):
        load_model(tmp_path / "quick")


@pytest.mark.parametrize("name", ["llama_2layers", "llama_1layer_tied_bias_head6",
                                  "neox_2layers_gelu"])
def test_rotary_models_equal_transformers_exactly_with_float64_internals(tmp_path, monkeypatch,
                                                                         name):
    """transformers computes RoPE's angles and cos/sin, and Llama's RMSNorm, in float32 even
    in a float64 model; with those steps in float64 too (exact angles θ_j = base^(−2j/dim),
    as spec/theorem.md) the passes agree to ~1e-14: the semantics are the same."""
    from transformers.models.gpt_neox import modeling_gpt_neox
    from transformers.models.llama import modeling_llama

    def rotary(self, x, position_ids):
        dim = self.inv_freq.shape[0] * 2
        base = float(self.config.rope_parameters["rope_theta"])
        inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        emb = torch.cat([position_ids[..., None].double() * inv] * 2, dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def rms(self, h):
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                              + self.variance_epsilon))

    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rotary)
    monkeypatch.setattr(modeling_gpt_neox.GPTNeoXRotaryEmbedding, "forward", rotary)
    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms)
    model = randomized(MODELS[name])
    model.save_pretrained(tmp_path)
    weights = family_weights(load_model(tmp_path).weights)
    tokens = torch.randint(0, V, (64, K), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        theirs = model.to(torch.float64)(tokens).logits[:, -1].numpy()
    ours = family_logits_float64(weights, tokens.numpy())
    assert np.abs(ours - theirs).max() < 1e-12 * max(1.0, float(np.abs(theirs).max()))
