"""float32 semantics for the overwhelm rules overwhelm_free / overwhelm_perm (issue 24;
spec/rules.md §float32 for the overwhelm rules: Lemma G@p and Lemma W-overwhelm).

- Lemma G@p itself: |float32 logit − real logit| ≤ δ_p[q][o] at every query position p,
  for every sequence of length p + 1, in several float32 evaluation orders (torch with the
  residual coordinates permuted, numpy left-to-right and reversed).
- float32 certificates verify (mpmath and arb: the same verdict) and say so.
- The widening matters: a planted overwhelm near-tie (real margin far below δ) is proved for
  the real semantics; its float32 certificate (forced) is rejected, and would be accepted
  if δ were zero (monkeypatched) -- so skipping the widening is caught.
- A real certificate relabelled float32 is rejected (overwhelm_family's too: its hints are
  not confirmed over the float32 enclosures; its float32 rule: test_float32_overwhelm_family).
- Enumeration: every completion a verified float32 claim covers evaluates to the claimed
  output, strictly, in float32 in several summation orders.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
from mpmath import iv
from overwhelm_fixtures import SMALL_FLIPFLOP, SMALL_MAXANY, Loaded, sharp_random, shipped
from soundness_helpers import float32_evaluations as shared_evaluations

from checker import float32 as fp
from checker.certificate import CertificateChecker
from checker.errors import Malformed, Rejected
from checker.modelspec import Dims
from checker.statement import Overwhelm
from generator.model import ModelWeights
from generator.overwhelm import certify
from generator.tasks.causal import logits_at

F32 = np.float32
NAMES = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_U", "b_U")


def check(lines, arith: str = "mpmath"):
    from checker import arith as backends

    checker = CertificateChecker(arith=backends.get(arith))
    for line in lines:
        checker.feed(line if isinstance(line, str) else json.dumps(line))
    return checker.finish()


def interval_weights(w) -> dict:
    return {n: [[iv.mpf(float(x)) for x in row] for row in np.atleast_2d(getattr(w, n))]
            for n in NAMES}


def truncated(w: ModelWeights, length: int) -> ModelWeights:
    """The same weights with n_ctx = length: its last position is position length − 1 of
    the original model on a sequence of that length (causal, spec/overwhelm.md §1)."""
    d = w.dims
    return ModelWeights(dims=Dims(d.d_vocab, length, d.d_model, d.d_head),
                        **{n: (getattr(w, n)[:length] if n == "W_pos" else getattr(w, n))
                           for n in NAMES})


def float32_evaluations(w: ModelWeights, tokens: np.ndarray, seed: int = 0) -> list:
    """Several float32 evaluations at the last position of sequences of one length
    (soundness_helpers.float32_evaluations on the model truncated to that length)."""
    return shared_evaluations(truncated(w, tokens.shape[1]), tokens, seed)


def completions(claim: Overwhelm, v: int):
    """Every admissible sequence s + t + [q], grouped by length (numpy arrays)."""
    if claim.free_perm is not None:
        groups = {len(claim.free_perm): sorted(set(itertools.permutations(claim.free_perm)))}
    else:
        alphabet = claim.over if claim.over is not None else range(v)
        groups = {n: list(itertools.product(alphabet, repeat=n)) for n in claim.lengths()}
    for ts in groups.values():
        yield np.array([claim.prefix + tuple(t) + (claim.query,) for t in ts], dtype=np.int64)


# --- Lemma G@p against float32 arithmetic --------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_lemma_g_at_every_query_position(seed):
    """|float32 − real| ≤ δ_p[q][o] at the last position of every sequence of length p + 1,
    for every p: the bound the overwhelm rules widen EU_Q@p by."""
    w = sharp_random(seed, v=4, k=5, d=6, sharpness=2.0).weights
    ws = interval_weights(w)
    worst_ratio = 0.0
    for p in range(w.dims.n_ctx):
        deltas = np.array(fp.attention_only_deltas(w.dims, ws, query_pos=p), dtype=float)
        tokens = np.array(list(itertools.product(range(w.dims.d_vocab), repeat=p + 1)))
        real = logits_at(w, tokens)
        delta = deltas[tokens[:, -1]]
        for f in float32_evaluations(w, tokens, seed):
            err = np.abs(f - real)
            assert (err <= delta).all(), p
            worst_ratio = max(worst_ratio, float((err / delta).max()))
    assert worst_ratio > 0  # the evaluations do round


def test_lemma_g_at_last_position_is_lemma_g():
    w = sharp_random(0).weights
    ws = interval_weights(w)
    assert fp.attention_only_deltas(w.dims, ws, query_pos=w.dims.n_ctx - 1) \
        == fp.attention_only_deltas(w.dims, ws)
    with pytest.raises(AssertionError):
        fp.attention_only_deltas(w.dims, ws, query_pos=w.dims.n_ctx)


def test_query_position_matters():
    """δ_p is computed at E[q] + P[p]: it differs between positions (a δ computed at the
    last position only would not be the right bound for the others)."""
    w = sharp_random(0).weights
    ws = interval_weights(w)
    rows = [fp.attention_only_deltas(w.dims, ws, query_pos=p) for p in range(w.dims.n_ctx)]
    assert len({json.dumps(r) for r in rows}) == w.dims.n_ctx


def _mixed_scales(seed: int, v=6, k=5, d=7, h=4) -> ModelWeights:
    """Adversarial for the row-only δ_p: rows of W_E and W_pos at very different binary
    exponents (2^-40 .. 2^12), an all-zero embedding row, exact powers of two and large
    alternating-sign projections, so a query row alone has a different common exponent
    than the whole table (the exact integers are scaled differently; the values must not
    change)."""
    g = np.random.default_rng(seed)
    emb = g.normal(size=(v, d)) * np.exp2(g.integers(-40, 12, size=(v, 1)))
    emb[1] = 0.0
    emb[2] = np.exp2(g.integers(-8, 8, size=d)) * g.choice([-1.0, 1.0], size=d)
    pos = g.normal(size=(k, d)) * np.exp2(g.integers(-30, 4, size=(k, 1)))
    alt = np.where((np.arange(d)[:, None] + np.arange(h)[None, :]) % 2, 1.0, -1.0)
    w = {"W_E": emb, "W_pos": pos,
         "W_Q": alt * 0.1 + g.normal(size=(d, h)) * 1e-3,
         "W_K": alt * 0.1 + g.normal(size=(d, h)) * 1e-3,
         "W_V": g.normal(size=(d, h)), "W_O": g.normal(size=(h, d)),
         "b_Q": g.normal(size=h), "b_K": g.normal(size=h) * 2.0 ** -30,
         "b_V": g.normal(size=h), "b_O": g.normal(size=d),
         "W_U": g.normal(size=(d, v)), "b_U": g.normal(size=v)}
    return ModelWeights(dims=Dims(v, k, d, h), **{n: a.astype(F32) for n, a in w.items()})


def _bits(row) -> list:
    return [float(x).hex() for x in row]


ROW_MODELS = {
    "sharp0": lambda: sharp_random(0).weights,
    "sharp1": lambda: sharp_random(1, v=4, k=5, d=6, sharpness=8.0).weights,
    "mixed0": lambda: _mixed_scales(0),
    "mixed3": lambda: _mixed_scales(3),
    "maxany": lambda: shipped(SMALL_MAXANY).weights,
}


@pytest.mark.parametrize("name", sorted(ROW_MODELS))
def test_delta_rows_are_the_full_rows_bit_for_bit(name):
    """attention_only_delta_rows (the checker's row-only δ_p, key tables shared across
    positions) equals row q of the full attention_only_deltas at query_pos = p, bit for bit
    (float.hex), for every position and several query tokens (first, last, random), with
    the positions given in a shuffled order and as a subset."""
    w = ROW_MODELS[name]()
    ws = interval_weights(w)
    v, k = w.dims.d_vocab, w.dims.n_ctx
    g = np.random.default_rng(len(name))
    full = {p: fp.attention_only_deltas(w.dims, ws, query_pos=p) for p in range(k)}
    assert len({json.dumps(full[p]) for p in full}) > 1  # positions differ (not vacuous)
    tokens = sorted({0, v - 1, int(g.integers(v)), int(g.integers(v))})
    for q in tokens:
        positions = [int(p) for p in g.permutation(k)]
        rows = fp.attention_only_delta_rows(w.dims, ws, q, positions)
        assert list(rows) == positions
        for p in positions:
            assert _bits(rows[p]) == _bits(full[p][q]), (q, p)
        sub = positions[:2]
        assert fp.attention_only_delta_rows(w.dims, ws, q, sub) == {p: rows[p] for p in sub}
        # rows differ across query tokens, so a wrong row would be seen
    assert len({json.dumps(full[k - 1][q]) for q in range(v)}) > 1


def test_delta_rows_other_tokens_and_bounds():
    """The row-only tables refuse a query position or token outside the model; the
    default widened_eu_row (no row given) is the row-only δ_p; the charged work is at most
    the full computation's per position and grows with the positions."""
    w = sharp_random(0).weights
    ws = interval_weights(w)
    v, k = w.dims.d_vocab, w.dims.n_ctx
    with pytest.raises(AssertionError):
        fp.attention_only_delta_rows(w.dims, ws, 0, [k])
    with pytest.raises(AssertionError):
        fp.attention_only_delta_rows(w.dims, ws, v, [0])
    lo, hi = tuple([0.0] * v), tuple([0.0] * v)
    q, p = 3, 2
    row = fp.attention_only_deltas(w.dims, ws, query_pos=p)[q]
    assert fp.widened_eu_row(w.dims, ws, lo, hi, q, p) \
        == fp.widened_eu_row(w.dims, ws, lo, hi, q, p, row=row)
    assert fp.widened_eu_row(w.dims, ws, lo, hi, q, p)[2] == max(row)
    assert fp.delta_row_work(w.dims, 1) < fp.delta_work(w.dims)
    assert fp.delta_row_work(w.dims, 1) < fp.delta_row_work(w.dims, 2) \
        < 2 * fp.delta_work(w.dims)


