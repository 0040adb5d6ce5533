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


# --- a global bound for the attention-only model (rule brute_force under float32) ------------

def _mag_matrix(rows) -> list:
    """Exact |entries| (Fractions) of an interval matrix: the larger end's magnitude."""
    from .elementary import endpoints

    return [[max(abs(e) for e in endpoints(x)) for x in row] for row in rows]


def _vm(x: list, mat: list) -> list:
    """x·|mat| for non-negative x (exact rationals), as integer dot products over common
    denominators (the same rationals as Σ_i x_i·mat[i][j], faster)."""
    key = id(mat)
    if key not in _COLUMNS or _COLUMNS[key][0] is not mat:
        den = math.lcm(*(Fraction(b).denominator for row in mat for b in row))
        cols = [[int(Fraction(row[j]) * den) for row in mat] for j in range(len(mat[0]))]
        _COLUMNS[key] = (mat, cols, den)
    _, cols, den = _COLUMNS[key]
    x = [Fraction(a) for a in x]
    x_den = math.lcm(*(a.denominator for a in x))
    nums = [a.numerator * (x_den // a.denominator) for a in x]
    return [Fraction(sum(n * c for n, c in zip(nums, col)), den * x_den) for col in cols]


_COLUMNS: dict = {}  # id(matrix) -> (matrix, integer columns, denominator), per δ computation


def _plus(*vectors) -> list:
    return [sum(t) for t in zip(*vectors)]


def _scaled(c, x: list) -> list:
    return [c * a for a in x]


def attention_only_deltas(dims, w: dict) -> list:
    """δ with |ℓ̃_o(t) − ℓ_o(t)| ≤ δ for every sequence t, every output o and every
    binary32 execution ℓ̃ of the attention-only model of spec/theorem.md §2 (the float
    program of §2c), computed exactly in rationals from the weights' magnitudes.

    Lemma G (spec/theorem.md §2c).  With X = max_{i,t} (|E[t]| + |P[i]|) entrywise (a
    bound of every |x_i|), X_q = |E[q]| + |P[k−1]| for the query position (X_q replaces X
    in e_q, Q, and in e_r and R: the residual's x_{k−1}), and e_· the entrywise errors,
    rounding-error analysis of the steps of §2c gives, with magnitude bounds
    Q = X|W_Q| + |b_Q| (K, V likewise), c ≥ 1/sqrt(h):
      e_x = uX;  e_q = e_x|W_Q| + γ_{d+1}((X + e_x)|W_Q| + |b_Q|) + (d+1)η  (e_k, e_v alike)
      e_s = c·(e_q·(K + e_k) + Q·e_k) + γ_{h+10}·c·(Q + e_q)·(K + e_k)
            + 3η(Σ(Q + e_q + K + e_k) + 2h + 1)                          (scores)
      softmax: |ã_i − a_i| ≤ θ a_i + ν, θ = (1 + 2e_s + 4e_s²)·α·(1 + γ_{k+1}) − 1,
            α = (1 + 2ρ)(1 + 8u)/((1 − ρ)(1 − 8u)), ρ = 2u(S + e_s), S = c·Q·K,
            ν = (32k + 32)η   (softmax(s̃)/softmax(s) ∈ [e^{−2e_s}, e^{2e_s}], Lemma S;
            e^{2e_s} ≤ 1 + 2e_s + 4e_s², e^{−2e_s} ≥ 1 − 2e_s)
      e_z = (θ + kν)(V + e_v) + e_v + γ_k(1 + θ + kν)(V + e_v) + kη
      e_r = e_x + e_z|W_O| + γ_{h+2}((X + e_x) + |b_O| + (V + e_z)|W_O|) + (h+2)η
      δ_o = e_r|U| + γ_{d+1}((R + e_r)|U| + |b_U|) + (d+1)η,  R = X + V|W_O| + |b_O|
    and δ[q][o] = δ_o at X_q.  Every bound is checked below 2^126 (range), and e_s ≤ 1/8,
    ρ ≤ 1/2 (the linearisations e^x ≤ 1 + 2x, x ≤ 1); otherwise Overflow.

    Exact magnitudes (Lemma G, "exact magnitudes"): X, K, V, X_q and Q are only used as
    entrywise bounds of |x_i|, |k_i|, |v_i|, |x_{k−1}|, |q|; when every weight of E, P, W_Q,
    W_K, W_V and their biases is a point, they are the exact entrywise maxima of those
    magnitudes over every token and position (`_exact_magnitudes`), each ≤ the triangle
    bound, so δ is ≤ the triangle-bound δ entrywise."""
    _COLUMNS.clear()
    try:
        return _deltas(dims, w)
    finally:
        _COLUMNS.clear()


def _deltas(dims, w: dict) -> list:
    u, eta, d, k = U, Fraction(ETA), dims.d_model, dims.n_ctx
    mag = {name: _mag_matrix(w[name]) for name in w}
    e_mat, p_mat = mag["W_E"], mag["W_pos"]
    x = _plus([max(col) for col in zip(*e_mat)], [max(col) for col in zip(*p_mat)])
    exact = _exact_magnitudes(w, k)  # None unless every input weight is a point
    if exact is not None:
        x = exact["X"]

    def project(x, name, bias):
        """(magnitude bound, error bound) of fl(x̃ W + b) over inputs of magnitude ≤ x."""
        m, b, e_x = mag[name], mag[bias][0], _scaled(u, x)
        real = _plus(_vm(x, m), b)
        err = [a + gamma_exact(d + 1) * (f + bb) + (d + 1) * eta
               for a, f, bb in zip(_vm(e_x, m), _vm(_plus(x, e_x), m), b)]
        return real, err

    (kk, e_k), (val, e_v) = project(x, "W_K", "b_K"), project(x, "W_V", "b_V")
    if exact is not None:
        kk, val = exact["K"], exact["V"]
    _check_bounds(_plus(kk, e_k), _plus(val, e_v))
    if exact is None:
        queries = [(_plus(row, mag["W_pos"][k - 1]), None) for row in e_mat]
        centre = keys = None  # c = 0, H = V: the former e_z; K for every key
    else:
        queries = list(zip(exact["X_q"], exact["Q"]))
        centre = (exact["V_centre"], exact["V_half"])
        keys = _IntRows(exact["keys"])
    return [_query_deltas(dims, mag, x_q, project, kk, e_k, val, e_v, q_exact, centre, keys)
            for x_q, q_exact in queries]


def _points(rows) -> list | None:
    """The exact rational entries of a matrix of point intervals; None if any has width."""
    from .elementary import endpoints

    out = []
    for row in rows:
        ends = [endpoints(x) for x in row]
        if any(lo != hi for lo, hi in ends):
            return None
        out.append([lo for lo, _ in ends])
    return out


def _affine_rows(xs: list, mat: list, bias: list) -> list:
    """The exact vectors x·mat + bias for each x in xs (rationals), by integer dot
    products over common denominators."""
    den = math.lcm(*(Fraction(a).denominator for row in (*mat, bias) for a in row))
    cols = [[int(Fraction(row[j]) * den) for row in mat] for j in range(len(mat[0]))]
    b = [int(Fraction(a) * den) for a in bias]
    x_den = math.lcm(*(Fraction(a).denominator for x in xs for a in x))
    out = []
    for x in xs:
        nums = [int(Fraction(a) * x_den) for a in x]
        out.append([Fraction(sum(n * c for n, c in zip(nums, col)) + bj * x_den, den * x_den)
                    for col, bj in zip(cols, b)])
    return out


def _entrywise_max_abs(vectors: list) -> list:
    return [max(abs(a) for a in col) for col in zip(*vectors)]


def _exact_magnitudes(w: dict, k: int) -> dict | None:
    """Lemma G's magnitude bounds as the exact entrywise maxima over the residual
    vectors x = E[t] + P[i] the model can see (spec/theorem.md §2c, Lemma G, "exact
    magnitudes"): X = max_{t,i} |x|, K = max_{t,i} |x W_K + b_K|, V alike, and per query
    token q, X_q = |E[q] + P[k−1]| and Q_q = |X_q-vector W_Q + b_Q|.  None (the caller keeps
    the triangle-inequality bounds) unless every weight read here is a point interval."""
    names = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
    pts = {name: _points(w[name]) for name in names}
    if any(p is None for p in pts.values()):
        return None
    emb, pos = pts["W_E"], pts["W_pos"]
    xs = [[a + b for a, b in zip(e, p)] for e in emb for p in pos]
    x_q = [[a + b for a, b in zip(e, pos[k - 1])] for e in emb]
    values = _affine_rows(xs, pts["W_V"], pts["b_V"][0])
    keys = [[abs(a) for a in key] for key in _affine_rows(xs, pts["W_K"], pts["b_K"][0])]
    return {
        "X": _entrywise_max_abs(xs),
        "K": [max(col) for col in zip(*keys)],
        "keys": keys,
        "V": _entrywise_max_abs(values),
        "V_centre": [abs(max(col) + min(col)) / 2 for col in zip(*values)],
        "V_half": [(max(col) - min(col)) / 2 for col in zip(*values)],
        "X_q": [[abs(a) for a in x] for x in x_q],
        "Q": [[abs(a) for a in q] for q in _affine_rows(x_q, pts["W_Q"], pts["b_Q"][0])],
    }


class _IntRows:
    """Non-negative rational vectors as integer rows over one denominator, for
    max_j a·row_j (exact)."""

    def __init__(self, rows: list):
        self.den = math.lcm(*(Fraction(a).denominator for row in rows for a in row))
        self.rows = [[int(Fraction(a) * self.den) for a in row] for row in rows]

    def max_dot(self, a: list) -> Fraction:
        a_den = math.lcm(*(Fraction(x).denominator for x in a))
        nums = [int(Fraction(x) * a_den) for x in a]
        best = max(sum(n * r for n, r in zip(nums, row)) for row in self.rows)
        return Fraction(best, self.den * a_den)


def _query_deltas(dims, mag, x, project, kk, e_k, val, e_v, q_exact=None,
                  centre=None, keys=None) -> list:
    """Lemma G's δ_o for the query residual magnitude x (= X_q), every o; q_exact, when
    given, is the exact |q| (a tighter Q); centre, when given, is (|c|, H): every real
    value vector v_i lies in [c − H, c + H] entrywise (Lemma G, "centred values"); keys,
    when given, holds every exact |k_j| (Lemma G, "per-key scores")."""
    u, eta = U, Fraction(ETA)
    d, h, k = dims.d_model, dims.d_head, dims.n_ctx
    e_x = _scaled(u, x)
    x_f = _plus(x, e_x)
    q, e_q = project(x, "W_Q", "b_Q")
    if q_exact is not None:
        q = q_exact
    c = Fraction(1, math.isqrt(h))  # ≥ 1/sqrt(h)
    qf, kf = _plus(q, e_q), _plus(kk, e_k)
    g = gamma_exact(h + 10)
    coef = [c * a + g * c * b for a, b in zip(e_q, qf)]  # e_s = coef·|k_j| + rest, per key
    top = (sum(a * b for a, b in zip(coef, kk)) if keys is None else keys.max_dot(coef))
    e_s = (top + c * (sum(a * b for a, b in zip(e_q, e_k)) + sum(a * b for a, b in zip(q, e_k)))
           + g * c * sum(a * b for a, b in zip(qf, e_k))
           + 3 * eta * (sum(qf) + sum(kf) + 2 * h + 1))
    s = c * sum(a * b for a, b in zip(q, kk))
    rho = 2 * u * (s + e_s)
    if e_s > Fraction(1, 8) or rho > Fraction(1, 2):
        raise Overflow("float32: the attention scores' float error is too large for the "
                       "softmax error model (spec/theorem.md §2c, Lemma G)")
    alpha = (1 + 2 * rho) * (1 + 8 * u) / ((1 - rho) * (1 - 8 * u))
    theta = (1 + 2 * e_s + 4 * e_s * e_s) * alpha * (1 + gamma_exact(k + 1)) - 1
    nu = (32 * k + 32) * eta
    vf = _plus(val, e_v)
    spread = theta + k * nu
    mid, half = centre if centre is not None else ([0] * len(val), val)
    drift = gamma_exact(k + 1) + k * nu  # |Σ ã_i − 1| (Lemma S)
    e_z = [spread * (hv + ev) + cv * drift + ev + gamma_exact(k) * (1 + spread) * a + k * eta
           for a, ev, hv, cv in zip(vf, e_v, half, mid)]
    w_o, b_o = mag["W_O"], mag["b_O"][0]
    e_r = [a + b + gamma_exact(h + 2) * (xf + bo + vw) + (h + 2) * eta
           for a, b, xf, bo, vw in zip(e_x, _vm(e_z, w_o), x_f, b_o,
                                       _vm(_plus(val, e_z), w_o))]
    r = _plus(x, _vm(val, w_o), b_o)
    unembed, b_u = mag["W_U"], mag["b_U"][0]
    deltas = [a + gamma_exact(d + 1) * (f + bu) + (d + 1) * eta
              for a, f, bu in zip(_vm(e_r, unembed), _vm(_plus(r, e_r), unembed), b_u)]
    _check_bounds(x_f, qf, _plus(r, e_r), _plus(_vm(_plus(r, e_r), unembed), b_u), deltas,
                  [s + e_s])
    return deltas


def _check_bounds(*vectors) -> None:
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
