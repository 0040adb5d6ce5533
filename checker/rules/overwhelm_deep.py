"""Rule overwhelm_family on models with n_layers >= 2: Algorithm 1 applied layer
after layer (spec/overwhelm.md §5c, spec/rules.md §overwhelm_family, several layers).

Claim: a free claim of rule overwhelm_family (prefix s, query q, output o, free
strings over an alphabet A, lengths L; permutation claims are refused here).
Write S = |s|, P the query positions S + n (n ∈ L), p* = max P.

States.  A state is (i, u): position i holding token u, with u = s_i for i < S and,
for S <= i <= p*, u ∈ A (if i < p*) or u = q (if i ∈ P).  The state stands for every
sequence s + t + [u] with t ∈ A^(i−S) (t empty for i < S): position i of such a
sequence.  Causal attention: the residual stream at position i of any admissible
sequence is the residual at the last position of one of these.

Invariant (Theorem, spec/rules.md): X_l(i, u), an interval box, contains the residual
stream (centred: c(x) = x − mean(x) when the family normalises, since every norm reads
c(x) only and c is linear; x itself without normalisation) after layer l at the last
position of every sequence the state stands for.  X_{−1}(i, u) = c(E[u] + P[i]).

Layer l at state (i, u), from the boxes X_{l−1}:
 1. norm: LN1 over a box by Lemma LN (σ from the box and, by Cauchy–Schwarz, from the
    box's midpoint direction e with c·e >= lower(X·e): no hint); queries, keys, values
    q_j, k_j, v_j by interval matrix products (RoPE: rotated by i); vo_j = v_j c_rows(W_O[j]).
 2. weights w_j(i', u') = exp(q_j(i, u)·(k_j(i', u') − k_ref)/sqrt(h) − c) with k_ref
    any vector and c any real (q·k_ref/sqrt(h) + c is one real per sequence: softmax is
    invariant to it); k_ref cancels the keys' common part, whose product with the
    query's box would otherwise widen every weight.  Every term's weight lies in its
    interval, for every sequence the states stand for.
 3. Lemma R with interval tables: Σ_i' a_i' y_i' <= λ for every admissible t if
        Σ_{i'} max_{u' ∈ T'(i')} ⌈w(i', u')(y(i', u') − λ)⌉ < 0,
    the upper bound of the interval product (w > 0) being the maximum over every
    w ∈ [w_lo, w_hi], y ∈ [y_lo, y_hi] (numbers.up_mul / up_diff).  T'(i') = s_i' for
    i' < S, A for S <= i' < i, u for i' = i.
 4. the box of the attention output: coordinate k of z_j in [λ_lo, λ_hi] (hints
    boxes), r_c = X_{l−1}(i, u) + c(b_O) + Σ_j z_j; the MLP over the box (LN2 by
    Lemma LN, interval products, the activation's enclosure, gated or not; parallel: it
    reads X_{l−1}(i, u)); X_l(i, u) = r_c + c(MLP).
Every state is carried through layers 0..L−2; the last layer is run at the query
states (p, q) only, and there each logit difference is bounded directly:
    ℓ_m − ℓ_o = (x'·g_m)/σ_f + b_f·D_m + b_U[m] − b_U[o],   g_m = w_f ∘ D_m,
x'·g_m <= upper((X_{L−2}(p, q) + c(b_O))·g_m) + Σ_j diff[j][m] (Lemma R with
y = vo_j·g_m, hints diff) + upper(hidden·(c_rows(W_out) g_m) + c(b_out)·g_m); σ_f by
Lemma LN on the final box (x' in r_c + c(MLP)); required < 0 for every m ≠ o, p ∈ P.
Hints {"boxes": [[l, i, u, box], ...], "diff": [[p, diff], ...]} in the order of
`box_states` and P; base64 f64 arrays box (n_heads, d, 2), diff (n_heads, v).
Cost (`cost`) and memory (`elements`) are charged before any table is built; the clock
is checked at every state, table row and Lemma R bound.
mpmath only.
"""

from __future__ import annotations

import math

from mpmath import iv
from mpmath.libmp import to_float

