"""Hugging Face checkpoints (save_pretrained directories) as TransformerLens
tensors and config, without torch.

A directory holding `config.json` and `model.safetensors` is read with the
checker's own safetensors reader; its tensors are renamed, split and
transposed (exact: values are only moved) into TransformerLens layout, and its
config is mapped to a TransformerLens config (tl_config.family_from_tl_config
then decides the family).  Supported: GPT-NeoX (rotary, parallel or sequential
residual), GPT-2 (learned positions) and Llama (RMSNorm, SiLU-gated MLP, RoPE), any
number of layers; anything else is refused with a message naming it.  The conversions
follow TransformerLens's own (`pretrained/weight_conversions/neox.py`, `gpt2.py`,
`llama.py`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from itertools import product

from .config_fields import Fields, shown
from .errors import Malformed
from .modelspec import ACTIVATION_ALIASES, ACTIVATIONS, MAX_LAYERS

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


# strict getters (config_fields.py says why); every integer field here is non-negative
_FIELDS = Fields("Hugging Face model")
_refuse, _real, _flag = _FIELDS.refuse, _FIELDS.real, _FIELDS.flag


def _int(config: dict, name: str, default=None):
    return _FIELDS.get(config, name, default, lambda v: type(v) is int and v >= 0,
                       "a non-negative integer")


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


def read_directory(path, read_safetensors, budget, max_bytes: int, tick):
    """(sha256, TL tensors, TL config) of a save_pretrained directory.  sha256 is
    that of the weights file's bytes followed by the config file's bytes.

    The weights file is held to `max_bytes` (the model-file limit) and config.json to
    MAX_CONFIG_BYTES before either is read whole; `tick()` raises once the time limit
    has passed and is called between steps and per converted tensor."""
    config_bytes = _read(os.path.join(path, CONFIG_NAME), MAX_CONFIG_BYTES)
    weights_bytes = _read(os.path.join(path, WEIGHTS_NAME), max_bytes)
    tick()
    try:
        config = json.loads(config_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Malformed(f"{CONFIG_NAME} is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise Malformed(f"{CONFIG_NAME} is not a JSON object")
    tensors, metadata_config = read_safetensors(weights_bytes, budget)
    if metadata_config is not None:
        _refuse(f"{WEIGHTS_NAME} carries its own config in its metadata (one model, one "
                f"config: {CONFIG_NAME})")
    tick()
    tl_config, tl_tensors = convert(config, tensors, tick)
    sha = hashlib.sha256(weights_bytes + config_bytes).hexdigest()
    return sha, tl_tensors, tl_config


MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB


def _read(path, limit: int) -> bytes:
    if not os.path.isfile(path):
        raise Malformed(f"is a directory without {os.path.basename(path)}: not a Hugging Face "
                        "save_pretrained directory")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Malformed(f"{os.path.basename(path)} is larger than the limit of {limit} bytes "
                        "(resource limit)")
    return data


# ---- the allow-list (spec/configs.md §Hugging Face) -------------------------------------
# Every field of config.json is interpreted by a conversion below, fixed at the value under
# which our semantics is the library's, or inert (no effect on the causal-LM forward pass:
# names, token ids, dropout, initialisation, generation defaults, output switches).  Any
# other field is refused, naming it: a field the checker does not understand could change
# the model (issue 18).
_INERT = frozenset("""_name_or_path transformers_version dtype torch_dtype id2label label2id
    problem_type output_attentions output_hidden_states return_dict use_return_dict
    chunk_size_feed_forward tokenizer_class prefix task_specific_params finetuning_task
    use_bfloat16 torchscript bos_token_id eos_token_id pad_token_id sep_token_id
    decoder_start_token_id is_decoder tie_encoder_decoder use_cache initializer_range
    _attn_implementation attn_implementation _attn_implementation_autoset
    max_length min_length do_sample early_stopping num_beams num_beam_groups diversity_penalty
    temperature top_k top_p typical_p repetition_penalty length_penalty no_repeat_ngram_size
    encoder_no_repeat_ngram_size bad_words_ids num_return_sequences output_scores
    return_dict_in_generate forced_bos_token_id forced_eos_token_id remove_invalid_values
    exponential_decay_length_penalty suppress_tokens begin_suppress_tokens""".split())
# name -> (predicate on the value, what is allowed); an absent field has the allowed default
_FIXED = {
    "is_encoder_decoder": (lambda v: v is False, "false"),
    "add_cross_attention": (lambda v: v is False, "false"),
    "cross_attention_hidden_size": (lambda v: v is None, "null"),
    "pruned_heads": (lambda v: v == {}, "{} (no pruned heads)"),
}
_NEOX_FIELDS = {
    "interpreted": """model_type architectures vocab_size hidden_size num_hidden_layers
        num_attention_heads intermediate_size hidden_act max_position_embeddings layer_norm_eps
        rope_parameters rotary_pct rotary_emb_base use_parallel_residual attention_bias
        tie_word_embeddings""".split(),
    "fixed": {"rope_scaling": (lambda v: v is None, "null (no rope scaling)")},
    "inert": ("hidden_dropout", "attention_dropout", "classifier_dropout"),
}
_GPT2_FIELDS = {
    "interpreted": """model_type architectures vocab_size n_embd n_layer n_head n_inner
        n_positions activation_function layer_norm_epsilon tie_word_embeddings""".split(),
    "fixed": {"scale_attn_weights": (lambda v: v is True, "true"),
              "scale_attn_by_inverse_layer_idx": (lambda v: v is False, "false")},
    # n_ctx: a 4.x alias of n_positions that the model never reads; reorder_and_upcast_attn
    # changes only the float evaluation order (same real-valued attention); summary_*: the
    # double-heads model's classification head, absent from GPT2LMHeadModel.
    "inert": ("resid_pdrop", "embd_pdrop", "attn_pdrop", "n_ctx", "reorder_and_upcast_attn",
              "summary_type", "summary_use_proj", "summary_activation",
              "summary_proj_to_labels", "summary_first_dropout"),
}


_LLAMA_FIELDS = {
    "interpreted": """model_type architectures vocab_size hidden_size intermediate_size
        num_hidden_layers num_attention_heads num_key_value_heads head_dim hidden_act
        max_position_embeddings rms_norm_eps rope_parameters rope_theta attention_bias
        tie_word_embeddings""".split(),
    # mlp_bias: transformers adds the up projection's bias inside the gate's product and
    # gives the gate a bias, TransformerLens's gated MLP adds b_in after it (no b_gate);
    # pretraining_tp > 1 splits the float matmuls (4.x), same reals but refused as unknown.
    "fixed": {"rope_scaling": (lambda v: v is None, "null (no rope scaling)"),
              "mlp_bias": (lambda v: v is False, "false (TransformerLens's gated MLP has "
                                                 "no gate bias)"),
              "pretraining_tp": (lambda v: v == 1 and type(v) is int, "1")},
    "inert": ("attention_dropout",),
}


def _check_fields(config: dict, fields: dict) -> None:
    """Refuse any field that is neither interpreted, fixed at its allowed value, nor inert."""
    fixed = {**_FIXED, **fields["fixed"]}
    known = set(fields["interpreted"]) | set(fixed) | _INERT | set(fields["inert"])
    unknown = sorted(k for k in config if k not in known)
    if unknown:
        _refuse(f"unknown config field {unknown[0]} = {shown(config[unknown[0]])} (a field "
                "the checker does not understand could change the model; spec/configs.md)")
    for name, (allowed, text) in fixed.items():
        if name in config and not allowed(config[name]):
            _refuse(f"{name} = {shown(config[name])} (supported: {text})")


def _architecture(config: dict, name: str) -> None:
    arch = config.get("architectures")
    if arch not in (None, [name]):
        _refuse(f"architectures = {arch!r:.80} (supported: [{name!r}])")


def convert(config: dict, tensors: dict, tick=lambda: None):
    """(TL config, TL tensors) of an HF GPT-NeoX, GPT-2 or Llama config and state dict."""
    kind = config.get("model_type")
    if kind == "gpt_neox":
        return _neox(config, tensors, tick)
    if kind == "gpt2":
        return _gpt2(config, tensors, tick)
    if kind == "llama":
        return _llama(config, tensors, tick)
    _refuse(f"model_type {kind!r} (supported: gpt_neox, gpt2, llama)")


def _layers(config, layers_key) -> int:
    """The number of layers, 1..MAX_LAYERS."""
    layers = config.get(layers_key)
    if type(layers) is not int or not 1 <= layers <= MAX_LAYERS:
        _refuse(f"{layers_key} = {layers!r:.40} (supported: 1..{MAX_LAYERS})")
    return layers


def _common_checks(config, layers_key, act_key, default_act):
    _layers(config, layers_key)
    act = config.get(act_key, default_act)
    if type(act) is not str or ACTIVATION_ALIASES.get(act, act) not in ACTIVATIONS:
        _refuse(f"{act_key} = {act!r:.40} (supported: "
                f"{', '.join([*ACTIVATIONS, *ACTIVATION_ALIASES])})")
    return ACTIVATION_ALIASES.get(act, act)


def _neox_rope(config) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor) as transformers 5 reads them: rope_parameters
    first, then the 4.x names rotary_emb_base / rotary_pct, then 10000 and 0.25.  Both
    spellings with different values are refused (4.x and 5.x would build different models)."""
    rope = config.get("rope_parameters")
    if rope is None:
        rope = {}
    if not isinstance(rope, dict):
        _refuse(f"rope_parameters = {shown(rope)} is not an object")
    extra = sorted(set(rope) - {"rope_type", "rope_theta", "partial_rotary_factor"})
    if extra or rope.get("rope_type", "default") != "default":
        _refuse(f"rope_parameters = {rope!r:.80} (supported: rope_type 'default', rope_theta, "
                "partial_rotary_factor; no rope scaling)")
    values = []
    for new, old, default in (("rope_theta", "rotary_emb_base", 10000.0),
                              ("partial_rotary_factor", "rotary_pct", 0.25)):
        if new in rope and old in config and rope[new] != config[old]:
            _refuse(f"rope_parameters.{new} = {rope[new]!r} but {old} = {config[old]!r}")
        values.append(_real(rope, new, config.get(old, default)))
    theta, pct = values
    if not 0 < pct <= 1:
        _refuse(f"partial_rotary_factor = {pct!r} is not in (0, 1]")
    return theta, pct


