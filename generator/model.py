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

from checker.modelspec import PARAMETERS, Dims, infer_dims

# Canonical name -> (TransformerLens key, whether TL stores it with a leading head axis).
TL_KEYS: dict[str, tuple[str, bool]] = {
    "W_E": ("embed.W_E", False),
    "W_pos": ("pos_embed.W_pos", False),
    "W_Q": ("blocks.0.attn.W_Q", True),
    "W_K": ("blocks.0.attn.W_K", True),
    "W_V": ("blocks.0.attn.W_V", True),
    "W_O": ("blocks.0.attn.W_O", True),
    "b_Q": ("blocks.0.attn.b_Q", True),
    "b_K": ("blocks.0.attn.b_K", True),
    "b_V": ("blocks.0.attn.b_V", True),
    "b_O": ("blocks.0.attn.b_O", False),
    "W_U": ("unembed.W_U", False),
    "b_U": ("unembed.b_U", False),
}
assert sorted(key for key, _ in TL_KEYS.values()) == sorted(n for n, _, _ in PARAMETERS)

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

    def __init__(self, dims: Dims, generator: torch.Generator | None = None):
        """Pre: dims valid.  Post: weights ~ N(0, (0.8/sqrt(d_model))^2) (TL's
        'gpt2' init), biases zero and frozen; uses `generator` if given."""
        super().__init__()
        v, k, d, h = dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
        self.dims = dims
        self.embed = _Embed(v, d)
        self.pos_embed = _PosEmbed(k, d)
        self.blocks = nn.ModuleList([_Block(k, d, h)])
        self.unembed = _Unembed(d, v)
        std = 0.8 / math.sqrt(d)
        with torch.no_grad():
            for p in self.parameters():
                if p.requires_grad:  # the frozen biases stay zero
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

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
