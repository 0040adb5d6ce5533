"""Rule subcubic_gap: quadratic counting with a gap table (spec/rules.md
§subcubic_gap; the paper's App. F, Alg. 4–5, Thm 14–17, restated and
re-proved, with its count corrected and its bounds tightened).

Notation (v = d_vocab, k = n_ctx; for a query q and a max m ≥ q):
  e_t = exp(EQKE[q, t]), β_i = exp(EQKP[q, i]), B = Σ_{i<k−1} β_i,
  ρ[t][m] ≥ max_{o≠m} (EVOU[t, o] − EVOU[t, m])        (row top-2: O(v²) in all)
  Pn[m] ≥ max_{i<k−1, o≠m} (PVOU[i, o] − PVOU[i, m]),  Pq[m]: the query position
  direct = "max_diff":  U[q][m] ≥ max_{o≠m} (EU[q, o] − EU[q, m])
  direct = "mean+diff": ĒU = column means of EU, R = EU − ĒU,
      C[m] ≥ max_{o≠m} (ĒU[o] − ĒU[m] + EVOU[m, o] − EVOU[m, m]),
      Ē[m] ≥ max_{o≠m} (ĒU[o] − ĒU[m]),  N[q][m] ≥ max_{o≠m} (R[q, o] − R[q, m]).
Every sequence with query q, max m and c non-max tokens, all ≤ m − g, at
non-query positions P (S = Σ_{i∈P} β_i) has, for every o ≠ m,
  Σ_i w_i x_i(o) ≤ f(S) = (B − S)·e_m·α_M + β_{k−1}·e_q·α_Q + S·μ,
  μ ≥ max_{t ≤ m−g} e_t·(α_P + ρ[t][m]),
which is affine in S: the rule checks f < 0 at the two extreme subset sums.
The gap g and the near band h (tokens m−h < t ≤ m−g bounded one by one,
tokens ≤ m−h through prefix maxima) are hints; the rule proves
  Σ_{(m,q,c) confirmed} C(k−1, c)·(m − g + 1)^c        (c = 0: 1).
A two-gap entry (m, q, c, g, h, g2, h2) covers the sequences whose c non-max
tokens are all ≤ m − g with at most one of them > m − g2 (g < g2 ≤ m): every
position is bounded by μ2 (gap g2) except one, which adds at most
β_max·(μ1 − μ2) (Lemma 6b); it proves
  C(k−1, c)·((m − g2 + 1)^c + c·(g2 − g)·(m − g2 + 1)^(c−1)).
Cost: O(v²·k + Σ (h − g)) scalar operations, counted exactly (`work`).
"""

from __future__ import annotations

import math
from math import comb

from ..arith import MPMATH
from ..errors import Malformed, Rejected
from ..ops import COST
from ..rules import ATTN_ONLY_WEIGHTS
from . import subcubic_attention as attention
from . import subcubic_direct as low_eu

INPUTS = ("EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU")
EXP_COST = COST["exp"]  # an exp costs what the op `exp` charges per element
ARITHMETICS = ("mpmath", "arb")  # back-ends this rule is written against (checker/arith)
SEMANTICS = ("real", "float32")  # float32: on EU widened by Lemma G's δ (certificate.py), or
# with low-rank EU on U and N raised by it (subcubic_direct.widened_float32)
FLOAT32_WIDENS_EU = True  # spec/rules.md §float32 by widening EU
FLOAT32_RAISES_TABLES = True  # without EU ("eu" hints): U, N raised by δ (float32_weights)
FLOAT32_INPUTS = ATTN_ONLY_WEIGHTS  # the weights, read for δ only
NOTE_WEIGHTS = True  # a real check's note gets them too, for δ (certificate.py: note_weights)
DIRECT = ("max_diff", "mean+diff", "min")  # how the direct path EU is bounded


def inputs(dims, hints=None) -> tuple[str, ...]:
    """The inputs for these hints: with "attention" hints (low-rank EQKE,
    subcubic_attention.py) EQKE's factors replace EQKE; with "eu" hints (low-rank
    EU, subcubic_direct.py) EU's factors replace EU."""
    names = INPUTS
    if isinstance(hints, dict) and "attention" in hints:
        names = attention.INPUTS + names[1:]
    if isinstance(hints, dict) and "eu" in hints:
        names = names[:-1] + low_eu.INPUTS
    return names


