"""Rule overwhelm_family: the paper's Algorithm 1 on every model family
(LayerNorm / LNPre, ReLU MLP, RoPE, several heads, parallel residual);
spec/rules.md §overwhelm_family, the theorem in spec/overwhelm.md §1, §5b.

Claim: as rule overwhelm_free (prefix s, query q, output o, free strings over
an alphabet A, lengths L); the permutation form is accepted through its
relaxation (every permutation of X is a string of length |X| over set(X)).
For each query position p = |s| + n, n ∈ L, the rule proves ℓ_m − ℓ_o < 0 for
every m ≠ o and every admissible t, in six steps, each a function below:

 1. tables: the attention inputs of every (position i, token u) — per-token
    LayerNorm makes LN1(x_i) a function of (i, u) only — over intervals
    (forward._Model: rigorous sqrt, RoPE by the enclosed exact angles).
 2. attention weights: for head j, w_j(i, u) = exp(s_j(i, u) − c_j), with
    s_j(i, u) = q_j(p)·key_j(i, u)/sqrt(h) (RoPE: key rotated by i, query by
    p) and any real shift c_j; the extremal logits of a free position are the
    min/max over u ∈ A (implicit in step 3's max over u).
 3. ratio bounds (Lemma R): for a head j and any scalar y_j(i, u), the
    attention average Σ_i a_i y_i = Σ w_i y_i / Σ w_i over a string t is ≤ λ
    for EVERY admissible t if
        Σ_{fixed i} w(i,t_i)(y(i,t_i) − λ) + Σ_{free i} max_{u∈A} w(i,u)(y(i,u) − λ) ≤ 0
    (w > 0; the maximum over t of the separable left side is the sum of the
    per-position maxima).  λ is a hint; the rule only confirms the inequality.
    This is exact for one functional (Dinkelbach): the best λ is the max.
 4. the post-attention residual of the query position, centred (LayerNorm
    reads only r − mean(r); without LayerNorm "centred" is the identity):
    r_c = c(x_p) + c(b_O) + Σ_j z_j,  z_j = Σ_i a_ji c(val_j(i, t_i) W_O[j]),
    enclosed in a box whose per-head per-coordinate ends are Lemma R bounds.
 5. LayerNorm over a box (Lemma LN): for r_c in a box, σ = sqrt(mean(r_c²) + ε)
    lies in [sqrt(Σ min r_c,k²/d + ε), sqrt(Σ max r_c,k²/d + ε)] and each output
    coordinate in r_c,k/σ·w_k + b_k (interval arithmetic).  The MLP on a box
    is interval matmul + ReLU (exact on endpoints); parallel: exact at x_p.
 6. each logit difference directly: with D_m = U[:, m] − U[:, o], g_m = w_f ∘ D_m,
        ℓ_m − ℓ_o = (r'_c · g_m)/σ_f + b_f·D_m + b_U[m] − b_U[o],
    r'_c = r_c + c(MLP); the attention part of r'_c·g_m is bounded by one
    Lemma R bound per head (a hint), the MLP part by the hidden box.
Hints: {"bounds": [[p, box, diff], ...]} for every p, in order; box = base64
f64 (n_heads × d_model × 2) of [lo, hi] per head and coordinate of z_j; diff =
base64 f64 (n_heads × d_vocab) of upper bounds of z_j·g_m (entry o unused).
Cost per p: n_heads·(2·d + v)·(p + 1)·|A| upper-bound products, plus the
tables (n_heads·3·v·k·d·h) and the MLP (d·d_mlp) on boxes.  mpmath only.
"""

from __future__ import annotations

from mpmath import iv

from ..elementary import sqrt_interval, square_interval
from ..errors import Malformed, Rejected
from mpmath.libmp import fzero, mpf_div, mpf_lt, round_ceiling

from ..numbers import (
    WORKING_PRECISION,
    below_zero,
    decode_floats,
    exp_interval,
    greater,
    up_add,
    up_diff,
    up_mul,
    upper,
)
from ..statement import Overwhelm
from . import forward
from .overwhelm import parse_claim as _parse_claim
from .overwhelm import positions

