"""Attention handling for rule subcubic_gap: low-rank EQKE (spec/rules.md
§subcubic_gap, §low-rank EQKE; the paper's App. G.2.3–G.2.5, restated and
re-proved, with a tighter cheap error bound).

EQKE = Q·K^T exactly over the reals, with the rule's inputs
  Q = QUERY_TOK = E_q W_Q + b_Q                 (v × h)
  K = KEY_TOK   = (Ē W_K + b_K)/sqrt(d_head)    (v × h)
(checker/definitions.py).  The generator's hints are real matrices (binary64,
exact): A, B (h × r: the low-rank directions), and for error = "cs" also
G, H (h × h: a balanced factorisation of the error) and a centre c (h).  For
ANY such reals, with D = I − A·B^T − G·H^T (the checker computes it),

  EQKE = (QA)(KB)^T + (QG)(KH)^T + Q·D·K^T                       (identity)

and, for each query q, c_q := (QG)_q·c is a constant of the row, so that
  EQKE[q, t] − c_q ∈ L[q, t] ± (‖(QG)_q‖·‖(KH)_t − c‖ + ‖Q_q‖·‖D‖_F·‖K_t‖)
(Cauchy–Schwarz twice; ‖D‖_op ≤ ‖D‖_F), L = (QA)(KB)^T.  error = "rowdiff"
bounds the middle term by the max row-diff trick instead (rowdiff.py, Thm 21;
"mean+rowdiff": Thm 24 with the column means of QG): with c_q = min_t of it,
  EQKE[q, t] − c_q ∈ L[q, t] + [0, δ_q] ± ‖Q_q‖·‖D‖_F·‖K_t‖,
  δ_q ≥ range((QG)_q·(KH)^T).
error = "svd" (the paper's "SVD only": √2·σ₁ of the error) uses one δ for all
rows, δ ≥ √2·σ₁((QG)(KH)^T), certified as sqrt(2·‖(QG)^T QG‖_∞·‖(KH)^T KH‖_∞)
(σ₁(XY^T) ≤ σ₁(X)σ₁(Y); σ₁(X)² = λ_max(X^T X) ≤ any induced norm of X^T X).  Rule subcubic_gap
is invariant under a per-query shift of EQKE's row (Lemma S), so this
enclosure replaces EQKE.  error = "exact" multiplies the error out instead:
EQKE = L + X·K^T with X = Q − (QA)·B^T (O(v²·h), for comparison).
error = "recursive" / "mean+recursive" / "mean-recursive" (the paper's "attention-quadratic",
App. G.2.5/H.2) needs only A, B: EQKE = L + Q·E·K^T, E = I − A·B^T, and
δ_q ≥ range(Q_q·E·K^T) by the recursive max row-diff trick on the chain
Q (v×h) · E (h×h) · K^T (h×v) (Thm 23; Thm 26 with column means), with no
v·h² product: EQKE[q, t] − c_q ∈ L[q, t] + [0, δ_q].
No hint is trusted: a bad hint only makes the enclosure wide.

Cost (exact, `work`): "cs", "rowdiff" O(v·h² + v²·r) — the v²·h product EQKE is never
formed; "recursive" O(v·h·r + h²·r + v²·r); "exact" O(v²·h).
"""

from __future__ import annotations

import math

from mpmath import iv

from ..errors import Malformed
from ..numbers import decode_floats
from . import rowdiff

INPUTS = ("QUERY_TOK", "KEY_TOK")  # replace "EQKE" among the rule's inputs
ERRORS = ("cs", "rowdiff", "mean+rowdiff", "svd", "exact", "recursive", "mean+recursive",
          "mean-recursive")  # how Q(I − AB^T)K^T is bounded
SQRT_COST = 3  # an upper bound of a square root: float sqrt, one square, one comparison
ENTRY_COST = {"cs": 5, "rowdiff": 4, "mean+rowdiff": 4, "svd": 4}  # per (q, t), see _entries
# Thm 23 / Thm 26 on the chain Q·E·K^T: (summary of Q's rows?, summary of E's rows?)
# (the paper's max_diff / mean+max_diff / mean_recursive+max_diff_subproduct_recursive)
RECURSIVE = {"recursive": (False, False), "mean+recursive": (True, False),
             "mean-recursive": (True, True)}
SQRT_RETRIES = 8  # widenings of a float square root before giving up (never needed)
_KEYS = {"cs": {"rank", "error", "A", "B", "G", "H", "c"}, "exact": {"rank", "error", "A", "B"},
         **{name: {"rank", "error", "A", "B"} for name in RECURSIVE},
         "rowdiff": {"rank", "error", "A", "B", "G", "H"},
         "mean+rowdiff": {"rank", "error", "A", "B", "G", "H"},
         "svd": {"rank", "error", "A", "B", "G", "H"}}


