"""Rule cubic: the convexity argument of the paper's cubic proof, in a
sound and tighter form (spec/rules.md §cubic, with the full proof).

Notation (all from the canonical matrices; v = d_vocab, k = n_ctx):
  e[q][t] = exp(EQKE[q, t]),  β[q][i] = exp(EQKP[q, i]),
  ΔV_x[o] = EVOU[x, o] − EVOU[x, m],
  D[o]    = EU[q, o] − EU[q, m] + max_{i<k−1} (PVOU[i, o] − PVOU[i, m]),
  X_x[o]  = D[o] + ΔV_x[o],
  Y_q[o]  = EU[q, o] − EU[q, m] + PVOU[k−1, o] − PVOU[k−1, m] + ΔV_q[o]   (query).
For query q, max m ≥ q, c non-max tokens at non-query positions P (|P| = c),
S = Σ_{i∈P} β[q][i], R = B − S with B = Σ_{i<k−1} β[q][i], and a pure filling
with token t' < m, for every output o != m

  Σ_i w_i (ℓ_o − ℓ_m contributions) <= f_o(S)
      = R·e[q][m]·X_m[o] + β[q][k−1]·e[q][q]·Y_q[o] + S·e[q][t']·X_t'[o],

which is linear in S.  The rule checks, for S at a lower and an upper bound of
all c-subset sums, with Ã_S[o] = R·e_m·X_m[o] + β_q·e_q·Y_q[o] and s = S·e_t':
  (I)   Ã_S[t'] + s·X_t'[t'] < 0                                  (o = t')
  (II)  max_{o∉{m,t'}} Ã_S[o] + s·(max_{o∉{m,t'}} D[o]
                                  + max_{o∉{m,t'}} ΔV_t'[o]) < 0  (o != t')
A t' passing both is "good" for (q, m, c); every sequence whose c non-max
non-query tokens are all good is correct (separability of the sign of
ℓ_o − ℓ_m over positions), so the rule proves
  Σ_{m, q<=m, c} C(k−1, c)·|good(q, m, c)|^c   (c = 0: 1 if the all-m
  sequence passes, the query being q).
Hints: the good sets, as bitmasks; the checker confirms each claimed t' and
counts only claimed ones.  Cost O(v³·k) interval operations, counted exactly
(table_work + entry_work, spec/rules.md §proof length; a mismatch is exit 2).

Written against the arithmetic back-end interface (checker/arith): `ar` is
mpmath or Arb; every check is an exact comparison of an upper bound with 0.
"""

from __future__ import annotations

import math
from itertools import repeat
from math import comb
from operator import add, mul

from ..arith import MPMATH
from ..errors import Malformed, Rejected
from ..rules import ATTN_ONLY_WEIGHTS
from . import pool

INPUTS = ("EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU")
ARITHMETICS = ("mpmath", "arb")  # back-ends this rule is written against
RECORDED = True  # certificate.py passes the recorded binary64 pairs (the arb accelerator)
SEMANTICS = ("real", "float32")  # float32: on EU widened by Lemma G's δ (certificate.py)
FLOAT32_WIDENS_EU = True  # spec/rules.md §float32 by widening EU
FLOAT32_INPUTS = ATTN_ONLY_WEIGHTS  # the weights, read for δ only
NOTE_WEIGHTS = True  # a real check's note gets them too, for δ (certificate.py: note_weights)
LAZY_INPUTS = True  # rows built when read (certificate.LazyRows): the accelerator reads few


def check(dims, mats, hints, charge, jobs=1, arith=MPMATH, recorded=None, note_weights=None):
    """recorded: {name: rows of recorded (lo, hi) binary64 pairs}, or None.  Under the
    arb back-end each (q, m) is first tried by cubic_fmpz (exact integer vectors in
    C); the back-end's own code decides every (q, m) it does not confirm.  note_weights
    (a real certificate's check, with recorded): the distance-to-float32 note (margin_note)."""
    from ..certificate import hold

    v, k = dims.d_vocab, dims.n_ctx
    if v < 2:
        raise Malformed("rule cubic needs d_vocab >= 2")
    good = parse_hints(hints, v, k)
    expected = table_work(v, k)
    charge(expected)
    hold(charge, table_elements(v, k) + max(jobs, 1) * query_elements(v, k), "tables")
    fast = None
    if getattr(arith, "name", None) == "arb" and recorded is not None:
        from . import cubic_fmpz  # python-flint: only on the arb path

        fast = cubic_fmpz.tables(recorded, v, k, charge)
    if fast is None:
        tables = _Tables(_Counted(arith), mats, v, k, charge)
    else:  # the back-end's tables only where a (q, m) is deferred to its code
        tables = _LazyTables(_Counted(arith), mats, v, k, charge)
        tables.fast = fast
    tables.spreadable = _spreadable(tables)
    entries = entry_work(v, k, good, tables)
    charge(entries)
    expected += entries
    results = _map(jobs, (tables, good, charge), v)
    proven = sum(count for count, _ in results)
    # a lazy table counts table_work when (and where) it is built; charged here once
    built = table_work(v, k) if fast is not None else tables.ar.count
    performed = built + sum(ops for _, ops in results)
    if performed != expected:  # fail closed: the reported proof length must be exact
        raise Malformed(f"internal error: cubic counted {performed} operations, "
                        f"charged {expected}")
    note = f"{proven} sequences certified by the cubic rule"
    if note_weights is not None and recorded is not None:
        note += margin_text(dims, recorded, good, note_weights, arith, charge)
    return proven, note


