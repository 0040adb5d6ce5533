"""Property tests of the interval operations, checker and generator side.

For random small matrices of floats (negative, zero, subnormal, tiny and large
magnitudes) and random non-degenerate intervals:

* every checker op (checker/ops.py) returns intervals enclosing the exact real
  result -- computed with fractions.Fraction from the exact endpoints, or for
  exp with mpmath at 200 bits, and for div_sqrt by exact squaring -- for
  points inside the inputs, endpoints included (soundness of the checker);
* every generator op (generator/certify/intervals.py) does too (soundness of
  the generator);
* the checker's enclosure computed from the generator's inputs lies inside
  the generator's recorded output (checker.numbers.contains), so honest
  certificates pass;
* checker.numbers.decode_intervals refuses lo > hi, NaN, infinities and a
  wrong length.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from mpmath import iv, mp
from mpmath.libmp import finf, fninf, to_rational

from checker import ops
from checker.errors import Malformed
from checker.numbers import (
    contains,
    decode_intervals,
    encode_floats,
    exp_interval,
    inv_sqrt_interval,
    point,
)
from generator.certify import intervals as ia

# INTERVAL_PROPS_EXAMPLES=2000 for a longer hunt
SETTINGS = settings(max_examples=int(os.environ.get("INTERVAL_PROPS_EXAMPLES", "80")),
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SPECIAL = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, -1e-300, 1e-200, 1.0, -1.0,
           0.1, -0.3, 1 / 3, 2.0**-60, -(2.0**70), 1e100, -1e100, 12345.678, 1 - 2.0**-53]
# Magnitudes up to 1e100: products stay far from float64 overflow (1.8e308).
FLOATS = st.one_of(
    st.floats(-8.0, 8.0, allow_nan=False),
    st.floats(-1e100, 1e100, allow_nan=False, allow_subnormal=True),
    st.floats(-1e-250, 1e-250, allow_nan=False, allow_subnormal=True),
    st.sampled_from(SPECIAL),
)
DIM = st.integers(1, 4)
T = st.one_of(st.sampled_from([Fraction(0), Fraction(1), Fraction(1, 2)]),
              st.fractions(min_value=0, max_value=1, max_denominator=97))


# -- exact values of intervals -------------------------------------------------------

def _frac(raw):
    if raw == finf:
        return math.inf
    if raw == fninf:
        return -math.inf
    p, q = to_rational(raw)
    return Fraction(p, q)


def ends(x):
    """The exact endpoints of an iv.mpf, as Fractions (or ±inf)."""
    lo, hi = x._mpi_
    return _frac(lo), _frac(hi)


def encloses(x, value: Fraction) -> bool:
    lo, hi = ends(x)
    return lo <= value <= hi


def le_times_sqrt(a: Fraction, x: Fraction, n: int) -> bool:
    """Exactly decide a·sqrt(n) <= x."""
    if a <= 0 <= x:
        return True
    if a >= 0 > x:
        return False
    if a > 0:  # both positive
        return a * a * n <= x * x
    return a * a * n >= x * x  # both negative


def encloses_div_sqrt(lo: Fraction, hi: Fraction, x: Fraction, n: int) -> bool:
    """lo <= x/sqrt(n) <= hi, decided exactly."""
    return le_times_sqrt(lo, x, n) and le_times_sqrt(-hi, -x, n)


def exp_bounds(x: float) -> tuple[Fraction, Fraction]:
    """Rationals l <= exp(x) <= u, far tighter than the checker's 80 bits: from
    mpmath at 200 bits, or for tiny |x| (where 200 bits cannot tell exp(x)
    from 1) from Taylor's theorem, |exp(x) - sum_{j<9} x^j/j!| <= |x|^9 for
    |x| <= 1."""
    if abs(x) < 2.0**-20:
        f = Fraction(x)
        base = sum(f**j / math.factorial(j) for j in range(9))
        return base - abs(f) ** 9, base + abs(f) ** 9
    with mp.workprec(200):
        y = mp.exp(mp.mpf(x))
        p, q = to_rational(y._mpf_)
    y = Fraction(p, q)
    slack = y / 2**190
    return y - slack, y + slack


# -- strategies ---------------------------------------------------------------------------

@st.composite
def intervals(draw, elems=FLOATS):
    a = draw(elems)
    kind = draw(st.sampled_from(["point", "wide", "narrow"]))
    if kind == "point":
        return a, a
    if kind == "narrow":
        b = float(np.nextafter(a, np.inf)) if draw(st.booleans()) else a + abs(a) * 2.0**-30
        return a, b
    b = draw(elems)
    return min(a, b), max(a, b)


@st.composite
def imatrix(draw, r, c, elems=FLOATS, points=False):
    cells = [draw(elems) for _ in range(r * c)] if points else None
    pairs = [(x, x) for x in cells] if points else [draw(intervals(elems))
                                                    for _ in range(r * c)]
    lo = np.array([p[0] for p in pairs], dtype=np.float64).reshape(r, c)
    hi = np.array([p[1] for p in pairs], dtype=np.float64).reshape(r, c)
    return lo, hi


def as_iv(lo, hi):
    return [[iv.mpf((float(a), float(b))) for a, b in zip(rl, rh)] for rl, rh in zip(lo, hi)]


def as_imat(lo, hi):
    return ia.IMat(lo.copy(), hi.copy())


def pick_points(draw, lo, hi, endpoints_only=False):
    """An exact point inside each interval: an endpoint or lo + t (hi - lo)."""
    t_strategy = st.sampled_from([Fraction(0), Fraction(1)]) if endpoints_only else T
    out = []
    for rl, rh in zip(lo, hi):
        row = []
        for a, b in zip(rl, rh):
            t = draw(t_strategy)
            row.append(Fraction(float(a)) + t * (Fraction(float(b)) - Fraction(float(a))))
        out.append(row)
    return out


# -- exact reference operations (Fractions) ------------------------------------------------

def ex_matmul(a, b):
    return [[sum((x * y for x, y in zip(row, col)), Fraction(0)) for col in zip(*b)] for row in a]


def ex_add(a, b):
    b = b if len(b) == len(a) else b * len(a)
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def ex_sub(a, b):
    b = b if len(b) == len(a) else b * len(a)
    return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def ex_mean_rows(a):
    return [[sum(col, Fraction(0)) / len(a) for col in zip(*a)]]


def ex_row(a, i):
    return [list(a[i])]


def ex_transpose(a):
    return [list(col) for col in zip(*a)]


# -- checks shared by checker and generator -------------------------------------------------

def gen_to_iv(result: ia.IMat):
    """The generator's output as checker intervals (as a certificate records it)."""
    assert result.lo.shape == result.hi.shape
    assert np.isfinite(result.lo).all() and np.isfinite(result.hi).all()
    assert (result.lo <= result.hi).all()
    return as_iv(result.lo, result.hi)


