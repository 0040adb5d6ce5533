"""The reference back-end: mpmath intervals at 80 bits (checker/numbers.py).

Elements are `iv.mpf`; upper bounds are raw mpmath numbers rounded upward
(`mpmath.libmp`, round_ceiling); exp and 1/sqrt are the checker's own integer
bounds; matmul is exact integer arithmetic rounded outward once.  This is the
only back-end the checker-only install needs.
"""

from __future__ import annotations

from mpmath import iv, mpf
from mpmath.libmp import (
    from_man_exp,
    fzero,
    mpf_add,
    mpf_lt,
    mpf_mul,
    mpf_sub,
    round_ceiling,
    round_floor,
    to_man_exp,
)

from .. import numbers
from ..errors import Malformed
from .base import Arithmetic


class MpmathArithmetic(Arithmetic):
    name = "mpmath"

    def interval(self, lo, hi):
        return iv.mpf((lo, hi))

    def point(self, x):
        return iv.mpf((x, x))

    def contained(self, x, lo, hi):
        return numbers.contains(iv.mpf((lo, hi)), x)

    def float_bounds(self, x):
        return float(x.a), float(x.b)

    def is_negative(self, x):
        return numbers.is_negative(x)

    def is_nonnegative(self, x):
        return not x.a < 0

    def lower_point(self, x):
        return iv.mpf(x.a)

    def upper_point(self, x):
        return iv.mpf(x.b)

    def fsum(self, xs):
        return iv.fsum(xs)

    def exp(self, x):
        return numbers.exp_interval(x)

    def abs(self, x):
        return abs(x)  # mpmath: [0, max(|lo|, |hi|)] when x straddles 0

    def inv_sqrt(self, n):
        return numbers.inv_sqrt_interval(n)

    def matmul(self, a, b, tick):
        return matmul(a, b, tick)

    def v_diff(self, xs, y):
        y_lo, prec = y._mpi_[0], numbers.WORKING_PRECISION
        return [mpf_sub(x._mpi_[1], y_lo, prec, round_ceiling) for x in xs]

    def v_add(self, a, b):
        prec = numbers.WORKING_PRECISION
        return [mpf_add(x, y, prec, round_ceiling) for x, y in zip(a, b)]

    def v_mul(self, w, xs):
        numbers.up_mul(w, fzero)  # the sign check, once
        (w_lo, w_hi), prec = w._mpi_, numbers.WORKING_PRECISION
        return [mpf_mul(w_lo if mpf_lt(x, fzero) else w_hi, x, prec, round_ceiling)
                for x in xs]

    def bound_point(self, a):
        x = mpf(a)  # a raw mpmath number, exactly
        return iv.mpf((x, x))

    def bound_exact(self, a):
        man, exp = to_man_exp(a)  # a raw mpmath number; ValueError for ±inf and NaN
        return (-man if a[0] else man), exp  # to_man_exp drops the sign bit a[0]

    upper = staticmethod(numbers.upper)
    up_add = staticmethod(numbers.up_add)
    up_minus = staticmethod(numbers.up_minus)
    up_diff = staticmethod(numbers.up_diff)
    up_mul = staticmethod(numbers.up_mul)
    below_zero = staticmethod(numbers.below_zero)
    greater = staticmethod(numbers.greater)


def matmul(a, b, tick):
    """A·B for A of shape (r, n) and B of shape (n, c).  Cost r·n·c.

    Computed exactly, then rounded outward once: every endpoint is a dyadic
    rational n·2^e (mpmath's own representation), so with all endpoints of a
    matrix scaled to a common exponent, each entry's interval-arithmetic
    bounds  Σ_j min(products of endpoints), Σ_j max(...)  are exact Python
    integers.  This is the exact real result of interval arithmetic (tighter
    than per-operation rounding) and ~20× faster than mpmath's iv.fdot.
    """
    a_lo, a_hi, a_exp = _to_integers(a)
    b_lo, b_hi, b_exp = _to_integers(b)
    return int_matmul((a_lo, a_hi, a_exp), (list(zip(*b_lo)), list(zip(*b_hi)), b_exp), tick)


def int_matmul(a_rows, b_cols, tick) -> list:
    """matmul's loop on integer forms: a's rows (lo, hi, E_a) and b's columns (lo, hi, E_b);
    entry (i, j) is Σ_k min / max of the endpoint products (one product when both are
    points), exact, rounded outward once at exponent E_a + E_b.  (rules/overwhelm_family_arb
    calls it on integer forms it keeps between products.)"""
    a_lo, a_hi, a_exp = a_rows
    b_lo_cols, b_hi_cols, b_exp = b_cols
    out = []
    for x_lo, x_hi in zip(a_lo, a_hi):
        row = []
        for y_lo, y_hi in zip(b_lo_cols, b_hi_cols):
            tick()
            lo = hi = 0
            for x0, x1, y0, y1 in zip(x_lo, x_hi, y_lo, y_hi):
                if x0 == x1 and y0 == y1:
                    p = x0 * y0
                    lo += p
                    hi += p
                else:
                    p = (x0 * y0, x0 * y1, x1 * y0, x1 * y1)
                    lo += min(p)
                    hi += max(p)
            row.append(_from_integers(lo, hi, a_exp + b_exp))
        out.append(row)
    return out


def _to_integers(m):
    """Matrices of integer endpoints (lo, hi) and an exponent E such that
    entry [i][j] is the interval [lo[i][j]·2^E, hi[i][j]·2^E], exactly."""
    pairs = [[_dyadic(x) for x in r] for r in m]
    exponent = min((e for r in pairs for (_, e_lo), (_, e_hi) in r for e in (e_lo, e_hi)),
                   default=0)
    lo = [[n << (e - exponent) for (n, e), _ in r] for r in pairs]
    hi = [[n << (e - exponent) for _, (n, e) in r] for r in pairs]
    return lo, hi, exponent


def _dyadic(x):
    """Interval x's endpoints as exact ((n_lo, e_lo), (n_hi, e_hi)), value n·2^e.
    mpmath stores a finite number as (sign, mantissa, exponent, bitcount);
    infinities and NaN have mantissa 0 and a non-zero exponent code."""
    out = []
    for sign, man, exp, _ in x._mpi_:
        if man == 0 and exp != 0:
            raise Malformed("matmul: an operand is not finite")
        out.append((-man if sign else man, exp))
    return tuple(out)


def _from_integers(lo: int, hi: int, exponent: int):
    """The interval [lo·2^E, hi·2^E] rounded outward to the working precision."""
    return iv.make_mpf(raw_from_integers(lo, hi, exponent))


def raw_from_integers(lo: int, hi: int, exponent: int) -> tuple:
    """_from_integers' raw mpmath pair (lo, hi ends), without the interval object."""
    prec = numbers.WORKING_PRECISION
    return (from_man_exp(lo, exponent, prec, round_floor),
            from_man_exp(hi, exponent, prec, round_ceiling))


MPMATH = MpmathArithmetic()
