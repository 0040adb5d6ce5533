"""float32 semantics for rule overwhelm_family beyond one plain layer (issue 24):
several layers (checker/rules/overwhelm_deep_float32.py, Lemma W-deep) and permutation
claims on one layer (Lemma R-perm under float32); spec/rules.md §overwhelm_family, float32.

- Enumeration: every completion of a float32-accepted claim (gen-cert's certificates and
  certificates forced for claims it did not prove) outputs the claimed token strictly in
  five float32 evaluations — torch with the residual coordinates in three orders, a numpy
  float32 pass of every layer at every position, every sum left to right and reversed
  (`deep_float32_numpy`); on 2- and 3-layer models with LN / LNPre / no normalisation,
  sequential / parallel / gated MLPs, RoPE and two heads.
- The planted near-tie (two layers): real proved, float32 not proved; the forced float32
  certificate and the real one relabelled float32 are rejected.
- Real certificates relabelled float32 are rejected (the shipped two-layer demo).
- Per term: every error term of Lemma W-deep at a one-completion claim is at least its
  value at the sequence's own float64 quantities (so zeroing any one is caught).
"""

from __future__ import annotations

import collections
import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from overwhelm_fixtures import MODELS, check_lines, shipped
from overwhelm_models import (
    DEEP_FAMILIES,
    assert_float32_refuses_near_tie,
    captured_checks,
    completion_arrays,
    deep_claims,
    deep_random,
    planted_near_tie,
    relabelled,
)
from overwhelm_models import assert_float32_correct as _assert_correct
from overwhelm_models import gamma as _gamma
from soundness_helpers import (
    _f32_sum,
    family_truncated,
    five_float32_evaluations,
    float32_dot,
    float32_norm,
    float32_rotate,
)

from checker.errors import Malformed, Rejected
from checker.modelspec import Dims
from checker.rules import overwhelm_deep_float32 as deep32
from checker.rules import overwhelm_family_float32 as f32
from checker.statement import Overwhelm
from generator.overwhelm import any_logits, certify

F32 = np.float32
U = 2.0 ** -24
LOW = 1 - 1e-9
DEEP_DEMO = MODELS / "maxany_v64_k10_2layers_seed0.pt"

# --- float32 evaluations of a model of several layers ---------------------------------------

def deep_float32_numpy(weights, tokens: np.ndarray, reverse: bool) -> np.ndarray:
    """A plain numpy float32 forward pass of a family model of any depth (spec/theorem.md
    §2b), every position through every layer with causal attention, every sum accumulated
    one term at a time (left to right or reversed); the softmax as e·fl(1/S) when reversed,
    e/S otherwise; logits at the last position."""
    from generator.model import activation_np, rope_angles

    w = family_truncated(weights, tokens.shape[1])
    dims, f = w.dims, w.dims.family
    p = {k: np.asarray(v, dtype=F32) for k, v in w.params.items()}
    L = tokens.shape[1]

    def norm(x, which):
        return float32_norm(f, p, x, which, reverse)

    def act(x):
        return activation_np(f.act_fn, x.astype(np.float64)).astype(F32)

    x = p["embed.W_E"][tokens]
    if f.positional == "standard":
        x = (x + p["pos_embed.W_pos"]).astype(F32)
    if f.positional == "rotary":
        ang = rope_angles(dims)
        cos, sin = np.cos(ang).astype(F32), np.sin(ang).astype(F32)  # (L, half)

        def rot(t):
            return float32_rotate(t, cos, sin, f.rotary_dim)
    mask = np.tril(np.ones((L, L), dtype=bool))
    scale = F32(1 / np.sqrt(dims.d_head))
    for layer in range(f.n_layers):
        b = f"blocks.{layer}."
        att = b + "attn."
        a_in = norm(x, b + "ln1")
        resid = x
        for j in range(f.n_heads):
            q, k, v = ((float32_dot(a_in, p[att + "W_" + c][j], reverse)
                        + p[att + "b_" + c][j]).astype(F32) for c in "QKV")
            if f.positional == "rotary":
                q, k = rot(q), rot(k)
            s = (_f32_sum((q[:, :, None, :] * k[:, None, :, :]).astype(F32), reverse)
                 * scale).astype(F32)  # (n, L, L)
            s = np.where(mask, s, -np.inf).astype(F32)
            e = np.exp((s - s.max(-1, keepdims=True)).astype(F32)).astype(F32)
            total = _f32_sum(e, reverse)[..., None]
            a = (e * (F32(1) / total)).astype(F32) if reverse else (e / total).astype(F32)
            z = _f32_sum(np.moveaxis((a[..., None] * v[:, None, :, :]).astype(F32), 2, 3),
                         reverse)  # (n, L, h)
            resid = (resid + float32_dot(z, p[att + "W_O"][j], reverse)).astype(F32)
        resid = (resid + p[att + "b_O"]).astype(F32)
        if f.d_mlp:
            mlp = b + "mlp."
            y = norm(x if f.parallel else resid, b + "ln2")
            if f.gated_mlp:
                hidden = (act(float32_dot(y, p[mlp + "W_gate"], reverse))
                          * float32_dot(y, p[mlp + "W_in"], reverse)).astype(F32)
                hidden = (hidden + p[mlp + "b_in"]).astype(F32)
            else:
                hidden = act((float32_dot(y, p[mlp + "W_in"], reverse)
                              + p[mlp + "b_in"]).astype(F32))
            out = float32_dot(hidden, p[mlp + "W_out"], reverse)
            resid = ((resid + out).astype(F32) + p[mlp + "b_out"]).astype(F32)
        x = resid
    y = norm(x[:, -1], "ln_final")
    return (float32_dot(y, p["unembed.W_U"], reverse) + p["unembed.b_U"]).astype(F32)


