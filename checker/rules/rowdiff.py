"""The max row-diff lemmas (the paper's App. G.2.2: Lemma 20, Thm 21, Lemma 22,
Thm 23 and their fusion with mean+diff, Thm 24–26), as exactly counted
upper-bound functions (spec/rules.md §max row-diff lemmas, with proofs).

For a real row vector x, its *range* is
    range(x) = max_{i,j} (x_i − x_j) = max_i x_i − min_j x_j  ≥ 0.
Every bound here is for ranges of rows of a product A·B_1⋯B_n of matrices
given by enclosures (elements of a checker/arith back-end, lists of rows), and
holds for every choice of reals inside the enclosures:

  Lemma 20 / Thm 21    range(a·B)      ≤ Σ_k |a_k|·range(B_k)           (B_k: row k of B)
  Lemma 22 / Thm 23    range(a·B_1⋯B_n) ≤ Σ_k |a_k|·t_1[k],  t_n[k] = range((B_n)_k),
                       t_p[k] = Σ_j |(B_p)_{k,j}|·t_{p+1}[j]
  Thm 24–26 (fused)    with any summary vector h (e.g. the column means):
                       range(x·M) ≤ range(h·M) + Σ_k |x_k − h_k|·t[k],  t[k] ≥ range(M_k)
                       applied at the first factor (Thm 24), or at every factor (Thm 25/26).
The absolute values are essential: range is symmetric in (i, j), which is
what turns a negative coefficient's min into −max; a one-sided quantity such as
max_{o≠m} (x_o − x_m) for a fixed m has no such symmetry (spec/rules.md).

`ar` is a counting arithmetic: any object with `ar.ar` (a checker/arith
back-end) and an integer `ar.count` (rules/subcubic_gap.py's _Arith is one).
Each function adds to `ar.count` exactly its `*_work` formula: one unit per
interval or upper-bound operation, per exact comparison, per |·|.  Returned
bounds are the back-end's upper bounds (values ā meaning X ≤ ā).
"""

from __future__ import annotations

# -- work formulas (exact: each function below adds exactly this to ar.count) --


def row_range_work(n: int) -> int:
    """row_range of n ≥ 1 entries: n − 1 comparisons each for the max and the
    min, one subtraction."""
    return 2 * n - 1


def lemma20_work(r: int, shifted: bool = False) -> int:
    """Σ_k |a_k (− h_k)|·t_k over r ≥ 1 terms: r subtractions if shifted, r |·|,
    r products, r − 1 sums."""
    return (r if shifted else 0) + 3 * r - 1


def vec_mat_work(r: int, c: int) -> int:
    """h·B for B of shape r × c: r·c products and (r − 1)·c sums."""
    return (2 * r - 1) * c


def column_means_work(r: int, c: int) -> int:
    """The column means of an r × c matrix: (r − 1)·c sums, c divisions."""
    return r * c


def chain_work(rows: int, shapes: list, summaries: list) -> int:
    """product_row_ranges for A_0 with `rows` rows and factors of `shapes`
    [(r_1, c_1), ...]; summaries[p] says whether factor p (p = 0: A_0) has one."""
    n = len(shapes)
    total = shapes[-1][0] * row_range_work(shapes[-1][1])  # t_n
    for p in reversed(range(n)):  # p = 0 is A_0's rows against the whole chain
        count = rows if p == 0 else shapes[p - 1][0]
        width = shapes[p][0]
        if summaries[p]:
            total += sum(vec_mat_work(r, c) for r, c in shapes[p:])
            total += row_range_work(shapes[-1][1]) + count * (lemma20_work(width, True) + 1)
        else:
            total += count * lemma20_work(width)
    return total


# -- the lemmas ---------------------------------------------------------------


def _tick(ar) -> None:
    """The clock (the time limit), once per row or column, if the counting arithmetic
    carries one (ar.tick: the rules' counters do)."""
    tick = getattr(ar, "tick", None)
    if tick is not None:
        tick()


def row_range(ar, row):
    """An upper bound of range(x) for every real x in the box `row` (n ≥ 1
    elements): the largest upper endpoint minus the smallest lower endpoint,
    both found by exact comparison.  Work row_range_work(n)."""
    b = ar.ar
    _tick(ar)
    hi, lo, lo_index = b.upper(row[0]), b.upper(b.lower_point(row[0])), 0
    for i in range(1, len(row)):
        up, down = b.upper(row[i]), b.upper(b.lower_point(row[i]))
        if b.greater(up, hi):
            hi = up
        if b.greater(lo, down):
            lo, lo_index = down, i
    ar.count += row_range_work(len(row))
    return b.up_minus(hi, row[lo_index])


def row_ranges(ar, mat):
    """[row_range(row) for each row]: r·row_range_work(c) for r × c."""
    return [row_range(ar, row) for row in mat]


