"""Low-rank EQKE (spec/rules.md §low-rank EQKE, checker/rules/subcubic_attention.py).

1. Lemma L itself: for every query q the checker's enclosure contains
   EQKE[q, ·] − c_q for the row constant c_q = (QG)_q·c — for the generator's
   hints and for garbage hints (any reals are sound: only the width changes).
2. Enumeration soundness: low-rank certificates of small models (k = 2–5) are
   accepted, and every sequence their gap table covers is correct by an
   independent float64 forward pass (cases shared with test_subcubic_soundness).
3. Mutants: forged hints, raised claims, wrong input terms — never accepted.
4. Options round-trip; the proof length is exact (the rule fails closed otherwise).
"""

from __future__ import annotations

import base64
import json
from fractions import Fraction

import numpy as np
import pytest
from mpmath.libmp import to_rational

from checker.arith import MPMATH
from checker.certificate import CertificateChecker
from checker.cli import main as check_cert
from checker.errors import Malformed, Rejected
from checker.modelspec import Dims
from checker.rules import subcubic_attention as checker_attention
from generator.certify.strategies import subcubic
from generator.certify.strategies import subcubic_attention as attention
from generator.ground_truth import count_correct
from tests.test_subcubic_soundness import CASES, _trained, assert_all_correct, certify, covered

LOW_RANK = ["subcubic:direct=min,near=2,attn=rank1,err=cs",
            "subcubic:direct=max_diff,near=0,attn=rank2,err=cs",
            "subcubic:direct=mean+diff,near=1,attn=rank1,err=exact",
            "subcubic:direct=min,near=1,attn=rank1,err=rowdiff",
            "subcubic:direct=min,near=2,attn=rank2,err=mean+rowdiff",
            "subcubic:direct=max_diff,near=2,attn=rank2,err=svd",
            "subcubic:direct=min,near=2,attn=rank4,err=cs"]


def _factors(seed, v=9, h=5, rank_one=3.0):
    """A query/key factor pair whose product is close to rank one (like EQKE)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((v, h)) * 0.3 + rank_one * np.eye(1, h)
    k = rng.standard_normal((v, h)) * 0.3 + np.outer(np.arange(v), np.eye(1, h)[0])
    return q, k


def _checker_enclosure(q, k, spec_hints):
    dims = Dims(q.shape[0], 3, q.shape[1], q.shape[1])
    spec = checker_attention.parse(spec_hints, dims)
    mats = {"QUERY_TOK": [[MPMATH.point(float(x)) for x in r] for r in q],
            "KEY_TOK": [[MPMATH.point(float(x)) for x in r] for r in k]}
    spent = []
    rows = checker_attention.enclosure(dims, mats, spec, spent.append, MPMATH)
    assert sum(spent) == checker_attention.work(dims, spec)
    return rows


def _exact(x) -> Fraction:
    """An interval's endpoint as an exact rational."""
    return Fraction(*to_rational(x))


def _assert_lemma_l(q, k, mats, error, rows):
    """EQKE[q, t] − c_q ∈ rows[q][t] for the row constant of Lemma L, in exact
    rational arithmetic (the inputs are floats: EQKE and c_q are exact)."""
    fq = [[Fraction(float(x)) for x in r] for r in q]
    fk = [[Fraction(float(x)) for x in r] for r in k]
    for i, qr in enumerate(fq):
        shift = Fraction(0)
        if error != "exact":
            qg = [sum(a * Fraction(float(g)) for a, g in zip(qr, col)) for col in mats["G"].T]
            kh = [[sum(a * Fraction(float(g)) for a, g in zip(kr, col)) for col in mats["H"].T]
                  for kr in fk]
        if error == "cs":
            shift = sum(x * Fraction(float(c)) for x, c in zip(qg, mats["c"][0]))
        elif error != "exact":  # rowdiff, svd: c_q = min_t (QG)_q·(KH)_t
            shift = min(sum(x * y for x, y in zip(qg, row)) for row in kh)
        for t, kr in enumerate(fk):
            value = sum(a * b for a, b in zip(qr, kr)) - shift
            lo, hi = rows[i][t]._mpi_
            assert _exact(lo) <= value <= _exact(hi), (i, t)