def deep_float32_evaluations(weights, tokens: np.ndarray, seed: int = 0) -> list:
    """torch (FamilyTransformer) with the residual coordinates in three orders and the
    numpy pass left to right and reversed: logits at the last position, float32."""
    return five_float32_evaluations(weights, tokens, deep_float32_numpy, seed)


def assert_float32_correct(weights, claim: Overwhelm, limit: int = 2048, seed: int = 0) -> int:
    """Every completion (a random sample of `limit` per length if more) outputs
    claim.output strictly in every evaluation of deep_float32_evaluations."""
    return _assert_correct(weights, claim, deep_float32_evaluations, limit, seed)


def test_numpy_pass_agrees_with_float64_and_torch():
    """The oracle itself: the numpy float32 pass is within float32 noise of the float64
    forward and of torch, on every family."""
    for name in DEEP_FAMILIES:
        w = deep_random(name).weights
        tokens = np.array(list(itertools.product(range(4), repeat=3)), dtype=np.int64)
        ref = any_logits(w, tokens)
        evaluations = deep_float32_evaluations(w, tokens)
        assert len(evaluations) == 5  # torch in three orders, numpy both ways
        for logits in evaluations:
            assert np.allclose(logits, ref, atol=2e-4, rtol=1e-4), name


# --- enumeration soundness ---------------------------------------------------------------

@pytest.mark.parametrize("name", list(DEEP_FAMILIES))
def test_every_accepted_float32_claim_is_float32_correct(name):
    """Every claim the checker accepts under float32 on this model — gen-cert's float32
    certificates, and certificates forced for the claims it did not prove — outputs the
    claimed token strictly on every completion in every float32 evaluation order."""
    loaded = deep_random(name)
    tally = {"real": 0, "float32": 0, "accepted": 0, "forced accepted": 0}
    for claim in deep_claims(4):
        real = certify(loaded, claim, float_shadow=False)
        claim = real.claim
        tally["real"] += real.verdict == "proved"
        verdict = certify(loaded, claim, float_shadow=False, semantics="float32", force=True)
        tally["float32"] += verdict.verdict == "proved"
        try:
            report = check_lines(verdict.lines)
        except Rejected:
            assert verdict.verdict != "proved", (name, claim)
            continue
        assert report.facts.semantics == "float32"
        assert "Lemma W-deep" in report.rule_notes[0]
        tally["accepted"] += 1
        tally["forced accepted"] += verdict.verdict != "proved"
        assert_float32_correct(loaded.weights, claim)
    # every model has a float32-proved claim except the gated one (no real proof either)
    assert tally["accepted"] > 0 or (name == "gated2" and tally["real"] == 0), tally
    assert tally["float32"] <= tally["real"], tally


def test_both_back_ends_agree_on_a_deep_float32_certificate():
    loaded = deep_random("ln_mlp2_2heads")
    for claim in deep_claims(4):
        verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
        if verdict.verdict == "proved":
            break
    else:
        pytest.fail("no float32 claim proved")
    for arith in ("mpmath", "arb"):
        assert check_lines(verdict.lines, arith=arith).facts.semantics == "float32"


DEMO_CLAIM = Overwhelm((63,), 5, 63, free_cmp="<=", free=2, over=tuple(range(8)))


def test_demo_float32_proved_every_completion_correct_and_real_relabelled_rejected():
    """The shipped two-layer demo: the float32 certificate verifies and every one of its 73
    completions is float32-correct in five orders; the real certificate of the same claim
    (hint slack 1e-9) relabelled float32 is rejected."""
    loaded = shipped(DEEP_DEMO)
    verdict = certify(loaded, DEMO_CLAIM, float_shadow=False, semantics="float32")
    assert verdict.verdict == "proved"
    assert check_lines(verdict.lines).facts.semantics == "float32"
    assert assert_float32_correct(loaded.weights, DEMO_CLAIM) == 1 + 8 + 64
    real = certify(loaded, DEMO_CLAIM, float_shadow=False)
    assert real.verdict == "proved"
    with pytest.raises(Rejected, match="not confirmed"):
        check_lines(relabelled(real.lines, "float32"))
    assert check_lines(relabelled(verdict.lines, "real")).facts.semantics == "real"


