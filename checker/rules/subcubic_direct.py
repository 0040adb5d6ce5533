"""Low-rank direct path for rule subcubic_gap: the tables U (and ĒU, N for
mean+diff) from EU's factors, without forming EU = EU_LEFT·W_U + b_U
(spec/rules.md §subcubic_gap, low-rank EU; the paper's "direct-quadratic",
svd_query+max_diff and "low-rank EU", App. G.2.2, H.2).

Inputs X = EU_LEFT = E_q + b_O (v × d), W_U (d × v), b_U (1 × v).  Hints
{"rank": r, "mean": bool, "basis": T, "inverse": T'} with T, T' any d × d
real matrices (base64 f64, row-major, as every hint matrix; T' ≈ T⁻¹ makes the bound
tight, nothing depends on it):
  h  = the column means of X if mean, else 0;  Xc = X − h (rows)
  s  = h·W_U + b_U                           (the summary row: ĒU of mean+diff)
  F  = Xc·T,  G = T'·W_U,  E = I − T·T'      so that Xc·W_U = F·G + Xc·E·W_U
  P  = F[:, :r]·G[:r, :]                      (the rank-r part, multiplied out: v²·r)
  res[q] ≥ Σ_{j≥r} |F[q, j]|·range(G_j)       (Lemma 20: the rest of the basis)
  err[q] ≥ range(Xc[q]·E·W_U)                 (Lemma 22: the basis not inverting exactly)
and, for every q, m (every o ≠ m):
  U[q][m] = max_{o≠m} ((s + P)[q, o] − (s + P)[q, m]) + res[q] + err[q]
           ≥ EU[q, o] − EU[q, m]
  N[q][m] = max_{o≠m} (P[q, o] − P[q, m]) + res[q] + err[q] ≥ R[q, o] − R[q, m],  R = EU − s.
Cost O(v·d² + d³ + v²·r) (exact: `work`), against O(v²·d) for EU itself.
"""

from __future__ import annotations

from ..errors import Malformed
from ..numbers import decode_floats
from . import rowdiff

INPUTS = ("EU_LEFT", "W_U", "b_U")
MAX_BASIS_EXPONENT = 64  # |basis entries| <= 2^64 (and 0 or >= 2^-64): bounded integer sizes


class _Counter:
    """A counting arithmetic for rowdiff (ar.ar, ar.count, ar.tick: the clock)."""

    def __init__(self, backend, tick=lambda: None):
        self.ar, self.count, self.tick = backend, 0, tick


class Direct:
    """The direct-path tables: u[q][m] (upper bounds), mean = s (elements,
    length v), n[q][m] (upper bounds); u / n only when asked for."""

    def __init__(self, u, mean, n):
        self.u, self.mean, self.n = u, mean, n


def parse(hints, dims) -> dict:
    """Validate the "eu" hints: {"rank": 0..d, "mean": bool, "basis": d×d,
    "inverse": d×d} (the matrices base64 f64, row-major) with finite numbers of bounded
    exponent (Malformed otherwise); the matrices are returned as rows of floats."""
    d = dims.d_model
    if not (isinstance(hints, dict) and set(hints) == {"rank", "mean", "basis", "inverse"}
            and type(hints["rank"]) is int and 0 <= hints["rank"] <= d
            and type(hints["mean"]) is bool):
        raise Malformed('rule subcubic_gap: "eu" hints must be {"rank": 0..d_model, "mean": '
                        'true/false, "basis": d×d, "inverse": d×d (base64 f64)}')
    spec = dict(hints)
    for key in ("basis", "inverse"):
        flat = decode_floats(hints[key], d * d, "f64", f'rule subcubic_gap: "eu" {key}')
        if not all(map(_number, flat)):
            raise Malformed(f'rule subcubic_gap: "eu" {key} must have entries |x| in '
                            f"[2^-{MAX_BASIS_EXPONENT}, 2^{MAX_BASIS_EXPONENT}] or 0")
        spec[key] = [list(flat[i:i + d]) for i in range(0, d * d, d)]
    return spec


