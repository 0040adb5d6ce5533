"""Rule overwhelm_family on several layers under the float32 semantics (spec/rules.md
§overwhelm_family, float32 on several layers: Lemma W-deep; issue 24).

The several-layer rule (overwhelm_deep.py: Algorithm 1 layer after layer over the
per-(position, token) state boxes) with every quantity a float32 execution of
spec/theorem.md §2c computes replaced by an enclosure of it, and every identity the real
rule uses made exact again by an explicit error term.  Invariant (the boxes lemma, float):
for every layer l, state (i, u), sequence it stands for and float32 execution,

    c(x̃^l) ∈ X_l(i, u)   and   |x̃^l| ≤ R_l(i, u)   (entrywise, binary64 upper bounds),

x̃^l the float residual stream after layer l at the state's position (c the centring when
the family normalises, the identity otherwise).  X_{−1} = c(fl(E[u] + P[i])) over the
float embedding's enclosure (rotary: E[u], exact), R_{−1} its magnitude.

Layer l at state (i, u) (n = i + 1 attended positions):
 1. float norm over a box (`float_norm`, Lemma LN-float): the float mean is within
    Eμ = mean_error(d, Σ R) of the real one, c̃ = fl(x̃ − μ̂) in X ± Ec, Ec = Eμ(1+u) + u|c|;
    the mean of squares, σ̃ = sqrt(fl(v̂ + ε̃)) (norm_scale; Lemma LN over the box of c̃,
    its midpoint as direction), ñ = c̃/σ̃·(1 + θ) ± η, ỹ = fl(ñ w + b): an enclosure of ỹ
    (LNPre: ñ; no normalisation: x̃'s box itself).
 2. q̃, k̃, ṽ: float32.affine over that enclosure (γ_{d+1}), RoPE with tables within τ
    of the exact cos/sin (2-term dot products); vo = ṽ·c_rows(W_O[j]) (exact intervals).
 3. weights: the float score s̃ lies in c·q̂·k̂ ± score_error; minus the real
    c·q̃·k_ref (one real per sequence and execution) and the state's shift, it lies in
    c·q̂·(k̂ − k_ref) − shift ± score_error; Lemma S: ã = (w/Σw)(1 + φ) + ν with
    w ∈ exp(that)·[1 − ρ, 1 + 2ρ]·[1 ∓ 8u], ρ = 2u·max|s̃|, |φ| ≤ γ_{n+1}, |ν| ≤ ν_n.
 4. Lemma W-family: Σ ã y ≤ λ + spread·M (λ confirmed by Lemma R with the interval
    weights, M ≥ max |y| over the slots, spread = γ_{n+1} + nν); the float sums
    z̃_j = fl(Σ ã ṽ) (Rz_j = γ_n(1 + spread)V_j + nη) and r̃ = fl(x̃ + b_O + Σ_j z̃_j W_O[j])
    (one sum of Hh + 2 terms, Rr = γ_{Hh+2}·T + (Hh+2)η, T = R + |b_O| + Σ_j Z_j|W_O[j]|):
    coordinate k of c(r̃) lies in X_k + c(b_O)_k + Σ_j [λ_lo, λ_hi] widened by
    E(e_k) = Σ_j [spread·M_j + Rz_j·|c_rows(W_O[j])[:, k]|] + Rr·|c(e_k)|; |r̃| ≤ T + Rr.
 5. MLP (sequential: reads r̃; parallel: x̃): the float norm of step 1, float32.affine,
    the activation (ReLU exact, otherwise within its ulps), the gate's product (one
    2-term sum with b_in); r̃' = fl(r̃ + h̃W_out + b_out), one sum of d_mlp + 2 terms
    (Rr2): X_l = r_c + h̃·c_rows(W_out) + c(b_out) widened by Rr2_k + mean(Rr2)
    (Rr2_k without centring); R_l = |r̃| + |b_out| + |h̃||W_out| + Rr2.
Last layer, at the query states (p, q): the final float norm (σ̂_f, ŷ_f, its deviation D),
and for every m ≠ o, with N̄ = upper((X_{L−2} + c(b_O))·g_m) + Σ_j diff[j][m] + E(g_m)
+ upper(h̃·c_rows(W_out)g_m + c(b_out)·g_m) + Rr2·|c(g_m)| ≥ c(r̃')·g_m:
    ⌈N̄/σ̂_f⌉ + ⌈b_f·D_m + Δb_U⌉ + D·|D_m| + e_m + e_o < 0,  e_t the unembedding's rounding.
The hints are the real rule's ({"boxes", "diff"}); free claims only (permutation claims
refused by name), or a product claim (rule family_gap's classes on several layers: its states
and attended slots from overwhelm_deep's dispatch; returns "" for its caller's note).
Cost: overwhelm_deep.cost plus `extra_cost` (the widenings), charged before the work; mpmath
only (whatever --arith).
"""