def margin_text(dims, recorded, good, note_weights, arith, charge) -> str:
    """The distance-to-float32 note of the confirmed good sets (spec/rules.md §distance to
    float32): '; smallest certified margin X at (q=…, m=…, c=…) …, float32 error Y …',
    computed inside notes.attempt (a failure named, the clock looked at, the time limit
    standing)."""
    from .. import float32  # Lemma G's δ for the note (a real certificate's)
    from . import notes

    def compute(clock):
        smallest = margin_note(recorded, good, dims.d_vocab, dims.n_ctx, clock)
        if smallest is None:
            return ""
        margin, q, m, c = smallest
        return (f"; smallest certified margin {margin:.3g} at (q={q}, m={m}, c={c}) "
                "(ℓ_m − ℓ_o ≥ it for every o ≠ m and every covered sequence of the class), "
                + float32.distance_note(dims, note_weights, q, m, None, arith.int_matmul,
                                        clock))

    return notes.attempt(charge, compute, "; smallest certified margin unavailable",
                         detail=False)


def margin_note(recorded, good, v: int, k: int, clock=lambda: None):
    """(X, q, m, c): the smallest, over the classes (q, m, c) the confirmed good sets cover,
    of X(q, m, c) = min over the class's placement extremes S of −V_S / W_S, where V_S is the
    largest of the rule's bounds at S — (I) and (II) (or (II′)) of every claimed token, the
    c = 0 bound — and W_S = β_{k−1}·e_q + (B − S)·e_m + S·max_{u∈G} e_u ≥ Σ_i w_i for every
    covered sequence with that S (upper ends).  By Lemmas 1–4, Σ_i w_i x_i(o) ≤ f_o^û(S) for
    a good token û and every o ≠ m, and −f/W is monotone in S (a ratio of affine functions,
    W > 0), so ℓ_m − ℓ_o ≥ X(q, m, c) on every covered sequence of the class.  Evaluated in
    binary64 on the recorded upper (lower) ends, the same under every back-end (reports only,
    never a verdict; up to binary64 rounding); None if nothing is covered.  Work: the rule's
    checks once more in binary64, O(v) per (q, m) and placement, O(1) per claimed token.
    clock(): looked at once per (q, m) (the note's clock, notes.attempt)."""
    def ends(name):
        rows = recorded[name]
        return [[x for x, _ in row] for row in rows], [[y for _, y in row] for row in rows]
    (eu_lo, eu_hi), (ev_lo, ev_hi), (pv_lo, pv_hi) = ends("EU"), ends("EVOU"), ends("PVOU")
    (e_lo, e_hi), (b_lo, b_hi) = ends("EXP_EQKE"), ends("EXP_EQKP")
    # D[o] − ΔEU[o] ≤ dp_max[m][o]; X_m[o] − ΔEU[o] ≤ xm[m][o]; per q: PVOU[k−1] + EVOU[q]
    dp_max = [[max(pv_hi[i][o] - pv_lo[i][m] for i in range(k - 1)) for o in range(v)]
              for m in range(v)]
    xm = [[a + b - ev_lo[m][m] for a, b in zip(dp_max[m], ev_hi[m])] for m in range(v)]
    yq = [list(map(add, pv_hi[k - 1], ev_hi[q])) for q in range(v)]
    tops = [sorted(range(v), key=row.__getitem__, reverse=True)[:3] for row in ev_hi]
    best = None
    for (m, q), claims in sorted(_by_pair(good).items()):
        clock()
        eq_lo, eq_hi = e_lo[q], e_hi[q]
        d_eu = [x - eu_lo[q][m] for x in eu_hi[q]]
        d = list(map(add, d_eu, dp_max[m]))
        w_lo, w_hi = b_lo[q][k - 1] * eq_lo[q], b_hi[q][k - 1] * eq_hi[q]
        lo, hi = eq_lo[m], eq_hi[m]
        p = [(hi if x >= 0 else lo) * x for x in map(add, d_eu, xm[m])]
        shift = pv_lo[k - 1][m] + ev_lo[q][m]
        qv = [(w_hi if x >= 0 else w_lo) * (x - shift) for x in map(add, d_eu, yq[q])]
        p_pos, p_neg = [x if x > 0 else 0.0 for x in p], [x if x < 0 else 0.0 for x in p]
        bs_lo, bs_hi = sorted(b_lo[q][:k - 1]), sorted(b_hi[q][:k - 1])
        big_lo, big_hi = sum(bs_lo), sum(bs_hi)
        d_top = _top_two(d, m)
        h_self, h_split = _token_terms(claims, m, v, d, d_top, eq_lo, eq_hi, ev_lo, ev_hi,
                                       tops)
        for c, (mask, joint) in claims:
            if c == 0:
                if mask:
                    value = _top_two([(big_hi if x >= 0 else big_lo) * x + y
                                      for x, y in zip(p, qv)], m)[1]
                    best = _smaller(best, -value / (w_hi + big_hi * hi), q, m, c)
                continue
            tokens = _members(mask)
            if not tokens:
                continue
            selves = [h_self[u] for u in tokens]
            # the two largest (II) terms of the split tokens, with the first's token
            split = [(h_split[u], u) for u in tokens if not joint >> u & 1 and v > 2]
            split_top = sorted(split, reverse=True)[:2] + [(None, None)] * 2
            e_gap = max(map(eq_hi.__getitem__, tokens))
            if c == k - 1:  # S = B, no copy of m: (S's ends, B − S's ends)
                placements = [((big_lo, big_hi), None)]
            else:
                placements = [((s, s), (big_lo - s, big_hi - s))
                              for s in (sum(bs_lo[:c]), sum(bs_hi[-c:]))]
            for (s_lo, s_hi), rest in placements:
                if rest is None:
                    a_s, weight = qv, w_hi + s_hi * e_gap
                else:
                    r_lo, r_hi = rest
                    a_s = list(map(add, map(add, map(mul, p_pos, repeat(r_hi)),
                                            map(mul, p_neg, repeat(r_lo))), qv))
                    weight = w_hi + r_hi * hi + s_hi * e_gap
                index, first, second = _top_two(a_s, m)
                value = max(map(add, _times(s_lo, s_hi, selves), [a_s[u] for u in tokens]))  # (I)
                # (II), split: max_u S·h_u + (the largest a_s outside {m, u}); S·h increases
                # with h, so the largest h outside index with first, index's own with second
                (h1, u1), (h2, _) = split_top[:2]
                if h1 is not None:
                    other = h1 if u1 != index else h2
                    if other is not None:
                        value = max(value, _times(s_lo, s_hi, [other])[0] + first)
                    if index in h_split and not joint >> index & 1 and index in tokens:
                        value = max(value, _times(s_lo, s_hi, [h_split[index]])[0] + second)
                for u in _members(joint) if joint else ():  # (II′), exact: o ∉ {m, u}
                    base, lo_u, hi_u = ev_lo[u][m], s_lo * eq_lo[u], s_hi * eq_hi[u]
                    value = max(value, max(
                        ((hi_u if x >= 0 else lo_u) * x + a for o, (x, a) in
                         enumerate(zip(map(add, d, ev_hi[u]), a_s))
                         if o != m and o != u for x in (x - base,)), default=-math.inf))
                best = _smaller(best, -value / weight, q, m, c)
    return best