class _Arith:
    """The rule's scalar arithmetic, one call = one counted operation: the
    back-end's upper-bound arithmetic (values X̄ meaning X ≤ X̄, rounded up)
    and its enclosures (elements); exact comparisons (checker/arith)."""

    def __init__(self, ar=MPMATH, tick=lambda: None):
        self.ar, self.tick = ar, tick  # tick(): the clock, at every row (rowdiff too)
        self.count = 0

    def add(self, a, b):  # X + Y ≤ a + b
        self.count += 1
        return self.ar.up_add(a, b)

    def minus(self, a, y):  # X − Y ≤ a − lower(y), y an element
        self.count += 1
        return self.ar.up_minus(a, y)

    def mul(self, w, a):  # W·X for an element W ≥ 0 and X ≤ a
        self.count += 1
        return self.ar.up_mul(w, a)

    def iadd(self, x, y):  # interval sum
        self.count += 1
        return x + y

    def isub(self, x, y):  # interval difference
        self.count += 1
        return x - y

    def idiv(self, x, n: int):  # interval divided by a positive integer
        self.count += 1
        return x / n

    def max(self, a, b):  # the larger of two upper bounds (exact comparison)
        self.count += 1
        return a if self.ar.greater(a, b) else b

    def min(self, a, b):  # the smaller of two upper bounds of the same quantity
        self.count += 1
        return b if self.ar.greater(a, b) else a


def table_work(dims, direct: str, low: bool = False) -> int:
    """The exact number of scalar operations (units of spec/rules.md §proof
    length) of building _Tables: O(v²); low: U, ĒU, R, N come from
    subcubic_direct (which counts them)."""
    v, k = dims.d_vocab, dims.n_ctx
    n = k - 1  # non-query positions
    total = 3 * v * v + 3 * k * v + v * (k - 2)  # ρ, PVOU gaps, Pn
    total += v * (v - 1) + 2 * v * (v - 1)  # prefix max of ρ, prefix arg-extremes of EQKE
    if direct in ("max_diff", "min") and not low:
        total += 3 * v * v  # U
    if direct in ("mean+diff", "min"):
        total += (0 if low else v * v + v * v + 3 * v * v) + 3 * v + 4 * v * v  # ĒU, R, N, Ē, C
    return total + v * (n + 2 * n * n + 2 * n + 2 * (n - 1))  # per query: B, sorts, S, B − S


def entry_work(dims, gaps: dict, direct: str, extremes) -> int:
    """The exact number of scalar operations of confirming the entries, given
    extremes(q, j) = (argmin, argmax) of EQKE[q, 0..j] (which exps are needed).
    check() counts the operations it performs and fails closed on a mismatch."""
    k = dims.n_ctx
    pairs = {(m, q) for (m, q, _) in gaps}
    cost = {"max_diff": lambda q, m: 5, "mean+diff": lambda q, m: 6 + (q != m),
            "min": lambda q, m: 5 + 6 + (q != m) + 3}[direct]  # α_M, α_Q, α_P
    total = sum(2 + cost(q, m) for m, q in pairs)
    total += len({q for _, q in pairs})  # β_{k−1}·e_q
    exps = {(q, u) for m, q in pairs for u in (q, m)}
    total += sum(2 if c in (0, k - 1) else 8 for (_, _, c) in gaps)
    # a two-gap entry: δ̄ and its product (2), one more addition per placement
    total += sum(2 + _n_placements(c, k) for (_, _, c), gh in gaps.items() if len(gh) == 4)
    for m, q, g, h in {(m, q) + band for (m, q, c), gh in gaps.items() if c > 0
                       for band in _bands(gh)}:
        near, far = len(_near(m, g, h)), m - h >= 0
        total += (3 if far else 0) + 2 * near + (near if far else near - 1)
        exps |= {(q, u) for u in _near(m, g, h)}
        if far:
            exps |= {(q, u) for u in extremes(q, m - h)}
    return total + EXP_COST * len(exps)


