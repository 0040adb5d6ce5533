"""Strategy brute-force: every sequence, decided by the checker's rule
brute_force.  The generator predicts the count the checker will certify.

Feasible only for small models: the checker does d_vocab^n_ctx · n_ctx ·
d_vocab interval operations (a 8-token, 3-position model: ~6k sequences·ops,
about a second; each extra position multiplies the time by d_vocab).
"""

from __future__ import annotations

import itertools

import numpy as np

from . import NotApplicable, magnitude

NAME = "brute-force"
MAX_CHECKER_WORK = 20_000_000
# A margin this close to 0 (relative to the attention weights' sum) is a
# near-tie: the generator does not claim it, since the checker's enclosure
# might straddle 0.
NEAR_TIE = 1e-9


def certify(trace, progress=False, semantics="real"):
    d = trace.dims
    v, k = d.d_vocab, d.n_ctx
    work = v**k * k * v * 4
    if work > MAX_CHECKER_WORK:
        raise NotApplicable(
            f"brute force on d_vocab={v}, n_ctx={k} would need ~{magnitude(work)} interval "
            "operations in the checker; use --strategy cubic, or --n-ctx K for shorter "
            "sequences")
    eqke, eqkp, evou, pvou, eu = (trace.matrix(n).mid for n in
                                  ("EQKE", "EQKP", "EVOU", "PVOU", "EU"))
    seqs = np.array(list(itertools.product(range(v), repeat=k)))  # (N, k)
    q, top = seqs[:, -1], seqs.max(axis=1)
    scores = eqke[q[:, None], seqs] + eqkp[q][:, None, :].squeeze(1)  # (N, k)
    w = np.exp(scores - scores.max(axis=1, keepdims=True))  # (N, k), max 1
    # x[n, i, o] = EU[q,o] + EVOU[t_i,o] + PVOU[i,o], minus the same at o = max
    x = eu[q][:, None, :] + evou[seqs] + pvou[None, :, :]
    x = x - np.take_along_axis(x, top[:, None, None].repeat(k, 1), axis=2)
    margin = np.einsum("ni,nio->no", w, x)  # sign of ℓ_o − ℓ_max
    margin[np.arange(len(seqs)), top] = -np.inf
    worst = margin.max(axis=1)
    certified = int((worst < -NEAR_TIE).sum())
    near_ties = int((np.abs(worst) <= NEAR_TIE).sum())
    inputs = ["EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU"]
    notes = {"near_ties": near_ties, "sequences": len(seqs)}
    if semantics == "float32":  # claim what the checker's rule proves (Lemma G)
        from checker.rules import brute_force

        inputs += list(brute_force.FLOAT32_INPUTS)
        certified, notes["delta"] = _checker_float32_count(trace, inputs)
    line = trace.rule("brute_force", inputs, certified)
    return line, certified, notes


def _checker_float32_count(trace, inputs) -> tuple[int, float]:
    """(the count rule brute_force proves under float32 on the trace's recorded inputs,
    δ); NotApplicable if the float32 error model does not apply."""
    from mpmath import iv

    from checker import float32
    from checker.errors import Rejected
    from checker.rules import brute_force

    mats = {}
    for name in inputs:
        value = trace.values[trace.quantity(name)]
        mats[name] = [[iv.mpf((float(a), float(b))) for a, b in zip(lo, hi)]
                      for lo, hi in zip(value.lo, value.hi)]
    try:
        delta = float32.attention_only_delta(trace.dims, {n: mats[n] for n in
                                                          brute_force.FLOAT32_INPUTS})
        count, _ = brute_force.check(trace.dims, mats, None, lambda work: None,
                                     semantics="float32")
    except Rejected as err:
        raise NotApplicable(f"float32: {err}") from None
    return count, float(delta)
