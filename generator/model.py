"""The Max-of-K model: a one-layer, one-head, attention-only transformer.

TransformerLens / nanoGPT conventions (paper §3): learned positional
embeddings, no LayerNorm, no MLP, causal attention with scores divided by
sqrt(d_head).  Only the logits at the last position are ever used.

Shape letters: v = d_vocab, k = n_ctx, d = d_model, h = d_head, n = batch.

Three views of the same parameters:
  * `ModelWeights`  -- immutable numpy float32 arrays with 2-D/1-D canonical
    names (the head axis of size 1 dropped); what everything else consumes.
  * TransformerLens state dict -- `ModelWeights.to_state_dict()` /
    `ModelWeights.from_state_dict()`; keys and shapes as checker.modelspec.
  * `MaxOfKTransformer` -- a torch module for training; its `state_dict()`
    is itself in TransformerLens layout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import nn

from checker.modelspec import ATTN_ONLY, Dims, Family, infer_dims, parameter_table

# Canonical name -> (TransformerLens key, whether TL stores it with a leading head axis),
# derived from the one parameter table (checker.modelspec.parameter_table).
TL_KEYS: dict[str, tuple[str, bool]] = {
    p.short: (p.key, p.pattern.split()[0] == "n") for p in parameter_table(ATTN_ONLY)}

BIASES = ("b_Q", "b_K", "b_V", "b_O", "b_U")
MASK_KEY = "blocks.0.attn.mask"
IGNORE_KEY = "blocks.0.attn.IGNORE"
IGNORE_VALUE = -1e5  # TransformerLens's masking constant (irrelevant at the last position)


def canonical_shape(name: str, dims: Dims) -> tuple[int, ...]:
    """Shape of canonical parameter `name` (head axis dropped) for `dims`."""
    key, headed = TL_KEYS[name]
    shape = dims.shape_of(key)
    return shape[1:] if headed else shape


@dataclass(frozen=True, eq=False)
class ModelWeights:
    """All parameters of one model, as read-only float32 numpy arrays.

    Invariant (checked in __post_init__): every array is float32, finite,
    read-only, and has `canonical_shape(name, dims)`.
    """

    dims: Dims
    W_E: np.ndarray  # (v, d)
    W_pos: np.ndarray  # (k, d)
    W_Q: np.ndarray  # (d, h)
    W_K: np.ndarray  # (d, h)
    W_V: np.ndarray  # (d, h)
    W_O: np.ndarray  # (h, d)
    b_Q: np.ndarray  # (h,)
    b_K: np.ndarray  # (h,)
    b_V: np.ndarray  # (h,)
    b_O: np.ndarray  # (d,)
    W_U: np.ndarray  # (d, v)
    b_U: np.ndarray  # (v,)

    def __post_init__(self) -> None:
        for name in TL_KEYS:
            arr = np.array(getattr(self, name), dtype=np.float32, copy=True, order="C")
            want = canonical_shape(name, self.dims)
            if arr.shape != want:
                raise ValueError(f"{name} has shape {arr.shape}, expected {want}")
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} contains NaN or infinite values")
            arr.flags.writeable = False  # frozen all the way down
            object.__setattr__(self, name, arr)

    @staticmethod
    def names() -> tuple[str, ...]:
        """Canonical parameter names, in TL_KEYS order."""
        return tuple(f.name for f in fields(ModelWeights) if f.name != "dims")

    def tl_parameters(self) -> dict[str, np.ndarray]:
        """Every parameter in TransformerLens layout (key -> float32 array of TL shape)."""
        return {p.key: getattr(self, p.short).reshape(self.dims.shape_of(p.key))
                for p in parameter_table(self.dims.family)}

    def equals(self, other: ModelWeights) -> bool:
        """Bitwise equality of dims and every parameter."""
        return self.dims == other.dims and all(
            np.array_equal(getattr(self, n), getattr(other, n)) for n in self.names())

    def to_state_dict(self) -> dict[str, torch.Tensor]:
        """TransformerLens state dict: PARAMETERS keys/shapes (float32), plus the
        `mask` (tril bool (k,k)) and `IGNORE` buffers TL saves."""
        sd: dict[str, torch.Tensor] = {}
        for name, (key, headed) in TL_KEYS.items():
            t = torch.from_numpy(getattr(self, name).copy())
            sd[key] = t.unsqueeze(0) if headed else t
        k = self.dims.n_ctx
        sd[MASK_KEY] = torch.tril(torch.ones(k, k, dtype=torch.bool))
        sd[IGNORE_KEY] = torch.tensor(IGNORE_VALUE)
        return sd

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, object]) -> ModelWeights:
        """Build from a TransformerLens state dict of torch tensors or numpy arrays.

        Keys and shapes are validated by checker.modelspec.infer_dims (raises
        checker.errors.Malformed); the mask/IGNORE buffers are ignored; missing
        biases become zeros.  Values are converted to float32 as given -- dtype
        policy (exactness, finiteness) belongs to generator.modelfile.
        """
        arrays = {key: _as_numpy(value) for key, value in sd.items()}
        dims = infer_dims({key: tuple(a.shape) for key, a in arrays.items()})
        kwargs = {}
        for name, (key, headed) in TL_KEYS.items():
            if key in arrays:
                a = arrays[key]
                kwargs[name] = a[0] if headed else a
            else:  # only biases are optional (infer_dims checked the required ones)
                kwargs[name] = np.zeros(canonical_shape(name, dims), dtype=np.float32)
        return cls(dims=dims, **kwargs)

    @classmethod
    def zeros(cls, dims: Dims) -> ModelWeights:
        """The all-zero model (every logit is 0: every sequence is a tie)."""
        return cls(dims=dims, **{n: np.zeros(canonical_shape(n, dims), np.float32)
                                 for n in TL_KEYS})

    def replace(self, **arrays: np.ndarray) -> ModelWeights:
        """A copy with some parameters replaced (same dims)."""
        kwargs = {n: getattr(self, n) for n in self.names()}
        kwargs.update(arrays)
        return ModelWeights(dims=self.dims, **kwargs)


def _as_numpy(value: object) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:  # numpy has no bfloat16; widening is exact
            value = value.to(torch.float32)
        return value.numpy()
    return np.asarray(value)


class _Embed(nn.Module):
    def __init__(self, v: int, d: int):
        super().__init__()
        self.W_E = nn.Parameter(torch.zeros(v, d))  # (v, d)


class _PosEmbed(nn.Module):
    def __init__(self, k: int, d: int):
        super().__init__()
        self.W_pos = nn.Parameter(torch.zeros(k, d))  # (k, d)


class _Attention(nn.Module):
    def __init__(self, k: int, d: int, h: int):
        super().__init__()
        self.W_Q = nn.Parameter(torch.zeros(1, d, h))  # (heads=1, d, h)
        self.W_K = nn.Parameter(torch.zeros(1, d, h))
        self.W_V = nn.Parameter(torch.zeros(1, d, h))
        self.W_O = nn.Parameter(torch.zeros(1, h, d))  # (1, h, d)
        # Biases exist (TL layout) but, as in the paper, are frozen at zero.
        self.b_Q = nn.Parameter(torch.zeros(1, h), requires_grad=False)
        self.b_K = nn.Parameter(torch.zeros(1, h), requires_grad=False)
        self.b_V = nn.Parameter(torch.zeros(1, h), requires_grad=False)
        self.b_O = nn.Parameter(torch.zeros(d), requires_grad=False)
        self.register_buffer("mask", torch.tril(torch.ones(k, k, dtype=torch.bool)))
        self.register_buffer("IGNORE", torch.tensor(IGNORE_VALUE))


class _Block(nn.Module):
    def __init__(self, k: int, d: int, h: int):
        super().__init__()
        self.attn = _Attention(k, d, h)


class _Unembed(nn.Module):
    def __init__(self, d: int, v: int):
        super().__init__()
        self.W_U = nn.Parameter(torch.zeros(d, v))  # (d, v)
        self.b_U = nn.Parameter(torch.zeros(v), requires_grad=False)  # (v,)


class MaxOfKTransformer(nn.Module):
    """The model as a torch module; `state_dict()` has TransformerLens keys.

    The submodule names (embed, pos_embed, blocks.0.attn, unembed) exist only
    so that the state dict keys come out exactly as TransformerLens's.
    """

    def __init__(self, dims: Dims, generator: torch.Generator | None = None,
                 init_std: float | None = None, train_biases: bool = False):
        """Pre: dims valid.  Post: weights ~ N(0, init_std²), by default (0.8/sqrt(d_model))²
        (TL's 'gpt2' init); biases zero, and frozen unless train_biases (generator/recipes.py);
        uses `generator` if given."""
        super().__init__()
        v, k, d, h = dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
        self.dims = dims
        self.embed = _Embed(v, d)
        self.pos_embed = _PosEmbed(k, d)
        self.blocks = nn.ModuleList([_Block(k, d, h)])
        self.unembed = _Unembed(d, v)
        std = 0.8 / math.sqrt(d) if init_std is None else init_std
        with torch.no_grad():
            for p in self.parameters():
                if p.requires_grad:  # the frozen biases stay zero
                    p.copy_(torch.randn(p.shape, generator=generator) * std)
        if train_biases:  # after the draw: the weights are those of the frozen-bias model
            for name, p in self.named_parameters():
                if name.rsplit(".", 1)[-1].startswith("b_"):
                    p.requires_grad_(True)

    @property
    def attn(self) -> _Attention:
        return self.blocks[0].attn

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: LongTensor (n, k) with values in [0, v).  Returns the logits at
        the last position, (n, v).

        Only the last position's query is computed: it attends to every
        position, so the causal mask never applies to it.
        """
        a = self.attn
        h0 = self.embed.W_E[tokens] + self.pos_embed.W_pos  # (n, k, d)
        q = h0[:, -1] @ a.W_Q[0] + a.b_Q[0]  # (n, h)
        key = h0 @ a.W_K[0] + a.b_K[0]  # (n, k, h)
        val = h0 @ a.W_V[0] + a.b_V[0]  # (n, k, h)
        scores = torch.einsum("nh,nkh->nk", q, key) / math.sqrt(self.dims.d_head)  # (n, k)
        attn = torch.softmax(scores, dim=-1)  # (n, k)
        z = torch.einsum("nk,nkh->nh", attn, val)  # (n, h)
        resid = h0[:, -1] + z @ a.W_O[0] + a.b_O  # (n, d)
        return resid @ self.unembed.W_U + self.unembed.b_U  # (n, v)

    def weights(self) -> ModelWeights:
        """Snapshot of the current parameters."""
        return ModelWeights.from_state_dict(self.state_dict())

    @classmethod
    def from_weights(cls, weights: ModelWeights) -> MaxOfKTransformer:
        """A module holding exactly `weights` (biases still frozen)."""
        model = cls(weights.dims)
        model.load_state_dict(weights.to_state_dict())
        return model


def logits_float64(weights: ModelWeights, tokens: np.ndarray, chunk: int = 1 << 14) -> np.ndarray:
    """Independent float64 forward pass at the last position.

    Pre: tokens is an integer array (n, k) with values in [0, v).
    Post: returns float64 (n, v) logits, computed straight from the paper's
    formulas (no precomputed circuit tables), `chunk` rows at a time.
    """
    tokens = np.asarray(tokens)
    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    if tokens.ndim != 2 or tokens.shape[1] != k:
        raise ValueError(f"tokens must have shape (n, {k}), got {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= v):
        raise ValueError(f"tokens must lie in [0, {v})")
    w = {n: getattr(weights, n).astype(np.float64) for n in ModelWeights.names()}
    scale = math.sqrt(weights.dims.d_head)
    out = np.empty((tokens.shape[0], v), dtype=np.float64)
    for s in range(0, tokens.shape[0], chunk):
        t = tokens[s:s + chunk]
        h0 = w["W_E"][t] + w["W_pos"]  # (n, k, d)
        q = h0[:, -1] @ w["W_Q"] + w["b_Q"]  # (n, h)
        key = h0 @ w["W_K"] + w["b_K"]  # (n, k, h)
        val = h0 @ w["W_V"] + w["b_V"]  # (n, k, h)
        scores = np.einsum("nh,nkh->nk", q, key) / scale  # (n, k)
        e = np.exp(scores - scores.max(axis=1, keepdims=True))  # stable softmax
        attn = e / e.sum(axis=1, keepdims=True)  # (n, k)
        z = np.einsum("nk,nkh->nh", attn, val)  # (n, h)
        resid = h0[:, -1] + z @ w["W_O"] + w["b_O"]  # (n, d)
        out[s:s + chunk] = resid @ w["W_U"] + w["b_U"]  # (n, v)
    return out


# --- Model families (LayerNorm, MLP, RoPE, several heads) ---------------------
# One parameter table for both sides: checker.modelspec.parameter_table.  The
# weights are kept in TransformerLens layout (key -> float32 array of TL shape).


@dataclass(frozen=True, eq=False)
class FamilyWeights:
    """All parameters of a model of any family, by TransformerLens key.

    Invariant: every key of parameter_table(dims.family) is present with its
    shape, float32, finite, read-only (absent biases are zeros)."""

    dims: Dims
    params: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        out = {}
        for p in parameter_table(self.dims.family):
            arr = np.array(self.params[p.key], dtype=np.float32, copy=True, order="C")
            if arr.shape != self.dims.shape_of(p.key):
                raise ValueError(f"{p.key} has shape {arr.shape}, expected "
                                 f"{self.dims.shape_of(p.key)}")
            if not np.isfinite(arr).all():
                raise ValueError(f"{p.key} contains NaN or infinite values")
            arr.flags.writeable = False
            out[p.key] = arr
        object.__setattr__(self, "params", out)

    def tl_parameters(self) -> dict[str, np.ndarray]:
        return dict(self.params)

    def equals(self, other) -> bool:
        return isinstance(other, FamilyWeights) and self.dims == other.dims and all(
            np.array_equal(self.params[k], other.params[k]) for k in self.params)

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, object], family: Family) -> FamilyWeights:
        """Validate keys/shapes with checker.modelspec.infer_dims (Malformed if
        wrong); buffers (mask, IGNORE, rotary tables) are dropped; absent biases
        become zeros."""
        arrays = {key: _as_numpy(value) for key, value in sd.items()}
        dims = infer_dims({key: tuple(a.shape) for key, a in arrays.items()}, family)
        params = {p.key: arrays[p.key] if p.key in arrays
                  else np.zeros(dims.shape_of(p.key), np.float32)
                  for p in parameter_table(family)}
        return cls(dims=dims, params=params)

    def to_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(a.copy()) for k, a in self.params.items()}

    def tl_config(self) -> dict:
        """A TransformerLens HookedTransformerConfig dict for this model (plain types)."""
        return tl_config(self.dims)


