"""Which model a TransformerLens config means: the allow-list binding (spec/configs.md).

Trusted.  A model file may carry a TransformerLens `HookedTransformerConfig` as a dict
(`cfg.to_dict()`).  TransformerLens runs a different forward pass for many of its fields
(a soft cap on the attention scores, NTK or YaRN RoPE scaling, QK norms, ...), so a field
the checker does not understand can make a certificate speak of another model than the
one TransformerLens runs.  Hence every field is in exactly one of four classes:

  interpreted  read here into the family and the sizes (checked against the tensors);
  inert        known not to change HookedTransformer's forward pass (names, hooks, init);
  fixed        allowed only at the value under which TransformerLens's semantics is ours;
  subordinate  read by TransformerLens only when a fixed field is at another value, so
               inert here (e.g. the NTK factors while use_NTK_by_parts_rope is False).

A field in no class is refused, naming it.  A missing field takes TransformerLens's
default (as `HookedTransformerConfig(**cfg)` would), except the few that must be stated
(REQUIRED).  Types are strict (config_fields.py): 2.0 is not an integer, 1 is not a flag.
"""

from __future__ import annotations

import math

from .config_fields import Fields, is_real, of, shown
from .modelspec import (
    ACTIVATION_ALIASES,
    ACTIVATIONS,
    MAX_LAYERS,
    MAX_ROTARY_CTX,
    NORMALIZATIONS,
    POSITIONALS,
    Family,
)

# ---- the table (spec/configs.md §TransformerLens lists the same, with reasons) ------------

INTERPRETED = ("n_layers", "d_model", "d_head", "n_heads", "n_ctx", "d_vocab", "d_vocab_out",
               "d_mlp", "attn_only", "act_fn", "normalization_type", "eps",
               "positional_embedding_type", "rotary_dim", "rotary_base", "parallel_attn_mlp",
               "gated_mlp")
REQUIRED = ("n_layers", "d_model", "d_head", "n_ctx", "d_vocab", "normalization_type")


_BOOL, _INT_OR_NONE, _STR_OR_NONE = of(bool), of(int, type(None)), of(str, type(None))
# name -> (predicate for a well-typed value, its type): inert fields still have their types,
# since TransformerLens refuses some ill-typed ones (a seed of inf) and a file it cannot
# run should not be accepted as its model.
INERT = {
    "model_name": (of(str), "a name"), "device": (_STR_OR_NONE, "a name or None"),
    "dtype": (lambda v: v in ("torch.float32", "torch.float64", "torch.float16",
                              "torch.bfloat16"), "a torch float dtype"),
    "seed": (_INT_OR_NONE, "an integer or None"), "n_devices": (of(int), "an integer"),
    "n_params": (_INT_OR_NONE, "an integer"), "init_mode": (of(str), "a name"),
    "init_weights": (_BOOL, "a flag"), "initializer_range": (of(int, float), "a number"),
    "use_attn_result": (_BOOL, "a flag"), "use_split_qkv_input": (_BOOL, "a flag"),
    "use_hook_mlp_in": (_BOOL, "a flag"), "use_attn_in": (_BOOL, "a flag"),
    "use_hook_tokens": (_BOOL, "a flag"), "default_prepend_bos": (_BOOL, "a flag"),
    "tokenizer_name": (_STR_OR_NONE, "a name or None"),
    "tokenizer_prepends_bos": (of(bool, type(None)), "a flag or None"),
    "from_checkpoint": (_BOOL, "a flag"), "checkpoint_index": (_INT_OR_NONE, "an integer"),
    "checkpoint_label_type": (_STR_OR_NONE, "a name or None"),
    "checkpoint_value": (_INT_OR_NONE, "an integer or None"),
    "trust_remote_code": (_BOOL, "a flag"), "layer_norm_folding": (_BOOL, "a flag"),
    "tie_word_embeddings": (_BOOL, "a flag"),
    "decoder_start_token_id": (_INT_OR_NONE, "an integer or None"),
}


def _off(value) -> bool:
    return value is False


def _none(value) -> bool:
    return value is None


def _no_cap(value) -> bool:  # TransformerLens: a cap is active only when > 0
    return value is None or (is_real(value) and value <= 0)


