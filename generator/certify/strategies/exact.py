"""Strategy exact: the cubic good sets, plus the residue decided sequence by
sequence by the checker's rule `exact` (checker/rules/exact.py).

The good sets are strategy cubic's.  The generator then predicts how many
residue sequences the checker will certify, by evaluating the checker's own
bound in vectorised float64 on the recorded enclosures' endpoints:

    term_i(o) = w⁺_i·x̄_i(o) if x̄_i(o) >= 0 else w⁻_i·x̄_i(o),
    x̄_i(o)   = EU⁺[q,o] − EU⁻[q,m] + EVOU⁺[t_i,o] − EVOU⁻[t_i,m] + PVOU⁺[i,o] − PVOU⁻[i,m],

claiming a sequence only when Σ_i term_i(o) is below −TOL times the size of
its parts for every o != m (the checker computes the same sums exactly; TOL
covers float64 rounding and the checker's fixed-point widening many times
over).  Residue sequences that look correct at the midpoints but are not
claimed are reported as `unresolved` (near-ties the enclosures cannot
separate).  Cost: O(v) numpy work per residue sequence.
"""

from __future__ import annotations

import itertools

import numpy as np

from checker.certificate import Limits
from checker.rules import cubic as cubic_rule
from checker.rules.exact import Plan

from ...progress import progress_bar
from ..intervals import IMat
from . import NotApplicable, float32_eu
from .cubic import INPUTS, find_good_sets

NAME = "exact"
TOL = 1e-12  # relative to Σ_i |parts|: float64 rounding is ~1e-16 of it
BATCH = 8192  # residue sequences per numpy evaluation
# Refused beyond this much checker work (hours).  Above the checker's default
# --max-work (checker.certificate.Limits) a user must raise that limit.
MAX_CHECKER_WORK = 10**10


def certify(trace, progress=False, semantics="real"):
    d = trace.dims
    v, k = d.d_vocab, d.n_ctx
    if v < 2:
        raise NotApplicable("d_vocab = 1: there is no wrong output to compare against")
    mats = {n: trace.matrix(n) for n in INPUTS}
    e, beta, evou, pvou, eu = (mats[n].mid for n in INPUTS)
    inputs = INPUTS
    if semantics == "float32":  # EU widened by Lemma G's δ, as the checker does
        lo, hi, _ = float32_eu.widened(trace, mats["EU"])
        mats["EU"], eu = IMat(lo, hi), (hi, lo)
        inputs = INPUTS + float32_eu.weight_inputs()
    good, joint, cover, stats = find_good_sets(v, k, e, beta, evou, pvou, eu, progress)
    hints = {"good": [[m, q, c, mask] + ([joint[(m, q, c)]] if (m, q, c) in joint else [])
                      for (m, q, c), mask in sorted(good.items()) if mask]}
    plan = Plan(cubic_rule.parse_hints(hints, v, k), v, k)
    if plan.work > MAX_CHECKER_WORK:
        raise NotApplicable(f"the residue ({plan.residue} sequences) would need ~{plan.work:.1e} "
                            "operations in the checker")
    certified, unresolved = predict_residue(plan, mats, v, k, progress)
    claim = cover + certified
    line = trace.rule("exact", inputs, claim, hints)
    return line, claim, {**stats, "cover": cover, "residue": plan.residue,
                         "residue_certified": certified, "unresolved": unresolved,
                         "checker_residue_work": plan.work,
                         "over_default_max_work": plan.work > Limits().max_work}


def residue_sequences(plan, v, k):
    """Batches (arrays (n, k)) of every residue sequence of the plan, in the
    checker's classes: for (q, m, c), every placement of c non-query positions
    and every filling with tokens < m, at least one of them bad."""
    out, size = [], 0
    for q in range(v):
        for m, c, bad in plan.classes[q]:
            for fillings in _fillings(m, c, bad):
                for placement in itertools.combinations(range(k - 1), c):
                    seqs = np.full((len(fillings), k), m, dtype=np.int64)
                    seqs[:, -1] = q
                    if c:
                        seqs[:, list(placement)] = fillings
                    out.append(seqs)
                    size += len(seqs)
                    if size >= BATCH:
                        yield np.concatenate(out)
                        out, size = [], 0
    if out:
        yield np.concatenate(out)


def _fillings(m, c, bad):
    """All c-tuples of tokens < m with at least one token in `bad` (c = 0: one
    empty tuple), as arrays (n, c), one per leading token (bounded memory)."""
    if c == 0:
        yield np.zeros((1, 0), dtype=np.int64)
        return
    rest = (np.indices((m,) * (c - 1)).reshape(c - 1, -1).T if c > 1  # (m^(c−1), c−1)
            else np.zeros((1, 0), dtype=np.int64))
    rest_bad = np.isin(rest, bad).any(axis=1)
    for first in range(m):
        keep = rest if first in bad else rest[rest_bad]
        if len(keep):
            yield np.concatenate([np.full((len(keep), 1), first, dtype=np.int64), keep], axis=1)


def predict_residue(plan, mats, v, k, progress=False):
    """(residue sequences the checker will certify, residue sequences that look
    correct at the midpoints but are not claimed)."""
    lo = {n: mats[n].lo for n in INPUTS}
    hi = {n: mats[n].hi for n in INPUTS}
    certified = unresolved = 0
    for seqs in progress_bar(residue_sequences(plan, v, k), "exact residue", progress):
        claim, looks_correct = _evaluate(seqs, lo, hi, v, k)
        certified += int(claim.sum())
        unresolved += int((looks_correct & ~claim).sum())
    return certified, unresolved


def _evaluate(seqs, lo, hi, v, k):
    """For sequences (n, k): (the checker's bound is safely < 0 for all o != m,
    the midpoint margin is < 0 for all o != m)."""
    n = len(seqs)
    q, top = seqs[:, -1], seqs.max(axis=1)
    pos = np.arange(k)
    rows = np.arange(n)
    w_lo = lo["EXP_EQKE"][q[:, None], seqs] * lo["EXP_EQKP"][q][:, :k]  # (n, k)
    w_hi = hi["EXP_EQKE"][q[:, None], seqs] * hi["EXP_EQKP"][q][:, :k]
    parts = (hi["EU"][q][:, None, :], -lo["EU"][q, top][:, None, None],  # each (n, k|1, v)
             hi["EVOU"][seqs], -lo["EVOU"][seqs, top[:, None]][:, :, None],
             hi["PVOU"][None, :, :], -lo["PVOU"][pos[None, :], top[:, None]][:, :, None])
    x_bar = sum(parts)  # (n, k, v)
    size = sum(np.abs(p) for p in parts)
    term = np.where(x_bar >= 0, w_hi[:, :, None] * x_bar, w_lo[:, :, None] * x_bar)
    bound = term.sum(axis=1)  # (n, v)
    slack = TOL * (w_hi[:, :, None] * size).sum(axis=1)
    safe = bound + slack < 0
    safe[rows, top] = True
    mid = {n: 0.5 * (lo[n] + hi[n]) for n in lo}
    w = mid["EXP_EQKE"][q[:, None], seqs] * mid["EXP_EQKP"][q][:, :k]
    x = mid["EU"][q][:, None, :] + mid["EVOU"][seqs] + mid["PVOU"][None, :, :]
    x = x - np.take_along_axis(x, top[:, None, None].repeat(k, 1), axis=2)
    margin = np.einsum("ni,nio->no", w, x)
    margin[rows, top] = -np.inf
    return safe.all(axis=1), margin.max(axis=1) < 0
