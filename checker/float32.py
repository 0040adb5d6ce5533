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


# --- Lemma G: δ[q][o] for the attention-only model (brute_force; cubic, exact, subcubic_gap
# by widening EU) ------------------------------------------------------------------------------
#
# Two kinds of numbers (spec/theorem.md §2c, Lemma G, "computation"): the model's own signed
# quantities (x = E[t] + P[i], keys, values, queries, W_O·W_U, the OV rows) are computed
# EXACTLY as integers times a power of two (`_Dyadic`, products by `int_matmul`: Python
# integers, or FLINT's fmpz_mat under --arith arb: the same integers); everything after them
# is a sum of products of non-negative numbers, computed in binary64 rounded up at every step
# (`_up`, `abs_sum`, `_abs_dot`), so each number is ≥ the exact real bound it stands for.  The
# same Python code computes δ under every back-end, so δ, hence every verdict, is the same.

_TINY = 2.0 ** -1000  # an upper bound of every dyadic n·2^e with bits(n) + e ≤ −1000


def _up_dyadic(n: int, e: int) -> float:
    """A binary64 ≥ n·2^e for an integer n ≥ 0: the value itself when it is a binary64
    (n < 2^53 and the result normal), else the binary64 after the nearest one.

    Proof: if bits(n) + e ≤ −1000 then n·2^e < 2^(bits(n) + e) ≤ 2^-1000.  Otherwise
    n·2^e ≥ 2^(bits(n) − 1 + e) ≥ 2^-1001 is in binary64's normal range, float(n) is n
    rounded to nearest (CPython's correctly rounded int → float; exact for bits(n) ≤ 53)
    and ldexp scales it exactly, so the result is within half an ulp of n·2^e and the
    next binary64 above it is ≥ n·2^e.  Beyond the range: OverflowError, +inf (which
    every range check refuses)."""
    if n == 0:
        return 0.0
    zeros = (n & -n).bit_length() - 1  # n·2^e = (n >> zeros)·2^(e + zeros), exactly
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
        """The exact values of a matrix of point mpmath intervals (a weight line: its
        float32 values).  Refused (Overflow, fail closed) if an entry has width or is not
        finite: Lemma G is computed from the weights themselves."""
        pairs = []
        for row in matrix:
            out = []
            for x in row:
                lo, hi = x._mpi_
                sign, man, exp, _ = lo
                if lo != hi or (man == 0 and exp != 0):
                    raise Overflow(f"float32: Lemma G needs {name} as exact float32 values "
                                   "(a point per entry)")
                out.append((-man if sign else man, exp))
            pairs.append(out)
        exp = min((e for row in pairs for m, e in row if m), default=0)
        return cls([[m << (e - exp) if m else 0 for m, e in row] for row in pairs], exp)

    def at(self, exp: int) -> list:
        """The integer rows at a common exponent exp ≤ self.exp (exact)."""
        s = self.exp - exp
        return [[a << s for a in row] for row in self.rows]

    def times(self, other: _Dyadic, int_matmul) -> _Dyadic:
        """self · other, exact."""
        return _Dyadic(int_matmul(self.rows, other.rows), self.exp + other.exp)

    def plus_row(self, bias: _Dyadic) -> _Dyadic:
        """Every row plus the one row of bias, exact."""
        exp = min(self.exp, bias.exp)
        (b,) = bias.at(exp)
        return _Dyadic([[a + c for a, c in zip(row, b)] for row in self.at(exp)], exp)

    def abs_up(self) -> list:
        """|entries| as binary64 upper bounds (rows)."""
        return [[_up_dyadic(abs(a), self.exp) for a in row] for row in self.rows]

    def column_max_abs_up(self, rows=None) -> list:
        """max over the rows (all, or the given range) of |entry|, per column, rounded up."""
        pick = self.rows if rows is None else self.rows[rows]
        return [_up_dyadic(max(abs(a) for a in col), self.exp) for col in zip(*pick)]


def python_int_matmul(a: list, b: list) -> list:
    """The exact integer product of a (r × n) and b (n × c), as rows (Python integers).
    The --arith arb back-end passes FLINT's fmpz_mat product instead: the same integers."""
    cols = [list(c) for c in zip(*b)]
    return [[sum(map(operator.mul, row, col)) for col in cols] for row in a]


def delta_work(dims) -> int:
    """The scalar operations attention_only_deltas performs, charged to --max-work
    (spec/rules.md §float32 by widening EU): the exact products (keys, values, queries,
    W_O·W_U, the OV rows) and, per query token, its products with |W_Q|, |W_K|, |W_U|, the
    per-key score bound over all v·k keys and the v OV ranges."""
    v, k, d, h = dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    exact = 2 * v * k * d * h + v * d * h + h * d * v + v * k * h * v
    per_query = 2 * d * h + v * k * (h + d) + d * v + 3 * v
    return exact + v * per_query + 3 * d * h + h * v


