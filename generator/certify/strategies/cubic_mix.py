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

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from checker.rules import cubic_mix as rule

from ...progress import progress_bar
from . import NotApplicable, float32_eu, option_fields

NAME = "cubic-mix"
INPUTS = list(rule.INPUTS)
PLACEMENTS = ("bounds", "each")


@dataclass(frozen=True)
class Options:
    """placements: "bounds" (one column per (q, m, c), Lemma M3: about cubic's work) or
    "each" (one column per position of each placement, Lemma M2: tighter, ~2× the work).
    `name()` and `parse()` round-trip."""

    placements: str = "bounds"

    def name(self) -> str:
        return NAME if self == Options() else f"{NAME}:placements={self.placements}"

    @staticmethod
    def parse(text: str) -> Options:
        fields = option_fields(text, NAME, ("placements",), f"placements={'|'.join(PLACEMENTS)}")
        if fields.get("placements", "bounds") not in PLACEMENTS:
            raise ValueError(f"bad strategy {text!r}; choose from "
                             f"{[o.name() for o in grid()]}")
        return Options(**fields)


def grid() -> list[Options]:
    return [Options(p) for p in PLACEMENTS]


VARIANTS = tuple(o.name() for o in grid())


def certify(trace, progress=False, semantics="real", options=Options()):
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
        joint = find_joint(v, k, e, beta, evou, pvou, eu, progress, options.placements)
    hints = {"joint": [[m, q, mask] for (m, q), mask in sorted(joint.items()) if mask],
             "placements": options.placements}
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


def find_joint(v, k, e, beta, evou, pvou, eu, progress=False, placements="bounds") -> dict:
    """{(m, q): bitmask of joint tokens} (float64 mirror of the rule's bounds): a token is
    joint where its split bound (II) is >= 0 and the exact (II′) is lower."""
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
            if placements == "bounds":
                for c in range(1, max_c + 1):
                    mask |= _bounded_joint(k, q, m, c, beta, e, p, qv, t, spread, x_rows, v)
                joint[(m, q)] = int(sum(1 << int(u) for u in np.nonzero(mask)[0]))
                continue
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


def _bounded_joint(k, q, m, c, beta, e, p, qv, t, spread, x_rows, v):
    """Lemma M3's bounds for (q, m, c): the tokens whose split (II) is >= 0 at an end of W
    while the exact (II′) is lower."""
    b = np.sort(beta[q, :k - 1])
    rs = [] if c == k - 1 else [b.sum() - b[::-1][:c].sum(), b.sum() - b[:c].sum()]
    faces = [qv] if c == k - 1 else [r * p + qv for r in rs]
    others = np.arange(v) != m
    a_rest = np.max([_excluding_each(np.where(others, a, -np.inf), t) for a in faces], axis=0)
    a_max = np.max(faces, axis=0)
    split = np.full(len(t), -np.inf)
    exact = np.full(len(t), -np.inf)
    for w in (c * b[0], c * b[-1]):
        split = np.maximum(split, a_rest + w * e[q, t] * spread)
        exact = np.maximum(exact, (a_max[None, :] + (w * e[q, t])[:, None] * x_rows).max(axis=1))
    return (split >= 0) & (exact < split)


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
