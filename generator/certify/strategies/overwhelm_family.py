"""Strategy overwhelm (families): the hints of rule overwhelm_family
(checker/rules/overwhelm_family.py, spec/rules.md §overwhelm_family).

Mirrors the rule function by function, in float64 (untrusted):
  forward._Model / Head.__init__  -> `Tables`, `head_arrays`: w(i, u), vo(i, u)
  Head.ratio_holds (Lemma R)      -> `max_ratio`: Dinkelbach's exact maximum of
                                     the attention average of a functional, and
                                     its maximising string (a counterexample
                                     candidate); the hint adds a small slack
  AtQuery.attention_box, mlp_part, check, numerator
                                  -> `query_margins`: the same chain on boxes
                                     (midpoint-radius), giving the float bound of
                                     each ℓ_m − ℓ_o
The checker recomputes everything rigorously and accepts only what it confirms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from checker.rules import overwhelm_family as rule
from checker.statement import Overwhelm

from ...model import _layer_norm_np, rope_angles
from .overwhelm import TOL

SLACK = 1e-9  # relative slack added to each λ so the checker's rounding agrees
# float32 (rule overwhelm_family_float32): the checker confirms each λ over the tables'
# float32 enclosures and Lemma S's weight intervals (relative widths ~1e-6..1e-4); the
# generator tries these slacks in turn and keeps the first certificate the checker accepts
F32_SLACKS = (1e-4, 1e-3, 1e-2)
ATT = "blocks.0.attn."


@dataclass
class FamilyMargin:
    """The generator's verdict: `worst` = max over positions and m of the float
    bound on ℓ_m − ℓ_o (< 0: proved), `completion` a string maximising the
    worst head's diff functional (a counterexample candidate)."""

    worst: float
    scale: float
    competitor: int
    completion: tuple
    hints: dict = field(default_factory=dict)
    candidates: list = field(default_factory=list)

    @property
    def proved(self) -> bool:
        return self.worst < -TOL * self.scale


class Tables:
    """float64 attention inputs per (position, token): q, key (rotated), value."""

    def __init__(self, weights):
        from ...model import family_weights

        weights = family_weights(weights)
        self.dims, f = weights.dims, weights.dims.family
        self.f = f
        w = {k: a.astype(np.float64) for k, a in weights.params.items()}
        self.w = w
        k, v = self.dims.n_ctx, self.dims.d_vocab
        x = np.broadcast_to(w["embed.W_E"][None], (k, v, self.dims.d_model)).copy()
        if f.positional == "standard":
            x = x + w["pos_embed.W_pos"][:, None]
        self.resid0 = x  # (k, v, d)
        a_in = self.norm(x, "blocks.0.ln1")
        self.q = np.einsum("ivd,jdh->jivh", a_in, w[ATT + "W_Q"]) + w[ATT + "b_Q"][:, None, None]
        self.key = np.einsum("ivd,jdh->jivh", a_in, w[ATT + "W_K"]) + w[ATT + "b_K"][:, None, None]
        self.val = np.einsum("ivd,jdh->jivh", a_in, w[ATT + "W_V"]) + w[ATT + "b_V"][:, None, None]
        if f.positional == "rotary":
            ang = rope_angles(self.dims)
            cos, sin = np.cos(ang), np.sin(ang)
            self.q, self.key = self.rotate(self.q, cos, sin), self.rotate(self.key, cos, sin)

    def rotate(self, t, cos, sin):
        r = self.f.rotary_dim
        half = r // 2
        a, b = t[..., :half].copy(), t[..., half:r].copy()
        out = t.copy()
        out[..., :half] = a * cos[:, None] - b * sin[:, None]
        out[..., half:r] = b * cos[:, None] + a * sin[:, None]
        return out

    def norm(self, x, which):
        f, w = self.f, self.w
        if f.normalization is None:
            return x
        if f.normalization == "LNPre":
            return _layer_norm_np(x, f.ln_eps)
        return _layer_norm_np(x, f.ln_eps, w[which + ".w"], w[which + ".b"])

    def centred(self, x):
        return x - x.mean(axis=-1, keepdims=True) if self.f.normalization is not None else x


def head_arrays(tab: Tables, j: int, p: int, slots: list):
    """(W (P, A), VO (P, A, d), tokens (P, A)) for head j at query position p:
    slots padded by repeating their first token (harmless for a max)."""
    width = max(len(s) for s in slots)
    toks = np.array([list(s) + [s[0]] * (width - len(s)) for s in slots])  # (P, A)
    pos = np.arange(len(slots))[:, None]
    h = tab.dims.d_head
    scores = tab.key[j][pos, toks] @ tab.q[j, p, slots[p][0]] / math.sqrt(h)  # (P, A)
    w = np.exp(scores - scores[p, 0])
    w_o = tab.centred(tab.w[ATT + "W_O"][j])  # row-centred (h, d)
    return w, tab.val[j][pos, toks] @ w_o, toks


