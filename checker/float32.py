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

import copy
import math
import operator
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


def up_float(x) -> float:
    """A binary64 ≥ x, for a binary64 or a rational x (x itself when it is a binary64)."""
    return x if type(x) is float else _up_fraction(Fraction(x))


def up_sum(a: float, b: float) -> float:
    """A binary64 ≥ a + b for binary64 a, b: the sum rounded to nearest, moved up one
    binary64 (the next binary64 above the nearest one of x is ≥ x)."""
    return _up(a + b)


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
        if rho > 0.5:
            raise Overflow("float32: an attention score too large for the softmax error "
                           "model (|s| > 2^22)")
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
    scale = norm_scale(mean_square, eps, sqrt_interval)
    g = gamma(NORM_FACTORS)
    return [relative(a / scale, g, ETA) for a in c]


def norm_scale(mean_square, eps: float, sqrt_interval):
    """An enclosure of the real number sqrt(fl(v + ε̃)) that normalize divides by (within
    relative γ_{NORM_FACTORS}), v in the enclosure mean_square, ε̃ = fl32(ε)."""
    u = float(U)
    eps_float = iv.mpf(eps) * iv.mpf((1 - u, 1 + u))
    floor = max(mean_square.a, 0)  # a float mean of squares is >= 0
    shifted = relative(iv.mpf((floor, mean_square.b)) + eps_float, u)
    # fl(v + ε̃) >= ε̃ >= ε(1 − u) > 0 (rounding is monotone, v >= 0, ε̃ a float)
    return sqrt_interval(iv.mpf((max(shifted.a, eps_float.a), shifted.b)))


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


# --- Lemma G: δ[q][o] for the attention-only model (brute_force; cubic, exact, subcubic_gap
# by widening EU) ------------------------------------------------------------------------------
#
# Two kinds of numbers (spec/theorem.md §2c, "how the checker computes δ"): the model's signed
# quantities (x = E[t] + P[i], keys, values, queries, W_O·W_U, the OV rows) are EXACT, integers
# times a power of two (`_Dyadic`); every later quantity is a sum of products of non-negative
# numbers, in binary64 rounded up at every step (`_up`, `abs_sum`, `_abs_dot`), its matrix
# products exact integer products rounded up once (`_up_matmul`).  Exact integer products are
# `int_matmul`: Python integers, or FLINT's fmpz_mat under --arith arb — the same integers, so
# δ (hence every verdict that reads it) is bit for bit the same under every back-end.

_TINY = 2.0 ** -1000  # an upper bound of every dyadic n·2^e with bits(n) + e ≤ −1000


def _up_dyadic(n: int, e: int) -> float:
    """A binary64 ≥ n·2^e for an integer n ≥ 0: the value itself when it is a binary64,
    else the binary64 after the nearest one.

    Proof: write n·2^e = n'·2^e' with n' odd (exact).  If bits(n') + e' ≤ −1000 then
    n·2^e < 2^(bits(n') + e') ≤ 2^-1000.  Otherwise n·2^e ≥ 2^(bits(n') − 1 + e') ≥ 2^-1001
    lies in binary64's normal range, float(n') is n' rounded to nearest (CPython's int →
    float is correctly rounded; exact for bits(n') ≤ 53) and ldexp scales it exactly, so
    the result is n·2^e itself (bits ≤ 53) or within half an ulp of it, and the next
    binary64 above is ≥ n·2^e.  Beyond the range: +inf, which every range check refuses."""
    if n == 0:
        return 0.0
    zeros = (n & -n).bit_length() - 1
    n, e = n >> zeros, e + zeros
    if n.bit_length() + e <= -1000:
        return _TINY
    try:
        f = math.ldexp(float(n), e)
    except OverflowError:
        return _INF
    return f if n.bit_length() <= 53 else math.nextafter(f, _INF)