PROPERTY = "overwhelm"
ARITHMETICS = ("mpmath",)
FORM = "any"  # free and permutation claims (the latter relaxed, see the docstring)
ANY_FAMILY = True  # certificate.py: applies to every model family
_ZERO = iv.mpf(0)


# -- the claim and the inputs ---------------------------------------------------------

def parse_claim(obj, dims, form: str = FORM) -> Overwhelm:
    """A free or permutation claim (checker/rules/overwhelm.parse_claim)."""
    perm = isinstance(obj, dict) and "free_perm" in obj
    return _parse_claim(obj, dims, "perm" if perm else "free")


def alphabet(dims, claim: Overwhelm) -> tuple:
    """The free tokens: `over`, all tokens, or the distinct tokens of free_perm."""
    if claim.free_perm is not None:
        return tuple(sorted(set(claim.free_perm)))
    return claim.over if claim.over is not None else tuple(range(dims.d_vocab))


def inputs(dims, claim: Overwhelm) -> dict[str, tuple]:
    """Every weight of the family (and the RoPE tables): the rule runs the model."""
    from ..definitions import model_terms

    terms = model_terms(dims)
    return {name: terms[name] for name in forward.inputs(dims)}


def parse_hints(hints, dims, claim: Overwhelm) -> dict[int, tuple]:
    """{"bounds": [[p, box, diff], ...]} -> {p: (box[j][k] = (lo, hi), diff[j][m])}."""
    want = positions(claim)
    if not (isinstance(hints, dict) and set(hints) == {"bounds"}
            and isinstance(hints["bounds"], list) and len(hints["bounds"]) == len(want)):
        raise Malformed('rule overwhelm_family: hints must be {"bounds": [[p, box, diff], ...]} '
                        f"with one entry per query position ({len(want)})")
    nh, d, v = dims.family.n_heads, dims.d_model, dims.d_vocab
    out = {}
    for p, entry in zip(want, hints["bounds"]):
        if not (isinstance(entry, list) and len(entry) == 3 and entry[0] == p
                and type(entry[0]) is int):
            raise Malformed(f"rule overwhelm_family: hint entry for query position {p} must be "
                            "[p, box, diff]")
        box = decode_floats(entry[1], nh * d * 2, "f64", f"box hint at {p}")
        diff = decode_floats(entry[2], nh * v, "f64", f"diff hint at {p}")
        out[p] = ([[(box[(j * d + k) * 2], box[(j * d + k) * 2 + 1]) for k in range(d)]
                   for j in range(nh)], [list(diff[j * v:(j + 1) * v]) for j in range(nh)])
    return out


# -- step 1-3: attention weights and the ratio lemma ----------------------------------

def centred_rows(mat: list, centre: bool) -> list:
    """Each row minus its mean (over ℝ, enclosed): x ↦ x − mean(x) is linear, so
    (y W)_c = y (W_c) for the row-centred W_c.  Identity when centre is False."""
    if not centre:
        return mat
    return [[x - iv.fsum(row) / len(row) for x in row] for row in mat]


class Head:
    """One head at query position p: the weights w(i, u) (step 2) and the
    centred value vectors through W_O, vo(i, u) (d,), for the positions and
    tokens the claim can place there."""

    def __init__(self, model, j: int, p: int, slots: list, w_o_c: list):
        q = model.q[j][p][slots[p][0]]  # (h,) the query token at p
        self.slots = slots  # slots[i] = the tokens position i may hold
        scores = {(i, u): iv.fsum(a * b for a, b in zip(q, model.key[j][i][u])) * model.scale
                  for i, toks in enumerate(slots) for u in toks}
        shift = iv.mpf(scores[(p, slots[p][0])].mid)  # any real: softmax is shift-invariant
        self.w = {key: exp_interval(s - shift) for key, s in scores.items()}
        self.vo = {key: forward._vecmat(model.val[j][key[0]][key[1]], w_o_c)
                   for key in scores}

    def ratio_holds(self, y, lam: float) -> bool:
        """Lemma R: True only if Σ_i a_i y(i, t_i) ≤ λ for every admissible t, where
        y(key) is an interval; confirmed in upward-rounded arithmetic (< 0)."""
        lam_iv, total = iv.mpf(lam), None
        for i, toks in enumerate(self.slots):
            term = None
            for u in toks:
                b = up_mul(self.w[(i, u)], up_diff(y((i, u)), lam_iv))
                term = b if term is None or greater(b, term) else term
            total = term if total is None else up_add(total, term)
        return below_zero(total)


