"""The max row-diff lemmas (checker/rules/rowdiff.py; paper Lemma 20 – Thm 26)
against exact rationals: every bound is >= the true row range for reals in the
enclosures, and the counted work equals the *_work formulas.  The mutation
tests show that these checks catch a dropped |·| and a swapped max/min."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from mpmath.libmp import to_rational

from checker.arith import MPMATH, Unavailable, get
from checker.rules import rowdiff

SEEDS = range(40)


class Counting:
    """A counting arithmetic as the rules use (ar.ar, ar.count)."""

    def __init__(self, backend):
        self.ar, self.count = backend, 0


def backends():
    out = [MPMATH]
    try:
        out.append(get("arb"))
    except Unavailable:
        pass
    return out


def exact(backend, bound) -> Fraction:
    """The exact rational value of a back-end upper bound."""
    if backend.name == "mpmath":
        return Fraction(*to_rational(bound))
    man, exp = bound.upper().man_exp()
    return Fraction(int(man)) * Fraction(2) ** int(exp)


def rand_matrix(rng, r, c, wide):
    """(lo, hi) float pairs, dyadic (exact), some with width."""
    out = []
    for _ in range(r):
        row = []
        for _ in range(c):
            lo = rng.randint(-40, 40) / 8
            hi = lo + (rng.randint(0, 8) / 16 if wide else 0)
            row.append((lo, hi))
        out.append(row)
    return out


def elements(backend, m):
    return [[backend.interval(lo, hi) for lo, hi in row] for row in m]


def pick(rng, m, corners=True):
    """A real matrix inside the boxes (exact): corners or random dyadic points."""
    out = []
    for row in m:
        out.append([Fraction(lo) + (Fraction(hi) - Fraction(lo)) *
                    (rng.randint(0, 1) if corners else Fraction(rng.randint(0, 16), 16))
                    for lo, hi in row])
    return out


def matmul(a, b):
    return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))]
            for i in range(len(a))]


def true_ranges(rows):
    return [max(r) - min(r) for r in rows]


def chain(rng, n, wide):
    """A_0 and [B_1..B_n] with random chained shapes."""
    dims = [rng.randint(1, 4) for _ in range(n + 2)]
    dims[-1] = max(dims[-1], 2)
    a0 = rand_matrix(rng, dims[0], dims[1], wide)
    mats = [rand_matrix(rng, dims[p], dims[p + 1], wide) for p in range(1, n + 1)]
    return a0, mats


def summaries_for(rng, backend, a0, mats, mode):
    """None, h_0 only (Thm 24), or every level (Thm 26); column means or random."""
    if mode == "none":
        return None
    out = []
    for p, m in enumerate([a0] + mats[:-1]):
        if mode == "first" and p > 0:
            out.append(None)
            continue
        if rng.random() < 0.5:
            out.append(rowdiff.column_means(Counting(backend), elements(backend, m)))
        else:
            out.append([backend.point(rng.randint(-20, 20) / 4) for _ in m[0]])
    return out


def violations(backend, seeds=SEEDS, samples=6):
    """(checked, violated) over random chains/summaries/enclosures."""
    checked = bad = 0
    for seed in seeds:
        rng = random.Random(seed)
        n = rng.randint(1, 3)
        a0, mats = chain(rng, n, wide=seed % 2 == 1)
        mode = ("none", "first", "all")[seed % 3]
        hs = summaries_for(rng, backend, a0, mats, mode)
        ar = Counting(backend)
        bounds = rowdiff.product_row_ranges(ar, elements(backend, a0),
                                            [elements(backend, m) for m in mats], hs)
        assert ar.count == rowdiff.work_of(len(a0), mats, hs)
        for s in range(samples):
            real = [pick(rng, a0, corners=s % 2 == 0)] + [pick(rng, m, s % 2 == 0) for m in mats]
            prod = real[0]
            for m in real[1:]:
                prod = matmul(prod, m)
            for truth, bound in zip(true_ranges(prod), bounds):
                checked += 1
                bad += truth > exact(backend, bound)
    return checked, bad


@pytest.mark.parametrize("backend", backends(), ids=lambda b: b.name)
def test_bounds_hold_and_work_is_exact(backend):
    checked, bad = violations(backend)
    assert checked > 500 and bad == 0


def test_lemma20_matches_hand_example():
    """a = (1, −2), B = [[0, 3], [1, −1]]: aB = (−2, 5), range 7;
    Σ|a_k|·range(B_k) = 1·3 + 2·2 = 7 (tight here)."""
    ar = Counting(MPMATH)
    a = [MPMATH.point(1.0), MPMATH.point(-2.0)]
    b = elements(MPMATH, [[(0, 0), (3, 3)], [(1, 1), (-1, -1)]])
    bound = rowdiff.lemma20(ar, a, rowdiff.row_ranges(ar, b))
    assert exact(MPMATH, bound) == 7
    assert ar.count == 2 * rowdiff.row_range_work(2) + rowdiff.lemma20_work(2)


def test_thm24_summary_can_beat_thm21():
    """Rows close to their mean: the fused bound is far below the plain one."""
    ar = Counting(MPMATH)
    a = elements(MPMATH, [[(10, 10), (10.5, 10.5)], [(10.25, 10.25), (10, 10)]])
    b = elements(MPMATH, [[(0, 0), (1, 1)], [(1, 1), (0, 0)]])
    plain = rowdiff.max_of(ar, rowdiff.product_row_ranges(ar, a, [b]))
    h = rowdiff.column_means(ar, a)
    fused = rowdiff.max_of(ar, rowdiff.product_row_ranges(ar, a, [b], [h]))
    assert exact(MPMATH, fused) < exact(MPMATH, plain) / 10
    truth = max(true_ranges(matmul([[Fraction(10), Fraction(21, 2)], [Fraction(41, 4),
                                     Fraction(10)]], [[0, 1], [1, 0]])))
    assert truth <= exact(MPMATH, fused)


class _NoAbs:
    """A broken back-end: |x| replaced by x (the paper's sum without |a_k|)."""

    def __init__(self, backend):
        self._b = backend

    def __getattr__(self, name):
        return getattr(self._b, name)

    def abs(self, x):
        return x if self._b.is_nonnegative(x) else self._b.point(0.0)


class _SwappedMaxMin(_NoAbs):
    """A broken back-end: every exact comparison reversed, so row_range takes
    the smallest upper endpoint minus the largest lower one."""

    def abs(self, x):
        return self._b.abs(x)

    def greater(self, a, b):
        return self._b.greater(b, a)


@pytest.mark.parametrize("broken", [_NoAbs, _SwappedMaxMin])
def test_the_checks_catch_a_broken_lemma(broken):
    _, bad = violations(broken(MPMATH))
    assert bad > 0


@pytest.mark.parametrize("backend", backends(), ids=lambda b: b.name)
def test_one_sided_row_gaps_bound_every_column(backend):
    """row_gaps[m] >= max_{o≠m} (x_o − x_m) for reals in the boxes; exact work."""
    rng = random.Random(7)
    for seed in SEEDS:
        n = rng.randint(2, 6)
        row = rand_matrix(rng, 1, n, wide=seed % 2 == 1)[0]
        ar = Counting(backend)
        gaps = rowdiff.row_gaps(ar, [backend.interval(lo, hi) for lo, hi in row])
        assert ar.count == rowdiff.row_gaps_work(n)
        for s in range(6):
            x = pick(rng, [row], corners=s % 2 == 0)[0]
            for m in range(n):
                truth = max(x[o] - x[m] for o in range(n) if o != m)
                assert truth <= exact(backend, gaps[m])


def test_one_sided_row_gaps_catch_a_swapped_max():
    """The same check fails for the reversed comparison (the smallest entry instead)."""
    broken, rng = _SwappedMaxMin(MPMATH), random.Random(3)
    bad = 0
    for _ in range(20):
        row = rand_matrix(rng, 1, 4, wide=False)[0]
        gaps = rowdiff.row_gaps(Counting(broken), [MPMATH.interval(lo, hi) for lo, hi in row])
        x = [Fraction(lo) for lo, _ in row]
        bad += any(max(x[o] - x[m] for o in range(4) if o != m) > exact(MPMATH, gaps[m])
                   for m in range(4))
    assert bad > 0