@pytest.mark.parametrize("name", ["ln_mlp2", "rope_2heads2", "attn3"])
def test_real_certificates_relabelled_float32_are_rejected(name):
    loaded = deep_random(name)
    seen = 0
    for claim in deep_claims(4):
        real = certify(loaded, claim, float_shadow=False)
        if real.verdict != "proved":
            continue
        seen += 1
        with pytest.raises(Rejected):
            check_lines(relabelled(real.lines, "float32"))
        if seen == 3:
            break
    assert seen > 0


# --- the planted near-tie ---------------------------------------------------------------

def _near_tie(target: float = 1e-6, name: str = "ln_mlp2"):
    """A two-layer model and a one-completion claim (free == 1 over one token) whose real
    margin ℓ_o − max ℓ_m is about `target` (b_U[o] lowered)."""
    return planted_near_tie(deep_random(name).weights, target)


def test_near_tie_real_proved_float32_not():
    assert_float32_refuses_near_tie(*_near_tie())


def test_near_tie_accepted_if_every_float32_error_is_dropped(monkeypatch):
    """The rejection above is the widening's doing: with every float32 error dropped the
    real certificate relabelled float32 is accepted."""
    from checker import float32 as fp

    loaded, claim = _near_tie()
    real = certify(loaded, claim, float_shadow=False)
    lines = relabelled(real.lines, "float32")
    monkeypatch.setattr(deep32, "U", 0.0)
    monkeypatch.setattr(deep32.Layer, "widening", lambda self, err, a, ys: 0.0)
    monkeypatch.setattr(fp, "U", 0)
    monkeypatch.setattr(fp, "_GAMMA", {})
    monkeypatch.setattr(fp, "dot_error", lambda n, s: 0.0)
    monkeypatch.setattr(fp, "mean_error", lambda n, s: 0.0)
    monkeypatch.setattr(fp, "exp_factor", lambda: 1)
    monkeypatch.setattr(fp, "ETA", 0.0)
    monkeypatch.setattr(fp, "rope_tolerance", lambda k: 0.0)
    monkeypatch.setattr(fp, "score_error", lambda *a: 0.0)
    assert check_lines(lines).facts.semantics == "float32"


# --- scope --------------------------------------------------------------------------------

def test_scope():
    """Lifted: several layers (any normalisation but RMS, any MLP), and on one layer
    permutation claims, LNPre, no normalisation, a parallel MLP.  Still refused by name:
    permutation claims on several layers, RMS, a gated MLP on one layer; `refuse` (the
    one-layer scope that family_gap_float32 reads) unchanged."""
    from overwhelm_fixtures import family_random

    free = Overwhelm((0,), 1, 0, free_cmp="<=", free=1)
    perm = Overwhelm((0, 1), 1, 0, free_perm=(0, 1))
    for name in DEEP_FAMILIES:
        dims = deep_random(name).weights.dims
        f32.scope(dims, free)
        with pytest.raises(Rejected, match="permutation"):
            f32.scope(dims, perm)
        with pytest.raises(Rejected, match="several layers"):
            f32.refuse(dims, free)
    one = family_random("ln_mlp_rope").weights.dims
    f32.scope(one, perm)
    with pytest.raises(Rejected, match="permutation"):
        f32.refuse(one, perm)
    for name in ("lnpre_parallel", "plain_mlp"):
        f32.scope(family_random(name).weights.dims, free)
        with pytest.raises(Rejected, match="normalization"):
            f32.refuse(family_random(name).weights.dims, free)
    gated = Dims(one.d_vocab, one.n_ctx, one.d_model, one.d_head,
                 family=replace(one.family, gated_mlp=True))
    with pytest.raises(Rejected, match="gated"):
        f32.scope(gated, free)
    rms = Dims(one.d_vocab, one.n_ctx, one.d_model, one.d_head,
               family=replace(one.family, normalization="RMS", n_layers=2))
    with pytest.raises(Rejected, match="RMS"):
        f32.scope(rms, free)
    with pytest.raises(Malformed, match="permutation|free_perm|free-perm"):
        certify(deep_random("ln_mlp2"), Overwhelm((0,), 1, -1, free_perm=(0, 1)),
                float_shadow=False, semantics="float32")


# --- permutation claims on one layer (Lemma R-perm under float32) --------------------------

V6 = MODELS / "maxany_v6_k6_ln_mlp_rope_seed0.pt"


def _one_layer_float32_evaluations(weights, tokens, seed=0):
    from soundness_helpers import family_float32_evaluations

    return family_float32_evaluations(weights, tokens, seed)


