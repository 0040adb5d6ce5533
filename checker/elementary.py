"""Rigorous square root, cosine, sine and RoPE frequencies, from integer bounds.

Like numbers.exp_interval, every bound here is a floor or a ceiling of an
exact integer (or rational) computation, so it holds by construction; only the
final rounding of an exact dyadic n·2^e to the working precision uses mpmath
(from_man_exp with directed rounding).  mpmath's own iv.sqrt/cos/sin are not
trusted.  Interval + − × ÷ are mpmath's correctly rounded directed operations,
as everywhere in the checker.
"""

from __future__ import annotations

import math
from fractions import Fraction

from mpmath import iv
from mpmath.libmp import from_man_exp, round_ceiling, round_floor

from .errors import Malformed
from .numbers import WORKING_PRECISION

_GUARD_BITS = 64
_BITS = WORKING_PRECISION + _GUARD_BITS  # fixed-point resolution 2^-_BITS
# cos/sin are summed as Taylor series at the point itself; angles are bounded so
# that the number of terms (about e·|x|) stays small (RoPE angles are <= n_ctx).
ANGLE_LIMIT = 1 << 10


def _rational(mpf_value) -> Fraction:
    """The exact rational value of a finite raw mpf."""
    sign, man, exp, _ = mpf_value
    if man == 0 and exp != 0:
        raise Malformed("a non-finite value reached an elementary function")
    value = Fraction(man) * (Fraction(2) ** exp)
    return -value if sign else value