def dimensionality(dims, hints=None) -> int:
    """Unexplained dimensionality (spec/rules.md §proof length): EQKE, EVOU and
    EU still enter entry by entry (v² each; through row maxima, prefix maxima
    and the mean row, but every entry is read), EQKP and PVOU (kv each); with
    low-rank EQKE, EQKE's share is subcubic_attention.dimensionality, with
    low-rank EU, EU's share is subcubic_direct.dimensionality."""
    v, k = dims.d_vocab, dims.n_ctx
    hinted = hints if isinstance(hints, dict) else {}
    eqke = eu = v * v
    if "attention" in hinted:
        eqke = attention.dimensionality(dims, attention.parse(hinted["attention"], dims))
    if "eu" in hinted:
        eu = low_eu.dimensionality(dims, low_eu.parse(hinted["eu"], dims))
    return eqke + v * v + eu + 2 * k * v


def table_elements(v: int, k: int) -> int:
    """The elements _Tables and check() hold, for any direct-path option: ρ, its prefix
    maxima, U, R, N, the exps (v² each), EQKE's prefix extremes (pairs: 2v²), the (q, m)
    terms (3 per pair q ≤ m: ≤ 2v² for v ≥ 3), the PVOU gaps (kv), the queries' subset
    sums (4kv) and vectors of v (at most 8)."""
    return 11 * v * v + 5 * k * v + 8 * v


def check(dims, mats, hints, charge, jobs=1, arith=MPMATH, note_weights=None,
          float32_weights=None):
    """note_weights (a real certificate's check only): the distance-to-float32 note
    (spec/rules.md §distance to float32) is computed, from the bounds the entries confirmed."""
    from ..certificate import hold

    v, k = dims.d_vocab, dims.n_ctx
    if v < 2:
        raise Malformed("rule subcubic_gap needs d_vocab >= 2")
    direct, gaps = parse_hints(hints, v, k)
    if "attention" in hints:  # low-rank EQKE: a per-query-shifted enclosure (Lemma S)
        spec = attention.parse(hints["attention"], dims)
        mats = {**mats, "EQKE": attention.enclosure(dims, mats, spec, charge, arith)}
    low = None
    if "eu" in hints:  # low-rank EU: the tables from EU's factors (subcubic_direct)
        low = low_eu.tables(dims, mats, low_eu.parse(hints["eu"], dims),
                            direct != "mean+diff", direct != "max_diff", charge, arith)
    widened = ""
    if float32_weights is not None:  # float32 with low-rank EU: no EU to widen (certificate.py)
        if low is None:  # the kernel passes the weights with "eu" hints only: fail closed
            raise Malformed("internal error: subcubic_gap got float32 weights without "
                            "low-rank EU")
        low, worst = low_eu.widened_float32(dims, low, float32_weights, charge, arith)
        widened = (" (float32 semantics: U and N raised by Lemma G's δ[q][m] + "
                   f"max_(o≠m) δ[q][o] ≤ {worst:.3g})")
    expected = table_work(dims, direct, low is not None)
    charge(expected)
    hold(charge, table_elements(v, k), "tables")
    ar = _Arith(arith, lambda: charge(0))
    t = _Tables(ar, mats, v, k, direct, low)
    entries = entry_work(dims, gaps, direct, t.extremes)
    charge(entries)
    expected += entries
    proven, pairs, w_query, mus = 0, {}, {}, {}
    seen, smallest, failed = ([] if note_weights is not None else None), None, ""
    for (m, q, c), gh in sorted(gaps.items()):
        charge(0)  # the time limit
        if q not in w_query:
            w_query[q] = t.query_weight(q)  # the ends of β_{k−1}·e_q
        if (q, m) not in pairs:
            a_m, a_q, a_p = t.alphas(q, m)
            w_lo, w_hi = w_query[q]
            pairs[(q, m)] = (ar.mul(w_lo if ar.ar.below_zero(a_q) else w_hi, a_q),
                             t.e_times(q, m, a_m), a_p)
        term_q, term_m, a_p = pairs[(q, m)]
        for g, h in _bands(gh) if c > 0 else ():
            if (q, m, g, h) not in mus:
                mus[(q, m, g, h)] = _mu(ar, t, q, m, g, h, a_p)
        if len(gh) == 2:
            g, h = gh
            proven += _confirm(ar, t, q, m, c, g, term_q, term_m, mus.get((q, m, g, h)), seen)
        else:
            proven += _confirm_two(ar, t, q, m, c, gh, term_q, term_m,
                                   [mus[(q, m) + band] for band in _bands(gh)], seen)
        if seen:  # the note's margin (reports only): no operation counted, no verdict
            try:
                margin = min(_margin(t, q, m, c, gh[0], *x) for x in seen)
            except Exception as exc:  # a note never fails a check (spec/rules.md)
                failed, seen = type(exc).__name__, None
            else:
                seen.clear()
                if smallest is None or margin < smallest[0]:
                    smallest = (margin, q, m, c)
    if ar.count != expected:  # fail closed: the reported proof length must be exact
        raise Malformed(f"internal error: subcubic_gap counted {ar.count} operations, "
                        f"charged {expected}")
    note = f"{proven} sequences certified by the subcubic gap rule ({direct}){widened}"
    if failed:
        note += f"; smallest certified margin unavailable ({failed})"
    elif smallest is not None:
        from .. import float32  # Lemma G's δ for the note (a real certificate's)

        margin, q, m, c = smallest
        note += (f"; smallest certified margin {margin:.3g} at (q={q}, m={m}, c={c}) "
                 "(ℓ_m − ℓ_o ≥ it for every o ≠ m and every sequence of the entry), "
                 + float32.distance_note(dims, note_weights, q, m, None, arith.int_matmul,
                                         charge))
    return proven, note