def _token_terms(claims, m, v, d, d_top, eq_lo, eq_hi, ev_lo, ev_hi, tops):
    """For every token u claimed for (q, m) with c ≥ 1: h_self[u] ≥ e_u·X_u[u] ((I)) and, if
    v > 2, h_split[u] ≥ e_u·(max_{o∉{m,u}} D[o] + max_{o∉{m,u}} ΔV_u[o]) ((II), split)."""
    union = 0
    for c, (mask, _) in claims:
        union |= mask if c > 0 else 0
    h_self, h_split = {}, {}
    for u in _members(union):
        x = d[u] + ev_hi[u][u] - ev_lo[u][m]
        h_self[u] = (eq_hi[u] if x >= 0 else eq_lo[u]) * x
        if v > 2:
            t0, t1, t2 = tops[u]
            top = t0 if t0 != m and t0 != u else t1 if t1 != m and t1 != u else t2
            y = (d_top[2] if d_top[0] == u else d_top[1]) - ev_lo[u][m] + ev_hi[u][top]
            h_split[u] = (eq_hi[u] if y >= 0 else eq_lo[u]) * y
    return h_self, h_split


def _members(mask: int) -> list:
    """The set bits of mask >= 0, increasing."""
    return [u for u, bit in enumerate(reversed(bin(mask)[2:])) if bit == "1"]


