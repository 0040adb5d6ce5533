"""Rule overwhelm_family under the float32 semantics (one layer; spec/rules.md
§overwhelm_family, float32: Lemma W-family).

The real rule's Algorithm 1 (overwhelm_family.py) with every quantity a float32 execution
of spec/theorem.md §2c computes replaced by an enclosure of it, and every identity the real
rule uses between such quantities made exact again by an explicit error term:

 1. tables: forward_float32.Float32Model's per-(position, token) enclosures of the float
    embedding, LN1, query, key, value (rotated): every float execution's value lies in them
    (Lemma F step by step), so Lemma R, which holds for ANY values in the per-slot
    enclosures, holds for the float ones.
 2. weights: the float scores lie in the real score over the enclosures widened by the
    score step's bound; Lemma S: the float softmax is ã_i = (w_i/Σw)(1 + φ_i) + ν_i with
    w_i ∈ exp(s̃_i − σ)·[1 − ρ, 1 + 2ρ]·[1 ∓ 8u] (ρ = 2u·max|s̃|), |φ_i| ≤ γ_{n+1},
    |ν_i| ≤ ν = (32n + 32)η, n = p + 1 positions.  Lemma R on the w_i (an interval per
    slot) bounds Σ(w_i/Σw)y_i; then |Σã_i y_i − Σ(w_i/Σw)y_i| ≤ (γ_{n+1} + nν)·M, M ≥ every
    |y(i, u)| of an admissible slot.
 3. the float z̃_j = fl(Σ_i ã_i ṽ_i) and r̃ = fl(x̃_p + b_O + Σ_j z̃_j W_O[j]) (one sum):
    c(r̃)·a = base·a + Σ_j Σ_i ã_i vo_j(i)·a + Σ_j ρ_zj·(c(W_O[j]) a) + ρ_r·c(a), with the
    rounding errors |ρ_zj| ≤ Rz_j, |ρ_r| ≤ Rr (Lemma F).  So every confirmed functional
    interval is widened by E(a) = Σ_j[(γ_{n+1} + nν)M_j(a) + Rz_j·|c(W_O[j])||a|] + Rr·|c(a)|.
 4. LayerNorm in float32 (mean, subtraction, mean of squares, scale, ·w + b): the float
    LN output ỹ satisfies |ỹ_i − (c_i/σ̃)w_i − b_i| ≤ D_i, c = c(r̃) in the (widened) box,
    σ̃ = sqrt(fl(v̂ + ε̃)) in the enclosure norm_scale gives (Lemma LN on the float centred
    vector c̃, whose box is c's widened by Ec; its direction bound lowered by Ec·|e|).
 5. a linear map of ỹ (W_in, W_U) then equals (c·a)/σ̃ + const + Σ_i D_i|a'_i| + the dot
    product's rounding: the pre-activations, the hidden layer (activation error, ReLU
    exact), r̃' = fl(r̃ + h̃W_out + b_out) (one sum, error Rr2), the final LayerNorm and
    ℓ̃_m − ℓ̃_o likewise; the rule requires the upper bound of every ℓ̃_m − ℓ̃_o < 0.

Refused by name (Rejected): several layers (overwhelm_deep proves the real semantics
only), permutation claims, a parallel MLP, a normalisation other than LN.
Cost: as the real rule, plus per query position n_functionals·n_heads·(slots + h·d) for
M_j(a) and Rz_j·|c(W_O[j])||a| (charged; mpmath only, whatever --arith).
"""

from __future__ import annotations

import math

from mpmath import iv
from mpmath.libmp import from_float

from .. import float32 as fp
from ..elementary import sqrt_interval, square_interval
from ..errors import Rejected
from ..numbers import below_zero, exp_interval, up_add, upper
from . import forward_model, notes
from . import overwhelm_family_bounds as base
from .forward_float32 import Float32Model
from .overwhelm import positions

U = float(fp.U)