def _margin(t, q, m, c, g, bound, rest, s) -> float:
    """The note's margin of one confirmed bound f ≥ Σ_i w_i x_i(o) (every o ≠ m), in binary64
    (reports only): −upper(f) / W̄, W̄ ≥ Σ_i w_i for every sequence of the entry at this S —
    β_{k−1}·e_q + (B − S)·e_m + S·max_{u ≤ m−g} e_u, upper ends (c = 0: S = 0; c = k − 1:
    S = B) — so ℓ_m − ℓ_o = −Σ_i w_i x_i(o) / Σ_i w_i ≥ it (f < 0), up to binary64 rounding.
    Over S between the placement's extremes −f/W is monotone (a ratio of affine functions,
    W > 0), so its two ends bound every S."""
    b, qd = t.ar.ar, t.queries[q]

    def up(x):
        return b.float_bounds(x)[1]

    def e(u):  # ≥ e_u = exp(EQKE[q, u])
        return math.exp(min(up(t.eqke[q][u]), 700.0))
    weight = up(qd.w_last) * e(q)
    if c == 0:
        weight += up(qd.b_total) * e(m)
    else:
        e_gap = e(t.pre[q][m - g][1])  # the largest upper end of EQKE[q, 0..m−g]
        weight += (up(qd.b_total) * e_gap if rest is None
                   else up(rest) * e(m) + up(s) * e_gap)
    return -up(b.bound_point(bound)) / weight


def _near(m, g, h):
    """Tokens bounded one by one: m − h < t ≤ m − g."""
    return range(max(0, m - h + 1), m - g + 1)


def _n_placements(c, k):
    return 1 if c == k - 1 else 2


def _bands(gh):
    """The (gap, near band) pairs of an entry's hint: (g, h), and (g2, h2) for a
    two-gap entry."""
    return [gh[:2]] if len(gh) == 2 else [gh[:2], gh[2:]]