def tl_config(dims: Dims) -> dict:
    """TransformerLens config (the fields that define the family), plain types."""
    f = dims.family
    cfg = {"n_layers": f.n_layers, "n_heads": f.n_heads, "d_vocab": dims.d_vocab,
           "d_vocab_out": dims.d_vocab, "n_ctx": dims.n_ctx, "d_model": dims.d_model,
           "d_head": dims.d_head, "attn_only": f.d_mlp == 0, "d_mlp": f.d_mlp or None,
           "act_fn": f.act_fn, "normalization_type": f.normalization,
           "positional_embedding_type": f.positional, "parallel_attn_mlp": f.parallel,
           "eps": f.ln_eps or 1e-5}
    if f.gated_mlp:
        cfg["gated_mlp"] = True
    if f.positional == "rotary":
        cfg.update(rotary_dim=f.rotary_dim, rotary_base=f.rotary_base,
                   rotary_adjacent_pairs=False)
    return cfg


def rope_angles(dims: Dims) -> np.ndarray:
    """(n_ctx, rotary_dim/2) float64 angles i·base^(−2j/rotary_dim)."""
    f = dims.family
    j = np.arange(f.rotary_dim // 2, dtype=np.float64)
    theta = float(f.rotary_base) ** (-2.0 * j / f.rotary_dim)
    return np.arange(dims.n_ctx, dtype=np.float64)[:, None] * theta[None, :]


def _rotate_np(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, r: int) -> np.ndarray:
    """Rotate-half RoPE of x (..., k, h) with cos/sin (k, r/2) (TransformerLens)."""
    half = r // 2
    a, b = x[..., :half], x[..., half:r]
    out = x.copy()
    out[..., :half] = a * cos - b * sin
    out[..., half:r] = b * cos + a * sin
    return out


def _layer_norm_np(x: np.ndarray, eps: float, w=None, b=None) -> np.ndarray:
    c = x - x.mean(axis=-1, keepdims=True)
    y = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)
    return y if w is None else y * w + b


