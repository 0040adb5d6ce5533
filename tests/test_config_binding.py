"""A model file means exactly one model (issue 18): every field of a TransformerLens or
Hugging Face config is interpreted, inert, at the value under which our semantics is the
library's, or refused by name.  The false binding that started it: a Max-of-3 model file
whose config sets attn_scores_soft_cap = 0.001 (TransformerLens then computes another
function) was VERIFIED against the shipped certificate."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
import torch
from hf_fixtures import DELETE, hf_dir

from checker.cli import main as check_cert
from checker.errors import Malformed
from checker.modelfile import ModelFileError, read_model_tensors
from checker.tl_config import FIXED, INERT, INTERPRETED, SUBORDINATE, family_from_tl_config

ROOT = Path(__file__).resolve().parent.parent
CERT = ROOT / "certs" / "max3_v8_seed0.brute-force.jsonl"
MODEL = ROOT / "generator" / "models" / "max3_v8_seed0.pt"


def shipped_state_dict() -> dict:
    return torch.load(MODEL, weights_only=True)["model"]


def tl_config_of(sd: dict, **changes) -> dict:
    """The plain-typed cfg.to_dict() a TransformerLens 3.9 user saves for this
    attention-only model (every field of HookedTransformerConfig, at its default)."""
    d_vocab, d_model = sd["embed.W_E"].shape
    n_heads, _, d_head = sd["blocks.0.attn.W_Q"].shape
    cfg = {
        "d_model": d_model, "d_head": d_head, "n_layers": 1, "n_ctx": 3, "n_heads": n_heads,
        "d_mlp": 4 * d_model, "d_vocab": d_vocab, "device": "cpu", "use_attn_result": False,
        "use_split_qkv_input": False, "default_prepend_bos": True,
        "positional_embedding_type": "standard", "n_key_value_heads": None,
        "attn_only": True, "gated_mlp": False, "uses_rms_norm": False, "eps": 1e-05,
        "layer_norm_folding": False, "act_fn": "relu", "normalization_type": None,
        "num_experts": None, "experts_per_token": None, "final_rms": False,
        "dtype": "torch.float32", "model_name": "custom", "use_attn_scale": True,
        "attn_scale": math.sqrt(d_head), "use_hook_mlp_in": False, "use_attn_in": False,
        "use_qk_norm": False, "clip_qkv": None, "use_logn_attn": False,
        "train_seq_length": None, "use_dynamic_ntk_rope": False, "use_local_attn": False,
        "ungroup_grouped_query_attention": False, "original_architecture": None,
        "from_checkpoint": False, "checkpoint_index": None, "checkpoint_label_type": None,
        "checkpoint_value": None, "tokenizer_name": None, "window_size": None,
        "attn_types": None, "init_mode": "gpt2", "n_devices": 1, "attention_dir": "causal",
        "seed": None, "initializer_range": 0.1414, "init_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "d_vocab_out": d_vocab,
        "parallel_attn_mlp": False, "rotary_dim": None, "n_params": 4096,
        "use_hook_tokens": False, "tokenizer_prepends_bos": None, "post_embedding_ln": False,
        "rotary_base": 10000, "rotary_base_local": None, "rotary_scaling_factor": 1.0,
        "trust_remote_code": False, "rotary_adjacent_pairs": False, "load_in_4bit": False,
        "quantization_method": None, "relative_attention_max_distance": None,
        "relative_attention_num_buckets": None, "decoder_start_token_id": None,
        "tie_word_embeddings": False, "use_normalization_before_and_after": False,
        "attn_scores_soft_cap": -1.0, "output_logits_soft_cap": -1.0,
        "use_NTK_by_parts_rope": False, "NTK_by_parts_low_freq_factor": 1.0,
        "NTK_by_parts_high_freq_factor": 4.0, "NTK_by_parts_factor": 8.0,
        "NTK_original_ctx_len": 8192, "use_yarn_rope": False, "yarn_factor": 1.0,
        "yarn_attention_factor": 1.0, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0,
        "yarn_original_max_position_embeddings": 4096, "yarn_truncate": True,
        "yarn_global_attn_only": False, "use_attention_sinks": False, "norm_topk_prob": False,
    }
    cfg.update(changes)
    return cfg


def save(tmp_path: Path, cfg: dict, name: str = "m.pt") -> Path:
    path = tmp_path / name
    torch.save({"config": cfg, "model": shipped_state_dict()}, path)
    return path


def verdict(path: Path, capsys) -> tuple[int, str]:
    code = check_cert([str(CERT), "--model", str(path)])
    return code, capsys.readouterr().err


# ---- the false binding ----------------------------------------------------------------------

def test_soft_cap_file_is_refused_naming_the_field(tmp_path, capsys):
    """The reported false binding: same weights, attn_scores_soft_cap = 0.001."""
    assert verdict(save(tmp_path, tl_config_of(shipped_state_dict())), capsys)[0] == 0
    code, err = verdict(save(tmp_path, tl_config_of(shipped_state_dict(),
                                                    attn_scores_soft_cap=0.001)), capsys)
    assert code == 2 and "attn_scores_soft_cap = 0.001" in err, err


def test_real_transformer_lens_config_binds(tmp_path, capsys):
    """A real cfg.to_dict() of TransformerLens (numpy scalars, torch dtype) with every
    field at TransformerLens's default is accepted; with a soft cap it is refused."""
    tl = pytest.importorskip("transformer_lens")
    sd = shipped_state_dict()
    d_vocab, d_model = sd["embed.W_E"].shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = tl.HookedTransformerConfig(
            n_layers=1, d_model=d_model, n_ctx=3, d_head=sd["blocks.0.attn.W_Q"].shape[2],
            d_vocab=d_vocab, n_heads=1, attn_only=True, normalization_type=None,
            act_fn="relu")
    path = tmp_path / "tl.pt"
    torch.save({"config": cfg.to_dict(), "model": sd}, path)
    assert verdict(path, capsys)[0] == 0
    cfg.attn_scores_soft_cap = 0.001
    torch.save({"config": cfg.to_dict(), "model": sd}, path)
    code, err = verdict(path, capsys)
    assert code == 2 and "attn_scores_soft_cap" in err