class _Tables:
    """Quantities depending on at most two indices, O(v²·k) in all (module
    docstring).  Upper bounds are raw mpmath numbers; weights are intervals."""

    def __init__(self, ar: _Arith, mats, v, k, direct, low=None):
        self.ar, self.v, self.k, self.direct = ar, v, k, direct
        self.eqke, self.beta, evou = mats["EQKE"], mats["EXP_EQKP"], mats["EVOU"]
        pvou, eu = mats["PVOU"], mats.get("EU")
        # rho[t][m] ≥ max_{o≠m} EVOU[t, o] − EVOU[t, m]                      (3v²)
        self.rho = [_row_gaps(ar, row) for row in evou]
        # pos[i][m] ≥ max_{o≠m} PVOU[i, o] − PVOU[i, m]                      (3kv)
        pos = [_row_gaps(ar, row) for row in pvou]
        self.p_query = pos[k - 1]
        self.p_rest = [_max_of(ar, [pos[i][m] for i in range(k - 1)]) for m in range(v)]
        # rho_pre[j][m] ≥ max_{t≤j} ρ[t][m]                                 (v(v−1))
        self.rho_pre = _prefix(self.rho, ar.max, ar.tick)
        # pre[q][j] = (argmin lower, argmax upper endpoint) of EQKE[q][0..j]   (2v(v−1))
        self.pre = [_prefix([(t, t) for t in range(v)], self._extend(row), ar.tick)
                    for row in self.eqke]
        self._exps = {}
        if direct in ("max_diff", "min"):
            self.u = low.u if low else [_row_gaps(ar, row) for row in eu]  # U[q][m] (3v²)
        if direct in ("mean+diff", "min"):  # under float32 the summary row is the mean
            # of EU before widening (any row is a summary: Thm 24 – 26), R = widened EU − it
            self._mean_diff(ar, eu, evou, v, low, mats.get("EU_UNWIDENED", eu))
        self.queries = [_Query(ar, self.beta[q], k) for q in range(v)]

    def _mean_diff(self, ar, eu, evou, v, low=None, summed=None):
        """ĒU (v²; the column means of `summed`, default EU), R = EU − ĒU (v²), N[q][m]
        (3v²) — or low's summary row and N (subcubic_direct) —, Ē[m] (3v), C[m] (4v²)."""
        if low:
            mean, self.n = low.mean, low.n
        else:
            mean, summed = [], summed or eu
            for o in range(v):
                ar.tick()
                total = summed[0][o]
                for q in range(1, v):
                    total = ar.iadd(total, summed[q][o])
                mean.append(ar.idiv(total, v))
            resid = [[ar.isub(eu[q][o], mean[o]) for o in range(v)] for q in range(v)]
            self.n = [_row_gaps(ar, row) for row in resid]
        self.e_bar = _row_gaps(ar, mean)
        # C[m] ≥ max_{o≠m} (ĒU[o] + EVOU[m, o]) − (ĒU[m] + EVOU[m, m])
        self.c = [_row_gaps(ar, [ar.iadd(mean[o], evou[m][o]) for o in range(v)])[m]
                  for m in range(v)]  # (_row_gaps looks at the clock)

    def _extend(self, row):
        """Combine a prefix's (argmin lower, argmax upper endpoint) with the next
        token (2 exact comparisons of endpoints)."""
        ar = self.ar.ar
        lows = [ar.lower_point(x) for x in row]  # points: comparisons are exact

        def combine(best, nxt):
            self.ar.count += 2
            (lo, hi), (t, _) = best, nxt
            return (t if lows[t] < lows[lo] else lo,
                    t if ar.greater(ar.upper(row[t]), ar.upper(row[hi])) else hi)
        return combine

    def extremes(self, q, j):
        return self.pre[q][j]

    def e(self, q, t):
        """(lower, upper): elements ⊇ exp at EQKE[q, t]'s lower and upper ends, computed
        once (EXP_COST: one interval exp).  exp increases, so e_t lies between them; a
        product picks the end by its multiplier's sign (e_times), as an interval up_mul
        does.  Two ends, not one element: an Arb ball of a wide range [exp(lo), exp(hi)]
        loses its lower end (e.g. [7.8e-8, 115] becomes [0, 115])."""
        key = (q, t)
        if key not in self._exps:
            self.ar.count += EXP_COST
            b, x = self.ar.ar, self.eqke[q][t]
            self._exps[key] = (b.exp(b.lower_point(x)), b.exp(b.upper_point(x)))
        return self._exps[key]

    def e_times(self, q, t, a):
        """An upper bound of e_t·A given A ≤ a (1 product): e_t > 0, so e_t·A ≤ e_t·a,
        whose maximum over e_t is at e_t's lower end if a < 0, else at its upper end."""
        lo, hi = self.e(q, t)
        return self.ar.mul(lo if self.ar.ar.below_zero(a) else hi, a)

    def e_pre_times(self, q, j, a):
        """An upper bound of e_t·A for every t ≤ j, given A ≤ a: exp increases,
        so e_t lies between the exps of EQKE[q]'s smallest lower endpoint and
        largest upper endpoint over t ≤ j; take the one that is worst for the
        sign of a (1 comparison, 1 product)."""
        t_lo, t_hi = self.pre[q][j]
        e_lo, e_hi = self.e(q, t_lo)[0], self.e(q, t_hi)[1]  # both: the work is sign-free
        self.ar.count += 1
        return self.ar.mul(e_lo if self.ar.ar.below_zero(a) else e_hi, a)

    def query_weight(self, q):
        """(lower, upper) elements ⊇ the ends of β_{k−1}·e_q (1 product): with β ≥ 0
        (checked, as up_mul would) and e_q > 0 the product's range is
        [β_lo·e_lo, β_hi·e_hi]."""
        beta, (e_lo, e_hi), b = self.queries[q].w_last, self.e(q, q), self.ar.ar
        if not b.is_nonnegative(beta):
            raise Rejected("a weight that must be positive (an attention weight) has a "
                           "recorded enclosure reaching below 0")
        self.ar.count += 1
        return (b.product(b.lower_point(beta), e_lo), b.product(b.upper_point(beta), e_hi))

    def alphas(self, q, m):
        """(α_M, α_Q, α_P): upper bounds of the per-position coefficients of
        the max's copies, the query, and a non-max token (before its ρ)."""
        if self.direct == "max_diff":
            return self._alphas_max_diff(q, m)
        if self.direct == "mean+diff":
            return self._alphas_mean_diff(q, m)
        # "min": both bound the same per-position coefficients (Lemma 5); keep the smaller
        return tuple(self.ar.min(a, b) for a, b in zip(self._alphas_max_diff(q, m),
                                                       self._alphas_mean_diff(q, m)))

    def _alphas_max_diff(self, q, m):
        ar, u = self.ar, self.u[q][m]
        a_m = ar.add(ar.add(u, self.rho[m][m]), self.p_rest[m])
        a_q = ar.add(ar.add(u, self.rho[q][m]), self.p_query[m])
        return a_m, a_q, ar.add(u, self.p_rest[m])

    def _alphas_mean_diff(self, q, m):
        ar, n = self.ar, self.n[q][m]
        a_m = ar.add(ar.add(self.c[m], n), self.p_rest[m])
        own_q = self.c[m] if q == m else ar.add(self.e_bar[m], self.rho[q][m])
        a_q = ar.add(ar.add(own_q, n), self.p_query[m])
        return a_m, a_q, ar.add(ar.add(self.e_bar[m], n), self.p_rest[m])