def norm_np(x: np.ndarray, family: Family, w: Mapping, which: str) -> np.ndarray:
    """The family's normalisation `which` (blocks.0.ln1, blocks.0.ln2, ln_final) in
    float64: LayerNorm (LN, LNPre) or RMSNorm (RMS, RMSPre; no centring, no bias)."""
    kind, eps = family.normalization, family.ln_eps
    if kind is None:
        return x
    if kind in ("RMS", "RMSPre"):
        y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
        return y * w[which + ".w"] if kind == "RMS" else y
    if kind == "LNPre":
        return _layer_norm_np(x, eps)
    return _layer_norm_np(x, eps, w[which + ".w"], w[which + ".b"])


def family_logits_float64(weights: FamilyWeights, tokens: np.ndarray,
                          chunk: int = 1 << 12) -> np.ndarray:
    """Independent float64 forward pass of any family at the last position.

    Straight from spec/theorem.md §2b: (n, k) tokens -> (n, v) logits.  With several
    layers every position is computed (causal attention), each layer reading the
    previous layer's residual stream."""
    dims, f = weights.dims, weights.dims.family
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] != dims.n_ctx:
        raise ValueError(f"tokens must have shape (n, {dims.n_ctx}), got {tokens.shape}")
    if f.n_layers == 1:
        return _one_layer_logits_float64(weights, tokens, chunk)
    w = {k: a.astype(np.float64) for k, a in weights.params.items()}
    k = dims.n_ctx

    def norm(x, which):
        return norm_np(x, f, w, which)

    if f.positional == "rotary":
        angles = rope_angles(dims)
        cos, sin = np.cos(angles), np.sin(angles)
    causal = np.tril(np.ones((k, k), dtype=bool))
    out = np.empty((tokens.shape[0], dims.d_vocab))
    for s in range(0, tokens.shape[0], chunk):
        t = tokens[s:s + chunk]
        x = w["embed.W_E"][t]  # (n, k, d)
        if f.positional == "standard":
            x = x + w["pos_embed.W_pos"]
        for layer in range(f.n_layers):
            b = f"blocks.{layer}."
            att = b + "attn."
            a_in = norm(x, b + "ln1")
            q = np.einsum("nkd,jdh->njkh", a_in, w[att + "W_Q"]) + w[att + "b_Q"][:, None]
            key = np.einsum("nkd,jdh->njkh", a_in, w[att + "W_K"]) + w[att + "b_K"][:, None]
            val = np.einsum("nkd,jdh->njkh", a_in, w[att + "W_V"]) + w[att + "b_V"][:, None]
            if f.positional == "rotary":
                r = f.rotary_dim
                q = _rotate_np(q, cos, sin, r)
                key = _rotate_np(key, cos, sin, r)
            scores = np.einsum("njqh,njkh->njqk", q, key) / math.sqrt(dims.d_head)
            scores = np.where(causal, scores, -np.inf)
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attn = e / e.sum(axis=-1, keepdims=True)
            z = np.einsum("njqk,njkh->njqh", attn, val)
            resid = x + np.einsum("njqh,jhd->nqd", z, w[att + "W_O"]) + w[att + "b_O"]
            if f.d_mlp:
                m_in = norm(x if f.parallel else resid, b + "ln2")
                resid = resid + mlp_np(f, w, b + "mlp.", m_in)
            x = resid
        out[s:s + chunk] = norm(x[:, -1], "ln_final") @ w["unembed.W_U"] + w["unembed.b_U"]
    return out


