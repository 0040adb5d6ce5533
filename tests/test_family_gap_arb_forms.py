"""family_gap's check under `--arith arb`, tenth session (benchmarks/RESULTS.md "Tenth session:
family_gap check speed"): the new integer-form paths give the reference's values bit for bit.

- family_gap_arb.int_column_differences (the per-output column differences from the matrix's
  exact integer form) equals family_gap.column_differences (mpi_sub) entry by entry, on random
  interval matrices (hypothesis: points, zeros, cancellation, 1e±300 magnitudes, mixed
  exponents) and on every output of the forced-class models (ArbSharedFunctionals.for_output
  against SharedFunctionals.for_output: y_g and out_g);
- IntMatrix.point_column(e) has the values of IntMatrix([[iv.mpf(x)] for x in e]), and their
  products with a matrix (form_product) are equal;
- row_getter(rows)(ys) is the entries of ys at rows, in order (the consecutive-rows slice and
  the general case);
- family_gap_bulk.raw_float(x) is mpmath's from_float(x) for every binary64 (±0, subnormals,
  integers above 2^53, ±inf, NaN).
"""

from __future__ import annotations

import math
from fractions import Fraction
from operator import itemgetter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("flint")

from family_gap_models import FORCED, checker_inputs, model  # noqa: E402
from mpmath import iv  # noqa: E402

from checker.errors import Malformed  # noqa: E402
from checker.rules import family_gap as rule  # noqa: E402
from checker.rules import family_gap_arb as arb  # noqa: E402
from checker.rules.overwhelm_family_arb import (  # noqa: E402
    IntMatrix,
    form_product,
    row_getter,
)

# finite, subnormals included, |x| <= 1e300 (a sum of two stays finite: the integer forms are
# of finite matrices; the non-finite case has its own test)
FLOATS = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, width=64)


def _raws(mat):
    return [[x._mpi_ for x in r] for r in mat]


@st.composite
def interval_matrices(draw):
    """rows × cols interval matrices: points, zeros, wide, tiny-width, equal entries (exact
    cancellation), subnormal and ±1e300 ends, ends with long mantissas (x / 3 at 80 bits)."""
    rows, cols = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    out = []
    for _ in range(rows):
        row = []
        for _ in range(cols):
            kind = draw(st.sampled_from(["point", "zero", "wide", "narrow", "third", "copy"]))
            a = draw(FLOATS)
            if kind == "zero":
                x = iv.mpf(0)
            elif kind == "point":
                x = iv.mpf(a)
            elif kind == "third":  # an 80-bit end, not a binary64
                x = iv.mpf((a, a + abs(draw(FLOATS)))) / 3
            elif kind == "copy" and row:
                x = row[draw(st.integers(0, len(row) - 1))]
            else:
                b = draw(FLOATS)
                lo, hi = min(a, b), max(a, b)
                if kind == "narrow":
                    hi = math.nextafter(lo, math.inf) if math.isfinite(lo) else lo
                x = iv.mpf((lo, hi))
            row.append(x)
        out.append(row)
    return out


@settings(max_examples=300, deadline=None)
@given(interval_matrices(), st.data())
def test_int_column_differences_are_the_reference_subtraction(mat, data):
    """Every entry equals mpi_sub's raw interval (the same exact difference, each end
    rounded outward once at iv.prec): column_differences, bit for bit."""
    o = data.draw(st.integers(0, len(mat[0]) - 1))
    want = _raws(rule.column_differences(mat, o))
    assert _raws(arb.int_column_differences(IntMatrix(mat), o)) == want


def test_int_column_differences_round_outward_at_80_bits():
    """A difference that is not an 80-bit number: its ends are the floor and the ceiling at
    iv.prec, strictly around the exact value (a rounding the wrong way is caught)."""
    mat = [[iv.mpf(2.0 ** 100), iv.mpf(2.0 ** -100)]]  # 2^100 − 2^-100: 200 bits
    (row,) = arb.int_column_differences(IntMatrix(mat), 1)
    lo, hi = row[0]._mpi_
    exact = Fraction(2) ** 100 - Fraction(2) ** -100

    def frac(raw):
        sign, man, exp, _ = raw
        return (-1 if sign else 1) * Fraction(man) * Fraction(2) ** exp

    assert frac(lo) < exact < frac(hi)
    assert _raws([row]) == _raws(rule.column_differences(mat, 1))