class _Query:
    """Per query q: B = Σ_{i<k−1} β_i, the query's weight β_{k−1}, and for
    each c the extreme c-subset sums S of the non-query β (point intervals:
    the sum of the c smallest lower endpoints, of the c largest upper ones),
    with B − S for c < k − 1 (the attention on the max's copies)."""

    def __init__(self, ar: _Arith, beta_row, k):
        ar.tick()  # the clock, once per query
        nonquery, b = beta_row[:k - 1], ar.ar
        n = len(nonquery)
        self.b_total = b.fsum(nonquery)
        los = sorted(b.lower_point(x) for x in nonquery)  # points: comparisons are exact
        his = sorted((b.upper_point(x) for x in nonquery), reverse=True)
        ar.count += n + 2 * n * n  # the sum B; two sorts (n² units each)
        self.sums, lo, hi = {}, b.point(0.0), b.point(0.0)
        for c in range(1, n + 1):
            lo, hi = ar.iadd(lo, los[c - 1]), ar.iadd(hi, his[c - 1])
            sums = (b.lower_point(lo), b.upper_point(hi))
            rests = [ar.isub(self.b_total, x) for x in sums] if c < n else [None, None]
            self.sums[c] = list(zip(rests, sums))
        self.w_last = beta_row[k - 1]
        # points ≤ every non-query β_i, ≥ every one (two-gap entries; no operation)
        self.beta_lo, self.beta_hi = los[0], his[0]


