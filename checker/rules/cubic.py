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
counts only claimed ones.  Cost O(v³·k) interval operations.

Written against the arithmetic back-end interface (checker/arith): `ar` is
mpmath or Arb; every check is an exact comparison of an upper bound with 0.
"""

from __future__ import annotations

from math import comb

from ..arith import MPMATH
from ..errors import Malformed, Rejected

INPUTS = ("EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU")
ARITHMETICS = ("mpmath", "arb")  # back-ends this rule is written against


def check(dims, mats, hints, charge, jobs=1, arith=MPMATH):
    v, k = dims.d_vocab, dims.n_ctx
    if v < 2:
        raise Malformed("rule cubic needs d_vocab >= 2")
    good = parse_hints(hints, v, k)
    joint_tokens = sum(bin(joint).count("1") for _, joint in good.values())
    charge(v * v * k + v * v * (v + 1) * (k + 4) + joint_tokens * v * 4)
    tables = _Tables(mats, v, k, arith)
    proven = sum(_map(jobs, (tables, good, charge), v))
    return proven, f"{proven} sequences certified by the cubic rule"


class _Tables:
    """What the paper's complexity argument caches: quantities depending on at
    most two of (q, m, t), computed once, O(v²·k).  Output differences are kept
    as upper bounds (numbers.py, upper-bound arithmetic): every check of the
    rule is "an upper bound is < 0" and every weight is positive."""

    def __init__(self, mats, v, k, ar):
        self.v, self.k, self.ar = v, k, ar
        up_diff = ar.up_diff
        self.e, self.beta = mats["EXP_EQKE"], mats["EXP_EQKP"]
        self.eu, evou, pvou = mats["EU"], mats["EVOU"], mats["PVOU"]
        self.evou = evou
        # dp_max[m][o] >= max_{i<k−1} (PVOU[i, o] − PVOU[i, m])   (non-query positions)
        self.dp_max = [[ar.up_max([up_diff(pvou[i][o], pvou[i][m]) for i in range(k - 1)])
                        for o in range(v)] for m in range(v)]
        # dp_query[m][o] >= PVOU[k−1, o] − PVOU[k−1, m]              (the query position)
        self.dp_query = [[up_diff(pvou[k - 1][o], pvou[k - 1][m]) for o in range(v)]
                         for m in range(v)]
        # dv_m[m][o] >= ΔV_m[o] = EVOU[m, o] − EVOU[m, m]
        self.dv_m = [[up_diff(evou[m][o], evou[m][m]) for o in range(v)] for m in range(v)]
        # dv_self[m][t] >= ΔV_t[t] = EVOU[t, t] − EVOU[t, m]
        self.dv_self = [[up_diff(evou[t][t], evou[t][m]) for t in range(v)] for m in range(v)]
        # dv_rest[m][t] >= max_{o ∉ {m, t}} ΔV_t[o] (None if there is no such o)
        tops = [_top(ar, row, 3) for row in evou]
        self.dv_rest = [[_rest_of_row(ar, tops[t], m, t, evou[t][m]) for t in range(v)]
                        for m in range(v)]


_SHARED = {}  # the tables, inherited by forked workers (intervals do not pickle)


def _map(jobs, args, v):
    """Per-query counts, in `jobs` forked processes (queries are independent).
    A worker's exception (Rejected, a time limit) propagates to the caller, and
    a worker that dies raises BrokenProcessPool (exit 2): never a pass."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_count_q(*args, q) for q in range(v)]
    _SHARED["args"] = args
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            return list(pool.map(_count_q_shared, range(v)))
    finally:
        _SHARED.clear()


def _count_q_shared(q):
    return _count_q(*_SHARED["args"], q)


def _count_q(t: _Tables, good, charge, q):
    """Confirm the claimed good sets for query q; return the count they prove."""
    charge(0)  # enforces the time limit
    k, v, ar = t.k, t.v, t.ar
    nonquery = t.beta[q][:k - 1]
    b_total = ar.fsum(nonquery)
    # Placements: for c < k−1, S ranges within [S_lo, S_hi] and R = B − S; for
    # c = k−1 every non-query position is t', S = B and R = 0 exactly.
    placements = {c: [(b_total - s_bound, s_bound) for s_bound in bounds]
                  for c, bounds in _subset_sum_bounds(ar, nonquery).items() if c < k - 1}
    placements[k - 1] = [(None, b_total)]
    w_query = t.beta[q][k - 1] * t.e[q][q]
    return sum(_count_q_m(t, good, q, m, b_total, placements, w_query) for m in range(q, v))


def _count_q_m(t: _Tables, good, q, m, b_total, placements, w_query):
    """Confirm the claimed good sets for (q, m, ·) and return their count.
    Vectors are indexed by the output o; their entry o = m is never read."""
    k, eu, evou, ar = t.k, t.eu[q], t.evou, t.ar
    d_eu = ar.v_diff(eu, eu[m])  # >= EU[q, o] − EU[q, m]
    d = ar.v_add(d_eu, t.dp_max[m])  # >= D[o]
    x_m = ar.v_add(d, t.dv_m[m])  # >= X_m[o]
    # >= X^query_q[o] = EU[q,o] − EU[q,m] + PVOU[k−1,o] − PVOU[k−1,m] + ΔV_q[o]
    x_q = ar.v_add(ar.v_add(d_eu, t.dp_query[m]), ar.v_diff(evou[q], evou[q][m]))
    p = ar.v_mul(t.e[q][m], x_m)  # >= e_m·X_m[o]
    qv = ar.v_mul(w_query, x_q)  # >= β_q·e_q·X_q[o]
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
            h_split = [h_spread[u] for u in split]
            at = split.index(index) if index in split else None
            return (ar.all_below_zero(ar.v_affine(s_bound, [h_self[u] for u in us],
                                                  [a_s[u] for u in us]))  # (I)
                    and ar.all_below_zero(ar.v_affine_scalar(s_bound, h_split, first),
                                          skip=() if at is None else (at,))  # (II), split
                    and (at is None or ar.below_zero(
                        ar.up_add(second, ar.up_mul(s_bound, h_split[at]))))
                    and all(ar.all_below_zero(ar.v_affine(s_bound * e_q[u], x_rows[u], a_s),
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
    point intervals."""
    los = sorted(ar.lower_point(b) for b in betas)  # points: comparisons are exact
    his = sorted((ar.upper_point(b) for b in betas), reverse=True)
    out = {}
    for c in range(1, len(betas) + 1):
        out[c] = (ar.lower_point(ar.fsum(los[:c])), ar.upper_point(ar.fsum(his[:c])))
    return out




def _excluding(top, t):
    """Upper bound of the max over entries other than t, from ar.top_upper."""
    index, first, second = top
    return second if index == t else first


def _top(ar, row, n):
    """The n largest upper endpoints of a row of intervals, with their indices."""
    ranked = sorted(range(len(row)), key=lambda o: ar.upper_point(row[o]), reverse=True)[:n]
    return [(o, ar.upper(row[o])) for o in ranked]


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


def dimensionality(dims) -> int:
    """Unexplained dimensionality (spec/rules.md §proof length): the entries of
    EQKE, EVOU, EU (v² each) and EQKP, PVOU (kv each), enumerated: 3v² + 2kv."""
    v, k = dims.d_vocab, dims.n_ctx
    return 3 * v * v + 2 * k * v
