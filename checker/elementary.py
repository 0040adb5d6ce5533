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
from .numbers import WORKING_PRECISION, exp_interval

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


# --- activations (spec/rules.md §Activations) -----------------------------------
# Constants as exact rational bounds, then outward-rounded intervals.

def _atan_inv_bounds(n: int, bits: int) -> tuple[int, int]:
    """Integers (L, H) with L·2^-bits <= atan(1/n) <= H·2^-bits, n >= 2.

    atan(1/n) = Σ_j (−1)^j / ((2j+1) n^(2j+1)): alternating with decreasing terms, so
    the partial sums alternate around the limit; the sum is taken to a term below
    2^-bits and bracketed by the last two partial sums (each term floored/ceiled)."""
    scale = 1 << bits
    lo = hi = 0
    j, power = 0, n
    while True:
        t_lo, t_hi = scale // ((2 * j + 1) * power), -(-scale // ((2 * j + 1) * power))
        if j % 2 == 0:
            lo, hi = lo + t_lo, hi + t_hi
        else:
            lo, hi = lo - t_hi, hi - t_lo
        if t_hi <= 1:  # the next term is < 2^-bits: the limit is within one term
            return lo - 1, hi + 1
        j, power = j + 1, power * n * n


def pi_bounds() -> tuple[Fraction, Fraction]:
    """Rational bounds of π by Machin's formula π = 16 atan(1/5) − 4 atan(1/239)."""
    bits = _BITS + 8
    a_lo, a_hi = _atan_inv_bounds(5, bits)
    b_lo, b_hi = _atan_inv_bounds(239, bits)
    return Fraction(16 * a_lo - 4 * b_hi, 1 << bits), Fraction(16 * a_hi - 4 * b_lo, 1 << bits)


def _constants():
    """Intervals of π-derived constants, built once (rigorous: π from integers, then
    mpmath's outward-rounded + − × ÷ and sqrt_interval)."""
    if not _CONST:
        pi = _interval_from_rationals(*pi_bounds())
        _CONST["sqrt_2_over_pi"] = sqrt_interval(2 / pi)  # gelu_new's √(2/π)
        _CONST["inv_sqrt_2pi"] = 1 / sqrt_interval(2 * pi)  # the normal density's 1/√(2π)
        _CONST["two_over_sqrt_pi"] = 2 / sqrt_interval(pi)  # erf's 2/√π
        _CONST["inv_sqrt_2"] = 1 / sqrt_interval(iv.mpf(2))
    return _CONST


_CONST: dict = {}
_ERF_SATURATION = 6  # erfc(t) <= e^(−t²)/(t√π) < 2^-55 for t >= 6


