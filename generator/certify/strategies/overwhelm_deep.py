"""Strategy overwhelm (several layers): the hints of rule overwhelm_family on
n_layers >= 2 (checker/rules/overwhelm_deep.py, spec/rules.md §overwhelm_family).

Mirrors the rule in float64 (untrusted), state by state and layer by layer, with
interval boxes as (lo, hi) arrays (midpoint-radius products):
  Layer.state            -> `_Layer.state`: q, k, vo of each state from its box
  Layer.weights          -> `_Layer.weights`: [w_lo, w_hi] per slot
  attention_box (Lemma R) -> `_bounds`: Dinkelbach over (token, weight end) options
  Layer.mlp              -> `_Layer.mlp`
  check_logits           -> `_margins`
The hinted λ's get SLACK; the checker recomputes everything rigorously.
"""

from __future__ import annotations

import math

import numpy as np

from checker.rules import overwhelm_deep as rule
from checker.statement import Overwhelm

from ...model import activation_np, family_weights, rope_angles
from .overwhelm_family import (
    SLACK,
    FamilyMargin,
    _box_mul,
    _ln_scale,
    family_margins,
    max_ratio,
    slack,
)

# argmin and minimum of the smooth activations (the range over an interval containing it)
_MINIMA = {"gelu": -0.7517916, "gelu_new": -0.7522, "gelu_fast": -0.7522, "silu": -1.2784645}


def _act_box(name: str, lo, hi):
    a, b = activation_np(name, lo), activation_np(name, hi)
    low, high = np.minimum(a, b), np.maximum(a, b)
    if name in _MINIMA:
        x = _MINIMA[name]
        inside = (lo <= x) & (x <= hi)
        low = np.where(inside, np.minimum(low, activation_np(name, np.array(x)) - 1e-6), low)
    return low, high


def _mul(a_lo, a_hi, b_lo, b_hi):
    c = np.stack([a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi])
    return c.min(0), c.max(0)


def reference(key_mids: np.ndarray) -> np.ndarray:
    """k_ref: the mean of the keys' midpoints, rounded to float32 (rule.reference)."""
    return key_mids.mean(0).astype(np.float32).astype(np.float64)