# name -> (TransformerLens default, predicate for an allowed value, what is allowed)
FIXED = {
    "uses_rms_norm": (False, _off, "False"),
    # final_rms: read by HookedTransformer only with LN/LNPre (see _check_fixed)
    "final_rms": (False, _off, "False"),
    "use_normalization_before_and_after": (False, _off, "False"),
    "post_embedding_ln": (False, _off, "False"),
    "use_qk_norm": (False, _off, "False"),
    "use_local_attn": (False, _off, "False"),
    "use_logn_attn": (False, _off, "False"),
    "use_dynamic_ntk_rope": (False, _off, "False"),
    "use_NTK_by_parts_rope": (False, _off, "False"),
    "use_yarn_rope": (False, _off, "False"),
    "use_attention_sinks": (False, _off, "False"),
    "rotary_adjacent_pairs": (False, _off, "False (rotate-half pairing)"),
    "scale_attn_by_inverse_layer_idx": (False, _off, "False"),
    "load_in_4bit": (False, _off, "False"),
    "use_attn_scale": (True, lambda v: v is True, "True"),
    "attn_scores_soft_cap": (-1.0, _no_cap, "<= 0 (no soft cap)"),
    "output_logits_soft_cap": (-1.0, _no_cap, "<= 0 (no soft cap)"),
    "rotary_scaling_factor": (1.0, lambda v: is_real(v) and v == 1, "1.0"),
    "clip_qkv": (None, _none, "None"),
    "num_experts": (None, _none, "None"),
    "quantization_method": (None, _none, "None"),
    "attention_dir": ("causal", lambda v: v == "causal", "'causal'"),
    "original_architecture": (None, lambda v: v in (None, "GPT2LMHeadModel",
                                                     "GPTNeoXForCausalLM", "LlamaForCausalLM"),
                              "None, 'GPT2LMHeadModel', 'GPTNeoXForCausalLM' or "
                              "'LlamaForCausalLM'"),
    # attn_scale and n_key_value_heads depend on other fields: see _check_fixed and _family.
    "attn_scale": (-1.0, lambda v: is_real(v), "-1 or sqrt(d_head)"),
    "n_key_value_heads": (None, lambda v: v is None or type(v) is int, "None or n_heads"),
}
# name -> (the fixed field whose required value makes TransformerLens ignore it, predicate
# for a well-typed value): inert here, but typed as TransformerLens types them.
_REAL, _REAL_OR_NONE = of(int, float), of(int, float, type(None))
SUBORDINATE = {
    **{f"NTK_{x}": ("use_NTK_by_parts_rope", _REAL) for x in (
        "by_parts_low_freq_factor", "by_parts_high_freq_factor", "by_parts_factor")},
    "NTK_original_ctx_len": ("use_NTK_by_parts_rope", of(int)),
    **{f"yarn_{x}": ("use_yarn_rope", _REAL) for x in (
        "factor", "attention_factor", "beta_fast", "beta_slow")},
    "yarn_original_max_position_embeddings": ("use_yarn_rope", of(int)),
    "yarn_truncate": ("use_yarn_rope", _BOOL),
    "yarn_global_attn_only": ("use_yarn_rope", _BOOL),
    "window_size": ("use_local_attn", _INT_OR_NONE),
    "attn_types": ("use_local_attn", lambda v: v is None or (
        type(v) is list and all(x in ("global", "local") for x in v))),
    "rotary_base_local": ("use_local_attn", _REAL_OR_NONE),
    "train_seq_length": ("use_logn_attn and use_dynamic_ntk_rope", _INT_OR_NONE),
    "experts_per_token": ("num_experts", _INT_OR_NONE),
    "norm_topk_prob": ("num_experts", _BOOL),
    "ungroup_grouped_query_attention": ("n_key_value_heads", _BOOL),
    "relative_attention_max_distance": ("positional_embedding_type", _INT_OR_NONE),
    "relative_attention_num_buckets": ("positional_embedding_type", _INT_OR_NONE),
}
KNOWN = frozenset(INTERPRETED) | frozenset(INERT) | frozenset(FIXED) | frozenset(SUBORDINATE)


# ---- strict types (config_fields.py says why) ---------------------------------------------

_FIELDS = Fields("model config")
_refuse, _int, _real, _flag = _FIELDS.refuse, _FIELDS.integer, _FIELDS.real, _FIELDS.flag


def _choice(cfg: dict, name: str, default, allowed: tuple):
    """One of `allowed` (names, or None), of type str or None."""
    value = cfg.get(name, default)
    if value not in allowed or type(value) not in (str, type(None)):
        _refuse(f"{name} = {shown(value)} (supported: {', '.join(map(repr, allowed))})")
    return value