from __future__ import annotations

import math

from mpmath import iv
from mpmath.libmp import from_float, to_float

from .. import float32 as fp
from .. import ops
from ..elementary import sqrt_interval, square_interval
from ..errors import Rejected
from ..numbers import below_zero, exp_interval, up_add, upper
from . import forward_model
from . import overwhelm_deep as deep
from .overwhelm_deep import positions  # a product claim's too (family_gap)
from .overwhelm_family_bounds import _upper_ratio, alphabet, centred, centred_rows, dot

U = float(fp.U)


def _plus(raw, x: float):
    """An upper bound of (≤ raw) + x for a binary64 x (exact conversion)."""
    return up_add(raw, from_float(x))


def centred_mags(a: list, centre: bool) -> list:
    """|c(a)| entrywise as binary64 upper bounds (c(a) = a − mean(a); |a| without centring)."""
    a = [iv.mpf(x) for x in a]
    if not centre:
        return fp.mags(a)
    mean = iv.fsum(a) / len(a)
    return fp.mags([x - mean for x in a])


class FloatNorm:
    """Step 1: a float32 LayerNorm / LNPre of x̃ with c(x̃) in `box`, |x̃| ≤ r_mag
    (binary64).  Fields: sigma (σ̂ ∋ σ̃), y (the enclosure of ỹ), dev (D_i ≥
    |ỹ_i − (c_i/σ̃)w_i − b_i|, c = c(x̃)), ec (Ec_i ≥ |c̃_i − c_i|)."""

    def __init__(self, box: list, r_mag: list, eps: float, w, b):
        d = len(box)
        e_mu = fp.mean_error(d, fp.abs_sum(r_mag))
        self.ec = [fp._up(fp._up(e_mu * (1 + 2.0 ** -23)) + fp._up(U * fp.mag(c))) for c in box]
        bt = [fp.widen(c, err) for c, err in zip(box, self.ec)]  # c̃ = fl(x̃ − μ̂)
        sq = [square_interval(c) for c in bt]
        lo_sum, hi_sum = iv.fsum(sq).a, iv.fsum(sq).b
        e = [float(c.mid) for c in bt]  # Lemma LN's direction: the box's midpoint
        if all(math.isfinite(x) for x in e):
            low = dot(bt, [iv.mpf(x) for x in e]).a  # c̃·e ≥ low for every c̃ in the box
            e_norm = iv.fsum(iv.mpf(x) * iv.mpf(x) for x in e)
            if low > 0 and e_norm.a > 0:
                lo_sum = max(lo_sum, (iv.mpf(low) ** 2 / e_norm).a)  # Cauchy–Schwarz
        if lo_sum > hi_sum:  # rounding only (Cauchy–Schwarz over the same box): fail closed
            raise Rejected("overwhelm_family (float32): the LayerNorm bounds contradict the box")
        bm = fp.mags(bt)
        self.ms_err = fp.mean_error(d, fp._abs_dot(bm, bm))  # the float mean of squares
        ms = fp.widen(iv.mpf((lo_sum, hi_sum)) / d, self.ms_err)
        self.sigma = fp.norm_scale(ms, eps, sqrt_interval)
        if not self.sigma.a > 0:
            raise Rejected("overwhelm_family (float32): a LayerNorm scale enclosure reaches 0")
        inv = fp._up(1.0 / math.nextafter(float(self.sigma.a), -math.inf))
        g8 = fp.gamma(fp.NORM_FACTORS)
        n_box = self.n_box = [fp.relative(c / self.sigma, g8, fp.ETA) for c in bt]
        if w is None:  # LNPre
            self.y = n_box
            wm, e_y = [1.0] * d, [0.0] * d
        else:
            wm, bmag = fp.mags(w), fp.mags(b)
            self.y = fp.scale_shift(n_box, zip(w, b, wm, bmag))
            e_y = [fp.dot_error(2, fp._up(fp._up(fp.mag(n) * a) + c))
                   for n, a, c in zip(n_box, wm, bmag)]
        # |ỹ_i − (c_i/σ̃)w_i − b_i| ≤ e_y + |w_i|(γ_8|c̃_i|/σ̃ + η + Ec_i/σ̃)
        self.dev = [fp.abs_sum([ey, fp._up(a * fp.abs_sum([fp._up(fp._up(g8 * m) * inv),
                                                             fp.ETA, fp._up(ec * inv)]))])
                    for ey, a, m, ec in zip(e_y, wm, bm, self.ec)]