class _Layer:
    def __init__(self, w: dict, dims, layer: int, boxes: dict):
        f = dims.family
        self.w, self.dims, self.f, self.boxes = w, dims, f, boxes
        self.centre = f.normalization is not None
        self.b = f"blocks.{layer}."
        att = self.b + "attn."
        self.att = att
        self.w_o_c = [self.c_rows(w[att + "W_O"][j]) for j in range(f.n_heads)]
        self.b_o_c = self.c_vec(w[att + "b_O"])
        self.q, self.k, self.vo = {}, {}, {}
        self.too_wide = False  # a score the checker would refuse (rule.EXP_LIMIT)
        if f.positional == "rotary":
            ang = rope_angles(dims)
            self.cos, self.sin = np.cos(ang), np.sin(ang)

    def c_rows(self, mat):
        return mat - mat.mean(-1, keepdims=True) if self.centre else mat

    def c_vec(self, x):
        return x - x.mean() if self.centre else x

    def norm(self, which, lo, hi):
        f, w = self.f, self.w
        if f.normalization is None:
            return lo, hi
        e = (lo + hi) / 2
        low = float(_box_mul(lo, hi, e[:, None])[0][0])
        s_lo, s_hi = _ln_scale(lo, hi, f.ln_eps, e, low if low > 0 else None)
        y_lo, y_hi = _mul(lo, hi, np.full_like(lo, 1 / s_hi), np.full_like(lo, 1 / s_lo))
        if f.normalization == "LNPre":
            return y_lo, y_hi
        g, bias = w[self.b + which + ".w"], w[self.b + which + ".b"]
        mid, rad = (y_lo + y_hi) / 2 * g + bias, (y_hi - y_lo) / 2 * np.abs(g)
        return mid - rad, mid + rad

    def project(self, lo, hi, which, j, i):
        w = self.w
        y_lo, y_hi = _box_mul(lo, hi, w[self.att + "W_" + which][j])
        bias = w[self.att + "b_" + which][j]
        y_lo, y_hi = y_lo + bias, y_hi + bias
        if which != "V" and self.f.positional == "rotary":
            r = self.f.rotary_dim
            half = r // 2
            mid, rad = (y_lo + y_hi) / 2, (y_hi - y_lo) / 2
            c, s = self.cos[i], self.sin[i]
            m2, r2 = mid.copy(), rad.copy()
            m2[:half] = mid[:half] * c - mid[half:r] * s
            m2[half:r] = mid[half:r] * c + mid[:half] * s
            r2[:half] = rad[:half] * np.abs(c) + rad[half:r] * np.abs(s)
            r2[half:r] = rad[half:r] * np.abs(c) + rad[:half] * np.abs(s)
            y_lo, y_hi = m2 - r2, m2 + r2
        return y_lo, y_hi

    def state(self, i, u):
        if (i, u) in self.k:
            return
        lo, hi = self.norm("ln1", *self.boxes[(i, u)])
        nh = self.f.n_heads
        self.q[(i, u)] = [self.project(lo, hi, "Q", j, i) for j in range(nh)]
        self.k[(i, u)] = [self.project(lo, hi, "K", j, i) for j in range(nh)]
        self.vo[(i, u)] = [_box_mul(*self.project(lo, hi, "V", j, i), self.w_o_c[j])
                           for j in range(nh)]

    def weights(self, j, i, u, slots):
        """(keys [(i', u')], w_lo, w_hi) over the slots."""
        q_lo, q_hi = self.q[(i, u)][j]
        qm, qr = (q_lo + q_hi) / 2, (q_hi - q_lo) / 2
        keys = [(i2, u2) for i2, toks in enumerate(slots) for u2 in toks]
        k_lo = np.array([self.k[key][j][0] for key in keys])
        k_hi = np.array([self.k[key][j][1] for key in keys])
        km, kr = (k_lo + k_hi) / 2, (k_hi - k_lo) / 2
        km = km - reference(km)  # the shift q·k_ref: softmax is invariant to it
        mid = km @ qm
        rad = kr @ np.abs(qm) + np.abs(km) @ qr + kr @ qr
        scale = 1 / math.sqrt(self.dims.d_head)
        s_lo, s_hi = (mid - rad) * scale, (mid + rad) * scale
        # the checker shifts by the state's own score midpoint and refuses a score farther
        # than rule.EXP_LIMIT from it: such a state proves nothing (half the limit: margin)
        own = (s_lo[keys.index((i, u))] + s_hi[keys.index((i, u))]) / 2
        if not np.all(np.maximum(s_hi - own, own - s_lo) < rule.EXP_LIMIT / 2):
            self.too_wide = True
        shift = s_hi.max()  # any real (the ratio is shift-invariant): no overflow
        return keys, np.exp(s_lo - shift), np.exp(s_hi - shift)

    def mlp(self, lo, hi, before):
        f, w = self.f, self.w
        if not f.d_mlp:
            return lo, hi, None
        y_lo, y_hi = self.norm("ln2", *(before if f.parallel else (lo, hi)))
        mlp = self.b + "mlp."
        p_lo, p_hi = _box_mul(y_lo, y_hi, w[mlp + "W_in"])
        if f.gated_mlp:
            g_lo, g_hi = _act_box(f.act_fn, *_box_mul(y_lo, y_hi, w[mlp + "W_gate"]))
            h_lo, h_hi = _mul(g_lo, g_hi, p_lo, p_hi)
            h_lo, h_hi = h_lo + w[mlp + "b_in"], h_hi + w[mlp + "b_in"]
        else:
            h_lo, h_hi = _act_box(f.act_fn, p_lo + w[mlp + "b_in"], p_hi + w[mlp + "b_in"])
        o_lo, o_hi = _box_mul(h_lo, h_hi, self.c_rows(w[mlp + "W_out"]))
        b_out = self.c_vec(w[mlp + "b_out"])
        return lo + o_lo + b_out, hi + o_hi + b_out, (h_lo, h_hi)


def _options(keys, slots, w_lo, w_hi, y_hi):
    """Lemma R's options per position: (token, weight end) pairs, as (P, 2A) arrays
    W and Y (…, F) for max_ratio, padded by repeating the first option."""
    index = {key: n for n, key in enumerate(keys)}
    width = 2 * max(len(t) for t in slots)
    rows_w, rows_y, toks = [], [], []
    for i, tk in enumerate(slots):
        ids = [index[(i, u)] for u in tk]
        ws = [w_lo[n] for n in ids] + [w_hi[n] for n in ids]
        ys = [y_hi[n] for n in ids] * 2
        ts = list(tk) * 2
        pad = width - len(ws)
        rows_w.append(ws + [ws[0]] * pad)
        rows_y.append(ys + [ys[0]] * pad)
        toks.append(ts + [ts[0]] * pad)
    return np.array(rows_w), np.array(rows_y), np.array(toks)


