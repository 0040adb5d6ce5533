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
  attn    attention handling: "full" (EQKE multiplied out; the default) or
          "rank1" / "rank2" / "rank4" (low-rank EQKE from its factors, spec/rules.md
          §low-rank EQKE; subcubic_attention.py), with
  err     the attention error's bound: "cs" (balanced Cauchy–Schwarz,
          O(v·h² + v²)), "rowdiff" / "mean+rowdiff" (the paper's max row-diff
          trick, Thm 21 / Thm 24, on the same factors), "svd" (the paper's
          "SVD only": one √2·σ₁ bound, σ₁ certified through Gram matrices), "recursive" /
          "mean+recursive" / "mean-recursive" (the paper's "attention-quadratic": Thm 23,
          Thm 26 with the query-side mean only, Thm 26 with means throughout, on the
          chain Q·(I − AB^T)·K^T, O(v·h + h²·r + v²·r)) or "exact" (multiplied
          out, O(v²·h), for comparison).
  eu      the direct path's source: "full" (EU multiplied out; the default) or
          a low-rank handler that never forms EU (subcubic_direct.HANDLERS:
          quad, quad_mean, svd_query, lowrank0/1/2/4; spec/rules.md §low-rank EU).
  gaps    2 (the default): an entry with c ≥ 2 non-max tokens may have a second,
          larger gap g2 with at most one token above m − g2 (spec/rules.md Lemma 6b),
          kept where it covers more; 1: one gap per entry (the rule before two-gap
          entries).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from math import comb
from typing import Literal, get_args

import numpy as np

from ...progress import progress_bar
from . import NotApplicable, float32_eu, option_fields
from . import subcubic_attention as attention
from . import subcubic_direct as low_eu
from .subcubic_direct import row_gaps  # one-sided row gaps, shared with the low-rank path

NAME = "subcubic"
RULE = "subcubic_gap"
TOL = 1e-7
INPUTS = ["EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU"]
Direct = Literal["max_diff", "mean+diff", "min"]
NEAR_CHOICES = (0, 1, 2, 4, 8)
Attn = Literal["full", "rank1", "rank2", "rank4"]
Err = Literal["cs", "rowdiff", "mean+rowdiff", "svd", "exact", "recursive", "mean+recursive",
              "mean-recursive"]
Eu = Literal["full", "quad", "quad_mean", "svd_query", "lowrank0", "lowrank1", "lowrank2",
             "lowrank4"]


@dataclass(frozen=True)
class Options:
    """One point of the option grid; `name()` and `parse()` round-trip."""

    direct: Direct = "min"
    near: int = 2
    attn: Attn = "full"
    err: Err = "cs"  # only with attn != "full"
    eu: Eu = "full"
    gaps: int = 2  # 1 or 2 gaps per entry (Lemma 6b)

    def name(self) -> str:
        low_rank = "" if self.attn == "full" else f",attn={self.attn},err={self.err}"
        eu = "" if self.eu == "full" else f",eu={self.eu}"
        gaps = "" if self.gaps == 2 else f",gaps={self.gaps}"
        return f"{NAME}:direct={self.direct},near={self.near}{low_rank}{eu}{gaps}"

    @staticmethod
    def parse(text: str) -> Options:
        """'subcubic' or 'subcubic:key=value,...' -> Options (ValueError if bad)."""
        fields = option_fields(text, NAME, ("direct", "near", "attn", "err", "eu", "gaps"),
                               "direct=..., near=N, attn=..., err=..., eu=..., gaps=1|2")
        try:
            near, gaps = int(fields.get("near", Options.near)), int(fields.get("gaps", 2))
        except ValueError:
            raise ValueError(f"bad options {text!r}: near and gaps take integers") from None
        options = Options(direct=fields.get("direct", Options.direct), near=near,
                          attn=fields.get("attn", Options.attn), err=fields.get("err", Options.err),
                          eu=fields.get("eu", Options.eu), gaps=gaps)
        if (options.direct not in get_args(Direct) or options.near < 0 or gaps not in (1, 2)
                or options.attn not in get_args(Attn) or options.err not in get_args(Err)
                or options.attn == "full" and "err" in fields or options.eu not in get_args(Eu)):
            raise ValueError(f"bad options {text!r}; choose from {[o.name() for o in grid()]}")
        return options


def grid() -> list[Options]:
    """Every named option combination (`--list`)."""
    attention = [("full", Options.err)] + [(a, e) for a in get_args(Attn)[1:]
                                           for e in get_args(Err)]
    return [Options(d, n, a, e, eu, gaps) for gaps in (2, 1) for eu in get_args(Eu)
            for a, e in attention for d in get_args(Direct) for n in NEAR_CHOICES]


# For certify-zoo (generator/zoo/catalog.py): the variants it runs and the
# paper's Table 1 row each one reproduces (measured best, and the best without mean+diff).
VARIANTS = (Options().name(), Options("max_diff", 4).name())
PAPER_ROWS = {Options().name(): "Sub-cubic",
              Options("max_diff", 4).name(): "Sub-cubic without mean+diff"}