class Spec:
    """Parsed attention hints: rank r, error handling, the hint matrices (floats)."""

    def __init__(self, rank, error, mats):
        self.rank, self.error, self.mats = rank, error, mats


def parse(hints, dims) -> Spec:
    """{"rank": r, "error": "cs"|"exact", "A": b64 f64 (h×r, row-major), "B": …,
    and for "cs" "G", "H" (h×h) and "c" (h)} -> Spec (Malformed if bad)."""
    h = dims.d_head
    if not (isinstance(hints, dict) and hints.get("error") in ERRORS
            and set(hints) == _KEYS[hints["error"]]):
        raise Malformed('rule subcubic_gap: "attention" hints must be {"rank", "error": '
                        '"cs" | "rowdiff" | "mean+rowdiff" | "svd" | "exact" | "recursive" | '
                        '"mean+recursive" | "mean-recursive", "A", "B", and "G", "H" (but for '
                        '"exact" and the recursive ones) and "c" (for "cs")}')
    rank = hints["rank"]
    if type(rank) is not int or not 1 <= rank <= h:
        raise Malformed(f"rule subcubic_gap: attention rank must be an integer in [1, {h}]")
    shapes = {"A": (h, rank), "B": (h, rank), "G": (h, h), "H": (h, h), "c": (1, h)}
    mats = {}
    for name in sorted(_KEYS[hints["error"]] - {"rank", "error"}):
        r, c = shapes[name]
        flat = decode_floats(hints[name], r * c, "f64", f"attention hint {name}")
        mats[name] = [list(flat[i * c:(i + 1) * c]) for i in range(r)]
    return Spec(rank, hints["error"], mats)


def work(dims, spec: Spec) -> int:
    """The exact number of scalar operations of `enclosure` (units of spec/rules.md
    §proof length: a matmul r×n·n×c costs r·n·c; a sum of n squares n)."""
    v, h, r = dims.d_vocab, dims.d_head, spec.rank
    total = 2 * v * h * r + v * r * v  # QA, KB, L
    if spec.error == "exact":
        return total + v * r * h + v * h + v * h * v + v * v  # (QA)B^T, X, X·K^T, L + err
    if spec.error in RECURSIVE:
        return total + recursive_work(v, h, r, RECURSIVE[spec.error])
    total += 2 * v * h * h  # QG, KH
    total += h * r * h + h * h * h + 2 * h * h + h * h  # AB^T, GH^T, D, ‖D‖_F²
    total += 2 * v * h + v + 2 * v * SQRT_COST  # ‖Q_q‖², ‖K_t‖², n_q, k_t
    if spec.error == "cs":  # ‖(QG)_q‖², (KH)_t − c and its ‖·‖², two square roots
        total += 3 * v * h + 2 * v * SQRT_COST
    elif spec.error == "svd":  # two Gram matrices, their ∞-norms, δ, δ·[0, 1]
        total += 2 * h * v * h + 2 * (2 * h * h + h - 1) + 2 + SQRT_COST + 1
    else:  # δ_q (rowdiff.py), the column means of QG (Thm 24), δ_q·[0, 1]
        mean = spec.error == "mean+rowdiff"
        total += rowdiff.chain_work(v, [(h, v)], [mean]) + (v * h if mean else 0) + v
    return total + ENTRY_COST[spec.error] * v * v


def dimensionality(dims, spec: Spec) -> int:
    """Unexplained dimensionality of EQKE's black box (spec/rules.md §proof length):
    "cs": the enclosure is a function of QA, KB (2vr reals) and four norms per
    token (4v); "rowdiff": of QA, KB, δ_q, n_q, k_t (3v); "svd": of QA, KB,
    n_q, k_t and one δ (2v + 1); "exact": the error enters entry by entry (v²)."""
    v, r = dims.d_vocab, spec.rank
    per_token = {"cs": 4 * v, "exact": v * v, "svd": 2 * v + 1, **dict.fromkeys(RECURSIVE, v)}
    return 2 * v * r + per_token.get(spec.error, 3 * v)


def elements(dims, spec: Spec) -> int:
    """The elements enclosure() builds, for any error option: the hint matrices as points,
    QA and KB (v × r each), L, the error and the result (v × v each), up to three v × h
    matrices (X or QG, KH, their norms), up to five h × h ones (AB^T, GH^T, E or D, the Gram
    matrices) and vectors of v (at most 8)."""
    v, h, r = dims.d_vocab, dims.d_head, spec.rank
    hinted = sum(len(m) * len(m[0]) for m in spec.mats.values() if m)
    return hinted + 2 * v * r + 3 * v * v + 3 * v * h + 5 * h * h + 8 * v