# ---- the binding --------------------------------------------------------------------------

def family_from_tl_config(cfg: dict, shapes: dict | None = None,
                          n_ctx: int | None = None) -> Family:
    """The family a TransformerLens config (a dict, e.g. cfg.to_dict()) describes, on
    sequences of length `n_ctx` (default: the config's n_ctx, the model's capacity).

    Pre: `cfg` holds plain values (modelfile._config checked that).  With `shapes`
    (state dict key -> shape), every size the config states must equal the tensors'.
    A certified length below the capacity is allowed (spec/theorem.md §1: only positions
    0..n_ctx-1 act on such sequences); above it, refused.
    Post: the config's every field is interpreted, inert, at its fixed value, or
    subordinate to a fixed field at its required value; else Malformed names the field.
    """
    if not isinstance(cfg, dict):
        _refuse("not a dictionary")
    unknown = sorted(k for k in cfg if k not in KNOWN)
    if unknown:
        _refuse(f"unknown field {unknown[0]} = {shown(cfg[unknown[0]])} (a field the "
                "checker does not understand could change the forward pass; "
                "see spec/configs.md)")
    missing = [k for k in REQUIRED if k not in cfg]
    if missing:
        _refuse(f"the config does not state {', '.join(missing)}")
    _check_inert(cfg)
    _check_fixed(cfg)
    family = _family(cfg, n_ctx)
    if shapes is not None:
        _check_sizes(cfg, family, shapes)
    return family


def _check_inert(cfg: dict) -> None:
    """Inert and subordinate fields change nothing, but must have their types."""
    for name, (well_typed, text) in INERT.items():
        if name in cfg and not well_typed(cfg[name]):
            _refuse(f"{name} = {shown(cfg[name])} is not {text}")
    for name, (_, well_typed) in SUBORDINATE.items():
        if name in cfg and not well_typed(cfg[name]):
            _refuse(f"{name} = {shown(cfg[name])} does not have its TransformerLens type")


def _check_fixed(cfg: dict) -> None:
    for name, (default, allowed, text) in FIXED.items():
        value = cfg.get(name, default)
        if name == "final_rms" and cfg.get("normalization_type") in ("RMS", "RMSPre", None):
            # HookedTransformer reads final_rms only with LN/LNPre (its ln_final is RMS or
            # RMSPre or absent otherwise): TransformerLens's Llama configs set it true
            _flag(cfg, name, default)
            continue
        if not allowed(value):
            _refuse(f"{name} = {shown(value)} (our semantics is TransformerLens's only "
                    f"for {text})")
    d_head = cfg.get("d_head")
    scale = cfg.get("attn_scale", -1.0)
    if scale != -1 and (type(d_head) is not int or d_head < 1 or scale != math.sqrt(d_head)):
        _refuse(f"attn_scale = {shown(scale)} (supported: -1 or sqrt(d_head) = "
                f"{math.sqrt(d_head) if type(d_head) is int and d_head > 0 else '?'})")


