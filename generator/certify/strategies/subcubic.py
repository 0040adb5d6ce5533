"""Strategy subcubic: search the gap table the checker's rule `subcubic_gap`
confirms (spec/rules.md §subcubic_gap).

Mirrors checker/rules/subcubic_gap.py function by function, in vectorised
float64 on the midpoints of the recorded enclosures; an entry is claimed only
when its bound is below −TOL relative to the size of its terms, so that the
checker's rigorous evaluation agrees.  For each (max m, query q, count c) the
smallest gap g whose bound is negative is searched (all g at once, numpy).

Options (typed, enumerable, round-trip to names: `gen-cert --strategy
subcubic --list`, `--strategy subcubic:direct=mean+diff,near=4`):
  direct  how the direct path EU is bounded: "max_diff" (the exact row
          maximum of EU[q, o] − EU[q, m]) or "mean+diff" (the mean row of EU
          joined with the max token's EVOU row, plus the residual's row maximum)
          or "min" (both, the smaller coefficient; the default)
  near    the near band: tokens m−g−near < t ≤ m−g are bounded one by one
          (attention × value jointly), smaller tokens through prefix maxima;
          near = 0 is the paper's Alg. 5 pessimisation.
  eu      the direct path's source: "full" (EU multiplied out; the default) or
          a low-rank handler that never forms EU (subcubic_direct.HANDLERS:
          quad, quad_mean, svd_query, lowrank0/1/2/4; spec/rules.md §low-rank EU).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from math import comb
from typing import Literal, get_args

import numpy as np

from ...progress import progress_bar
from . import NotApplicable
from . import subcubic_direct as low_eu

NAME = "subcubic"
RULE = "subcubic_gap"
TOL = 1e-7
INPUTS = ["EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU"]
Direct = Literal["max_diff", "mean+diff", "min"]
NEAR_CHOICES = (0, 1, 2, 4, 8)
Eu = Literal["full", "quad", "quad_mean", "svd_query", "lowrank0", "lowrank1", "lowrank2",
             "lowrank4"]


@dataclass(frozen=True)
class Options:
    """One point of the option grid; `name()` and `parse()` round-trip."""

    direct: Direct = "min"
    near: int = 2
    eu: Eu = "full"

    def name(self) -> str:
        eu = "" if self.eu == "full" else f",eu={self.eu}"
        return f"{NAME}:direct={self.direct},near={self.near}{eu}"

    @staticmethod
    def parse(text: str) -> Options:
        """'subcubic' or 'subcubic:key=value,...' -> Options (ValueError if bad)."""
        head, _, rest = text.partition(":")
        if head != NAME:
            raise ValueError(f"not a {NAME} strategy name: {text!r}")
        fields = {}
        for part in filter(None, rest.split(",")):
            key, eq, value = part.partition("=")
            if not eq or key not in ("direct", "near", "eu") or key in fields:
                raise ValueError(f"bad option {part!r} (options: direct=..., near=N, eu=...)")
            fields[key] = value
        options = Options(direct=fields.get("direct", Options.direct),
                          near=int(fields.get("near", Options.near)),
                          eu=fields.get("eu", Options.eu))
        if (options.direct not in get_args(Direct) or options.near < 0
                or options.eu not in get_args(Eu)):
            raise ValueError(f"bad options {text!r}; choose from {[o.name() for o in grid()]}")
        return options


def grid() -> list[Options]:
    """Every named option combination (`--list`)."""
    return [Options(d, n, eu) for eu in get_args(Eu) for d in get_args(Direct)
            for n in NEAR_CHOICES]


# For certify-zoo (generator/zoo/catalog.py): the variants it runs and the
# paper's Table 1 row each one reproduces (measured best, and the best without mean+diff).
VARIANTS = (Options().name(), Options("max_diff", 4).name())
PAPER_ROWS = {Options().name(): "Sub-cubic",
              Options("max_diff", 4).name(): "Sub-cubic without mean+diff"}
# Low-rank EU (never forms EU; subcubic_direct): the measured best of the
# handlers (benchmarks/RESULTS.md §low-rank EU) and the paper's own variants.
VARIANTS += (Options("min", 2, "lowrank1").name(), Options("min", 2, "lowrank0").name())
PAPER_ROWS.update({Options("min", 2, "lowrank1").name(): "Low-rank EU"})


def certify(trace, progress=False, options: Options = Options()):
    d = trace.dims
    v, k = d.d_vocab, d.n_ctx
    if v < 2:
        raise NotApplicable("d_vocab = 1: there is no wrong output to compare against")
    inputs, low, eu_hints = INPUTS, None, None
    if options.eu != "full":  # low-rank EU: EU's factors instead of EU
        inputs = INPUTS[:-1] + low_eu.INPUTS
        x, w_u, b_u = (trace.matrix(n).mid for n in low_eu.INPUTS)
        eu_hints, low = low_eu.hints(low_eu.HANDLERS[options.eu], x, w_u, b_u[0])
    eqke, beta, evou, pvou = (trace.matrix(n).mid for n in INPUTS[:-1])
    eu = trace.matrix("EU").mid if low is None else None
    e = np.exp(eqke)
    enclosure = trace.matrix("EXP_EQKP")
    gaps, count, stats = find_gaps(v, k, e, beta, evou, pvou, eu, options, progress,
                                   beta_bounds=(enclosure.lo, enclosure.hi), low=low)
    hints = {"direct": options.direct, "gaps": [list(key) + list(gh) for key, gh in
                                                sorted(gaps.items())]}
    if eu_hints is not None:
        hints["eu"] = eu_hints
    line = trace.rule(RULE, inputs, count, hints)
    return line, count, {**stats, "options": dataclasses.asdict(options)}


def row_gaps(mat):
    """out[r, m] = max_{o≠m} mat[r, o] − mat[r, m] (rows of length ≥ 2)."""
    srt = np.sort(mat, axis=1)
    best = np.repeat(srt[:, -1:], mat.shape[1], axis=1)
    best[np.arange(mat.shape[0]), mat.argmax(axis=1)] = srt[:, -2]
    return best - mat


class Tables:
    """Mirror of the checker's _Tables (float64)."""

    def __init__(self, e, beta, evou, pvou, eu, k, direct, low=None):
        self.e, self.beta, self.k, self.direct = e, beta, k, direct
        self.rho = row_gaps(evou)  # (t, m)
        pos = row_gaps(pvou)  # (i, m)
        self.p_query, self.p_rest = pos[k - 1], pos[:k - 1].max(axis=0)
        self.rho_pre = np.maximum.accumulate(self.rho, axis=0)  # (j, m)
        self.e_hi = np.maximum.accumulate(e, axis=1)  # (q, j)
        self.e_lo = np.minimum.accumulate(e, axis=1)
        if direct in ("max_diff", "min"):
            self.u = low[0] if low else row_gaps(eu)
        if direct in ("mean+diff", "min"):
            mean = low[1] if low else eu.mean(axis=0)
            self.n = low[2] if low else row_gaps(eu - mean[None, :])
            self.e_bar = row_gaps(mean[None, :])[0]
            self.c = np.diag(row_gaps(mean[None, :] + evou))

    def alphas(self, q, m):
        if self.direct == "min":
            return tuple(min(a, b) for a, b in zip(self._alphas("max_diff", q, m),
                                                   self._alphas("mean+diff", q, m)))
        return self._alphas(self.direct, q, m)

    def _alphas(self, direct, q, m):
        if direct == "max_diff":
            u = self.u[q, m]
            return (u + self.rho[m, m] + self.p_rest[m], u + self.rho[q, m] + self.p_query[m],
                    u + self.p_rest[m])
        n = self.n[q, m]
        own_q = self.c[m] if q == m else self.e_bar[m] + self.rho[q, m]
        return (self.c[m] + n + self.p_rest[m], own_q + n + self.p_query[m],
                self.e_bar[m] + n + self.p_rest[m])