class _Dyadic:
    """An exact rational matrix as integer rows and one exponent: entry [i][j] is
    rows[i][j]·2^exp."""

    def __init__(self, rows: list, exp: int):
        self.rows, self.exp = rows, exp

    @classmethod
    def from_points(cls, name: str, matrix) -> _Dyadic:
        """The exact values of a weight matrix given as rows of binary64 numbers or of point
        mpmath intervals.  Refused (Overflow, fail closed) if an entry has width or is not
        finite: Lemma G is computed from the weights themselves."""
        pairs = [[_exact_point(name, x) for x in row] for row in matrix]
        exp = min((e for row in pairs for m, e in row if m), default=0)
        return cls([[m << (e - exp) if m else 0 for m, e in row] for row in pairs], exp)

    @classmethod
    def from_floats(cls, rows: list) -> _Dyadic:
        """Finite binary64 numbers, exactly (each is an odd integer times a power of two)."""
        return cls.from_points("a bound", rows)

    def at(self, exp: int) -> list:
        """The integer rows at a common exponent exp ≤ self.exp (exact)."""
        s = self.exp - exp
        return [[a << s for a in row] for row in self.rows]

    def times(self, other: _Dyadic, int_matmul) -> _Dyadic:
        """self · other, exact."""
        return _Dyadic(int_matmul(self.rows, other.rows), self.exp + other.exp)

    def abs_up(self) -> list:
        """|entries| as binary64 upper bounds (rows)."""
        return [[_up_dyadic(abs(a), self.exp) for a in row] for row in self.rows]

    def column_max_abs_up(self) -> list:
        """max over the rows of |entry|, per column, rounded up."""
        return [_up_dyadic(max(abs(a) for a in col), self.exp) for col in zip(*self.rows)]


def _exact_point(name: str, x) -> tuple[int, int]:
    """(m, e) with x = m·2^e exactly, for a finite binary64 x or a point mpmath interval."""
    if isinstance(x, float):
        if not math.isfinite(x):
            raise Overflow(f"float32: {name} is not finite")
        num, den = x.as_integer_ratio()  # den a power of two
        return num, 1 - den.bit_length()
    lo, hi = x._mpi_
    sign, man, exp, _ = lo
    if lo != hi or (man == 0 and exp != 0):
        raise Overflow(f"float32: Lemma G needs {name} as exact float32 values (a point per "
                       "entry)")
    return (-man if sign else man), exp


def python_int_matmul(a: list, b: list) -> list:
    """The exact integer product of a (r × n) and b (n × c), as rows (Python integers).
    The --arith arb back-end passes FLINT's fmpz_mat product (arith/arb.py): the same."""
    cols = [list(c) for c in zip(*b)]
    return [[sum(map(operator.mul, row, col)) for col in cols] for row in a]


def _up_matmul(a: list, b: list, int_matmul) -> list:
    """Binary64 upper bounds of the exact product a·b of non-negative binary64 matrices
    (rows): both exactly as integers times a power of two, one exact integer product,
    each entry rounded up (`_up_dyadic`)."""
    return _Dyadic.from_floats(a).times(_Dyadic.from_floats(b), int_matmul).abs_up()


def _up_max_dot(rows: list, coefs: list, int_matmul) -> list:
    """For each coefficient vector c (non-negative binary64), a binary64 ≥ max_j c·rows[j]
    (rows non-negative binary64): the exact products, their exact maximum, rounded up."""
    ints = _Dyadic.from_floats(rows).times(_Dyadic.from_floats([list(c) for c in zip(*coefs)]),
                                           int_matmul)
    return [_up_dyadic(max(col), ints.exp) for col in zip(*ints.rows)]


def delta_work(dims) -> int:
    """The scalar operations attention_only_deltas performs, charged to --max-work
    (spec/rules.md §float32 by widening EU): the exact products (E·W and P·W for keys,
    values, queries and OV rows; W_O·W_U, W_V·W_O·W_U) and the products with |W_Q|, |W_K|,
    |W_U| and the v·k key rows, for every query token."""
    v, k, d, h = dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    exact = 3 * (v + k) * d * h + v * d * h + 2 * h * d * v + (v + k + 1) * h * v
    per_query = 2 * d * h + v * k * (h + d) + d * v + 8 * (d + h + v)
    return exact + v * per_query + 3 * d * h + h * v


