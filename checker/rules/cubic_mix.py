"""Rule cubic_mix: the cubic rule's classes, counted by sums instead of pure sequences
(spec/rules.md §cubic_mix, Lemma M, with the proof).

Rule cubic counts a sequence only when every one of its non-max tokens is "good": its
*pure* sequences are provably correct.  No proof of that shape passes the pure-sequence
ceiling, and on some trained models (weight decay 1.0) that ceiling is 0.96 of the truth:
a mixed sequence is right while one of its pure sequences is wrong.  This rule keeps
cubic's tables and its Lemma 1 (the sign of ℓ_o − ℓ_m is bounded by a sum of one term per
position), and splits the fixed part evenly over the c free positions instead:

  for a class (q, m, P) — query q, max m, P the c non-query positions holding tokens < m,
  every other non-query position m — and every output o != m,
      c·F_o(t) = Σ_{i∈P} (Ã_P[o] + c·β_i·e_{t_i}·X_{t_i}[o]) <= Σ_{i∈P} Ψ_P(t_i, i),
  Ã_P[o] = R_P·e_m·X_m[o] + β_{k−1}·e_q·Y_q[o],  R_P = Σ_{i<k−1, i∉P} β_i,
  Ψ_P(t, i) >= max_{o≠m} (Ã_P[o] + c·β_i·e_t·X_t[o])   (cubic's (I), (II), (II′)).

A sequence of the class is correct when Σ_{i∈P} Ψ_P(t_i, i) < 0; the rule counts those
tuples exactly (each Ψ an upper bound turned into an exact integer, sorted, then a
two-pointer count).  Pure sequences are tuples too, so no good token is lost except where
(I) and (II) trade places across positions.

With "placements": "bounds" (the generator's default) one column Ψ_c serves every position
of every placement of c tokens (Lemma M3: Ã over an enclosure of every R_P, c·β over an
enclosure of every c·β_i), at fewer operations than rule cubic.

Hints: {"joint": [[m, q, mask], ...], "placements": "each" | "bounds"}: the tokens t < m of
(q, m) whose bound over o ∉ {m, t} is the exact maximum (cubic's (II′), O(v) each) instead
of the split (II); the mode ("each" if absent).  Cost O(v³·2^k) ("each") or O(v³·k)
("bounds") for the bounds plus the counting, Σ m^(c−1) (charged before it is done;
spec/rules.md §cubic_mix).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate, combinations
from math import comb

from ..arith import MPMATH
from ..errors import Malformed, Rejected
from ..rules import ATTN_ONLY_WEIGHTS
from . import cubic

INPUTS = cubic.INPUTS
ARITHMETICS = ("mpmath", "arb")  # back-ends this rule is written against
SEMANTICS = ("real", "float32")  # float32: on EU widened by Lemma G's δ (certificate.py)
FLOAT32_WIDENS_EU = True  # spec/rules.md §float32 by widening EU
FLOAT32_INPUTS = ATTN_ONLY_WEIGHTS  # the weights, read for δ only
NOTE_WEIGHTS = True  # a real check's note gets them too, for δ (certificate.py: note_weights)


def check(dims, mats, hints, charge, jobs=1, arith=MPMATH, record=None, note_weights=None):
    """(sequences proved correct, note).  `jobs` is accepted and unused (one process).
    record: None, or a list the rule appends (q, m, P, columns, count) to for every class
    with c ≥ 1 (columns: each position's exact bounds (man, exp)), and (q, m, (), None,
    count) for c = 0 — for the enumeration tests; the verdict is the same.  note_weights (a
    real certificate's check): the distance-to-float32 note (_Note)."""
    from ..certificate import hold

    v, k = dims.d_vocab, dims.n_ctx
    if v < 2:
        raise Malformed("rule cubic_mix needs d_vocab >= 2")
    joint, bounded = parse_hints(hints, v, k)
    # every query's placement sums, charged before the 2^(k−1) placements are listed
    charge(cubic.table_work(v, k) + v * (bounded_query_work(k) if bounded else query_work(k)))
    hold(charge, cubic.table_elements(v, k) + 2 * v * v + 16 * v
         + (0 if bounded else 2 ** k), "tables")
    tables = cubic._Tables(cubic._Counted(arith), mats, v, k, charge)
    placements = [()] if bounded else [P for c in range(k)
                                       for P in combinations(range(k - 1), c)]
    proven, note = 0, (_Note(arith, tables, k) if note_weights is not None else None)
    for q in range(v):
        charge(0)
        beta = tables.beta[q]
        # R_P: the attention of the non-query positions outside P (holding m); "bounds": B only
        rest = {P: arith.fsum([beta[i] for i in range(k - 1) if i not in P])
                for P in placements if len(P) < k - 1}
        w_query = arith.product(beta[k - 1], tables.e[q][q])
        ends = _bounded_weights(arith, beta, k, rest[()]) if bounded else None
        for m in range(q, v):
            mask = joint.get((m, q), 0)
            work = bounded_pair_work if bounded else pair_work
            charge(work(v, k, q, m, mask.bit_count()))
            proven += _count_q_m(tables, arith, q, m, mask, placements, rest, w_query, charge,
                                 record, ends, note)
    text = f"{proven} sequences certified by the cubic mixture rule"
    if note is not None and note.failed:
        text += f"; smallest certified margin unavailable ({note.failed})"
    elif note is not None and note.best is not None:
        from .. import float32  # Lemma G's δ for the note (a real certificate's)

        margin, q, m, c = note.best
        text += (f"; smallest certified margin {margin:.3g} at (q={q}, m={m}, c={c}) "
                 "(ℓ_m − ℓ_o ≥ it for every o ≠ m and every counted sequence of the class), "
                 + float32.distance_note(dims, note_weights, q, m, None, arith.int_matmul,
                                         charge))
    return proven, text


class _Note:
    """The distance-to-float32 note (spec/rules.md §distance to float32), reports only: for
    each class (q, m, c) and each column set (a placement P, or Lemma M3's shared column),
    σ = the largest Σ_{i∈P} Ψ(t_i, i) over the counted tuples (< 0) and the margin
    −(σ/c)/W̄, W̄ = β_{k−1}e_q + R̄·e_m + S̄·max_{u<m} e_u ≥ Σ_i w_i for every sequence of
    the class (upper ends; R̄ ≥ R_P, S̄ ≥ Σ_{i∈P} β_i): since Σ_i w_i x_i(o) ≤ F_o(t) ≤ σ/c
    < 0 (Lemma M), ℓ_m − ℓ_o ≥ it on every counted sequence; c = 0: −max_o(B·e_m·X_m[o] +
    β_{k−1}e_q·Y_q[o]) / (β_{k−1}e_q + B·e_m).  Binary64 from the rule's own bounds (up to
    binary64 rounding).  best = (margin, q, m, c), the smallest."""

    def __init__(self, ar, tables, k):
        self.ar, self.t, self.k, self.best, self.failed = ar, tables, k, None, ""
        self._rows = {}  # q -> (upper ends of e_u, their prefix maxima), once per query

    def up(self, x) -> float:
        """A bound (or an element's upper end) as a binary64 (reports only)."""
        ar = self.ar
        try:
            return ar.float_bounds(x)[1]
        except AttributeError:  # a raw upper bound of the mpmath back-end
            return ar.float_bounds(ar.bound_point(x))[1]

    def add(self, sigma: float, c: int, q: int, m: int, rest, positions: float) -> None:
        """One column set's σ (None: no tuple counted); rest ≥ R_P (None: R = 0), positions
        ≥ Σ_{i∈P} β_i (a float).  A failure is kept in self.failed, never raised."""
        if sigma is None or self.failed:
            return
        try:
            self._add(sigma, c, q, m, rest, positions)
        except Exception as exc:  # a note never fails a check (spec/rules.md)
            self.failed = type(exc).__name__

    def _add(self, sigma, c, q, m, rest, positions) -> None:
        t, up = self.t, self.up
        if q not in self._rows:
            e = [up(x) for x in t.e[q]]
            self._rows[q] = (e, list(accumulate(e, max)))
        e, prefix = self._rows[q]
        weight = up(t.beta[q][self.k - 1]) * e[q]
        weight += 0.0 if rest is None else up(rest) * e[m]
        weight += positions * prefix[m - 1] if c else 0.0
        margin = -(sigma / max(c, 1)) / weight
        if self.best is None or margin < self.best[0]:
            self.best = (margin, q, m, c)



def query_work(k: int) -> int:
    """Per query ("each"): the sums R_P (k−2−|P| additions each, at least 0), β_{k−1}·e_q."""
    return sum(max(k - 2 - c, 0) * comb(k - 1, c) for c in range(k)) + 1


def bounded_query_work(k: int) -> int:
    """Per query ("bounds"): B (k−2 additions), β_{k−1}·e_q, cubic's subset-sum bounds (two
    sorts, (k−1)² each, and the prefix sums) and, per c, R's and W's hulls (8)."""
    n = k - 1
    return max(n - 1, 0) + 1 + 2 * n * n + n * (n + 1) + 8 * n


def pair_work(v: int, k: int, q: int, m: int, joint: int) -> int:
    """The scalar operations of one (q, m) with `joint` joint tokens, in cubic's units
    (spec/rules.md §proof length): 10v for D, X_m, X_q, the weighted vectors and D's top
    two; 2v for c = 0; 4m for h_self, 4m for h_spread, 2v per joint row X_t; per placement
    2v for Ã_P (none when P is every position) and 2v for its top two; per position of P:
    1 for c·β_i, 2m for (I), 3m for (II) and the max, 4v + 2 per joint token, m to find
    its column's largest bound.  Counting, when those largest bounds do not decide the
    class, is charged by _negative_sums (sort_work)."""
    work = _pair_base_work(v, m, joint)
    for c in range(1, _max_c(k, q, m) + 1):
        per = (0 if c == k - 1 else 2 * v) + 2 * v + c * (1 + 6 * m + joint * (4 * v + 2))
        work += comb(k - 1, c) * (per + 1)
    return work


def _pair_base_work(v: int, m: int, joint: int) -> int:
    """What every (q, m) costs in either mode: 12v (the vectors, D's top two, c = 0) and,
    when m > 0, 8m for h_self and h_spread and 2v per joint row X_t."""
    return 12 * v + (8 * m + 2 * v * joint if m else 0)


def _max_c(k: int, q: int, m: int) -> int:
    """The largest number of free positions of a class: k−1 if q = m, k−2 if q < m (some
    non-query position holds m), 0 when m = 0 (no token is below the max)."""
    return 0 if m == 0 else k - 1 if q == m else k - 2


def bounded_pair_work(v: int, k: int, q: int, m: int, joint: int) -> int:
    """pair_work for hints with "placements": "bounds": per (q, m) as pair_work; then per c:
    2v for Ã at the enclosure of R (none when c = k−1), 2v for its top two, 4m for (I) and
    (II), m for Ψ, m for the column's largest, c additions; 4v + 2 per joint token."""
    work = _pair_base_work(v, m, joint)
    for c in range(1, _max_c(k, q, m) + 1):
        work += (2 * v if c < k - 1 else 0) + 2 * v + 6 * m + c + joint * (4 * v + 2)
    return work


def _bounded_weights(ar, beta, k, b_total) -> dict:
    """Per c (1 ≤ c ≤ k−1): (R, W), elements with R_P in R for every placement P of c
    non-query positions (None when c = k−1: R = 0) and c·β_i in W for every non-query
    position i, both >= 0 (spec/rules.md Lemma M3).  Built as lo + (hi − lo)·[0, 1] from
    points: the subset-sum bounds of cubic, and 0 when B − S_hi cannot be shown >= 0."""
    sums = cubic._subset_sum_bounds(cubic._Counted(ar), beta[:k - 1])
    unit = ar.interval(0.0, 1.0)

    def hull(lo, hi):  # lo <= hi points, lo >= 0: an element containing [lo, hi], >= 0
        return lo + (hi - lo) * unit

    b_min, b_max = sums[1]  # the smallest lower and the largest upper endpoint of the β_i
    out = {}
    for c in range(1, k):
        r = None
        if c < k - 1:
            s_lo, s_hi = sums[c]
            low = b_total - s_hi  # R_P = B − S_P >= B − S_hi, and R_P >= 0 in any case
            r_lo = ar.lower_point(low) if ar.is_nonnegative(low) else ar.point(0.0)
            r = hull(r_lo, ar.upper_point(b_total - s_lo))
        out[c] = (r, hull(b_min, b_max) * c)
    return out


def sort_work(m: int, c: int) -> int:
    """Counting the c-tuples of m tokens with a negative sum, one by one: c·m conversions to
    integers, c sorts (m·(log₂m + 1) each), then m^(c−2) two-pointer passes of 2m steps
    (c ≥ 2) or one bisection (c = 1)."""
    work = c * m + c * m * (m.bit_length() + 1)
    return work + (2 * m ** (c - 1) if c >= 2 else m.bit_length())


def _count_q_m(t, ar, q, m, joint, placements, rest, w_query, charge, record=None,
               ends=None, note=None) -> int:
    """The sequences with query q and max m whose bound Σ Ψ is below 0; `ends` (from
    _bounded_weights) selects the bounded classes (q, m, c) instead of each placement."""
    k, v, evou = t.k, t.v, t.evou
    d, p, qv = cubic.pair_vectors(t, ar, q, m, w_query)  # D, e_m·X_m, β_{k−1}·e_q·Y_q
    # c = 0: every non-query position holds m (R = B)
    zero = ar.v_affine(rest[()], p, qv)
    count = int(ar.all_below_zero(zero, skip=(m,)))
    if note is not None and count:
        note.add(max((note.up(x) for o, x in enumerate(zero) if o != m), default=None), 0, q,
                 m, rest[()], 0.0)
    if record is not None:
        record.append((q, m, (), None, count))
    if m == 0:
        return count
    tokens = range(m)
    e_q, dv_rest = t.e[q], t.dv_rest[m]
    # (I): h_self[u] >= e_u·X_u[u]
    h_self = ar.v_mul_each([e_q[u] for u in tokens],
                           ar.v_add([d[u] for u in tokens], [t.dv_self[m][u] for u in tokens]))
    # (II): h_spread[u] >= e_u·(max_{o∉{m,u}} D[o] + max_{o∉{m,u}} ΔV_u[o]); v = 2: no such o
    d_top = ar.top_upper(d, m)
    h_spread = None if v < 3 else ar.v_mul_each(
        [e_q[u] for u in tokens],
        ar.v_add([cubic._excluding(d_top, u) for u in tokens], [dv_rest[u] for u in tokens]))
    exact = [u for u in tokens if joint >> u & 1]
    x_rows = {u: ar.v_add(d, ar.v_diff(evou[u], evou[u][m])) for u in exact}  # X_u[o]
    max_c = k - 1 if q == m else k - 2
    if ends is not None:
        return count + _bounded_classes(ar, t, q, m, max_c, ends, p, qv, h_self, h_spread,
                                        x_rows, charge, record, note)
    for P in placements:
        c = len(P)
        if not 1 <= c <= max_c:
            continue
        a = qv if c == k - 1 else ar.v_affine(rest[P], p, qv)  # Ã_P (R_P = 0 when P is all)
        top = ar.top_upper(a, m)
        a_t = [a[u] for u in tokens]
        a_rest = [cubic._excluding(top, u) for u in tokens]  # max_{o∉{m,u}} Ã_P[o]
        columns = []
        for i in P:
            w = t.beta[q][i] * c  # c·β_i > 0
            psi = ar.v_affine(w, h_self, a_t)  # (I), o = u
            if h_spread is not None:
                split = ar.v_affine(w, h_spread, a_rest)  # (II), o ∉ {m, u}
                for u in exact:  # (II′): the exact maximum over o ∉ {m, u}, if smaller
                    row = ar.v_affine(ar.product(w, e_q[u]), x_rows[u], a)
                    best = cubic._excluding(ar.top_upper(row, m), u)
                    if ar.greater(split[u], best):
                        split[u] = best
                psi = [x if ar.greater(x, y) else y for x, y in zip(psi, split)]
            columns.append(psi)
        counted = _negative_sums(ar, columns, charge, note)
        if note is not None and counted:
            note.add(note.sigma, c, q, m, None if c == k - 1 else rest[P],
                     sum(note.up(t.beta[q][i]) for i in P))
        if record is not None:
            record.append((q, m, P, [[ar.bound_exact(x) for x in col] for col in columns],
                           counted))
        count += counted
    return count


def _bounded_classes(ar, t, q, m, max_c, ends, p, qv, h_self, h_spread, x_rows, charge,
                     record, note=None) -> int:
    """Classes (q, m, c) with one column Ψ_c shared by every position of every placement
    (spec/rules.md Lemma M3): Ã over the enclosure R of every R_P, c·β over the enclosure W
    of every c·β_i (the upper-bound products pick the worse end entry by entry)."""
    k, tokens, e_q = t.k, range(m), t.e[q]
    count = 0
    for c in range(1, max_c + 1):
        r, w = ends[c]
        a = qv if r is None else ar.v_affine(r, p, qv)  # >= Ã_P[o] for every P of size c
        top = ar.top_upper(a, m)
        psi = ar.v_affine(w, h_self, [a[u] for u in tokens])  # (I)
        if h_spread is not None:
            split = ar.v_affine(w, h_spread, [cubic._excluding(top, u) for u in tokens])  # (II)
            for u, x_u in x_rows.items():  # (II′), if smaller
                row = ar.v_affine(ar.product(w, e_q[u]), x_u, a)
                best = cubic._excluding(ar.top_upper(row, m), u)
                if ar.greater(split[u], best):
                    split[u] = best
            psi = [x if ar.greater(x, y) else y for x, y in zip(psi, split)]
        tuples = _negative_sums(ar, [psi] * c, charge, note)
        if note is not None and tuples:
            note.add(note.sigma, c, q, m, r, note.up(w))
        if record is not None:
            column = [ar.bound_exact(x) for x in psi]
            for placement in combinations(range(k - 1), c):
                record.append((q, m, placement, [column] * c, tuples))
        count += comb(k - 1, c) * tuples
    return count


def _negative_sums(ar, columns, charge, note=None) -> int:
    """The number of tuples (x_1, …, x_c), x_i from columns[i], with x_1 + … + x_c < 0,
    computed exactly: each bound as an integer multiple of one power of two.  When the sum
    of the columns' largest bounds is below 0 (upper-bound arithmetic), every tuple is.
    note: note.sigma is set to the largest counted sum (a binary64; None if none)."""
    tops = [ar.up_max(column) for column in columns]
    total = tops[0]
    for top in tops[1:]:
        total = ar.up_add(total, top)
    if ar.below_zero(total):
        if note is not None:
            note.sigma = note.up(total)
        return len(columns[0]) ** len(columns)
    charge(sort_work(len(columns[0]), len(columns)))
    try:
        exact = [[ar.bound_exact(x) for x in column] for column in columns]
    except ValueError:  # a bound that is not a finite number proves nothing
        raise Rejected("cubic_mix: a bound is not a finite number") from None
    low = min(e for column in exact for _, e in column)
    ints = [sorted(man << (e - low) for man, e in column) for column in exact]
    if note is not None:  # the note's σ: not counted work (reports only)
        largest = _largest_below(ints, 0)
        try:
            note.sigma = None if largest is None else math.ldexp(largest, low)
        except OverflowError:
            note.sigma, note.failed = None, "OverflowError"
    return _tuples_below(ints, 0)


def _largest_below(columns, limit: int):
    """The largest sum < limit of a tuple, one entry from each sorted column (None if none)."""
    if len(columns) == 1:
        i = bisect_left(columns[0], limit)
        return columns[0][i - 1] if i else None
    best, floor = None, sum(column[0] for column in columns[1:])
    for x in columns[0]:
        if x + floor >= limit:
            break
        rest = _largest_below(columns[1:], limit - x)
        if rest is not None and (best is None or x + rest > best):
            best = x + rest
    return best


def _tuples_below(columns, limit: int) -> int:
    """The number of tuples, one entry from each sorted column, whose sum is < limit."""
    if len(columns) == 1:
        return bisect_left(columns[0], limit)
    if len(columns) == 2:
        first, second = columns
        count, j = 0, len(second)
        for x in first:  # ascending: the number of partners below limit − x never grows
            while j and second[j - 1] >= limit - x:
                j -= 1
            if not j:
                break
            count += j
        return count
    floor = sum(column[0] for column in columns[1:])
    count = 0
    for x in columns[0]:
        if x + floor >= limit:  # sorted: no later x has a tuple below the limit either
            break
        count += _tuples_below(columns[1:], limit - x)
    return count


def parse_hints(hints, v, k) -> tuple[dict, bool]:
    """{"joint": [[m, q, mask], ...], "placements": "each" | "bounds"} -> ({(m, q): mask},
    bounded): tokens < m, each pair once; "placements" optional, "each" by default."""
    if not (isinstance(hints, dict) and set(hints) in ({"joint"}, {"joint", "placements"})
            and isinstance(hints["joint"], list)
            and hints.get("placements", "each") in ("each", "bounds")):
        raise Malformed('rule cubic_mix: hints must be {"joint": [[m, q, mask], ...]} and '
                        'optionally "placements": "each" or "bounds"')
    joint = {}
    for entry in hints["joint"]:
        if not (isinstance(entry, list) and len(entry) == 3 and all(type(x) is int for x in entry)):
            raise Malformed(f"rule cubic_mix: bad hint entry {str(entry)[:80]}")
        m, q, mask = entry
        if not (0 <= q <= m < v and 0 <= mask < 1 << m):
            raise Malformed(f"rule cubic_mix: hint entry {entry[:2]} is out of range or names "
                            "tokens >= its max")
        if (m, q) in joint:
            raise Malformed(f"rule cubic_mix: duplicate hint for {entry[:2]}")
        joint[(m, q)] = mask
    return joint, hints.get("placements", "each") == "bounds"


def dimensionality(dims, hints=None) -> int:
    """Unexplained dimensionality: cubic's (the same inputs, enumerated): 3v² + 2kv."""
    return cubic.dimensionality(dims, hints)