def attention_only_deltas(dims, w: dict, int_matmul=None) -> list:
    """δ with |ℓ̃_o(t) − ℓ_o(t)| ≤ δ[q][o] for every sequence t with query token q, every
    output o and every binary32 execution ℓ̃ of the attention-only model of
    spec/theorem.md §2 (the float program of §2c): Lemma G (§2c) with its tightenings,
    from the weights (point mpmath matrices, by short name), as Fractions (each the
    binary64 upper bound `_deltas` computes).  int_matmul: the exact integer matrix
    product (default: Python integers)."""
    exact = _ExactTables(dims, w, int_matmul or python_int_matmul)
    return [[Fraction(x) for x in row] for row in _deltas(dims, exact)]


class _ExactTables:
    """Lemma G's exact quantities (spec/theorem.md §2c, "exact magnitudes", "per-key key
    errors", "exact OV rows"), from the weights as exact rationals: every residual vector
    x_j = E[t] + P[i] (key j = (t, i), row i·v + t; the rows i = k − 1 are the query
    residuals x_q), key k_j = x_j W_K + b_K, value v_j = x_j W_V + b_V, query
    q = x_q W_Q + b_Q, M = W_O·W_U and the OV rows v_j·M, each exact (integers); then
    as binary64 upper bounds: X = max_j |x_j|, K = max_j |k_j|, V = max_j |v_j| (entrywise),
    per key [|k_j|, |x_j|], per query token |x_q|, |q|, and per query token q and output o
    the centre |c| and half-range H of {OV_j[o] : j = (t, i), i < k − 1} ∪ {OV_(q, k−1)[o]}."""

    def __init__(self, dims, w: dict, int_matmul):
        v, k = dims.d_vocab, dims.n_ctx
        pts = {name: _Dyadic.from_points(name, w[name])
               for name in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U",
                            "b_Q", "b_K", "b_V")}
        emb, pos = pts["W_E"], pts["W_pos"]
        exp = min(emb.exp, pos.exp)
        e_rows, p_rows = emb.at(exp), pos.at(exp)
        xs = _Dyadic([[a + b for a, b in zip(e, p)] for p in p_rows for e in e_rows], exp)
        keys = xs.times(pts["W_K"], int_matmul).plus_row(pts["b_K"])
        values = xs.times(pts["W_V"], int_matmul).plus_row(pts["b_V"])
        query_rows = slice((k - 1) * v, k * v)
        x_q = _Dyadic(xs.rows[query_rows], xs.exp)
        queries = x_q.times(pts["W_Q"], int_matmul).plus_row(pts["b_Q"])
        ov = values.times(pts["W_O"].times(pts["W_U"], int_matmul), int_matmul)
        self.X, self.K, self.V = (m.column_max_abs_up() for m in (xs, keys, values))
        self.key_rows = [kr + xr for kr, xr in zip(keys.abs_up(), xs.abs_up())]
        self.x_q, self.q = x_q.abs_up(), queries.abs_up()
        self.ov_centre, self.ov_half = _ov_ranges(ov, v, k)
        self.M = _Dyadic(int_matmul(pts["W_O"].rows, pts["W_U"].rows),
                         pts["W_O"].exp + pts["W_U"].exp).abs_up()
        self.mag = {name: m.abs_up() for name, m in pts.items()}
        self.cols = {name: _abs_columns(self.mag[name])
                     for name in ("W_Q", "W_K", "W_V", "W_O", "W_U")}
        self.mag.update((name, _Dyadic.from_points(name, w[name]).abs_up())
                        for name in ("b_O", "b_U"))


def _ov_ranges(ov: _Dyadic, v: int, k: int) -> tuple[list, list]:
    """Per query token q and output o, |c| and H (binary64, rounded up) with c = (hi + lo)/2,
    H = (hi − lo)/2, lo and hi the least and greatest OV_j[o] over the keys a sequence with
    query q can hold: j = (t, i) for every token t at every position i < k − 1, and (q, k − 1)
    (exact integers; /2 is one more power of two)."""
    rest = ov.rows[:(k - 1) * v]
    lo_rest = [min(col) for col in zip(*rest)] if rest else None
    hi_rest = [max(col) for col in zip(*rest)] if rest else None
    centre, half = [], []
    for q in range(v):
        own = ov.rows[(k - 1) * v + q]
        lo = own if lo_rest is None else [min(a, b) for a, b in zip(own, lo_rest)]
        hi = own if hi_rest is None else [max(a, b) for a, b in zip(own, hi_rest)]
        centre.append([_up_dyadic(abs(a + b), ov.exp - 1) for a, b in zip(lo, hi)])
        half.append([_up_dyadic(b - a, ov.exp - 1) for a, b in zip(lo, hi)])
    return centre, half