# Low-rank EU (never forms EU; subcubic_direct): the measured best of the
# handlers (benchmarks/RESULTS.md §low-rank EU) and the paper's own variants.
VARIANTS += (Options("min", 2, eu="lowrank1").name(), Options("min", 2, eu="lowrank0").name())
PAPER_ROWS.update({Options("min", 2, eu="lowrank1").name(): "Low-rank EU"})
# Low-rank EQKE (never forms EQKE; subcubic_attention): the measured best (rank 4,
# balanced Cauchy–Schwarz), rank 1, the paper's "SVD only" (rank 1, √2·σ₁), and
# both low-rank handlers together (benchmarks/RESULTS.md §low-rank EQKE).
LOW_RANK_QK = Options("min", 2, "rank4", "cs")
LOW_RANK_QK_EU = Options("min", 2, "rank4", "cs", "lowrank1")
VARIANTS += (LOW_RANK_QK.name(), Options("min", 2, "rank1", "cs").name(),
             Options("min", 2, "rank1", "svd").name(), LOW_RANK_QK_EU.name())
PAPER_ROWS.update({LOW_RANK_QK.name(): "Low-rank QK",
                   Options("min", 2, "rank1", "svd").name(): "Low-rank QK, SVD only",
                   LOW_RANK_QK_EU.name(): "Low-rank QK&EU"})
# The paper's "attention-quadratic" (recursive max row-diff trick on the attention
# error; no Table 1 row): the measured best, alone and with low-rank EU (RESULTS.md).
VARIANTS += (Options("min", 2, "rank1", "mean+recursive").name(),
             Options("min", 2, "rank1", "mean+recursive", "lowrank1").name())


def certify(trace, progress=False, options: Options = Options(), semantics="real"):
    d = trace.dims
    v, k = d.d_vocab, d.n_ctx
    if v < 2:
        raise NotApplicable("d_vocab = 1: there is no wrong output to compare against")
    inputs, extra, low = INPUTS, {}, None
    if options.eu != "full":  # low-rank EU: EU's factors instead of EU
        inputs = INPUTS[:-1] + low_eu.INPUTS
        x, w_u, b_u = (trace.matrix(n).mid for n in low_eu.INPUTS)
        extra["eu"], low = low_eu.hints(low_eu.HANDLERS[options.eu], x, w_u, b_u[0])
    beta, evou, pvou = (trace.matrix(n).mid for n in INPUTS[1:-1])
    eu = trace.matrix("EU").mid if low is None else None
    if semantics == "float32" and low is not None:  # U and N raised by δ, as the checker
        low, inputs = float32_eu.raised(trace, low), list(inputs) + float32_eu.weight_inputs()
    elif semantics == "float32":  # EU widened by Lemma G's δ, as the checker does
        lo, hi, _ = float32_eu.widened(trace, trace.matrix("EU"))
        eu, inputs = (hi, lo), list(inputs) + float32_eu.weight_inputs()
    if options.attn == "full":
        e = np.exp(trace.matrix("EQKE").mid)
    else:  # low-rank EQKE: a per-query-shifted enclosure from its factors (Lemma L)
        q_tok, k_tok = (trace.matrix(n).mid for n in attention.INPUTS)
        rank = attention.RANKS[options.attn]
        mats = attention.factor_hints(q_tok, k_tok, rank, options.err)
        lo, hi = attention.enclosure(q_tok, k_tok, mats, options.err)
        e = (np.exp(lo), np.exp(hi))
        inputs = attention.INPUTS + inputs[1:]
        extra["attention"] = attention.hints(mats, rank, options.err)
    enclosure = trace.matrix("EXP_EQKP")
    gaps, count, stats = find_gaps(v, k, e, beta, evou, pvou, eu, options, progress,
                                   beta_bounds=(enclosure.lo, enclosure.hi), low=low)
    hints = {"direct": options.direct, "gaps": [list(key) + list(gh) for key, gh in
                                                sorted(gaps.items())], **extra}
    line = trace.rule(RULE, inputs, count, hints)
    return line, count, {**stats, "options": dataclasses.asdict(options)}