@pytest.mark.parametrize("name", FORCED)
def test_shared_functionals_on_integers_equal_the_reference(name):
    """ArbSharedFunctionals.for_output(o) has SharedFunctionals.for_output(o)'s y_g and out_g,
    bit for bit, for every output o of the forced-class models (on the fast path's tables)."""
    dims, mats = checker_inputs(model(name))
    tables = arb.GapTables(dims, mats, lambda work: None)
    ref, fast = rule.SharedFunctionals(tables), arb.ArbSharedFunctionals(tables)
    for o in range(dims.d_vocab):
        want, got = ref.for_output(o), fast.for_output(o)
        assert [_raws(y) for y in got.y_g] == [_raws(y) for y in want.y_g], o
        if dims.family.d_mlp:
            assert _raws(got.out_g) == _raws(want.out_g), o


def test_shared_functionals_fall_back_on_a_non_finite_entry():
    """A matrix with an infinite end has no integer form: column_differences' values."""
    fast = arb.ArbSharedFunctionals.__new__(arb.ArbSharedFunctionals)
    fast.forms = {}
    mat = [[iv.mpf(1), iv.mpf((-math.inf, 2.0))], [iv.mpf(3), iv.mpf(0.5)]]
    with pytest.raises(Malformed):
        IntMatrix(mat)
    assert _raws(fast.differences(mat, 0)) == _raws(rule.column_differences(mat, 0))


@settings(max_examples=200, deadline=None)
@given(st.lists(FLOATS, min_size=1, max_size=8), st.data())
def test_point_column_is_the_interval_column(e, data):
    """point_column(e)'s entries are e's values exactly (n·2^E = x), as IntMatrix of the
    iv.mpf column; c·e by form_product is the same raw interval for a random interval c."""
    got, want = IntMatrix.point_column(e), IntMatrix([[iv.mpf(x)] for x in e])
    assert got.is_point()
    for (n,), (m,), x in zip(got.lo, want.lo, e):
        value = Fraction(n) * Fraction(2) ** got.exp
        assert value == Fraction(m) * Fraction(2) ** want.exp == Fraction(x)
    n_rows = data.draw(st.integers(1, 4))
    c = [[iv.mpf(sorted((data.draw(FLOATS) / 7, data.draw(FLOATS) / 7))) for _ in e]
         for _ in range(n_rows)]
    tick = lambda: None  # noqa: E731
    assert _raws(form_product(IntMatrix(c), got, False, tick)) == \
        _raws(form_product(IntMatrix(c), want, False, tick))


def test_point_column_refuses_non_finite():
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(Malformed):
            IntMatrix.point_column([1.0, bad])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=2, max_size=12), st.integers(0, 30),
       st.integers(2, 10))
def test_row_getter_reads_the_rows_in_order(rows, start, run):
    """The general case (any rows) and the consecutive case (the slice) both read ys at
    rows, in order: itemgetter(*rows)'s values."""
    ys = [float(i) * 1.5 - 7 for i in range(60)]
    for r in (rows, list(range(start, start + run))):
        assert list(row_getter(r)(ys)) == list(itemgetter(*r)(ys))


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.floats(width=64), st.integers(-2 ** 70, 2 ** 70).map(float),
                 st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.0 ** 53 + 2, 1.5, -3.0,
                                  1.7976931348623157e308])))
def test_raw_float_is_from_float(x):
    """The same raw tuple as mpmath's from_float (normalised: odd mantissa, its bit count)."""
    from mpmath.libmp import from_float

    from checker.rules.family_gap_bulk import raw_float

    assert raw_float(x) == from_float(x)