def _one_layer_logits_float64(weights: FamilyWeights, tokens: np.ndarray,
                          chunk: int = 1 << 12) -> np.ndarray:
    """family_logits_float64 of a one-layer model, at the last position only (the
    computation as before several layers existed: the same float64 values)."""
    dims, f = weights.dims, weights.dims.family
    w = {k: a.astype(np.float64) for k, a in weights.params.items()}
    att = "blocks.0.attn."

    def norm(x, which):
        return norm_np(x, f, w, which)

    if f.positional == "rotary":
        angles = rope_angles(dims)
        cos, sin = np.cos(angles), np.sin(angles)
    out = np.empty((tokens.shape[0], dims.d_vocab))
    for s in range(0, tokens.shape[0], chunk):
        t = tokens[s:s + chunk]
        x = w["embed.W_E"][t]  # (n, k, d)
        if f.positional == "standard":
            x = x + w["pos_embed.W_pos"]
        a_in = norm(x, "blocks.0.ln1")
        q = np.einsum("nd,jdh->njh", a_in[:, -1], w[att + "W_Q"]) + w[att + "b_Q"]
        key = np.einsum("nkd,jdh->njkh", a_in, w[att + "W_K"]) + w[att + "b_K"][:, None]
        val = np.einsum("nkd,jdh->njkh", a_in, w[att + "W_V"]) + w[att + "b_V"][:, None]
        if f.positional == "rotary":
            r = f.rotary_dim
            q = _rotate_np(q[:, :, None], cos[-1:], sin[-1:], r)[:, :, 0]
            key = _rotate_np(key, cos, sin, r)
        scores = np.einsum("njh,njkh->njk", q, key) / math.sqrt(dims.d_head)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn = e / e.sum(axis=-1, keepdims=True)
        z = np.einsum("njk,njkh->njh", attn, val)
        resid = x[:, -1] + np.einsum("njh,jhd->nd", z, w[att + "W_O"]) + w[att + "b_O"]
        if f.d_mlp:
            m_in = norm(x[:, -1] if f.parallel else resid, "blocks.0.ln2")
            if f.gated_mlp:
                resid = resid + mlp_np(f, w, "blocks.0.mlp.", m_in)
            else:  # as before gated MLPs existed (the same float64 values)
                hidden = activation_np(f.act_fn, m_in @ w["blocks.0.mlp.W_in"]
                                       + w["blocks.0.mlp.b_in"])
                resid = resid + hidden @ w["blocks.0.mlp.W_out"] + w["blocks.0.mlp.b_out"]
        out[s:s + chunk] = norm(resid, "ln_final") @ w["unembed.W_U"] + w["unembed.b_U"]
    return out


