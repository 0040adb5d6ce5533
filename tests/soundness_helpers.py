"""What the enumeration soundness tests share: small models (trained, random,
with biases or strong positions), certifying one through gen-cert, and the set
of sequences a cubic certificate's good sets cover (spec/rules.md §cubic).

Each test keeps its own cases; the weights a given (v, k, d, seed, ...) makes
are the same as before these helpers were shared, so the seeds found by
searches (noted beside the cases) still select the same models.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import torch

from checker.certificate import CertificateChecker, Limits
from checker.modelspec import Dims
from generator.cli import generate
from generator.model import MaxOfKTransformer
from generator.modelfile import save_model
from generator.train import TrainConfig, train

BIASES = ("b_Q", "b_K", "b_V", "b_O", "b_U")


def trained(v, k, d, steps, seed):
    """A model trained by the paper's recipe for `steps` steps (d_head = d)."""
    config = TrainConfig(d_vocab=v, n_ctx=k, d_model=d, d_head=d, steps=steps, seed=seed)
    return train(config, progress=False).weights()


def random_weights(v, k, d, seed, bias_scale=0.0, pos_scale=1.0):
    """A randomly initialised model; optionally random biases (N(0, bias_scale²),
    drawn from numpy's generator seeded by `seed`) and W_pos scaled by pos_scale."""
    g = torch.Generator().manual_seed(seed)
    weights = MaxOfKTransformer(Dims(v, k, d, d), generator=g).weights()
    if bias_scale:
        rng = np.random.default_rng(seed)
        weights = weights.replace(**{
            name: (rng.standard_normal(getattr(weights, name).shape) * bias_scale)
            .astype(np.float32) for name in BIASES})
    if pos_scale != 1.0:
        weights = weights.replace(W_pos=weights.W_pos * np.float32(pos_scale))
    return weights


def random_scaled(seed):
    """Random model with rescaled embeddings: strong positional attention, so placements
    matter (found by a search where the lower placement bound of the cubic rule is needed
    for soundness; seeds 90, 91, 109).  Shared by the cubic and cubic_mix tests."""
    rng = np.random.default_rng(seed)
    v, k = int(rng.integers(3, 7)), int(rng.integers(3, 5))
    g = torch.Generator().manual_seed(seed)
    w = MaxOfKTransformer(Dims(v, k, 4, 4), generator=g).weights()
    return w.replace(W_pos=w.W_pos * float(rng.uniform(1, 8)),
                     W_E=w.W_E * float(rng.uniform(0.5, 3)),
                     W_U=w.W_U * float(rng.uniform(0.5, 3)))

def certify(weights, tmp_path, strategy):
    """Save `weights`, run gen-cert's `strategy` on them: (model path, cert path, lines)."""
    path = tmp_path / "model.pt"
    save_model(path, weights, None)
    lines, _ = generate(str(path), strategy)
    cert = tmp_path / "cert.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    return path, cert, lines


def rule_inputs(lines):
    """(dims, the rule's input matrices, its hints) of a certificate whose last two
    lines are its rule line and qed, as the checker replays them."""
    checker = CertificateChecker(Limits())
    for text in lines[:-2]:
        checker.feed(text)
    rule = json.loads(lines[-2])
    mats = {name: checker.values[i].matrix for name, i in rule["inputs"].items()}
    return checker.dims, mats, rule["hints"]


def cubic_covered(good_entries, v, k):
    """The set of sequences the cubic good sets cover, from the hints alone
    (spec/rules.md §cubic, Theorem): query q, max m, the non-max tokens at
    non-query positions all in the good set of (m, q, their number)."""
    good = {(m, q, c): mask for m, q, c, mask, *_ in good_entries}
    out = set()
    for seq in itertools.product(range(v), repeat=k):
        q, m = seq[-1], max(seq)
        lower = [t for t in seq[:-1] if t < m]
        mask = good.get((m, q, len(lower)), 0)
        if (not lower and mask) or (lower and all(mask >> t & 1 for t in lower)):
            out.add(seq)
    return out


def accepted_inputs(lines):
    """(dims, the rule's input matrices, its hints) of a certificate the checker
    accepts in full (rule line second to last), else None."""
    from checker.arith import MPMATH
    from checker.errors import Malformed, Rejected

    checker = CertificateChecker(Limits())
    try:
        for text in lines:
            checker.feed(text)
        checker.finish()
    except (Rejected, Malformed):
        return None
    line = json.loads(lines[-2])
    mats = {n: checker.values[i].rows(MPMATH) for n, i in line["inputs"].items()}
    return checker.dims, mats, line["hints"]