def is_identity(spec) -> bool:
    """T = T' = I exactly (then E = 0 and F, G need no product)."""
    return all(x == (i == j) for m in (spec["basis"], spec["inverse"])
               for i, row in enumerate(m) for j, x in enumerate(row))


def _number(x: float) -> bool:
    """A finite binary64 (decode_floats refuses the others) of bounded exponent, or 0."""
    return x == 0 or 2.0 ** -MAX_BASIS_EXPONENT <= abs(x) <= 2.0 ** MAX_BASIS_EXPONENT


def work(dims, spec, need_u: bool, need_n: bool) -> int:
    """The exact number of scalar operations of tables() (units of spec/rules.md
    §proof length; a matmul r×n by n×c costs r·n·c)."""
    v, d, r = dims.d_vocab, dims.d_model, spec["rank"]
    total = 0
    if spec["mean"]:
        total += rowdiff.column_means_work(v, d) + v * d  # h, Xc
        total += rowdiff.vec_mat_work(d, v) + v  # s = h·W_U + b_U
    if not is_identity(spec):  # T = T' = I: F = Xc, G = W_U, E = 0 exactly
        total += v * d * d + d * d * v + d * d * d + d * d  # F, G, T·T', E
        total += rowdiff.chain_work(v, [(d, d), (d, v)], [False, False])  # err
        total += v if r < d else 0  # res + err
    if r < d:
        total += (d - r) * rowdiff.row_range_work(v) + v * rowdiff.lemma20_work(d - r)
    if r > 0:
        total += v * r * v  # P
    if need_u:
        total += v * v + v * rowdiff.row_gaps_work(v) if r > 0 else rowdiff.row_gaps_work(v)
        total += v * v  # + res + err
    if need_n and r > 0:
        total += v * rowdiff.row_gaps_work(v) + v * v
    return total


def elements(dims) -> int:
    """The elements tables() builds, for any hints: T and T' as points, T·T', E (d × d
    each), Xc, F (v × d each), G (d × v), P, its row gaps, U, N (v × v each) and vectors of
    v or d (at most 4)."""
    v, d = dims.d_vocab, dims.d_model
    return 4 * d * d + 3 * v * d + 4 * v * v + 4 * (v + d)


def tables(dims, mats, spec, need_u: bool, need_n: bool, charge, arith) -> Direct:
    """The tables of the module docstring.  Charges work() first, counts as it
    computes, and fails closed (Malformed, exit 2) if the count differs."""
    from ..certificate import hold

    v, d, r = dims.d_vocab, dims.d_model, spec["rank"]
    expected = work(dims, spec, need_u, need_n)
    charge(expected)

    def tick():
        charge(0)  # the time limit, inside long products and at every row

    hold(charge, elements(dims), "low-rank EU tables")
    ar, b = _Counter(arith, tick), arith
    x, w_u, b_u = mats["EU_LEFT"], mats["W_U"], mats["b_U"][0]

    if spec["mean"]:
        h = rowdiff.column_means(ar, x)
        xc = [[xi - hi for xi, hi in zip(row, h)] for row in x]
        s = [a + c for a, c in zip(rowdiff.vec_mat(ar, h, w_u), b_u)]
        ar.count += v * d + v
    else:
        xc, s = x, list(b_u)
    if is_identity(spec):
        f, g, rest = xc, w_u, None
    else:
        basis = [[b.point(float(t)) for t in row] for row in spec["basis"]]
        inverse = [[b.point(float(t)) for t in row] for row in spec["inverse"]]
        f = b.matmul(xc, basis, tick)  # v × d
        g = b.matmul(inverse, w_u, tick)  # d × v
        tt = b.matmul(basis, inverse, tick)  # d × d
        e = [[(b.point(1.0) if i == j else b.point(0.0)) - tt[i][j] for j in range(d)]
             for i in range(d)]
        ar.count += v * d * d + d * d * v + d * d * d + d * d
        rest = rowdiff.product_row_ranges(ar, xc, [e, w_u])  # err[q]
    if r < d:
        ranges = rowdiff.row_ranges(ar, g[r:])
        res = [rowdiff.lemma20(ar, row[r:], ranges) for row in f]
        if rest is not None:
            res = [b.up_add(a, c) for a, c in zip(res, rest)]
            ar.count += v
        rest = res
    if rest is None:  # r = d and T = T' = I: EU = s + P exactly
        rest = [b.upper(b.point(0.0))] * v
    p = b.matmul([row[:r] for row in f], g[:r], tick) if r > 0 else None
    ar.count += v * r * v if r > 0 else 0
    u = n = None
    if need_u:
        if r > 0:
            gaps = [rowdiff.row_gaps(ar, [a + c for a, c in zip(s, row)]) for row in p]
            ar.count += v * v
        else:
            gaps = [rowdiff.row_gaps(ar, s)] * v  # the same row for every q
        u = [[b.up_add(gap, rest[q]) for gap in gaps[q]] for q in range(v)]
        ar.count += v * v
    if need_n:
        if r > 0:
            n = [[b.up_add(gap, rest[q]) for gap in rowdiff.row_gaps(ar, p[q])]
                 for q in range(v)]
            ar.count += v * v
        else:  # P = 0: max_{o≠m} (0 − 0) = 0
            n = [[rest[q]] * v for q in range(v)]
    if ar.count != expected:
        raise Malformed(f"internal error: the low-rank direct path counted {ar.count} "
                        f"operations, charged {expected}")
    return Direct(u, s, n)