def mlp_np(f: Family, w: Mapping, prefix: str, y: np.ndarray) -> np.ndarray:
    """The MLP of the block whose keys start with `prefix`, on its normalised input y:
    φ(y W_in + b_in) W_out + b_out, or TransformerLens's gated MLP
    (φ(y W_gate) ⊙ (y W_in) + b_in) W_out + b_out."""
    if f.gated_mlp:
        hidden = activation_np(f.act_fn, y @ w[prefix + "W_gate"]) * (y @ w[prefix + "W_in"]) \
            + w[prefix + "b_in"]
    else:
        hidden = activation_np(f.act_fn, y @ w[prefix + "W_in"] + w[prefix + "b_in"])
    return hidden @ w[prefix + "W_out"] + w[prefix + "b_out"]


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def activation_np(name: str, x: np.ndarray) -> np.ndarray:
    """The MLP activation `name` in float64 (spec/rules.md §Activations)."""
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":
        from scipy.special import erf

        return x * (1 + erf(x / math.sqrt(2))) / 2
    if name in ("gelu_new", "gelu_fast"):
        k = _SQRT_2_OVER_PI if name == "gelu_new" else 0.7978845608
        return x * (1 + np.tanh(k * (x + 0.044715 * x ** 3))) / 2
    if name == "silu":
        return x / (1 + np.exp(-x))
    raise ValueError(f"unknown activation {name!r}")