def subcubic_covered(gaps, v, k):
    """The sequences a subcubic_gap table covers (spec/rules.md §subcubic_gap), for
    gaps mapping (max m, query q, count c) to the entry's (g, h) or, for a two-gap
    entry, (g, h, g2, h2): every non-max token ≤ m − g, and for a two-gap entry at
    most one of them > m − g2 (Lemma 6b)."""
    out = set()
    for seq in itertools.product(range(v), repeat=k):
        q, m = seq[-1], max(seq)
        lower = [t for t in seq[:-1] if t < m]
        entry = gaps.get((m, q, len(lower)))
        if entry is None or not all(t <= m - entry[0] for t in lower):
            continue
        if len(entry) == 4 and sum(t > m - entry[2] for t in lower) > 1:
            continue
        out.add(seq)
    return out


# --- float32 evaluations in several summation orders (spec/theorem.md §2c) -------------------

F32 = np.float32
ATTN_ONLY_NAMES = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O",
                   "W_U", "b_U")


def float32_dot(x: np.ndarray, m: np.ndarray, reverse: bool = False) -> np.ndarray:
    """x (..., n) @ m (n, c) in float32, accumulating one term at a time, left to right
    (or reversed), each partial sum rounded to float32."""
    order = range(x.shape[-1] - 1, -1, -1) if reverse else range(x.shape[-1])
    out = np.zeros(x.shape[:-1] + (m.shape[1],), dtype=F32)
    for i in order:
        out = (out + x[..., i:i + 1] * m[i]).astype(F32)
    return out


def float32_torch_permuted(w, tokens: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """float32 logits at the last position of an attention-only model (torch) with its
    residual coordinates permuted by perm: the same real function, every sum over d_model
    in another order."""
    from generator.model import ModelWeights

    p = {n: getattr(w, n) for n in ATTN_ONLY_NAMES}
    for n in ("W_E", "W_pos", "W_O"):
        p[n] = p[n][:, perm]
    for n in ("W_Q", "W_K", "W_V", "W_U"):
        p[n] = p[n][perm]
    p["b_O"] = p["b_O"][perm]
    model = MaxOfKTransformer.from_weights(ModelWeights(dims=w.dims, **p))
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).numpy()


def float32_numpy(w, tokens: np.ndarray, reverse: bool, reciprocal: bool = False) -> np.ndarray:
    """A plain numpy float32 forward pass of an attention-only model, every dot product
    accumulated one term at a time (left to right or reversed, float32_dot); the softmax
    as e/S, or as e·fl(1/S) with reciprocal."""
    x = (w.W_E[tokens] + w.W_pos).astype(F32)
    q = (float32_dot(x[:, -1], w.W_Q, reverse) + w.b_Q).astype(F32)
    key = (float32_dot(x, w.W_K, reverse) + w.b_K).astype(F32)
    val = (float32_dot(x, w.W_V, reverse) + w.b_V).astype(F32)
    s = (np.einsum("nh,nkh->nk", q, key).astype(F32) / F32(np.sqrt(w.dims.d_head))).astype(F32)
    e = np.exp(s - s.max(axis=1, keepdims=True)).astype(F32)
    total = e.sum(axis=1, keepdims=True, dtype=F32)
    a = (e * (F32(1) / total)).astype(F32) if reciprocal else (e / total).astype(F32)
    z = np.einsum("nk,nkh->nh", a, val).astype(F32)
    r = (x[:, -1] + float32_dot(z, w.W_O, reverse) + w.b_O).astype(F32)
    return (float32_dot(r, w.W_U, reverse) + w.b_U).astype(F32)


def float32_evaluations(w, tokens: np.ndarray, seed: int = 0,
                        reciprocal_when_reversed: bool = True) -> list:
    """Several float32 evaluations (logits at the last position) of an attention-only model
    on `tokens` (n, n_ctx): torch with the residual coordinates in three orders (identity, a
    random permutation from `seed`, reversed) and numpy left to right and reversed (the
    reversed one with the softmax as e·fl(1/S) unless reciprocal_when_reversed is False)."""
    d = w.dims.d_model
    g = np.random.default_rng(seed)
    out = [float32_torch_permuted(w, tokens, perm)
           for perm in (np.arange(d), g.permutation(d), np.arange(d)[::-1].copy())]
    out += [float32_numpy(w, tokens, reverse, reverse and reciprocal_when_reversed)
            for reverse in (False, True)]
    return out