def _rotate(x: list, cos_row: list, sin_row: list, rotary_dim: int, tau) -> list:
    """Rotate-half RoPE in float32 with tables within τ of the exact cos/sin
    (forward_float32.Float32Model.rotate): each output a 2-term dot product."""
    half, tau = rotary_dim // 2, iv.mpf((-tau, tau))
    out = list(x)
    for j in range(half):
        a, b = x[j], x[j + half]
        c, s = cos_row[j] + tau, sin_row[j] + tau
        am, bm, cm, sm = fp.mag(a), fp.mag(b), fp.mag(c), fp.mag(s)
        out[j] = fp.widen(a * c - b * s, fp.dot_error(2, fp._up(fp._up(am * cm)
                                                                + fp._up(bm * sm))))
        out[j + half] = fp.widen(b * c + a * s, fp.dot_error(2, fp._up(fp._up(bm * cm)
                                                                        + fp._up(am * sm))))
    return out


class Layer(deep.Layer):
    """Layer l's per-state float enclosures: q̂, k̂ (rotated), |ṽ| and vo = v̂·c_rows(W_O[j]),
    from the boxes X_{l−1} and the magnitudes R_{l−1} (`mags`)."""

    def __init__(self, dims, m, layer: int, boxes: dict, mags: dict, charge, log=None):
        super().__init__(dims, m, layer, boxes, charge)
        self.mags = mags
        self.log = log  # tests: the norms, values and score bounds, by state
        self.tau = fp.rope_tolerance(dims.n_ctx)
        self.v_mag, self._cols = {}, {}
        h = dims.d_head
        w_o = m[self.name("W_O")]
        self.wo_mag = [[fp.mags(r) for r in w_o[j * h:(j + 1) * h]] for j in range(self.f.n_heads)]
        self.cwo_mag = [[fp.mags(r) for r in rows] for rows in self.w_o_c]

    def cols(self, key: str, rows: list) -> list:
        """|W| by columns (binary64, rounded up), memoised per weight."""
        if key not in self._cols:
            self._cols[key] = [list(c) for c in zip(*(fp.mags(r) for r in rows))]
        return self._cols[key]

    def affine(self, x: list, key: str, rows: list, bias=None) -> list:
        """float32 x·W (+ b): the real product over the enclosure x, widened (Lemma F)."""
        real = forward_model._vecmat(x, rows, self.tick)
        bias_mag = None
        if bias is not None:
            real, bias_mag = forward_model._add(real, bias), fp.mags(bias)
        return fp.affine(x, real, self.cols(key, rows), bias_mag)

    def norm_f32(self, which: str, box: list, r_mag: list, where=None):
        """Step 1: (the enclosure of the float norm's output, FloatNorm or None)."""
        f = self.f
        if f.normalization is None:
            return box, None
        w = b = None
        if f.normalization == "LN":
            w, b = self.m[self.name(which + ".w")][0], self.m[self.name(which + ".b")][0]
        fn = FloatNorm(box, r_mag, f.ln_eps, w, b)
        if self.log is not None:
            self.log[(which, *where)] = fn
        return fn.y, fn

    def project(self, x: list, which: str, j: int, i: int) -> list:
        d, m = self.dims.d_model, self.m
        key = self.name("W_" + which)
        y = self.affine(x, f"{key}[{j}]", m[key][j * d:(j + 1) * d], m[self.name("b_" + which)][j])
        if which != "V" and self.f.positional == "rotary":
            y = _rotate(y, m["ROPE_COS"][i], m["ROPE_SIN"][i], self.f.rotary_dim, self.tau)
        return y

    def state(self, i: int, u: int) -> None:
        """Steps 1-2 at state (i, u) (memoised)."""
        if (i, u) in self.k:
            return
        self.tick()
        x, _ = self.norm_f32("ln1", self.boxes[(i, u)], self.mags[(i, u)], (i, u))
        nh = self.f.n_heads
        self.q[(i, u)] = [self.project(x, "Q", j, i) for j in range(nh)]
        self.k[(i, u)] = [self.project(x, "K", j, i) for j in range(nh)]
        vals = [self.project(x, "V", j, i) for j in range(nh)]
        if self.log is not None:
            self.log[("V", i, u)] = vals
        self.v_mag[(i, u)] = [fp.mags(v) for v in vals]
        self.vo[(i, u)] = [forward_model._vecmat(v, self.w_o_c[j], self.tick)
                           for j, v in enumerate(vals)]

    def weights(self, j: int, i: int, u: int, slots: list) -> dict:
        """Step 3: Lemma S's interval weights of head j at state (i, u) over the slots."""
        q = self.q[(i, u)][j]
        h = self.dims.d_head
        qm, scale_mag = fp.mags(q), fp.mag(self.scale)
        keys = [(i2, u2) for i2, toks in enumerate(slots) for u2 in toks]
        ref = deep.reference([self.k[key][j] for key in keys])
        shifted = [[a - b for a, b in zip(self.k[key][j], ref)] for key in keys]
        row = ops.matmul([q], ops.transpose(shifted), self.tick)[0]
        scores, top, errs = {}, 0.0, {}
        for key, s in zip(keys, row):
            km = fp.mags(self.k[key][j])
            err = errs[key] = fp.score_error(h, scale_mag, qm, km)
            scores[key] = fp.widen(s * self.scale, err)
            # |s̃| ≤ c·Σ|q̂||k̂| + err (the unshifted float score)
            top = max(top, fp._up(fp._up(fp._abs_dot(qm, km) * scale_mag * (1 + 2.0 ** -50))
                                  + err))
        rho = fp._up(2 * U * top)
        if rho > 0.5:
            raise fp.Overflow("float32: an attention score too large for the softmax error "
                              "model (|s| > 2^22)")
        factor = iv.mpf((1 - rho, 1 + 2 * rho)) * fp.exp_factor()
        shift = iv.mpf(scores[(i, u)].mid)  # any real: softmax is shift-invariant
        if self.log is not None:
            self.log[("scores", i, u, j)] = (errs, factor)
        out = {}
        for key, s in scores.items():
            if abs(s - shift).b > deep.EXP_LIMIT:
                raise Rejected(f"overwhelm_family: at layer {self.layer}, state ({i}, {u}), "
                               f"head {j}, an attention score's enclosure is wider than "
                               f"{deep.EXP_LIMIT} (the boxes are too loose)")
            out[key] = exp_interval(s - shift) * factor
        return out

    def errors(self, i: int, u: int, slots: list, x_mag: list) -> dict:
        """Step 4's error terms at state (i, u): spread, Rz_j, Rr and |r̃| ≤ T + Rr."""
        f, h, d = self.f, self.dims.d_head, self.dims.d_model
        n = i + 1
        nu = (32 * n + 32) * fp.ETA
        spread = fp._up(fp.gamma(n + 1) + fp._up(n * nu))  # γ_{n+1} + nν
        one = fp._up(1 + spread)
        rz, z_mag = [], []
        for j in range(f.n_heads):
            v_mag = [0.0] * h
            for i2, toks in enumerate(slots):
                for u2 in toks:
                    v_mag = [max(a, b) for a, b in zip(v_mag, self.v_mag[(i2, u2)][j])]
            r = [fp.dot_error(n, fp._up(v * one)) for v in v_mag]
            rz.append(r)
            z_mag.append([fp._up(fp._up(v * one) + e) for v, e in zip(v_mag, r)])
        b_o = fp.mags(self.m[self.name("b_O")][0])
        sums = []
        for c in range(d):
            s = fp._up(x_mag[c] + b_o[c])
            for j in range(f.n_heads):
                s = fp._up(s + fp._abs_dot(z_mag[j], [row[c] for row in self.wo_mag[j]]))
            sums.append(s)
        rr = [fp.dot_error(f.n_heads * h + 2, s) for s in sums]
        return {"spread": spread, "rz": rz, "rr": rr, "T": sums,
                "r_mag": [fp._up(s + e) for s, e in zip(sums, rr)]}

    def widening(self, err: dict, a: list, ys: list) -> float:
        """E(a) = Σ_j [spread·M_j + Rz_j·|c_rows(W_O[j])||a|] + Rr·|c(a)|, ys[j] the
        values y_j(i', u') = vo_j·a over the slots (M_j = their largest magnitude)."""
        am = fp.mags([iv.mpf(x) for x in a])
        total = fp._abs_dot(err["rr"], centred_mags(a, self.centre))
        for j, y in enumerate(ys):
            m = max(fp.mag(x) for x in y)
            cwo_a = [fp._abs_dot(row, am) for row in self.cwo_mag[j]]
            total = fp._up(total + fp._up(err["spread"] * m) + fp._abs_dot(err["rz"][j], cwo_a))
        return total

    def mlp_f32(self, r_c: list, r_mag: list, before: list, before_mag: list, where=None):
        """Step 5: (X_l, R_l, the hidden layer's enclosure or None, Rr2)."""
        f, m, d = self.f, self.m, self.dims.d_model
        if not f.d_mlp:
            return r_c, r_mag, None, [0.0] * d
        y, _ = self.norm_f32("ln2", before if f.parallel else r_c,
                             before_mag if f.parallel else r_mag, where)
        if f.gated_mlp:
            gate_pre = self.affine(y, self.name("W_gate"), m[self.name("W_gate")])
            gate = self.act(gate_pre)
            pre = self.affine(y, self.name("W_in"), m[self.name("W_in")])
            b = m[self.name("b_in")][0]
            hidden = fp.scale_shift(gate, zip(pre, b, fp.mags(pre), fp.mags(b)))
        else:
            pre = gate = None
            gate_pre = self.affine(y, self.name("W_in"), m[self.name("W_in")],
                                   m[self.name("b_in")][0])
            hidden = self.act(gate_pre)
        if self.log is not None:
            self.log[("mlp", *where)] = dict(y=y, act_in=gate_pre, gate=gate, pre=pre,
                                             hidden=hidden)
        w_out, b_out = m[self.name("W_out")], m[self.name("b_out")][0]
        hm, bo = fp.mags(hidden), fp.mags(b_out)
        cols = self.cols(self.name("W_out"), w_out)
        sums = [fp._up(fp._up(r_mag[c] + bo[c]) + fp._abs_dot(hm, cols[c])) for c in range(d)]
        rr2 = [fp.dot_error(f.d_mlp + 2, s) for s in sums]
        self.last_sums = sums  # the tests
        mean_rr2 = fp._up(fp.abs_sum(rr2) / d) if self.centre else 0.0
        real = forward_model._add(forward_model._add(
            r_c, forward_model._vecmat(hidden, centred_rows(w_out, self.centre), self.tick)),
            centred(b_out, self.centre))
        box = [fp.widen(x, fp._up(e + mean_rr2)) for x, e in zip(real, rr2)]
        return box, [fp._up(s + e) for s, e in zip(sums, rr2)], hidden, rr2

    def act(self, x: list) -> list:
        real = forward_model.activate(self.f.act_fn, x, self.charge)
        return real if self.f.act_fn == "relu" else fp.activation(real, x)