def mu_all_gaps(t: Tables, q, m, a_p, near):
    """μ(g) for g = 1..m (array), mirroring the checker's _mu with h = g + near."""
    g = np.arange(1, m + 1)
    j = m - g  # largest covered token
    far = j - near  # tokens ≤ far through prefixes (m − h with h = g + near + 1 ... see h)
    a_far = a_p + t.rho_pre[np.maximum(far, 0), m]
    e_far = np.where(a_far >= 0, t.e_hi[q, np.maximum(far, 0)], t.e_lo[q, np.maximum(far, 0)])
    best = np.where(far >= 0, e_far * a_far, -np.inf)
    scale = np.where(far >= 0, np.abs(e_far * a_far), 0.0)
    for off in range(near):  # near tokens j − off, for off < near
        u = j - off
        ok = u >= 0
        val = np.where(ok, t.e[q, np.maximum(u, 0)] * (a_p + t.rho[np.maximum(u, 0), m]), -np.inf)
        scale = np.maximum(scale, np.where(ok, np.abs(val), 0.0))
        best = np.maximum(best, val)
    return best, scale


def find_gaps(v, k, e, beta, evou, pvou, eu, options: Options, progress=False,
              beta_bounds=None, low=None):
    """{(m, q, c): (g, h)} the rule will confirm, the count they prove, stats.
    beta_bounds = (lo, hi) of the recorded EXP_EQKP: an entry is claimed only
    if the checker can show B − S_c^hi >= 0 from them (it rejects otherwise)."""
    beta_lo, beta_hi = beta_bounds if beta_bounds is not None else (beta, beta)
    t = Tables(e, beta, evou, pvou, eu, k, options.direct, low)
    gaps, count, lost = {}, 0, 0
    for q in progress_bar(range(v), "subcubic gap search", enabled=progress):
        b = beta[q, :k - 1]
        srt = np.sort(b)
        b_total = b.sum()
        w_query = beta[q, k - 1] * e[q, q]
        his = np.sort(beta_hi[q, :k - 1])[::-1]
        rest_ok = {c: beta_lo[q, :k - 1].sum() - his[:c].sum() > 1e-9 * b_total
                   for c in range(1, k - 1)}
        for m in range(q, v):
            a_m, a_q, a_p = t.alphas(q, m)
            term_q, term_m = w_query * a_q, e[q, m] * a_m
            zero = b_total * term_m + term_q
            if zero < -TOL * (abs(b_total * term_m) + abs(term_q)):
                gaps[(m, q, 0)] = (0, 0)
                count += 1
            if m == 0:
                continue
            mu, mu_scale = mu_all_gaps(t, q, m, a_p, options.near)
            max_c = k - 1 if q == m else k - 2
            for c in range(1, max_c + 1):
                if c < k - 1 and not rest_ok[c]:  # the checker could not show B − S >= 0
                    lost += comb(k - 1, c) * m ** c
                    continue
                ok = np.ones(m, bool)
                sums = [b_total] if c == k - 1 else [srt[:c].sum(), srt[::-1][:c].sum()]
                for s in sums:
                    rest = 0.0 if c == k - 1 else b_total - s
                    bound = term_q + s * mu + rest * term_m
                    scale = abs(term_q) + s * mu_scale + abs(rest * term_m)
                    ok &= bound < -TOL * scale
                if ok.any():
                    g = int(np.argmax(ok)) + 1
                    h = min(g + options.near, m + 1)
                    gaps[(m, q, c)] = (g, h)
                    count += comb(k - 1, c) * (m - g + 1) ** c
                    lost += comb(k - 1, c) * (m ** c - (m - g + 1) ** c)
                else:
                    lost += comb(k - 1, c) * m ** c
    return gaps, count, {"gap_entries": len(gaps), "sequences_lost_to_gaps": lost}