def permute_residual(params: dict, perm: np.ndarray) -> dict:
    """A family model's parameters with its d_model coordinates permuted (the same real
    model; every sum over d_model in another order): every tensor axis of length d_model
    that indexes the residual stream is permuted."""
    out = {}
    for key, v in params.items():
        leaf = key.rsplit(".", 1)[-1]
        if leaf in ("W_E", "W_pos", "b_O", "b_out") or key.endswith((".w", ".b")):
            v = v[..., perm]  # (.., d) last axis
        elif leaf in ("W_Q", "W_K", "W_V"):
            v = v[:, perm, :]
        elif leaf == "W_O":
            v = v[..., perm]
        elif leaf in ("W_in", "W_gate", "W_U"):
            v = v[perm]
        elif leaf == "W_out":
            v = v[:, perm]
        out[key] = np.ascontiguousarray(v)
    return out


def family_truncated(weights, length: int):
    """A one-layer family model with n_ctx = length: its last position is position
    length − 1 of the original on a sequence of that length (causal)."""
    from dataclasses import replace

    from generator.model import FamilyWeights

    d, f = weights.dims, weights.dims.family
    fam = replace(f, n_ctx=length) if f.positional == "rotary" else f
    params = {k: (v[:length] if k == "pos_embed.W_pos" else v)
              for k, v in weights.params.items()}
    return FamilyWeights(dims=Dims(d.d_vocab, length, d.d_model, d.d_head, family=fam),
                         params=params)


def family_float32_torch(weights, tokens: np.ndarray, perm=None) -> np.ndarray:
    """float32 logits at the last position of a one-layer family model (torch,
    FamilyTransformer), its residual coordinates permuted by perm (None: as is)."""
    from generator.model import FamilyTransformer

    w = family_truncated(weights, tokens.shape[1])
    params = {k: np.array(v) for k, v in w.params.items()}
    if perm is not None:
        params = permute_residual(params, perm)
    model = FamilyTransformer(w.dims)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()}, strict=True)
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(tokens, dtype=np.int64))).numpy()


def _f32_sum(x: np.ndarray, reverse: bool) -> np.ndarray:
    """Σ over the last axis in float32, one term at a time (left to right or reversed)."""
    order = range(x.shape[-1] - 1, -1, -1) if reverse else range(x.shape[-1])
    out = np.zeros(x.shape[:-1], dtype=F32)
    for i in order:
        out = (out + x[..., i]).astype(F32)
    return out


def float32_layer_norm(x: np.ndarray, eps: float, w=None, b=None, reverse: bool = False):
    """LayerNorm over the last axis in float32 (LNPre when w is None): the mean, the centred
    vector, the variance, the scale and the output each rounded to float32, every sum one
    term at a time (_f32_sum, left to right or reversed)."""
    d = x.shape[-1]
    mean = (_f32_sum(x, reverse) / F32(d)).astype(F32)
    c = (x - mean[..., None]).astype(F32)
    var = (_f32_sum((c * c).astype(F32), reverse) / F32(d)).astype(F32)
    y = (c / np.sqrt((var + F32(eps)).astype(F32))[..., None]).astype(F32)
    if w is None:
        return y
    return (y * w + b).astype(F32)


def float32_norm(f, p: dict, x: np.ndarray, which: str, reverse: bool) -> np.ndarray:
    """The family's normalisation `which` (e.g. "blocks.0.ln1", "ln_final") in float32:
    none, LNPre, or LayerNorm with the gains and biases p[which + ".w"], p[which + ".b"]."""
    if f.normalization is None:
        return x
    if f.normalization == "LNPre":
        return float32_layer_norm(x, f.ln_eps, reverse=reverse)
    return float32_layer_norm(x, f.ln_eps, p[which + ".w"], p[which + ".b"], reverse)


def float32_rotate(t: np.ndarray, cos: np.ndarray, sin: np.ndarray, rotary_dim: int):
    """Rotate-half RoPE over the last axis in float32: (a·cos − b·sin, b·cos + a·sin) for
    the pairs (j, j + r/2), j < r/2; coordinates from r on pass through (cos, sin
    broadcast against the first r/2 coordinates)."""
    half = rotary_dim // 2
    out = t.copy()
    a, b = t[..., :half], t[..., half:rotary_dim]
    out[..., :half] = (a * cos - b * sin).astype(F32)
    out[..., half:rotary_dim] = (b * cos + a * sin).astype(F32)
    return out


