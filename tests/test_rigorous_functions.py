"""The checker's own exp and 1/sqrt (checker/numbers.py) are enclosures,
checked against mpmath at 400 bits, including the arguments where mpmath's
iv.exp is not, and the argument limits that bound their cost."""

from __future__ import annotations

import time

import pytest
from mpmath import iv, mp, mpf

from checker.errors import Malformed
from checker.numbers import exp_interval, inv_sqrt_interval, point

ARGUMENTS = [0.0, 2.0**-52, -(2.0**-52), 2.0**-79, 1e-300, -1e-300, 13.982646813039523,
             -4.858167027820572, 1.0, -1.0, 50.5, -50.5, 709.0, -745.0, 8191.0, -8191.0,
             -8192.0, -1e6, -1e308]


def _ends(y):
    return mpf(y._mpi_[0]), mpf(y._mpi_[1])


@pytest.mark.parametrize("x", ARGUMENTS)
def test_exp_encloses(x):
    mp.prec = 400
    lo, hi = _ends(exp_interval(point(x)))
    exact = mp.exp(mpf(x))
    assert lo <= exact <= hi
    if -745 <= x <= 709:  # tight where it matters
        assert hi - lo <= exact * 2.0**-75


def test_exp_of_an_interval_spans_its_ends():
    mp.prec = 400
    lo, hi = _ends(exp_interval(iv.mpf([-1, 2])))
    assert lo <= mp.exp(-1) and mp.exp(2) <= hi


@pytest.mark.parametrize("x", [8192.0, 1e10, 1e308])
def test_exp_refuses_arguments_it_could_not_record_and_stays_fast(x):
    started = time.monotonic()
    with pytest.raises(Malformed):
        exp_interval(point(x))
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("n", [1, 2, 3, 8, 32, 64, 1000003])
def test_inv_sqrt_encloses(n):
    mp.prec = 400
    lo, hi = _ends(inv_sqrt_interval(n))
    assert lo <= 1 / mp.sqrt(n) <= hi
    assert hi - lo <= 2.0**-78