def max_ratio(w: np.ndarray, y: np.ndarray, iters: int = 100):
    """Dinkelbach: for W (P, A) and Y (P, A, F), the max over strings (one column per
    position) of Σ_i W y / Σ_i W, per functional F; returns (λ (F,), argmax (P, F)).
    The same λ and argmax, bit for bit, as the plain loop it replaced
    (`max_ratio_reference` in tests/test_family_gap_gen_speed.py: the same operations per
    element), the gather of Y by direct indexing instead of take_along_axis (a third of the
    time at these sizes)."""
    pick = np.zeros((w.shape[0], y.shape[2]), dtype=np.intp)
    rows, cols = np.arange(w.shape[0])[:, None], np.arange(y.shape[2])
    lam = None
    for _ in range(iters):
        wp = w[rows, pick]  # (P, F)
        yp = y[rows, pick, cols]  # (P, F)
        new = (wp * yp).sum(0) / wp.sum(0)
        if lam is not None and np.all(new <= lam):
            break
        lam = new if lam is None else np.maximum(lam, new)
        pick = (w[:, :, None] * (y - lam)).argmax(axis=1)
    return lam, pick


def slack(lam: np.ndarray, scale: float, rel: float = SLACK) -> np.ndarray:
    return lam + rel * (np.abs(lam) + scale)


def _box_mul(lo, hi, mat):
    """Interval box (lo, hi) times a float matrix, midpoint-radius form."""
    mid, rad = (lo + hi) / 2, (hi - lo) / 2
    c, r = mid @ mat, rad @ np.abs(mat)
    return c - r, c + r


def _ln_scale(lo, hi, eps, e=None, low=None):
    """Mirror of ln_scale: (σ_lo, σ_hi) from the box and a direction bound."""
    sq_lo = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(lo * lo, hi * hi)).sum()
    if e is not None and low is not None and low > 0 and (e @ e) > 0:
        sq_lo = max(sq_lo, low * low / (e @ e))
    return math.sqrt(sq_lo / len(lo) + eps), math.sqrt(np.maximum(lo * lo, hi * hi).mean() + eps)