def test_the_table_covers_transformer_lens_exactly():
    """Every HookedTransformerConfig field is classified, once (fails when TransformerLens
    gains a field: decide it in spec/configs.md and here)."""
    tl = pytest.importorskip("transformer_lens")
    import dataclasses

    fields = {f.name for f in dataclasses.fields(tl.HookedTransformerConfig)}
    classes = [set(INTERPRETED), set(INERT), set(FIXED), set(SUBORDINATE)]
    assert sum(len(c) for c in classes) == len(set().union(*classes)), "a field twice"
    assert fields == set().union(*classes), fields ^ set().union(*classes)


# ---- one file per refused TransformerLens field -------------------------------------------

REFUSED_TL = {
    "uses_rms_norm": True, "final_rms": True,
    "use_normalization_before_and_after": True, "post_embedding_ln": True,
    "use_qk_norm": True, "use_local_attn": True, "use_logn_attn": True,
    "use_dynamic_ntk_rope": True, "use_NTK_by_parts_rope": True, "use_yarn_rope": True,
    "use_attention_sinks": True, "rotary_adjacent_pairs": True,
    "scale_attn_by_inverse_layer_idx": True, "load_in_4bit": True, "use_attn_scale": False,
    "attn_scores_soft_cap": 50.0, "output_logits_soft_cap": 30.0,
    "rotary_scaling_factor": 2.0, "clip_qkv": 8.0, "num_experts": 4,
    "quantization_method": "gptq", "attention_dir": "bidirectional",
    "original_architecture": "Olmo2ForCausalLM", "attn_scale": 2.0, "n_key_value_heads": 2,
    "n_layers": 2, "normalization_type": "RMSNorm", "positional_embedding_type": "alibi",
    "d_vocab_out": 9, "a_field_from_the_future": 1,
}


def test_final_rms_is_unread_without_layernorm(tmp_path, capsys):
    """Issue 21: TransformerLens's Llama configs set final_rms with RMS; HookedTransformer
    reads it only with LN/LNPre, so without LayerNorm it changes nothing (still typed)."""
    path = save(tmp_path, tl_config_of(shipped_state_dict(), final_rms=True))
    assert verdict(path, capsys)[0] == 0
    path = save(tmp_path, tl_config_of(shipped_state_dict(), final_rms="yes"))
    code, err = verdict(path, capsys)
    assert code == 2 and "final_rms = " in err


def test_every_fixed_field_has_a_refusal_case():
    assert set(FIXED) <= set(REFUSED_TL)


@pytest.mark.parametrize("field", sorted(REFUSED_TL))
def test_refused_tl_field_file(tmp_path, capsys, field):
    # final_rms is read only with LN/LNPre (LNPre has no weights: the shipped tensors fit)
    extra = {"normalization_type": "LNPre"} if field == "final_rms" else {}
    path = save(tmp_path, tl_config_of(shipped_state_dict(), **{field: REFUSED_TL[field]},
                                       **extra))
    code, err = verdict(path, capsys)
    assert code == 2 and f"{field} = " in err, err


@pytest.mark.parametrize("field,value", [("NTK_by_parts_factor", 3.0), ("yarn_factor", 9.0),
                                         ("window_size", 17), ("rotary_base_local", 7),
                                         ("model_name", "mine"), ("seed", 42),
                                         ("tie_word_embeddings", True)])