def _abs_columns(rows) -> list:
    """The columns of |W| as binary64 (exact for float32 weights: upper bounds in general)."""
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


def _scalar_up(x: Fraction) -> float:
    return _up_fraction(x)


def _deltas(dims, ex: _ExactTables) -> list:
    """Lemma G (spec/theorem.md §2c, the bound as the checker computes it): for every query
    token q, with binary64 upper bounds throughout (u = 2^-24, η = 2^-149, γ_n, c ≥ 1/√h
    (c² h ≥ 1 checked exactly), cu = u + γ_{d+1}(1 + u), ν = (32k + 32)η,
    drift = γ_{k+1} + kν):
      e_q = cu·|x_q||W_Q| + γ_{d+1}|b_Q| + (d+1)η, and alike e_k at X, e_v at X
      a = c·e_q + γ_{h+10}·c·(|q| + e_q),  b = a + c·|q|,  β = cu·|W_K|·b
      e_s = max_j (a·|k_j| + β·|x_j|) + b·(γ_{d+1}|b_K| + (d+1)η)
            + 3η(Σ(|q| + e_q + K + e_k) + 2h + 1)                    (per-key key errors)
      ρ = 2u(c·|q|·K + e_s),  α = (1 + 2ρ)(1 + 8u)/((1 − ρ)(1 − 8u))
      θ' = γ_{k+1} + (α − 1)/2 + e_s + 2e_s²                         (softmax, centred)
      Z = (1 + γ_k)(1 + drift)(V + e_v) + kη                         (≥ |z̃|)
      e_z = (1 + drift)·e_v + γ_k(1 + drift)(V + e_v) + kη           (the values' error)
      ρ_r = γ_{h+2}(x_f + |b_O| + Z|W_O|) + (h+2)η,  x_f = (1 + u)|x_q|
      r̄ = x_f + |b_O| + Z|W_O| + ρ_r                                 (≥ |r̃|)
      δ_o = [(u|x_q| + ρ_r + γ_{d+1}r̄)|W_U|]_o + γ_{d+1}|b_U|_o + (d+1)η
            + [e_z|W_O·W_U|]_o + (θ' + kν)·H_q[o] + drift·|c_q[o]|    (exact OV rows)
    refused (Overflow) unless e_s ≤ 1/8, ρ ≤ 1/2 and every magnitude below bounds a float
    value or partial sum < 2^126 (the
    scores' partial sums through e_s ≤ 1/8 and ρ ≤ 1/2)."""
    u, eta = float(U), ETA
    d, h, k = dims.d_model, dims.d_head, dims.n_ctx
    mag, cols = ex.mag, ex.cols
    g_d, g_k, g_h2 = gamma(d + 1), gamma(k), gamma(h + 2)
    nu = _up((32 * k + 32) * eta)
    drift = _up(gamma(k + 1) + _up(k * nu))
    e_k = _projection_error(dims, _vm_up(ex.X, cols["W_K"]), mag["b_K"][0])
    e_v = _projection_error(dims, _vm_up(ex.X, cols["W_V"]), mag["b_V"][0])
    vf, kf = _sum_up(ex.V, e_v), _sum_up(ex.K, e_k)
    z_mag = _const_up(_scaled_up(_up((1 + g_k) * _up(1 + drift)), vf), k * eta)
    e_z = _sum_up(_scaled_up(_up(1 + drift), e_v),
                  _const_up(_scaled_up(_up(g_k * _up(1 + drift)), vf), k * eta))
    z_wo = _vm_up(z_mag, cols["W_O"])
    values_part = _vm_up(e_z, _abs_columns(ex.M))  # [e_z |W_O·W_U|]_o, for every query
    b_o, b_u = mag["b_O"][0], mag["b_U"][0]
    u_const = [_up(_up(g_d * b) + (d + 1) * eta) for b in b_u]
    _check_range_all(ex.X, kf, vf, z_mag, _sum_up(_vm_up(ex.X, cols["W_K"]), mag["b_K"][0]),
                     _sum_up(_vm_up(ex.X, cols["W_V"]), mag["b_V"][0]))
    out = []
    for x_q, q, centre, half in zip(ex.x_q, ex.q, ex.ov_centre, ex.ov_half):
        e_s, rho = _score_error(dims, ex, x_q, q, kf)
        spread = _softmax_rate(e_s, rho, k, nu)
        x_f = _scaled_up(_up(1 + u), x_q)
        inner = _sum_up(x_f, b_o, z_wo)
        rho_r = _const_up(_scaled_up(g_h2, inner), (h + 2) * eta)
        r_mag = _sum_up(inner, rho_r)
        to_u = _sum_up(_scaled_up(u, x_q), rho_r, _scaled_up(g_d, r_mag))
        row = [abs_sum([rp, uc, vp, _up(spread * hv), _up(drift * cv)])
               for rp, uc, vp, hv, cv in zip(_vm_up(to_u, cols["W_U"]), u_const, values_part,
                                             half, centre)]
        _check_range_all(x_f, r_mag, _sum_up(_vm_up(r_mag, cols["W_U"]), b_u, row))
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