def family_float32_numpy(weights, tokens: np.ndarray, reverse: bool) -> np.ndarray:
    """A plain numpy float32 forward pass of a one-layer family model (LN or none,
    sequential or parallel ungated MLP, ReLU/GELU/SiLU, RoPE) at the last position,
    every sum accumulated one term at a time (left to right or reversed, float32_dot);
    the softmax as e·fl(1/S) when reversed, e/S otherwise."""
    from generator.model import activation_np, rope_angles

    w = family_truncated(weights, tokens.shape[1])
    dims, f = w.dims, w.dims.family
    p = {k: np.asarray(v, dtype=F32) for k, v in w.params.items()}
    att = "blocks.0.attn."

    def norm(x, which):
        return float32_norm(f, p, x, which, reverse)

    x = p["embed.W_E"][tokens]
    if f.positional == "standard":
        x = (x + p["pos_embed.W_pos"]).astype(F32)
    a_in = norm(x, "blocks.0.ln1")
    qs, keys, vals = [], [], []
    for j in range(f.n_heads):
        q = (float32_dot(a_in[:, -1], p[att + "W_Q"][j], reverse) + p[att + "b_Q"][j])
        k = (float32_dot(a_in, p[att + "W_K"][j], reverse) + p[att + "b_K"][j])
        v = (float32_dot(a_in, p[att + "W_V"][j], reverse) + p[att + "b_V"][j])
        qs.append(q.astype(F32))
        keys.append(k.astype(F32))
        vals.append(v.astype(F32))
    if f.positional == "rotary":
        ang = rope_angles(dims)
        cos, sin = np.cos(ang).astype(F32), np.sin(ang).astype(F32)
        qs = [float32_rotate(q, cos[-1], sin[-1], f.rotary_dim) for q in qs]
        keys = [float32_rotate(k, cos, sin, f.rotary_dim) for k in keys]
    scale = F32(1 / np.sqrt(dims.d_head))
    resid_terms = []
    for j in range(f.n_heads):
        s = (_f32_sum((qs[j][:, None, :] * keys[j]).astype(F32), reverse) * scale).astype(F32)
        e = np.exp((s - s.max(axis=1, keepdims=True)).astype(F32)).astype(F32)
        total = _f32_sum(e, reverse)[:, None]
        a = (e * (F32(1) / total)).astype(F32) if reverse else (e / total).astype(F32)
        z = _f32_sum(np.swapaxes((a[:, :, None] * vals[j]).astype(F32), 1, 2), reverse)
        resid_terms.append(float32_dot(z, p[att + "W_O"][j], reverse))
    resid = x[:, -1]
    for t in resid_terms:
        resid = (resid + t).astype(F32)
    resid = (resid + p[att + "b_O"]).astype(F32)
    if f.d_mlp:
        y = norm(x[:, -1] if f.parallel else resid, "blocks.0.ln2")
        pre = (float32_dot(y, p["blocks.0.mlp.W_in"], reverse) + p["blocks.0.mlp.b_in"])
        hidden = activation_np(f.act_fn, pre.astype(np.float64)).astype(F32)
        out = float32_dot(hidden, p["blocks.0.mlp.W_out"], reverse)
        resid = ((resid + out).astype(F32) + p["blocks.0.mlp.b_out"]).astype(F32)
    y = norm(resid, "ln_final")
    return (float32_dot(y, p["unembed.W_U"], reverse) + p["unembed.b_U"]).astype(F32)


def family_float32_evaluations(weights, tokens: np.ndarray, seed: int = 0) -> list:
    """Several float32 evaluations (logits at the last position) of a one-layer family
    model on `tokens` (n, L), L ≤ n_ctx: torch with the residual coordinates in three
    orders and numpy left to right and reversed (family_float32_numpy)."""
    return five_float32_evaluations(weights, tokens, family_float32_numpy, seed)


def five_float32_evaluations(weights, tokens: np.ndarray, numpy_pass, seed: int = 0) -> list:
    """Five float32 evaluations (logits at the last position) of a family model on `tokens`
    (n, L), L ≤ n_ctx: torch (FamilyTransformer) with the residual coordinates in three
    orders (identity, a random permutation from `seed`, reversed), and
    numpy_pass(weights, tokens, reverse) left to right and reversed."""
    d = weights.dims.d_model
    g = np.random.default_rng(seed)
    out = [family_float32_torch(weights, tokens, perm)
           for perm in (None, g.permutation(d), np.arange(d)[::-1].copy())]
    out += [numpy_pass(weights, tokens, reverse) for reverse in (False, True)]
    return out
