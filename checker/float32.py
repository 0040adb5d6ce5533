"""The float32 semantics (spec/theorem.md §2c): enclosures of every binary32 execution.

Lemma (spec/theorem.md §2c, "float enclosure").  Let every operand of an operation
below lie in the given interval enclosure (its FLOAT value in some binary32 execution).
Then every binary32 result the error model of §2c allows lies in the interval returned:
the exact real result over the enclosures (outward-rounded interval arithmetic),
widened by the operation's rounding bound.  Composing the operations step by step,
as the forward pass does, yields enclosures containing every float execution's values
(and the exact real values too: widening only enlarges).

The bounds, with u = 2^-24 (unit roundoff, round to nearest), η = 2^-149 (the spacing
of the subnormals: |fl(x) − x| ≤ η/2 for |x| below 2^-126) and γ_n = n·u/(1 − n·u):

  dot product of n terms, any order, any FMA use:  γ_n·Σ|a_i||b_i| + n·η
  sum of two:                                       u·|a + b|   (addition is exact when
                                                    the result is subnormal)
  exp, within EXP_ULPS ulps:                        relative EXP_ULPS·2u, absolute EXP_ULPS·η
  activation φ, within ACT_ULPS:                    ACT_ULPS·u·(|φ(x)| + |x|) + ACT_ULPS·η
  1/sqrt(v + ε) times c (LayerNorm's scale):        relative γ_{NORM_FACTORS}, absolute 2η
  rotary tables ĉ, ŝ:                               |ĉ − cos| ≤ rope_tolerance(k), same for sin

Overflow is excluded by a checked range bound: every enclosure (and every sum of
magnitudes a dot product's partial sums are bounded by) must be below RANGE = 2^126,
otherwise Overflow is raised (the caller refuses the rule: fail closed).

Magnitude sums are computed in binary64 and rounded up explicitly (`_mag`, `_abs_dot`):
each bound is an upper bound of the exact real quantity.
"""

from __future__ import annotations

import math
from fractions import Fraction

from mpmath import iv
from mpmath.libmp import (
    from_float,
    mpf_add,
    mpf_lt,
    mpf_sub,
    round_ceiling,
    round_floor,
    round_nearest,
    to_float,
)

from .errors import Rejected
from .numbers import WORKING_PRECISION

NAME = "float32"
SEMANTICS = ("real", NAME)
U = Fraction(1, 1 << 24)
ETA = 2.0 ** -149
RANGE = 2.0 ** 126
EXP_ULPS = 4  # exp within 4 ulps (2u each), and 4 subnormal spacings below 2^-126
ACT_ULPS = 16  # GELU/SiLU/tanh-GELU: ACT_ULPS·u·(|φ(x)| + |x|) + ACT_ULPS·η
NORM_FACTORS = 8  # c/sqrt(v + ε): sqrt and division, or rsqrt within 2 ulps and a product
_INF = math.inf
_RANGE, _NEG_RANGE = from_float(RANGE), from_float(-RANGE)


class Overflow(Rejected):
    """An enclosure reached the range bound: the error model does not apply."""


def gamma(n: int) -> float:
    """An upper bound (binary64) of γ_n = n·u/(1 − n·u), for n·u < 1/2."""
    if _GAMMA.get("u") is not U:  # the cache holds γ_n for this u only
        _GAMMA.clear()
        _GAMMA["u"] = U
    if n not in _GAMMA:
        if n * U >= Fraction(1, 2):
            raise Overflow(f"float32: a sum of {n} terms is too long for the error model")
        _GAMMA[n] = _up_fraction(n * U / (1 - n * U))
    return _GAMMA[n]


_GAMMA: dict = {}  # n -> γ_n rounded up, for the u stored under "u"


def _up_fraction(x: Fraction) -> float:
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, _INF)


def _up(x: float) -> float:
    """The next binary64 above x: ≥ the exact value of a nearest-rounded non-negative
    product or correctly rounded sum (math.fsum) that produced x."""
    return math.nextafter(x, _INF)


def mag(x) -> float:
    """An upper bound of |y| for every y in the interval x (binary64): each end converted
    to the nearest binary64 (to_float, round_nearest; ±inf beyond range), its absolute
    value, the larger one moved up by one ulp."""
    lo, hi = x._mpi_
    return _up(max(abs(to_float(lo, rnd=round_nearest)), abs(to_float(hi, rnd=round_nearest))))


def mags(xs) -> list:
    return [mag(x) for x in xs]


def abs_sum(a: list) -> float:
    """An upper bound of Σ a_i for non-negative binary64 a_i (fsum is correctly rounded)."""
    return _up(_up(math.fsum(a)) * (1 + 2.0 ** -50))