def _family(cfg: dict, certified_n_ctx: int | None) -> Family:
    n_layers = _int(cfg, "n_layers")
    if not 1 <= n_layers <= MAX_LAYERS:
        _refuse(f"n_layers = {n_layers} (supported: 1..{MAX_LAYERS})")
    d_model, d_head = _int(cfg, "d_model"), _int(cfg, "d_head")
    if d_model < 1 or d_head < 1:
        _refuse(f"d_model = {d_model}, d_head = {d_head} must be positive")
    n_heads = _int(cfg, "n_heads", -1)
    if n_heads == -1:  # TransformerLens: n_heads = d_model // d_head
        n_heads = d_model // d_head
    kv = cfg.get("n_key_value_heads")
    if kv is not None and kv != n_heads:
        _refuse(f"n_key_value_heads = {shown(kv)} (grouped-query attention: "
                f"supported only n_key_value_heads == n_heads = {n_heads})")
    d_vocab = _int(cfg, "d_vocab")
    d_vocab_out = _int(cfg, "d_vocab_out", -1)
    if d_vocab_out not in (-1, d_vocab):
        _refuse(f"d_vocab_out = {d_vocab_out} (supported: -1 or d_vocab = {d_vocab})")
    norm = _choice(cfg, "normalization_type", None, NORMALIZATIONS)
    eps = _real(cfg, "eps", 1e-5)
    attn_only = _flag(cfg, "attn_only", False)
    d_mlp = _int(cfg, "d_mlp", None, optional=True)  # read by TransformerLens only with an MLP
    act = _FIELDS.get(cfg, "act_fn", None, _STR_OR_NONE, "a name")
    if attn_only:
        d_mlp = 0
    else:
        d_mlp = 4 * d_model if d_mlp is None else d_mlp  # TransformerLens's default
        if d_mlp < 1:
            _refuse(f"d_mlp = {d_mlp} with attn_only = False (an MLP needs d_mlp >= 1)")
        act = ACTIVATION_ALIASES.get(act, act)
        if act not in ACTIVATIONS:
            _refuse(f"act_fn = {shown(cfg.get('act_fn'))} (supported: "
                    f"{', '.join([*ACTIVATIONS, *ACTIVATION_ALIASES])})")
    gated = _flag(cfg, "gated_mlp", False)  # read by TransformerLens only with an MLP
    pos = _choice(cfg, "positional_embedding_type", "standard", POSITIONALS)
    parallel = _flag(cfg, "parallel_attn_mlp", False)
    rotary = pos == "rotary"
    capacity = _int(cfg, "n_ctx")
    n_ctx = capacity if certified_n_ctx is None else certified_n_ctx
    if not 2 <= n_ctx <= capacity:
        _refuse(f"sequences of length {n_ctx}: the model's n_ctx is {capacity} (certified "
                f"lengths: 2..{capacity})")
    if rotary and n_ctx > MAX_ROTARY_CTX:
        _refuse(f"n_ctx = {n_ctx}: a rotary model is certified on sequences of at most "
                f"{MAX_ROTARY_CTX} positions (choose a shorter length: gen-cert --n-ctx)")
    rotary_dim = _int(cfg, "rotary_dim", None, optional=True)
    base = _real(cfg, "rotary_base", 10000)
    if rotary and base != int(base):
        _refuse(f"rotary_base = {base!r} (an integer base is supported)")
    family = Family(
        normalization=norm, n_heads=n_heads, d_mlp=d_mlp,
        act_fn=act if d_mlp else "relu", positional=pos,
        n_ctx=n_ctx if rotary else 0,
        rotary_dim=(d_head if rotary_dim is None else rotary_dim) if rotary else 0,
        rotary_base=int(base) if rotary else 0,
        ln_eps=float(eps) if norm else 0.0, parallel=parallel and d_mlp > 0,
        n_layers=n_layers, gated_mlp=gated and d_mlp > 0)
    family.validate()
    return family


def _check_sizes(cfg: dict, family: Family, shapes: dict) -> None:
    """Every size the config states equals the tensors' (TransformerLens would refuse or
    silently reshape otherwise); read only where the tensor exists."""
    def dim(key: str, axis: int):
        shape = shapes.get(key)
        return shape[axis] if shape is not None and len(shape) > axis else None

    d_vocab = cfg["d_vocab"]
    stated = [("d_vocab", d_vocab, dim("embed.W_E", 0)),
              ("d_model", cfg["d_model"], dim("embed.W_E", 1)),
              ("d_head", cfg["d_head"], dim("blocks.0.attn.W_Q", 2)),
              ("n_heads", family.n_heads, dim("blocks.0.attn.W_Q", 0)),
              ("d_vocab_out", d_vocab, dim("unembed.W_U", 1))]
    if family.positional == "standard":
        stated.append(("n_ctx", cfg["n_ctx"], dim("pos_embed.W_pos", 0)))
    if family.d_mlp:
        stated.append(("d_mlp", family.d_mlp, dim("blocks.0.mlp.W_in", 1)))
    if family.d_mlp and family.gated_mlp:
        stated.append(("d_mlp", family.d_mlp, dim("blocks.0.mlp.W_gate", 1)))
    for name, value, actual in stated:
        if actual is not None and value != actual:
            _refuse(f"{name} = {value} but the tensors have {actual}")
    layers = {int(key.split(".")[1]) for key in shapes
              if key.startswith("blocks.") and key.split(".")[1].isdigit()}
    if layers and layers != set(range(family.n_layers)):
        _refuse(f"n_layers = {family.n_layers} but the tensors have blocks "
                f"{sorted(layers)[:8]}")
