"""Strategy overwhelm: write the rule lines overwhelm_free / overwhelm_perm
(checker/rules/overwhelm*.py, spec/rules.md §overwhelm_free, §overwhelm_perm).

Mirrors the rules function by function, in float64 on the midpoints of the
recorded enclosures:
  Bounds / AtPosition.term  -> `terms`: w_j(u)·y_j(u, m) for every (j, u, m)
  overwhelm_free.check      -> `free_margins`: fixed part + Σ_j max_u, and the
                               maximising completion (an exact maximiser over
                               the reals: the bound is separable)
  overwhelm_perm.check      -> `perm_margins`: the assignment problem solved by
                               scipy's linear_sum_assignment; dual potentials
                               from shortest paths in its residual graph
Untrusted: the checker recomputes everything from the hints it needs (the
potentials) and accepts only bounds it confirms itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checker.rules import overwhelm as free_rule
from checker.statement import Overwhelm

from ..intervals import IMat

# The generator claims a bound only when it is below −TOL times the size of its
# terms, so that the checker's (tighter, rigorous) evaluation agrees.
TOL = 1e-9


@dataclass
class Margin:
    """The generator's verdict on one claim: `worst` = max over lengths and
    competitors m of the float bound on Σ_i w_i y_i(m) (< 0 means proved),
    relative to `scale`; `completion` maximises it (a counterexample candidate)."""

    worst: float
    scale: float
    competitor: int
    completion: tuple
    potentials: dict | None = None  # m -> u (perm form)

    @property
    def proved(self) -> bool:
        return self.worst < -TOL * self.scale


def emit_inputs(trace, claim: Overwhelm) -> dict[str, int]:
    """Emit the input quantities the rule demands for `claim`; name -> line id."""
    return {name: trace.emit(term)
            for name, term in free_rule.inputs(trace.dims, claim).items()}


def mid_values(trace, ids: dict[str, int]) -> dict[str, np.ndarray]:
    """Float64 midpoints of the recorded enclosures of the inputs."""
    out = {}
    for name, i in ids.items():
        value: IMat = trace.values[i]
        out[name] = value.mid
    return out


def terms(mats: dict, claim: Overwhelm, p: int) -> np.ndarray:
    """T[i, u, m] = w_i(u)·y_i(u, m) at query position p (mirrors AtPosition.term):
    w_i(u) = EXP_EQKE_Q[u]·EXP_EQKP_Q[i],
    y_i(u, m) = (EU_Q[m] − EU_Q[o]) + (EVOU[u, m] − EVOU[u, o]) + (PVOU[i, m] − PVOU[i, o])."""
    o = claim.output
    e = mats[f"EXP_EQKE_Q@{p}"][0]  # (v,)
    beta = mats[f"EXP_EQKP_Q@{p}"][0][:p + 1]  # (p+1,)
    eu = mats[f"EU_Q@{p}"][0]  # (v,)
    evou, pvou = mats["EVOU"], mats["PVOU"][:p + 1]
    de = eu - eu[o]  # (v,) over m
    dv = evou - evou[:, o:o + 1]  # (u, m)
    dp = pvou - pvou[:, o:o + 1]  # (i, m)
    y = de[None, None, :] + dv[None, :, :] + dp[:, None, :]  # (i, u, m)
    w = beta[:, None] * e[None, :]  # (i, u)
    return w[:, :, None] * y


def _fixed(T: np.ndarray, claim: Overwhelm, p: int) -> np.ndarray:
    """Σ over the prefix positions and the query position, per m."""
    total = T[p, claim.query].copy()
    for i, u in enumerate(claim.prefix):
        total += T[i, u]
    return total


def _scale(T: np.ndarray, claim: Overwhelm, p: int, free_tokens) -> np.ndarray:
    """Size of the terms a bound sums, per m: the rounding of the checker's
    bound is relative to it."""
    s = len(claim.prefix)
    return (_fixed(np.abs(T), claim, p)
            + np.abs(T[s:p][:, free_tokens, :]).max(axis=1, initial=0).sum(axis=0))


def free_margins(mats: dict, claim: Overwhelm, v: int) -> Margin:
    """Mirror of rule overwhelm_free: the worst bound over lengths and m."""
    alphabet = np.array(claim.over if claim.over is not None else range(v))
    s, o = len(claim.prefix), claim.output
    best = None
    for p in free_rule.positions(claim):
        T = terms(mats, claim, p)
        free = T[s:p][:, alphabet, :]  # (n, |A|, m)
        bound = _fixed(T, claim, p) + free.max(axis=1).sum(axis=0)  # (m,)
        scale = _scale(T, claim, p, alphabet)  # (m,)
        bound[o] = -np.inf
        m = int(np.argmax(bound))
        completion = tuple(int(alphabet[a]) for a in free[:, :, m].argmax(axis=1))
        if best is None or bound[m] / scale[m] > best.worst / best.scale:
            best = Margin(float(bound[m]), float(scale[m]), m, completion)
    return best


def perm_margins(mats: dict, claim: Overwhelm, v: int) -> Margin:
    """Mirror of rule overwhelm_perm: per m the assignment maximum (scipy) and
    dual potentials u proving it."""
    from scipy.optimize import linear_sum_assignment

    (p,) = free_rule.positions(claim)
    s, o, items = len(claim.prefix), claim.output, np.array(claim.free_perm, dtype=int)
    T = terms(mats, claim, p)
    fixed = _fixed(T, claim, p)
    scale = _scale(T, claim, p, items)
    best, potentials = None, {}
    for m in range(v):
        if m == o:
            continue
        cost = T[s:p][:, items, m]  # (n positions, n items)
        if len(items):
            rows, cols = linear_sum_assignment(cost, maximize=True)
            u = assignment_potentials(cost, cols)
            value = cost[rows, cols].sum()
        else:
            cols, u, value = np.zeros(0, int), np.zeros(0), 0.0
        potentials[m] = u
        bound = fixed[m] + value
        if best is None or bound / scale[m] > best.worst / best.scale:
            best = Margin(float(bound), float(scale[m]), m, tuple(int(items[c]) for c in cols))
    best.potentials = potentials
    return best


def assignment_potentials(cost: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Dual potentials u (rows) for an optimal max-weight assignment sigma
    (row j -> column sigma[j]) of `cost` (n × n).

    With v_{σ(j)} := cost[j, σ(j)] − u_j, feasibility u_j + v_a >= cost[j, a]
    is the difference constraint u_{j'} <= u_j + cost[j', σ(j')] − cost[j, σ(j')]
    for all j, j'; shortest paths (from a virtual source at distance 0)
    satisfy every such constraint, and exist because an optimal σ leaves no
    negative cycle.  O(n³) Floyd–Warshall-style relaxation in numpy."""
    n = cost.shape[0]
    matched = cost[np.arange(n), sigma]  # cost[j', σ(j')]
    weight = matched[None, :] - cost[:, sigma]  # edge j -> j': weight[j, j']
    dist = np.zeros(n)
    for _ in range(n):
        new = np.minimum(dist, (dist[:, None] + weight).min(axis=0))
        if np.array_equal(new, dist):
            break
        dist = new
    return dist