@pytest.mark.parametrize("error", ["cs", "rowdiff", "mean+rowdiff", "svd", "exact"])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("forge", ["none", "garbage", "no G, H", "only D"])
def test_lemma_l_enclosure_contains_shifted_eqke(seed, error, forge):
    """Any reals are sound hints (the enclosure only widens): random ones, no
    error factors (the remainder D carries the whole error), or nothing at all
    (D = I: EQKE is bounded through ‖Q_q‖·‖D‖_F·‖K_t‖ alone)."""
    q, k = _factors(seed)
    mats = attention.factor_hints(q, k, 1 + seed % 2, error)
    rng = np.random.default_rng(100 + seed)
    forged = {"garbage": lambda n, m: rng.standard_normal(m.shape),
              "no G, H": lambda n, m: 0 * m if n in "GH" else m,
              "only D": lambda n, m: 0 * m}
    if forge in forged:
        mats = {n: forged[forge](n, m) for n, m in mats.items()}
    rows = _checker_enclosure(q, k, attention.hints(mats, 1 + seed % 2, error))
    _assert_lemma_l(q, k, mats, error, rows)
    if forge == "none":  # and it is tight: the generator's float mirror agrees
        lo, hi = attention.enclosure(q, k, mats, error)
        widths = np.array([[float(x.delta) for x in r] for r in rows])
        assert np.all(widths <= (hi - lo) + 1e-9)


def _rank2_trap(alpha, seed=7):
    """A trained model with a rank-one change of W_K that makes token 0 attractive to
    about half of the queries (EQKE's second component): ~5% (alpha 4) or ~40%
    (alpha 8) of the sequences become wrong, and a rank-1 proof that ignored or
    underestimated its error term would certify some of them (checked: it does)."""
    weights = _trained(8, 4, 8, 800, seed)
    y = np.random.default_rng(seed).standard_normal(weights.W_K.shape[1])
    e_bar = weights.W_E + weights.W_pos.mean(axis=0)
    x = alpha * e_bar[0] / (e_bar[0] @ e_bar[0])
    return weights.replace(W_K=(weights.W_K + np.outer(x, y / np.linalg.norm(y)))
                           .astype(np.float32))


LOW_RANK_CASES = {**CASES, "v8k4-rank2-trap-4": lambda: _rank2_trap(4.0),
                  "v8k4-rank2-trap-8": lambda: _rank2_trap(8.0)}


@pytest.fixture(scope="module", params=sorted(LOW_RANK_CASES))
def case(request):
    return request.param, LOW_RANK_CASES[request.param]()


@pytest.mark.parametrize("strategy", LOW_RANK)
def test_every_covered_sequence_is_correct(case, strategy, tmp_path, capsys):
    name, weights = case
    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    model_path, cert, lines = certify(weights, tmp_path, strategy)
    assert check_cert([str(cert), "--model", str(model_path), "--json", "--jobs", "1"]) == 0
    proven = json.loads(capsys.readouterr().out)["correct"]
    rule = next(json.loads(s) for s in lines if '"kind":"rule"' in s)
    assert "attention" in rule["hints"] and "EQKE" not in rule["inputs"]
    n = assert_all_correct(weights, covered(rule["hints"], v, k), f"{name} {strategy}")
    assert n == proven, "counting formula disagrees with enumeration"
    assert proven <= count_correct(weights, progress=False).correct