def attention_box(layer: Layer, i: int, u: int, slots: list, hint: list, record=None,
                  confirm_by=None):
    """Steps 3-4 at state (i, u): (the box of c(r̃), |r̃| bound, per-head weights, errors).
    confirm_by: deep.confirm (None) or, for the distance note only, deep.derive."""
    confirm = deep.confirm if confirm_by is None else confirm_by
    err = layer.errors(i, u, slots, layer.mags[(i, u)])
    r_c = forward_model._add(layer.boxes[(i, u)], layer.b_o_c)
    d = layer.dims.d_model
    heads = [layer.weights(j, i, u, slots) for j in range(layer.f.n_heads)]
    keys = [(i2, u2) for i2, toks in enumerate(slots) for u2 in toks]
    widenings = []
    for k in range(d):
        for j, w in enumerate(heads):
            layer.tick()  # the clock, at every bound
            z = confirm(w, lambda a, b, j=j, k=k: layer.vo[(a, b)][j][k], slots,
                             hint[j][k][0], hint[j][k][1],
                             f"box coordinate {k}, head {j}, layer {layer.layer}, state "
                             f"({i}, {u})")
            r_c[k] = r_c[k] + z
        e = [0.0] * d
        e[k] = 1.0
        ys = [[layer.vo[key][j][k] for key in keys] for j in range(len(heads))]
        widenings.append(layer.widening(err, e, ys))
        r_c[k] = fp.widen(r_c[k], widenings[-1])
    if record is not None:
        record.update(err=err, widenings=widenings)
    return r_c, heads, err