from .. import ops
from ..errors import Malformed, Rejected
from ..modelspec import layer_short
from ..numbers import (
    below_zero,
    decode_floats,
    exp_interval,
    greater,
    inv_sqrt_interval,
    up_add,
    up_diff,
    up_mul,
    upper,
)
from ..statement import Overwhelm
from . import forward_model
from .overwhelm import positions as claim_positions
from .overwhelm_family_bounds import (
    _nest,
    _upper_ratio,
    alphabet,
    centred,
    centred_rows,
    dot,
    ln_scale,
)

_EXP = 50  # as ops.COST["exp"]
EXP_LIMIT = 4096  # |score − shift| above this: Rejected (numbers.exp_interval's limit is 8192)


# -- states and hints ---------------------------------------------------------------------

class ProductClaim:
    """A claim over a product set (rule family_gap's classes on several layers): every
    sequence t of length k with t_i ∈ sets[i] (i < k − 1) and t_(k−1) = query has logit
    `output` above every other.  The Theorem's invariant holds for it as stated (spec/
    rules.md §family_gap on several layers): a state (i, u) stands for the sequences with
    t_i' ∈ sets[i'] for i' < i and t_i = u, and attends to exactly those tokens."""

    free_perm = None
    prefix = ()

    def __init__(self, sets: list, output: int):
        self.sets = [tuple(sorted(set(t))) for t in sets]
        if len(self.sets[-1]) != 1 or not all(self.sets):
            raise Malformed("a product claim needs one query token and non-empty sets")
        self.output, self.query = output, self.sets[-1][0]


def positions(claim) -> list[int]:
    """The query positions: the last position of a product claim, else the claim's."""
    if isinstance(claim, ProductClaim):
        return [len(claim.sets) - 1]
    return claim_positions(claim)


def token_sets(dims, claim: Overwhelm) -> list[tuple]:
    """T(i) for i = 0..p*: the tokens a state at position i may hold (ascending)."""
    if isinstance(claim, ProductClaim):
        return list(claim.sets)
    s, qs = len(claim.prefix), positions(claim)
    last, free = max(qs), alphabet(dims, claim)
    out = [(u,) for u in claim.prefix]
    for i in range(s, last + 1):
        toks = set(free if i < last else ()) | ({claim.query} if i in qs else set())
        out.append(tuple(sorted(toks)))
    return out


def attended(dims, claim: Overwhelm, i: int, u: int) -> list[tuple]:
    """T'(i') for i' = 0..i: the tokens position i' may hold when state (i, u) attends."""
    if isinstance(claim, ProductClaim):
        return list(claim.sets[:i]) + [(u,)]
    s, free = len(claim.prefix), alphabet(dims, claim)
    return [(t,) for t in claim.prefix[:min(i, s)]] + [tuple(free)] * max(0, i - s) + [(u,)]


def box_states(dims, claim: Overwhelm) -> list[tuple]:
    """(l, i, u) of every box hint, in certificate order: every state for layers
    0..L−2, the query states (p, q) for the last layer."""
    sets, last = token_sets(dims, claim), dims.family.n_layers - 1
    out = [(layer, i, u) for layer in range(last) for i, toks in enumerate(sets) for u in toks]
    return out + [(last, p, claim.query) for p in positions(claim)]


def hint_elements(dims, claim: Overwhelm) -> int:
    f, d, v = dims.family, dims.d_model, dims.d_vocab
    return len(box_states(dims, claim)) * f.n_heads * d * 2 + len(positions(claim)) * f.n_heads * v