class _Query:
    """Mirror of AtQuery at query position p; fills the hint arrays as it goes."""

    rel = SLACK  # the relative slack of every λ (a subclass without this __init__: family_gap)

    def __init__(self, tab: Tables, claim: Overwhelm, p: int, rel: float = SLACK):
        f, w = tab.f, tab.w
        self.rel = rel  # the relative slack of every λ (float32: larger, F32_SLACKS)
        self.tab, self.claim, self.p, self.f, self.w = tab, claim, p, f, w
        s = len(claim.prefix)
        free = list(rule.alphabet(tab.dims, claim))
        self.slots = [[u] for u in claim.prefix] + [free] * (p - s) + [[claim.query]]
        self.x_p = tab.resid0[p, claim.query]
        self.base = tab.centred(self.x_p + w[ATT + "b_O"])
        self.heads = [head_arrays(tab, j, p, self.slots) for j in range(f.n_heads)]
        shapes = rule.hint_shapes(tab.dims, claim)
        self.hint = {name: np.zeros(shape) for name, shape in shapes.items()}
        self.candidates = []
        if claim.free_perm is not None:  # free rows hold the multiset's items, in order
            self.slots[s:p] = [list(claim.free_perm)] * (p - s)
            self.heads = [head_arrays(tab, j, p, self.slots) for j in range(f.n_heads)]
        self.free_rows = list(range(s, p))

    def bounds(self, a: np.ndarray, upper_only: bool = False, keep=None, keys=(None, None)):
        """Lemma R per head for the functionals a (d, F): (lo (F,), hi (F,)) of r_c·a
        and the per-head hints (n_heads, F, 2); keys = (lower, upper) potential
        indices per column (permutation claims)."""
        lo, hi = self.base @ a, self.base @ a
        per = np.zeros((len(self.heads), a.shape[1], 2))
        for j, (wt, vo, toks) in enumerate(self.heads):
            y = vo @ a  # (P, A, F)
            scale = float(np.abs(y).max()) + 1e-12
            if self.claim.free_perm is not None:
                per[j] = self.perm_bounds(j, wt, y, scale, upper_only, keys, keep)
                lo, hi = lo + per[j, :, 0], hi + per[j, :, 1]
                continue
            top, pick = max_ratio(wt, y)
            per[j, :, 1] = slack(top, scale, self.rel)
            if keep is not None:
                s = len(self.claim.prefix)
                keep += [tuple(int(toks[i, pick[i, c]]) for i in range(s, self.p))
                         for c in range(a.shape[1])]
            if not upper_only:
                bot, _ = max_ratio(wt, -y)
                per[j, :, 0] = -slack(bot, scale, self.rel)
            lo, hi = lo + per[j, :, 0], hi + per[j, :, 1]
        return lo, hi, per

    def perm_bounds(self, j, wt, y, scale, upper_only, keys, keep):
        """Lemma R-perm for every column of y: λ by Dinkelbach over assignments, and the
        dual potentials of the assignment at the hinted λ (stored in perm_u)."""
        out = np.zeros((y.shape[2], 2))
        items = self.claim.free_perm
        for c in range(y.shape[2]):
            for side, sign in ((1, 1.0), (0, -1.0)):
                if side == 0 and upper_only:
                    continue
                lam, cols = max_ratio_perm(wt, sign * y[:, :, c], self.free_rows)
                lam = slack(np.array([lam]), scale, self.rel)[0]
                out[c, side] = sign * lam
                if keys[side] is not None:
                    self.hint["perm_u"][j, keys[side][c]] = perm_potentials(
                        wt, sign * y[:, :, c], self.free_rows, lam)
                if keep is not None and side == 1:
                    keep.append(tuple(int(items[x]) for x in cols))
        return out

    def direction(self, which: int, e: np.ndarray, extra_lo: float = 0.0):
        """Set hint dir[which] = e and dir_lo; returns the lower bound of r_c·e + extra."""
        lo, _, per = self.bounds(e[:, None], keys=([rule.key(self.tab.dims, "dir", which)],
                                                   None))
        self.hint["dir"][which] = e
        self.hint["dir_lo"][:, which] = per[:, 0, 0]
        return float(lo[0]) + extra_lo

    def margins(self) -> np.ndarray:
        """The float bound of ℓ_m − ℓ_o per m (−inf at o)."""
        tab, f, w, claim = self.tab, self.f, self.w, self.claim
        d, o = tab.dims.d_model, claim.output
        dims = tab.dims
        lo, hi, per = self.bounds(np.eye(d), keys=([rule.key(dims, "box", k, 0) for k in range(d)],
                                                   [rule.key(dims, "box", k, 1) for k in range(d)]))
        self.hint["box"] = per
        h_lo = h_hi = None
        if f.d_mlp and f.parallel:
            h_lo = h_hi = np.maximum(tab.norm(self.x_p, "blocks.0.ln2") @ w["blocks.0.mlp.W_in"]
                                     + w["blocks.0.mlp.b_in"], 0)
        elif f.d_mlp:
            w_in = w["blocks.0.mlp.W_in"]
            a = w_in * w["blocks.0.ln2.w"][:, None] if f.normalization == "LN" else w_in
            s_lo, s_hi = 1.0, 1.0
            if f.normalization is not None:
                e = (lo + hi) / 2
                s_lo, s_hi = _ln_scale(lo, hi, f.ln_eps, e, self.direction(0, e))
            n_lo, n_hi, self.hint["pre"] = self.bounds(
                a, keys=([rule.key(dims, "pre", k, 0) for k in range(a.shape[1])],
                         [rule.key(dims, "pre", k, 1) for k in range(a.shape[1])]))
            const = w["blocks.0.mlp.b_in"] + (w["blocks.0.ln2.b"] @ w_in
                                              if f.normalization == "LN" else 0)
            cands = np.stack([n_lo / s_lo, n_lo / s_hi, n_hi / s_lo, n_hi / s_hi])
            h_lo, h_hi = np.maximum(cands.min(0) + const, 0), np.maximum(cands.max(0) + const, 0)
        u = w["unembed.W_U"]
        d_u = u - u[:, o:o + 1]  # (d, v)
        w_f = w["ln_final.w"] if f.normalization == "LN" else np.ones(d)
        b_f = w["ln_final.b"] if f.normalization == "LN" else np.zeros(d)
        g = w_f[:, None] * d_u
        _, numer, per = self.bounds(g, upper_only=True, keep=self.candidates,
                                    keys=(None, [rule.key(dims, "diff", t)
                                                 for t in range(g.shape[1])]))
        self.hint["diff"] = per[:, :, 1]
        mlp = None
        if h_lo is not None:
            w_out_c, b_out_c = tab.centred(w["blocks.0.mlp.W_out"]), tab.centred(
                w["blocks.0.mlp.b_out"])
            mlp = (h_lo, h_hi, w_out_c, b_out_c, w_out_c @ g, b_out_c @ g)
        return self.logit_bound(lo, hi, numer, mlp, b_f @ d_u)

    def logit_bound(self, lo, hi, numer, mlp, b_f_d_u) -> np.ndarray:
        """The chain's last steps (also family_gap's `_ClassQuery.margins`): the final
        residual's box [lo, hi] plus the MLP's output (mlp: None, or (h_lo, h_hi, c(W_out),
        c(b_out), c(W_out)·g, c(b_out)·g)), Lemma LN's scale with direction 1, and the bound
        of ℓ_o − ℓ_m per o from the diff numerators (−inf at the output)."""
        f, w, o = self.f, self.w, self.claim.output
        f_lo, f_hi = lo, hi
        if mlp is not None:
            h_lo, h_hi, w_out_c, b_out_c, w_out_g, b_out_g = mlp
            m_lo, m_hi = _box_mul(h_lo, h_hi, w_out_c)
            f_lo, f_hi = lo + m_lo + b_out_c, hi + m_hi + b_out_c
            numer = numer + _box_mul(h_lo, h_hi, w_out_g)[1] + b_out_g
        s_lo, s_hi = 1.0, 1.0
        if f.normalization is not None:
            e = (f_lo + f_hi) / 2
            extra = 0.0
            if mlp is not None:
                extra = float(_box_mul(h_lo, h_hi, (w_out_c @ e)[:, None])[0][0] + b_out_c @ e)
            s_lo, s_hi = _ln_scale(f_lo, f_hi, f.ln_eps, e, self.direction(1, e, extra))
        bound = np.where(numer >= 0, numer / s_lo, numer / s_hi) + b_f_d_u \
            + w["unembed.b_U"] - w["unembed.b_U"][o]
        bound[o] = -np.inf
        return bound