def check_logits(dims, m, layer: Layer, claim, p: int, heads: list, err: dict, final: list,
                 final_mag: list, hidden, rr2: list, diff: list, record=None,
                 confirm_by=None) -> None:
    """The last step at query position p in float32: every ℓ̃_m − ℓ̃_o < 0.  record (tests,
    the distance note): the parts of each logit's bound, filled as they are computed."""
    f, o, v, d, centre = dims.family, claim.output, dims.d_vocab, dims.d_model, layer.centre
    slots = deep.attended(dims, claim, p, claim.query)
    base = forward_model._add(layer.boxes[(p, claim.query)], layer.b_o_c)
    sigma, y_f, dev = iv.mpf(1), final, [0.0] * d
    w_f = b_f = None
    if centre:
        if f.normalization == "LN":
            w_f, b_f = m["ln_final.w"][0], m["ln_final.b"][0]
        fn = FloatNorm(final, final_mag, f.ln_eps, w_f, b_f)
        sigma, y_f, dev = fn.sigma, fn.y, fn.dev
        if record is not None:
            record.update(final_norm=fn)
    w_out_c = centred_rows(m[layer.name("W_out")], centre) if hidden else None
    b_out_c = centred(m[layer.name("b_out")][0], centre) if hidden else None
    d_u, gs, keys, ys = deep.logit_directions(m, layer, slots, len(heads), o, w_f)
    yfm, b_u = fp.mags(y_f), fp.mags(m["b_U"][0])
    u_cols = [fp.mags([row[t] for row in m["W_U"]]) for t in range(v)]

    def unembed_err(t):  # the rounding of ℓ̃_t = fl(ỹ_f·U[:, t] + b_U[t])
        return fp.dot_error(d + 1, fp._up(fp._abs_dot(yfm, u_cols[t]) + b_u[t]))

    e_o = unembed_err(o)
    parts = {}
    if record is not None:
        record.update(parts=parts)
    for t in range(v):
        if t == o:
            continue
        d_t, g = d_u[t], gs[t]
        numer = deep.attention_mlp_numerator(layer, heads, ys, slots, diff, base, g, t, p,
                                             hidden, w_out_c, b_out_c, confirm_by)
        real_numer = numer  # the real rule's N̄ over the float enclosures
        e_g = layer.widening(err, g, [[ys[j][key][t] for key in keys]
                                      for j in range(len(heads))])
        numer = _plus(numer, e_g)
        rr2_g = fp._abs_dot(rr2, centred_mags(g, centre))
        numer = _plus(numer, rr2_g)
        const = m["b_U"][0][t] - m["b_U"][0][o]
        if b_f is not None:
            const = const + dot(d_t, b_f)
        unemb = fp._up(unembed_err(t) + e_o)
        dev_t = fp._abs_dot(dev, fp.mags(d_t))
        slack = fp._up(dev_t + unemb)
        parts[t] = {"E": e_g, "rr2": rr2_g, "unembed": unemb, "dev": dev_t, "slack": slack,
                    "added": to_float(numer) - to_float(real_numer)}
        bound = _plus(up_add(_upper_ratio(numer, sigma), upper(const)), slack)
        parts[t]["bound"] = to_float(bound)  # the distance note's (overwhelm_deep)
        if not below_zero(bound):
            raise Rejected(f"overwhelm_family (float32): at query position {p}, the bound on "
                           f"logit {t} − logit {o} is not negative")