def _tensor(cls, shape, values, dtype):
    return cls(shape=tuple(shape), values=tuple(values), dtype=dtype)


def _lookup(t, tick):
    """t[key], or Malformed naming the missing key; checks the clock per tensor."""
    def get(key):
        tick()
        if key not in t:
            raise Malformed(f"Hugging Face state dict lacks {key}")
        return t[key]
    return get


def _neox(config, t, tick):
    """GPT-NeoX: fused query_key_value (rows ordered head, {q,k,v}, d_head), nn.Linear
    weights (out, in), rotary on the first rotary_dim coordinates, untied embed_out."""
    _check_fields(config, _NEOX_FIELDS)
    _architecture(config, "GPTNeoXForCausalLM")
    act = _common_checks(config, "num_hidden_layers", "hidden_act", "gelu")
    base, pct = _neox_rope(config)
    if _flag(config, "tie_word_embeddings", False):
        _refuse("tie_word_embeddings = true (embed_out would be replaced by embed_in)")
    bias = _flag(config, "attention_bias", True)
    layers = _layers(config, "num_hidden_layers")
    for layer in range(layers):
        prefix = f"gpt_neox.layers.{layer}."
        names = [prefix + "attention.query_key_value.bias", prefix + "attention.dense.bias"]
        if any((name in t) != bias for name in names):
            _refuse(f"attention_bias = {str(bias).lower()} but the attention bias tensors are "
                    f"{'missing' if bias else 'present'} (transformers would "
                    f"{'initialise them at random' if bias else 'ignore them'})")
    if "lm_head.weight" in t:
        _refuse("lm_head.weight in a GPT-NeoX file (its unembedding is embed_out.weight)")
    for name in ("hidden_size", "num_attention_heads", "vocab_size", "max_position_embeddings",
                 "intermediate_size"):
        _int(config, name)
    if not config["num_attention_heads"] or config["hidden_size"] % config["num_attention_heads"]:
        _refuse("hidden_size is not a multiple of num_attention_heads")
    eps = _real(config, "layer_norm_eps", 1e-5)
    parallel = _flag(config, "use_parallel_residual", True)
    d, n = config["hidden_size"], config["num_attention_heads"]
    h = d // n
    T = type(next(iter(t.values())))
    out = {}

    get = _lookup(t, tick)

    def linear_t(key):  # (out, in) -> (in, out)
        w = get(key)
        return _tensor(T, *_permute(w, w.shape, (1, 0)), w.dtype)

    out["embed.W_E"] = get("gpt_neox.embed_in.weight")
    for layer in range(layers):
        prefix, ours = f"gpt_neox.layers.{layer}.", f"blocks.{layer}."
        qkv = get(prefix + "attention.query_key_value.weight")  # (n·3·h, d)
        shape, vals = _permute(qkv, (n, 3, h, d), (1, 0, 3, 2))  # (3, n, d, h)
        bias = t.get(prefix + "attention.query_key_value.bias")  # absent: attention_bias=False
        for i, x in enumerate("QKV"):
            out[f"{ours}attn.W_{x}"] = _tensor(T, shape[1:], _slice0(shape, vals, i, i + 1)[1],
                                               qkv.dtype)
            if bias is not None:
                b_shape, b_vals = _permute(bias, (n, 3, h), (1, 0, 2))  # (3, n, h)
                out[f"{ours}attn.b_{x}"] = _tensor(T, b_shape[1:], _slice0(b_shape, b_vals, i,
                                                                           i + 1)[1], bias.dtype)
        dense = get(prefix + "attention.dense.weight")  # (d, n·h): out, in
        out[f"{ours}attn.W_O"] = _tensor(T, *_permute(dense, (d, n, h), (1, 2, 0)), dense.dtype)
        if prefix + "attention.dense.bias" in t:  # absent: attention_bias=False (zero)
            out[f"{ours}attn.b_O"] = t[prefix + "attention.dense.bias"]
        for norm, theirs in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm")):
            out[f"{ours}{norm}.w"] = get(prefix + theirs + ".weight")
            out[f"{ours}{norm}.b"] = get(prefix + theirs + ".bias")
        out[f"{ours}mlp.W_in"] = linear_t(prefix + "mlp.dense_h_to_4h.weight")
        out[f"{ours}mlp.b_in"] = get(prefix + "mlp.dense_h_to_4h.bias")
        out[f"{ours}mlp.W_out"] = linear_t(prefix + "mlp.dense_4h_to_h.weight")
        out[f"{ours}mlp.b_out"] = get(prefix + "mlp.dense_4h_to_h.bias")
    out["ln_final.w"] = get("gpt_neox.final_layer_norm.weight")
    out["ln_final.b"] = get("gpt_neox.final_layer_norm.bias")
    head = "embed_out.weight"
    out["unembed.W_U"] = linear_t(head)
    _no_others(t, {"gpt_neox.embed_in.weight", head, "gpt_neox.final_layer_norm.weight",
                   "gpt_neox.final_layer_norm.bias"},
               [f"gpt_neox.layers.{layer}." for layer in range(layers)], (
        "attention.query_key_value.weight", "attention.query_key_value.bias",
        "attention.dense.weight", "attention.dense.bias", "input_layernorm.weight",
        "input_layernorm.bias", "post_attention_layernorm.weight",
        "post_attention_layernorm.bias", "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias",
        "mlp.dense_4h_to_h.weight", "mlp.dense_4h_to_h.bias"), ("attention.rotary_emb.",
                                                               "attention.bias",
                                                               "attention.masked_bias"))
    tl = {"n_layers": layers, "d_model": d, "n_heads": n, "d_head": h,
          "d_vocab": config["vocab_size"], "n_ctx": config["max_position_embeddings"],
          "d_mlp": config["intermediate_size"], "act_fn": act, "normalization_type": "LN",
          "eps": float(eps), "positional_embedding_type": "rotary", "rotary_dim": int(h * pct),
          "rotary_base": base, "parallel_attn_mlp": parallel}
    return tl, out