def _bounds(keys, slots, w_lo, w_hi, y_lo, y_hi, upper_only=False, rel=SLACK):
    """Lemma R per functional: (λ_lo (F,) or None, λ_hi (F,), argmax tokens (P, F));
    rel: the relative slack of every λ (float32: larger, F32_SLACKS)."""
    scale = float(max(np.abs(y_lo).max(), np.abs(y_hi).max())) + 1e-12
    wt, yt, toks = _options(keys, slots, w_lo, w_hi, y_hi)
    top, pick = max_ratio(wt, yt)
    chosen = np.take_along_axis(toks, pick, axis=1)
    hi = np.where(np.isfinite(top), slack(top, scale, rel), 1e300)  # useless but valid if not
    if upper_only:
        return None, hi, chosen
    wt, yt, _ = _options(keys, slots, w_lo, w_hi, -y_lo)
    bot, _ = max_ratio(wt, yt)
    return np.where(np.isfinite(bot), -slack(bot, scale, rel), -1e300), hi, chosen


def _inflate(lo, hi, rel: float):
    """The box widened by rel·(|lo| + |hi| + their means) per coordinate (float32: above
    the checker's float32 widenings, γ_n·magnitudes ≈ 1e-6, so that the mirror's boxes
    contain the checker's and its λ bound the checker's maxima); unchanged for rel = 0."""
    if not rel:
        return lo, hi
    pad = rel * (np.abs(lo) + np.abs(hi) + np.abs(lo).mean() + np.abs(hi).mean())
    return lo - pad, hi + pad


def margins(weights, claim: Overwhelm, rel: float = SLACK) -> FamilyMargin:
    """The mirror of rule overwhelm_family at any depth (the rule dispatches the same way):
    overwhelm_family.family_margins on one layer, deep_margins on several.  rel > SLACK
    (float32, F32_SLACKS): the layers amplify a slack, so the deep mirror takes rel/100 as
    its λ slack and inflates every box by as much (above the checker's float32 widenings,
    ~1e-6 relative: _inflate)."""
    from ...model import family_weights

    if family_weights(weights).dims.family.n_layers == 1:
        return family_margins(weights, claim, rel)
    if rel > SLACK:
        return deep_margins(weights, claim, rel / 100, rel / 100)
    return deep_margins(weights, claim, rel)


def deep_margins(weights, claim: Overwhelm, rel: float = SLACK,
                 inflate: float = 0.0) -> FamilyMargin:
    """Mirror of overwhelm_deep.check: the worst bound over positions and m (+inf when
    a box overflows: not proved; the hints then stay finite, for forced certificates).
    rel: the relative slack of every λ (float32, rule overwhelm_deep_float32: F32_SLACKS,
    since the checker confirms each λ over the wider float32 boxes); inflate: the relative
    widening of every box (`_inflate`; float32)."""
    with np.errstate(all="ignore"):
        return _deep_margins(weights, claim, rel, inflate)


def _finite(x):
    return np.nan_to_num(x, nan=0.0, posinf=1e300, neginf=-1e300)


