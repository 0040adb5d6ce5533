"""Strategy cubic: find the good sets the checker's rule `cubic` will confirm.

Mirrors checker/rules/cubic.py in vectorised float64 (midpoints of the
recorded enclosures), claiming a token good only when every bound is below
−TOL relative to its terms' size, so that the checker's rigorous evaluation
(enclosures ~1e-12 wide) agrees.  Cost O(v³·k) numpy work: a second or two.
"""

from __future__ import annotations

from math import comb

import numpy as np

from ...progress import progress_bar
from . import NotApplicable, float32_eu

NAME = "cubic"
TOL = 1e-7
# The checker needs B − S > 0 shown from its enclosures (~2^-40 relative) wherever a claim uses
# a placement; where the mid-point value is below this fraction of B, nothing is claimed.
REST_TOL = 1e-9
# Output differences like EU[q, o] − EU[q, m] can cancel far below their terms, while the
# recorded enclosures are ~2^-40 wide relative to the terms: each bound must also clear this
# fraction of the terms' size (times the attention weight it carries).
CANCEL_TOL = 1e-9
INPUTS = ["EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU"]


def certify(trace, progress=False, semantics="real"):
    d = trace.dims
    v, k = d.d_vocab, d.n_ctx
    if v < 2:
        raise NotApplicable("d_vocab = 1: there is no wrong output to compare against")
    e, beta, evou, pvou, eu = (trace.matrix(n).mid for n in INPUTS)
    inputs = INPUTS
    if semantics == "float32":  # EU widened by Lemma G's δ, as the checker does
        lo, hi, _ = float32_eu.widened(trace, trace.matrix("EU"))
        eu, inputs = (hi, lo), INPUTS + float32_eu.weight_inputs()
    with np.errstate(all="ignore"):  # overflow gives inf/NaN bounds, which claim nothing
        good, exact, count, stats = find_good_sets(v, k, e, beta, evou, pvou, eu, progress)
    hints = {"good": [[m, q, c, mask] + ([exact[(m, q, c)]] if (m, q, c) in exact else [])
                      for (m, q, c), mask in sorted(good.items()) if mask]}
    line = trace.rule("cubic", inputs, count, hints)
    return line, count, stats


def _excluding(top_idx, first, second, t):
    """max over entries other than t, from the top two (vectorised over t)."""
    return np.where(top_idx == t, second, first)


def _top2(vec, m):
    """(argmax, max, second max) of vec over indices != m."""
    w = vec.copy()
    w[m] = -np.inf
    i = int(np.argmax(w))
    first = w[i]
    w[i] = -np.inf
    second = w.max() if len(w) > 2 else first
    return i, first, second