def lemma20(ar, a, t, h=None):
    """Lemma 20: an upper bound of Σ_k |a_k − h_k|·T_k for reals a_k in the
    elements a[k], h_k in h[k] (h = None: 0) and 0 ≤ T_k ≤ t[k], i.e. of
    range((a − h)·B) whenever t[k] ≥ range(B_k).  Work lemma20_work(len(a), h)."""
    b = ar.ar
    _tick(ar)
    total = None
    for k, x in enumerate(a):
        if h is not None:
            x = x - h[k]
        term = b.up_mul(b.abs(x), t[k])  # |a_k − h_k|·T_k ≤ upper(|·|)·t_k (t_k ≥ 0)
        total = term if total is None else b.up_add(total, term)
    ar.count += lemma20_work(len(a), h is not None)
    return total


def vec_mat(ar, h, mat):
    """An enclosure of the row vector h·B (elements).  Work vec_mat_work(r, c)."""
    out = []
    for j in range(len(mat[0])):
        _tick(ar)
        acc = h[0] * mat[0][j]
        for k in range(1, len(mat)):
            acc = acc + h[k] * mat[k][j]
        out.append(acc)
    ar.count += vec_mat_work(len(mat), len(mat[0]))
    return out


def column_means(ar, mat):
    """An enclosure of the column means of `mat` (a summary for Thm 24–26).
    Work column_means_work(r, c)."""
    out = []
    for j in range(len(mat[0])):
        _tick(ar)
        acc = mat[0][j]
        for k in range(1, len(mat)):
            acc = acc + mat[k][j]
        out.append(acc / len(mat))
    ar.count += column_means_work(len(mat), len(mat[0]))
    return out


def summarized_rows(ar, rows, h, tail, t):
    """For each row x of `rows`, an upper bound of range(x·M), M = the product
    of the matrices `tail`, given t[k] ≥ range(M_k) (row k of M).
    h = None: Lemma 20, Σ_k |x_k|·t_k.  h a summary vector (any reals):
    range(h·M) + Σ_k |x_k − h_k|·t_k (Thm 24), with h·M enclosed exactly."""
    if h is None:
        return [lemma20(ar, x, t) for x in rows]
    vec = h
    for mat in tail:
        vec = vec_mat(ar, vec, mat)
    base = row_range(ar, vec)
    out = [ar.ar.up_add(base, lemma20(ar, x, t, h)) for x in rows]
    ar.count += len(rows)
    return out


def product_row_ranges(ar, a0, mats, summaries=None):
    """Upper bounds of range(row r of A_0·B_1⋯B_n) for each row r of A_0.

    mats = [B_1, ..., B_n] (n ≥ 1, shapes chained); summaries = [h_0, ...,
    h_{n−1}] (h_0 for A_0's rows, h_p for B_p's rows; None = no summary, the
    whole list None = none at all).  Without summaries this is Thm 21 (n = 1)
    and Thm 23 (Lemma 20/22 for a single row); with h_0 only, Thm 24; with
    summaries at every level, Thm 26.  Work chain_work(...)."""
    n = len(mats)
    summaries = summaries if summaries is not None else [None] * n
    t = row_ranges(ar, mats[-1])  # t_n[k] ≥ range((B_n)_k)
    for p in reversed(range(1, n)):  # t_p from t_{p+1}: rows of B_p against B_{p+1}⋯B_n
        t = summarized_rows(ar, mats[p - 1], summaries[p], mats[p:], t)
    return summarized_rows(ar, a0, summaries[0], mats, t)


def max_of(ar, bounds):
    """The largest of the upper bounds (n − 1 exact comparisons): the max over
    rows in Thm 21, 23, 24, 26."""
    ar.count += len(bounds) - 1
    return ar.ar.up_max(bounds)


def work_of(a0_rows: int, mats: list, summaries=None) -> int:
    """chain_work for product_row_ranges(ar, a0, mats, summaries) from the
    shapes of its arguments."""
    shapes = [(len(m), len(m[0])) for m in mats]
    flags = [s is not None for s in (summaries or [None] * len(mats))]
    return chain_work(a0_rows, shapes, flags)


def row_gaps(ar, row):
    """The one-sided row differences: for each m, an upper bound of
    max_{o≠m} (x_o − x_m) (n ≥ 2 entries): (the largest upper endpoint among
    o ≠ m) − lower(x_m), from the top two upper endpoints.  Not symmetric in
    (o, m): unlike range, it may not be multiplied by |a| (spec/rules.md).
    Work row_gaps_work(n) = 3n (2 per entry for the top-two pass, 1 subtraction each)."""
    b = ar.ar
    _tick(ar)
    index, best, second = 0, b.upper(row[0]), None
    for o in range(1, len(row)):
        value = b.upper(row[o])
        if b.greater(value, best):
            index, best, second = o, value, best
        elif second is None or b.greater(value, second):
            second = value
    ar.count += row_gaps_work(len(row))
    return [b.up_minus(second if m == index else best, x) for m, x in enumerate(row)]


def row_gaps_work(n: int) -> int:
    return 3 * n