def parse_hints(hints, dims, claim: Overwhelm, charge) -> tuple[dict, dict]:
    """{"boxes": [[l, i, u, box], ...], "diff": [[p, diff], ...]} -> ({(l, i, u): box},
    {p: diff}) as nested floats, charged to the memory limit before decoding."""
    from ..certificate import hold

    want, qs = box_states(dims, claim), positions(claim)
    nh, d, v = dims.family.n_heads, dims.d_model, dims.d_vocab
    if not (isinstance(hints, dict) and set(hints) == {"boxes", "diff"}
            and isinstance(hints["boxes"], list) and len(hints["boxes"]) == len(want)
            and isinstance(hints["diff"], list) and len(hints["diff"]) == len(qs)):
        raise Malformed('rule overwhelm_family (several layers): hints must be {"boxes": '
                        f'[[l, i, u, box], ...] ({len(want)} entries), "diff": [[p, diff], '
                        f'...] ({len(qs)} entries)}}')
    hold(charge, hint_elements(dims, claim), "hints")
    boxes, diffs = {}, {}
    for state, entry in zip(want, hints["boxes"]):
        if not (isinstance(entry, list) and len(entry) == 4
                and all(type(x) is int for x in entry[:3]) and tuple(entry[:3]) == state):
            raise Malformed(f"rule overwhelm_family: the box hint for (layer, position, token) "
                            f"{state} must be [{state[0]}, {state[1]}, {state[2]}, box]")
        charge(0)
        boxes[state] = _nest(decode_floats(entry[3], nh * d * 2, "f64", f"box hint {state}"),
                             (nh, d, 2))
    for p, entry in zip(qs, hints["diff"]):
        if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int
                and entry[0] == p):
            raise Malformed(f"rule overwhelm_family: the diff hint for query position {p} "
                            "must be [p, diff]")
        diffs[p] = _nest(decode_floats(entry[1], nh * v, "f64", f"diff hint at {p}"), (nh, v))
    return boxes, diffs


# -- cost -----------------------------------------------------------------------------------

def cost(dims, claim: Overwhelm) -> int:
    """Interval operations: per layer and state, the norm, projections and vo
    (H·(3dh + hd) + 40d), attention over at most Z slots (H·Z·(h + EXP + 12d)), the MLP;
    at each query state the v diff functionals (H·v·(d + 6Z))."""
    f, d, h, v = dims.family, dims.d_model, dims.d_head, dims.d_vocab
    n_states = sum(len(t) for t in token_sets(dims, claim))
    # the widest attention: at the last query position (prefix + |A| per free position + 1)
    slots = sum(len(t) for t in attended(dims, claim, max(positions(claim)), claim.query))
    per_state = f.n_heads * (4 * d * h + slots * (h + _EXP + 12 * d)) + 40 * d \
        + forward_model.mlp_cost(f, d) + 2 * f.d_mlp * d
    final = len(positions(claim)) * (f.n_heads * v * (2 * d + 6 * slots) + v * (d + f.d_mlp))
    return f.n_layers * n_states * per_state + final + v * d * (f.n_heads + 2)


def elements(dims, claim: Overwhelm) -> int:
    """Elements held at once: two layers' boxes and one layer's q, k, vo per state and
    head, the diff tables (per state and head, v), weights of the largest attention."""
    f, d, h, v = dims.family, dims.d_model, dims.d_head, dims.d_vocab
    n_states = sum(len(t) for t in token_sets(dims, claim))
    return n_states * (2 * d + f.n_heads * (2 * h + d + v)) + 4 * n_states * f.n_heads \
        + 3 * v * d + f.d_mlp * (d + v)


# -- one layer over boxes --------------------------------------------------------------------

def box_scale(box: list, eps: float):
    """Lemma LN's enclosure of σ = sqrt(|c|²/d + ε) for c in `box`, with the box's
    midpoint e as direction (c·e >= lower(box·e), used when positive and e is finite)."""
    e = [float(x.mid) for x in box]
    if not all(math.isfinite(x) for x in e):
        return ln_scale(box, eps, [0.0] * len(box), None)
    low = dot(box, [iv.mpf(x) for x in e]).a
    return ln_scale(box, eps, e, low if low > 0 else None)


def box_norm(box: list, eps: float, w, b):
    """LN(x) for x with c(x) in `box` (Lemma LN, box_scale): c/σ (∘ w + b)."""
    sigma = box_scale(box, eps)
    y = [x / sigma for x in box]
    return y if w is None else [a * wi + bi for a, wi, bi in zip(y, w, b)]