def attention_only_deltas(dims, w: dict, int_matmul=None, query_pos=None) -> list:
    """δ with |ℓ̃_o(t) − ℓ_o(t)| ≤ δ[q][o] for every sequence t with query token q, every
    output o and every binary32 execution ℓ̃ of the attention-only model of
    spec/theorem.md §2 (the float program of §2c): Lemma G with its tightenings (§2c), from
    the weights (rows of binary64 or of point mpmath intervals, by short name), as binary64
    upper bounds.  int_matmul: an exact integer matrix product (default: Python's).
    query_pos = p < n_ctx: the same for the output at position p of the sequences
    t_0..t_p with t_p = q (spec/rules.md §float32 for the overwhelm rules, Lemma G@p);
    default n_ctx − 1, the full sequences above."""
    int_matmul = int_matmul or python_int_matmul
    return _deltas(dims, _ExactTables(dims, w, int_matmul, query_pos), int_matmul)


class _ExactTables:
    """Lemma G's exact quantities (spec/theorem.md §2c, "exact magnitudes", "per-key key
    errors", "exact OV rows"), from the weights as exact rationals: every residual vector
    x_j = E[t] + P[i] (key j = (t, i), row i·v + t; the rows i = k − 1 are the query
    residuals x_q), key k_j = x_j W_K + b_K, value v_j = x_j W_V + b_V, query
    q = x_q W_Q + b_Q, M = W_O·W_U and the OV rows v_j·M, each exact; then as binary64
    upper bounds: X = max_j |x_j|, K = max_j |k_j|, V = max_j |v_j| (entrywise), per key
    [|k_j|, |x_j|], per query token |x_q| and |q|, per query token q and output o the centre
    |c| and half-range H of {OV_j[o] : j = (t, i), i < k − 1} ∪ {OV_(q, k−1)[o]}, |M| and the
    weights' magnitudes."""

    def __init__(self, dims, w: dict, int_matmul, query_pos=None, tokens=None):
        v, k = dims.d_vocab, dims.n_ctx
        pts = {name: _Dyadic.from_points(name, w[name])
               for name in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U",
                            "b_Q", "b_K", "b_V", "b_O", "b_U")}
        emb, pos = pts["W_E"], pts["W_pos"]
        # the tables of every key (every token at every position): the same for every query
        # token and query position
        self._xs = _key_table(emb, pos, None, None, int_matmul)
        keys = _key_table(emb, pos, pts["W_K"], pts["b_K"], int_matmul)
        values = _key_table(emb, pos, pts["W_V"], pts["b_V"], int_matmul)
        m = pts["W_O"].times(pts["W_U"], int_matmul)
        self._ov = _key_table(emb, pos, pts["W_V"].times(m, int_matmul),
                              pts["b_V"].times(m, int_matmul), int_matmul)
        self.X, self.K, self.V = (t.column_max_abs_up() for t in (self._xs, keys, values))
        self.key_rows = [kr + xr for kr, xr in zip(keys.abs_up(), self._xs.abs_up())]
        self.M = m.abs_up()
        self.mag = {name: t.abs_up() for name, t in pts.items()}
        self._pts, self._int_matmul, self._v, self._k = pts, int_matmul, v, k
        self._set_query(k - 1 if query_pos is None else query_pos,
                        range(v) if tokens is None else tokens)

    def at(self, query_pos: int, tokens) -> _ExactTables:
        """The same tables for the query at position query_pos, restricted to the query tokens
        `tokens` (in that order): the key tables shared, the query rows (x_q, q, the OV
        ranges) those rows of the tables for every query token, exactly."""
        out = copy.copy(self)
        out._set_query(query_pos, tokens)
        return out

    def _set_query(self, p, tokens) -> None:
        v, k, pts = self._v, self._k, self._pts
        if type(p) is not int or not 0 <= p < k:  # the query's position (Lemma G@p)
            raise AssertionError("float32: query position outside 0..n_ctx − 1")
        tokens = list(tokens)
        if any(type(t) is not int or not 0 <= t < v for t in tokens):
            raise AssertionError("float32: query token outside 0..d_vocab − 1")
        emb = pts["W_E"]
        last = _Dyadic(pts["W_pos"].rows[p:p + 1], pts["W_pos"].exp)
        queries = _key_table(_Dyadic([emb.rows[t] for t in tokens], emb.exp), last,
                             pts["W_Q"], pts["b_Q"], self._int_matmul)
        self.x_q = _Dyadic([self._xs.rows[p * v + t] for t in tokens], self._xs.exp).abs_up()
        self.q = queries.abs_up()
        self.ov_centre, self.ov_half = _ov_ranges(self._ov, v, p + 1, tokens)