def refuse(dims, claim) -> None:
    """The float32 variant's scope (spec/rules.md §overwhelm_family, float32)."""
    f = dims.family
    why = None
    if f.n_layers > 1:
        why = ("several layers (overwhelm_deep) prove the real semantics only; the float32 "
               "semantics is supported on one layer")
    elif claim.free_perm is not None:
        why = "permutation claims (Lemma R-perm) prove the real semantics only"
    elif f.normalization != "LN":
        why = f"normalization {f.normalization} is not supported (LN only)"
    elif f.d_mlp and f.parallel:
        why = "a parallel MLP is not supported"
    elif f.gated_mlp:
        why = "a gated MLP is not supported"
    if why:
        raise Rejected(f"overwhelm_family, semantics == float32: {why} (spec/rules.md "
                       "§overwhelm_family, float32)")


def scope(dims, claim) -> None:
    """The float32 overwhelm_family scope (spec/rules.md §overwhelm_family, float32; issue
    24): several layers (overwhelm_deep_float32.py: LN, LNPre or no normalisation, gated or
    parallel MLP, free claims), and on one layer `refuse`'s scope plus permutation claims
    (Lemma R-perm under float32), LNPre, no normalisation and a parallel MLP.  Refused by
    name (Rejected): permutation claims on several layers, RMS, a gated MLP on one layer."""
    f = dims.family
    if f.normalization in ("RMS", "RMSPre"):
        raise Rejected(f"overwhelm_family, semantics == float32: normalization "
                       f"{f.normalization} is not supported (the real rule refuses it too)")
    if f.n_layers > 1:
        if claim.free_perm is not None:
            raise Rejected("overwhelm_family, semantics == float32: permutation claims on "
                           "several layers are not supported (the real rule refuses them "
                           "too) (spec/rules.md §overwhelm_family, float32)")
        return
    if f.gated_mlp:  # the real one-layer rule refuses it too
        raise Rejected("overwhelm_family, semantics == float32: a gated MLP on one layer is "
                       "not supported (spec/rules.md §overwhelm_family, float32)")


def _down(x: float) -> float:
    return math.nextafter(x, -math.inf)


def _lower_float(x) -> float:
    """A binary64 ≤ the lower end of interval x."""
    return _down(float(x.a))


def _plus(raw, x: float):
    """An upper bound of (≤ raw) + x for a binary64 x (exact conversion)."""
    return up_add(raw, from_float(x))


def _centred_mags(a: list, centre: bool) -> tuple[list, list]:
    """(|a|, |c(a)|) entrywise as binary64 upper bounds (c(a) = a − mean(a))."""
    a = [iv.mpf(x) for x in a]
    am = fp.mags(a)
    if not centre:
        return am, am
    mean = iv.fsum(a) / len(a)
    return am, fp.mags([x - mean for x in a])


class Tables(base.Tables):
    """The real rule's tables over Float32Model's enclosures, plus |c(W_O[j])| and |W_O[j]|
    per head (h × d binary64 upper bounds)."""

    MODEL = Float32Model

    def __init__(self, dims, m, charge):
        super().__init__(dims, m, charge)
        add_magnitudes(self)


def add_magnitudes(tables) -> None:
    """tables.wo_mag, tables.cwo_mag: |W_O[j]| and |c_rows(W_O[j])| per head (h × d binary64
    upper bounds), what `widening` reads beside the tables (Tables; and the real tables of a
    distance note, `note_error`)."""
    h = tables.dims.d_head
    tables.cwo_mag, tables.wo_mag = [], []
    for j in range(tables.f.n_heads):
        rows = tables.m["W_O"][j * h:(j + 1) * h]
        tables.wo_mag.append([fp.mags(r) for r in rows])
        tables.cwo_mag.append([fp.mags(r) for r in base.centred_rows(rows, tables.centre)])


def note_error(charge, tables, make, sigma) -> str:
    """The distance notes' float32 error (spec/rules.md §distance to float32; overwhelm_family
    on one layer and family_gap): E(a)/upper(σ), E(a) = AtQuery.widening (Lemma W-family's
    Σ_j [spread·M_j(a) + Rz_j·|c_rows(W_O[j])||a|] + Rr·|c(a)|) of a functional a at a query
    over the REAL tables (`add_magnitudes`), σ the real bound's LayerNorm scale enclosure;
    make() -> (the query: this module's AtQuery or a subclass, a, y, col), y[j] holding the
    projections VO_j·a in column col.  Reports only: no work charged, a failure named in the
    text (notes.attempt), the time limit standing."""
    def compute(clock):
        add_magnitudes(tables)
        clock()
        query, a, y, col = make()
        error = query.widening(a, y, col) / float(sigma.b)
        return f"float32 error {error:.3g} (E(g_t)/σ, Lemma W-family)"

    return notes.attempt(charge, compute, "no float32 error estimate")