class Tables:
    """Mirror of the checker's _Tables (float64)."""

    def __init__(self, e, beta, evou, pvou, eu, k, direct, low=None):
        """e: exp(EQKE), or (lo, hi) of an enclosure of exp(EQKE − c_q)."""
        self.e_pair = e if isinstance(e, tuple) else (e, e)
        self.beta, self.k, self.direct = beta, k, direct
        self.rho = row_gaps(evou)  # (t, m)
        pos = row_gaps(pvou)  # (i, m)
        self.p_query, self.p_rest = pos[k - 1], pos[:k - 1].max(axis=0)
        self.rho_pre = np.maximum.accumulate(self.rho, axis=0)  # (j, m)
        self.e_hi = np.maximum.accumulate(self.e_pair[1], axis=1)  # (q, j)
        self.e_lo = np.minimum.accumulate(self.e_pair[0], axis=1)
        # eu: EU, or (upper, lower) ends of a wider enclosure (float32: EU ± δ)
        eu_hi, eu_lo = eu if isinstance(eu, tuple) else (eu, eu)
        if direct in ("max_diff", "min"):
            self.u = low[0] if low else row_gaps(eu_hi, eu_lo)
        if direct in ("mean+diff", "min"):
            if low:
                mean_hi = mean_lo = low[1]
                self.n = low[2]
            else:
                # the checker's summary row: the mean of EU before widening (its midpoint)
                mean_hi = mean_lo = (0.5 * eu_hi + 0.5 * eu_lo).mean(axis=0)
                self.n = row_gaps(eu_hi - mean_lo[None, :], eu_lo - mean_hi[None, :])
            self.e_bar = row_gaps(mean_hi[None, :], mean_lo[None, :])[0]
            self.c = np.diag(row_gaps(mean_hi[None, :] + evou, mean_lo[None, :] + evou))

    def times(self, q, t, a):
        """The checker's upper bound of e_t·A for A ≤ a (the enclosure's end by sign)."""
        lo, hi = self.e_pair
        return np.where(a >= 0, hi[q, t] * a, lo[q, t] * a)

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
        val = np.where(ok, t.times(q, np.maximum(u, 0), a_p + t.rho[np.maximum(u, 0), m]),
                       -np.inf)
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
    gaps, count, lost, two = {}, 0, 0, 0
    for q in progress_bar(range(v), "subcubic gap search", enabled=progress):
        b_ends = (beta_lo[q, :k - 1].min(), beta_hi[q, :k - 1].max())  # the rule's w_δ factor
        b = beta[q, :k - 1]
        srt = np.sort(b)
        b_total = b.sum()
        w_query = beta[q, k - 1] * np.array([t.e_pair[0][q, q], t.e_pair[1][q, q]])
        his = np.sort(beta_hi[q, :k - 1])[::-1]
        rest_ok = {c: beta_lo[q, :k - 1].sum() - his[:c].sum() > 1e-9 * b_total
                   for c in range(1, k - 1)}
        for m in range(q, v):
            a_m, a_q, a_p = t.alphas(q, m)
            term_q, term_m = w_query[int(a_q >= 0)] * a_q, t.times(q, m, a_m)
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
                g = int(np.argmax(ok)) + 1 if ok.any() else None
                best = (comb(k - 1, c) * (m - g + 1) ** c, (g, min(g + options.near, m + 1))) \
                    if g else (0, None)
                if options.gaps == 2 and c >= 2:
                    pair = two_gaps(mu, mu_scale, term_q, term_m, b_total, sums, b_ends, c, k,
                                    m, best[0])
                    if pair is not None:
                        (g1, g2), n = pair
                        best = (n, (g1, min(g1 + options.near, m + 1),
                                    g2, min(g2 + options.near, m + 1)))
                        two += 1
                if best[1] is not None:
                    gaps[(m, q, c)] = best[1]
                    count += best[0]
                lost += comb(k - 1, c) * m ** c - best[0]
    return gaps, count, {"gap_entries": len(gaps), "two_gap_entries": two,
                         "sequences_lost_to_gaps": lost}


def two_gaps(mu, mu_scale, term_q, term_m, b_total, sums, b_ends, c, k, m, to_beat):
    """The two-gap entry (g, g2), 1 ≤ g < g2 ≤ m, covering the most sequences —
    ((g, g2), count) if it covers more than `to_beat`, else None.  Mirrors the rule's
    _confirm_two (Lemma 6b): f with μ(g2), plus (β_lo or β_hi)·(μ(g) − μ(g2)) by the
    sign, below −TOL relative to its terms at every placement extreme.  O(m²)."""
    g1, g2 = np.meshgrid(np.arange(1, m + 1), np.arange(1, m + 1), indexing="ij")
    mu1, mu2 = mu[g1 - 1], mu[g2 - 1]
    d = mu1 - mu2
    w = np.where(d >= 0, b_ends[1], b_ends[0]) * d
    ok = g1 < g2
    for s in sums:
        rest = 0.0 if c == k - 1 else b_total - s
        bound = term_q + s * mu2 + rest * term_m + w
        scale = (abs(term_q) + s * mu_scale[g2 - 1] + abs(rest * term_m)
                 + np.abs(w) + b_ends[1] * mu_scale[g1 - 1])
        ok &= bound < -TOL * scale
    if not ok.any():
        return None
    free = (m - g2 + 1).astype(float)  # ranked in float, counted exactly below
    rank = np.where(ok, free ** c + c * (g2 - g1) * free ** (c - 1), -1.0)
    i = np.unravel_index(int(np.argmax(rank)), rank.shape)
    g, g_2 = int(g1[i]), int(g2[i])
    n = comb(k - 1, c) * ((m - g_2 + 1) ** c + c * (g_2 - g) * (m - g_2 + 1) ** (c - 1))
    return ((g, g_2), n) if n > to_beat else None