def test_inert_and_subordinate_fields_do_not_change_the_model(tmp_path, capsys, field, value):
    path = save(tmp_path, tl_config_of(shipped_state_dict(), **{field: value}))
    assert verdict(path, capsys)[0] == 0


# ---- strict types and sizes ----------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("d_model", True), ("d_model", 32.0), ("d_model", "32"), ("n_heads", 1.0),
    ("n_ctx", 2.9), ("n_layers", True), ("eps", "1e-5"), ("eps", float("nan")),
    ("eps", True), ("attn_only", 1), ("parallel_attn_mlp", "no"), ("rotary_base", "10000"),
    ("d_vocab", None), ("act_fn", 3)])
def test_types_are_strict(field, value):
    cfg = tl_config_of(shipped_state_dict(), **{field: value})
    with pytest.raises(Malformed, match=field):
        family_from_tl_config(cfg)


@pytest.mark.parametrize("field,delta", [("d_vocab", 1), ("d_model", 1), ("d_head", 1),
                                         ("n_ctx", 1), ("n_heads", 1)])
def test_sizes_must_equal_the_tensors(field, delta):
    sd = shipped_state_dict()
    cfg = tl_config_of(sd)
    cfg[field] += delta
    if field == "d_vocab":
        cfg["d_vocab_out"] += delta
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    family_from_tl_config(tl_config_of(sd), shapes)  # the true sizes pass
    with pytest.raises(Malformed, match=field):
        family_from_tl_config(cfg, shapes)


def test_missing_required_field_and_defaults():
    cfg = tl_config_of(shipped_state_dict())
    del cfg["normalization_type"]  # TransformerLens's default is LN: must be stated
    with pytest.raises(Malformed, match="normalization_type"):
        family_from_tl_config(cfg)
    cfg = tl_config_of(shipped_state_dict(), attn_only=False, d_mlp=None)
    assert family_from_tl_config(cfg).d_mlp == 4 * cfg["d_model"]  # TransformerLens's default


def test_unknown_top_level_entries_and_metadata_are_refused(tmp_path):
    sd = shipped_state_dict()
    path = tmp_path / "m.pt"
    torch.save({"model": sd, "config": tl_config_of(sd), "optimizer": {"lr": 1.0}}, path)
    with pytest.raises(ModelFileError, match="'optimizer'"):
        read_model_tensors(path)
    safetensors = pytest.importorskip("safetensors.torch")
    path = tmp_path / "m.safetensors"
    safetensors.save_file(sd, str(path), metadata={"config": json.dumps(tl_config_of(sd)),
                                                   "soft_cap": "0.001"})
    with pytest.raises(ModelFileError, match="'soft_cap'"):
        read_model_tensors(path)


def test_sidecar_config_goes_through_the_same_table(tmp_path, capsys):
    sd = shipped_state_dict()
    torch.save(sd, tmp_path / "bare.pt")
    (tmp_path / "bare.config.json").write_text(json.dumps(
        tl_config_of(sd, output_logits_soft_cap=1.0)))
    code, err = verdict(tmp_path / "bare.pt", capsys)
    assert code == 2 and "output_logits_soft_cap" in err


# ---- Hugging Face config.json -------------------------------------------------------------

REFUSED_HF = [
    ("neox", "rope_scaling", {"rope_type": "linear", "factor": 2.0}),
    ("neox", "rope_parameters", {"rope_type": "yarn", "rope_theta": 10000.0}),
    ("neox", "rope_parameters", {"rope_type": "default", "rope_theta": 1e4, "factor": 2.0}),
    ("neox", "tie_word_embeddings", True),
    ("neox", "is_encoder_decoder", True),
    ("neox", "add_cross_attention", True),
    ("neox", "pruned_heads", {"0": [1]}),
    ("neox", "num_hidden_layers", True),
    ("neox", "hidden_size", 8.0),
    ("neox", "layer_norm_eps", "1e-5"),
    ("neox", "use_parallel_residual", 1),
    ("neox", "architectures", ["GPTNeoXForSequenceClassification"]),
    ("neox", "attention_bias", False),
    ("neox", "sliding_window", 2),
    ("gpt2", "scale_attn_weights", False),
    ("gpt2", "scale_attn_by_inverse_layer_idx", True),
    ("gpt2", "add_cross_attention", True),
    ("gpt2", "n_layer", 1.0),
    ("gpt2", "layer_norm_epsilon", None),
    ("gpt2", "architectures", ["GPT2DoubleHeadsModel"]),
    ("gpt2", "attn_logit_softcapping", 30.0),
    ("gpt2", "activation_function", ["relu"]),  # not a name (was a TypeError)
    ("gpt2", "tie_word_embeddings", False),  # no lm_head.weight: transformers would make one
    # issue 21: Llama's allow-list
    ("llama", "mlp_bias", True),
    ("llama", "num_key_value_heads", 1),
    ("llama", "rope_scaling", {"rope_type": "linear", "factor": 2.0}),
    ("llama", "rope_parameters", {"rope_type": "llama3", "rope_theta": 10000.0}),
    ("llama", "rope_parameters", {"rope_type": "default", "rope_theta": 1e4,
                                  "partial_rotary_factor": 0.5}),
    ("llama", "pretraining_tp", 2),
    ("llama", "num_hidden_layers", 1),  # two layers of tensors
    ("llama", "num_hidden_layers", 3),  # lacks layer 2's tensors
    ("llama", "hidden_act", "relu2"),
    ("llama", "attention_bias", True),  # no bias tensors
    ("llama", "architectures", ["LlamaForSequenceClassification"]),
    ("llama", "sliding_window", 2),
    ("llama", "head_dim", 3),  # odd: no rotate-half pairing
]