def test_one_layer_permutation_claims_float32():
    """Permutation claims on the shipped one-layer family model: gen-cert's float32
    certificates verify (mpmath and arb), every ordering is float32-correct in five orders;
    the real certificates relabelled float32 are rejected."""
    loaded = shipped(V6)
    proved = 0
    for m in range(6):
        for x in ((0, 1, 2), (m, 0, 1), (m, m, 2)):
            claim = Overwhelm((m,), 3, -1, free_perm=tuple(sorted(x)))
            real = certify(loaded, claim, float_shadow=False)
            if real.verdict != "proved":
                continue
            claim = real.claim
            verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
            with pytest.raises(Rejected):
                check_lines(relabelled(real.lines, "float32"))
            if verdict.verdict != "proved":
                continue
            proved += 1
            for arith in ("mpmath", "arb"):
                report = check_lines(verdict.lines, arith=arith)
                assert report.facts.semantics == "float32"
                assert "every permutation" in report.rule_notes[0]
            for tokens in completion_arrays(claim, 6):
                for logits in _one_layer_float32_evaluations(loaded.weights, tokens):
                    top = logits[:, claim.output]
                    assert (np.delete(logits, claim.output, axis=1) < top[:, None]).all()
    assert proved >= 2


def test_one_layer_permutation_near_tie_rejected():
    """The one-layer planted near-tie as a permutation claim of one element: the real claim
    is proved, the float32 one not, its forced certificate rejected."""
    from test_float32_overwhelm_family import _near_tie as one_layer_near_tie

    loaded, claim = one_layer_near_tie()
    perm = Overwhelm(claim.prefix, claim.query, claim.output, free_perm=claim.over)
    assert certify(loaded, perm, float_shadow=False).verdict == "proved"
    assert certify(loaded, perm, float_shadow=False, semantics="float32").verdict == "not proved"
    forced = certify(loaded, perm, float_shadow=False, semantics="float32", force=True)
    with pytest.raises(Rejected):
        check_lines(forced.lines)


# --- every error term of Lemma W-deep is present (against float64 values) -------------------

def _float64_layers(weights, seq):
    """float64 intermediates (spec/theorem.md §2b) of `seq` at every layer and position:
    per layer a dict of arrays over positions (standard positions; LN or LNPre; a
    sequential, parallel or gated MLP)."""
    from generator.model import activation_np

    dims, f = weights.dims, weights.dims.family
    w = {k: a.astype(np.float64) for k, a in weights.params.items()}
    L, h = len(seq), dims.d_head
    x = w["embed.W_E"][list(seq)] + w["pos_embed.W_pos"][:L]
    out = []

    def ln(x, which):
        c = x - x.mean(-1, keepdims=True)
        sigma = np.sqrt((c * c).mean(-1, keepdims=True) + f.ln_eps)
        if f.normalization == "LNPre":
            return c, sigma, c / sigma
        return c, sigma, c / sigma * w[which + ".w"] + w[which + ".b"]

    for layer in range(f.n_layers):
        b = f"blocks.{layer}."
        att, mlp = b + "attn.", b + "mlp."
        c1, s1, y1 = ln(x, b + "ln1")
        q = np.einsum("ld,jdh->jlh", y1, w[att + "W_Q"]) + w[att + "b_Q"][:, None]
        k = np.einsum("ld,jdh->jlh", y1, w[att + "W_K"]) + w[att + "b_K"][:, None]
        v = np.einsum("ld,jdh->jlh", y1, w[att + "W_V"]) + w[att + "b_V"][:, None]
        s = np.einsum("jph,jih->jpi", q, k) / math.sqrt(h)
        s = np.where(np.tril(np.ones((L, L))) > 0, s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)  # (H, L, L)
        z = np.einsum("jpi,jih->jph", a, v)
        r = x + np.einsum("jph,jhd->pd", z, w[att + "W_O"]) + w[att + "b_O"]
        mlp_in = x if f.parallel else r
        c2, s2, y2 = ln(mlp_in, b + "ln2")
        gate = pre = None
        if f.gated_mlp:
            act_in = y2 @ w[mlp + "W_gate"]
            gate, pre = activation_np(f.act_fn, act_in), y2 @ w[mlp + "W_in"]
            hidden = gate * pre + w[mlp + "b_in"]
        else:
            act_in = y2 @ w[mlp + "W_in"] + w[mlp + "b_in"]
            hidden = activation_np(f.act_fn, act_in)
        r2 = r + hidden @ w[mlp + "W_out"] + w[mlp + "b_out"]
        out.append(dict(x=x, c1=c1, s1=s1, y1=y1, q=q, k=k, v=v, a=a, z=z, r=r, mlp_in=mlp_in,
                        c2=c2, s2=s2, y2=y2, act_in=act_in, gate=gate, pre=pre, hidden=hidden,
                        r2=r2))
        x = r2
    cf, sf, yf = ln(x[-1], "ln_final")
    return w, out, dict(c=cf, sigma=float(sf[0]), y=yf)