# -- step 4-5: boxes, LayerNorm, MLP ----------------------------------------------------

def ln_scale(box: list, eps: float):
    """Lemma LN: an enclosure of sqrt(mean(c²) + ε) for c in the box (a list of
    intervals), using min/max of each c_k² (square_interval is exact)."""
    sq = [square_interval(c) for c in box]
    return sqrt_interval(iv.fsum(sq) / len(box) + iv.mpf(eps))


def ln_box(box: list, f, w: list | None, b: list | None) -> list:
    """LayerNorm's output over a box of centred inputs: c_k/σ·w_k + b_k."""
    if f.normalization is None:
        return box
    sigma = ln_scale(box, f.ln_eps)
    y = [c / sigma for c in box]
    return y if w is None else [a * wk + bk for a, wk, bk in zip(y, w, b)]


def mlp_hidden(m, f, x_in: list) -> list:
    """ReLU(x_in W_in + b_in) over intervals, x_in already normalised."""
    return forward._relu(forward._add(forward._vecmat(x_in, m["W_in"]), m["b_in"][0]))


# -- the rule -----------------------------------------------------------------------------

class AtQuery:
    """Everything at one query position p, in the order of steps 2-6."""

    def __init__(self, dims, m, model, claim: Overwhelm, p: int):
        f, d, self.v = dims.family, dims.d_model, dims.d_vocab
        self.f, self.m, self.claim, self.p = f, m, claim, p
        self.centre = f.normalization is not None
        s = len(claim.prefix)
        free = list(alphabet(dims, claim))
        slots = [[u] for u in claim.prefix] + [free] * (p - s) + [[claim.query]]
        h = dims.d_head
        w_o = m["W_O"]
        self.heads = [Head(model, j, p, slots, centred_rows(w_o[j * h:(j + 1) * h], self.centre))
                      for j in range(f.n_heads)]
        x_p = model.resid0[p][claim.query]
        self.base = self.centred(forward._add(x_p, m["b_O"][0]))  # c(x_p + b_O)  (d,)
        self.x_p = x_p

    def centred(self, x: list) -> list:
        if not self.centre:
            return x
        mean = iv.fsum(x) / len(x)
        return [a - mean for a in x]

    def attention_box(self, box_hint) -> list:
        """Step 4: the box of r_c, each head's coordinate ends confirmed by Lemma R."""
        out = list(self.base)
        for j, head in enumerate(self.heads):
            for k, (lo, hi) in enumerate(box_hint[j]):
                if not (lo <= hi and head.ratio_holds(lambda key: head.vo[key][k], hi)
                        and head.ratio_holds(lambda key: -head.vo[key][k], -lo)):
                    raise Rejected(f"overwhelm_family: the box hint [{lo}, {hi}] of head {j}, "
                                   f"coordinate {k} at query position {self.p} is not confirmed")
                out[k] = out[k] + iv.mpf((lo, hi))
        return out

    def mlp_part(self, r_box: list) -> tuple[list, list]:
        """Step 5: (hidden box, centred W_out) of the MLP, ([], []) without one."""
        f, m = self.f, self.m
        if not f.d_mlp:
            return [], []
        if f.parallel:
            x_in = forward.layer_norm(self.x_p, f.ln_eps, *self.ln_params("ln2")) \
                if self.centre else self.x_p
        else:
            x_in = ln_box(r_box, f, *self.ln_params("ln2"))
        return mlp_hidden(m, f, x_in), centred_rows(m["W_out"], self.centre)

    def ln_params(self, which: str):
        if self.f.normalization == "LN":
            return self.m[which + ".w"][0], self.m[which + ".b"][0]
        return None, None

    def check(self, box_hint, diff_hint) -> None:
        """Steps 4-6: raise Rejected unless ℓ_m − ℓ_o < 0 for every m ≠ o."""
        m, o = self.m, self.claim.output
        r_box = self.attention_box(box_hint)
        hidden, w_out_c = self.mlp_part(r_box)
        mlp_c = self.centred(m["b_out"][0]) if self.f.d_mlp else None
        final = r_box
        if hidden:
            final = forward._add(forward._add(r_box, forward._vecmat(hidden, w_out_c)), mlp_c)
        sigma = ln_scale(final, self.f.ln_eps) if self.centre else iv.mpf(1)
        w_f, b_f = self.ln_params("ln_final")
        u = m["W_U"]
        for t in range(self.v):
            if t == o:
                continue
            g_d = [row[t] - row[o] for row in u]  # D_t
            g = g_d if w_f is None else [a * b for a, b in zip(g_d, w_f)]
            numer = self.numerator(t, g, diff_hint, hidden, w_out_c, mlp_c)
            const = m["b_U"][0][t] - m["b_U"][0][o]
            if b_f is not None:
                const = const + iv.fsum(a * b for a, b in zip(g_d, b_f))
            bound = up_add(_upper_ratio(numer, sigma), upper(const))
            if not below_zero(bound):
                raise Rejected(f"overwhelm_family: at query position {self.p}, the bound on "
                               f"logit {t} − logit {o} is not negative")

    def numerator(self, t: int, g: list, diff_hint, hidden, w_out_c, mlp_c):
        """Step 6: an upper bound of r'_c·g (a raw number): the constant part
        exactly, each head's attention part by a confirmed Lemma R bound, the
        MLP part over the hidden box."""
        total = upper(iv.fsum(a * b for a, b in zip(self.base, g)))
        for j, head in enumerate(self.heads):
            lam = diff_hint[j][t]
            proj = {key: iv.fsum(a * b for a, b in zip(vo, g)) for key, vo in head.vo.items()}
            if not head.ratio_holds(proj.__getitem__, lam):
                raise Rejected(f"overwhelm_family: the diff hint {lam} of head {j} for logit {t} "
                               f"at query position {self.p} is not confirmed")
            total = up_add(total, upper(iv.mpf(lam)))
        if hidden:
            col = [iv.fsum(a * b for a, b in zip(row, g)) for row in w_out_c]  # W_out_c g (d_mlp,)
            total = up_add(total, upper(iv.fsum(a * b for a, b in zip(hidden, col))))
            total = up_add(total, upper(iv.fsum(a * b for a, b in zip(mlp_c, g))))
        return total