def find_good_sets(v, k, e, beta, evou, pvou, eu, progress=False):
    """The good sets of rule cubic, as {(m, q, c): bitmask}, the tokens among
    them whose bound (II) is the joint maximum over outputs ({(m, q, c):
    bitmask}), the count they prove, and statistics.  Inputs are float64
    arrays: e = exp(EQKE) (v,v), beta = exp(EQKP) (v,k), EVOU (v,v), PVOU (k,v),
    EU (v,v).  The joint bound costs O(v) per token, so it is used only for
    tokens whose split bound fails (in trained models: one or two per (q, m))."""
    # dp_max[m, o] = max_{i<k−1} PVOU[i, o] − PVOU[i, m]; dp_query: the query position
    dp_max = (pvou[:-1, None, :] - pvou[:-1, :, None]).max(axis=0)  # (m, o)
    dp_query = pvou[-1][None, :] - pvou[-1][:, None]  # (m, o)
    # top-3 of each EVOU row, for max_{o ∉ {m, t}} EVOU[t, o]
    order = np.argsort(-evou, axis=1)[:, :3]
    tokens = np.arange(v)
    # eu: EU, or (upper, lower) ends of a wider enclosure: upper for the outputs o, lower
    # for the max m (float32: EU ± δ)
    eu_o, eu_m = eu if isinstance(eu, tuple) else (eu, eu)
    eu = eu_o
    mag = CANCEL_TOL * 2 * (np.abs(eu).max() + np.abs(pvou).max() + np.abs(evou).max())
    good, exact, count, failed = {}, {}, 0, 0
    for q in progress_bar(range(v), "cubic search", enabled=progress):
        b = beta[q, :k - 1]
        b_total = b.sum()
        srt = np.sort(b)
        sums = {c: (srt[:c].sum(), srt[::-1][:c].sum()) for c in range(1, k - 1)}
        sums[k - 1] = (b_total,)  # every non-query position: S = B, R = 0 exactly
        for m in range(q, v):
            dvec = eu_o[q] - eu_m[q, m] + dp_max[m]
            x_m = dvec + evou[m] - evou[m, m]
            x_q = eu_o[q] - eu_m[q, m] + dp_query[m] + evou[q] - evou[q, m]
            p = e[q, m] * x_m
            qv = beta[q, k - 1] * e[q, q] * x_q
            others = np.ones(v, bool)
            others[m] = False
            zero = b_total * p + qv
            slack0 = mag * (b_total * e[q, m] + beta[q, k - 1] * e[q, q])
            ok0 = bool((zero[others] < -TOL * (np.abs(b_total * p) + np.abs(qv))[others]
                        - slack0).all())
            good[(m, q, 0)] = int(ok0)
            count += int(ok0)
            if m == 0:
                continue
            t = tokens[:m]
            d_idx, d_first, d_second = _top2(dvec, m)
            d_excl = _excluding(d_idx, d_first, d_second, t)
            v_excl = _row_max_excluding(evou, order, m, t)
            spread = d_excl + v_excl - evou[t, m]
            x_t = dvec[t] + evou[t, t] - evou[t, m]
            max_c = k - 1 if q == m else k - 2
            x_rows = None  # X_t[o] for all o, only if some token needs the joint bound
            for c in range(1, max_c + 1):
                ok_i = np.ones(m, bool)  # (I) at every placement bound
                ok_split = np.ones(m, bool)  # (II) by the split bound
                bounds = []
                for s_bound in sums[c]:
                    rest = 0.0 if c == k - 1 else b_total - s_bound
                    a = rest * p + qv
                    a_idx, a_first, a_second = _top2(a, m)
                    s = s_bound * e[q, t]
                    bound_i = a[t] + s * x_t
                    bound_ii = _excluding(a_idx, a_first, a_second, t) + s * spread
                    scale_i = np.abs(rest * p[t]) + np.abs(qv[t]) + np.abs(s * x_t)
                    scale_ii = np.abs(_excluding(a_idx, a_first, a_second, t)) + np.abs(s * spread)
                    slack = mag * (rest * e[q, m] + beta[q, k - 1] * e[q, q] + s)  # (t,)
                    ok_i &= bound_i < -TOL * scale_i - slack
                    ok_split &= bound_ii < -TOL * (scale_ii + 1e-300) - slack
                    bounds.append((a, s, slack))
                if c < k - 1 and not min(b_total - s for s in sums[c]) > REST_TOL * b_total:
                    ok_i[:] = False  # B − S could not be shown positive: claim nothing
                joint = ok_i & ~ok_split  # try the exact joint maximum over o for these
                if joint.any():
                    if x_rows is None:
                        x_rows = dvec[None, :] + evou[t] - evou[t, m][:, None]  # (t, o)
                    for a, s, slack in bounds:
                        f = a[None, :] + s[:, None] * x_rows
                        scale = np.abs(a)[None, :] + np.abs(s[:, None] * x_rows)
                        fine = f < -TOL * (scale + 1e-300) - slack[:, None]
                        fine[:, m] = True
                        fine[t, t] = True  # o = t is (I)
                        joint &= fine.all(axis=1)
                ok = ok_i & (ok_split | joint)
                good[(m, q, c)] = _mask(ok)
                if joint.any():
                    exact[(m, q, c)] = _mask(joint)
                n_good = int(ok.sum())
                failed += m - n_good
                count += comb(k - 1, c) * n_good**c
    return good, exact, count, {"failed_pure_checks": failed,
                                "joint_bounds": sum(bin(x).count("1") for x in exact.values())}


def _mask(flags) -> int:
    return int(sum(1 << int(x) for x in np.nonzero(flags)[0]))


def _row_max_excluding(evou, order, m, t):
    """max_{o ∉ {m, t}} EVOU[t, o], vectorised over the tokens t."""
    cand = order[t]  # (n, 3) indices of each row's top three
    vals = evou[t[:, None], cand]
    bad = (cand == m) | (cand == t[:, None])
    vals = np.where(bad, -np.inf, vals)
    return vals.max(axis=1)