@pytest.mark.parametrize("kind,field,value", REFUSED_HF,
                         ids=[f"{k}-{f}-{i}" for i, (k, f, _) in enumerate(REFUSED_HF)])
def test_refused_hf_field(tmp_path, kind, field, value):
    path = hf_dir(tmp_path, kind, **{field: value})
    with pytest.raises(ModelFileError) as info:
        read_model_tensors(path)
    text = str(info.value)
    assert field in text or (field == "tie_word_embeddings" and "lm_head.weight" in text) or (
        field == "num_hidden_layers" and ("model.layers.1." in text or "model.layers.2." in text)
    ) or (field == "head_dim" and "head_dim" in text), info.value


def test_hf_rotary_default_is_the_libraries(tmp_path):
    """transformers (4.x and 5.x) rotates a quarter of d_head when config.json names no
    rotary fraction; the checker read 1.0 before (another model)."""
    path = hf_dir(tmp_path, "neox", rope_parameters=DELETE)
    config = read_model_tensors(path).config
    assert config["rotary_dim"] == int(4 * 0.25) == 1
    path = hf_dir(tmp_path / "b", "neox", rope_parameters={"rope_theta": 500.0},
                  rotary_pct=0.5)
    config = read_model_tensors(path).config
    assert config["rotary_dim"] == 2 and config["rotary_base"] == 500.0
    path = hf_dir(tmp_path / "c", "neox", rope_parameters={"partial_rotary_factor": 1.0},
                  rotary_pct=0.5)  # two spellings, two models: refused
    with pytest.raises(ModelFileError, match="rotary_pct"):
        read_model_tensors(path)


def test_hf_inert_fields_are_accepted(tmp_path):
    path = hf_dir(tmp_path, "gpt2", resid_pdrop=0.5, bos_token_id=3, use_cache=False,
                  reorder_and_upcast_attn=True, transformers_version="4.40.0")
    assert read_model_tensors(path).config["n_heads"] == 2


def test_hf_directory_is_read_within_the_limits(tmp_path):
    """A 2 MB config.json and a weights file over the size limit are refused before they
    are read whole (hole 7: a 1 GB config.json was parsed at 3.2 GB RSS)."""
    path = hf_dir(tmp_path, "gpt2")
    weights = (path / "model.safetensors").stat().st_size
    with pytest.raises(ModelFileError, match="limit"):
        read_model_tensors(path, max_bytes=weights - 1)
    config = json.loads((path / "config.json").read_text())
    config["id2label"] = {str(i): "x" * 100 for i in range(20000)}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFileError, match="config.json is larger than the limit"):
        read_model_tensors(path)


def test_hf_directory_respects_the_time_limit(tmp_path):
    path = hf_dir(tmp_path, "gpt2")
    with pytest.raises(ModelFileError, match="time limit"):
        read_model_tensors(path, deadline=0.0)


def test_hf_weights_file_alone_says_pass_the_directory(tmp_path):
    path = hf_dir(tmp_path, "gpt2")
    with pytest.raises(ModelFileError, match="pass the directory"):
        read_model_tensors(path / "model.safetensors")


def test_an_integer_beyond_binary64_is_refused_by_name():
    """eps = 10**400 (JSON allows it) is not a real the checker can read: Malformed, not
    an OverflowError from float conversion."""
    from checker.config_fields import Fields, is_real
    from checker.errors import Malformed

    assert not is_real(10 ** 400) and not is_real(-10 ** 400)
    assert is_real(10 ** 300) and is_real(1.0)
    with pytest.raises(Malformed, match="eps = 1000"):
        Fields("model config").real({"eps": 10 ** 400}, "eps", 1e-5)