def _key_table(emb: _Dyadic, pos: _Dyadic, mat, bias, int_matmul) -> _Dyadic:
    """The exact rows (E[t] + P[i])·mat + bias for every token t and row i of pos (row
    i·v + t), computed as E·mat + P·mat + bias (linearity: (v + k)·d products instead of
    v·k·d); without mat, the residual vectors E[t] + P[i] themselves."""
    if mat is not None:
        emb, pos = emb.times(mat, int_matmul), pos.times(mat, int_matmul)
    exp = min(emb.exp, pos.exp, emb.exp if bias is None else bias.exp)
    bias_row = [0] * len(emb.rows[0]) if bias is None else bias.at(exp)[0]
    e_rows = emb.at(exp)
    return _Dyadic([[a + b + c for a, b, c in zip(e, p, bias_row)]
                    for p in pos.at(exp) for e in e_rows], exp)


def _ov_ranges(ov: _Dyadic, v: int, k: int, tokens) -> tuple[list, list]:
    """Per query token q and output o, |c| and H (binary64, rounded up) with c = (hi + lo)/2,
    H = (hi − lo)/2, lo and hi the least and greatest OV_j[o] over the keys a sequence with
    query q can hold: j = (t, i) for every token t at every position i < k − 1, and (q, k − 1)
    (exact integers; /2 is one more power of two).  k: the sequence length (the query at
    k − 1; n_ctx, or p + 1 for the query at position p, Lemma G@p); tokens: the query
    tokens q, in the order of the rows returned."""
    rest = ov.rows[:(k - 1) * v]
    lo_rest = [min(col) for col in zip(*rest)] if rest else None
    hi_rest = [max(col) for col in zip(*rest)] if rest else None
    centre, half = [], []
    for q in tokens:
        own = ov.rows[(k - 1) * v + q]
        lo = own if lo_rest is None else [min(a, b) for a, b in zip(own, lo_rest)]
        hi = own if hi_rest is None else [max(a, b) for a, b in zip(own, hi_rest)]
        centre.append([_up_dyadic(abs(a + b), ov.exp - 1) for a, b in zip(lo, hi)])
        half.append([_up_dyadic(b - a, ov.exp - 1) for a, b in zip(lo, hi)])
    return centre, half


def _columns(rows: list) -> list:
    return [list(col) for col in zip(*rows)]


def _vm_up(x: list, cols: list) -> list:
    """x·|W| for non-negative binary64 x and the columns of |W|, each entry rounded up."""
    return [_abs_dot(x, col) for col in cols]


def _sum_up(*vectors) -> list:
    """The entrywise sum of non-negative binary64 vectors, rounded up."""
    return [abs_sum(list(t)) for t in zip(*vectors)]


def _scaled_up(c: float, x: list) -> list:
    """c·x for non-negative binary64 c and x, each entry rounded up."""
    return [_up(c * a) for a in x]


def _const_up(x: list, c: float) -> list:
    """x + c entrywise (non-negative binary64), rounded up."""
    return [_up(a + c) for a in x]