def _gpt2(config, t, tick):
    """GPT-2: Conv1D weights (in, out), fused c_attn (d, 3·d), learned positions,
    unembedding tied to wte (or lm_head), no unembedding bias."""
    _check_fields(config, _GPT2_FIELDS)
    _architecture(config, "GPT2LMHeadModel")
    act = _common_checks(config, "n_layer", "activation_function", "gelu_new")
    for name in ("n_embd", "n_head", "vocab_size", "n_positions"):
        _int(config, name)
    if not config["n_head"] or config["n_embd"] % config["n_head"]:
        _refuse("n_embd is not a multiple of n_head")
    eps = _real(config, "layer_norm_epsilon", 1e-5)
    tied = _flag(config, "tie_word_embeddings", True)
    d, n = config["n_embd"], config["n_head"]
    h = d // n
    layers = _layers(config, "n_layer")
    T = type(next(iter(t.values())))
    out = {}

    get = _lookup(t, tick)

    out["embed.W_E"] = get("transformer.wte.weight")
    out["pos_embed.W_pos"] = get("transformer.wpe.weight")
    for layer in range(layers):
        prefix, ours = f"transformer.h.{layer}.", f"blocks.{layer}."
        c_attn = get(prefix + "attn.c_attn.weight")  # (d, 3·n·h)
        shape, vals = _permute(c_attn, (d, 3, n, h), (1, 2, 0, 3))  # (3, n, d, h)
        bias = get(prefix + "attn.c_attn.bias")
        for i, x in enumerate("QKV"):
            out[f"{ours}attn.W_{x}"] = _tensor(T, shape[1:], _slice0(shape, vals, i, i + 1)[1],
                                               c_attn.dtype)
            out[f"{ours}attn.b_{x}"] = _tensor(T, (n, h), bias.values[i * d:(i + 1) * d],
                                               bias.dtype)
        c_proj = get(prefix + "attn.c_proj.weight")  # (n·h, d)
        out[f"{ours}attn.W_O"] = _tensor(T, (n, h, d), c_proj.values, c_proj.dtype)
        out[f"{ours}attn.b_O"] = get(prefix + "attn.c_proj.bias")
        for norm, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            out[f"{ours}{norm}.w"] = get(prefix + theirs + ".weight")
            out[f"{ours}{norm}.b"] = get(prefix + theirs + ".bias")
        out[f"{ours}mlp.W_in"] = get(prefix + "mlp.c_fc.weight")
        out[f"{ours}mlp.b_in"] = get(prefix + "mlp.c_fc.bias")
        out[f"{ours}mlp.W_out"] = get(prefix + "mlp.c_proj.weight")
        out[f"{ours}mlp.b_out"] = get(prefix + "mlp.c_proj.bias")
    out["ln_final.w"] = get("transformer.ln_f.weight")
    out["ln_final.b"] = get("transformer.ln_f.bias")
    head = _gpt2_unembedding(t, tied, get)
    out["unembed.W_U"] = _tensor(T, *_permute(head, head.shape, (1, 0)), head.dtype)
    _no_others(t, {"transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight",
                   "transformer.ln_f.weight", "transformer.ln_f.bias"},
               [f"transformer.h.{layer}." for layer in range(layers)], (
        "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
        "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
        "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"), ("attn.bias",
                                                                   "attn.masked_bias"))
    inner = _int(config, "n_inner", None) if config.get("n_inner") is not None else 4 * d
    tl = {"n_layers": layers, "d_model": d, "n_heads": n, "d_head": h,
          "d_vocab": config["vocab_size"], "n_ctx": config["n_positions"], "d_mlp": inner,
          "act_fn": act, "normalization_type": "LN", "eps": float(eps),
          "positional_embedding_type": "standard"}
    return tl, out