# --- certificates ----------------------------------------------------------------------------

CLAIMS = [
    (SMALL_MAXANY, Overwhelm((7,), 5, 7, free_cmp="<=", free=3)),
    (SMALL_MAXANY, Overwhelm((6,), 3, 6, free_perm=(0, 1, 2, 5))),
    (SMALL_FLIPFLOP, Overwhelm((1, 2, 0), 4, 0, free_cmp="<=", free=10, over=(2, 3))),
]


@pytest.mark.parametrize("path, claim", CLAIMS, ids=["free", "perm", "flipflop"])
def test_float32_certificate_verifies(path, claim):
    loaded = shipped(path)
    verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
    assert verdict.verdict == "proved"
    assert "semantics == float32" in json.loads(verdict.lines[0])["theorem"]
    reports = [check(verdict.lines, arith) for arith in ("mpmath", "arb")]
    for report in reports:
        assert report.facts.semantics == "float32"
        assert any("EU_Q@p widened" in n for n in report.rule_notes)
    real = certify(loaded, claim, float_shadow=False)
    assert check(real.lines).facts.semantics == "real"


@pytest.mark.parametrize("path, claim", [CLAIMS[0], CLAIMS[2]], ids=["free", "flipflop"])
def test_checker_widens_by_the_claims_row(path, claim, monkeypatch):
    """The rows the checker widens each EU_Q@p by (spied at float32.widened_eu_row) are
    row claim.query of the full attention_only_deltas at query_pos = p, bit for bit, for
    every query position of the claim: a wrong query token or position in certificate.py
    is caught here (the certificate would still verify)."""
    loaded = shipped(path)
    verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
    seen, real_widen = [], fp.widened_eu_row

    def spy(dims, w, lo, hi, q, p, int_matmul=None, row=None):
        seen.append((q, p, list(row), w))
        return real_widen(dims, w, lo, hi, q, p, int_matmul, row)

    monkeypatch.setattr(fp, "widened_eu_row", spy)
    check(verdict.lines)
    positions = [p for _, p, _, _ in seen]
    assert len(positions) > 1 and len(positions) == len(set(positions))
    assert max(positions) == len(claim.prefix) + claim.free  # the longest completion
    for q, p, row, w in seen:
        assert q == claim.query
        full = fp.attention_only_deltas(loaded.weights.dims, w, query_pos=p)
        assert _bits(row) == _bits(full[claim.query]), p