def _deltas(dims, ex: _ExactTables, int_matmul) -> list:
    """Lemma G (spec/theorem.md §2c, the bound as the checker computes it): for every query
    token q, with binary64 upper bounds throughout (u = 2^-24, η = 2^-149, γ_n, c ≥ 1/√h
    with c²h ≥ 1 checked exactly, cu = u + γ_{d+1}(1 + u), ν = (32k + 32)η,
    drift = γ_{k+1} + kν):
      e_q = cu·|x_q||W_Q| + γ_{d+1}|b_Q| + (d+1)η, and alike e_k at X, e_v at X
      e_s, ρ                                      (`_score_errors`: per-key key errors)
      θ' = γ_{k+1} + (α − 1)/2 + e_s + 2e_s²      (`_softmax_rate`: centred values)
      Z = (1 + γ_k)(1 + drift)(V + e_v) + kη                          (≥ |z̃|)
      e_z = (1 + drift)·e_v + γ_k(1 + drift)(V + e_v) + kη            (the values' error)
      ρ_r = γ_{h+2}(x_f + |b_O| + Z|W_O|) + (h+2)η,  x_f = (1 + u)|x_q|
      r̄ = x_f + |b_O| + Z|W_O| + ρ_r                                  (≥ |r̃|)
      δ_o = [(u|x_q| + ρ_r + γ_{d+1}r̄)|W_U|]_o + γ_{d+1}|b_U|_o + (d+1)η
            + [e_z|W_O·W_U|]_o + (θ' + kν)·H_q[o] + drift·|c_q[o]|     (exact OV rows)
    Refused (Overflow) unless every magnitude bounding a float value or partial sum is
    < 2^126 (the scores' through e_s ≤ 1/8 and ρ ≤ 1/2, `_score_errors`)."""
    u, eta = float(U), ETA
    d, h, k = dims.d_model, dims.d_head, dims.n_ctx
    mag = ex.mag
    g_d, g_k, g_h2 = gamma(d + 1), gamma(k), gamma(h + 2)
    nu = _up((32 * k + 32) * eta)
    drift = _up(gamma(k + 1) + _up(k * nu))
    xw_k, xw_v = _vm_up(ex.X, _columns(mag["W_K"])), _vm_up(ex.X, _columns(mag["W_V"]))
    e_k = _projection_error(dims, xw_k, mag["b_K"][0])
    e_v = _projection_error(dims, xw_v, mag["b_V"][0])
    k_sum, v_sum = _sum_up(xw_k, mag["b_K"][0]), _sum_up(xw_v, mag["b_V"][0])
    vf, kf = _sum_up(ex.V, e_v), _sum_up(ex.K, e_k)
    z_mag = _const_up(_scaled_up(_up((1 + g_k) * _up(1 + drift)), vf), k * eta)
    e_z = _sum_up(_scaled_up(_up(1 + drift), e_v),
                  _const_up(_scaled_up(_up(g_k * _up(1 + drift)), vf), k * eta))
    z_wo = _vm_up(z_mag, _columns(mag["W_O"]))
    values_part = _vm_up(e_z, _columns(ex.M))  # [e_z |W_O·W_U|]_o, for every query
    b_o, b_u = mag["b_O"][0], mag["b_U"][0]
    u_const = [_up(_up(g_d * b) + (d + 1) * eta) for b in b_u]
    _check_range_all(ex.X, kf, vf, z_mag, k_sum, v_sum)
    scores = _score_errors(dims, ex, kf, int_matmul)
    to_u, rates = [], []
    for x_q, (e_s, rho) in zip(ex.x_q, scores):
        x_f = _scaled_up(_up(1 + u), x_q)
        inner = _sum_up(x_f, b_o, z_wo)
        rho_r = _const_up(_scaled_up(g_h2, inner), (h + 2) * eta)
        r_mag = _sum_up(inner, rho_r)
        to_u.append(_sum_up(_scaled_up(u, x_q), rho_r, _scaled_up(g_d, r_mag)))
        rates.append(_softmax_rate(e_s, rho, k, nu))
        # every partial sum of r̃·W_U + b_U is ≤ Σ r̄ · max|W_U| + max|b_U|
        _check_range_all(r_mag, [_up(_up(abs_sum(r_mag) * max(map(max, mag["W_U"])))
                                     + max(b_u))])
    residual_part = _up_matmul(to_u, mag["W_U"], int_matmul)
    out = []
    for rp_row, spread, centre, half in zip(residual_part, rates, ex.ov_centre, ex.ov_half):
        row = [abs_sum([rp, uc, vp, _up(spread * hv), _up(drift * cv)])
               for rp, uc, vp, hv, cv in zip(rp_row, u_const, values_part, half, centre)]
        _check_range_all(row)
        out.append(row)
    return out


def _projection_error(dims, p: list, bias: list) -> list:
    """cu·p + γ_{d+1}|b| + (d+1)η, cu = u + γ_{d+1}(1 + u), rounded up: for p ≥ |x||W|
    entrywise, a bound of |fl(x̃W + b) − (xW + b)| with x̃ = fl(E[t] + P[i]), |x̃ − x| ≤ u|x|
    (the real step at x̃ differs by ≤ u|x||W|; its rounding ≤ γ_{d+1}(|x̃||W| + |b|) +
    (d+1)η, |x̃| ≤ (1 + u)|x|)."""
    u, g = float(U), gamma(dims.d_model + 1)
    cu = _up(u + _up(g * (1 + u)))
    tail = (dims.d_model + 1) * ETA
    return [_up(_up(cu * a) + _up(_up(g * b) + tail)) for a, b in zip(p, bias)]