def _confirm(ar, t: _Tables, q, m, c, g, term_q, term_m, mu, seen=None):
    """Confirm f(S) < 0 for entry (m, q, c, g, ·), given term_q ≥ β_{k−1}·e_q·α_Q,
    term_m ≥ e_m·α_M and μ; return the number of sequences it covers.  seen: a list, to
    which each confirmed bound is appended with its (B − S, S) (the note's margin)."""
    qd = t.queries[q]
    if c == 0:  # every non-query position holds m: S = 0
        _require(ar, ar.add(ar.mul(qd.b_total, term_m), term_q), q, m, c, g, seen)
        return 1
    if c == t.k - 1:  # every non-query position holds a non-max token: S = B
        _require(ar, ar.add(term_q, ar.mul(qd.b_total, mu)), q, m, c, g, seen)
    else:
        for rest, s in qd.sums[c]:
            if not ar.ar.is_nonnegative(rest):
                raise Rejected(f"subcubic_gap: query {q}: the attention outside {c} positions "
                               "cannot be shown positive")
            _require(ar, ar.add(ar.add(term_q, ar.mul(s, mu)), ar.mul(rest, term_m)), q, m, c, g,
                     seen, rest, s)
    return comb(t.k - 1, c) * (m - g + 1) ** c


def _confirm_two(ar, t: _Tables, q, m, c, gh, term_q, term_m, mus, seen=None):
    """Confirm a two-gap entry (m, q, c, g, h, g2, h2) (Lemma 6b): every non-max
    token ≤ m − g, at most one > m − g2.  With μ1 (gap g), μ2 (gap g2) and
    δ̄ ≥ μ1 − μ2, the one token above m − g2, at position j, adds at most
    β_j·δ̄ ≤ wδ := (δ̄ ≥ 0 ? max_i upper β_i : min_i lower β_i)·δ̄ to what μ2
    gives, so f2(S) + wδ < 0 at each placement extreme (f2: f with μ2) suffices.
    Return the number of sequences it covers."""
    g, _, g2, _ = gh
    mu1, mu2 = mus
    qd = t.queries[q]
    d_bar = ar.minus(mu1, ar.ar.bound_point(mu2))  # ≥ μ1 − μ2 (both numbers)
    w_delta = ar.mul(qd.beta_lo if ar.ar.below_zero(d_bar) else qd.beta_hi, d_bar)
    if c == t.k - 1:  # S = B
        _require(ar, ar.add(ar.add(term_q, ar.mul(qd.b_total, mu2)), w_delta), q, m, c, g,
                 seen)
    else:
        for rest, s in qd.sums[c]:
            if not ar.ar.is_nonnegative(rest):
                raise Rejected(f"subcubic_gap: query {q}: the attention outside {c} positions "
                               "cannot be shown positive")
            f2 = ar.add(ar.add(term_q, ar.mul(s, mu2)), ar.mul(rest, term_m))
            _require(ar, ar.add(f2, w_delta), q, m, c, g, seen, rest, s)
    free = m - g2 + 1  # tokens ≤ m − g2
    return comb(t.k - 1, c) * (free ** c + c * (g2 - g) * free ** (c - 1))


def _mu(ar, t: _Tables, q, m, g, h, a_p):
    """μ ≥ max_{t ≤ m−g} e_t·(α_P + ρ[t][m]): tokens ≤ m − h through the
    prefix extremes of EQKE and the prefix max of ρ, the near ones one by one."""
    best = None
    if m - h >= 0:
        best = t.e_pre_times(q, m - h, ar.add(a_p, t.rho_pre[m - h][m]))
    for u in _near(m, g, h):
        value = t.e_times(q, u, ar.add(a_p, t.rho[u][m]))
        best = value if best is None else ar.max(best, value)
    return best  # never None: g ≤ m, so token 0 is far or near


