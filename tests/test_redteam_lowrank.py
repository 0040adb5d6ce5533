"""Red-team campaign against subcubic_gap's low-rank options (spec/rules.md
§subcubic_gap: low-rank EQKE "attention" hints A, B, G, H, c with error cs /
rowdiff / mean+rowdiff / svd / exact; low-rank EU "eu" hints rank, mean, basis T,
inverse T'; checker/rules/subcubic_attention.py, subcubic_direct.py, rowdiff.py).
Every hint is documented as "any value is sound": only the width changes.

Random attention-only models (tests/redteam_truth.py: d_vocab 2–4, n_ctx 2–3,
per-matrix scales 1e-30..10, biases, strong positions, equal token rows), the
generator's certificates for a grid of low-rank strategies, then mutants:

  * hint mutation: each attention matrix zeroed, negated, scaled by 1e±300, set to
    the smallest subnormal, replaced by noise, rows swapped; G = H = 0 (all the error
    in D); the EU basis T made singular with a forged inverse T' = I, T' = T, T
    scaled by 2^±60, the mean flag flipped, every rank 0..d;
  * claim mutation: on top of each mutant, every gap entry widened to g = 1,
    h = m + 1 and every missing (m, q, c) entry added (the claim grows).

Whenever the rule accepts, the sequences its gap hints cover must number exactly
what it proves and each must be correct by the independent 256-bit forward pass
(redteam_truth.margin).  An accepted incorrect sequence = a false theorem.
"""

from __future__ import annotations

import base64
import copy
import itertools
from fractions import Fraction

import numpy as np
import pytest
from redteam_truth import margin, random_model
from soundness_helpers import accepted_inputs, subcubic_covered

from checker.errors import Malformed, Rejected

rule = pytest.importorskip("checker.rules.subcubic_gap")
pytest.importorskip("checker.rules.subcubic_attention")
SEED = 20261126
STRATEGIES = ("subcubic:direct=min,near=2,attn=rank1,err=cs,eu=lowrank1",
              "subcubic:direct=max_diff,near=1,attn=rank1,err=rowdiff,eu=quad",
              "subcubic:direct=mean+diff,near=2,attn=rank1,err=mean+rowdiff,eu=quad_mean",
              "subcubic:direct=min,near=1,attn=rank1,err=svd,eu=svd_query",
              "subcubic:direct=max_diff,near=2,attn=rank1,err=exact,eu=lowrank0",
              "subcubic:direct=mean+diff,near=1,eu=lowrank2")
ERRS = ("cs", "rowdiff", "mean+rowdiff", "svd", "exact")
EUS = ("full", "lowrank0", "lowrank1", "lowrank2", "quad", "quad_mean", "svd_query")
DIRECTS = ("min", "max_diff", "mean+diff")
# the benchmark's grid: every error handling × every EU option (direct, near, rank cycle)
GRID = tuple(f"subcubic:direct={DIRECTS[i % 3]},near={i % 3},attn=rank{1 + i % 2},err={e}"
             + ("" if u == "full" else f",eu={u}")
             for i, (e, u) in enumerate(itertools.product(ERRS, EUS)))
TINY = 5e-324


def lines_for(w, tmp_path, strategy):
    from generator.certify.strategies import NotApplicable
    from generator.cli import generate
    from generator.modelfile import save_model

    path = tmp_path / "model.pt"
    save_model(path, w, None)
    try:
        return generate(str(path), strategy, float_shadow=False)[0]
    except (FloatingPointError, ZeroDivisionError, OverflowError, NotApplicable, ValueError,
            np.linalg.LinAlgError):
        return None


covered = subcubic_covered


# -- hint mutations -------------------------------------------------------------------------

def _b64(arr):
    return base64.b64encode(np.asarray(arr, "<f8").tobytes()).decode()


def _unb64(text):
    return np.frombuffer(base64.b64decode(text), dtype="<f8").copy()