def _record_one_completion(name, seq):
    from test_depth import rule_inputs

    loaded = deep_random(name)
    claim = Overwhelm((seq[0],), seq[2], -1, free_cmp="==", free=1, over=(seq[1],))
    verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
    assert verdict.verdict == "proved"
    dims, mats = rule_inputs(verdict.lines)
    hints = next(json.loads(x) for x in verdict.lines if '"kind":"rule"' in x)["hints"]
    record = {}
    deep32.check(dims, mats, verdict.claim, hints, lambda work: None, record=record)
    return loaded, verdict.claim, record


def _widths(xs) -> np.ndarray:
    """A lower bound of each interval's width (the tests assert widths are at least a
    reference): the lower end of the interval difference b − a, which is not a point when
    the endpoints' difference needs more than the working precision."""
    return np.array([float((x.b - x.a).a) for x in xs])


def _gains(w, f, which):
    d = len(w["ln_final.b"]) if "ln_final.b" in w else len(w["embed.W_E"][0])
    if f.normalization == "LNPre":
        return np.ones(d), np.zeros(d)
    return w[which + ".w"], w[which + ".b"]


PER_TERM = [("ln_mlp2_2heads", (0, 1, 2)), ("ln_parallel_gelu2", (0, 1, 2)),
            ("gated2", (0, 1, 2))]