def assert_encloses(matrix, exact, what):
    assert ops.shape(matrix) == (len(exact), len(exact[0])), what
    for i, (mrow, erow) in enumerate(zip(matrix, exact)):
        for j, (m, e) in enumerate(zip(mrow, erow)):
            assert encloses(m, e), f"{what}[{i},{j}]: {m} does not enclose {float(e)!r} ({e})"


def assert_inside(outer, inner, what):
    """Each of the checker's intervals lies inside the generator's."""
    assert ops.shape(outer) == ops.shape(inner), what
    for i, (orow, irow) in enumerate(zip(outer, inner)):
        for j, (o, x) in enumerate(zip(orow, irow)):
            assert contains(o, x), f"{what}[{i},{j}]: checker {x} not inside generator {o}"


def check_all(name, checker_fn, gen_fn, exact_fn, inputs, points, extra=()):
    """Soundness of both sides at `points`, and checker-inside-generator."""
    c = checker_fn(*[as_iv(lo, hi) for lo, hi in inputs], *extra)
    g = gen_to_iv(gen_fn(*[as_imat(lo, hi) for lo, hi in inputs], *extra))
    exact = exact_fn(*points, *extra)
    assert_encloses(c, exact, f"checker {name}")
    assert_encloses(g, exact, f"generator {name}")
    assert_inside(g, c, f"{name}")
    return c, g


# -- the properties ----------------------------------------------------------------------------

@SETTINGS
@given(st.data(), DIM, DIM, DIM)
def test_matmul(data, r, n, c):
    a, b = data.draw(imatrix(r, n)), data.draw(imatrix(n, c))
    pa, pb = pick_points(data.draw, *a), pick_points(data.draw, *b)
    check_all("matmul", ops.matmul, ia.OPS["matmul"], ex_matmul, [a, b], [pa, pb])