def _score_errors(dims, ex: _ExactTables, kf: list, int_matmul) -> list:
    """(e_s, ρ) per query token (spec/theorem.md §2c, Lemma G, "per-key key errors"):
    e_s ≥ |s̃_j − s_j| for every key j of a sequence with that query and every float
    execution, ρ ≥ u(|s̃_j| + |max s̃|); kf ≥ |k̃_j| for every key.  With
    e_k(j) = cu·|x_j||W_K| + γ_{d+1}|b_K| + (d+1)η the error of key j, the score bound
    c(e_q·(|k_j| + e_k(j)) + |q|·e_k(j)) + γ_{h+10}c(|q| + e_q)·(|k_j| + e_k(j)) + r₀ is
    a·|k_j| + b·e_k(j) + r₀ = a·|k_j| + β·|x_j| + b·(γ_{d+1}|b_K| + (d+1)η) + r₀ with
    a = c·e_q + γ_{h+10}c(|q| + e_q), b = a + c|q|, β = cu·|W_K|bᵀ,
    r₀ = 3η(Σ(|q| + e_q + K + e_k) + 2h + 1), maximised over the exact key rows
    [|k_j|, |x_j|] (one exact product of the v·k key rows with every query's [a, β]).
    Refused (Overflow) unless e_s ≤ 1/8 and ρ ≤ 1/2 (then every score and every partial
    sum of a score's dot product is < 2^126)."""
    u, eta, d, h = float(U), ETA, dims.d_model, dims.d_head
    mag = ex.mag
    c, g_s, g_d = _score_scale(h), gamma(h + 10), gamma(d + 1)
    cu = _up(u + _up(g_d * (1 + u)))
    xw = _up_matmul(ex.x_q, mag["W_Q"], int_matmul)
    key_const = [_up(_up(g_d * x) + (d + 1) * eta) for x in mag["b_K"][0]]
    rows_a, rows_b, rest = [], [], []
    for q, p in zip(ex.q, xw):
        e_q = _projection_error(dims, p, mag["b_Q"][0])
        qf = _sum_up(q, e_q)
        _check_range_all(qf, _sum_up(p, mag["b_Q"][0]))
        a = _sum_up(_scaled_up(c, e_q), _scaled_up(_up(g_s * c), qf))
        b = _sum_up(a, _scaled_up(c, q))
        rows_a.append(a)
        rows_b.append(b)
        rest.append(_up(_abs_dot(b, key_const)
                        + _up(3 * eta * _up(abs_sum(qf) + abs_sum(kf) + 2 * h + 1))))
    beta = _up_matmul(rows_b, _columns(mag["W_K"]), int_matmul)  # b·|W_K|ᵀ per query
    coefs = [a + _scaled_up(cu, bw) for a, bw in zip(rows_a, beta)]
    tops = _up_max_dot(ex.key_rows, coefs, int_matmul)
    out = []
    for q, top, r in zip(ex.q, tops, rest):
        e_s = _up(top + r)
        rho = _up(2 * u * _up(_up(c * _abs_dot(q, ex.K)) + e_s))
        if not (e_s <= 0.125 and rho <= 0.5):
            raise Overflow("float32: the attention scores' float error is too large for the "
                           "softmax error model (spec/theorem.md §2c, Lemma G)")
        out.append((e_s, rho))
    return out


def _score_scale(h: int) -> float:
    """A binary64 c ≥ 1/√h, checked exactly (c²·h ≥ 1), at most a few ulps above."""
    c = _up(1 / math.sqrt(h))
    while Fraction(c) ** 2 * h < 1:
        c = _up(c)
    return c


def _softmax_rate(e_s: float, rho: float, k: int, nu: float) -> float:
    """θ' + kν rounded up, θ' = γ_{k+1} + (α − 1)/2 + e_s + 2e_s², α = (1 + 2ρ)(1 + 8u)/
    ((1 − ρ)(1 − 8u)) (exact rationals, then rounded up): the rate at which the half-range H
    of a sequence's OV entries enters its logit error (spec/theorem.md §2c, "softmax against
    centred values")."""
    r, e, u = Fraction(rho), Fraction(e_s), U
    alpha = (1 + 2 * r) * (1 + 8 * u) / ((1 - r) * (1 - 8 * u))
    theta = gamma_exact(k + 1) + (alpha - 1) / 2 + e + 2 * e * e
    return _up_fraction(theta + k * Fraction(nu))