def _times(lo, hi, xs):
    """≥ W·X for W ∈ [lo, hi] ⊂ [0, ∞) and each X ≤ x in xs (binary64, the note)."""
    if lo == hi:
        return list(map(mul, xs, repeat(hi)))
    return [(hi if x >= 0 else lo) * x for x in xs]


def _by_pair(good):
    pairs = {}
    for (m, q, c), claim in sorted(good.items()):
        pairs.setdefault((m, q), []).append((c, claim))
    return pairs


def _smaller(best, margin, q, m, c):
    return (margin, q, m, c) if best is None or margin < best[0] else best


def _top_two(xs, skip):
    """(index, largest, second largest or −inf) of xs without index skip (binary64, the
    note; xs is not modified)."""
    xs = list(xs)
    xs[skip] = -math.inf
    first = max(xs)
    index = xs.index(first)
    xs[index] = -math.inf
    return index, first, max(xs)


class _Counted:
    """The back-end's arithmetic (checker/arith), counting the scalar
    operations it performs in the units of spec/rules.md §proof length: one
    per interval or upper-bound operation (a vector operation: one per entry,
    two for an affine one), one per compare-and-select, two per element of a
    top-two pass.  Sign tests of a final bound and endpoint reads are not
    counted.  Everything else is the back-end's own."""

    def __init__(self, ar):
        self.base = ar.base if isinstance(ar, _Counted) else ar
        self.count = 0
        base = self.base  # the hot free functions, without __getattr__
        self.all_below_zero, self.below_zero = base.all_below_zero, base.below_zero
        self.upper, self.greater = base.upper, base.greater

    def __getattr__(self, name):  # sign tests, endpoints, exact comparisons: free
        return getattr(self.base, name)

    def fresh(self):
        """A counter of its own on the same back-end (one per query)."""
        return _Counted(self.base)

    def up_diff(self, x, y):
        self.count += 1
        return self.base.up_diff(x, y)

    def up_add(self, a, b):
        self.count += 1
        return self.base.up_add(a, b)

    def up_minus(self, a, y):
        self.count += 1
        return self.base.up_minus(a, y)

    def up_mul(self, w, a):
        self.count += 1
        return self.base.up_mul(w, a)

    def up_max(self, xs):
        self.count += len(xs) - 1
        return self.base.up_max(xs)

    def imul(self, x, y):  # interval product (>= 0 when both factors are)
        self.count += 1
        return self.base.product(x, y)

    def isub(self, x, y):  # interval difference
        self.count += 1
        return x - y

    def fsum(self, xs):
        xs = list(xs)
        self.count += len(xs)
        return self.base.fsum(xs)

    def v_diff(self, xs, y):
        self.count += len(xs)
        return self.base.v_diff(xs, y)

    def v_add(self, a, b):
        self.count += len(a)
        return self.base.v_add(a, b)

    def v_mul(self, w, xs):
        self.count += len(xs)
        return self.base.v_mul(w, xs)

    def v_mul_each(self, ws, xs):
        self.count += len(xs)
        return self.base.v_mul_each(ws, xs)

    def v_affine(self, w, xs, ys):
        self.count += 2 * len(xs)
        return self.base.v_affine(w, xs, ys)

    def top_upper(self, xs, skip):
        self.count += 2 * len(xs)
        return self.base.top_upper(xs, skip)


def table_elements(v: int, k: int) -> int:
    """The elements of _Tables: dp_max, dp_query, dv_m, dv_self, dv_rest (v² each), the top
    three of each EVOU row (3v), one m's PVOU differences while dp_max is built ((k − 1)·v)."""
    return 5 * v * v + 3 * v + (k - 1) * v


def query_elements(v: int, k: int) -> int:
    """What each process (the checker, or each forked worker) builds for one (q, m): about
    10 vectors of v, the X_u rows of joint tokens (v² at most), one query's placements."""
    return v * v + 10 * v + 2 * k


def table_work(v: int, k: int) -> int:
    """The exact number of scalar operations of building _Tables: per (m, o)
    k−1 differences and k−2 compare-and-selects (dp_max), one difference each
    for dp_query, dv_m, dv_self, a top-three pass (3 per entry of EVOU), and
    one difference per (m, t) whose dv_rest exists (all when v >= 3; t = m
    only when v = 2).  O(v²·k)."""
    rest = v * v if v >= 3 else v
    return v * v * ((k - 1) + (k - 2) + 3 + 3) + rest