@SETTINGS
@given(st.data(), DIM, DIM, DIM)
def test_matmul_points(data, r, n, c):
    """Point inputs (the weights): exact rational products."""
    a, b = data.draw(imatrix(r, n, points=True)), data.draw(imatrix(n, c, points=True))
    pa, pb = pick_points(data.draw, *a), pick_points(data.draw, *b)
    check_all("matmul", ops.matmul, ia.OPS["matmul"], ex_matmul, [a, b], [pa, pb])


@SETTINGS
@given(st.data(), DIM, DIM, st.booleans(), st.sampled_from(["add", "sub"]))
def test_add_sub_with_row_broadcast(data, r, c, broadcast, op):
    a = data.draw(imatrix(r, c))
    b = data.draw(imatrix(1 if broadcast else r, c))
    pa, pb = pick_points(data.draw, *a), pick_points(data.draw, *b)
    exact = ex_add if op == "add" else ex_sub
    check_all(op, getattr(ops, op), ia.OPS[op], exact, [a, b], [pa, pb])


@SETTINGS
@given(st.data(), DIM, DIM)
def test_mean_rows(data, r, c):
    a = data.draw(imatrix(r, c))
    check_all("mean_rows", ops.mean_rows, ia.OPS["mean_rows"], ex_mean_rows, [a],
              [pick_points(data.draw, *a)])


@SETTINGS
@given(st.data(), DIM, DIM)
def test_row_and_transpose(data, r, c):
    a = data.draw(imatrix(r, c))
    pa = pick_points(data.draw, *a)
    i = data.draw(st.integers(0, r - 1))
    ci, gi = check_all("row", ops.row, ia.OPS["row"], ex_row, [a], [pa], (i,))
    ct, gt = check_all("transpose", ops.transpose, ia.OPS["transpose"], ex_transpose, [a], [pa])
    # both are exact: the checker's result equals its input entries
    src = as_iv(*a)
    assert all(ends(x) == ends(y) for x, y in zip(ci[0], src[i]))
    assert all(ends(ct[j][k]) == ends(src[k][j]) for j in range(c) for k in range(r))


@SETTINGS
@given(st.data(), DIM, DIM, st.one_of(st.integers(1, 64), st.integers(1, 10**6),
                                      st.sampled_from([1, 2, 3, 4, 8, 32, 1 << 20])))
def test_div_sqrt(data, r, c, n):
    a = data.draw(imatrix(r, c))
    pa = pick_points(data.draw, *a)
    cm = ops.div_sqrt(as_iv(*a), n)
    gm = gen_to_iv(ia.OPS["div_sqrt"](as_imat(*a), n))
    for i in range(r):
        for j in range(c):
            x = pa[i][j]
            for who, m in (("checker", cm), ("generator", gm)):
                lo, hi = ends(m[i][j])
                assert encloses_div_sqrt(lo, hi, x, n), f"{who} div_sqrt {m[i][j]} vs {x}/sqrt({n})"
    assert_inside(gm, cm, "div_sqrt")


EXP_ELEMS = st.one_of(st.floats(-800.0, 700.0, allow_nan=False, allow_subnormal=True),
                      st.sampled_from([0.0, -0.0, 5e-324, 1e-300, -1e-17, 1.0, -745.0,
                                       -708.5, 700.0]))


@SETTINGS
@given(st.data(), DIM, DIM)
def test_exp_generator_sound_and_contains_checker(data, r, c):
    # the generator's exp refuses overflow (np.exp > 709.78), as a real model never gets there
    a = data.draw(imatrix(r, c, elems=EXP_ELEMS))
    pa = pick_points(data.draw, *a, endpoints_only=True)  # exp is monotone
    cm = ops.exp(as_iv(*a))
    gm = gen_to_iv(ia.OPS["exp"](as_imat(*a)))
    for i in range(r):
        for j in range(c):
            lo_e, hi_e = exp_bounds(float(pa[i][j]))
            lo, hi = ends(gm[i][j])
            assert lo <= lo_e and hi_e <= hi, f"generator exp {gm[i][j]} vs exp({pa[i][j]})"
    assert_inside(gm, cm, "exp")