def _score_error(dims, ex: _ExactTables, x_q: list, q: list, kf: list) -> tuple[float, float]:
    """(e_s, ρ) for the query token with |x_q|, |q| (spec/theorem.md §2c, Lemma G, "per-key
    key errors"): e_s ≥ |s̃_j − s_j| for every key j of a sequence with this query and
    every float execution, ρ ≥ u(|s̃_j| + |max s̃|); kf ≥ |k̃_j| for every key.  With
    e_k(j) = cu·|x_j||W_K| + γ_{d+1}|b_K| + (d+1)η the error of key j, the score bound
    c(e_q·(|k_j| + e_k(j)) + |q|·e_k(j)) + γ_{h+10}c(|q| + e_q)·(|k_j| + e_k(j)) + 3η(...)
    is a·|k_j| + b·e_k(j) + 3η(...) = a·|k_j| + β·|x_j| + b·(γ_{d+1}|b_K| + (d+1)η) + 3η(...),
    maximised over the exact key rows [|k_j|, |x_j|].  Refused (Overflow) unless e_s ≤ 1/8
    and ρ ≤ 1/2."""
    u, eta, h = float(U), ETA, dims.d_head
    mag, cols = ex.mag, ex.cols
    c, g_s, g_d = _score_scale(h), gamma(h + 10), gamma(dims.d_model + 1)
    cu = _up(u + _up(g_d * (1 + u)))
    e_q = _projection_error(dims, _vm_up(x_q, cols["W_Q"]), mag["b_Q"][0])
    qf = _sum_up(q, e_q)
    a = _sum_up(_scaled_up(c, e_q), _scaled_up(_up(g_s * c), qf))
    b = _sum_up(a, _scaled_up(c, q))
    beta = _scaled_up(cu, [_abs_dot(row, b) for row in mag["W_K"]])
    coef = a + beta  # against the key rows [|k_j|, |x_j|]
    key_const = [_up(_up(g_d * x) + (dims.d_model + 1) * eta) for x in mag["b_K"][0]]
    e_s = _up(_up(max(_abs_dot(coef, row) for row in ex.key_rows) + _abs_dot(b, key_const))
              + _up(3 * eta * _up(abs_sum(qf) + abs_sum(kf) + 2 * h + 1)))
    rho = _up(2 * u * _up(_up(c * _abs_dot(q, ex.K)) + e_s))
    _check_range_all(qf, _sum_up(_vm_up(x_q, cols["W_Q"]), mag["b_Q"][0]))
    if not (e_s <= 0.125 and rho <= 0.5):
        raise Overflow("float32: the attention scores' float error is too large for the "
                       "softmax error model (spec/theorem.md §2c, Lemma G)")
    return e_s, rho


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


def attention_only_delta(dims, w: dict) -> Fraction:
    """max over q, o of attention_only_deltas: one δ for every sequence and output."""
    return max(max(row) for row in attention_only_deltas(dims, w))


def widened_eu(dims, w: dict, lo: tuple, hi: tuple) -> tuple[tuple, tuple, Fraction]:
    """EU's recorded enclosure (row-major binary64 ends, EU[q, o] at q·v + o) widened entry
    by entry to [lo − δ[q][o], hi + δ[q][o]], rounded outward to binary64, with
    δ = attention_only_deltas (Lemma G), and max δ.  Rules cubic, exact and subcubic_gap
    run unchanged on it to prove the float32 semantics (spec/rules.md §float32 by
    widening EU)."""
    deltas = attention_only_deltas(dims, w)
    v = dims.d_vocab
    if len(lo) != v * v or len(hi) != v * v:
        raise AssertionError("float32: EU is not v×v")  # exit 2: an internal error
    flat = [x for row in deltas for x in row]
    new_lo = tuple(-_up_fraction(x - Fraction(a)) for a, x in zip(lo, flat))
    new_hi = tuple(_up_fraction(Fraction(b) + x) for b, x in zip(hi, flat))
    return new_lo, new_hi, max(flat)


def gamma_exact(n: int) -> Fraction:
    """γ_n = n·u/(1 − n·u) exactly (n·u < 1/2)."""
    if n * U >= Fraction(1, 2):
        raise Overflow(f"float32: a sum of {n} terms is too long for the error model")
    return n * U / (1 - n * U)
