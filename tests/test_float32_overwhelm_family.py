"""float32 semantics for rule overwhelm_family (one layer; spec/rules.md §overwhelm_family
under the float32 semantics: Lemma W-family, Lemma LN-float).

- Enumeration: every completion of a float32-accepted claim outputs the claimed token,
  strictly, in float32 in several summation orders (torch with the residual coordinates
  permuted, numpy left to right and reversed: soundness_helpers.family_float32_evaluations);
  the checker's verdict is the same under mpmath and arb.
- Mutants: a planted near-tie (one completion, real margin ~1e-6) is proved for the real
  semantics, not for float32 (gen-cert says not proved; the real certificate relabelled
  float32 and the forced float32 certificate are rejected), and would be accepted if the
  float32 widening were skipped (monkeypatched): so skipping it is caught.
- Scope refusals by name: several layers, permutation claims, other normalisations.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from overwhelm_fixtures import MODELS, check_lines, family_random, shipped
from overwhelm_models import assert_float32_correct as _assert_correct
from overwhelm_models import (
    assert_float32_refuses_near_tie,
    captured_checks,
    planted_near_tie,
    relabelled,
)
from overwhelm_models import gamma as _gamma  # also for tests/test_float32_family_gap.py
from soundness_helpers import family_float32_evaluations

from checker.errors import Rejected
from checker.modelspec import Dims
from checker.rules import overwhelm_family_float32 as f32
from checker.statement import Overwhelm
from generator.overwhelm import certify

F32 = np.float32
V6 = MODELS / "maxany_v6_k6_ln_mlp_rope_seed0.pt"


def assert_float32_correct(weights, claim: Overwhelm, limit: int = 4096, seed: int = 0):
    """Every completion (a random sample of `limit` per length if more) outputs
    claim.output strictly in every float32 evaluation of family_float32_evaluations."""
    return _assert_correct(weights, claim, family_float32_evaluations, limit, seed)


# --- enumeration soundness ---------------------------------------------------------------

SHIPPED_V6 = Overwhelm((5,), 3, 5, free_cmp="<=", free=3)


def test_shipped_v6_float32_proved_and_every_completion_float32_correct():
    loaded = shipped(V6)
    verdict = certify(loaded, SHIPPED_V6, float_shadow=False, semantics="float32")
    assert verdict.verdict == "proved"
    reports = [check_lines(verdict.lines, arith=a) for a in ("mpmath", "arb")]
    for report in reports:
        assert report.facts.semantics == "float32"
        assert any("float32 semantics: Lemma W-family" in n for n in report.rule_notes)
    assert assert_float32_correct(loaded.weights, SHIPPED_V6) == 1 + 6 + 36 + 216


def _small_claims():
    """Claims on the small trained family model (v6) that the real rule proves (the
    cases of tests/test_overwhelm_family.py's small_trained, free claims)."""
    loaded, out = shipped(V6), []
    for m, q in itertools.product(range(6), (0, 3, 5)):
        for claim in (Overwhelm((m,), q, m, free_cmp="<=", free=3),
                      Overwhelm((m,), q, m, free_cmp="==", free=4, over=tuple(range(m + 1)))):
            if certify(loaded, claim, float_shadow=False).verdict == "proved":
                out.append(claim)
    return out


def test_small_family_claims_float32_correct():
    """Every real-proved claim on the small trained model: its float32 certificate, when
    gen-cert proves one, verifies under mpmath and arb alike, and every completion is
    float32-correct in every evaluation order."""
    loaded = shipped(V6)
    claims = _small_claims()
    assert len(claims) >= 4
    proved = 0
    for claim in claims:
        verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
        if verdict.verdict != "proved":
            continue
        proved += 1
        for arith in ("mpmath", "arb"):
            assert check_lines(verdict.lines, arith=arith).facts.semantics == "float32"
        assert_float32_correct(loaded.weights, claim)
    assert proved >= 4


# --- the planted near-tie -----------------------------------------------------------------

def _near_tie(target: float = 1e-6):
    """A small ln_mlp_rope model and a one-completion claim (free == 1 over one token)
    whose real margin ℓ_o − max ℓ_m is about `target` (b_U[o] lowered): the real rule's
    bound is nearly exact there (Lemma R with one token per position)."""
    return planted_near_tie(family_random("ln_mlp_rope", 0).weights, target)


@pytest.fixture(scope="module")
def near_tie():
    return _near_tie()


def test_near_tie_real_proved_float32_not(near_tie):
    assert_float32_refuses_near_tie(*near_tie)


def _skip_widening(monkeypatch):
    """The float32 rule with every float32 error dropped: real tables, no Lemma S factor,
    no widening of the functionals, the LayerNorm and the unembedding exact."""
    from checker import float32 as fp
    from checker.rules import forward

    monkeypatch.setattr(f32.Tables, "MODEL", forward._Model)
    monkeypatch.setattr(f32.AtQuery, "widening", lambda self, a, y, col: 0.0)
    monkeypatch.setattr(f32, "U", 0.0)
    monkeypatch.setattr(fp, "dot_error", lambda n, s: 0.0)
    monkeypatch.setattr(fp, "mean_error", lambda n, s: 0.0)
    monkeypatch.setattr(fp, "gamma", lambda n: 0.0)
    monkeypatch.setattr(fp, "exp_factor", lambda: 1)
    monkeypatch.setattr(fp, "ETA", 0.0)


def test_near_tie_accepted_if_widening_skipped(near_tie, monkeypatch):
    """The rejection above is the widening's doing: with it skipped the relabelled real
    certificate is accepted (so a test would catch a rule that skipped it)."""
    loaded, claim = near_tie
    real = certify(loaded, claim, float_shadow=False)
    _skip_widening(monkeypatch)
    assert check_lines(relabelled(real.lines, "float32")).facts.semantics == "float32"


@pytest.mark.parametrize("name", [
    "maxany_v6_k6_ln_mlp_rope_seed0.overwhelm-5-free3.jsonl",
    "flipflop_k32_ln_mlp_rope_seed0.overwhelm-w0-free22.jsonl",
    "maxany_v16_k16_ln_mlp_rope_seed0.overwhelm-15x3-free10.jsonl"])
def test_shipped_real_certificates_relabelled_float32_rejected(name):
    """The shipped real family certificates relabelled float32: their hints (slack 1e-9)
    are not confirmed over the float32 enclosures (the float32 certificates of the same
    claims, written by gen-cert --semantics float32, verify: benchmarks/RESULTS.md)."""
    cert = MODELS.parent.parent / "certs" / name
    with pytest.raises(Rejected, match="not confirmed"):
        check_lines(relabelled(cert.read_text().splitlines(), "float32"))


def test_float32_certificate_relabelled_real_still_verifies():
    """The same lines prove the real theorem too (the float32 hints are the real rule's
    with a larger slack): a float32 certificate relabelled real is accepted as real."""
    loaded = shipped(V6)
    verdict = certify(loaded, SHIPPED_V6, float_shadow=False, semantics="float32")
    assert check_lines(relabelled(verdict.lines, "real")).facts.semantics == "real"


# --- scope ----------------------------------------------------------------------------------

def test_scope_refused_by_name():
    from overwhelm_fixtures import family_random as fr

    perm = Overwhelm((0, 1), 1, 0, free_perm=(0, 1))
    with pytest.raises(Rejected, match="permutation"):
        f32.refuse(fr("ln_mlp_rope").weights.dims, perm)
    free = Overwhelm((0,), 1, 0, free_cmp="<=", free=1)
    for name, why in (("lnpre_parallel", "normalization"), ("plain_mlp", "normalization")):
        with pytest.raises(Rejected, match=why):
            f32.refuse(fr(name).weights.dims, free)
    one = fr("ln_mlp_rope").weights.dims
    deep = Dims(one.d_vocab, one.n_ctx, one.d_model, one.d_head,
                family=replace(one.family, n_layers=2))
    with pytest.raises(Rejected, match="several layers"):
        f32.refuse(deep, free)


# --- the tables are float32 enclosures --------------------------------------------------------

def _rule_mats(weights):
    from mpmath import iv

    from checker.rules import forward
    from generator.certify.trace import Trace

    trace = Trace(weights)
    mats = {}
    for name in forward.inputs(trace.dims):
        value = trace.values[trace.quantity(name)]
        mats[name] = [[iv.mpf((float(a), float(b))) for a, b in zip(lo, hi)]
                      for lo, hi in zip(value.lo, value.hi)]
    return trace.dims, mats


def _float32_attention_inputs(weights, reverse: bool):
    """numpy float32 LN1, q, key, val per (head, position, token) (rotated), sums one term
    at a time left to right or reversed: arrays (H, k, v, h)."""
    from soundness_helpers import float32_dot, float32_layer_norm, float32_rotate

    from generator.model import rope_angles

    dims, f = weights.dims, weights.dims.family
    p = {k: np.asarray(v, dtype=F32) for k, v in weights.params.items()}
    k, v, d = dims.n_ctx, dims.d_vocab, dims.d_model
    x = np.broadcast_to(p["embed.W_E"][None], (k, v, d)).astype(F32)
    if f.positional == "standard":
        x = (x + p["pos_embed.W_pos"][:, None]).astype(F32)
    y = float32_layer_norm(x, f.ln_eps, p["blocks.0.ln1.w"], p["blocks.0.ln1.b"], reverse)
    att = "blocks.0.attn."
    out = {}
    for n in "QKV":
        out[n] = np.stack([(float32_dot(y, p[att + "W_" + n][j], reverse)
                            + p[att + "b_" + n][j]).astype(F32) for j in range(f.n_heads)])
    if f.positional == "rotary":
        ang = rope_angles(dims)
        cos, sin = np.cos(ang).astype(F32)[None, :, None], np.sin(ang).astype(F32)[None, :, None]
        for n in "QK":
            out[n] = float32_rotate(out[n], cos, sin, f.rotary_dim)
    return out


def _misses(tables, arrays) -> int:
    m, misses = tables.model, 0
    for name, table in (("Q", m.q), ("K", m.key), ("V", m.val)):
        arr = arrays[name]
        for j, i, u in itertools.product(range(arr.shape[0]), range(arr.shape[1]),
                                         range(arr.shape[2])):
            for c, x in enumerate(table[j][i][u]):
                misses += not (x.a <= float(arr[j, i, u, c]) <= x.b)
    return misses


def test_tables_contain_the_float32_attention_inputs():
    """The float32 rule's tables (Float32Model) contain the numpy float32 query, key and
    value of every (head, position, token) in two summation orders; the real rule's tables
    (forward._Model: exact-real enclosures) do not — so tables left real are caught."""
    from checker.rules import overwhelm_family as real_rule

    weights = shipped(V6).weights
    dims, mats = _rule_mats(weights)
    float_tables = f32.Tables(dims, mats, lambda work: None)
    real_tables = real_rule.Tables(dims, mats, lambda work: None)
    for reverse in (False, True):
        arrays = _float32_attention_inputs(weights, reverse)
        assert _misses(float_tables, arrays) == 0
        assert _misses(real_tables, arrays) > 0


# --- each float32 error term is present (against an independent float64 evaluation) ----------

def _float64_trace(weights, seq):
    """Float64 intermediates of one sequence at its last position (spec/theorem.md §2b)."""
    from generator.model import rope_angles

    dims, f = weights.dims, weights.dims.family
    w = {k: a.astype(np.float64) for k, a in weights.params.items()}
    att, L = "blocks.0.attn.", len(seq)

    def ln(x, which):
        c = x - x.mean(-1, keepdims=True)
        sigma = np.sqrt((c * c).mean(-1, keepdims=True) + f.ln_eps)
        return c, sigma, c / sigma * w[which + ".w"] + w[which + ".b"]

    x = w["embed.W_E"][list(seq)]
    _, _, a_in = ln(x, "blocks.0.ln1")
    q = np.einsum("d,jdh->jh", a_in[-1], w[att + "W_Q"]) + w[att + "b_Q"]
    key = np.einsum("ld,jdh->jlh", a_in, w[att + "W_K"]) + w[att + "b_K"][:, None]
    val = np.einsum("ld,jdh->jlh", a_in, w[att + "W_V"]) + w[att + "b_V"][:, None]
    ang = rope_angles(dims)[:L]
    cos, sin, half, r = np.cos(ang), np.sin(ang), f.rotary_dim // 2, f.rotary_dim

    def rot(t, c, s):
        out = t.copy()
        out[..., :half] = t[..., :half] * c - t[..., half:r] * s
        out[..., half:r] = t[..., half:r] * c + t[..., :half] * s
        return out
    q, key = rot(q, cos[-1], sin[-1]), rot(key, cos, sin)
    s = np.einsum("jh,jlh->jl", q, key) / np.sqrt(dims.d_head)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    z = np.einsum("jl,jlh->jh", a, val)
    resid = x[-1] + np.einsum("jh,jhd->d", z, w[att + "W_O"]) + w[att + "b_O"]
    _, _, y2 = ln(resid, "blocks.0.ln2")
    hidden = np.maximum(y2 @ w["blocks.0.mlp.W_in"] + w["blocks.0.mlp.b_in"], 0)
    resid2 = resid + hidden @ w["blocks.0.mlp.W_out"] + w["blocks.0.mlp.b_out"]
    c_f, sigma_f, y_f = ln(resid2, "ln_final")
    return dict(w=w, x_p=x[-1], val=val, z=z, resid2=resid2, c_f=c_f, sigma_f=sigma_f[0],
                y_f=y_f)


def test_every_float32_error_term_is_present(monkeypatch):
    """On a one-completion claim of the v6 model the float32 rule proves, each error term
    of spec/rules.md §overwhelm_family under float32 is at least its value at the sequence's
    own float64 quantities: Lemma S's spread γ_{n+1}, the residual sum's rounding Rr, the
    widening E(g_t) ≥ spread·max|vo·g_t| + Rr·|c(g_t)|, the unembedding's roundings, the
    final LayerNorm's deviation D and mean error Ec, and the weights' relative width 16u
    (Lemma S's exp factor).  Dropping any of them is caught here (the near-tie test only
    catches dropping all of them)."""
    loaded = shipped(V6)
    seq = (5, 2, 3)
    claim = Overwhelm((5,), 3, 5, free_cmp="==", free=1, over=(2,))
    captured = captured_checks(monkeypatch, f32.AtQuery)
    verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
    assert verdict.verdict == "proved"
    at = captured[-1]
    tr = _float64_trace(loaded.weights, seq)
    w, dims, f = tr["w"], loaded.weights.dims, loaded.weights.dims.family
    d, h, n, low = dims.d_model, dims.d_head, len(seq), 1 - 1e-9
    u = 2.0 ** -24
    assert at.spread >= _gamma(n + 1)
    w_o = w["blocks.0.attn.W_O"]  # (H, h, d)
    t_sum = (np.abs(tr["x_p"]) + np.abs(w["blocks.0.attn.b_O"])
             + np.einsum("jh,jhd->d", np.abs(tr["z"]), np.abs(w_o)))
    rr_ref = _gamma(f.n_heads * h + 2) * t_sum
    assert (np.array(at.rr) >= rr_ref * low).all()
    u_mat, b_u = w["unembed.W_U"], w["unembed.b_U"]
    o = claim.output
    wo_c = w_o - w_o.mean(-1, keepdims=True)
    unemb = _gamma(d + 1) * (np.abs(tr["y_f"]) @ np.abs(u_mat) + np.abs(b_u))
    w_f, b_f = w["ln_final.w"], w["ln_final.b"]
    n_f = tr["c_f"] / tr["sigma_f"]
    dev_ref = (_gamma(2) * (np.abs(n_f * w_f) + np.abs(b_f))
               + np.abs(w_f) * _gamma(8) * np.abs(tr["c_f"]) / tr["sigma_f"])
    for t in range(dims.d_vocab):
        if t == o:
            continue
        g = (u_mat[:, t] - u_mat[:, o]) * w_f
        cg = g - g.mean()
        vo_g = np.einsum("jlh,jhd,d->jl", tr["val"], wo_c, g)
        e_ref = float(rr_ref @ np.abs(cg)) + _gamma(n + 1) * float(np.abs(vo_g).max(-1).sum())
        assert at.parts[t]["E"] >= e_ref * low, t
        assert at.parts[t]["unembed"] >= (unemb[t] + unemb[o]) * low, t
        dt = np.abs(u_mat[:, t] - u_mat[:, o])
        assert float(np.array(at.last_dev) @ dt) >= float(dev_ref @ dt) * low, t
    r2 = tr["resid2"]
    ec_ref = _gamma(d + 1) * np.abs(r2).sum() / d + u * np.abs(tr["c_f"])
    assert (np.array(at.last_ec) >= ec_ref * low).all()
    for head in at.heads:
        for x in head.w.values():
            assert float((x.b - x.a).a) >= 15 * u * float(x.b)  # a lower bound of the width