class Layer:
    """Layer l's per-state tables: for every state, per head, the query, key and
    vo = value·c_rows(W_O[j]) (interval vectors), from the boxes X_{l−1}."""

    def __init__(self, dims, m, layer: int, boxes: dict, charge):
        f = dims.family
        self.dims, self.f, self.m, self.layer, self.boxes = dims, f, m, layer, boxes
        self.charge, self.tick = charge, lambda: charge(0)
        self.centre = f.normalization is not None
        self.scale = inv_sqrt_interval(dims.d_head)
        h = dims.d_head
        w_o = m[self.name("W_O")]
        self.w_o_c = [centred_rows(w_o[j * h:(j + 1) * h], self.centre) for j in range(f.n_heads)]
        self.b_o_c = centred(m[self.name("b_O")][0], self.centre)
        self.q, self.k, self.vo = {}, {}, {}

    def name(self, short: str) -> str:
        return layer_short(self.layer, short)

    def norm(self, which: str, box: list) -> list:
        f = self.f
        if f.normalization is None:
            return box
        if f.normalization == "LNPre":
            return box_norm(box, f.ln_eps, None, None)
        return box_norm(box, f.ln_eps, self.m[self.name(which + ".w")][0],
                        self.m[self.name(which + ".b")][0])

    def project(self, x: list, which: str, j: int, i: int) -> list:
        d, m = self.dims.d_model, self.m
        w = m[self.name("W_" + which)][j * d:(j + 1) * d]
        y = forward_model._add(forward_model._vecmat(x, w, self.tick),
                               m[self.name("b_" + which)][j])
        if which != "V" and self.f.positional == "rotary":
            y = forward_model._rotate(y, m["ROPE_COS"][i], m["ROPE_SIN"][i], self.f.rotary_dim)
        return y

    def state(self, i: int, u: int) -> None:
        """Step 1 at state (i, u) (memoised)."""
        if (i, u) in self.k:
            return
        self.tick()
        x = self.norm("ln1", self.boxes[(i, u)])
        self.q[(i, u)] = [self.project(x, "Q", j, i) for j in range(self.f.n_heads)]
        self.k[(i, u)] = [self.project(x, "K", j, i) for j in range(self.f.n_heads)]
        self.vo[(i, u)] = [forward_model._vecmat(self.project(x, "V", j, i), self.w_o_c[j],
                                                 self.tick) for j in range(self.f.n_heads)]

    def weights(self, j: int, i: int, u: int, slots: list) -> dict:
        """Step 2: head j's w(i', u') at state (i, u), for the slots T'(i'):
        exp((q·(k − k_ref))/sqrt(h) − c), both shifts being the same real for every
        position of one sequence (q·k_ref depends on the sequence, not on i')."""
        q = self.q[(i, u)][j]
        keys = [(i2, u2) for i2, toks in enumerate(slots) for u2 in toks]
        ref = reference([self.k[key][j] for key in keys])
        shifted = [[a - b for a, b in zip(self.k[key][j], ref)] for key in keys]  # (slots, h)
        row = ops.matmul([q], ops.transpose(shifted), self.tick)[0]
        scores = {key: s * self.scale for key, s in zip(keys, row)}
        shift = iv.mpf(scores[(i, u)].mid)  # any real: softmax is shift-invariant
        out = {}
        for key, s in scores.items():
            if abs(s - shift).b > EXP_LIMIT:  # a box this wide proves nothing: fail closed
                raise Rejected(f"overwhelm_family: at layer {self.layer}, state ({i}, {u}), "
                               f"head {j}, an attention score's enclosure is wider than "
                               f"{EXP_LIMIT} (the boxes are too loose)")
            out[key] = exp_interval(s - shift)
        return out

    def mlp(self, r_c: list, before: list) -> list:
        """Step 4's MLP over boxes (c(MLP output); [] entries added as 0 without MLP)."""
        f, m = self.f, self.m
        if not f.d_mlp:
            return r_c
        y = self.norm("ln2", before if f.parallel else r_c)
        pre = forward_model._vecmat(y, m[self.name("W_in")], self.tick)
        if f.gated_mlp:
            gate = forward_model.activate(f.act_fn, forward_model._vecmat(
                y, m[self.name("W_gate")], self.tick), self.charge)
            hidden = forward_model._add([a * b for a, b in zip(gate, pre)],
                                        m[self.name("b_in")][0])
        else:
            hidden = forward_model.activate(
                f.act_fn, forward_model._add(pre, m[self.name("b_in")][0]), self.charge)
        self.hidden = hidden
        out = forward_model._vecmat(hidden, centred_rows(m[self.name("W_out")], self.centre),
                                    self.tick)
        return forward_model._add(forward_model._add(r_c, out),
                                  centred(m[self.name("b_out")][0], self.centre))


