"""The previous form of Lemma G's δ (checker/float32.py before branch lemma-g2, commit
123614c), kept verbatim as a reference for tests: the current δ must be ≤ it entrywise
(spec/theorem.md §2c: every tightening is ≤ the former bound).  Not used by the checker."""

from __future__ import annotations

import math
from fractions import Fraction

from checker.float32 import ETA, RANGE, Overflow, U


def _mag_matrix(rows) -> list:
    """Exact |entries| (Fractions) of an interval matrix: the larger end's magnitude."""
    from checker.elementary import endpoints

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
    from checker.elementary import endpoints

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

def gamma_exact(n: int) -> Fraction:
    """γ_n = n·u/(1 − n·u) exactly (n·u < 1/2)."""
    if n * U >= Fraction(1, 2):
        raise Overflow(f"float32: a sum of {n} terms is too long for the error model")
    return n * U / (1 - n * U)