def attention_mutants(att, h, rng):
    """(description, attention hints) for every matrix and mutation."""
    r = att["rank"]
    shapes = {"A": (h, r), "B": (h, r), "G": (h, h), "H": (h, h), "c": (1, h)}
    names = [n for n in ("A", "B", "G", "H", "c") if n in att]
    edits = {"zero": lambda a: np.zeros_like(a), "negate": lambda a: -a,
             "huge": lambda a: a * 1e300 + 1e300, "tiny": lambda a: a * 1e-300,
             "subnormal": lambda a: np.full_like(a, TINY),
             "noise": lambda a: rng.standard_normal(a.shape) * 10,
             "swap_rows": lambda a: a.reshape(shapes_[0])[::-1].reshape(-1)}
    for name in names:
        shapes_ = [shapes[name]]
        arr = _unb64(att[name])
        for ename, fn in edits.items():
            new = dict(att)
            new[name] = _b64(fn(arr))
            yield f"attention.{name}:{ename}", new
    if "G" in att:
        new = dict(att)
        new["G"] = new["H"] = _b64(np.zeros(h * h))
        yield "attention.GH:zero", new
        new = dict(att)  # G H^T = I: D = −A B^T, all of the low-rank part "cancelled"
        new["G"] = new["H"] = _b64(np.eye(h).reshape(-1))
        yield "attention.GH:identity", new
    for name, a, b in (("identity", np.eye(h), np.eye(h)),
                       ("noise", rng.standard_normal((h, h)), rng.standard_normal((h, h))),
                       ("half", np.eye(h), 0.5 * np.eye(h))):  # full rank: A B^T ≈ I or not
        new = dict(att, rank=h, A=_b64(a.reshape(-1)), B=_b64(b.reshape(-1)))
        yield f"attention.rank{h}:{name}", new


def eu_mutants(eu, d, rng):
    """(description, eu hints) with a singular / forged / extreme basis, every rank."""
    t = _unb64(eu["basis"]).reshape(d, d)
    cases = {}
    singular = t.copy()
    singular[0] = 0.0
    cases["singular_T_forged_inverse_I"] = (singular, np.eye(d))
    cases["T_prime_equals_T"] = (t, t)
    cases["T_zero"] = (np.zeros((d, d)), np.eye(d))
    cases["T_big_T_prime_small"] = (np.eye(d) * 2.0 ** 60, np.eye(d) * 2.0 ** -60)
    cases["T_noise"] = (rng.standard_normal((d, d)), rng.standard_normal((d, d)))
    cases["T_swapped_rows"] = (t[::-1], _unb64(eu["inverse"]).reshape(d, d))
    for name, (basis, inverse) in cases.items():
        for rank in range(d + 1):
            yield f"eu.{name}:rank{rank}", dict(eu, rank=rank, basis=_b64(basis.reshape(-1)),
                                                inverse=_b64(inverse.reshape(-1)))
    for rank in range(d + 1):
        yield f"eu.mean_flipped:rank{rank}", dict(eu, rank=rank, mean=not eu["mean"])


def all_entries(v, k):
    """Every admissible gap entry at its widest: g = 1, h = m + 1 (c = 0: 0, 0)."""
    out = {}
    for m in range(v):
        for q in range(m + 1):
            for c in range((k - 1 if q == m else k - 2) + 1):
                if c == 0:
                    out[(m, q, c)] = [m, q, c, 0, 0]
                elif m >= 1:
                    out[(m, q, c)] = [m, q, c, 1, m + 1]
    return out


def widened(hints, v, k, rng, n_single: int = 3):
    """The claim raised: [("all", every entry widest and present)] plus n_single
    variants with one entry widened or one missing entry added."""
    widest = all_entries(v, k)
    yield "all", dict(hints, gaps=[widest[x] for x in sorted(widest)])
    have = {tuple(e[:3]): i for i, e in enumerate(hints["gaps"])}
    keys = sorted(widest)
    for _ in range(n_single):
        x = keys[int(rng.integers(len(keys)))]
        gaps = copy.deepcopy(hints["gaps"])
        if x in have:
            gaps[have[x]] = list(widest[x])
        else:
            gaps.append(list(widest[x]))
        yield f"one:{x}", dict(hints, gaps=gaps)
    # a one-gap entry (g ≥ 2, c ≥ 2) turned into the two-gap entry (g − 1, g): one more
    # token allowed at one position (Lemma 6b)
    singles = [i for i, e in enumerate(hints["gaps"]) if len(e) == 5 and e[2] >= 2 and e[3] >= 2]
    if singles:
        i = singles[int(rng.integers(len(singles)))]
        gaps = copy.deepcopy(hints["gaps"])
        m, q, c, g, h = gaps[i]
        gaps[i] = [m, q, c, g - 1, h, g, h]
        yield f"two:{(m, q, c)}", dict(hints, gaps=gaps)


def mutants(hints, dims, rng):
    if "attention" in hints:
        for desc, att in attention_mutants(hints["attention"], dims.d_head, rng):
            yield desc, dict(hints, attention=att)
    if "eu" in hints:
        for desc, eu in eu_mutants(hints["eu"], dims.d_model, rng):
            yield desc, dict(hints, eu=eu)


# -- the campaign ---------------------------------------------------------------------------