def float32_widen(trace, mats: dict, ids: dict, claim: Overwhelm) -> float:
    """float32 (spec/rules.md §float32 for the overwhelm rules): mirror the checker's
    widening of every EU_Q@p by Lemma G@p's δ_p[q][o] (checker.float32, the checker's own
    function, taken (1 + SLACK) larger), moving each midpoint to the worst point of the
    widened enclosure for output o — EU_Q[m] + δ[m] for m ≠ o, EU_Q[o] − δ[o] — and add the
    weights to the rule's inputs (ids).  Returns max δ.  ValueError if Lemma G refuses."""
    from mpmath import iv

    from checker import float32
    from checker.errors import Rejected

    from .float32_eu import SLACK, weight_inputs

    weights = {}
    for name in weight_inputs():
        ids[name] = trace.quantity(name)
        value = trace.values[ids[name]]
        weights[name] = [[iv.mpf((float(a), float(b))) for a, b in zip(lo, hi)]
                         for lo, hi in zip(value.lo, value.hi)]
    worst, o = 0.0, claim.output
    positions = list(free_rule.positions(claim))
    try:  # the checker's row-only δ_p (the claim's query row, the same numbers)
        rows = float32.attention_only_delta_rows(trace.dims, weights, claim.query, positions)
    except Rejected as err:  # e.g. Overflow: Lemma G does not apply (gen-cert exit 2)
        raise ValueError(f"float32: {err}") from None
    for p in positions:
        row = rows[p]
        d = np.array([float(x) for x in row]) * (1 + SLACK)
        eu = np.array(mats[f"EU_Q@{p}"], dtype=float).copy()  # (1, v)
        shifted = eu[0] + d
        shifted[o] = eu[0][o] - d[o]
        eu[0] = shifted
        mats[f"EU_Q@{p}"] = eu
        worst = max(worst, float(d.max()))
    return worst