def test_low_rank_is_nontrivial(tmp_path, capsys):
    """The enumeration above is not vacuous: a trained model keeps most of its bound."""
    weights = CASES["v12k4-trained"]()
    _, cert, _ = certify(weights, tmp_path, LOW_RANK[0])
    assert check_cert([str(cert), "--json", "--jobs", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["correct"] > 0.4 * 12 ** 4


# -- mutants -------------------------------------------------------------------

@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    weights = CASES["v12k4-trained"]()
    _, _, lines = certify(weights, tmp_path_factory.mktemp("lowrank"), LOW_RANK[0])
    return [json.loads(s) for s in lines]


def check(lines):
    checker = CertificateChecker()
    for obj in lines:
        checker.feed(json.dumps(obj))
    return checker.finish()


def mutate(lines, edit):
    out = json.loads(json.dumps(lines))
    edit(next(x for x in out if x["kind"] == "rule"), out)
    return out


def _scale_hint(name, factor):
    def edit(rule, _):
        att = rule["hints"]["attention"]
        raw = np.frombuffer(base64.b64decode(att[name]), dtype="<f8") * factor
        att[name] = attention.b64(raw)
    return edit


def test_original_verifies(cert):
    assert check(cert).facts.correct > 0


@pytest.mark.parametrize("name,factor", [("G", 0.5), ("H", 0.0), ("A", 0.9), ("B", 1.2)])
def test_forged_factor_hints_are_rejected(cert, name, factor):
    """A forged factorisation leaves a remainder D the checker bounds itself:
    the certified count would need a smaller error than the truth."""
    with pytest.raises(Rejected):
        check(mutate(cert, _scale_hint(name, factor)))


def test_centre_hint_changes_only_the_width(cert):
    """c is any vector (Lemma L): a far centre widens the enclosure, never unsound."""
    with pytest.raises(Rejected):
        check(mutate(cert, _scale_hint("c", 50.0)))


def test_raised_claim_is_rejected(cert):
    def edit(rule, lines):
        rule["claim"] += 1
        head, _ = lines[0]["theorem"].rsplit("correct >= ", 1)
        lines[0]["theorem"] = f"{head}correct >= {rule['claim']}"
    with pytest.raises(Rejected):
        check(mutate(cert, edit))


def test_swapped_factor_inputs_are_rejected(cert):
    def edit(rule, _):
        ins = rule["inputs"]
        ins["QUERY_TOK"], ins["KEY_TOK"] = ins["KEY_TOK"], ins["QUERY_TOK"]
    with pytest.raises(Rejected, match="not QUERY_TOK|not KEY_TOK"):
        check(mutate(cert, edit))


def test_undivided_key_is_rejected(cert):
    """KEY_TOK without the 1/sqrt(d_head): a different term, refused."""
    def edit(rule, lines):
        key = next(x for x in lines if x["id"] == rule["inputs"]["KEY_TOK"])
        rule["inputs"]["KEY_TOK"] = key["args"][0]
    with pytest.raises(Rejected, match="not KEY_TOK"):
        check(mutate(cert, edit))


@pytest.mark.parametrize("edit", [
    lambda r, _: r["hints"].pop("attention"),  # factor inputs without attention hints
    lambda r, _: r["inputs"].pop("KEY_TOK"),
    lambda r, _: r["hints"]["attention"].update(rank=2),  # hint sizes no longer match
    lambda r, _: r["hints"]["attention"].update(rank=0),
    lambda r, _: r["hints"]["attention"].update(error="exact"),  # key set of "cs"
    lambda r, _: r["hints"]["attention"].update(G="AAAA"),
    lambda r, _: r["hints"].update(attention=[1, 2]),
])
def test_malformed_attention_hints(cert, edit):
    with pytest.raises(Malformed):
        check(mutate(cert, edit))


def test_options_round_trip_and_default_name_unchanged():
    assert subcubic.Options().name() == "subcubic:direct=min,near=2"
    for name in LOW_RANK:
        assert subcubic.Options.parse(name).name() == name
    with pytest.raises(ValueError):
        subcubic.Options.parse("subcubic:err=cs")  # err only with a low-rank attn
    with pytest.raises(ValueError):
        subcubic.Options.parse("subcubic:attn=rank3,err=cs")


def test_paper_rows_are_declared():
    """benchmarks and the zoo pick the low-rank QK rows up from the strategy."""
    rows = subcubic.PAPER_ROWS
    for label in ("Low-rank QK", "Low-rank QK, SVD only", "Low-rank QK&EU"):
        assert label in rows.values()
    assert all(name in subcubic.VARIANTS for name in rows)


@pytest.mark.parametrize("error", ["cs", "rowdiff"])
def test_generator_underestimating_the_error_is_rejected(error, tmp_path, monkeypatch):
    """A generator that claims gaps from error widths × 0.3 (a forged error bound)
    is refused: the checker computes the widths itself."""
    monkeypatch.setattr(attention, "SAFETY", 0.3)
    weights = LOW_RANK_CASES["v8k4-rank2-trap-4"]()
    _, cert, _ = certify(weights, tmp_path, f"subcubic:direct=min,near=2,attn=rank1,err={error}")
    assert check_cert([str(cert), "--jobs", "1"]) == 1


def test_huge_hints_fail_closed(cert):
    """Norms beyond binary64 are refused (exit 2), never turned into a verdict."""
    with pytest.raises(Malformed):
        check(mutate(cert, _scale_hint("G", 1e300)))


@pytest.mark.parametrize("error", ["cs", "rowdiff", "mean+rowdiff", "svd", "exact"])
def test_arb_back_end_agrees(error, tmp_path, capsys):
    """The handler is written against checker/arith: Arb gives the same verdict,
    count and proof length as mpmath."""
    pytest.importorskip("flint")
    weights = CASES["v8k3-good"]()
    _, cert, _ = certify(weights, tmp_path, f"subcubic:direct=min,near=2,attn=rank2,err={error}")
    results = []
    for arith in ("mpmath", "arb"):
        assert check_cert([str(cert), "--json", "--arith", arith]) == 0
        out = json.loads(capsys.readouterr().out)
        results.append((out["correct"], out["work"]))
    assert results[0] == results[1]