def max_ratio_perm(w: np.ndarray, y: np.ndarray, free: list, iters: int = 100):
    """Dinkelbach over assignments: for W, Y (P, A) whose free rows hold the n items
    in order (fixed rows: column 0), the max over bijections σ of the attention
    average; returns (λ, σ as the item index per free position)."""
    from scipy.optimize import linear_sum_assignment

    n = len(free)
    fixed = [i for i in range(w.shape[0]) if i not in set(free)]
    fw, fy = w[fixed, 0], y[fixed, 0]
    wf, yf = w[free, :n], y[free, :n]  # (n, n)
    cols, lam = np.arange(n), None
    for _ in range(iters):
        ws, ys = wf[np.arange(n), cols], yf[np.arange(n), cols]
        new = (fw @ fy + ws @ ys) / (fw.sum() + ws.sum())
        if lam is not None and new <= lam:
            break
        lam = new if lam is None else max(lam, new)
        if n == 0:
            break
        _, cols = linear_sum_assignment(wf * (yf - lam), maximize=True)
    return float(lam), cols


def perm_potentials(w: np.ndarray, y: np.ndarray, free: list, lam: float) -> np.ndarray:
    """Dual potentials u (n,) of the assignment with costs w(y − λ) on the free rows."""
    from scipy.optimize import linear_sum_assignment

    from .overwhelm import assignment_potentials

    n = len(free)
    if n == 0:
        return np.zeros(0)
    cost = w[free, :n] * (y[free, :n] - lam)
    _, cols = linear_sum_assignment(cost, maximize=True)
    return assignment_potentials(cost, cols)


def encode_hints(entries: list, claim: Overwhelm) -> dict:
    from ..trace import b64

    return {"bounds": [[p] + [b64(hint[name], "<f8") for name in rule.hint_fields(claim)]
                       for p, hint in entries]}


def family_margins(weights, claim: Overwhelm, rel: float = SLACK) -> FamilyMargin:
    """Mirror of rule overwhelm_family.check on one layer: the worst bound over positions
    and m.  rel: the relative slack added to every λ (float32: F32_SLACKS, since the checker
    confirms each λ over the float32 enclosures of the tables and of Lemma S's weights).
    Several layers: overwhelm_deep.margins (which dispatches here for one layer)."""
    tab = Tables(weights)
    best, entries, candidates = None, [], []
    for p in rule.positions(claim):
        q = _Query(tab, claim, p, rel)
        bound = q.margins()
        entries.append((p, q.hint))
        candidates += q.candidates
        m = int(np.argmax(bound))
        scale = 1.0 + float(np.abs(bound[np.isfinite(bound)]).max())
        if best is None or bound[m] / scale > best.worst / best.scale:
            best = FamilyMargin(float(bound[m]), scale, m, q.candidates[m] if q.candidates else ())
    best.hints = encode_hints(entries, claim)
    best.candidates = candidates
    return best