def float32_work(dims, direct: Direct) -> int:
    """The scalar operations of widened_float32 besides δ's own (float32.delta_work): per
    query the top two of δ[q] (2v) and v sums, then one addition per entry of U and of N."""
    v = dims.d_vocab
    return v * (3 * v) + v * v * ((direct.u is not None) + (direct.n is not None))


def widened_float32(dims, direct: Direct, weights: dict, charge, arith) -> tuple[Direct, float]:
    """The tables under the float32 semantics (spec/rules.md §low-rank EU under float32,
    Lemma 8f): U[q][m] and N[q][m] each raised by w[q][m] ≥ δ[q][m] + max_{o≠m} δ[q][o],
    δ = float32.attention_only_deltas (Lemma G) from the weights (exact binary64 rows, read
    for δ only); the summary row s unchanged.  Returns them and max w.  Charges δ's
    operations and float32_work before computing, counts, and fails closed (Malformed, exit
    2) on a difference."""
    from .. import float32  # only for a float32 theorem (spec/trust.md)

    v = dims.d_vocab
    expected = float32_work(dims, direct)
    charge(float32.delta_work(dims) + expected)
    deltas = float32.attention_only_deltas(dims, weights, arith.int_matmul)
    count, rows = 0, []
    for row in deltas:
        charge(0)  # the time limit, at every query
        row = [float32.up_float(x) for x in row]  # binary64 ≥ δ (exact when binary64)
        top = max(range(v), key=row.__getitem__)
        best = row[top]
        second = max((x for o, x in enumerate(row) if o != top), default=0.0)
        count += 2 * v
        # w = δ[q][m] + max_{o≠m} δ[q][o], rounded up (float32.up_sum: ≥ the exact sum)
        rows.append([float32.up_sum(x, second if m == top else best) for m, x in enumerate(row)])
        count += v
    worst = max(max(r) for r in rows)
    b = arith
    widen = [[b.upper(b.point(x)) for x in r] for r in rows]

    def raise_by(table):
        nonlocal count
        if table is None:
            return None
        count += v * v
        return [[b.up_add(a, x) for a, x in zip(t_row, w_row)]
                for t_row, w_row in zip(table, widen)]

    out = Direct(raise_by(direct.u), direct.mean, raise_by(direct.n))
    if count != expected:
        raise Malformed(f"internal error: the float32 widening counted {count} operations, "
                        f"charged {expected}")
    return out, worst


def dimensionality(dims, spec) -> int:
    """EU's share of the unexplained dimensionality (spec/rules.md §proof
    length): the rank-r part enters through its 2·r·v factor entries, the
    summary row s (v) and the per-query residual bound (v): (2r + 2)·v,
    against v² for EU entry by entry."""
    return (2 * spec["rank"] + 2) * dims.d_vocab