def _gpt2_unembedding(t, tied: bool, get):
    """transformers ties lm_head to wte when tie_word_embeddings (its default): a stored
    lm_head.weight is then replaced by wte at load, so it must equal wte bit for bit."""
    wte = get("transformer.wte.weight")
    if not tied:
        return get("lm_head.weight")
    lm_head = t.get("lm_head.weight")
    if lm_head is not None and (lm_head.shape != wte.shape or lm_head.values != wte.values
                                or lm_head.dtype != wte.dtype):
        _refuse("tie_word_embeddings = true but lm_head.weight differs from "
                "transformer.wte.weight (transformers would use wte)")
    return wte


def _llama_rope(config) -> float:
    """rope_theta as transformers 5 reads it (rope_parameters, else the 4.x rope_theta,
    else 10000); rope_type must be 'default' and nothing else may be set (no scaling,
    no partial rotation: Llama rotates all head_dim coordinates)."""
    rope = config.get("rope_parameters")
    if rope is None:
        rope = {}
    if not isinstance(rope, dict):
        _refuse(f"rope_parameters = {shown(rope)} is not an object")
    if set(rope) - {"rope_type", "rope_theta"} or rope.get("rope_type", "default") != "default":
        _refuse(f"rope_parameters = {rope!r:.80} (supported: rope_type 'default' and "
                "rope_theta; no rope scaling)")
    if "rope_theta" in rope and "rope_theta" in config and rope["rope_theta"] != config[
            "rope_theta"]:
        _refuse(f"rope_parameters.rope_theta = {rope['rope_theta']!r} but rope_theta = "
                f"{config['rope_theta']!r}")
    return _real(rope, "rope_theta", config.get("rope_theta", 10000.0))