# mpmath 1.3's iv.exp is not a rigorous enclosure: libelefun.mpf_exp computes a
# truncated fixed-point approximation at prec+14 bits and then rounds *that* up,
# so when exp(x) lies just above a prec-bit number the "upper bound" is below
# exp(x) (about 2 in 10^4 random arguments at 80 bits).  The checker used it until
# commit 4cf1e68; these arguments are regression tests for numbers.exp_interval.
EXP_COUNTEREXAMPLES = [2.0**-52, -(2.0**-52), 2.0**-60, 3 * 2.0**-60, 2.0**-79,
                       -4.858167027820572, -6.036964839826101, 13.982646813039523]


def test_mpmath_iv_exp_is_not_rigorous():
    """Why the checker must not use iv.exp (if this starts failing, mpmath got
    fixed; the checker's own exp stays correct either way)."""
    iv.prec = 80
    y = iv.exp(iv.mpf((2.0**-52, 2.0**-52)))
    assert ends(y)[1] < exp_bounds(2.0**-52)[0]


@SETTINGS
@example(xs=[2.0**-52])
@example(xs=EXP_COUNTEREXAMPLES)
@given(st.lists(st.one_of(st.floats(-1000.0, 1000.0, allow_nan=False, allow_subnormal=True),
                          EXP_ELEMS), min_size=1, max_size=6))
def test_checker_exp_encloses(xs):
    """The checker alone (no float overflow limit): exp up to e^1000."""
    m = ops.exp([[point(x) for x in xs]])
    for x, y in zip(xs, m[0]):
        lo_e, hi_e = exp_bounds(x)
        lo, hi = ends(y)
        assert lo <= lo_e and hi_e <= hi, f"checker exp {y} does not enclose exp({x!r})"


@pytest.mark.parametrize("x", EXP_COUNTEREXAMPLES)
def test_checker_exp_known_counterexamples(x):
    (y,) = ops.exp([[point(x)]])[0]
    lo_e, hi_e = exp_bounds(x)
    lo, hi = ends(y)
    assert lo <= lo_e, "lower endpoint above exp(x)"
    assert hi_e <= hi, f"upper endpoint {y.b} below exp({x!r})"


@SETTINGS
@given(st.data())
def test_exp_interval_encloses_on_intervals(data):
    """numbers.exp_interval over an interval: both ends, and interior points."""
    a, b = data.draw(intervals(st.one_of(st.floats(-1000.0, 1000.0, allow_nan=False,
                                                   allow_subnormal=True), EXP_ELEMS)))
    y = exp_interval(iv.mpf((a, b)))
    lo, hi = ends(y)
    assert lo <= exp_bounds(a)[0] and exp_bounds(b)[1] <= hi
    assert 0 <= lo <= hi
    # tight: at most a few units of the working precision wider than [exp(a), exp(b)]
    assert lo >= exp_bounds(a)[0] * (1 - Fraction(1, 2**70))
    assert hi <= exp_bounds(b)[1] * (1 + Fraction(1, 2**70))


@SETTINGS
@given(st.one_of(st.integers(1, 1 << 20), st.sampled_from([1, 2, 3, 4, 8, 9, 32, 64, 1 << 20])))
def test_inv_sqrt_interval(n):
    """lo <= 1/sqrt(n) <= hi, decided exactly by squaring: lo^2 n <= 1 <= hi^2 n."""
    lo, hi = ends(inv_sqrt_interval(n))
    assert 0 < lo <= hi
    assert lo * lo * n <= 1 <= hi * hi * n
    assert hi - lo <= hi / 2**78  # and tight
    if math.isqrt(n) ** 2 == n and (math.isqrt(n) & (math.isqrt(n) - 1)) == 0:
        assert lo == hi == Fraction(1, math.isqrt(n))  # 1/2^j is exact


@SETTINGS
@given(st.data(), DIM, DIM, DIM)
def test_chain_of_ops_as_in_a_certificate(data, r, n, c):
    """Generator results fed to the next op (as a trace does): the checker's
    recomputation from recorded values stays inside the generator's records."""
    a, b = data.draw(imatrix(r, n, points=True)), data.draw(imatrix(n, c, points=True))
    bias = data.draw(imatrix(1, c, points=True))
    g1 = ia.OPS["matmul"](as_imat(*a), as_imat(*b))
    g2 = ia.OPS["add"](g1, as_imat(*bias))
    g3 = ia.OPS["div_sqrt"](g2, 8)
    assume(np.abs(g3.hi).max() < 700 and np.abs(g3.lo).max() < 700)
    g4 = ia.OPS["exp"](g3)
    c2 = ops.add(gen_to_iv(g1), as_iv(*bias))
    assert_inside(gen_to_iv(g2), c2, "add after matmul")
    assert_inside(gen_to_iv(g3), ops.div_sqrt(gen_to_iv(g2), 8), "div_sqrt after add")
    assert_inside(gen_to_iv(g4), ops.exp(gen_to_iv(g3)), "exp after div_sqrt")


