"""Hugging Face one-layer checkpoints (save_pretrained directories) as TransformerLens
tensors and config, without torch.

A directory holding `config.json` and `model.safetensors` is read with the
checker's own safetensors reader; its tensors are renamed, split and
transposed (exact: values are only moved) into TransformerLens layout, and its
config is mapped to a TransformerLens config (modelspec.family_from_tl_config
then decides the family).  Supported: GPT-NeoX (rotary, parallel or sequential
residual) and GPT-2 (learned positions), one layer, ReLU MLP; anything else is
refused with a message naming it.  The conversions follow TransformerLens's own
(`pretrained/weight_conversions/neox.py`, `gpt2.py`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from itertools import product

from .errors import Malformed

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def _refuse(what: str):
    raise Malformed(f"unsupported Hugging Face model: {what}")


def _permute(tensor, shape: tuple[int, ...], perm: tuple[int, ...]):
    """The flat row-major values of `tensor` viewed as `shape`, axes permuted by `perm`
    (numpy's transpose(perm)).  Returns (new shape, values)."""
    values = tensor.values
    if math.prod(shape) != len(values):
        raise Malformed(f"cannot view {len(values)} values as shape {shape}")
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    new_shape = tuple(shape[p] for p in perm)
    new_strides = [strides[p] for p in perm]
    out = [values[sum(i * s for i, s in zip(index, new_strides))]
           for index in product(*(range(n) for n in new_shape))]
    return new_shape, tuple(out)


def _slice0(shape, values, start: int, stop: int):
    """Rows start..stop-1 of the leading axis."""
    inner = math.prod(shape[1:])
    return (stop - start, *shape[1:]), values[start * inner:stop * inner]


def read_directory(path, read_safetensors, budget):
    """(sha256, TL tensors, TL config) of a save_pretrained directory.  sha256 is
    that of the weights file's bytes followed by the config file's bytes."""
    config_bytes = _read(os.path.join(path, CONFIG_NAME))
    weights_bytes = _read(os.path.join(path, WEIGHTS_NAME))
    config = json.loads(config_bytes.decode("utf-8"))
    if not isinstance(config, dict):
        raise Malformed(f"{CONFIG_NAME} is not a JSON object")
    tensors, _ = read_safetensors(weights_bytes, budget)
    tl_config, tl_tensors = convert(config, tensors)
    sha = hashlib.sha256(weights_bytes + config_bytes).hexdigest()
    return sha, tl_tensors, tl_config


def _read(path) -> bytes:
    if not os.path.isfile(path):
        raise Malformed(f"is a directory without {os.path.basename(path)}: not a Hugging Face "
                        "save_pretrained directory")
    with open(path, "rb") as f:
        return f.read(1 << 31)


def convert(config: dict, tensors: dict):
    """(TL config, TL tensors) of an HF GPT-NeoX or GPT-2 config and state dict."""
    kind = config.get("model_type")
    if kind == "gpt_neox":
        return _neox(config, tensors)
    if kind == "gpt2":
        return _gpt2(config, tensors)
    _refuse(f"model_type {kind!r} (supported: gpt_neox, gpt2)")


def _common_checks(config, layers_key, act_key):
    if config.get(layers_key) != 1:
        _refuse(f"{layers_key} = {config.get(layers_key)!r} (one layer is supported)")
    if config.get(act_key) != "relu":
        _refuse(f"{act_key} = {config.get(act_key)!r} (only relu is supported)")


def _tensor(cls, shape, values, dtype):
    return cls(shape=tuple(shape), values=tuple(values), dtype=dtype)


def _lookup(t):
    """t[key], or Malformed naming the missing key."""
    def get(key):
        if key not in t:
            raise Malformed(f"Hugging Face state dict lacks {key}")
        return t[key]
    return get


def _neox(config, t):
    """GPT-NeoX: fused query_key_value (rows ordered head, {q,k,v}, d_head), nn.Linear
    weights (out, in), rotary on the first rotary_dim coordinates, untied embed_out."""
    _common_checks(config, "num_hidden_layers", "hidden_act")
    rope = config.get("rope_parameters") or {}
    base = rope.get("rope_theta", config.get("rotary_emb_base", 10000))
    pct = rope.get("partial_rotary_factor", config.get("rotary_pct", 1.0))
    if rope.get("rope_type", "default") != "default" or config.get("rope_scaling"):
        _refuse("rope scaling")
    d, n = config["hidden_size"], config["num_attention_heads"]
    h = d // n
    prefix = "gpt_neox.layers.0."
    T = type(next(iter(t.values())))
    out = {}

    get = _lookup(t)

    def linear_t(key):  # (out, in) -> (in, out)
        w = get(key)
        return _tensor(T, *_permute(w, w.shape, (1, 0)), w.dtype)

    out["embed.W_E"] = get("gpt_neox.embed_in.weight")
    qkv = get(prefix + "attention.query_key_value.weight")  # (n·3·h, d)
    shape, vals = _permute(qkv, (n, 3, h, d), (1, 0, 3, 2))  # (3, n, d, h)
    bias = t.get(prefix + "attention.query_key_value.bias")  # absent: attention_bias=False
    for i, x in enumerate("QKV"):
        out[f"blocks.0.attn.W_{x}"] = _tensor(T, shape[1:], _slice0(shape, vals, i, i + 1)[1],
                                              qkv.dtype)
        if bias is not None:
            b_shape, b_vals = _permute(bias, (n, 3, h), (1, 0, 2))  # (3, n, h)
            out[f"blocks.0.attn.b_{x}"] = _tensor(T, b_shape[1:], _slice0(b_shape, b_vals, i,
                                                                          i + 1)[1], bias.dtype)
    dense = get(prefix + "attention.dense.weight")  # (d, n·h): out, in
    out["blocks.0.attn.W_O"] = _tensor(T, *_permute(dense, (d, n, h), (1, 2, 0)), dense.dtype)
    if prefix + "attention.dense.bias" in t:  # absent: attention_bias=False (zero)
        out["blocks.0.attn.b_O"] = t[prefix + "attention.dense.bias"]
    for ours, theirs in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm")):
        out[f"blocks.0.{ours}.w"] = get(prefix + theirs + ".weight")
        out[f"blocks.0.{ours}.b"] = get(prefix + theirs + ".bias")
    out["blocks.0.mlp.W_in"] = linear_t(prefix + "mlp.dense_h_to_4h.weight")
    out["blocks.0.mlp.b_in"] = get(prefix + "mlp.dense_h_to_4h.bias")
    out["blocks.0.mlp.W_out"] = linear_t(prefix + "mlp.dense_4h_to_h.weight")
    out["blocks.0.mlp.b_out"] = get(prefix + "mlp.dense_4h_to_h.bias")
    out["ln_final.w"] = get("gpt_neox.final_layer_norm.weight")
    out["ln_final.b"] = get("gpt_neox.final_layer_norm.bias")
    head = "lm_head.weight" if "lm_head.weight" in t else "embed_out.weight"
    out["unembed.W_U"] = linear_t(head)
    _no_others(t, {"gpt_neox.embed_in.weight", head, "gpt_neox.final_layer_norm.weight",
                   "gpt_neox.final_layer_norm.bias"}, prefix, (
        "attention.query_key_value.weight", "attention.query_key_value.bias",
        "attention.dense.weight", "attention.dense.bias", "input_layernorm.weight",
        "input_layernorm.bias", "post_attention_layernorm.weight",
        "post_attention_layernorm.bias", "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias",
        "mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.bias"), ("attention.rotary_emb.",
                                                               "attention.bias",
                                                               "attention.masked_bias"))
    tl = {"n_layers": 1, "d_model": d, "n_heads": n, "d_head": h,
          "d_vocab": config["vocab_size"], "n_ctx": config["max_position_embeddings"],
          "d_mlp": config["intermediate_size"], "act_fn": "relu", "normalization_type": "LN",
          "eps": float(config.get("layer_norm_eps", 1e-5)),
          "positional_embedding_type": "rotary", "rotary_dim": int(h * pct),
          "rotary_base": base, "parallel_attn_mlp": bool(config.get("use_parallel_residual",
                                                                    True))}
    return tl, out


def _gpt2(config, t):
    """GPT-2: Conv1D weights (in, out), fused c_attn (d, 3·d), learned positions,
    unembedding tied to wte (or lm_head), no unembedding bias."""
    _common_checks(config, "n_layer", "activation_function")
    if not config.get("scale_attn_weights", True) or config.get("scale_attn_by_inverse_layer_idx"):
        _refuse("an attention scale other than sqrt(d_head)")
    d, n = config["n_embd"], config["n_head"]
    h = d // n
    prefix = "transformer.h.0."
    T = type(next(iter(t.values())))
    out = {}

    get = _lookup(t)

    out["embed.W_E"] = get("transformer.wte.weight")
    out["pos_embed.W_pos"] = get("transformer.wpe.weight")
    c_attn = get(prefix + "attn.c_attn.weight")  # (d, 3·n·h)
    shape, vals = _permute(c_attn, (d, 3, n, h), (1, 2, 0, 3))  # (3, n, d, h)
    bias = get(prefix + "attn.c_attn.bias")
    for i, x in enumerate("QKV"):
        out[f"blocks.0.attn.W_{x}"] = _tensor(T, shape[1:], _slice0(shape, vals, i, i + 1)[1],
                                              c_attn.dtype)
        out[f"blocks.0.attn.b_{x}"] = _tensor(T, (n, h), bias.values[i * d:(i + 1) * d],
                                              bias.dtype)
    c_proj = get(prefix + "attn.c_proj.weight")  # (n·h, d)
    out["blocks.0.attn.W_O"] = _tensor(T, (n, h, d), c_proj.values, c_proj.dtype)
    out["blocks.0.attn.b_O"] = get(prefix + "attn.c_proj.bias")
    for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
        out[f"blocks.0.{ours}.w"] = get(prefix + theirs + ".weight")
        out[f"blocks.0.{ours}.b"] = get(prefix + theirs + ".bias")
    out["blocks.0.mlp.W_in"] = get(prefix + "mlp.c_fc.weight")
    out["blocks.0.mlp.b_in"] = get(prefix + "mlp.c_fc.bias")
    out["blocks.0.mlp.W_out"] = get(prefix + "mlp.c_proj.weight")
    out["blocks.0.mlp.b_out"] = get(prefix + "mlp.c_proj.bias")
    out["ln_final.w"] = get("transformer.ln_f.weight")
    out["ln_final.b"] = get("transformer.ln_f.bias")
    head = get("lm_head.weight") if "lm_head.weight" in t else get("transformer.wte.weight")
    out["unembed.W_U"] = _tensor(T, *_permute(head, head.shape, (1, 0)), head.dtype)
    _no_others(t, {"transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight",
                   "transformer.ln_f.weight", "transformer.ln_f.bias"}, prefix, (
        "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
        "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
        "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"), ("attn.bias",
                                                                   "attn.masked_bias"))
    inner = config.get("n_inner") or 4 * d
    tl = {"n_layers": 1, "d_model": d, "n_heads": n, "d_head": h,
          "d_vocab": config["vocab_size"], "n_ctx": config["n_positions"], "d_mlp": inner,
          "act_fn": "relu", "normalization_type": "LN",
          "eps": float(config.get("layer_norm_epsilon", 1e-5)),
          "positional_embedding_type": "standard"}
    return tl, out


def _no_others(t, top: set, prefix: str, layer: tuple, buffers: tuple) -> None:
    """Refuse tensors the conversion would silently drop (e.g. a second layer)."""
    allowed = top | {prefix + k for k in layer}
    extra = [k for k in t if k not in allowed and not any(k.startswith(prefix + b)
                                                          for b in buffers)]
    if extra:
        _refuse(f"tensors outside a one-layer model: {', '.join(sorted(extra)[:6])}")
