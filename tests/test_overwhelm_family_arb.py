"""Rule overwhelm_family under `--arith arb` (checker/rules/overwhelm_family_arb.py): the
same verdict as the mpmath reference on the shipped certificates, on the generator's
certificates and forced certificates of tests/test_overwhelm_family.py's models and
claims, and on its mutants (forged hints); Lemma R's Arb sum against exact rationals."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flint")

from overwhelm_fixtures import check_lines, family_random, shipped  # noqa: E402
from test_overwhelm_family import (  # noqa: E402
    CASES,
    SMALL_FAMILY,
    _edit_hint,
    _proved_lines,
    _widest_pair,
)

from checker.errors import Malformed, Rejected  # noqa: E402
from generator.overwhelm import certify  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _verdict(lines, arith):
    """('accepted', theorem) or (error class, message) of checking `lines` with `arith`."""
    try:
        report = check_lines(lines, arith=arith)
    except (Rejected, Malformed) as e:
        return type(e).__name__, str(e)
    return "accepted", str(report.facts.overwhelm)


@pytest.fixture
def arb_used(monkeypatch):
    """Counts the Lemma R bounds the Arb heads decide themselves (not the reference)."""
    from checker.rules import overwhelm_family_arb as arb_rule

    calls = {"arb": 0}
    original = arb_rule.ArbHead.average_below

    def counting(self, y, col, lam, sign=1, key=None):
        if not self.perm:
            calls["arb"] += 1
        return original(self, y, col, lam, sign, key)

    monkeypatch.setattr(arb_rule.ArbHead, "average_below", counting)
    return calls


def _same(lines):
    ref, fast = _verdict(lines, "mpmath"), _verdict(lines, "arb")
    assert ref == fast
    return ref


@pytest.mark.parametrize("name, model, claims, expect_proofs", CASES, ids=[c[0] for c in CASES])
def test_both_backends_agree_on_every_claim(name, model, claims, expect_proofs, arb_used):
    loaded = model()
    kinds = set()
    for claim in claims():
        verdict = certify(loaded, claim, float_shadow=False)
        kinds.add(_same(verdict.lines)[0] if verdict.verdict == "proved" else "not proved")
        forced = certify(loaded, verdict.claim, float_shadow=False, force=True)
        kinds.add(_same(forced.lines)[0])
    assert arb_used["arb"] > 0
    if expect_proofs:
        assert "accepted" in kinds, kinds
    assert kinds - {"accepted", "not proved"}, kinds  # some forced claims are refused


SHIPPED = sorted(
    line.split()[:2] for line in (ROOT / "certs" / "POLICY").read_text().splitlines()
    if line and not line.startswith("#") and ".overwhelm" in line.split()[0])


@pytest.mark.parametrize("cert, model", SHIPPED, ids=[c for c, _ in SHIPPED])
def test_shipped_family_certificates_agree(cert, model, arb_used):
    """Every shipped overwhelm_family certificate (the v16 one takes seconds per back-end)."""
    path = ROOT / "certs" / cert
    lines = path.read_text().splitlines()
    if not any(json.loads(x).get("rule") == "overwhelm_family" for x in lines):
        pytest.skip("not an overwhelm_family certificate")
    from checker import arith as backends
    from checker.cli import check_file
    from checker.limits import Limits

    verdicts = []
    for arith in ("mpmath", "arb"):
        report = check_file(str(path), Limits(), str((ROOT / "certs" / model).resolve()),
                            arith=backends.get(arith))
        verdicts.append((str(report.facts.overwhelm), report.rule_notes[0].split(" (")[0]))
    assert verdicts[0] == verdicts[1]


# -- mutants (tests/test_overwhelm_family.py's forged hints) ----------------------------------

def _shrink_upper(arr):
    k = _widest_pair(arr)
    arr[2 * k + 1] = (arr[2 * k] + arr[2 * k + 1]) / 2


def _raise_lower(arr):
    k = _widest_pair(arr)
    arr[2 * k] = (arr[2 * k] + arr[2 * k + 1]) / 2


def _lower_first(arr):
    arr[0] -= 1.0


def _plus_100(arr):
    arr[:] = arr + 100.0


def _negate(arr):
    arr[:] = -arr


def _tiny_shrink(arr):  # the smallest forgery: one ulp below the hinted upper end
    k = _widest_pair(arr)
    arr[2 * k + 1] = np.nextafter(arr[2 * k + 1], -np.inf)


MUTANTS = [(1, 1, _shrink_upper), (3, 1, _shrink_upper), (2, 1, _raise_lower),
           (3, 2, _shrink_upper), (1, 3, _lower_first), (2, 5, _plus_100), (2, 4, _negate),
           (2, 1, _tiny_shrink), (3, 2, _tiny_shrink)]


@pytest.mark.parametrize("entry, field, edit", MUTANTS)
def test_mutants_get_the_same_verdict(entry, field, edit, arb_used):
    verdict = _same(_edit_hint(_proved_lines(), entry, field, edit))
    assert arb_used["arb"] > 0
    if edit is not _tiny_shrink:
        assert verdict[0] == "Rejected", verdict


def test_unmodified_and_wrong_output_agree():
    from checker.statement import Overwhelm

    assert _same(_proved_lines())[0] == "accepted"
    claim = Overwhelm((5,), 3, 4, free_cmp="<=", free=3)
    assert _same(certify(shipped(SMALL_FAMILY), claim, float_shadow=False,
                         force=True).lines)[0] == "Rejected"


def test_permutation_claims_take_the_reference_path():
    from checker.rules.overwhelm_family import AtQuery
    from checker.rules.overwhelm_family_arb import query_checker
    from checker.statement import Overwhelm

    assert query_checker(Overwhelm((5, 1), 2, 5, free_perm=(0, 3, 4))) is AtQuery
    loaded = family_random("ln_mlp_rope")
    claim = Overwhelm((2, 3), 3, -1, free_perm=(0, 1))
    _same(certify(loaded, claim, float_shadow=False, force=True).lines)


# -- Lemma R with Arb against exact rationals ---------------------------------------------------

def _heads(w_iv, y_slots, slots):
    """A reference Head and its ArbHead over given weights (intervals) and slots."""
    from mpmath import iv  # noqa: F401

    from checker.rules.overwhelm_family import Head
    from checker.rules.overwhelm_family_arb import ArbHead, _Converter

    head = Head.__new__(Head)
    head.slots, head.perm, head.w = slots, None, w_iv
    width = max(len(t) for t in slots)
    head.tables = type("T", (), {"row": staticmethod(lambda i, u: width * i + u)})()
    return head, ArbHead(head, _Converter())


def _frac(raw) -> Fraction:
    """The raw mpmath number exactly."""
    sign, man, exp, _ = raw
    return (-1 if sign else 1) * Fraction(man) * Fraction(2) ** exp


def _exact_sum(w_ends, y_ends, slots, lam, sign, width):
    """max over W in [w_lo, w_hi], Y in [y_lo, y_hi] of Σ_i max_u W(Y·sign − λ) (exact):
    per term the worst corner."""
    total = Fraction(0)
    for i, toks in enumerate(slots):
        best = None
        for u in toks:
            (wl, wh), (yl, yh) = w_ends[(i, u)], y_ends[width * i + u]
            a = (yh if sign > 0 else -yl) - Fraction(lam)
            b = max(wl * a, wh * a)
            best = b if best is None else max(best, b)
        total += best
    return total


@pytest.mark.parametrize("seed", range(6))
def test_arb_lemma_r_against_exact_rationals(seed):
    """The integer sum decides like the reference and exactly as the sign of the exact left
    side of Lemma R over every real of every enclosure (< 0: accepted).  (Breaks tried:
    w_hi for a < 0; λ shifted by one bit too few: both caught here.)  Adversarial: λ at the exact
    optimum (ties), ± a few ulps; huge and tiny magnitudes; subnormal weights; cancellation
    (y close to λ)."""
    from mpmath import iv

    rng = np.random.default_rng(seed)
    slots = [[1], [0, 1, 2], [0, 1, 2], [0, 1, 2], [2]]
    width, scale = 3, [1.0, 1e-300, 1e300, 1.0, 1e-5, 1.0][seed]
    for trial in range(12):
        w = rng.uniform(0.1, 3.0, size=(5, 3))
        if trial % 4 == 1:
            w[rng.integers(5), :] = 5e-324  # subnormal weights
        y = rng.normal(size=(5, 3)) * scale
        rad = np.abs(rng.normal(size=(5, 3))) * scale * (1e-12 if trial % 2 else 0.0)
        w_iv = {(i, u): iv.mpf((float(w[i, u]), float(np.nextafter(w[i, u], np.inf))))
                for i in range(5) for u in range(3)}
        ymat = [[iv.mpf((float(y[i, u] - rad[i, u]), float(y[i, u] + rad[i, u])))]
                for i in range(5) for u in range(3)]
        head, fast = _heads(w_iv, ymat, slots)
        w_ends = {k: tuple(map(_frac, v._mpi_)) for k, v in w_iv.items()}
        y_ends = [tuple(map(_frac, r[0]._mpi_)) for r in ymat]
        best = max(sum(w[i, t[i]] * y[i, t[i]] for i in range(5)) /
                   sum(w[i, t[i]] for i in range(5)) for t in itertools.product(*slots))
        candidates = [float(best), float(y[2, 1]), float(y[0, 1])]
        for c in list(candidates):
            candidates += [float(np.nextafter(c, np.inf)), float(np.nextafter(c, -np.inf)),
                           c * (1 + 1e-9), c * (1 - 1e-9)]
        for lam in candidates:
            for sign in (1, -1):
                lam_s = lam if sign > 0 else -lam
                ref = head.average_below(ymat, 0, lam_s, sign)
                got = fast.average_below(ymat, 0, lam_s, sign)
                assert ref == got, (seed, trial, lam, sign)
                # the integer path decides the exact sum over the enclosures' ends
                assert got == (_exact_sum(w_ends, y_ends, slots, lam_s, sign, width) < 0)


def test_converter_points_are_exact():
    from mpmath import mpf

    from checker.rules.overwhelm_family_arb import _Converter

    conv = _Converter()
    rng = np.random.default_rng(3)
    values = [0.0, -0.0, 5e-324, -5e-324, 1.7976931348623157e308, 2.0 ** -1074 * 3]
    values += list(rng.normal(size=50) * 10.0 ** rng.integers(-300, 300, size=50))
    for x in values:
        raw = mpf(x)._mpf_
        point = conv.point(raw)
        assert point.rad() == 0
        man, exp = point.mid().man_exp() if x else (0, 0)
        assert Fraction(int(man)) * Fraction(2) ** int(exp) == Fraction(x)
    for raw in (mpf("inf")._mpf_, mpf("-inf")._mpf_, mpf("nan")._mpf_):
        assert conv.point(raw) is None


def test_a_non_finite_column_takes_the_reference_path():
    from mpmath import iv

    slots = [[0], [0, 1]]
    w_iv = {(i, u): iv.mpf(1.0) for i in range(2) for u in range(2)}
    ymat = [[iv.mpf(0.5)], [iv.mpf((-1.0, float("inf")))], [iv.mpf(0.25)], [iv.mpf(0.25)]]
    head, fast = _heads(w_iv, ymat, slots)
    for lam in (0.0, 1.0, 1e300):
        assert fast.average_below(ymat, 0, lam) == head.average_below(ymat, 0, lam)


def test_a_weight_below_zero_is_rejected_as_by_the_reference():
    from mpmath import iv

    slots = [[0], [0, 1]]
    w_iv = {(i, u): iv.mpf((-1e-30, 1.0)) for i in range(2) for u in range(2)}
    ymat = [[iv.mpf(0.5)] for _ in range(4)]
    head, fast = _heads(w_iv, ymat, slots)
    for h in (head, fast):
        with pytest.raises(Rejected, match="weight"):
            h.average_below(ymat, 0, 1.0)


# -- the batched tables: inside the reference's, enclosing the exact values ------------------

def _raw(matrix):
    return [[x._mpi_ for x in row] for row in matrix]


@pytest.mark.parametrize("seed", range(4))
def test_exact_matmul_is_the_reference_product(seed):
    """exact_matmul == arith/mp.matmul entry by entry (raw endpoints): point × interval,
    interval × point, interval × interval (the reference itself), with cancellation, huge
    and tiny magnitudes, subnormals and zeros."""
    from mpmath import iv

    from checker.arith import mp
    from checker.rules.overwhelm_family_arb import exact_matmul

    rng = np.random.default_rng(seed)

    def matrix(r, c, points):
        mags = 10.0 ** rng.integers(-300, 300, size=(r, c)) if seed % 2 else np.ones((r, c))
        mid = rng.normal(size=(r, c)) * mags
        mid[rng.random((r, c)) < 0.1] = 0.0
        mid[rng.random((r, c)) < 0.05] = 5e-324
        rad = 0 if points else np.abs(rng.normal(size=(r, c))) * np.abs(mid) * 1e-3
        return [[iv.mpf((float(a - e), float(a + e))) if not points else iv.mpf(float(a))
                 for a, e in zip(m_row, r_row)]
                for m_row, r_row in zip(mid, np.broadcast_to(rad, (r, c)))]

    for r, n, c in [(1, 1, 1), (4, 7, 3), (9, 5, 8)]:
        for a_points, b_points in [(False, True), (True, False), (True, True), (False, False)]:
            a, b = matrix(r, n, a_points), matrix(n, c, b_points)
            if not a_points:  # cancellation: a row against a column of opposite signs
                b[0][0] = iv.mpf(1.0)
            assert _raw(exact_matmul(a, b, lambda: None)) == _raw(mp.matmul(a, b, lambda: None))


def _inside(fast_raw, ref_raw) -> bool:
    """The raw interval fast_raw lies inside ref_raw (exact comparison of the ends)."""
    return _frac(ref_raw[0]) <= _frac(fast_raw[0]) and _frac(fast_raw[1]) <= _frac(ref_raw[1])


def _captured_inputs(name):
    """(dims, mats) as the checker builds them for a claim on model `name`."""
    from checker.rules import overwhelm_family as rule
    from checker.rules.overwhelm_family import Tables
    from checker.statement import Overwhelm

    loaded = shipped(SMALL_FAMILY) if name == "small_trained" else family_random(name)
    seen = []

    class Capture(Tables):  # the checker's own inputs (mpmath intervals)
        def __init__(self, dims, mats, charge):
            seen.append((dims, mats))
            super().__init__(dims, mats, charge)

    original, rule.Tables = rule.Tables, Capture
    try:
        claim = Overwhelm((1,), 2, 1, free_cmp="<=", free=2)
        _verdict(certify(loaded, claim, float_shadow=False, force=True).lines, "mpmath")
    finally:
        rule.Tables = original
    return seen[0]


TABLE_MODELS = ["ln_mlp_rope", "small_trained", "plain_mlp", "lnpre_parallel", "ln_rope"]


@pytest.mark.parametrize("name", TABLE_MODELS)
def test_batched_tables_inside_the_reference(name):
    """The batched tables (exact products with the bias folded in, RoPE on the exact
    integers, one outward rounding) lie inside the reference's, entry by entry; the LayerNorm
    residuals and VO_j are the reference's bit for bit; the same work is charged.  (Break
    tried: exact_rotate's a·c − b·s with + instead of −; the bias row doubled: both caught
    here.)  The biases of Q, K, V are replaced by random non-zero points (the fixtures' are
    0), so the folded bias row is exercised."""
    from mpmath import iv

    from checker.rules.overwhelm_family import Tables
    from checker.rules.overwhelm_family_arb import BatchedTables

    dims, mats = _captured_inputs(name)
    rng = np.random.default_rng(7)
    mats = dict(mats)
    for name_ in ("b_Q", "b_K", "b_V"):
        mats[name_] = [[iv.mpf(float(x)) for x in rng.normal(size=len(row))]
                       for row in mats[name_]]
    charges = [[], []]
    ref = Tables(dims, mats, charges[0].append)
    fast = BatchedTables(dims, mats, charges[1].append)
    # the same work charged (the clock ticks, charge(0), are counted differently)
    assert [c for c in charges[0] if c] == [c for c in charges[1] if c]

    def flat(t, depth):
        for _ in range(depth):
            t = [x for part in t for x in part]
        return [x._mpi_ for x in t]

    tighter = 0
    for attr in ("q", "key", "val"):
        r, f = flat(getattr(ref.model, attr), 3), flat(getattr(fast.model, attr), 3)
        assert len(r) == len(f)
        assert all(_inside(x, y) for x, y in zip(f, r)), attr
        tighter += sum(x != y for x, y in zip(f, r))
    if dims.family.positional == "rotary":  # RoPE on the exact products: one rounding
        assert tighter > 0
    assert flat(ref.model.resid0, 2) == flat(fast.model.resid0, 2)
    for m_ref, m_fast in zip(ref.vo, fast.vo):
        assert all(_inside(x, y) for x, y in zip(sum(_raw(m_fast), []), sum(_raw(m_ref), [])))


@pytest.mark.parametrize("name", ["ln_mlp_rope", "small_trained", "plain_mlp"])
def test_exact_scores_inside_the_reference(name):
    """exact_scores' q·key lies inside the reference's dot(q, key) (rounded at every step) and
    contains the exact rational q_lo·key_lo (a point of the range), for every slot, query
    position and head; raw_head's weight ratios w(i, u)/w(p, query) meet the reference's
    (both contain exp(s(i, u) − s(p, query))).  (Break tried: int_matmul on the key rows of
    the wrong position: caught here.)"""

    from checker.rules.overwhelm_family import Head, dot
    from checker.rules.overwhelm_family_arb import BatchedTables, exact_scores, raw_head

    dims, mats = _captured_inputs(name)
    tables = BatchedTables(dims, mats, lambda work: None)
    model = tables.model
    free = list(range(dims.d_vocab))
    for p in range(1, dims.n_ctx):
        slots = [[1]] + [free] * (p - 1) + [[2]]
        for j in range(dims.family.n_heads):
            q = model.q[j][p][2]
            scores = exact_scores(tables, j, p, slots)
            assert set(scores) == {(i, u) for i, toks in enumerate(slots) for u in toks}
            for (i, u), got in scores.items():
                key = model.key[j][i][u]
                assert _inside(got, dot(q, key)._mpi_)
                exact = sum(_frac(a._mpi_[0]) * _frac(b._mpi_[0]) for a, b in zip(q, key))
                assert _frac(got[0]) <= exact <= _frac(got[1])
            ref, fast = Head(tables, j, p, slots), raw_head(tables, j, p, slots)
            assert fast.slots == ref.slots and fast.perm is None and set(fast.w) == set(ref.w)
            base = (p, 2)
            for k in ref.w:
                r_ratio, f_ratio = ref.w[k] / ref.w[base], fast.w[k] / fast.w[base]
                assert max(r_ratio.a, f_ratio.a) <= min(r_ratio.b, f_ratio.b), k


def _rand_ivs(rng, n, scale=None, points=False):
    """n random mpmath intervals: magnitudes 1e±150 (scale None) or `scale`, with zeros,
    subnormals and (unless points) relative widths up to ~1e-3."""
    from mpmath import iv

    mags = 10.0 ** rng.integers(-150, 150, size=n) if scale is None else np.full(n, scale)
    mid = rng.normal(size=n) * mags
    mid[rng.random(n) < 0.15] = 0.0
    mid[rng.random(n) < 0.1] = 5e-324
    rad = 0 * mid if points else np.abs(rng.normal(size=n)) * np.abs(mid) * 1e-3
    return [iv.mpf((float(a - e), float(a + e))) for a, e in zip(mid, rad)]


def _corners(xs, rng):
    """A random end (lo or hi) of each interval, exactly."""
    return [_frac(x._mpi_[int(rng.integers(2))]) for x in xs]


@pytest.mark.parametrize("seed", range(8))
def test_exact_rotate_encloses_the_exact_rotation(seed):
    """exact_rotate's intervals contain the exact rational rotation at random ends of the
    inputs (cancellation: a·cos close to b·sin; 1e±150; subnormals; zeros) and lie inside
    the reference's forward._rotate.  (Break tried: the pass-through coordinates rounded at
    the rotated exponent; and min(bs) for max(bs): both caught here.)"""
    from checker.arith import mp
    from checker.rules import forward
    from checker.rules.overwhelm_family_arb import exact_rotate

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9)) * 2
    scale = None if seed % 2 else 1.0
    x = _rand_ivs(rng, n, scale)
    cos, sin = _rand_ivs(rng, n, 1.0), _rand_ivs(rng, n, 1.0)
    x[n // 2] = x[0] * cos[0] / sin[0] if sin[0].a > 0 else x[n // 2]  # cancellation
    (x_lo,), (x_hi,), e_x = mp._to_integers([x])
    (c_lo, s_lo), (c_hi, s_hi), e_cs = mp._to_integers([cos, sin])
    for r in sorted({n, 2 * (n // 4) or n}):
        got = exact_rotate(x_lo, x_hi, e_x, c_lo, c_hi, s_lo, s_hi, e_cs, r)
        ref = forward._rotate(x, cos, sin, r)
        assert all(_inside(g._mpi_, f._mpi_) for g, f in zip(got, ref))
        for _ in range(20):
            xs, cs, ss = _corners(x, rng), _corners(cos, rng), _corners(sin, rng)
            exact = list(xs)
            half = r // 2
            for j in range(half):
                exact[j] = xs[j] * cs[j] - xs[j + half] * ss[j]
                exact[j + half] = xs[j + half] * cs[j] + xs[j] * ss[j]
            for g, e in zip(got, exact):
                assert _frac(g._mpi_[0]) <= e <= _frac(g._mpi_[1])


@pytest.mark.parametrize("seed", range(6))
def test_exact_ints_encloses_the_exact_product(seed):
    """exact_ints (the batched tables' product, the bias as one more row against a column of
    ones) encloses the exact rational product at random ends of an interval factor times a
    point factor (either side), with 1e±150, subnormals, zeros and cancellation; its
    rounding is mp.matmul's.  (Break tried: B⁺/B⁻ swapped: caught here.)"""
    from mpmath import iv

    from checker.arith import mp
    from checker.rules.overwhelm_family_arb import exact_ints, exact_matmul

    rng = np.random.default_rng(seed)
    r, n, c = (int(x) for x in rng.integers(1, 7, size=3))
    scale = None if seed % 2 else 1.0
    a = [_rand_ivs(rng, n, scale) + [iv.mpf(1)] for _ in range(r)]
    b = [_rand_ivs(rng, c, scale, points=True) for _ in range(n + 1)]
    b[0] = [-x for x in b[1]]  # cancellation between the first two terms
    for left, right in ((a, b), ([[x for x in col] for col in zip(*b)],
                                 [[x for x in col] for col in zip(*a)])):
        lo, hi, e = exact_ints(left, right)
        assert exact_ints([[iv.mpf((0, 1))]], [[iv.mpf((0, 1))]]) is None
        for _ in range(10):
            pts = [_corners(row, rng) for row in left]
            rp = [[_frac(x._mpi_[0]) for x in row] for row in right]
            for i in range(len(left)):
                for j in range(len(right[0])):
                    exact = sum(pts[i][k] * rp[k][j] for k in range(len(right)))
                    assert Fraction(lo[i][j]) * Fraction(2) ** e <= exact
                    assert exact <= Fraction(hi[i][j]) * Fraction(2) ** e
        assert _raw(exact_matmul(left, right, lambda: None)) == \
            _raw(mp.matmul(left, right, lambda: None))