def _upper_ratio(numer, sigma):
    """An upper bound of N/σ for N ≤ numer (raw) and σ in the interval sigma (> 0):
    numer/σ_lo if numer >= 0, else numer/σ_hi, rounded upward."""
    lo, hi = sigma._mpi_
    if not mpf_lt(fzero, lo):
        raise Rejected("overwhelm_family: a LayerNorm scale enclosure reaches 0")
    return mpf_div(numer, hi if mpf_lt(numer, fzero) else lo, WORKING_PRECISION, round_ceiling)


def _cost(dims, claim: Overwhelm, n_alpha: int) -> int:
    f, d, v, k, h = dims.family, dims.d_model, dims.d_vocab, dims.n_ctx, dims.d_head
    tables = f.n_heads * 3 * v * k * d * h + v * k * 20 * d
    per_p = sum(f.n_heads * ((2 * d + v) * (p + 1) * n_alpha * 6 + (p + 1) * n_alpha * d * (d + v))
                + 2 * d * f.d_mlp + v * (d + f.d_mlp) for p in positions(claim))
    return tables + per_p


def check(dims, mats, claim: Overwhelm, hints, charge, arith=None) -> str:
    """Confirm the claim for every query position; raise Rejected otherwise."""
    free = alphabet(dims, claim)
    bounds = parse_hints(hints, dims, claim)
    charge(_cost(dims, claim, len(free)))
    model = forward._Model(dims, mats, charge)
    for p in positions(claim):
        charge(0)  # enforces the time limit
        box, diff = bounds[p]
        AtQuery(dims, mats, model, claim, p).check(box, diff)
    kind = "permutation (relaxed)" if claim.free_perm is not None else f"{len(free)} free token(s)"
    return (f"output {claim.output} forced at {len(positions(claim))} length(s), {kind}, "
            f"{dims.family.n_heads} head(s) (LayerNorm/MLP/RoPE bounds)")