def _abs_dot(a: list, b: list) -> float:
    """An upper bound of Σ a_i b_i for non-negative binary64 a_i, b_i.

    Each product a_i·b_i rounded to nearest is ≥ a_i b_i (1 − 2^-53) − 2^-1075 (underflow),
    and fsum is correctly rounded, so the exact sum is ≤ (fsum + n·2^-1074)(1 + 2^-51);
    the two roundings of that expression are covered by the final _up."""
    s = math.fsum(x * y for x, y in zip(a, b))
    return _up(_up((s + len(a) * 2.0 ** -1074) * (1 + 2.0 ** -50)))


def _check_range(x: float, what: str) -> None:
    if not x < RANGE:
        raise Overflow(f"float32: {what} may reach 2^126 in magnitude (overflow is outside "
                       "the error model of spec/theorem.md §2c)")


def dot_error(n: int, abs_sum: float) -> float:
    """γ_n·Σ|a_i b_i| + n·η, rounded up: the rounding error of a float32 dot product of n
    terms whose magnitude sum is ≤ abs_sum (Higham Thm 3.1/3.3, any order and FMA;
    underflow: at most η/2 per product, each amplified by ≤ 1 + γ_n < 2)."""
    _check_range(abs_sum, "a dot product's partial sums")
    return _up(_up(gamma(n) * abs_sum) + n * ETA)


def widen(x, err: float):
    """The interval x widened by err ≥ 0 on both sides: [lo − err, hi + err], each end
    rounded outward at the working precision; refused (Overflow) unless both ends lie
    strictly inside (−2^126, 2^126)."""
    lo, hi = x._mpi_
    e = from_float(err)  # exact (a binary64, or inf which fails the range check)
    lo = mpf_sub(lo, e, WORKING_PRECISION, round_floor)
    hi = mpf_add(hi, e, WORKING_PRECISION, round_ceiling)
    if not (mpf_lt(_NEG_RANGE, lo) and mpf_lt(hi, _RANGE)):
        _check_range(_INF, "a value")
    return iv.make_mpf((lo, hi))


def affine(x: list, real: list, cols_mag: list, bias_mag: list | None = None) -> list:
    """Enclosures of a float32 x·W (+ b), from `real`, the real interval result over the
    enclosure x, and the magnitudes of W's columns (cols_mag[j][i] ≥ |W_ij|) and of b.
    x·W + b is one dot product of n + 1 terms (the bias times 1): it covers the bias
    added inside the accumulation (GEMM with β = 1) or after it."""
    xm = mags(x)
    n = len(x) + (bias_mag is not None)
    out = []
    for j, (c, col) in enumerate(zip(real, cols_mag)):
        s = _abs_dot(xm, col)
        if bias_mag is not None:
            s = _up(s + bias_mag[j])
        out.append(widen(c, dot_error(n, s)))
    return out


def add(x: list, y: list) -> list:
    """Enclosures of fl(a + b) entrywise: (a + b)(1 + δ), |δ| ≤ u, exact if subnormal."""
    u = float(U)
    return [widen(s, _up(u * mag(s))) for s in (a + b for a, b in zip(x, y))]


def relative(x, rel: float, absolute: float = 0.0):
    """The interval x widened by rel·|x| + absolute."""
    return widen(x, _up(_up(rel * mag(x)) + absolute))


def exp_factor():
    """The interval [1 − 2u·EXP_ULPS, 1 + 2u·EXP_ULPS] (relative error of exp)."""
    e = float(2 * EXP_ULPS * U)
    return iv.mpf((1 - e, 1 + e))


def rope_tolerance(n_ctx: int) -> float:
    """τ(k) = (8k + 16)·u: the distance of the rotary tables a float32 program uses from
    the exact cos/sin at positions < k (spec/theorem.md §2c: angle i·θ_j computed in
    float32 with θ_j within 4 ulps, then cos/sin within 4 ulps)."""
    return _up_fraction((8 * n_ctx + 16) * U)


def score_error(h: int, scale_mag: float, q_mag: list, k_mag: list) -> float:
    """The rounding error of a float32 attention score c·(q·k), c = 1/sqrt(h), for float
    q, k of magnitudes ≤ q_mag, k_mag: the scale (or its square root) a float within
    2 ulps, applied to the product, to q, to k or to both, each application one rounded
    product.  Every term q_j k_j c then carries at most h + 10 factors (1 + δ)
    (h for the dot product, 8 for two 2-ulp scales, 2 for their products): γ_{h+10}; the
    underflow of the scalings and products adds ≤ 3η·(Σ_j (|q_j| + |k_j|) + 2h + 1)."""
    s = _abs_dot(q_mag, k_mag)
    under = _up(_up(3 * ETA) * _up(abs_sum(q_mag) + abs_sum(k_mag) + 2 * h + 1))
    return _up(dot_error(h + 10, _up(s * scale_mag * (1 + 2.0 ** -50))) + under)