def test_check_cert_prints_the_semantics(tmp_path, capsys):
    from checker.cli import main as check_cert

    path, claim = CLAIMS[0]
    verdict = certify(shipped(path), claim, float_shadow=False, semantics="float32")
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(verdict.lines) + "\n")
    assert check_cert([str(cert)]) == 0
    assert "semantics: float32" in capsys.readouterr().out


# --- the planted near-tie: the widening is what rejects it -----------------------------------

@pytest.fixture(scope="module")
def near_tie():
    """An overwhelm claim (free == 1 over [0, 1]) whose real margin is positive but far
    below δ: b_U[o] lowered until o beats the runner-up by ~3e-7 on the worst completion."""
    w = sharp_random(0).weights
    claim = Overwhelm((2,), 3, -1, free_cmp="==", free=1, over=(0, 1))
    seqs = np.array([[2, t, 3] for t in (0, 1)])
    real = logits_at(w, seqs)
    o = int(np.argmax(real[0]))
    margin = min(float(r[o] - np.max(np.delete(r, o))) for r in real)
    assert margin > 0 and all(int(np.argmax(r)) == o for r in real)
    b_u = w.b_U.copy()
    b_u[o] = F32(float(b_u[o]) - margin + 3e-7)
    w2 = replace(w, b_U=b_u)
    real2 = logits_at(w2, seqs)
    margin2 = min(float(r[o] - np.max(np.delete(r, o))) for r in real2)
    delta = np.array(fp.attention_only_deltas(w2.dims, interval_weights(w2), query_pos=2))[3]
    assert 0 < margin2 < 0.1 * float(delta.max())
    return Loaded(w2), replace(claim, output=o)