def reference(keys: list) -> list:
    """k_ref: the mean of the keys' midpoints rounded to binary32, as exact intervals
    (any real vector is sound; this one cancels the keys' common part)."""
    import struct

    n = len(keys)
    mids = [sum(float(k[c].mid) for k in keys) / n for c in range(len(keys[0]))]
    mids = [x if math.isfinite(x) and abs(x) < 1e38 else 0.0 for x in mids]  # binary32 range
    return [iv.mpf(struct.unpack("<f", struct.pack("<f", x))[0]) for x in mids]


def ratio_below(w: dict, y, slots: list, lam: float, sign: int = 1) -> bool:
    """Lemma R with interval tables: True only if Σ_i a_i·sign·y(i, t_i) <= λ for every
    choice t_i ∈ slots[i], every weight in w(i, t_i) and every value in y(i, t_i)
    (y a function of (i, u) giving an interval)."""
    lam_iv, total = iv.mpf(lam), None
    for i, toks in enumerate(slots):
        best = None
        for u in toks:
            value = y(i, u)
            b = up_mul(w[(i, u)], up_diff(value if sign > 0 else -value, lam_iv))
            best = b if best is None or greater(b, best) else best
        total = best if total is None else up_add(total, best)
    return below_zero(total)


def logit_directions(m, layer, slots, n_heads: int, o: int, w_f):
    """D_t = W_U[:, t] − W_U[:, o] (as (d,)), g_t = w_f ∘ D_t (D_t without a final LN gain),
    the slot keys (i', u'), and per head j the products y_j(i', u')[t] = vo_j(i', u')·g_t for
    every slot and t (one matmul per head)."""
    v = len(m["W_U"][0])
    d_u = [[row[t] - row[o] for row in m["W_U"]] for t in range(v)]
    gs = [d_t if w_f is None else [a * b for a, b in zip(d_t, w_f)] for d_t in d_u]
    keys = [(i2, u2) for i2, toks in enumerate(slots) for u2 in toks]
    g_cols = ops.transpose(gs)  # (d, v)
    ys = [dict(zip(keys, ops.matmul([layer.vo[key][j] for key in keys], g_cols, layer.tick)))
          for j in range(n_heads)]
    return d_u, gs, keys, ys


def attention_mlp_numerator(layer, heads, ys, slots, diff, base, g, t: int, p: int, hidden,
                            w_out_c, b_out_c, confirm_by=None):
    """The upper end of the bound on (x_p − its centre)·g_t before the final scale: the
    residual box term base·g, each head's Lemma R bound (its diff hint confirmed), and the
    MLP's hidden·c(W_out)·g + c(b_out)·g when there is an MLP (hidden not None).  confirm_by:
    `confirm` (None) or, for the distance note only, `derive`."""
    confirm_ = confirm if confirm_by is None else confirm_by
    numer = upper(dot(base, g))
    for j, w in enumerate(heads):
        layer.tick()

        def y(a, b, j=j):
            return ys[j][(a, b)][t]

        hi = confirm_(w, y, slots, None, diff[j][t],
                     f"logit difference {t}, head {j}, query position {p}")
        numer = up_add(numer, upper(iv.mpf(hi)))
    if hidden:
        mlp_g = dot(hidden, [dot(row, g) for row in w_out_c]) + dot(b_out_c, g)
        numer = up_add(numer, upper(mlp_g))
    return numer


def confirm(w, y, slots, lo, hi, what: str):
    """The interval [lo, hi] (lo None: the upper end only) after Lemma R confirms it."""
    ok = ratio_below(w, y, slots, hi)
    if lo is not None:
        ok = ok and lo <= hi and ratio_below(w, y, slots, -lo, sign=-1)
    if not ok:
        raise Rejected(f"overwhelm_family: the hint for {what} is not confirmed")
    return iv.mpf((lo, hi)) if lo is not None else hi