def _interval_from_rationals(lo: Fraction, hi: Fraction):
    """[lo, hi] rounded outward to the working precision."""
    lo_n = (lo.numerator << _BITS) // lo.denominator  # floor(lo·2^B)
    hi_n = -((-hi.numerator << _BITS) // hi.denominator)  # ceil(hi·2^B)
    return iv.make_mpf((from_man_exp(lo_n, -_BITS, WORKING_PRECISION, round_floor),
                        from_man_exp(hi_n, -_BITS, WORKING_PRECISION, round_ceiling)))


def endpoints(x) -> tuple[Fraction, Fraction]:
    """Interval x's endpoints as exact rationals."""
    return _rational(x._mpi_[0]), _rational(x._mpi_[1])


# --- square root ------------------------------------------------------------

def _dyadic(mpf_value) -> tuple[int, int]:
    """A finite raw mpf >= 0 as exact integers (m, e) with value m·2^e."""
    sign, man, exp, _ = mpf_value
    if man == 0 and exp != 0:
        raise Malformed("a non-finite value reached sqrt")
    if sign and man:
        raise Malformed("sqrt of an interval reaching below 0")
    return man, exp


def _scaled(m: int, e: int, shift: int, up: bool) -> int:
    """floor (or ceil, if up) of m·2^(e + shift), exactly."""
    k = e + shift
    if k >= 0:
        return m << k
    return -((-m) >> -k) if up else m >> -k


def _sqrt_bits(m: int, e: int) -> int:
    """Fixed-point resolution giving at least _BITS significant bits of sqrt(m·2^e)."""
    magnitude = m.bit_length() + e if m else 0  # ~log2 of the value
    return max(_BITS, _BITS - magnitude // 2)


def sqrt_interval(x):
    """A rigorous enclosure of sqrt over the interval x, which must be >= 0.

    sqrt is increasing, so [sqrt(lo), sqrt(hi)] is the range.  Lower end:
    isqrt(floor(lo·4^B)) = floor(sqrt(lo)·2^B) (floor∘sqrt∘floor = floor∘sqrt on
    reals >= 0).  Upper end: Y = ceil(hi·4^B) >= hi·4^B, then ceil(sqrt(Y))."""
    (m_lo, e_lo), (m_hi, e_hi) = _dyadic(x._mpi_[0]), _dyadic(x._mpi_[1])
    b_lo, b_hi = _sqrt_bits(m_lo, e_lo), _sqrt_bits(m_hi, e_hi)
    root_lo = math.isqrt(_scaled(m_lo, e_lo, 2 * b_lo, up=False))
    big = _scaled(m_hi, e_hi, 2 * b_hi, up=True)
    root_hi = math.isqrt(big)
    if root_hi * root_hi < big:
        root_hi += 1
    return iv.make_mpf((from_man_exp(root_lo, -b_lo, WORKING_PRECISION, round_floor),
                        from_man_exp(root_hi, -b_hi, WORKING_PRECISION, round_ceiling)))


def square_interval(x):
    """The range of t² over t in x, rounded outward: |x|·|x| (mpmath's interval abs
    is exact and >= 0, so the product of two copies is [min², max²]; not x·x, which
    is negative at the lower end when x straddles 0)."""
    a = abs(x)
    return a * a


# --- cosine and sine ----------------------------------------------------------

def _taylor_bounds(x: Fraction, odd: bool) -> tuple[Fraction, Fraction]:
    """Bounds of sin(x) (odd) or cos(x) (even) at a rational point |x| <= ANGLE_LIMIT.

    Sum of the terms (−1)^j x^n / n! (n = 2j+1 or 2j) for n < N, each floored
    and ceiled exactly at 2^-B, plus the Lagrange remainder |x|^N / N! (every
    derivative of sin and cos is bounded by 1).  N grows until that remainder
    is below 2^-B."""
    if abs(x) > ANGLE_LIMIT:
        raise Malformed(f"cos/sin of an angle beyond {ANGLE_LIMIT}")
    scale = 1 << _BITS
    num, den = x.numerator, x.denominator
    lo = hi = 0
    n, sign, fact = (1 if odd else 0), 1, 1
    while True:
        if n > 1:  # fact = n! (n grows by 2 per step)
            fact *= n * (n - 1)
        t_num, t_den = (num ** n) * scale, (den ** n) * fact  # x^n/n! · 2^B, exactly
        floor_t = t_num // t_den
        ceil_t = -((-t_num) // t_den)
        if sign > 0:
            lo, hi = lo + floor_t, hi + ceil_t
        else:
            lo, hi = lo - ceil_t, hi - floor_t
        n_next = n + 2
        rem_num = abs(num) ** n_next * scale
        rem_den = den ** n_next * fact * (n_next - 1) * n_next  # |x|^N/N! · 2^B
        if rem_num < rem_den:  # remainder < 1 unit of 2^-B: stop
            return Fraction(lo - 1, scale), Fraction(hi + 1, scale)
        n, sign = n_next, -sign


def _round_out(lo: Fraction, hi: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """[lo, hi] widened to the grid 2^-bits (keeps the rationals small)."""
    scale = 1 << bits
    return (Fraction((lo.numerator * scale) // lo.denominator, scale),
            Fraction(-((-hi.numerator * scale) // hi.denominator), scale))


def _square_range(lo: Fraction, hi: Fraction) -> tuple[Fraction, Fraction]:
    if lo >= 0:
        return lo * lo, hi * hi
    if hi <= 0:
        return hi * hi, lo * lo
    return Fraction(0), max(lo * lo, hi * hi)


def _product_range(a: tuple, b: tuple) -> tuple[Fraction, Fraction]:
    products = [x * y for x in a for y in b]
    return min(products), max(products)


def _cos_sin_bounds(x: Fraction) -> tuple[tuple, tuple]:
    """Bounds of (cos x, sin x) at a rational point, |x| <= ANGLE_LIMIT.

    Argument halving: y = x / 2^h with |y| <= 1 is summed by _taylor_bounds, then
    h doublings cos 2y = 2cos²y − 1, sin 2y = 2 sin y cos y on the bounds (exact
    ranges of the square and of the product, rounded outward to 2^-(B+2h+8) each
    step and clipped to [−1, 1]).  Each doubling at most quadruples the error, which
    the 2h + 8 extra bits absorb."""
    if abs(x) > ANGLE_LIMIT:
        raise Malformed(f"cos/sin of an angle beyond {ANGLE_LIMIT}")
    halvings = 0
    while abs(x) > (1 << halvings):
        halvings += 1
    y = x / (1 << halvings)
    bits = _BITS + 2 * halvings + 8
    c, s = _taylor_bounds(y, odd=False), _taylor_bounds(y, odd=True)
    one = Fraction(1)
    for _ in range(halvings):
        sq_lo, sq_hi = _square_range(*c)
        p_lo, p_hi = _product_range(s, c)
        c = _round_out(max(2 * sq_lo - 1, -one), min(2 * sq_hi - 1, one), bits)
        s = _round_out(max(2 * p_lo, -one), min(2 * p_hi, one), bits)
    return c, s


def _trig_interval(x, odd: bool):
    """Enclosure of sin/cos over interval x: the bounds at the lower end, widened
    by the width w of x (|f(t) − f(lo)| <= |t − lo| <= w, f is 1-Lipschitz),
    clipped to [−1, 1]."""
    lo, hi = endpoints(x)
    cos_b, sin_b = _cos_sin_bounds(lo)
    f_lo, f_hi = sin_b if odd else cos_b
    w = hi - lo
    return _interval_from_rationals(max(f_lo - w, Fraction(-1)), min(f_hi + w, Fraction(1)))


def cos_interval(x):
    """A rigorous enclosure of cos over the interval x (|x| <= ANGLE_LIMIT)."""
    return _trig_interval(x, odd=False)


def sin_interval(x):
    """A rigorous enclosure of sin over the interval x (|x| <= ANGLE_LIMIT)."""
    return _trig_interval(x, odd=True)


# --- RoPE angles ----------------------------------------------------------------

def _root_floor(a: int, q: int) -> int:
    """floor(a^(1/q)) for integers a >= 0, q >= 1 (bisection on exact powers)."""
    if a < 2 or q == 1:
        return a
    lo, hi = 0, 1 << (a.bit_length() // q + 1)  # hi^q > a
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid ** q <= a:
            lo = mid
        else:
            hi = mid
    return lo


def rope_theta(j: int, rotary_dim: int, base: int) -> tuple[Fraction, Fraction]:
    """Rational bounds of θ_j = base^(−2j / rotary_dim), the angle per position of
    frequency j (TransformerLens: freq = base^(j / (rotary_dim/2)), angle = i / freq).

    With 2j/rotary_dim = p/q in lowest terms, R = floor((base^p · 2^(Bq))^(1/q)) =
    floor(base^(p/q) · 2^B), so base^(p/q) ∈ [R, R+1]·2^-B and θ_j ∈ [2^B/(R+1), 2^B/R]."""
    if not (0 <= 2 * j < rotary_dim and base >= 2):
        raise Malformed(f"rope: frequency {j} out of range for rotary_dim {rotary_dim}")
    e = Fraction(2 * j, rotary_dim)
    p, q = e.numerator, e.denominator
    r = _root_floor(base ** p << (_BITS * q), q)
    return Fraction(1 << _BITS, r + 1), Fraction(1 << _BITS, r)


def rope_table(n_ctx: int, rotary_dim: int, base: int, odd: bool, tick=lambda: None) -> list:
    """The (n_ctx × rotary_dim/2) table of sin (odd) or cos of i·θ_j, rigorously.
    tick() is called once per entry (the caller's time limit)."""
    out = []
    thetas = [rope_theta(j, rotary_dim, base) for j in range(rotary_dim // 2)]
    for i in range(n_ctx):
        row = []
        for th_lo, th_hi in thetas:
            tick()
            angle = _interval_from_rationals(i * th_lo, i * th_hi)
            row.append(_trig_interval(angle, odd))
        out.append(row)
    return out