def test_near_tie_real_proved_float32_rejected(near_tie):
    loaded, claim = near_tie
    real = certify(loaded, claim, float_shadow=False)
    assert real.verdict == "proved"
    check(real.lines)
    f32 = certify(loaded, claim, float_shadow=False, force=True, semantics="float32")
    assert f32.verdict != "proved"  # the generator mirrors the widening: it does not claim
    with pytest.raises(Rejected, match="not negative"):
        check(f32.lines)
    with pytest.raises(Rejected, match="not negative"):
        check(f32.lines, "arb")


def test_near_tie_accepted_if_widening_skipped(near_tie, monkeypatch):
    """The mutant: δ = 0 (no widening) accepts the float32 claim the real rule rejects, so the
    previous test fails if the widening is skipped."""
    loaded, claim = near_tie
    f32 = certify(loaded, claim, float_shadow=False, force=True, semantics="float32")
    monkeypatch.setattr(fp, "attention_only_delta_rows",
                        lambda dims, w, q, positions, int_matmul=None:
                        {p: [0.0] * dims.d_vocab for p in positions})
    assert check(f32.lines).facts.semantics == "float32"


def test_real_certificate_relabelled_float32_rejected(near_tie):
    loaded, claim = near_tie
    lines = [json.loads(s) for s in certify(loaded, claim, float_shadow=False).lines]
    lines[0]["theorem"] += " and semantics == float32"
    with pytest.raises((Malformed, Rejected)):
        check(lines)
    # with the weights added to the rule line the checker widens, and rejects the near-tie
    f32 = [json.loads(s) for s in certify(loaded, claim, float_shadow=False, force=True,
                                          semantics="float32").lines]
    rule = next(x for x in lines if x["kind"] == "rule")
    rule["inputs"] = next(x for x in f32 if x["kind"] == "rule")["inputs"]
    with pytest.raises((Malformed, Rejected)):
        check(lines)


def test_float32_relabelled_real_is_not_float32(near_tie):
    """A float32 certificate's proof does not prove 'semantics == real' either way round:
    dropping the atom leaves the weights as unexpected inputs (fail closed)."""
    path, claim = CLAIMS[0]
    lines = [json.loads(s) for s in certify(shipped(path), claim, float_shadow=False,
                                            semantics="float32").lines]
    lines[0]["theorem"] = lines[0]["theorem"].replace(" and semantics == float32", "")
    with pytest.raises((Malformed, Rejected)):
        check(lines)


def test_overwhelm_family_real_certificate_relabelled_float32_rejected():
    """overwhelm_family proves float32 (tests/test_float32_overwhelm_family.py), but a real
    certificate's hints (slack 1e-9) are not confirmed over the float32 enclosures."""
    from pathlib import Path

    cert = (Path(__file__).resolve().parent.parent / "certs"
            / "maxany_v6_k6_ln_mlp_rope_seed0.overwhelm-5-free3.jsonl")
    lines = [json.loads(s) for s in cert.read_text().splitlines()]
    lines[0]["theorem"] += " and semantics == float32"
    with pytest.raises(Rejected, match="not confirmed"):
        check(lines)


# --- enumeration: every completion is right in float32 ---------------------------------------

def _enum_claims(v):
    out = []
    for s0, q in itertools.product(range(v), range(v)):
        out.append(Overwhelm((s0,), q, -1, free_cmp="<=", free=3))
        out.append(Overwhelm((s0, q), q, -1, free_perm=(0, 1, 1)))
    return out


@pytest.mark.parametrize("model", [lambda: sharp_random(0), lambda: sharp_random(1, sharpness=8.0),
                                   lambda: shipped(SMALL_MAXANY)],
                         ids=["random0", "random1", "maxany_v8"])
def test_every_float32_claim_holds_in_float32(model):
    loaded = model()
    w, v = loaded.weights, loaded.weights.dims.d_vocab
    claims = _enum_claims(min(v, 5))
    accepted = 0
    for claim in claims:
        verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
        if verdict.verdict != "proved":
            continue
        report = check(verdict.lines)
        assert report.facts.semantics == "float32"
        o = verdict.claim.output
        accepted += 1
        for tokens in completions(verdict.claim, v):
            for logits in float32_evaluations(w, tokens):
                top = logits[:, o]
                others = np.delete(logits, o, axis=1).max(axis=1)
                assert (top > others).all(), (verdict.claim, tokens[top <= others][:3])
    assert accepted >= 3