def derive(w, y, slots, lo, hi, what: str):
    """`confirm` for the distance-to-float32 note only (reports, never a verdict): an end of
    [lo, hi] that Lemma R does not confirm is replaced by a bound it does (`tightest`), so
    that the note's float32 bounds are confirmed exactly as a certificate's hints are."""
    if not ratio_below(w, y, slots, hi):
        hi = tightest(w, y, slots, hi, 1)
    if lo is None:
        return hi
    if not ratio_below(w, y, slots, -lo, sign=-1):
        lo = -tightest(w, y, slots, -lo, -1)
    if lo > hi:
        raise Rejected(f"overwhelm_family: the derived bounds for {what} are empty")
    return iv.mpf((lo, hi))


def tightest(w, y, slots, lam: float, sign: int, steps: int = 40) -> float:
    """A binary64 λ >= the given one that ratio_below confirms (for `derive`).  F(λ) =
    Σ_i max_{u ∈ slots[i]} upper(w(i,u)·(sign·y(i,u) − λ)) is convex and decreasing in λ
    (per slot: slope −upper(w) while λ < upper(sign·y), −lower(w) after), so Newton's step
    from a λ with F(λ) > 0, λ' = Σ_i ω_i·Y_i / Σ_i ω_i at each position's maximiser (Y its
    upper(sign·y), ω the weight end of that slope), stays below the root; each λ' (nudged up
    by a growing step) is tried by ratio_below itself.  After `steps` tries the trivial bound
    max upper(sign·y) (confirmed: every term ≤ 0)."""
    nudge = 2.0 ** -40
    for _ in range(steps):
        num = den = 0.0
        for i, toks in enumerate(slots):
            best = None
            for u in toks:
                value = y(i, u)
                top = float((value if sign > 0 else -value).b)
                weight = float(w[(i, u)].b if top >= lam else w[(i, u)].a)
                gain = weight * (top - lam)
                if best is None or gain > best[0]:
                    best = (gain, weight, top)
            num, den = num + best[1] * best[2], den + best[1]
        step = num / den if den > 0 and math.isfinite(num / den) else lam
        lam = max(step, lam) + (abs(step) + 1e-300) * nudge
        if ratio_below(w, y, slots, lam, sign):
            return lam
        nudge *= 4
    top = max(float((y(i, u) if sign > 0 else -y(i, u)).b)
              for i, toks in enumerate(slots) for u in toks)
    lam = math.nextafter(top, math.inf)
    if not ratio_below(w, y, slots, lam, sign):
        raise Rejected("overwhelm_family: no bound found for the distance note")
    return lam


def attention_box(layer: Layer, i: int, u: int, slots: list, hint: list) -> tuple:
    """Steps 2-4 at state (i, u): (r_c box, the per-head weights)."""
    r_c = forward_model._add(layer.boxes[(i, u)], layer.b_o_c)
    heads = []
    for j in range(layer.f.n_heads):
        w = layer.weights(j, i, u, slots)
        heads.append(w)
        for k in range(layer.dims.d_model):
            layer.tick()  # the clock, at every bound
            z = confirm(w, lambda a, b, j=j, k=k: layer.vo[(a, b)][j][k], slots,
                        hint[j][k][0], hint[j][k][1],
                        f"box coordinate {k}, head {j}, layer {layer.layer}, state ({i}, {u})")
            r_c[k] = r_c[k] + z
    return r_c, heads


def check_logits(dims, m, layer: Layer, claim: Overwhelm, p: int, heads: list, final: list,
                 diff: list) -> tuple | None:
    """The last step at query position p: ℓ_m − ℓ_o < 0 for every m ≠ o.  Returns, for the
    note only (decides nothing), the smallest slack −bound (binary64) and its logit."""
    f, o, v, centre = dims.family, claim.output, dims.d_vocab, layer.centre
    w_f, b_f = (m["ln_final.w"][0], m["ln_final.b"][0]) if f.normalization == "LN" \
        else (None, None)
    slots = attended(dims, claim, p, claim.query)
    base = forward_model._add(layer.boxes[(p, claim.query)], layer.b_o_c)
    sigma = iv.mpf(1)
    if centre:
        sigma = box_scale(final, f.ln_eps)
    w_out_c = centred_rows(m[layer.name("W_out")], centre) if f.d_mlp else None
    b_out_c = centred(m[layer.name("b_out")][0], centre) if f.d_mlp else None
    d_u, gs, keys, ys = logit_directions(m, layer, slots, len(heads), o, w_f)
    hidden = layer.hidden if f.d_mlp else None
    smallest = None
    for t in range(v):
        if t == o:
            continue
        d_t, g = d_u[t], gs[t]
        numer = attention_mlp_numerator(layer, heads, ys, slots, diff, base, g, t, p, hidden,
                                        w_out_c, b_out_c)
        const = m["b_U"][0][t] - m["b_U"][0][o]
        if b_f is not None:
            const = const + dot(d_t, b_f)
        bound = up_add(_upper_ratio(numer, sigma), upper(const))
        if not below_zero(bound):
            raise Rejected(f"overwhelm_family: at query position {p}, the bound on logit {t} "
                           f"− logit {o} is not negative")
        if smallest is None or -to_float(bound) < smallest[0]:
            smallest = (-to_float(bound), t)
    return smallest