class Head(base.Head):
    """Head j at query position p: the weights w(i, u) of Lemma S (float scores), the
    values' magnitude bound V (h) over the admissible slots."""

    def __init__(self, tables: Tables, j: int, p: int, slots: list, perm=None):
        model = tables.model
        h = tables.dims.d_head
        q = model.q[j][p][slots[p][0]]
        qm, scale_mag = fp.mags(q), fp.mag(model.scale)
        # perm: a permutation claim's (free positions, multiset items, potentials), Lemma
        # R-perm over the interval weights (base.Head.average_below)
        self.slots, self.tables, self.perm = slots, tables, perm
        scores = {}
        for i, toks in enumerate(model.ticking(slots)):
            for u in toks:
                key = model.key[j][i][u]
                real = base.dot(q, key) * model.scale
                scores[(i, u)] = fp.widen(real, fp.score_error(h, scale_mag, qm, fp.mags(key)))
        top = max(fp.mag(s) for s in scores.values())
        rho = fp._up(2 * U * top)
        if rho > 0.5:
            raise fp.Overflow("float32: an attention score too large for the softmax error "
                              "model (|s| > 2^22)")
        factor = iv.mpf((1 - rho, 1 + 2 * rho)) * fp.exp_factor()
        shift = iv.mpf(scores[(p, slots[p][0])].mid)  # any real: the ratios are invariant
        self.w = {key: exp_interval(s - shift) * factor for key, s in scores.items()}
        self.v_mag = [0.0] * h
        for i, toks in enumerate(slots):
            for u in toks:
                self.v_mag = [max(a, b) for a, b in zip(self.v_mag, fp.mags(model.val[j][i][u]))]

    def extreme(self, y: list, col: int) -> float:
        """M ≥ |y(i, u)| for every admissible slot (binary64)."""
        row = self.tables.row
        return max(fp.mag(y[row(i, u)][col]) for i, toks in enumerate(self.slots) for u in toks)