def query_work(k: int) -> int:
    """Per query: B (k−1 additions), two sorts of k−1 numbers ((k−1)² units
    each), the subset sums (c + c additions for each c), B − S (two per
    c < k−1), and β_{k−1}·e_q."""
    n = k - 1
    return n + 2 * n * n + n * (n + 1) + 2 * (n - 1) + 1


def entry_work(v: int, k: int, good: dict, tables) -> int:
    """The exact number of scalar operations of confirming the hints, given
    the tables (which dv_rest exist).  check() counts the operations it
    performs and fails closed on a mismatch.  Per query: query_work.  Per
    (q, m ≥ q): 10v (D, X_m, X_q, the two weighted vectors, the top two of D),
    2v for a claimed c = 0; per claimed token u: 2 (h_self), 2 more if its (II)
    can be split (h_spread); per joint token: 2v once (its row X_u); per
    claimed c and placement: 2v (Ã_S, unless S = B), 2v (its top two), 2 per
    claimed token ((I)), 2 per split token, 1 + 2v per joint token ((II′))."""
    total = v * query_work(k) + 10 * v * (v * (v + 1) // 2)
    spreadable = _spreadable(tables)
    by_pair = {}
    for (m, q, c), (mask, joint) in good.items():
        by_pair.setdefault((m, q), []).append((c, mask, joint))
    works = {}  # (m, q) -> its claims' share: pair_work without recounting (the accelerator)
    for (m, q), claims in by_pair.items():
        works[(m, q)] = work = _claims_work(v, k, claims, spreadable[m])
        total += work
    tables.claims_work = works
    return total


def _spreadable(tables) -> list:
    """spreadable[m]: the tokens u whose (II) can be split (dv_rest[m][u] exists), a mask."""
    if isinstance(tables, _LazyTables):  # d_vocab >= 3: dv_rest[m][u] always exists
        return [(1 << tables.v) - 1] * tables.v
    return [sum(1 << u for u, x in enumerate(row) if x is not None) for row in tables.dv_rest]


def pair_work(v: int, k: int, good: dict, q: int, m: int, spreadable_m: int) -> int:
    """The operations _count_q_m performs for (q, m): entry_work's share of the pair."""
    claims = [(c, *good[(m, q, c)]) for c in range(k) if (m, q, c) in good]
    return 10 * v + _claims_work(v, k, claims, spreadable_m)


def _claims_work(v: int, k: int, claims, spreadable_m: int) -> int:
    """entry_work's operations for the claims [(c, mask, joint)] of one (q, m), beyond its 10v."""
    total = union = joint_union = 0
    for c, mask, joint in claims:
        if c == 0:
            total += 2 * v if mask else 0
            continue
        union |= mask
        joint_union |= joint
        if not mask:
            continue
        split = _popcount(mask & ~joint & spreadable_m)
        per_placement = (2 * v + 2 * _popcount(mask) + 2 * split
                         + _popcount(joint) * (1 + 2 * v))
        total += 2 * (2 * v + per_placement) if c < k - 1 else per_placement
    total += 2 * _popcount(union) + 2 * _popcount(union & spreadable_m)
    total += 2 * v * _popcount(joint_union)
    return total


def _popcount(mask: int) -> int:
    return mask.bit_count()


class _Tables:
    """What the paper's complexity argument caches: quantities depending on at
    most two of (q, m, t), computed once, O(v²·k).  Output differences are kept
    as upper bounds (numbers.py, upper-bound arithmetic): every check of the
    rule is "an upper bound is < 0" and every weight is positive."""

    def __init__(self, ar: _Counted, mats, v, k, charge=lambda work: None):
        self.v, self.k, self.ar = v, k, ar  # ar counts the tables' operations
        self.e, self.beta = mats["EXP_EQKE"], mats["EXP_EQKP"]
        self.eu, evou, pvou = mats["EU"], mats["EVOU"], mats["PVOU"]
        self.evou = evou
        base = ar.base  # element-by-element loops below count their work per row
        # dp_max[m][o] >= max_{i<k−1} (PVOU[i, o] − PVOU[i, m])   (non-query positions)
        self.dp_max = []
        for m in range(v):
            charge(0)  # the clock, at every row of the tables
            diffs = [ar.v_diff(pvou[i], pvou[i][m]) for i in range(k - 1)]
            self.dp_max.append([base.up_max(column) for column in zip(*diffs)])
            ar.count += v * (k - 2)  # the compare-and-selects of the v maxima
        # dp_query[m][o] >= PVOU[k−1, o] − PVOU[k−1, m]              (the query position)
        self.dp_query = [ar.v_diff(pvou[k - 1], pvou[k - 1][m]) for m in range(v)]
        # dv_m[m][o] >= ΔV_m[o] = EVOU[m, o] − EVOU[m, m]
        self.dv_m = [ar.v_diff(evou[m], evou[m][m]) for m in range(v)]
        # dv_self[m][t] >= ΔV_t[t] = EVOU[t, t] − EVOU[t, m]
        self.dv_self = [[base.up_diff(evou[t][t], evou[t][m]) for t in range(v)]
                        for m in _ticking(range(v), charge)]
        ar.count += v * v
        # dv_rest[m][t] >= max_{o ∉ {m, t}} ΔV_t[o] (None if there is no such o)
        tops = [_top3(ar, row) for row in _ticking(evou, charge)]
        self.dv_rest = [[_rest_of_row(ar, tops[t], m, t, evou[t][m]) for t in range(v)]
                        for m in _ticking(range(v), charge)]


class _LazyTables:
    """_Tables, built in each process on first use (the arb accelerator, cubic_fmpz,
    decides most (q, m) without them).  Only for d_vocab >= 3 (cubic_fmpz.tables)."""

    _BUILT = ("eu", "evou", "dp_max", "dp_query", "dv_m", "dv_self", "dv_rest")

    def __init__(self, ar: _Counted, mats, v, k, charge):
        self.v, self.k, self.ar = v, k, ar
        self.e, self.beta = mats["EXP_EQKE"], mats["EXP_EQKP"]
        self._pending = (mats, charge)

    def __getattr__(self, name):
        if name not in self._BUILT:
            raise AttributeError(name)
        mats, charge = self._pending
        built = _Tables(_Counted(self.ar.base), mats, self.v, self.k, charge)
        for key in self._BUILT:  # its operations: table_work, charged by check()
            setattr(self, key, getattr(built, key))
        return getattr(self, name)


def _ticking(rows, charge):
    """The rows, with a look at the clock before each."""
    for row in rows:
        charge(0)
        yield row


_SHARED = {}  # the tables, inherited by forked workers (intervals do not pickle)


# Below this many (q, m) pairs the integer accelerator (~50 µs a pair) finishes before forked
# workers would have started (~0.3 s): one process (speed only; the counts are the same)
FORK_MIN_PAIRS_FAST = 1 << 14


def _map(jobs, args, v):
    """Per-query counts, in `jobs` forked processes (queries are independent).
    A worker's exception (Rejected, a time limit) propagates to the caller, and
    a worker that dies raises BrokenProcessPool (exit 2): never a pass."""
    cheap = getattr(args[0], "fast", None) is not None and v * (v + 1) // 2 < FORK_MIN_PAIRS_FAST
    if jobs <= 1 or cheap or not pool.can_fork():
        return [_count_q(*args, q) for q in range(v)]
    _SHARED["args"] = args
    try:
        return pool.map_in_order(jobs, _count_q_shared, range(v), tick=lambda: args[2](0))
    finally:
        _SHARED.clear()


def _count_q_shared(q):
    return _count_q(*_SHARED["args"], q)


def _count_q(t: _Tables, good, charge, q):
    """Confirm the claimed good sets for query q; return the count they prove
    and the number of scalar operations performed (query_work + entry_work)."""
    charge(0)  # enforces the time limit
    k, v, ar = t.k, t.v, t.ar.fresh()
    fast = getattr(t, "fast", None)
    if fast is None:
        terms = query_terms(t, ar, q)
        count = sum(_count_q_m(t, ar, good, q, m, *terms)
                    for m in _ticking(range(q, v), charge))
        return count, ar.count
    # the arb accelerator (cubic_fmpz): a (q, m) it confirms counts the operations the
    # reference code would perform there (pair_work); any other is decided by that code,
    # with the query's terms computed when the first such pair needs them (query_work(k)
    # operations, counted either way: computed, or, when no pair needs them, not computed)
    fast_terms, count, terms = fast.query_terms(q), 0, None
    for m in _ticking(range(q, v), charge):
        confirmed = fast.count_q_m(good, q, m, fast_terms)
        if confirmed is None:
            if terms is None:
                terms = query_terms(t, ar, q)
            count += _count_q_m(t, ar, good, q, m, *terms)
        else:
            count += confirmed
            # pair_work(v, k, good, q, m, t.spreadable[m]), from entry_work's own sums
            ar.count += 10 * v + t.claims_work.get((m, q), 0)
    if terms is None:
        ar.count += query_work(k)
    return count, ar.count


def query_terms(t: _Tables, ar: _Counted, q):
    """(B, placements, β_{k−1}·e_q) of query q, in the back-end's arithmetic: exactly
    query_work(k) operations counted on ar."""
    k = t.k
    nonquery = t.beta[q][:k - 1]
    b_total = ar.fsum(nonquery)
    # Placements: for c < k−1, S ranges within [S_lo, S_hi] and R = B − S; for
    # c = k−1 every non-query position is t', S = B and R = 0 exactly.
    placements = {c: [(ar.isub(b_total, s_bound), s_bound) for s_bound in bounds]
                  for c, bounds in _subset_sum_bounds(ar, nonquery).items() if c < k - 1}
    placements[k - 1] = [(None, b_total)]
    w_query = ar.imul(t.beta[q][k - 1], t.e[q][q])
    return b_total, placements, w_query


def pair_vectors(t: _Tables, ar, q, m, w_query):
    """(D, e_m·X_m, β_{k−1}·e_q·Y_q) for (q, m), as upper bounds indexed by the output o
    (Lemma 1's terms; entry o = m is never read): 8v operations.  Shared with cubic_mix."""
    eu, evou = t.eu[q], t.evou
    d_eu = ar.v_diff(eu, eu[m])  # >= EU[q, o] − EU[q, m]
    d = ar.v_add(d_eu, t.dp_max[m])  # >= D[o]
    x_m = ar.v_add(d, t.dv_m[m])  # >= X_m[o]
    # >= Y_q[o] = EU[q,o] − EU[q,m] + PVOU[k−1,o] − PVOU[k−1,m] + ΔV_q[o]
    x_q = ar.v_add(ar.v_add(d_eu, t.dp_query[m]), ar.v_diff(evou[q], evou[q][m]))
    return d, ar.v_mul(t.e[q][m], x_m), ar.v_mul(w_query, x_q)


def _count_q_m(t: _Tables, ar: _Counted, good, q, m, b_total, placements, w_query):
    """Confirm the claimed good sets for (q, m, ·) and return their count.
    Vectors are indexed by the output o; their entry o = m is never read."""
    k, evou = t.k, t.evou
    d, p, qv = pair_vectors(t, ar, q, m, w_query)
    count = 0
    # c = 0: every non-query position holds m (S = 0, R = B).
    if good.get((m, q, 0), (0, 0))[0]:
        if not ar.all_below_zero(ar.v_affine(b_total, p, qv), skip=(m,)):
            raise Rejected(f"cubic: the sequence with query {q} and all other tokens {m} "
                           "is claimed correct but its bound is not negative")
        count += 1
    max_c = k - 1 if q == m else k - 2
    claims = {c: good.get((m, q, c), (0, 0)) for c in range(1, max_c + 1)}
    union = 0
    for mask, _ in claims.values():
        union |= mask
    tokens = [u for u in range(m) if union >> u & 1]
    d_top = ar.top_upper(d, m)
    e_q = t.e[q]
    # (I) needs S·e_u·X_u[u]: h_self[u] >= e_u·X_u[u], then S·h_self[u] (S >= 0).
    dv_self, dv_rest = t.dv_self[m], t.dv_rest[m]
    h_self = dict(zip(tokens, ar.v_mul_each([e_q[u] for u in tokens],
                                            ar.v_add([d[u] for u in tokens],
                                                     [dv_self[u] for u in tokens]))))
    # (II), split, needs S·e_u·(max_{o∉{m,u}} D[o] + max_{o∉{m,u}} ΔV_u[o]); no entry
    # when no such o exists (v = 2: (II) is vacuous)
    spread = [u for u in tokens if dv_rest[u] is not None]
    h_spread = dict(zip(spread, ar.v_mul_each(
        [e_q[u] for u in spread],
        ar.v_add([_excluding(d_top, u) for u in spread], [dv_rest[u] for u in spread]))))
    x_rows = {}  # u -> [upper bound of X_u[o]], for tokens whose (II) is joint
    for c, (mask, joint) in claims.items():
        claimed = [u for u in tokens if mask >> u & 1]
        if not claimed:  # nothing claimed: the placements of c are not used
            continue
        for rest, _ in placements[c]:  # B − S must be a positive weight where it is used
            if rest is not None and not ar.is_nonnegative(rest):
                raise Rejected(f"cubic: query {q}, max {m}: the attention outside {c} "
                               "positions cannot be shown positive")
        for u in claimed:
            if joint >> u & 1 and u not in x_rows:
                x_rows[u] = ar.v_add(d, ar.v_diff(evou[u], evou[u][m]))

        def good_tokens(us, a_s, top, s_bound, joint=joint):
            """Checks (I) and (II) for the tokens us at one S, vectorised.  (II),
            split: max_{o∉{m,u}} Ã_S[o] is the largest entry, or the second
            largest for the token that is the largest (top = ar.top_upper)."""
            index, first, second = top
            split = [u for u in us if not joint >> u & 1 and u in h_spread]
            rest_max = [first] * len(split)  # max_{o∉{m,u}} Ã_S[o] for each split u
            if index in h_spread and index in split:
                rest_max[split.index(index)] = second
            return (ar.all_below_zero(ar.v_affine(s_bound, [h_self[u] for u in us],
                                                  [a_s[u] for u in us]))  # (I)
                    and ar.all_below_zero(ar.v_affine(
                        s_bound, [h_spread[u] for u in split], rest_max))  # (II), split
                    and all(ar.all_below_zero(ar.v_affine(ar.imul(s_bound, e_q[u]), x_rows[u],
                                                          a_s),
                                              skip=(m, u))  # (II), exact: o ∉ {m, u}
                            for u in us if joint >> u & 1))

        for rest, s_bound in placements[c]:
            a_s = qv if rest is None else ar.v_affine(rest, p, qv)
            top = ar.top_upper(a_s, m)
            if not good_tokens(claimed, a_s, top, s_bound):
                u = next(u for u in claimed if not good_tokens([u], a_s, top, s_bound))
                raise Rejected(f"cubic: token {u} is claimed good for query {q}, max {m}, "
                               f"{c} non-max copies, but its bound is not negative")
        count += comb(k - 1, c) * len(claimed) ** c
    return count


def _subset_sum_bounds(ar, betas):
    """For each c, a lower bound of every sum of c of `betas` (the c smallest
    lower endpoints) and an upper bound (the c largest upper endpoints), as
    point intervals.  Two sorts of n numbers: n² units each."""
    los = sorted(ar.lower_point(b) for b in betas)  # points: comparisons are exact
    his = sorted((ar.upper_point(b) for b in betas), reverse=True)
    ar.count += 2 * len(betas) ** 2
    out = {}
    for c in range(1, len(betas) + 1):
        out[c] = (ar.lower_point(ar.fsum(los[:c])), ar.upper_point(ar.fsum(his[:c])))
    return out




def _excluding(top, t):
    """Upper bound of the max over entries other than t, from ar.top_upper."""
    index, first, second = top
    return second if index == t else first


def _top3(ar: _Counted, row):
    """The three largest upper bounds of a row of intervals, with their indices,
    largest first (fewer if the row is shorter): one pass, compared exactly
    (3 units per entry)."""
    ar.count += 3 * len(row)
    greater, top = ar.greater, []
    for o, x in enumerate(row):
        value = ar.upper(x)
        at = len(top)
        while at > 0 and greater(value, top[at - 1][1]):
            at -= 1
        if at < 3:
            top.insert(at, (o, value))
            del top[3:]
    return top


def _rest_of_row(ar, top, m, t, evou_tm):
    """Upper bound of max_{o ∉ {m, t}} (EVOU[t, o] − EVOU[t, m]) from the row's
    top three upper endpoints; None if the row has no other entry."""
    for o, value in top:
        if o != m and o != t:
            return ar.up_minus(value, evou_tm)
    return None


def parse_hints(hints, v, k):
    """{"good": [[m, q, c, mask] or [m, q, c, mask, joint], ...]} ->
    {(m, q, c): (mask, joint)}, validated: joint ⊆ mask, no joint for c = 0."""
    if not isinstance(hints, dict) or set(hints) != {"good"} or not isinstance(hints["good"], list):
        raise Malformed('rule cubic: hints must be {"good": [[m, q, c, mask(, joint)], ...]}')
    good = {}
    for entry in hints["good"]:
        if not (isinstance(entry, list) and len(entry) in (4, 5)
                and all(type(x) is int for x in entry)):
            raise Malformed(f"rule cubic: bad hint entry {str(entry)[:80]}")
        m, q, c, mask = entry[:4]
        joint = entry[4] if len(entry) == 5 else 0
        max_c = k - 1 if q == m else k - 2
        if not (0 <= q <= m < v and 0 <= c <= max_c):
            raise Malformed(f"rule cubic: hint entry {entry[:3]} is out of range")
        limit = 2 if c == 0 else 1 << m  # c = 0: a flag; else a set of tokens < m
        if not (0 <= mask < limit and 0 <= joint and joint & ~mask == 0 and not (c == 0 and joint)):
            raise Malformed(f"rule cubic: hint for {entry[:3]} names tokens >= max, or "
                            "joint tokens that are not claimed")
        if (m, q, c) in good:
            raise Malformed(f"rule cubic: duplicate hint for {entry[:3]}")
        good[(m, q, c)] = (mask, joint)
    return good


def dimensionality(dims, hints=None) -> int:
    """Unexplained dimensionality (spec/rules.md §proof length): the entries of
    EQKE, EVOU, EU (v² each) and EQKP, PVOU (kv each), enumerated: 3v² + 2kv."""
    v, k = dims.d_vocab, dims.n_ctx
    return 3 * v * v + 2 * k * v