def extra_cost(dims, claim) -> int:
    """The float32 widenings beyond overwhelm_deep.cost: per layer and state, per head and
    coordinate M_j over the slots and Rz_j·|c_rows(W_O[j])||e_k| (slots + h·d), the score
    bounds (slots·h) and the error sums (d·H·h); per query the v functionals' widenings
    and the final norm and unembedding bounds (v·(H·(slots + h·d) + 2d))."""
    f, d, h, v = dims.family, dims.d_model, dims.d_head, dims.d_vocab
    n_states = sum(len(t) for t in deep.token_sets(dims, claim))
    # the widest attention, at the last query position: prefix + |A| per free position + 1
    # (a product claim: Σ_i |sets[i]| + 1), as overwhelm_deep.cost
    slots = sum(len(t) for t in deep.attended(dims, claim, max(positions(claim)), claim.query))
    per_state = f.n_heads * (d * (slots + h * d) + slots * 2 * h + 2 * d * h) + 10 * d * d
    final = len(positions(claim)) * v * (f.n_heads * (slots + h * d) + 4 * d)
    return f.n_layers * n_states * per_state + final


def check(dims, m, claim, hints, charge, record: dict | None = None, confirm_by=None) -> str:
    """Confirm the float32 claim on a model with several layers; raise Rejected otherwise.
    `record` (tests, the note) receives, per (l, i, u), the box, the magnitude bound and the
    error terms, and per query position the logit parts.  confirm_by: deep.confirm (None) or, for
    the real rule's distance note only (`distance_note`), deep.derive."""
    from ..certificate import hold

    f = dims.family
    if claim.free_perm is not None:
        raise Rejected("overwhelm_family, semantics == float32: permutation claims on several "
                       "layers are not supported (the real rule refuses them too)")
    boxes_hint, diffs = deep.parse_hints(hints, dims, claim, charge)
    charge(deep.cost(dims, claim) + extra_cost(dims, claim))
    hold(charge, 2 * deep.elements(dims, claim), "layer boxes")
    sets, last = deep.token_sets(dims, claim), f.n_layers - 1
    centre = f.normalization is not None
    boxes, mags = {}, {}
    for i, toks in enumerate(sets):
        for u in toks:
            charge(0)
            x = list(m["W_E"][u]) if f.positional == "rotary" else fp.add(m["W_E"][u],
                                                                          m["W_pos"][i])
            boxes[(i, u)] = centred(x, centre)
            mags[(i, u)] = fp.mags(x)
    qs = positions(claim)
    for index in range(f.n_layers):
        log = {} if record is not None else None
        layer = Layer(dims, m, index, boxes, mags, charge, log)
        states = [(i, u) for i, toks in enumerate(sets) for u in toks] if index < last \
            else [(p, claim.query) for p in qs]
        new, new_mags = {}, {}
        for i, u in states:
            slots = deep.attended(dims, claim, i, u)
            for i2, toks in enumerate(slots):
                for u2 in toks:
                    layer.state(i2, u2)
            rec = {} if record is not None else None
            r_c, heads, err = attention_box(layer, i, u, slots, boxes_hint[(index, i, u)], rec,
                                            confirm_by)
            box, mag, hidden, rr2 = layer.mlp_f32(r_c, err["r_mag"], boxes[(i, u)],
                                                  mags[(i, u)], (i, u))
            new[(i, u)], new_mags[(i, u)] = box, mag
            if rec is not None:
                rec.update(box=box, mag=mag, r_c=r_c, rr2=rr2, hidden=hidden,
                           sums=getattr(layer, "last_sums", None))
                record[(index, i, u)] = rec
            if index == last:
                check_logits(dims, m, layer, claim, i, heads, err, box, mag, hidden, rr2,
                             diffs[i], rec, confirm_by)
        if record is not None:
            record[("layer", index)] = layer
        boxes, mags = new, new_mags
    if isinstance(claim, deep.ProductClaim):  # family_gap's class: its caller writes the note
        return ""
    n = deep.completions(dims, claim)
    return (f"output {claim.output} forced at {len(qs)} length(s), {len(alphabet(dims, claim))} "
            f"free token(s) ({n} completions), {f.n_heads} head(s), {f.n_layers} layers "
            "(boxes layer after layer; float32 semantics: every box widened by its float32 "
            "error, Lemma W-deep; evaluated with mpmath)")