def check(dims, m, claim: Overwhelm, hints, charge, record: dict | None = None,
          distance=None) -> str:
    """Confirm the claim on a model with several layers; raise Rejected otherwise.
    `record` (tests) receives every box X_l(i, u) as record[(l, i, u)].  distance (a real
    check under --float32-distance; reports only): (slack, p, t) -> the note's float32
    error text (overwhelm_deep_float32.distance_note, passed in by the rule).  A
    ProductClaim (family_gap) returns the smallest slack (slack, position, logit) or None,
    for its caller's note, instead of the note."""
    from ..certificate import hold

    f = dims.family
    if claim.free_perm is not None:
        raise Malformed("overwhelm_family on several layers supports free claims, not "
                        "free_perm (its boxes do not track the multiset)")
    boxes_hint, diffs = parse_hints(hints, dims, claim, charge)
    charge(cost(dims, claim))
    hold(charge, elements(dims, claim), "layer boxes")
    sets, last = token_sets(dims, claim), f.n_layers - 1
    centre = f.normalization is not None
    boxes = {}
    for i, toks in enumerate(sets):
        for u in toks:
            charge(0)
            x = m["W_E"][u] if f.positional == "rotary" else forward_model._add(
                m["W_E"][u], m["W_pos"][i])
            boxes[(i, u)] = centred(list(x), centre)
    qs = positions(claim)
    smallest = None  # (slack, query position, logit): the note's, decides nothing
    for index in range(f.n_layers):
        layer = Layer(dims, m, index, boxes, charge)
        states = [(i, u) for i, toks in enumerate(sets) for u in toks] if index < last \
            else [(p, claim.query) for p in qs]
        new = {}
        for i, u in states:
            slots = attended(dims, claim, i, u)
            for i2, toks in enumerate(slots):
                for u2 in toks:
                    layer.state(i2, u2)
            r_c, heads = attention_box(layer, i, u, slots, boxes_hint[(index, i, u)])
            new[(i, u)] = layer.mlp(r_c, boxes[(i, u)])
            if record is not None:
                record[(index, i, u)] = new[(i, u)]
            if index == last:
                worst = check_logits(dims, m, layer, claim, i, heads, new[(i, u)], diffs[i])
                if worst is not None and (smallest is None or worst[0] < smallest[0]):
                    smallest = (worst[0], i, worst[1])
        boxes = new
    if isinstance(claim, ProductClaim):  # family_gap's class: its caller writes the note
        return smallest
    n = completions(dims, claim)
    note = ""
    if smallest:
        error = distance(smallest) if distance is not None else (
            "; its float32 error: check-cert --float32-distance runs the float32 rule on "
            "these hints (about the check's cost again; spec/rules.md §distance to float32)")
        note = (f"; smallest certified slack {smallest[0]:.3g} at (query position "
                f"{smallest[1]}, logit {smallest[2]}) (ℓ_o − ℓ_t ≥ it for every completion "
                f"there){error}")
    return (f"output {claim.output} forced at {len(qs)} length(s), {len(alphabet(dims, claim))} "
            f"free token(s) ({n} completions), {f.n_heads} head(s), {f.n_layers} layers "
            f"(boxes layer after layer){note}")


def completions(dims, claim: Overwhelm) -> int:
    """The number of admissible free strings: Σ_{n ∈ L} |A|^n."""
    return sum(len(alphabet(dims, claim)) ** n for n in claim.lengths())