@pytest.mark.parametrize("name, seq", PER_TERM, ids=[c[0] for c in PER_TERM])
def test_every_float32_error_term_is_present(name, seq):
    """At a one-completion claim (each state stands for one prefix of the sequence), every
    error term of Lemma W-deep, at every layer and position, is at least its value at the
    sequence's own float64 quantities: Lemma S's spread γ_{n+1}, Rz_j, Rr, |r̃| ≤ T + Rr,
    each box coordinate's widening E(e_k), Rr2 and R_l, every norm's mean error Ec, its mean
    of squares' error, its γ_8 and its ·w + b rounding, the projections' rounding (beyond
    the real product over the same enclosure), the activation's and the gate's roundings,
    the score bounds and Lemma S's factor, the final norm's deviation D, E(g_t) and
    Rr2·|c(g_t)| (and that both are added to the bound), the unembedding's roundings; every
    box contains the float64 residual.  On LN + ReLU (2 heads), LN + parallel GELU, LNPre +
    gated SiLU."""
    from checker.rules import forward

    loaded, claim, record = _record_one_completion(name, seq)
    w, layers, final = _float64_layers(loaded.weights, claim.prefix + claim.over + (claim.query,))
    dims, f = loaded.weights.dims, loaded.weights.dims.family
    d, h, H, dm = dims.d_model, dims.d_head, f.n_heads, f.d_mlp
    checked = 0
    for key, rec in record.items():
        if key[0] == "layer":
            continue
        layer, i, u = key
        lay, b = layers[layer], f"blocks.{layer}."
        n = i + 1
        err = rec["err"]
        assert err["spread"] >= _gamma(n + 1)
        az = np.einsum("jp,jph->jh", lay["a"][:, i, :n], np.abs(lay["v"][:, :n]))  # Σa|v|
        rz_ref = _gamma(n) * az
        assert (np.array(err["rz"]) >= rz_ref * LOW).all()
        w_o = w[b + "attn.W_O"]
        t_sum = (np.abs(lay["x"][i]) + np.abs(w[b + "attn.b_O"])
                 + np.einsum("jh,jhd->d", np.abs(lay["z"][:, i]), np.abs(w_o)))
        rr_ref = _gamma(H * h + 2) * t_sum
        assert (np.array(err["rr"]) >= rr_ref * LOW).all()
        assert (np.array(err["r_mag"]) >= (t_sum + rr_ref) * LOW).all()
        assert (np.array(err["r_mag"]) - np.array(err["T"]) >= rr_ref * LOW).all()
        wo_c = w_o - w_o.mean(-1, keepdims=True)
        vo = np.einsum("jph,jhd->jpd", lay["v"][:, :n], wo_c)  # (H, n, d)
        for k in range(d):
            ck = -np.full(d, 1 / d)
            ck[k] += 1
            e_ref = (float(rr_ref @ np.abs(ck)) + _gamma(n + 1) * np.abs(vo[:, :, k]).max(1).sum()
                     + float(np.einsum("jh,jh->", rz_ref, np.abs(wo_c[:, :, k]))))
            assert rec["widenings"][k] >= e_ref * LOW, (key, k)
        w_out = w[b + "mlp.W_out"]
        r2_sum = (np.abs(lay["r"][i]) + np.abs(w[b + "mlp.b_out"])
                  + np.abs(lay["hidden"][i]) @ np.abs(w_out))
        rr2_ref = _gamma(dm + 2) * r2_sum
        assert (np.array(rec["rr2"]) >= rr2_ref * LOW).all()
        assert (np.array(rec["mag"]) >= (r2_sum + rr2_ref) * LOW).all()
        assert (np.array(rec["mag"]) - np.array(rec["sums"]) >= rr2_ref * LOW).all()
        c_next = lay["r2"][i] - lay["r2"][i].mean()
        for box, x in zip(rec["box"], c_next):
            assert float(box.a) <= x <= float(box.b)
        assert (_widths(rec["box"]) >= 2 * rr2_ref * LOW).all()
        checked += 1
    assert checked == 4  # layer 0 at (0, s0), (1, t), (2, q); layer 1 at (2, q)
    # the norms, projections, MLP and scores of every state of every layer
    norms = mlps = 0
    for layer_index in range(f.n_layers):
        lay_obj = record[("layer", layer_index)]
        lay, b = layers[layer_index], f"blocks.{layer_index}."
        for key, item in lay_obj.log.items():
            if key[0] in ("ln1", "ln2"):
                which, i, _ = key
                c, sigma, x_abs = ((lay["c1"][i], lay["s1"][i][0], np.abs(lay["x"][i]))
                                   if which == "ln1" else
                                   (lay["c2"][i], lay["s2"][i][0], np.abs(lay["mlp_in"][i])))
                ec_ref = _gamma(d + 1) * x_abs.sum() / d + U * np.abs(c)
                assert (np.array(item.ec) >= ec_ref * LOW).all(), key
                assert item.ms_err >= _gamma(d + 1) * float(c @ c) / d * LOW, key
                assert (_widths(item.n_box) >= 2 * _gamma(8) * np.abs(c) / sigma * LOW).all()
                gain, bias = _gains(w, f, b + which)
                if f.normalization == "LN":
                    e_y = _gamma(2) * (np.abs(c / sigma * gain) + np.abs(bias))
                    assert (_widths(item.y) >= 2 * e_y * LOW).all(), key
                norms += 1
            elif key[0] == "V":
                _, i, u = key
                y_box = lay_obj.log[("ln1", i, u)].y
                for j, vals in enumerate(item):
                    real = forward._add(forward._vecmat(y_box, lay_obj.m[lay_obj.name("W_V")]
                                                        [j * d:(j + 1) * d]),
                                        lay_obj.m[lay_obj.name("b_V")][j])
                    ref = _gamma(d + 1) * (np.abs(lay["y1"][i]) @ np.abs(w[b + "attn.W_V"][j])
                                           + np.abs(w[b + "attn.b_V"][j]))
                    assert (_widths(vals) - _widths(real) >= 2 * ref * LOW).all(), key
            elif key[0] == "mlp":
                _, i, _ = key
                real_act = forward.activate(f.act_fn, item["act_in"])
                phi = np.abs(lay["gate"][i] if f.gated_mlp else lay["hidden"][i])
                act_ref = 16 * U * (phi + np.abs(lay["act_in"][i]))
                act_out = item["gate"] if f.gated_mlp else item["hidden"]
                if f.act_fn != "relu":
                    assert (_widths(act_out) - _widths(real_act) >= 2 * act_ref * LOW).all()
                if f.gated_mlp:
                    b_in = lay_obj.m[lay_obj.name("b_in")][0]
                    real = [g_ * p_ + c_ for g_, p_, c_ in zip(item["gate"], item["pre"], b_in)]
                    ref = _gamma(2) * (np.abs(lay["gate"][i] * lay["pre"][i])
                                       + np.abs(w[b + "mlp.b_in"]))
                    assert (_widths(item["hidden"]) - _widths(real) >= 2 * ref * LOW).all()
                mlps += 1
            elif key[0] == "scores":
                _, i, _, j = key
                errs, factor = item
                for (i2, _), e in errs.items():
                    ref = _gamma(h + 10) * float(np.abs(lay["q"][j, i]) @ np.abs(lay["k"][j, i2]))
                    assert e >= ref / math.sqrt(h) * LOW, key
                s_max = max(abs(float(lay["q"][j, i] @ lay["k"][j, i2])) / math.sqrt(h)
                            for i2 in range(i + 1))
                rho = 2 * U * s_max
                assert float(factor.a) <= (1 - rho) * (1 - 8 * U) * (1 + 1e-12)
                assert float(factor.b) >= (1 + 2 * rho) * (1 + 8 * U) * (1 - 1e-12)
    assert norms >= 2 * 4 and mlps == 4
    # the last step
    rec = record[(f.n_layers - 1, 2, claim.query)]
    fn = rec["final_norm"]
    r2 = layers[-1]["r2"][-1]
    ec_ref = _gamma(d + 1) * np.abs(r2).sum() / d + U * np.abs(final["c"])
    assert (np.array(fn.ec) >= ec_ref * LOW).all()
    u_mat, b_u = w["unembed.W_U"], w["unembed.b_U"]
    w_f, b_f = _gains(w, f, "ln_final")
    n_f = final["c"] / final["sigma"]
    dev_ref = np.abs(w_f) * _gamma(8) * np.abs(final["c"]) / final["sigma"]
    if f.normalization == "LN":
        dev_ref = dev_ref + _gamma(2) * (np.abs(n_f * w_f) + np.abs(b_f))
    unemb = _gamma(d + 1) * (np.abs(final["y"]) @ np.abs(u_mat) + np.abs(b_u))
    lay, o, i = layers[-1], claim.output, 2
    b = f"blocks.{f.n_layers - 1}."
    w_o = w[b + "attn.W_O"]
    wo_c = w_o - w_o.mean(-1, keepdims=True)
    t_sum = (np.abs(lay["x"][i]) + np.abs(w[b + "attn.b_O"])
             + np.einsum("jh,jhd->d", np.abs(lay["z"][:, i]), np.abs(w_o)))
    rr_ref = _gamma(H * h + 2) * t_sum
    rz_ref = _gamma(3) * np.einsum("jp,jph->jh", lay["a"][:, i], np.abs(lay["v"]))
    rr2_ref = _gamma(dm + 2) * (np.abs(lay["r"][i]) + np.abs(w[b + "mlp.b_out"])
                                + np.abs(lay["hidden"][i]) @ np.abs(w[b + "mlp.W_out"]))
    for t, part in rec["parts"].items():
        g = (u_mat[:, t] - u_mat[:, o]) * w_f
        cg = np.abs(g - g.mean())
        vo_g = np.einsum("jph,jhd,d->jp", lay["v"], wo_c, g)
        e_ref = (float(rr_ref @ cg) + _gamma(4) * float(np.abs(vo_g).max(-1).sum())
                 + float(np.einsum("jh,jh->", rz_ref, np.abs(wo_c @ g))))
        assert part["E"] >= e_ref * LOW, t
        assert part["rr2"] >= float(rr2_ref @ cg) * LOW, t
        # both are added to the real rule's N̄ (binary64 differences of numbers ~1)
        assert part["added"] >= (part["E"] + part["rr2"]) * (1 - 1e-9) - 1e-15, t
        assert part["unembed"] >= (unemb[t] + unemb[o]) * LOW, t
        dt = np.abs(u_mat[:, t] - u_mat[:, o])
        assert part["dev"] >= float(dev_ref @ dt) * LOW, t
        assert part["slack"] >= part["dev"] + part["unembed"] - 1e-300