@pytest.mark.parametrize("seed", range(6))
def test_raw_steps_are_the_reference_ops(seed):
    """raw_dot, raw_rotate, raw_layer_norm == the reference's iv expressions bit for bit, on
    random intervals with cancellation, huge and tiny magnitudes, subnormals and zeros; and
    raw_dot's interval contains the exact rational Σ x_lo·y_lo (a point of the range)."""
    from mpmath import iv

    from checker.rules import forward
    from checker.rules.overwhelm_family import dot
    from checker.rules.overwhelm_family_arb import raw_dot, raw_layer_norm, raw_rotate

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9)) * 2

    def vec(points=False, scale=None):
        mags = 10.0 ** rng.integers(-150, 150, size=n) if scale is None else np.full(n, scale)
        mid = rng.normal(size=n) * mags
        mid[rng.random(n) < 0.15] = 0.0
        mid[rng.random(n) < 0.1] = 5e-324
        rad = 0 * mid if points else np.abs(rng.normal(size=n)) * np.abs(mid) * 1e-3
        return [iv.mpf((float(a - e), float(a + e))) for a, e in zip(mid, rad)]

    raw = lambda xs: [x._mpi_ for x in xs]  # noqa: E731
    prec = iv.prec
    x, y = vec(scale=None if seed % 2 else 1.0), vec(scale=None if seed % 2 else 1.0)
    y[0] = -x[0]  # cancellation
    ref = dot(x, y)._mpi_
    assert raw_dot(raw(x), raw(y), prec) == ref
    lo, hi = (_frac(e) for e in ref)
    exact = sum(_frac(a._mpi_[0]) * _frac(b._mpi_[0]) for a, b in zip(x, y))
    assert lo <= exact <= hi
    cos, sin = vec(scale=1.0), vec(scale=1.0)
    for r in (n, n // 2 if (n // 2) % 2 == 0 else n):
        assert raw_rotate(raw(x), raw(cos), raw(sin), r, prec) == \
            raw(forward._rotate(x, cos, sin, r))
    x = vec(scale=None if seed % 3 else 1.0)
    w, b = vec(points=True, scale=1.0), vec(points=True, scale=1.0)
    for eps in (1e-5, 5e-324, 1.0):
        assert raw_layer_norm(raw(x), eps, raw(w), raw(b), prec) == \
            raw(forward.layer_norm(x, eps, w, b))
        assert raw_layer_norm(raw(x), eps, None, None, prec) == \
            raw(forward.layer_norm(x, eps, None, None))


@pytest.mark.parametrize("seed", range(6))
def test_form_product_is_the_reference_product(seed):
    """form_product (BatchedTables.matmul / matmul_t: fmpz_mat products when a factor is all
    points, else mp.int_matmul) == mp.matmul entry by entry, with 1e±150, subnormals, zeros,
    cancellation, both sides points or intervals, b given transposed or not.  (Break tried:
    A⁺·B_hi + A⁻·B_lo as the lower end for a point A: caught here.)"""
    from mpmath import iv

    from checker.arith import mp
    from checker.rules.overwhelm_family_arb import IntMatrix, form_product

    rng = np.random.default_rng(seed)
    r, n, c = (int(x) for x in rng.integers(1, 7, size=3))
    scale = None if seed % 2 else 1.0
    for a_points, b_points in [(False, True), (True, False), (True, True), (False, False)]:
        a = [_rand_ivs(rng, n, scale, a_points) for _ in range(r)]
        b = [_rand_ivs(rng, c, scale, b_points) for _ in range(n)]
        if n > 1:
            b[1] = [-x for x in b[0]]
            a[0][1] = a[0][0] if a_points else iv.mpf(a[0][0].mid)
        ref = _raw(mp.matmul(a, b, lambda: None))
        assert _raw(form_product(IntMatrix(a), IntMatrix(b), False, lambda: None)) == ref
        b_t = [list(col) for col in zip(*b)]
        assert _raw(form_product(IntMatrix(a), IntMatrix(b_t), True, lambda: None)) == ref
