"""family_gap's check under `--arith arb`, tenth session (benchmarks/RESULTS.md "Tenth session:
family_gap check speed"): the new integer-form paths give the reference's values bit for bit.

- IntMatrix.point_column(e) has the values of IntMatrix([[iv.mpf(x)] for x in e]), and their
  products with a matrix (form_product) are equal;
- row_getter(rows)(ys) is the entries of ys at rows, in order (the consecutive-rows slice and
  the general case);
- family_gap_bulk.raw_float(x) is mpmath's from_float(x) for every binary64 (±0, subnormals,
  integers above 2^53, ±inf, NaN);
- negated_floats is filter_float on each −n·2^E (the direction filter's column);
- the one pass's c(W_out)·e without its terms at hidden units of 0 is the reference's value.
"""

from __future__ import annotations

import math
from fractions import Fraction
from operator import itemgetter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("flint")

from mpmath import iv  # noqa: E402

from checker.errors import Malformed  # noqa: E402
from checker.rules.overwhelm_family_arb import (  # noqa: E402
    IntMatrix,
    form_product,
    row_getter,
)

# finite, subnormals included, |x| <= 1e300 (the non-finite case has its own test)
FLOATS = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, width=64)


def _raws(mat):
    return [[x._mpi_ for x in r] for r in mat]


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


@pytest.mark.parametrize("name", ["ln_mlp_rope_2heads_k4", "negative_ln_gains"])
def test_direction_lower_bound_is_the_reference(name):
    """BulkSteps._direction(1, hidden) (e's integer column shared by the direction filter and
    c(W_out)·e) gives AtQuery.direction(1, mlp_dot)'s lower bound of r_c·e bit for bit, on the
    classes of an LN + MLP forced-class model whose final direction is not zero (the value
    σ's Cauchy–Schwarz bound reads, checked directly rather than through σ and the slack),
    among them classes with hidden units of exactly 0 (whose terms the one pass leaves out)."""
    from family_gap_models import forced_class_groups, model
    from test_family_gap_speed import _queries

    from checker.errors import Rejected
    from checker.rules import family_gap_bulk as bulk
    from checker.rules import overwhelm_family as family

    fw = model(name)
    compared = with_zeros = 0
    for group in forced_class_groups(name).values():
        for make in _queries(fw, group):
            query = make()
            if not (query.centre and query.fun.a and any(query.hint["dir"][1])):
                continue
            try:
                hidden = family.AtQuery.hidden(query, family.AtQuery.box(query))
            except Rejected:
                continue
            fun = query.fun

            def mlp_dot(e, query=query, fun=fun, hidden=hidden):  # AtQuery.check's
                col = query.t.matmul(fun.w_out_c, [[iv.mpf(x)] for x in e])
                return family.dot(hidden, [c[0] for c in col]) + \
                    family.dot(fun.b_out_c, [iv.mpf(x) for x in e])

            try:
                _, want = family.AtQuery.direction(query, 1, mlp_dot)
                _, got = query._direction(1, hidden)
            except (Rejected, bulk._Fallback):
                continue
            assert got.a == want and got.b == want
            compared += 1
            with_zeros += any(h.a == 0 and h.b == 0 for h in hidden)
    assert compared >= 5 and with_zeros >= 1, (compared, with_zeros)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(st.integers(-2 ** 100, 2 ** 100), st.sampled_from([0, 1, -1, 2 ** 1100])),
                min_size=1, max_size=6),
       st.one_of(st.integers(-1300, 1100), st.sampled_from([-1075, -1074, -1000, -1052, 500, 470])))
def test_negated_floats_are_filter_floats(ns, exponent):
    """confirmed_directions' column: negated_floats(ns, E) is [filter_float(−n·2^E)] with its
    sign (None when one is None: out of range, overflowing, or a nonzero n whose float
    underflows to 0)."""
    from checker.rules.overwhelm_family_arb import filter_float, negated_floats

    want = [filter_float((0, -n, exponent, 0)) if n <= 0 else filter_float((1, n, exponent, 0))
            for n in ns]
    want = None if None in want else want
    got = negated_floats(ns, exponent)
    assert got == want
    if got is not None:
        assert [math.copysign(1.0, y) for y in got] == [math.copysign(1.0, y) for y in want]