def campaign(n_models, rng, tmp_path, strategies=STRATEGIES, v_max: int = 4):
    counts = dict(models=0, certificates=0, mutants=0, accepted=0, accepted_widened=0,
                  sequences_checked=0, false_theorems=0)
    findings = []
    for _ in range(n_models):
        v, k = int(rng.integers(2, v_max + 1)), int(rng.integers(2, 4))
        w = random_model(rng, v, k, int(rng.integers(1, 4)))
        counts["models"] += 1
        truth = {s: margin(w, s, max(s)) > 0 for s in itertools.product(range(v), repeat=k)}
        for strategy in strategies:
            lines = lines_for(w, tmp_path, strategy)
            replayed = lines and accepted_inputs(lines)
            if not replayed:
                continue
            counts["certificates"] += 1
            dims, mats, hints = replayed
            for desc, hv in itertools.chain([("none", hints)], mutants(hints, dims, rng)):
                for claim, hc in itertools.chain([("claimed", hv)], widened(hv, v, k, rng)):
                    if desc == "none" and claim == "claimed":
                        continue
                    counts["mutants"] += 1
                    try:
                        proven, _ = rule.check(dims, mats, hc, lambda work: None, 1)
                    except (Rejected, Malformed):
                        continue
                    counts["accepted"] += 1
                    counts["accepted_widened"] += claim != "claimed"
                    cov = covered(rule.parse_hints(hc, v, k)[1], v, k)
                    counts["sequences_checked"] += len(cov)
                    bad = [s for s in cov if not truth[s]]
                    if len(cov) != proven or bad:
                        counts["false_theorems"] += 1
                        findings.append((strategy, desc, claim, proven, len(cov), bad[:3]))
    return counts, findings


def test_no_lowrank_hint_or_claim_mutant_proves_a_false_theorem(tmp_path):
    counts, findings = campaign(7, np.random.default_rng(SEED), tmp_path)
    assert not findings, f"FALSE THEOREM(S): {findings[:3]} ({counts})"
    assert counts["certificates"] >= 5 and counts["accepted"] > 0, counts


def test_the_widened_claim_is_false_somewhere(tmp_path):
    """Not vacuous: on some model the widened claim covers an incorrect sequence,
    so accepting it would be a false theorem (and the rule rejects it)."""
    rng = np.random.default_rng(SEED)
    for _ in range(20):
        v, k = int(rng.integers(2, 5)), int(rng.integers(2, 4))
        w = random_model(rng, v, k, int(rng.integers(1, 4)))
        bad = [s for s in itertools.product(range(v), repeat=k) if margin(w, s, max(s)) <= 0]
        lines = bad and lines_for(w, tmp_path, STRATEGIES[0])
        replayed = lines and accepted_inputs(lines)
        if replayed:
            dims, mats, hints = replayed
            wide = next(widened(hints, v, k, rng))[1]
            assert set(bad) & covered(rule.parse_hints(wide, v, k)[1], v, k)
            with pytest.raises(Rejected):
                rule.check(dims, mats, wide, lambda work: None, 1)
            return
    pytest.fail("no model with an incorrect sequence and a low-rank certificate")


# -- the lemmas themselves under extreme hints (exact rational arithmetic) --------------------

def _eu_specs(d, rng):
    """Adversarial "eu" hints: singular T with a forged T', T = 0, 2^±60 scales
    (the parse limit is 2^±64), noise, T' = T; every rank; mean on and off."""
    singular = rng.standard_normal((d, d))
    singular[-1] = singular[0]
    bases = {"singular_forged_I": (singular, np.eye(d)),
             "zero": (np.zeros((d, d)), np.zeros((d, d))),
             "huge_tiny": (np.eye(d) * 2.0 ** 60, np.eye(d) * 2.0 ** -60),
             "huge_huge": (np.eye(d) * 2.0 ** 60, np.eye(d) * 2.0 ** 60),
             "noise": (rng.standard_normal((d, d)), rng.standard_normal((d, d))),
             "self_inverse_claim": (singular, singular)}
    for name, (t, tp) in bases.items():
        for rank in range(d + 1):
            for mean in (False, True):
                yield name, {"rank": rank, "mean": mean, "basis": _b64(t.reshape(-1)),
                             "inverse": _b64(tp.reshape(-1))}


