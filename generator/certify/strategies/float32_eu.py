"""float32 for strategies cubic, exact and subcubic: EU's enclosure widened by Lemma G's
δ[q][o] (checker.float32.attention_only_deltas, the checker's own function), as the
checker widens it before running the rule (spec/rules.md §float32 by widening EU), or, for
subcubic's low-rank EU, its tables U and N raised by δ[q][m] + max_(o≠m) δ[q][o]
(`raised`, as checker/rules/subcubic_direct.widened_float32).  The generator searches
with δ a little larger (SLACK), so its claims stay on the safe side."""

from __future__ import annotations

import numpy as np

from . import NotApplicable

SLACK = 1e-3  # the generator's δ is (1 + SLACK)·δ


def weight_inputs() -> list:
    from checker.rules import brute_force

    return list(brute_force.FLOAT32_INPUTS)


def deltas(trace) -> np.ndarray:
    """δ[q][o] of Lemma G from the trace's recorded weights (float64, rounded up a little)."""
    from mpmath import iv

    from checker import float32
    from checker.errors import Rejected

    mats = {}
    for name in weight_inputs():
        value = trace.values[trace.quantity(name)]
        mats[name] = [[iv.mpf((float(a), float(b))) for a, b in zip(lo, hi)]
                      for lo, hi in zip(value.lo, value.hi)]
    try:
        rows = float32.attention_only_deltas(trace.dims, mats)
    except Rejected as err:
        raise NotApplicable(f"float32: {err}") from None
    return np.array([[float(x) for x in row] for row in rows]) * (1 + SLACK)


def widened(trace, enclosure):
    """(lo, hi, mid) of EU's recorded enclosure widened by the generator's δ."""
    d = deltas(trace)
    return enclosure.lo - d, enclosure.hi + d, enclosure.mid


def raised(trace, low):
    """The low-rank direct path's mirrored tables (u, s, n) under float32: u and n raised by
    w[q][m] = δ[q][m] + max_(o≠m) δ[q][o] (the generator's δ), s unchanged."""
    d = deltas(trace)
    top = d.max(axis=1, keepdims=True)
    others = np.repeat(top, d.shape[1], axis=1)
    srt = np.sort(d, axis=1)
    others[np.arange(len(d)), d.argmax(axis=1)] = srt[:, -2]
    w = d + others
    u, s, n = low
    return u + w, s, n + w