def _check_range_all(*vectors) -> None:
    for bound in (b for vector in vectors for b in vector):
        if not bound < RANGE:
            raise Overflow("float32: a value of the forward pass may reach 2^126 (overflow is "
                           "outside the error model of spec/theorem.md §2c)")


def attention_only_delta(dims, w: dict) -> float:
    """max over q, o of attention_only_deltas: one δ for every sequence and output."""
    return max(max(row) for row in attention_only_deltas(dims, w))


def widened_eu(dims, w: dict, lo: tuple, hi: tuple,
               int_matmul=None) -> tuple[tuple, tuple, float]:
    """EU's recorded enclosure (row-major binary64 ends, EU[q, o] at q·v + o) widened entry
    by entry to [lo − δ[q][o], hi + δ[q][o]], rounded outward to binary64, with
    δ = attention_only_deltas (Lemma G), and max δ.  Rules cubic, exact and subcubic_gap
    run unchanged on it to prove the float32 semantics (spec/rules.md §float32 by
    widening EU).  Each end is the nearest binary64 of an exact difference or sum moved one
    binary64 outward (the next binary64 above the nearest one of x is ≥ x), δ first taken
    to a binary64 ≥ it (exact for the binary64 values attention_only_deltas returns)."""
    deltas = attention_only_deltas(dims, w, int_matmul)
    v = dims.d_vocab
    if len(lo) != v * v or len(hi) != v * v:
        raise AssertionError("float32: EU is not v×v")  # exit 2: an internal error
    return widen_outward(lo, hi, [x for row in deltas for x in row])


def widen_outward(lo: tuple, hi: tuple, deltas) -> tuple[tuple, tuple, float]:
    """[lo − δ, hi + δ] entry by entry (binary64 ends, δ ≥ 0 rationals or binary64 in the
    same order), rounded outward, and max δ: each δ first taken to a binary64 ≥ it, each end
    the nearest binary64 of the exact difference or sum moved one binary64 outward (the
    next binary64 above the nearest one of x is ≥ x).  widened_eu and widened_eu_row."""
    flat = [_up_fraction(Fraction(x)) for x in deltas]
    if len(flat) != len(lo) or len(flat) != len(hi):
        raise AssertionError("float32: δ and the enclosure differ in size")  # exit 2
    new_lo = tuple(-_up(x - a) for a, x in zip(lo, flat))
    new_hi = tuple(_up(b + x) for b, x in zip(hi, flat))
    return new_lo, new_hi, max(flat)


def gamma_exact(n: int) -> Fraction:
    """γ_n = n·u/(1 − n·u) exactly (n·u < 1/2)."""
    if n * U >= Fraction(1, 2):
        raise Overflow(f"float32: a sum of {n} terms is too long for the error model")
    return n * U / (1 - n * U)


def attention_only_delta_rows(dims, w: dict, q: int, positions,
                              int_matmul=None, tick=None) -> dict:
    """{p: δ_p[q]} for each query position p in positions: row q of
    attention_only_deltas(dims, w, int_matmul, query_pos=p), bit for bit (the same exact
    integers and the same rounded-up binary64 steps, for row q only), for the overwhelm
    rules, which read only the claim's query token q (spec/rules.md §float32 for the
    overwhelm rules).  The exact key, value and OV tables do not depend on q or p and are
    computed once; per p only the query rows.  Work: delta_row_work(dims, len(positions)).
    The range checks (Overflow) are those of row q and of the shared quantities: rows of
    other query tokens are not computed, so they cannot refuse.  tick: a clock (the notes'),
    looked at between blocks of rows of every exact product (`_ticking`: the same integers)."""
    int_matmul = int_matmul or python_int_matmul
    if tick is not None:
        int_matmul = _ticking(int_matmul, tick)
    positions = list(positions)
    if not positions:
        return {}
    shared = _ExactTables(dims, w, int_matmul, positions[0], [q])
    return {p: _deltas(dims, shared.at(p, [q]), int_matmul)[0] for p in positions}