def _llama(config, t, tick):
    """Llama (LlamaForCausalLM): RMSNorm, a SiLU-gated MLP (gate_proj, up_proj, down_proj),
    rotate-half RoPE on all head_dim coordinates, nn.Linear weights (out, in), no biases
    unless attention_bias, sequential residual; TransformerLens's RMS, gated_mlp, rotary."""
    _check_fields(config, _LLAMA_FIELDS)
    _architecture(config, "LlamaForCausalLM")
    act = _common_checks(config, "num_hidden_layers", "hidden_act", "silu")
    layers = _layers(config, "num_hidden_layers")
    for name in ("hidden_size", "num_attention_heads", "vocab_size", "max_position_embeddings",
                 "intermediate_size"):
        _int(config, name)
    d, n = config["hidden_size"], config["num_attention_heads"]
    if not n or (config.get("head_dim") is None and d % n):
        _refuse("hidden_size is not a multiple of num_attention_heads")
    h = _int(config, "head_dim", d // n) if config.get("head_dim") is not None else d // n
    if h < 2 or h % 2:
        _refuse(f"head_dim = {h} (rotary needs an even head_dim >= 2)")
    kv = config.get("num_key_value_heads")
    if kv is not None and kv != n:
        _refuse(f"num_key_value_heads = {kv!r:.20} (grouped-query attention: supported only "
                f"num_key_value_heads == num_attention_heads = {n})")
    base = _llama_rope(config)
    eps = _real(config, "rms_norm_eps", 1e-6)
    tied = _flag(config, "tie_word_embeddings", False)
    bias = _flag(config, "attention_bias", False)
    T = type(next(iter(t.values())))
    out = {}
    get = _lookup(t, tick)

    def linear_t(key):  # (out, in) -> (in, out)
        w = get(key)
        return _tensor(T, *_permute(w, w.shape, (1, 0)), w.dtype)

    attn_keys = [f"self_attn.{x}_proj.bias" for x in "qkvo"]
    out["embed.W_E"] = get("model.embed_tokens.weight")
    for layer in range(layers):
        prefix, ours = f"model.layers.{layer}.", f"blocks.{layer}."
        if any((prefix + k in t) != bias for k in attn_keys):
            _refuse(f"attention_bias = {str(bias).lower()} but the attention bias tensors are "
                    f"{'missing' if bias else 'present'}")
        for x in "QKV":
            w = get(prefix + f"self_attn.{x.lower()}_proj.weight")  # (n·h, d): out, in
            out[f"{ours}attn.W_{x}"] = _tensor(T, *_permute(w, (n, h, d), (0, 2, 1)), w.dtype)
            if bias:
                b = t[prefix + f"self_attn.{x.lower()}_proj.bias"]
                out[f"{ours}attn.b_{x}"] = _tensor(T, (n, h), b.values, b.dtype)
        o = get(prefix + "self_attn.o_proj.weight")  # (d, n·h): out, in
        out[f"{ours}attn.W_O"] = _tensor(T, *_permute(o, (d, n, h), (1, 2, 0)), o.dtype)
        if bias:
            out[f"{ours}attn.b_O"] = t[prefix + "self_attn.o_proj.bias"]
        out[f"{ours}ln1.w"] = get(prefix + "input_layernorm.weight")
        out[f"{ours}ln2.w"] = get(prefix + "post_attention_layernorm.weight")
        out[f"{ours}mlp.W_in"] = linear_t(prefix + "mlp.up_proj.weight")
        out[f"{ours}mlp.W_gate"] = linear_t(prefix + "mlp.gate_proj.weight")
        out[f"{ours}mlp.W_out"] = linear_t(prefix + "mlp.down_proj.weight")
    out["ln_final.w"] = get("model.norm.weight")
    embed = get("model.embed_tokens.weight")
    if tied:
        head = t.get("lm_head.weight")
        if head is not None and (head.shape != embed.shape or head.values != embed.values
                                 or head.dtype != embed.dtype):
            _refuse("tie_word_embeddings = true but lm_head.weight differs from "
                    "model.embed_tokens.weight (transformers would use embed_tokens)")
        head = embed
    else:
        head = get("lm_head.weight")
    out["unembed.W_U"] = _tensor(T, *_permute(head, head.shape, (1, 0)), head.dtype)
    _no_others(t, {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"},
               [f"model.layers.{layer}." for layer in range(layers)],
               tuple(f"self_attn.{x}_proj.weight" for x in "qkvo") + tuple(attn_keys) + (
                   "input_layernorm.weight", "post_attention_layernorm.weight",
                   "mlp.up_proj.weight", "mlp.gate_proj.weight", "mlp.down_proj.weight"),
               ("self_attn.rotary_emb.",))
    if type(base) is float and base.is_integer():
        base = int(base)
    tl = {"n_layers": layers, "d_model": d, "n_heads": n, "d_head": h,
          "d_vocab": config["vocab_size"], "n_ctx": config["max_position_embeddings"],
          "d_mlp": config["intermediate_size"], "act_fn": act, "normalization_type": "RMS",
          "eps": float(eps), "positional_embedding_type": "rotary", "rotary_dim": h,
          "rotary_base": base, "gated_mlp": True}
    return tl, out


def _no_others(t, top: set, prefixes: list, layer: tuple, buffers: tuple) -> None:
    """Refuse tensors the conversion would silently drop (e.g. a layer beyond the config's)."""
    allowed = top | {prefix + k for prefix in prefixes for k in layer}
    extra = [k for k in t if k not in allowed and not any(k.startswith(prefix + b)
                                                          for prefix in prefixes
                                                          for b in buffers)]
    if extra:
        _refuse(f"tensors outside the model its config describes: "
                f"{', '.join(sorted(extra)[:6])}")