def enclosure(dims, mats, spec: Spec, charge, ar):
    """Rows of elements A[q][t] with: for each q there is a real c_q such that
    EQKE[q, t] − c_q ∈ A[q][t] for every t (Lemma L).  Charges `work` first,
    counts what it does and fails closed on a difference."""
    from ..certificate import hold

    expected = work(dims, spec)
    charge(expected)
    hold(charge, elements(dims, spec), "low-rank EQKE")
    counter = _Counter(ar, lambda: charge(0))
    q_tok, k_tok = mats["QUERY_TOK"], mats["KEY_TOK"]
    hint = {n: [[ar.point(x) for x in row] for row in m] for n, m in spec.mats.items()}
    qa = counter.matmul(q_tok, hint["A"])  # (v × r)
    kb = counter.matmul(k_tok, hint["B"])  # (v × r)
    low = counter.matmul(qa, _transpose(kb))  # L (v × v)
    if spec.error == "exact":
        out = _exact(counter, q_tok, k_tok, qa, hint["B"], low)
    elif spec.error in RECURSIVE:
        out = _recursive(counter, q_tok, k_tok, hint, low, RECURSIVE[spec.error])
    else:
        out = _factored(counter, q_tok, k_tok, hint, low, spec.error)
    if counter.count != expected:
        raise Malformed(f"internal error: low-rank EQKE counted {counter.count} operations, "
                        f"charged {expected}")
    return out


def _exact(counter, q_tok, k_tok, qa, b, low):
    """EQKE = L + X·K^T, X = Q − (QA)·B^T: every entry multiplied out."""
    x = counter.sub(q_tok, counter.matmul(qa, _transpose(b)))  # (v × h)
    err = counter.matmul(x, _transpose(k_tok))  # (v × v)
    return counter.add(low, err)


def recursive_work(v: int, h: int, r: int, means: tuple) -> int:
    """The exact count of `_recursive` beyond QA, KB, L: E = I − AB^T (h·r·h +
    h²), K^T (free), the column means of Q (v·h) and of E (h²) where summarised,
    the chain bound (rowdiff.chain_work on Q (v×h) · E (h×h) · K^T (h×v); the
    summaries' products h_0·E·K^T, h_1·K^T are vector-matrix, O(h² + v·h)),
    δ_q·[0, 1] (v) and L + [0, δ_q] (v²).  O(v·h + h²·r + v²): no v·h² term."""
    total = h * r * h + h * h + rowdiff.chain_work(v, [(h, h), (h, v)], list(means))
    total += rowdiff.column_means_work(v, h) if means[0] else 0
    total += rowdiff.column_means_work(h, h) if means[1] else 0
    return total + v + v * v


def _recursive(counter, q_tok, k_tok, hint, low, means):
    """EQKE = L + Q·E·K^T exactly, E = I − A·B^T (computed here, enclosed), so
    for each q with c_q = min_t (Q·E·K^T)[q, t]:
        EQKE[q, t] − c_q ∈ L[q, t] + [0, δ_q],  δ_q ≥ range(Q_q·E·K^T),
    δ_q by the recursive max row-diff trick on the chain (Thm 23; Thm 26 with the column
    means of Q and, if means[1], of E as the summaries)."""
    ar = counter.ar
    ab = counter.matmul(hint["A"], _transpose(hint["B"]))  # (h × h)
    e = counter.sub(_identity(ar, len(ab)), ab)  # E = I − AB^T
    k_t = _transpose(k_tok)  # (h × v)
    summaries = [rowdiff.column_means(counter, m) if flag else None
                 for m, flag in zip((q_tok, e), means)]
    deltas = rowdiff.product_row_ranges(counter, q_tok, [e, k_t], summaries)
    up = ar.interval(0.0, 1.0)
    deltas = [_upper_element(ar, x) * up for x in deltas]  # [0, δ_q]
    counter.count += len(deltas)
    out = []
    for q, row in enumerate(low):
        counter.tick()
        out.append([x + deltas[q] for x in row])
    counter.count += len(low) * len(low[0])
    return out