def softmax(scores: list, exp_interval) -> list:
    """Enclosures of the float32 softmax weights of float scores in the enclosures
    `scores` (k of them): m = the largest float score, t_i = fl(s_i − m), e_i = exp(t_i)
    within EXP_ULPS ulps, S = Σ e_j in any order, a_i = e_i / S (or e_i · fl(1/S)).

    Proof (spec/theorem.md §2c, Lemma S).  t_i = (s_i − m)(1 + δ) = s_i − m + ρ_i with
    |ρ_i| ≤ u(|s_i| + |m|) = ρ̄_i; e_i = exp(s_i + ρ_i)·e^(−m)·(1 + ε_i) + ν_i with
    |ε_i| ≤ 2u·EXP_ULPS, |ν_i| ≤ EXP_ULPS·η.  The factor e^(−m) cancels in e_i / Σ e_j and
    so does any real shift, which gives the real enclosure w_i / Σ w_j with
    w_i = exp(s_i − shift)·[1 − ρ̄_i, 1 + 2ρ̄_i]·[1 ∓ 2u·EXP_ULPS] (e^ρ ≤ 1 + 2ρ for
    ρ ≤ 1).  The sum of k positive terms and the division (or reciprocal and product) are
    k + 1 factors (1 + δ): relative γ_{k+1}.  Since t = 0 at the maximum, S ≥ 1/2, so the
    ν_i and the underflow of the division move a_i by at most (32k + 32)·η."""
    u, top, k = float(U), max(mag(s) for s in scores), len(scores)
    shift = max(s.a for s in scores)  # any real shift leaves the ratios unchanged
    e = exp_factor()
    weights = []
    for s in scores:
        rho = _up(u * _up(mag(s) + top))
        if rho > 2.0 ** -10:
            raise Overflow("float32: an attention score too large for the softmax error "
                           "model (|s| > 2^13)")
        weights.append(exp_interval(s - shift) * iv.mpf((1 - rho, 1 + 2 * rho)) * e)
    total = iv.fsum(weights)
    g, absolute = gamma(k + 1), (32 * k + 32) * ETA
    return [relative(w / total, g, absolute) for w in weights]


def mean_error(n: int, abs_sum: float) -> float:
    """The error of a float32 mean of n values (sum in any order, then a division by n or
    a product with fl(1/n)) whose magnitude sum is ≤ abs_sum: γ_{n+1}·abs_sum / n + 2η
    (n + 1 factors (1 + δ) per term; the division's underflow η/2)."""
    _check_range(abs_sum, "a mean's partial sums")
    return _up(_up(_up(gamma(n + 1) * abs_sum) / n) + 2 * ETA)


def normalize(c: list, mean_square, eps: float, sqrt_interval) -> list:
    """Enclosures of the float32 c_i / sqrt(v + ε̃) where v lies in the enclosure
    `mean_square` and ε̃ = fl32(ε) = ε(1 + δ): the sum v + ε̃ one rounding (u), then the
    square root and the division (or a reciprocal square root within 2 ulps and a
    product): relative γ_{NORM_FACTORS}, plus η for underflow."""
    u = float(U)
    eps_float = iv.mpf(eps) * iv.mpf((1 - u, 1 + u))
    floor = max(mean_square.a, 0)  # a float mean of squares is >= 0
    shifted = relative(iv.mpf((floor, mean_square.b)) + eps_float, u)
    # fl(v + ε̃) >= ε̃ >= ε(1 − u) > 0 (rounding is monotone, v >= 0, ε̃ a float)
    scale = sqrt_interval(iv.mpf((max(shifted.a, eps_float.a), shifted.b)))
    g = gamma(NORM_FACTORS)
    return [relative(a / scale, g, ETA) for a in c]


def scale_shift(y: list, w_mag_pairs) -> list:
    """Enclosures of the float32 y_i·w_i + b_i (one product and one sum, or an FMA): a dot
    product of 2 terms; w_mag_pairs yields (w_i, b_i, |w_i|, |b_i|) (b_i None: no bias)."""
    out = []
    for a, (w, b, wm, bm) in zip(y, w_mag_pairs):
        real = a * w if b is None else a * w + b
        s = _up(mag(a) * wm)
        out.append(widen(real, dot_error(1, s) if b is None else dot_error(2, _up(s + bm))))
    return out


def activation(real: list, x: list) -> list:
    """Enclosures of a float32 smooth activation φ̂(x) from the real enclosure φ(x) over
    the float inputs x: |φ̂(x) − φ(x)| ≤ ACT_ULPS·u·(|φ(x)| + |x|) + ACT_ULPS·η."""
    r = float(ACT_ULPS * U)
    return [widen(p, _up(_up(r * _up(mag(p) + mag(a))) + ACT_ULPS * ETA))
            for p, a in zip(real, x)]