def _require(ar, bound, q, m, c, g, seen=None, rest=None, s=None):
    """Rejected unless the upper bound is < 0; then (bound, rest, s) is appended to seen."""
    if not ar.ar.below_zero(bound):
        raise Rejected(f"subcubic_gap: query {q}, max {m}, {c} non-max tokens <= {m - g}: "
                       "the bound is not negative")
    if seen is not None:
        seen.append((bound, rest, s))


def _row_gaps(ar: _Arith, row):
    """[max_{o≠m} upper(row[o]) − lower(row[m]) for each m], from the top two
    upper endpoints (a pass of 2 units per entry) and one subtraction each."""
    ar.tick()  # the clock, at every row
    best = second = None
    index = -1
    greater = ar.ar.greater
    for o, x in enumerate(row):
        value = ar.ar.upper(x)
        if best is None or greater(value, best):
            index, best, second = o, value, best
        elif second is None or greater(value, second):
            second = value
    ar.count += 2 * len(row)
    if second is None:  # a one-entry row: no o ≠ m exists; the value is never used
        second = best
    return [ar.minus(second if m == index else best, x) for m, x in enumerate(row)]


def _max_of(ar, values):
    best = values[0]
    for x in values[1:]:
        best = ar.max(best, x)
    return best


def _prefix(items, combine, tick=lambda: None):
    """out[j] = combine over i ≤ j of items[i] (elementwise for lists); tick() at each."""
    out = [items[0]]
    for x in items[1:]:
        tick()
        if isinstance(x, list):
            out.append([combine(a, b) for a, b in zip(out[-1], x)])
        else:
            out.append(combine(out[-1], x))
    return out


def parse_hints(hints, v, k):
    """{"direct": "max_diff" | "mean+diff" | "min", "gaps": [[m, q, c, g, h(, g2, h2)], ...]}
    (and optionally "attention": subcubic_attention.parse, "eu": subcubic_direct.parse) ->
    (direct, {(m, q, c): (g, h) or (g, h, g2, h2)}), validated: for c ≥ 1, 1 ≤ g ≤ h ≤
    m + 1 and g ≤ m (every covered token is < m); for c = 0, g = h = 0; a two-gap entry
    has c ≥ 1, g < g2 ≤ m and g2 ≤ h2 ≤ m + 1."""
    if not (isinstance(hints, dict) and set(hints) - {"attention", "eu"} == {"direct", "gaps"}
            and hints["direct"] in DIRECT and isinstance(hints["gaps"], list)):
        raise Malformed('rule subcubic_gap: hints must be {"direct": "max_diff", "mean+diff" '
                        'or "min", "gaps": [[m, q, c, g, h], ...]}')
    gaps = {}
    for entry in hints["gaps"]:
        if not (isinstance(entry, list) and len(entry) in (5, 7)
                and all(type(x) is int for x in entry)):
            raise Malformed(f"rule subcubic_gap: bad hint entry {str(entry)[:80]}")
        m, q, c, g, h = entry[:5]
        max_c = k - 1 if q == m else k - 2
        if not (0 <= q <= m < v and 0 <= c <= max_c):
            raise Malformed(f"rule subcubic_gap: hint entry {entry[:3]} is out of range")
        if c == 0 and (g, h) != (0, 0) or c > 0 and not (1 <= g <= m and g <= h <= m + 1):
            raise Malformed(f"rule subcubic_gap: hint {entry} covers tokens >= max, or has "
                            "a bad gap or near band")
        if len(entry) == 7:  # two-gap: at most one token in (m − g2, m − g]
            g2, h2 = entry[5:]
            if not (c >= 1 and g < g2 <= m and g2 <= h2 <= m + 1):
                raise Malformed(f"rule subcubic_gap: two-gap hint {entry} needs c >= 1, "
                                "g < g2 <= m and g2 <= h2 <= m + 1")
        if (m, q, c) in gaps:
            raise Malformed(f"rule subcubic_gap: duplicate hint for {entry[:3]}")
        gaps[(m, q, c)] = tuple(entry[3:])
    return hints["direct"], gaps