def _factored(counter, q_tok, k_tok, hint, low, error):
    """The error (QG)(KH)^T + Q·D·K^T bounded without multiplying it out
    (Lemma L): the D term by n_q·k_t, n_q ≥ ‖Q_q‖·‖D‖_F, k_t ≥ ‖K_t‖; the
    middle term by Cauchy–Schwarz ("cs") or the max row-diff trick."""
    ar = counter.ar
    h = len(hint["G"])
    qg = counter.matmul(q_tok, hint["G"])  # (v × h)
    kh = counter.matmul(k_tok, hint["H"])  # (v × h)
    ab = counter.matmul(hint["A"], _transpose(hint["B"]))  # (h × h)
    gh = counter.matmul(hint["G"], _transpose(hint["H"]))  # (h × h)
    d = counter.sub(counter.sub(_identity(ar, h), ab), gh)  # D = I − AB^T − GH^T
    d_frob = counter.squares([x for row in d for x in row])  # ‖D‖_F²
    n_norm = [counter.sqrt_up(counter.mul(counter.squares(row), d_frob)) for row in q_tok]
    k_norm = [counter.sqrt_up(counter.squares(row)) for row in k_tok]
    if error == "cs":
        centre = hint["c"][0]
        x_norm = [counter.sqrt_up(counter.squares(row)) for row in qg]
        y_norm = [counter.sqrt_up(counter.squares(counter.sub([row], [centre])[0]))
                  for row in kh]
        return _entries(counter, low, lambda q, t, sym: (x_norm[q] * y_norm[t]
                                                         + n_norm[q] * k_norm[t]) * sym, error)
    up = ar.interval(0.0, 1.0)
    if error == "svd":  # one δ for every row
        two = ar.point(2.0)
        delta = counter.sqrt_up(counter.mul(counter.mul(two, _gram_norm(counter, qg)),
                                            _gram_norm(counter, kh)))
        deltas = [delta * up] * len(low)
        counter.count += 1
    else:
        summaries = [rowdiff.column_means(counter, qg)] if error == "mean+rowdiff" else None
        deltas = rowdiff.product_row_ranges(counter, qg, [_transpose(kh)], summaries)
        deltas = [_upper_element(ar, x) * up for x in deltas]  # [0, δ_q]
        counter.count += len(deltas)
    return _entries(counter, low, lambda q, t, sym: deltas[q] + n_norm[q] * k_norm[t] * sym,
                    error)


def _gram_norm(counter, x):
    """A point element ≥ ‖X^T X‖_∞ = max_i Σ_j |(X^T X)_ij| ≥ λ_max(X^T X) = σ₁(X)²:
    the Gram matrix (h·v·h), h² |·| and h² sums, h − 1 comparisons."""
    ar = counter.ar
    gram = counter.matmul(_transpose(x), x)
    sums = [ar.fsum([ar.abs(g) for g in row]) for row in gram]
    counter.count += 2 * len(gram) * len(gram) + len(gram) - 1
    return _upper_element(ar, ar.up_max([ar.upper(s) for s in sums]))


def _entries(counter, low, spread, error):
    """[L[q][t] + spread(q, t, [−1, 1])]: ENTRY_COST[error] units per entry
    (cs: two products, a sum, × [−1, 1], + L; rowdiff: a product, × [−1, 1],
    + [0, δ_q], + L)."""
    sym = counter.ar.interval(-1.0, 1.0)
    out = []
    for q, row in enumerate(low):
        counter.tick()
        out.append([x + spread(q, t, sym) for t, x in enumerate(row)])
    counter.count += ENTRY_COST[error] * len(low) * len(low[0])
    return out


def _upper_element(ar, u):
    """The point element at the upper bound u (mpmath: a raw number; Arb: a ball
    whose upper end is the bound)."""
    return iv.make_mpf((u, u)) if ar.name == "mpmath" else ar.upper_point(u)


class _Counter:
    """Element arithmetic of the back-end `ar` with an exact operation count."""

    def __init__(self, ar, tick):
        self.ar, self.tick, self.count = ar, tick, 0

    def matmul(self, a, b):
        self.count += len(a) * len(b) * len(b[0])
        return self.ar.matmul(a, b, self.tick)

    def sub(self, a, b):
        self.count += len(a) * len(a[0])
        return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]

    def add(self, a, b):
        self.count += len(a) * len(a[0])
        return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]

    def mul(self, x, y):
        self.count += 1
        return x * y

    def squares(self, xs):
        """An enclosure of Σ x_i² (one unit per term)."""
        self.count += len(xs)
        return self.ar.fsum([x * x for x in xs])

    def sqrt_up(self, u):
        """A point element s with s ≥ sqrt(X) for every real X ≥ 0 in u: a float
        square root, widened until s² ≥ u's upper endpoint is confirmed exactly."""
        self.count += SQRT_COST
        ar = self.ar
        top = ar.upper_point(u)
        s = math.sqrt(max(ar.float_bounds(top)[1], 0.0))
        if not math.isfinite(s):
            raise Malformed("rule subcubic_gap: a norm in the low-rank EQKE bound exceeds "
                            "binary64 (weights or hints too large)")
        for _ in range(SQRT_RETRIES):
            s = s * (1 + 2.0 ** -50) + 2.0 ** -1000
            point = ar.point(s)
            if ar.is_nonnegative(point * point - top):
                return point
        raise Malformed("internal error: no upper bound of a square root was confirmed")


def _identity(ar, h):
    """The h × h identity as point elements."""
    one, zero = ar.point(1.0), ar.point(0.0)
    return [[one if i == j else zero for j in range(h)] for i in range(h)]


def _transpose(m):
    return [list(col) for col in zip(*m)]
