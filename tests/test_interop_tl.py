"""TransformerLens interop: real HookedTransformer models (random weights) of each
supported family, saved as users do ({"config": cfg.to_dict(), "model": state_dict}),
loaded by the generator and bound by the checker; our float64 forward equals
TransformerLens's own forward to float32 tolerance.  Skipped without the `interop`
extra (transformer-lens>=3,<4)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

tl = pytest.importorskip("transformer_lens")

from checker.cli import main as check_cert  # noqa: E402
from checker.errors import Malformed  # noqa: E402
from checker.modelfile import read_model_tensors  # noqa: E402
from generator.cli import generate  # noqa: E402
from generator.model import family_logits_float64, family_weights  # noqa: E402
from generator.modelfile import load_model  # noqa: E402

BASE = dict(n_layers=1, d_model=8, n_ctx=3, d_head=4, d_vocab=5, seed=0)
CONFIGS = {
    "ln_mlp_rope": dict(n_heads=2, d_mlp=16, act_fn="relu", normalization_type="LN",
                        positional_embedding_type="rotary", rotary_dim=4),
    "lnpre_attn_only_3heads": dict(n_heads=3, attn_only=True, normalization_type="LNPre"),
    "ln_parallel_partial_rope": dict(n_heads=2, d_mlp=8, act_fn="relu",
                                     normalization_type="LN", parallel_attn_mlp=True,
                                     positional_embedding_type="rotary", rotary_dim=2,
                                     rotary_base=500, eps=1e-3),
    "mlp_learned_pos": dict(n_heads=1, d_mlp=8, act_fn="relu", normalization_type=None),
    "attn_only_classic": dict(n_heads=1, attn_only=True, normalization_type=None),
    # issue 21: TransformerLens's default activation and the other smooth ones
    "default_gelu_ln": dict(n_heads=2, d_mlp=16, act_fn="gelu", normalization_type="LN"),
    "gelu_new_rope": dict(n_heads=2, d_mlp=8, act_fn="gelu_new", normalization_type="LN",
                          positional_embedding_type="rotary", rotary_dim=4),
    "gelu_fast": dict(n_heads=1, d_mlp=8, act_fn="gelu_fast", normalization_type=None),
    "gelu_pytorch_tanh": dict(n_heads=1, d_mlp=8, act_fn="gelu_pytorch_tanh",
                              normalization_type="LNPre"),
    "silu": dict(n_heads=2, d_mlp=8, act_fn="silu", normalization_type="LN"),
    "rms_silu_rope": dict(n_heads=2, d_mlp=8, act_fn="silu", normalization_type="RMS",
                          positional_embedding_type="rotary", rotary_dim=4),
    "rmspre_gelu": dict(n_heads=1, d_mlp=8, act_fn="gelu", normalization_type="RMSPre"),
    # issue 21: several layers and gated MLPs
    "two_layers_attn_only": dict(n_layers=2, n_heads=2, attn_only=True,
                                 normalization_type=None),
    "two_layers_gelu_ln": dict(n_layers=2, n_heads=2, d_mlp=16, act_fn="gelu",
                               normalization_type="LN"),
    "gated_silu_rms_rope": dict(n_heads=2, d_mlp=8, act_fn="silu", normalization_type="RMS",
                                gated_mlp=True, positional_embedding_type="rotary",
                                rotary_dim=4),
    # as TransformerLens's own Llama configs (loading_from_pretrained): final_rms, the name
    "llama_like": dict(n_layers=2, n_heads=2, d_mlp=8, act_fn="silu", normalization_type="RMS",
                       gated_mlp=True, positional_embedding_type="rotary", rotary_dim=4,
                       final_rms=True, rotary_adjacent_pairs=False,
                       original_architecture="LlamaForCausalLM"),
    "three_layers_gated_gelu_ln_parallel": dict(n_layers=3, n_heads=1, d_mlp=8, act_fn="gelu",
                                                normalization_type="LN", gated_mlp=True,
                                                parallel_attn_mlp=True),
}


def hooked(name: str):
    """A HookedTransformer of the family, every parameter random (biases and LN too)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = tl.HookedTransformerConfig(**{**BASE, **CONFIGS[name]})
        model = tl.HookedTransformer(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.7 + (1.0 if p.ndim == 1 and
                                                                 p.shape[0] == 8 else 0.0))
    return model.eval()


