"""Lemma G with exact magnitudes (spec/theorem.md §2c): δ still bounds every observed
float32 error, on random models with large weights and on adversarial ones (near-cancelling
residuals and projections, large scores), and is ≤ the triangle-inequality δ entrywise."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from mpmath import iv
from test_float32 import (
    F32,
    _float32_logits_numpy,
    _float32_logits_permuted,
    _interval_weights,
    _random_attn_only,
)

from checker import float32 as fp
from generator.model import ModelWeights, logits_float64


def _deltas(w, monkeypatch=None, exact=True) -> np.ndarray:
    if not exact:
        monkeypatch.setattr(fp, "_exact_magnitudes", lambda w, k: None)
    out = fp.attention_only_deltas(w.dims, _interval_weights(w))
    if not exact:
        monkeypatch.undo()
    return out


def _check_bounds(w, deltas) -> float:
    """Every sequence, torch in three coordinate orders and numpy in two: |float32 − real|
    ≤ δ[q][o].  Returns the largest error observed."""
    tokens = np.array(list(itertools.product(range(w.dims.d_vocab), repeat=w.dims.n_ctx)))
    real = logits_float64(w, tokens)
    delta = np.array(deltas, dtype=float)[tokens[:, -1]]
    d = w.dims.d_model
    g = np.random.default_rng(1)
    floats = [_float32_logits_permuted(w, tokens, p)
              for p in (np.arange(d), g.permutation(d), np.arange(d)[::-1].copy())]
    floats += [_float32_logits_numpy(w, tokens, r) for r in (False, True)]
    worst = 0.0
    for f in floats:
        err = np.abs(f.astype(float) - real)
        assert (err <= delta).all()
        worst = max(worst, float(err.max()))
    return worst


def _assert_tighter(w, monkeypatch):
    """new δ ≤ old δ entrywise; old None when the triangle bounds overflow the model."""
    new = _deltas(w)
    try:
        old = _deltas(w, monkeypatch, exact=False)
    except fp.Overflow:
        monkeypatch.undo()
        return new, None
    assert all(a <= b for rn, ro in zip(new, old) for a, b in zip(rn, ro))
    return new, old


@pytest.mark.parametrize("seed,scale", [(0, 1.5), (1, 2.0), (2, 3.0), (3, 4.0), (5, 2.5)])
def test_large_weights(seed, scale, monkeypatch):
    w = _random_attn_only(seed, scale=scale)
    try:
        new, _ = _assert_tighter(w, monkeypatch)
    except fp.Overflow:
        pytest.skip("beyond the softmax error model at this scale")
    assert _check_bounds(w, new) > 0


def _adversarial(seed: int, qk=6.0, v=5, k=3, d=6, h=4) -> ModelWeights:
    """E[t] + P[i] nearly cancels in most coordinates (P[i] ≈ −E[t] for some t), the
    projections have large entries of alternating sign (the triangle bound Σ|x||W| is far
    above |xW|), W_Q, W_K are large (scores of several hundreds), values near-tie."""
    from checker.modelspec import Dims

    g = np.random.default_rng(seed)
    emb = g.normal(size=(v, d)) * 4
    pos = -emb[g.integers(0, v, size=k)] + g.normal(size=(k, d)) * 1e-3
    alt = np.where((np.arange(d)[:, None] + np.arange(h)[None, :]) % 2, 1.0, -1.0)
    w = {"W_E": emb, "W_pos": pos,
         "W_Q": alt * qk + g.normal(size=(d, h)) * 0.01,
         "W_K": alt * qk + g.normal(size=(d, h)) * 0.01,
         "W_V": alt * 3 + g.normal(size=(d, h)) * 1e-3,
         "W_O": g.normal(size=(h, d)) * 2, "b_Q": g.normal(size=h), "b_K": g.normal(size=h),
         "b_V": g.normal(size=h) * 1e-3, "b_O": g.normal(size=d),
         "W_U": g.normal(size=(d, v)) * 2, "b_U": g.normal(size=v)}
    return ModelWeights(dims=Dims(v, k, d, h), **{n: a.astype(F32) for n, a in w.items()})


@pytest.mark.parametrize("seed,qk", [(0, 6.0), (1, 6.0), (2, 6.0), (5, 6.0), (0, 2.0),
                                     (1, 2.0), (2, 2.0), (3, 2.0)])
def test_adversarial(seed, qk, monkeypatch):
    w = _adversarial(seed, qk)
    scores = max(abs(float(x)) for x in np.ravel(
        (w.W_E[:, None] + w.W_pos[None]).reshape(-1, w.dims.d_model) @ w.W_K + w.b_K))
    assert scores > 1  # the keys are not all cancelled away
    new, old = _assert_tighter(w, monkeypatch)
    assert _check_bounds(w, new) > 0
    # strictly tighter here, or the triangle bounds refuse the model (scores too large)
    assert old is None or max(map(max, new)) < max(map(max, old))


def test_interval_weights_fall_back(monkeypatch):
    """A weight with width: the exact maxima are not used (the triangle bounds are)."""
    w = _random_attn_only(0)
    iw = _interval_weights(w)
    iw["W_K"][0][0] = iw["W_K"][0][0] + iv.mpf((0, 2.0 ** -30))
    assert fp._exact_magnitudes(iw, w.dims.n_ctx) is None
    monkeypatch.setattr(fp, "_exact_magnitudes", lambda w, k: None)
    old = fp.attention_only_deltas(w.dims, iw)
    monkeypatch.undo()
    assert fp.attention_only_deltas(w.dims, iw) == old