def _erf_point_bounds(t: Fraction) -> tuple[Fraction, Fraction]:
    """Bounds of erf(t) at a rational point.

    |t| >= 6: erf(t) ∈ [1 − 2^-55, 1] (t > 0; odd).  Otherwise t is moved outward to the
    grid 2^-b (erf is increasing) and the Maclaurin series
    erf(t) = 2/√π Σ_n (−1)^n t^(2n+1) / (n!(2n+1)) is summed in fixed point: the
    magnitudes P_n = t^(2n+1)/n! are carried as floor and ceiling integers at 2^-b
    (P_n = P_(n−1)·t²/n), each term P_n/(2n+1) floored and ceiled.  The terms decrease
    once n + 1 >= t²; the sum stops past that point at a term below 2^-b, and the rest
    lies within ± that term (alternating, decreasing).  Then the product with 2/√π."""
    if t < 0:
        lo, hi = _erf_point_bounds(-t)
        return -hi, -lo
    if t >= _ERF_SATURATION:
        return Fraction(1) - Fraction(1, 1 << 55), Fraction(1)
    bits = _BITS + 24
    scale = 1 << bits
    bounds = []
    for up in (False, True):
        tt = -((-t.numerator * scale) // t.denominator) if up else (t.numerator * scale) // \
            t.denominator  # t on the grid: below (lower bound) or above (upper bound)
        sq_lo, sq_hi = (tt * tt) >> bits, -((-(tt * tt)) >> bits)  # t² at 2^-b
        p_lo = p_hi = tt
        total_lo = total_hi = 0
        n = 0
        while True:
            term_lo, term_hi = p_lo // (2 * n + 1), -(-p_hi // (2 * n + 1))
            if n % 2 == 0:
                total_lo, total_hi = total_lo + term_lo, total_hi + term_hi
            else:
                total_lo, total_hi = total_lo - term_hi, total_hi - term_lo
            n += 1
            p_lo, p_hi = (p_lo * sq_lo) // (n * scale), -(-(p_hi * sq_hi) // (n * scale))
            if (n + 1) * scale >= sq_hi and p_hi < 2 * n + 1:  # decreasing, next < 2^-b
                break
        total = (total_lo - 1, total_hi + 1)  # the omitted rest: within one unit
        bounds.append(Fraction(total[1 if up else 0], scale))
    c_lo, c_hi = endpoints(_constants()["two_over_sqrt_pi"])
    lo, hi = bounds[0] * c_lo, bounds[1] * c_hi  # the series is >= 0 for t >= 0
    return max(lo, Fraction(0)), min(hi, Fraction(1))


def erf_interval(x):
    """A rigorous enclosure of erf over the interval x (erf is increasing)."""
    lo, hi = endpoints(x)
    return _interval_from_rationals(_erf_point_bounds(lo)[0], _erf_point_bounds(hi)[1])


def sigmoid_interval(u):
    """σ(u) = 1/(1 + e^(−u)) over the interval u (increasing): the lower end from u's lower
    end, the upper from its upper end, each by the form whose exp argument is <= 0
    (e^u/(1+e^u) for u < 0), so no exp overflows."""
    def at(p):
        point = iv.mpf(p)
        if p >= 0:
            return 1 / (1 + exp_interval(-point))
        e = exp_interval(point)
        return e / (1 + e)
    lo, hi = x_lo_hi(u)
    return iv.mpf([at(lo).a, at(hi).b])


def x_lo_hi(x):
    """The endpoints of interval x as mpmath numbers."""
    return x.a, x.b


def _hull(a, b):
    return iv.mpf([min(a.a, b.a), max(a.b, b.b)])


# The smooth activations: f(x) = x·g(x).  Each has a naive enclosure (x appears more than
# once, so it over-approximates but always encloses) and a derivative enclosure used to
# find where f is monotone (spec/rules.md §Activations, Lemma A).
_CUBIC = iv.mpf(44715) / 10 ** 6  # an enclosure of 0.044715
_GELU_FAST_K = iv.mpf(7978845608) / 10 ** 10  # of gelu_fast's 0.7978845608


def _tanh_form_k(name: str):
    return _constants()["sqrt_2_over_pi"] if name == "gelu_new" else _GELU_FAST_K


def _naive(name: str, x):
    if name == "silu":
        return x * sigmoid_interval(x)
    if name == "gelu":
        if x.b <= -8:  # Lemma A2's tail: |x|Φ(x) < φ(x), so gelu(x) ∈ [−φ(x), 0]
            phi = exp_interval(-square_interval(x) / 2) * _constants()["inv_sqrt_2pi"]
            return iv.mpf([-phi.b, 0])
        return x * (1 + erf_interval(x * _constants()["inv_sqrt_2"])) / 2
    u = 2 * _tanh_form_k(name) * (x + _CUBIC * x * square_interval(x))
    return x * sigmoid_interval(u)  # x(1 + tanh(u/2))/2 = x σ(u)


def _slope_sign(name: str, x):
    """An interval with the sign of f'(t) for every t in x (a positive factor dropped):
    silu: f' = σ(x)·(1 + x σ(−x)); the tanh forms, u = k(x + c x³): f' = σ(u)·(1 + x σ(−u) u')
    with u' = k(1 + 3c x²); gelu: f' = Φ(x) + x φ(x), and on x <= −1 the constant −1
    (Lemma A2: f' < 0 there, by the Mills-ratio bound Φ(x) < φ(x)/|x|)."""
    if name == "silu":
        return 1 + x * sigmoid_interval(-x)
    if name == "gelu":
        if x.b <= -1:
            return iv.mpf(-1)
        phi = exp_interval(-square_interval(x) / 2) * _constants()["inv_sqrt_2pi"]
        return (1 + erf_interval(x * _constants()["inv_sqrt_2"])) / 2 + x * phi
    k = 2 * _tanh_form_k(name)
    u = k * (x + _CUBIC * x * square_interval(x))
    return 1 + x * sigmoid_interval(-u) * k * (1 + 3 * _CUBIC * square_interval(x))


SMOOTH_ACTIVATIONS = ("gelu", "gelu_new", "gelu_fast", "silu")
MAX_PIECES = 64  # pieces examined per enclosure (deterministic: every back-end agrees)
_BREAKS = (-2, -1, -0.5, 0)  # every smooth activation here is monotone on each side of these


def activation_interval(name: str, x, tick=lambda: None):
    """A rigorous enclosure of the activation `name` over the interval x.

    relu: [max(0, lo), max(0, hi)].  The smooth ones: x is cut at _BREAKS into pieces; a
    piece on which the slope-sign enclosure is >= 0 (<= 0) is monotone (mean value
    theorem), so its range is the hull of its end values, each a point enclosure; a piece
    where it straddles 0 is halved, up to MAX_PIECES pieces, after which the naive
    enclosure covers it.  The union of the pieces' enclosures encloses f(x)
    (spec/rules.md §Activations, Lemma A)."""
    if name == "relu":
        lo, hi = x_lo_hi(x)
        return iv.mpf([max(lo, 0), max(hi, 0)])
    if name not in SMOOTH_ACTIVATIONS:
        raise Malformed(f"unknown activation {name!r}")
    a, b = x_lo_hi(x)
    cuts = [a, *(c for c in _BREAKS if a < c < b), b]
    todo = list(zip(cuts, cuts[1:])) if a < b else [(a, b)]
    result, examined = None, 0
    while todo:
        tick()
        a, b = todo.pop()
        examined += 1
        piece = iv.mpf([a, b])
        sign = _slope_sign(name, piece) if a != b else None
        if a == b or sign.a >= 0 or sign.b <= 0:
            got = _hull(_naive(name, iv.mpf(a)), _naive(name, iv.mpf(b)))
        elif examined + len(todo) + 2 > MAX_PIECES:
            got = _naive(name, piece)
        else:
            mid = min(max((iv.mpf(a) + iv.mpf(b)).mid / 2, a), b)  # any point of [a, b]
            todo += [(a, mid), (mid, b)]
            continue
        result = got if result is None else _hull(result, got)
    return result