class AtQuery(base.AtQuery):
    """Steps 2-6 at query position p, float32 (the module docstring's 1-5)."""

    HEAD = Head  # this module's: the float32 heads

    def __init__(self, tables: Tables, fun: base.Functionals, claim, p: int, hint: dict):
        super().__init__(tables, fun, claim, p, hint)
        self._errors()

    def _errors(self) -> None:
        """Lemma S's spread, Rz_j, Rr and the magnitude bound of r̃ at this position."""
        dims, f = self.t.dims, self.f
        n, h, d = self.p + 1, dims.d_head, dims.d_model
        nu = (32 * n + 32) * fp.ETA
        self.spread = fp._up(fp.gamma(n + 1) + fp._up(n * nu))  # γ_{n+1} + nν (≥ drift)
        one = fp._up(1 + self.spread)
        self.rz, z_mag = [], []
        for head in self.heads:
            rz = [fp.dot_error(n, fp._up(v * one)) for v in head.v_mag]
            self.rz.append(rz)
            z_mag.append([fp._up(fp._up(v * one) + e) for v, e in zip(head.v_mag, rz)])
        b_o = fp.mags(self.m["b_O"][0])
        xm = fp.mags(self.x_p)
        sums = []
        for c in range(d):
            s = fp._up(xm[c] + b_o[c])
            for j in range(f.n_heads):
                s = fp._up(s + fp._abs_dot(z_mag[j], [row[c] for row in self.t.wo_mag[j]]))
            sums.append(s)
        self.rr = [fp.dot_error(f.n_heads * h + 2, s) for s in sums]
        self.r_mag = [fp._up(s + e) for s, e in zip(sums, self.rr)]

    def widening(self, a: list, y: list, col: int) -> float:
        """E(a): the float32 error of c(r̃)·a beyond the heads' Lemma R bounds, y the
        projections VO_j·a per head (column col)."""
        am, cm = _centred_mags(a, self.centre)
        total = fp._abs_dot(self.rr, cm)
        for j, head in enumerate(self.heads):
            m = head.extreme(y[j], col)
            cwo_a = [fp._abs_dot(row, am) for row in self.t.cwo_mag[j]]
            total = fp._up(total + fp._up(self.spread * m) + fp._abs_dot(self.rz[j], cwo_a))
        return total

    def functional_f32(self, base_dot, y, col, lo_hi, what, keys, a):
        total = self.functional(base_dot, y, col, lo_hi, what, keys)
        self.last_widening = self.widening(a, y, col)  # kept for the tests
        return fp.widen(total, self.last_widening)

    def box(self) -> list:
        """The box of c(r̃): the real rule's box, each coordinate widened by E(e_k)."""
        real = super().box()
        d = len(real)
        out = []
        for k in range(d):
            e = [0] * d
            e[k] = 1
            out.append(fp.widen(real[k], self.widening(e, self.t.vo, k)))
        return out

    def direction_f32(self, which: int, extra_err=None, extra_lower=None):
        """(e, a lower bound of the real rule's direction functional (+ extra_lower(e))
        minus E(e) (and extra_err(e))), or (e, None) when e is zero."""
        e, low = self.direction(which, extra_lower)
        if low is None:
            return e, None
        y = self.t.project([[iv.mpf(x) for x in e]])
        err = self.widening(list(e), y, 0)
        if extra_err is not None:
            err = fp._up(err + extra_err(e))
        return e, (iv.mpf(low) - iv.mpf(err)).a

    def float_ln(self, which: str, box: list, r_mag: list, e, low):
        """Step 4 for LayerNorm `which` of a float r̃ with c(r̃) in box, |r̃| ≤ r_mag,
        c(r̃)·e ≥ low: (σ̂ ∋ σ̃, the enclosure of ỹ, D, 1/σ̂_lo)."""
        d = len(box)
        e_mu = fp.mean_error(d, fp.abs_sum(r_mag))
        ec = [fp._up(fp._up(e_mu * (1 + 2.0 ** -23)) + fp._up(U * fp.mag(c))) for c in box]
        bt = [fp.widen(c, err) for c, err in zip(box, ec)]
        self.last_ec = ec  # kept for the tests
        sq = [square_interval(c) for c in bt]
        lo_sum, hi_sum = iv.fsum(sq).a, iv.fsum(sq).b
        if low is not None:
            em = fp.mags([iv.mpf(x) for x in e])
            low_t = (iv.mpf(low) - iv.mpf(fp._abs_dot(ec, em))).a  # c̃·e ≥ c·e − Ec·|e|
            e_norm = iv.fsum(iv.mpf(x) * iv.mpf(x) for x in e)
            if low_t > 0 and e_norm.a > 0:
                lo_sum = max(lo_sum, (iv.mpf(low_t) ** 2 / e_norm).a)  # Cauchy–Schwarz
        if lo_sum > hi_sum:
            raise Rejected("overwhelm_family: the LayerNorm direction bound contradicts the box")
        bm = fp.mags(bt)
        ms = fp.widen(iv.mpf((lo_sum, hi_sum)) / d, fp.mean_error(d, fp._abs_dot(bm, bm)))
        sigma = fp.norm_scale(ms, self.f.ln_eps, sqrt_interval)
        if not sigma.a > 0:
            raise Rejected("overwhelm_family: a LayerNorm scale enclosure reaches 0")
        inv = fp._up(1.0 / _lower_float(sigma))
        g8 = fp.gamma(fp.NORM_FACTORS)
        n_box = [fp.relative(c / sigma, g8, fp.ETA) for c in bt]
        w, b = base.ln_params(self.m, self.f, which)
        if w is None:  # LNPre: ỹ = ñ (w = 1, b = 0, no scale-shift step: e_y = 0)
            wm, y = [1.0] * d, n_box
        else:
            wm, bmag = fp.mags(w), fp.mags(b)
            y = fp.scale_shift(n_box, zip(w, b, wm, bmag))
        dev = []
        for i in range(d):
            # |ỹ_i − (c_i/σ̃)w_i − b_i| ≤ e_y + |w_i|(γ_8|c̃_i|/σ̃ + η + Ec_i/σ̃)
            e_y = 0.0 if w is None else fp.dot_error(
                2, fp._up(fp._up(fp.mag(n_box[i]) * wm[i]) + bmag[i]))
            n_err = fp.abs_sum([fp._up(fp._up(g8 * bm[i]) * inv), fp.ETA,
                                fp._up(ec[i] * inv)])
            dev.append(fp.abs_sum([e_y, fp._up(wm[i] * n_err)]))
        self.last_dev = dev  # kept for the tests
        return sigma, y, dev

    def norm_f32(self, which: str, box: list, r_mag: list, e, low):
        """float_ln for LN and LNPre; without normalisation (box: the float r̃'s own box,
        not centred) the identity: (1, box, D = 0)."""
        if not self.centre:
            return iv.mpf(1), box, [0.0] * len(box)
        return self.float_ln(which, box, r_mag, e, low)

    def hidden_f32(self, r_box: list) -> list:
        """The enclosure of the float hidden layer (step 5).  Parallel: the MLP of the
        float embedding x̃_p (one fixed enclosure), Float32Model's steps (Lemma F)."""
        f, m, d = self.f, self.m, self.t.dims.d_model
        if f.parallel:
            model = self.t.model
            y = model.norm("ln2", self.x_p)
            self.last_parallel = (y, model.act(model.affine(y, "W_in", m["W_in"], "b_in",
                                                            m["b_in"][0])))  # the tests
            return self.last_parallel[1]
        e, low = self.direction_f32(0)
        sigma, y, dev = self.norm_f32("ln2", r_box, self.r_mag, e, low)
        ym = fp.mags(y)
        w_in = m["W_in"]
        b_in = fp.mags(m["b_in"][0])
        cols = [fp.mags([w_in[i][k] for i in range(d)]) for k in range(f.d_mlp)]
        pre, self.last_pre_err = [], []  # (kept for the tests)
        for k in range(f.d_mlp):
            numer = self.functional_f32(self.base_a[k], self.fun.y_a, k,
                                        [self.hint["pre"][j][k] for j in range(f.n_heads)],
                                        f"pre-activation {k}",
                                        (base.key(self.t.dims, "pre", k, 0),
                                         base.key(self.t.dims, "pre", k, 1)), self.fun.a[k])
            err = fp._up(fp._abs_dot(dev, cols[k])
                         + fp.dot_error(d + 1, fp._up(fp._abs_dot(ym, cols[k]) + b_in[k])))
            self.last_pre_err.append(err)
            pre.append(fp.widen(numer / sigma + self.fun.pre_const[k], err))
        real = forward_model.activate(f.act_fn, pre, self.t.model.charge)
        return real if f.act_fn == "relu" else fp.activation(real, pre)

    def check(self) -> None:
        """Step 6 in float32: raise Rejected unless every float ℓ̃_m − ℓ̃_o < 0."""
        f, o, fun, m = self.f, self.claim.output, self.fun, self.m
        d, v = self.t.dims.d_model, self.t.dims.d_vocab
        self.parts = {}  # per logit t: its float32 error terms (kept for the tests)
        r_box = self.box()
        final, mlp_g, rr2, r_mag2 = r_box, [iv.mpf(0)] * v, [0.0] * d, self.r_mag
        hidden = self.hidden_f32(r_box) if f.d_mlp else []
        if hidden:
            hm = fp.mags(hidden)
            w_out, b_out = m["W_out"], fp.mags(m["b_out"][0])
            sums = [fp._up(fp._up(self.r_mag[c] + b_out[c])
                           + fp._abs_dot(hm, fp.mags([row[c] for row in w_out])))
                    for c in range(d)]
            rr2 = [fp.dot_error(f.d_mlp + 2, s) for s in sums]
            r_mag2 = [fp._up(s + e) for s, e in zip(sums, rr2)]
            mean_rr2 = fp._up(fp.abs_sum(rr2) / d)
            real = forward_model._add(forward_model._add(
                r_box, self.t.matmul([hidden], fun.w_out_c)[0]), fun.b_out_c)
            final = [fp.widen(x, fp._up(e + mean_rr2)) for x, e in zip(real, rr2)]
            mlp_g = forward_model._add(self.t.matmul([hidden], fun.out_g)[0], fun.b_out_g)

        def mlp_dot(e):  # hidden·(c(W_out) e) + c(b_out)·e, an interval
            if not hidden:
                return iv.mpf(0)
            col = self.t.matmul(fun.w_out_c, [[iv.mpf(x)] for x in e])
            return base.dot(hidden, [c[0] for c in col]) + base.dot(
                fun.b_out_c, [iv.mpf(x) for x in e])

        def rr2_err(e):  # |ρ_r'·c(e)|
            return fp._abs_dot(rr2, _centred_mags(list(e), self.centre)[1])

        e, low = self.direction_f32(1, rr2_err, mlp_dot)
        sigma, yf, dev = self.norm_f32("ln_final", final, r_mag2, e, low)
        yfm = fp.mags(yf)
        u_rows, b_u = m["W_U"], fp.mags(m["b_U"][0])

        def unembed_err(t):
            return fp.dot_error(d + 1, fp._up(fp._abs_dot(yfm, fp.mags(
                [row[t] for row in u_rows])) + b_u[t]))

        e_o = unembed_err(o)
        for t in range(v):
            if t == o:
                continue
            numer = self.functional_f32(self.base_g[t], fun.y_g, t,
                                        [[None, self.hint["diff"][j][t]]
                                         for j in range(f.n_heads)], f"logit difference {t}",
                                        (None, base.key(self.t.dims, "diff", t)), fun.g[t])
            numer = up_add(upper(numer), upper(mlp_g[t]))
            numer = _plus(numer, rr2_err(fun.g[t]))
            bound = up_add(base._upper_ratio(numer, sigma), upper(self.logit_const(t)))
            slack = fp._up(fp._abs_dot(dev, fp.mags(fun.d_u[t])) + fp._up(unembed_err(t) + e_o))
            self.parts[t] = {"E": self.last_widening, "unembed": fp._up(unembed_err(t) + e_o)}
            if not below_zero(_plus(bound, slack)):
                raise Rejected(f"overwhelm_family (float32): at query position {self.p}, the "
                               f"bound on logit {t} − logit {o} is not negative")