def activation_torch(name: str, x: torch.Tensor) -> torch.Tensor:
    """The MLP activation `name` in torch (training; the same functions)."""
    if name == "relu":
        return torch.relu(x)
    if name == "gelu":
        return torch.nn.functional.gelu(x)
    if name in ("gelu_new", "gelu_fast"):
        k = _SQRT_2_OVER_PI if name == "gelu_new" else 0.7978845608
        return x * (1 + torch.tanh(k * (x + 0.044715 * x ** 3))) / 2
    if name == "silu":
        return torch.nn.functional.silu(x)
    raise ValueError(f"unknown activation {name!r}")


def family_weights(weights) -> FamilyWeights:
    """Any model's weights as FamilyWeights (attention-only ModelWeights included)."""
    if isinstance(weights, FamilyWeights):
        return weights
    return FamilyWeights(dims=weights.dims, params=weights.tl_parameters())


class _Node(nn.Module):
    """A plain container, so that parameters get TransformerLens key paths."""


class FamilyTransformer(nn.Module):
    """A torch module of any family for training; state_dict() has TL keys.

    Init: matrices ~ N(0, (0.8/sqrt(d_model))^2), LayerNorm w = 1, biases 0
    (frozen, as in the paper); rotation by float32 cos/sin of the exact angles."""

    def __init__(self, dims: Dims, generator: torch.Generator | None = None):
        super().__init__()
        self.dims = dims
        std = 0.8 / math.sqrt(dims.d_model)
        for p in parameter_table(dims.family):
            shape = dims.shape_of(p.key)
            if p.short.endswith(".w"):
                value, grad = torch.ones(shape), True
            elif p.short.endswith(".b") or p.short.startswith("b_"):
                value, grad = torch.zeros(shape), False
            else:
                value, grad = torch.randn(shape, generator=generator) * std, True
            self._place(p.key, nn.Parameter(value, requires_grad=grad))
        if dims.family.positional == "rotary":
            angles = torch.from_numpy(rope_angles(dims))
            self.register_buffer("_cos", torch.cos(angles).float(), persistent=False)
            self.register_buffer("_sin", torch.sin(angles).float(), persistent=False)

    def _place(self, key: str, param: nn.Parameter) -> None:
        *path, leaf = key.split(".")
        node: nn.Module = self
        for part in path:
            if part == "blocks":
                if not hasattr(node, "blocks"):
                    node.blocks = nn.ModuleList([_Node() for _ in
                                                 range(self.dims.family.n_layers)])
                node = node.blocks
            elif part.isdigit():
                node = node[int(part)]
            else:
                if not hasattr(node, part):
                    setattr(node, part, _Node())
                node = getattr(node, part)
        node.register_parameter(leaf, param)

    def p(self, key: str) -> torch.Tensor:
        return self.get_parameter(key)

    def _norm(self, x, which):
        f = self.dims.family
        if f.normalization is None:
            return x
        if f.normalization in ("RMS", "RMSPre"):
            y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + f.ln_eps)
            return y * self.p(which + ".w") if f.normalization == "RMS" else y
        c = x - x.mean(-1, keepdim=True)
        y = c / torch.sqrt((c * c).mean(-1, keepdim=True) + f.ln_eps)
        return y if f.normalization == "LNPre" else y * self.p(which + ".w") + self.p(which + ".b")

    def _rotate(self, x, cos, sin):
        r = self.dims.family.rotary_dim
        half = r // 2
        a, b = x[..., :half], x[..., half:r]
        return torch.cat([a * cos - b * sin, b * cos + a * sin, x[..., r:]], dim=-1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(n, k) tokens -> (n, v) logits at the last position (every position through
        every layer, causal attention)."""
        f, k = self.dims.family, self.dims.n_ctx
        if f.n_layers == 1:
            return self._one_layer_forward(tokens)
        x = self.p("embed.W_E")[tokens]
        if f.positional == "standard":
            x = x + self.p("pos_embed.W_pos")
        causal = torch.tril(torch.ones(k, k, dtype=torch.bool, device=x.device))
        for layer in range(f.n_layers):
            b = f"blocks.{layer}."
            att = b + "attn."
            a_in = self._norm(x, b + "ln1")
            q, key, val = (torch.einsum("nkd,jdh->njkh", a_in, self.p(att + "W_" + c))
                           + self.p(att + "b_" + c)[:, None] for c in "QKV")
            if f.positional == "rotary":
                q = self._rotate(q, self._cos, self._sin)
                key = self._rotate(key, self._cos, self._sin)
            scores = torch.einsum("njqh,njkh->njqk", q, key) / math.sqrt(self.dims.d_head)
            scores = scores.masked_fill(~causal, float("-inf"))
            z = torch.einsum("njqk,njkh->njqh", torch.softmax(scores, -1), val)
            resid = x + torch.einsum("njqh,jhd->nqd", z, self.p(att + "W_O")) \
                + self.p(att + "b_O")
            if f.d_mlp:
                y = self._norm(x if f.parallel else resid, b + "ln2")
                resid = resid + self._mlp(y, b + "mlp.")
            x = resid
        return self._norm(x[:, -1], "ln_final") @ self.p("unembed.W_U") + self.p("unembed.b_U")

    def _one_layer_forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """forward of a one-layer model, the last position only (as before layers)."""
        f, att = self.dims.family, "blocks.0.attn."
        x = self.p("embed.W_E")[tokens]
        if f.positional == "standard":
            x = x + self.p("pos_embed.W_pos")
        a_in = self._norm(x, "blocks.0.ln1")
        q = torch.einsum("nd,jdh->njh", a_in[:, -1], self.p(att + "W_Q")) + self.p(att + "b_Q")
        key = torch.einsum("nkd,jdh->njkh", a_in, self.p(att + "W_K")) \
            + self.p(att + "b_K")[:, None]
        val = torch.einsum("nkd,jdh->njkh", a_in, self.p(att + "W_V")) \
            + self.p(att + "b_V")[:, None]
        if f.positional == "rotary":
            q = self._rotate(q, self._cos[-1], self._sin[-1])
            key = self._rotate(key, self._cos, self._sin)
        scores = torch.einsum("njh,njkh->njk", q, key) / math.sqrt(self.dims.d_head)
        z = torch.einsum("njk,njkh->njh", torch.softmax(scores, -1), val)
        resid = x[:, -1] + torch.einsum("njh,jhd->nd", z, self.p(att + "W_O")) \
            + self.p(att + "b_O")
        if f.d_mlp:
            m_in = self._norm(x[:, -1] if f.parallel else resid, "blocks.0.ln2")
            if f.gated_mlp:
                resid = resid + self._mlp(m_in, "blocks.0.mlp.")
            else:  # as before gated MLPs existed (the same float32 values)
                hidden = activation_torch(f.act_fn, m_in @ self.p("blocks.0.mlp.W_in")
                                          + self.p("blocks.0.mlp.b_in"))
                resid = resid + hidden @ self.p("blocks.0.mlp.W_out") \
                    + self.p("blocks.0.mlp.b_out")
        return self._norm(resid, "ln_final") @ self.p("unembed.W_U") + self.p("unembed.b_U")

    def _mlp(self, y: torch.Tensor, mlp: str) -> torch.Tensor:
        """The MLP (keys starting with `mlp`) on its normalised input y (mlp_np)."""
        f = self.dims.family
        if f.gated_mlp:
            hidden = activation_torch(f.act_fn, y @ self.p(mlp + "W_gate")) \
                * (y @ self.p(mlp + "W_in")) + self.p(mlp + "b_in")
        else:
            hidden = activation_torch(f.act_fn, y @ self.p(mlp + "W_in") + self.p(mlp + "b_in"))
        return hidden @ self.p(mlp + "W_out") + self.p(mlp + "b_out")

    def weights(self) -> FamilyWeights:
        return FamilyWeights.from_state_dict(self.state_dict(), self.dims.family)