def save_tl(model, path):
    torch.save({"config": model.cfg.to_dict(), "model": model.state_dict()}, path)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_equals_transformer_lens(tmp_path, name):
    model = hooked(name)
    path = tmp_path / "m.pt"
    save_tl(model, path)
    weights = family_weights(load_model(path).weights)
    tokens = torch.randint(0, 5, (64, 3), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs = model(tokens)[:, -1].double().numpy()
    ours = family_logits_float64(weights, tokens.numpy())
    # float32 rounding grows with the logits' size (a 2-layer attention-only model reaches ~150)
    scale = max(1.0, float(np.abs(theirs).max()))
    assert np.allclose(ours, theirs, rtol=1e-5, atol=1e-5 * scale), np.abs(ours - theirs).max()


DEEP = ("two_layers_attn_only", "two_layers_gelu_ln", "gated_silu_rms_rope",
        "three_layers_gated_gelu_ln_parallel", "llama_like")


@pytest.mark.parametrize("name", DEEP)
def test_deep_and_gated_forward_equals_transformer_lens_in_float64(tmp_path, name):
    """Issue 21: with TransformerLens run in float64, and its float32 rotary sin/cos tables
    replaced by the exact angles' (spec/theorem.md §1b, RoPE decision), the forward passes
    agree to ~1e-14: the semantics of depth and of the gated MLP are TransformerLens's."""
    model = hooked(name)
    path = tmp_path / "m.pt"
    save_tl(model, path)
    weights = family_weights(load_model(path).weights)
    tokens = torch.randint(0, 5, (64, 3), generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        model = model.to(torch.float64)
        for block in model.blocks:
            attn = block.attn
            if getattr(attn, "rotary_sin", None) is not None:
                n, r = attn.rotary_sin.shape
                theta = float(weights.dims.family.rotary_base) ** (
                    -2 * torch.arange(r // 2, dtype=torch.float64) / r)
                angles = torch.arange(n, dtype=torch.float64)[:, None] * theta[None]
                angles = torch.cat([angles, angles], dim=-1)
                attn.rotary_sin.copy_(angles.sin())
                attn.rotary_cos.copy_(angles.cos())
        theirs = model(tokens)[:, -1].numpy()
    ours = family_logits_float64(weights, tokens.numpy())
    assert np.abs(ours - theirs).max() < 1e-12 * max(1.0, float(np.abs(theirs).max()))


def test_checker_reads_tl_config_safely(tmp_path):
    """cfg.to_dict() holds numpy float64 scalars and a torch.dtype: the checker's
    whitelist unpickler decodes them to plain values."""
    path = tmp_path / "m.pt"
    save_tl(hooked("ln_mlp_rope"), path)
    config = read_model_tensors(path).config
    assert config["attn_scale"] == 2.0 and type(config["attn_scale"]) is float
    assert config["dtype"] == "torch.float32"


@pytest.mark.parametrize("name", ["ln_mlp_rope", "attn_only_classic", "default_gelu_ln",
                                  "two_layers_attn_only", "gated_silu_rms_rope"])
def test_certificate_of_a_tl_model_binds_to_its_file(tmp_path, name):
    path = tmp_path / "m.pt"
    save_tl(hooked(name), path)
    lines, summary = generate(str(path), "forward-brute-force")
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    assert check_cert([str(cert), "--model", str(path)]) == 0


def test_unsupported_tl_models_are_named(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = tl.HookedTransformerConfig(**BASE, n_heads=1, d_mlp=8, act_fn="solu_ln")
        model = tl.HookedTransformer(cfg)
    path = tmp_path / "g.pt"
    save_tl(model, path)
    with pytest.raises(Malformed, match="act_fn = 'solu_ln'"):
        load_model(path)


@pytest.mark.parametrize("config_name", ["m.config.json", "config.json"])
def test_state_dict_with_config_json_beside_it(tmp_path, config_name):
    import json

    model = hooked("ln_parallel_partial_rope")
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    (tmp_path / config_name).write_text(json.dumps(model.cfg.to_dict(), default=str))
    weights = family_weights(load_model(path).weights)
    assert weights.dims.family.parallel and weights.dims.family.rotary_base == 500
    lines, _ = generate(str(path), "forward-brute-force")
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    assert check_cert([str(cert), "--model", str(path)]) == 0