@pytest.mark.parametrize("seed", range(3))
def test_low_rank_eu_tables_bound_every_logit_difference(seed):
    """subcubic_direct Lemma: U[q][m] >= EU[q, o] − EU[q, m] and N[q][m] >=
    R[q, o] − R[q, m] (R = EU − s) for every o != m, whatever the basis hints."""
    from mpmath.libmp import to_rational

    from checker.arith import MPMATH
    from checker.modelspec import Dims
    from checker.rules import subcubic_direct as direct

    rng = np.random.default_rng(SEED + seed)
    v, d = 5, 3
    x = rng.standard_normal((v, d)) * [1e-3, 1.0, 1e3]
    w_u = rng.standard_normal((d, v))
    b_u = rng.standard_normal(v)
    x[1] = x[0]  # equal rows: ties in EU
    mats = {"EU_LEFT": [[MPMATH.point(float(a)) for a in r] for r in x],
            "W_U": [[MPMATH.point(float(a)) for a in r] for r in w_u],
            "b_U": [[MPMATH.point(float(a)) for a in b_u]]}
    fx = [[Fraction(float(a)) for a in r] for r in x]
    fw = [[Fraction(float(a)) for a in r] for r in w_u]
    eu = [[sum(a * fw[i][o] for i, a in enumerate(r)) + Fraction(float(b_u[o]))
           for o in range(v)] for r in fx]
    dims = Dims(v, 3, d, d)
    n_specs = 0
    for name, hints in _eu_specs(d, rng):
        spec = direct.parse(hints, dims)
        out = direct.tables(dims, mats, spec, True, True, lambda work: None, MPMATH)
        h = [sum(r[i] for r in fx) / v for i in range(d)] if hints["mean"] else [0] * d
        s = [sum(h[i] * fw[i][o] for i in range(d)) + Fraction(float(b_u[o])) for o in range(v)]
        for q in range(v):
            for m in range(v):
                worst = max(eu[q][o] - eu[q][m] for o in range(v) if o != m)
                worst_r = max((eu[q][o] - s[o]) - (eu[q][m] - s[m]) for o in range(v) if o != m)
                assert Fraction(*to_rational(out.u[q][m])) >= worst, (name, hints["rank"], q, m)
                assert Fraction(*to_rational(out.n[q][m])) >= worst_r, (name, hints["rank"], q, m)
        n_specs += 1
    assert n_specs == 6 * (d + 1) * 2


@pytest.mark.parametrize("error", ["cs", "rowdiff", "mean+rowdiff", "svd", "exact"])
def test_lemma_l_under_extreme_attention_hints(error):
    """Lemma L (subcubic_attention): the enclosure contains EQKE[q, ·] − c_q for
    hints at 1e±150, the smallest subnormal, and G H^T = I − A B^T + tiny (the
    remainder D nearly cancelling)."""
    from generator.certify.strategies import subcubic_attention as attention
    from tests.test_subcubic_lowrank import _checker_enclosure, _factors


    q, k = _factors(3)
    base = attention.factor_hints(q, k, 1, error)
    h = q.shape[1]
    variants = {"huge": lambda n, m: m * 1e150, "tiny": lambda n, m: m * 1e-150,
                "subnormal": lambda n, m: np.full_like(m, TINY),
                "mixed": lambda n, m: m * (1e150 if n in "AG" else 1e-150)}
    cases = [{n: fn(n, np.asarray(m, float)) for n, m in base.items()}
             for fn in variants.values()]
    if "G" in base:  # D = I − A B^T − G H^T nearly cancelling
        mats = {n: np.asarray(m, float) for n, m in base.items()}
        mats["G"] = np.eye(h) - mats["A"] @ mats["B"].T
        mats["H"] = np.eye(h) * (1 - 1e-16)
        cases.append(mats)
    for mats in cases:
        try:
            rows = _checker_enclosure(q, k, attention.hints(mats, 1, error))
        except Malformed as err:  # fail-closed (exit 2): a norm beyond binary64
            assert "binary64" in str(err) or "square root" in str(err), err
            continue
        _assert_lemma_l_unbounded(q, k, mats, error, rows)


def _assert_lemma_l_unbounded(q, k, mats, error, rows):
    """tests/test_subcubic_lowrank._assert_lemma_l, with infinite endpoints allowed
    (an unbounded enclosure is sound)."""
    from mpmath.libmp import finf, fninf, to_rational

    def below(end, value):  # end <= value
        return end == fninf or (end != finf and Fraction(*to_rational(end)) <= value)

    def above(end, value):
        return end == finf or (end != fninf and Fraction(*to_rational(end)) >= value)

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
        elif error != "exact":
            shift = min(sum(x * y for x, y in zip(qg, row)) for row in kh)
        for t, kr in enumerate(fk):
            value = sum(a * b for a, b in zip(qr, kr)) - shift
            lo, hi = rows[i][t]._mpi_
            assert below(lo, value) and above(hi, value), (error, i, t)


def test_the_campaign_catches_a_broken_rule(tmp_path, monkeypatch):
    """Deliberately broken rule (the final `bound < 0` test of subcubic_gap made
    vacuous): the campaign must then report false theorems."""
    monkeypatch.setattr(rule, "_require", lambda *args: None)
    counts, findings = campaign(3, np.random.default_rng(SEED), tmp_path, STRATEGIES[:1])
    assert findings and counts["false_theorems"] > 0, counts