def test_rope_tables_within_tau():
    """RoPE: every layer takes the rotary tables within τ(k) = (8k + 16)u of the exact
    cos/sin (theorem.md §2c)."""
    loaded, claim, record = _record_one_completion("rope_2heads2", (0, 1, 2))
    dims = loaded.weights.dims
    for layer in range(dims.family.n_layers):
        assert record[("layer", layer)].tau >= (8 * dims.n_ctx + 16) * U


# --- one layer: LNPre, no normalisation, a parallel MLP ------------------------------------

ONE_LAYER = ("lnpre_parallel", "plain_mlp")


@pytest.mark.parametrize("name", ONE_LAYER)
def test_one_layer_lifted_families_float32_correct(name):
    """One layer with LNPre + a parallel MLP, or no normalisation + a sequential MLP: every
    claim the checker accepts under float32 (gen-cert's, and forced ones) is float32-correct
    on every completion in five orders (soundness_helpers.family_float32_evaluations); the
    real certificates relabelled float32 are rejected."""
    from overwhelm_fixtures import family_random
    from soundness_helpers import family_float32_evaluations

    loaded = family_random(name)
    tally = collections.Counter()
    for s0, q in itertools.product(range(5), range(5)):
        claim = Overwhelm((s0,), q, -1, free_cmp="<=", free=2)
        real = certify(loaded, claim, float_shadow=False)
        claim = real.claim
        verdict = certify(loaded, claim, float_shadow=False, semantics="float32", force=True)
        tally[verdict.verdict] += 1
        if real.verdict == "proved":
            with pytest.raises(Rejected):
                check_lines(relabelled(real.lines, "float32"))
        try:
            for arith in ("mpmath", "arb"):
                assert check_lines(verdict.lines, arith=arith).facts.semantics == "float32"
        except Rejected:
            assert verdict.verdict != "proved"
            continue
        tally["accepted"] += 1
        for tokens in completion_arrays(claim, 5):
            for logits in family_float32_evaluations(loaded.weights, tokens):
                top = logits[:, claim.output]
                assert (np.delete(logits, claim.output, axis=1) < top[:, None]).all(), claim
    assert tally["proved"] >= 3 and tally["accepted"] >= 3, tally