def check(dims, mats, claim, hints, charge) -> str:
    """Confirm the float32 claim at every query position; raise Rejected otherwise."""
    from ..certificate import hold

    scope(dims, claim)
    if dims.family.n_layers > 1:  # Lemma W-deep, layer after layer
        from . import overwhelm_deep_float32

        return overwhelm_deep_float32.check(dims, mats, claim, hints, charge)
    free = base.alphabet(dims, claim)
    bounds = base.parse_hints(hints, dims, claim, charge)
    perm = claim.free_perm is not None
    charge(base._cost(dims, claim, len(claim.free_perm) if perm else len(free)))
    hold(charge, base.table_elements(dims) + max(base.query_elements(dims, claim, p)
                                                 for p in positions(claim)), "tables")
    tables = Tables(dims, mats, charge)
    fun = base.Functionals(tables, claim.output)
    f, h, d = dims.family, dims.d_head, dims.d_model
    for p in positions(claim):
        # the widening's own work: per functional and head, M_j over the slots and
        # Rz_j·|c_rows(W_O[j])||a| (h·d)
        slots = len(claim.prefix) + 1 + (p - len(claim.prefix)) * len(free)
        charge(base.n_functionals(dims) * f.n_heads * (slots + h * d))
        AtQuery(tables, fun, claim, p, bounds[p]).check()
    kind = ("every permutation (assignment duals)" if perm
            else f"{len(free)} free token(s)")
    return (f"output {claim.output} forced at {len(positions(claim))} length(s), "
            f"{kind}, {dims.family.n_heads} head(s) (float32 semantics: "
            "Lemma W-family, every bound widened by its float32 error; evaluated with mpmath)")
