"""Strategy cubic-mix: hints for the checker's rule `cubic_mix` (spec/rules.md §cubic_mix).

The rule needs no search beyond one choice: the tokens of each (q, m) whose bound over the
outputs o ∉ {m, t} is taken exactly (cubic's (II′), O(v) each) instead of split.  This
module picks them in float64 (midpoints of the recorded enclosures) — a token is joint when
its split bound is at or above 0 at some position of some placement and the exact bound is
lower there — and then claims exactly what the checker's own rule proves on the trace's
recorded inputs: with mpmath and, when python-flint is installed, with Arb too (the
smaller count), so the certificate checks under either back-end.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from checker.rules import cubic_mix as rule

from ...progress import progress_bar
from . import NotApplicable, float32_eu

NAME = "cubic-mix"
INPUTS = list(rule.INPUTS)


def certify(trace, progress=False, semantics="real"):
    d = trace.dims
    v, k = d.d_vocab, d.n_ctx
    if v < 2:
        raise NotApplicable("d_vocab = 1: there is no wrong output to compare against")
    e, beta, evou, pvou, eu = (trace.matrix(n).mid for n in INPUTS)
    inputs, eu_bounds = list(INPUTS), None
    if semantics == "float32":  # EU widened by Lemma G's δ (a little more than the checker)
        lo, hi, _ = float32_eu.widened(trace, trace.matrix("EU"))
        inputs += float32_eu.weight_inputs()
        eu_bounds = (lo, hi)
    with np.errstate(all="ignore"):
        joint = find_joint(v, k, e, beta, evou, pvou, eu, progress)
    hints = {"joint": [[m, q, mask] for (m, q), mask in sorted(joint.items()) if mask]}
    count = checker_count(trace, hints, eu_bounds)
    line = trace.rule("cubic_mix", inputs, count, hints)
    return line, count, {"joint_tokens": sum(bin(x).count("1") for x in joint.values())}


def checker_count(trace, hints, eu_bounds=None) -> int:
    """What rule cubic_mix proves from the trace's recorded inputs (EU replaced by
    eu_bounds = (lo, hi) if given): the smaller of mpmath's and Arb's counts."""
    from checker.errors import Malformed, Rejected

    d = trace.dims
    counts = []
    for arith in _back_ends():
        mats = {}
        for name in INPUTS:
            value = trace.matrix(name)
            lo, hi = (eu_bounds if name == "EU" and eu_bounds is not None
                      else (value.lo, value.hi))
            mats[name] = [[arith.interval(float(a), float(b)) for a, b in zip(r_lo, r_hi)]
                          for r_lo, r_hi in zip(lo, hi)]
        try:
            counts.append(rule.check(d, mats, hints, lambda work: None, arith=arith)[0])
        except (Malformed, Rejected, ArithmeticError) as exc:
            raise NotApplicable(f"rule cubic_mix cannot run on this model: {exc}") from None
    return min(counts)


def _back_ends():
    from checker.arith import MPMATH

    yield MPMATH
    from checker.arith import Unavailable, get

    try:
        arb = get("arb")
    except Unavailable:  # python-flint not installed: mpmath alone decides the claim
        return
    yield arb


def find_joint(v, k, e, beta, evou, pvou, eu, progress=False) -> dict:
    """{(m, q): bitmask of joint tokens} (float64 mirror of the rule's bounds)."""
    dp_max = (pvou[:-1, None, :] - pvou[:-1, :, None]).max(axis=0)  # (m, o)
    dp_query = pvou[-1][None, :] - pvou[-1][:, None]
    joint = {}
    for q in progress_bar(range(v), "cubic-mix hints", enabled=progress):
        for m in range(max(q, 1), v):
            t = np.arange(m)
            dvec = eu[q] - eu[q, m] + dp_max[m]
            x_m = dvec + evou[m] - evou[m, m]
            x_q = eu[q] - eu[q, m] + dp_query[m] + evou[q] - evou[q, m]
            p, qv = e[q, m] * x_m, beta[q, k - 1] * e[q, q] * x_q
            x_rows = dvec[None, :] + evou[t] - evou[t, m][:, None]  # (t, o): X_t[o]
            x_rows[:, m] = -np.inf
            x_rows[t, t] = -np.inf  # o = t is bound (I)
            d_ex = np.where(np.arange(v) == m, -np.inf, dvec)
            spread = _excluding_each(d_ex, t) + _excluding_each_rows(evou, m, t) - evou[t, m]
            max_c = k - 1 if q == m else k - 2
            mask = np.zeros(m, bool)
            for c in range(1, max_c + 1):
                for P in combinations(range(k - 1), c):
                    rest = sum(beta[q, i] for i in range(k - 1) if i not in P)
                    a = rest * p + qv
                    a_ex = np.where(np.arange(v) == m, -np.inf, a)
                    a_rest = _excluding_each(a_ex, t)
                    for i in P:
                        w = c * beta[q, i] * e[q, t]  # (t,)
                        split = a_rest + w * spread
                        exact = (a[None, :] + w[:, None] * x_rows).max(axis=1)
                        mask |= (split >= 0) & (exact < split)
            joint[(m, q)] = int(sum(1 << int(u) for u in np.nonzero(mask)[0]))
    return joint


def _excluding_each(vec, t):
    """max_{o ∉ {m, u}} vec[o] for each u in t (vec[m] = −inf already)."""
    order = np.argsort(-vec)[:2]
    first, second = vec[order[0]], vec[order[1]] if len(vec) > 1 else -np.inf
    return np.where(t == order[0], second, first)


def _excluding_each_rows(evou, m, t):
    """max_{o ∉ {m, u}} EVOU[u, o] for each token u in t."""
    rows = evou[t].copy()
    rows[:, m] = -np.inf
    rows[t, t] = -np.inf
    return rows.max(axis=1)