def _one_layer_trace(weights, seq):
    """float64 residual after attention, hidden layer and final residual at the last
    position of a one-layer model (standard positions)."""
    from generator.model import activation_np

    f, dims = weights.dims.family, weights.dims
    w = {k: a.astype(np.float64) for k, a in weights.params.items()}
    att, L = "blocks.0.attn.", len(seq)

    def norm(x, which):
        if f.normalization is None:
            return x, x, 1.0
        c = x - x.mean(-1, keepdims=True)
        sigma = np.sqrt((c * c).mean(-1, keepdims=True) + f.ln_eps)
        y = c / sigma
        if f.normalization == "LN":
            y = y * w[which + ".w"] + w[which + ".b"]
        return y, c, sigma
    x = w["embed.W_E"][list(seq)] + w["pos_embed.W_pos"][:L]
    a_in = norm(x, "blocks.0.ln1")[0]
    resid = x[-1] + w[att + "b_O"]
    for j in range(f.n_heads):
        q = a_in[-1] @ w[att + "W_Q"][j] + w[att + "b_Q"][j]
        k = a_in @ w[att + "W_K"][j] + w[att + "b_K"][j]
        v = a_in @ w[att + "W_V"][j] + w[att + "b_V"][j]
        s = k @ q / math.sqrt(dims.d_head)
        a = np.exp(s - s.max())
        resid = resid + (a / a.sum()) @ v @ w[att + "W_O"][j]
    y2 = norm(x[-1] if f.parallel else resid, "blocks.0.ln2")[0]
    hidden = activation_np(f.act_fn, y2 @ w["blocks.0.mlp.W_in"] + w["blocks.0.mlp.b_in"])
    r2 = resid + hidden @ w["blocks.0.mlp.W_out"] + w["blocks.0.mlp.b_out"]
    _, c_f, s_f = norm(r2, "ln_final")
    return w, resid, r2, c_f, s_f


@pytest.mark.parametrize("name", ONE_LAYER)
def test_one_layer_lifted_error_terms(name, monkeypatch):
    """The new one-layer terms against the sequence's float64 values: without
    normalisation the pre-activation's rounding γ_{d+1}(|r||W_in| + |b_in|); with LNPre the
    final norm's deviation D ≥ γ_8|c|/σ (no ·w + b step); and the unembedding's rounding."""
    from overwhelm_fixtures import family_random

    loaded = family_random(name)
    captured = captured_checks(monkeypatch, f32.AtQuery)
    found = None
    for seq in itertools.product(range(5), repeat=3):
        claim = Overwhelm((seq[0],), seq[2], -1, free_cmp="==", free=1, over=(seq[1],))
        verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
        if verdict.verdict == "proved":
            found = seq, verdict.claim
            break
    assert found is not None
    seq, claim = found
    at = captured[-1]
    w, resid, r2, c_f, s_f = _one_layer_trace(loaded.weights, seq)
    dims, f = loaded.weights.dims, loaded.weights.dims.family
    d = dims.d_model
    if f.normalization is None and not f.parallel:
        ref = _gamma(d + 1) * (np.abs(resid) @ np.abs(w["blocks.0.mlp.W_in"])
                               + np.abs(w["blocks.0.mlp.b_in"]))
        assert (np.array(at.last_pre_err) >= ref * LOW).all()
    if f.parallel:  # the MLP of the float embedding: Float32Model's widened steps
        from checker.rules import forward

        y, hidden = at.last_parallel
        real = forward.activate(f.act_fn, forward._add(forward._vecmat(y, at.m["W_in"]),
                                                       at.m["b_in"][0]))
        x = w["embed.W_E"][seq[-1]] + w["pos_embed.W_pos"][len(seq) - 1]
        c = x - x.mean()
        y64 = c / np.sqrt((c * c).mean() + f.ln_eps)
        pre = y64 @ w["blocks.0.mlp.W_in"] + w["blocks.0.mlp.b_in"]
        ref = _gamma(d + 1) * (np.abs(y64) @ np.abs(w["blocks.0.mlp.W_in"])
                               + np.abs(w["blocks.0.mlp.b_in"]))
        assert (_widths(y) >= 2 * _gamma(8) * np.abs(y64) * LOW).all()  # the float LN2
        active = pre > 1e-3  # ReLU passes the widening on where the unit is on
        assert active.any()
        extra = _widths(hidden) - _widths(real)
        assert (extra[active] >= 2 * ref[active] * LOW).all()
    if f.normalization == "LNPre":
        dev_ref = _gamma(8) * np.abs(c_f) / s_f
        assert (np.array(at.last_dev) >= dev_ref * LOW).all()
    u_mat, b_u, o = w["unembed.W_U"], w["unembed.b_U"], claim.output
    y_f = r2 if f.normalization is None else c_f / s_f
    unemb = _gamma(d + 1) * (np.abs(y_f) @ np.abs(u_mat) + np.abs(b_u))
    for t, part in at.parts.items():
        assert part["unembed"] >= (unemb[t] + unemb[o]) * LOW, t