def _ticking(int_matmul, tick, block: int = 32):
    """int_matmul computed `block` rows of its left factor at a time, tick() before each
    block and after the last: the same exact integers (a product's rows are independent)."""
    def product(a: list, b: list) -> list:
        out = []
        for i in range(0, len(a), block):
            tick()
            out.extend(int_matmul(a[i:i + block], b))
        tick()
        return out
    return product


def delta_row_work(dims, n_positions: int) -> int:
    """The scalar operations attention_only_delta_rows performs for n_positions query
    positions, charged to --max-work: the exact products of delta_work once (key, value,
    OV and query tables), and per position one query token's share of delta_work
    (its per-query operations, its OV ranges over the p·v + 1 keys, and the per-model
    operations 3dh + hv)."""
    v, k, d, h = dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    exact = 3 * (v + k) * d * h + v * d * h + 2 * h * d * v + (v + k + 1) * h * v
    per_query = 2 * d * h + v * k * (h + d) + d * v + 8 * (d + h + v)
    return exact + n_positions * (per_query + 2 * k * v * v + 3 * d * h + h * v)


def widened_eu_row(dims, w: dict, lo: tuple, hi: tuple, q: int, p: int,
                   int_matmul=None, row=None) -> tuple[tuple, tuple, float]:
    """The overwhelm rules' EU_Q@p (one row: query token q at position p, spec/overwhelm.md)
    widened entry by entry to [lo − δ_p[q][o], hi + δ_p[q][o]], rounded outward as in
    widened_eu, δ_p = attention_only_deltas at query_pos = p (Lemma G@p), and max δ_p[q]
    (spec/rules.md §float32 for the overwhelm rules).  row: δ_p[q] already computed by
    attention_only_delta_rows (the same numbers); default: computed here, row q only."""
    if row is None:
        row = attention_only_delta_rows(dims, w, q, [p], int_matmul)[p]
    if len(lo) != dims.d_vocab or len(hi) != dims.d_vocab:
        raise AssertionError("float32: EU_Q is not 1×v")  # exit 2: an internal error
    return widen_outward(lo, hi, row)


def distance_note(dims, note_weights, q: int, m: int, o: int | None = None,
                  int_matmul=None, charge=None) -> str:
    """The float32 error of a real certificate's distance-to-float32 note (spec/rules.md
    §distance to float32; brute_force, cubic, cubic_mix, exact, subcubic_gap): 'float32 error
    Y (…)' with Y = δ[q][o] + δ[q][m] (o None: δ[q][m] + max_{o≠m} δ[q][o]), δ row q of
    attention_only_deltas (bit for bit: attention_only_delta_rows at the last position), from
    note_weights() — the certificate's weight lines, or None (certificate.py) —; or 'float32
    error unavailable (why)'.  Decides nothing and charges nothing; computed inside
    rules/notes.attempt with `charge` (the rule's, or the clock of an enclosing note; None:
    no clock), which names a failure and skips the note past its share of the time, the time
    limit standing."""
    if note_weights is None:  # not asked for (check-cert --float32-distance)
        return "float32 error: check-cert --float32-distance computes it"
    from .rules import notes

    def compute(clock):
        weights = note_weights()
        if weights is None:
            return ("float32 error unavailable (a weight line is absent or has width: Lemma G "
                    "reads exact weights)")
        k = dims.n_ctx
        row = attention_only_delta_rows(dims, weights, q, [k - 1], int_matmul, clock)[k - 1]
        if o is None:
            worst = max(x for out, x in enumerate(row) if out != m)
            return (f"float32 error {float(worst + row[m]):.3g} (δ[q][m] + max_(o≠m) δ[q][o], "
                    "Lemma G: every float32 execution has ℓ̃_m − ℓ̃_o ≥ the margin minus it "
                    "there)")
        return (f"float32 error {float(row[o] + row[m]):.3g} (δ[q][o] + δ[q][m] at o = {o}, "
                "Lemma G: the float32 variant needs the margin above it)")

    return notes.attempt(charge if charge is not None else _no_clock, compute,
                         "float32 error unavailable")


def _no_clock(work: int) -> None:
    """The charge of a note called without a clock (a direct call): nothing to look at."""