def _deep_margins(weights, claim: Overwhelm, rel: float = SLACK,
                  inflate: float = 0.0) -> FamilyMargin:
    fw = family_weights(weights)
    dims, f = fw.dims, fw.dims.family
    w = {k: a.astype(np.float64) for k, a in fw.params.items()}
    centre = f.normalization is not None
    sets, last, qs = rule.token_sets(dims, claim), f.n_layers - 1, rule.positions(claim)
    s = len(claim.prefix)
    boxes = {}
    for i, toks in enumerate(sets):
        for u in toks:
            x = w["embed.W_E"][u] + (w["pos_embed.W_pos"][i] if f.positional == "standard"
                                     else 0)
            x = x - x.mean() if centre else x
            boxes[(i, u)] = _inflate(x.copy(), x.copy(), inflate)
    box_hints, diff_hints, candidates, best, wide = [], [], [], None, False
    o, v, d = claim.output, dims.d_vocab, dims.d_model
    for index in range(f.n_layers):
        layer = _Layer(w, dims, index, boxes)
        states = [(i, u) for i, toks in enumerate(sets) for u in toks] if index < last \
            else [(p, claim.query) for p in qs]
        new = {}
        for i, u in states:
            slots = rule.attended(dims, claim, i, u)
            for i2, toks in enumerate(slots):
                for u2 in toks:
                    layer.state(i2, u2)
            lo, hi = boxes[(i, u)]
            lo, hi = lo + layer.b_o_c, hi + layer.b_o_c
            hint = np.zeros((f.n_heads, d, 2))
            heads = []
            for j in range(f.n_heads):
                keys, w_lo, w_hi = layer.weights(j, i, u, slots)
                heads.append((keys, w_lo, w_hi))
                vo_lo = np.array([layer.vo[key][j][0] for key in keys])
                vo_hi = np.array([layer.vo[key][j][1] for key in keys])
                b_lo, b_hi, _ = _bounds(keys, slots, w_lo, w_hi, vo_lo, vo_hi, rel=rel)
                hint[j, :, 0], hint[j, :, 1] = b_lo, b_hi
                lo, hi = lo + b_lo, hi + b_hi
            lo, hi = _inflate(lo, hi, inflate)  # float32: the checker widens r_c
            box_hints.append(((index, i, u), hint))
            f_lo, f_hi, hidden = layer.mlp(lo, hi, boxes[(i, u)])
            f_lo, f_hi = _inflate(f_lo, f_hi, inflate)
            new[(i, u)] = (f_lo, f_hi)
            if index < last:
                continue
            # the logit differences at query position i
            base_lo, base_hi = boxes[(i, u)]
            base_lo, base_hi = base_lo + layer.b_o_c, base_hi + layer.b_o_c
            w_u = w["unembed.W_U"]
            d_u = w_u - w_u[:, o:o + 1]
            w_f = w["ln_final.w"] if f.normalization == "LN" else np.ones(d)
            b_f = w["ln_final.b"] if f.normalization == "LN" else np.zeros(d)
            g = w_f[:, None] * d_u
            numer = _box_mul(base_lo, base_hi, g)[1]
            diff = np.zeros((f.n_heads, v))
            cand = []
            for j, (keys, w_lo, w_hi) in enumerate(heads):
                vo_lo = np.array([layer.vo[key][j][0] for key in keys])
                vo_hi = np.array([layer.vo[key][j][1] for key in keys])
                y_lo, y_hi = _box_mul(vo_lo, vo_hi, g)
                _, top, chosen = _bounds(keys, slots, w_lo, w_hi, y_lo, y_hi, upper_only=True,
                                         rel=rel)
                diff[j] = top
                numer = numer + top
                cand.append(chosen)
            diff_hints.append((i, diff))
            if hidden is not None:
                w_out_c = layer.c_rows(w[layer.b + "mlp.W_out"])
                numer = numer + _box_mul(*hidden, w_out_c @ g)[1] \
                    + layer.c_vec(w[layer.b + "mlp.b_out"]) @ g
            s_lo, s_hi = 1.0, 1.0
            if centre:
                e = (f_lo + f_hi) / 2
                low = float(_box_mul(f_lo, f_hi, e[:, None])[0][0])
                s_lo, s_hi = _ln_scale(f_lo, f_hi, f.ln_eps, e, low if low > 0 else None)
            bound = np.where(numer >= 0, numer / s_lo, numer / s_hi) + b_f @ d_u \
                + w["unembed.b_U"] - w["unembed.b_U"][o]
            bound[o] = -np.inf
            bound = _finite(np.where(np.isnan(bound), np.inf, bound))  # JSON: finite
            bound[o] = -np.inf
            m = int(np.argmax(bound))
            scale = 1.0 + float(np.abs(bound[np.isfinite(bound)]).max())
            for chosen in cand:
                candidates += [tuple(int(x) for x in chosen[s:i, c]) for c in range(v) if c != o]
            completion = tuple(int(x) for x in cand[0][s:i, m]) if cand else ()
            if best is None or bound[m] / scale > best.worst / best.scale:
                best = FamilyMargin(float(bound[m]), scale, m, completion)
        boxes = new
        wide = wide or layer.too_wide
    if wide:  # the checker would refuse a score's enclosure: not proved (finite for JSON)
        best.worst = 1e300
    best.hints = encode_hints(box_hints, diff_hints)
    best.candidates = candidates
    return best


def encode_hints(box_hints: list, diff_hints: list) -> dict:
    from ..trace import b64

    return {"boxes": [[*state, b64(_finite(hint), "<f8")] for state, hint in box_hints],
            "diff": [[p, b64(_finite(diff), "<f8")] for p, diff in diff_hints]}