def distance_note(dims, m, claim, hints, charge, smallest) -> str:
    """The note's float32 error on several layers (spec/rules.md §distance to float32;
    reports only, never a verdict): this rule run with the clock alone
    (rules/notes.py `attempt`: no work charged, a failure named), every Lemma R bound the
    real hints give that its float32 tables do not confirm replaced by one they do (`deep.derive`:
    the real hints are tight for the real model, and a float32 box is wider), and at the
    smallest slack's place (p, t) the difference of its bound on ℓ̃_t − ℓ̃_o (every float32
    execution) and this rule's on ℓ_t − ℓ_o: what the float32 semantics costs there."""
    from . import notes

    slack, p, t = smallest
    last = dims.family.n_layers - 1

    def compute(clock) -> str:
        record: dict = {}
        try:
            check(dims, m, claim, hints, clock, record=record, confirm_by=deep.derive)
        except Rejected as err:
            if "is not negative" not in str(err):
                raise
        parts = record.get((last, p, claim.query), {}).get("parts", {})
        if t not in parts:  # the float32 bound failed before reaching (p, t)
            return ("; its float32 error: the float32 rule's bound is not negative at another "
                    "logit (no float32 theorem from these boxes)")
        bound = parts[t]["bound"]
        return (f", float32 error {bound + slack:.3g} there (overwhelm_deep_float32 with its "
                f"Lemma R bounds confirmed afresh: ℓ̃_o − ℓ̃_t ≥ {-bound:.3g} for every "
                "float32 execution)")

    return notes.attempt(charge, compute, "; its float32 error is unavailable")