# -- decode_intervals ----------------------------------------------------------------------

@SETTINGS
@given(st.lists(intervals(), min_size=1, max_size=8))
def test_decode_intervals_roundtrip(pairs):
    lo = [p[0] for p in pairs]
    hi = [p[1] for p in pairs]
    out = decode_intervals(encode_floats(lo, "f64"), encode_floats(hi, "f64"), len(pairs), "t")
    assert [ends(x) for x in out] == [(Fraction(a), Fraction(b)) for a, b in pairs]


@SETTINGS
@given(st.lists(intervals(), min_size=1, max_size=8), st.data())
def test_decode_intervals_rejects_reversed(pairs, data):
    i = data.draw(st.integers(0, len(pairs) - 1))
    lo = [p[0] for p in pairs]
    hi = [p[1] for p in pairs]
    assume(lo[i] != hi[i])
    lo[i], hi[i] = hi[i], lo[i]
    with pytest.raises(Malformed, match="reversed"):
        decode_intervals(encode_floats(lo, "f64"), encode_floats(hi, "f64"), len(pairs), "t")


@pytest.mark.parametrize("bad", [math.nan, -math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("side", ["lo", "hi"])
def test_decode_intervals_rejects_non_finite(bad, side):
    lo, hi = [0.0, 1.0, -2.0], [0.5, 1.0, 3.0]
    (lo if side == "lo" else hi)[1] = bad
    with pytest.raises(Malformed, match="NaN or infinity"):
        decode_intervals(encode_floats(lo, "f64"), encode_floats(hi, "f64"), 3, "t")


def test_decode_intervals_rejects_nan_bit_patterns():
    """Any NaN payload (quiet, signalling, negative) is refused."""
    import base64
    import struct

    for bits in (0x7FF8000000000000, 0x7FF0000000000001, 0xFFFFFFFFFFFFFFFF):
        lo = base64.b64encode(struct.pack("<Q", bits)).decode()
        with pytest.raises(Malformed):
            decode_intervals(lo, encode_floats([1.0], "f64"), 1, "t")


@pytest.mark.parametrize("count", [0, 2, 4])
def test_decode_intervals_rejects_wrong_length(count):
    lo = encode_floats([0.0, 1.0, 2.0], "f64")
    hi = encode_floats([0.0, 1.0, 2.0], "f64")
    with pytest.raises(Malformed, match="bytes"):
        decode_intervals(lo, hi, count, "t")


def test_decode_intervals_rejects_mismatched_lengths_and_non_base64():
    three = encode_floats([0.0, 1.0, 2.0], "f64")
    two = encode_floats([0.0, 1.0], "f64")
    with pytest.raises(Malformed):
        decode_intervals(three, two, 3, "t")
    with pytest.raises(Malformed):
        decode_intervals(encode_floats([1.0, 2.0, 3.0], "f32"), three, 3, "t")  # f32 bytes
    for garbage in ("not base64!", three[:-1], three[:-4] + "AA==", None, 3, ["AAAA"]):
        with pytest.raises(Malformed):
            decode_intervals(garbage, three, 3, "t")


def test_decode_intervals_accepts_signed_zero_interval():
    (x,) = decode_intervals(encode_floats([-0.0], "f64"), encode_floats([0.0], "f64"), 1, "t")
    assert ends(x) == (0, 0)


def test_contains_is_closed_and_exact():
    a = iv.mpf((1.0, 2.0))
    assert contains(a, iv.mpf((1.0, 2.0)))
    assert contains(a, point(1.5))
    assert not contains(a, iv.mpf((1.0, float(np.nextafter(2.0, 3.0)))))
    assert not contains(a, iv.mpf((float(np.nextafter(1.0, 0.0)), 2.0)))
    assert not contains(point(1.0), a)
