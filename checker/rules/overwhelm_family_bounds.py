"""Algorithm 1's bounds for rule overwhelm_family (overwhelm_family.py: the theorem, the
claim and the dispatch; spec/rules.md §overwhelm_family, spec/overwhelm.md §1, §5b): the
hints' shapes and their decoding, step 1's tables (Tables, over forward_model._Model), steps
2-3's attention weights and Lemma R (Head), step 5's Lemma LN (ln_scale), the claim-wide
functionals and steps 2-6 at one query position (AtQuery), and the work and memory the rule
charges before it builds them.

The rule and its parts (overwhelm_family_arb.py, overwhelm_family_float32.py,
overwhelm_deep.py, overwhelm_deep_float32.py) import this module; it imports none of them,
so the import graph is a tree.  Every name here stays reachable as overwhelm_family.X.
"""

from __future__ import annotations

import math

from mpmath import iv
from mpmath.libmp import fzero, mpf_div, mpf_lt, round_ceiling, to_float

from .. import ops
from ..arith import MPMATH
from ..elementary import sqrt_interval, square_interval
from ..errors import Malformed, Rejected
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
from . import forward_model
from .overwhelm import positions
from .overwhelm_perm import dual_bound

HINT_FIELDS = ("box", "pre", "diff", "dir", "dir_lo")


# -- the hints -------------------------------------------------------------------------------

def alphabet(dims, claim: Overwhelm) -> tuple:
    """The free tokens: `over`, all tokens, or the distinct tokens of free_perm."""
    if claim.free_perm is not None:
        return tuple(sorted(set(claim.free_perm)))
    return claim.over if claim.over is not None else tuple(range(dims.d_vocab))


def n_functionals(dims) -> int:
    """Lemma R bounds per head: box (2d), pre (2·d_mlp), diff (v), dir (2) — see `key`."""
    return 2 * dims.d_model + 2 * dims.family.d_mlp + dims.d_vocab + 2


def key(dims, kind: str, k: int, side: int = 1) -> int:
    """The index of one Lemma R bound (its potentials in perm_u): side 0 lower, 1 upper."""
    d, dm, v = dims.d_model, dims.family.d_mlp, dims.d_vocab
    return {"box": 2 * k + side, "pre": 2 * d + 2 * k + side, "diff": 2 * d + 2 * dm + k,
            "dir": 2 * d + 2 * dm + v + k}[kind]


def hint_fields(claim: Overwhelm) -> tuple:
    """The hint arrays of one entry: perm_u (dual potentials) only for a permutation claim."""
    return HINT_FIELDS + (("perm_u",) if claim.free_perm is not None else ())


def hint_shapes(dims, claim: Overwhelm | None = None) -> dict[str, tuple]:
    """The shape of each hint array at one query position."""
    nh, d, v, dm = dims.family.n_heads, dims.d_model, dims.d_vocab, dims.family.d_mlp
    n = len(claim.free_perm) if claim is not None and claim.free_perm is not None else 0
    return {"box": (nh, d, 2), "pre": (nh, dm, 2), "diff": (nh, v), "dir": (2, d),
            "dir_lo": (nh, 2), "perm_u": (nh, n_functionals(dims), n)}


def _nest(values, shape):
    """Flat row-major floats -> nested lists of `shape`."""
    if len(shape) == 1:
        return list(values)
    step = len(values) // shape[0] if shape[0] else 0
    return [_nest(values[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def decode_hint(text: object, shape: tuple, what: str) -> list:
    """One hint array of `shape` (n = prod(shape) values, row-major): base64 of n
    little-endian IEEE binary64 values (8n bytes) or of n binary32 values (4n bytes) — n is
    fixed by the shape, so the byte length decides; each value is its exact real (a binary32
    is a binary64 exactly).  Any other length, NaN or infinity is Malformed.  A hint is only
    a claimed bound the rule confirms (spec/format.md §hint encodings), so its precision is
    immaterial to soundness."""
    count = math.prod(shape)
    dtype = "f64"
    if isinstance(text, str) and count and len(text) % 4 == 0:
        size = 3 * (len(text) // 4) - (len(text) - len(text.rstrip("=")))
        if size == 4 * count:
            dtype = "f32"
        elif size != 8 * count:
            raise Malformed(f"{what}: {size} bytes, expected {count} binary64 values "
                            f"({8 * count} bytes) or {count} binary32 values ({4 * count} bytes)")
    return _nest(decode_floats(text, count, dtype, what), shape)


def hint_elements(dims, claim: Overwhelm) -> int:
    """The floats of all hint entries (one per query position), as decoded."""
    shapes = hint_shapes(dims, claim)
    per_position = sum(math.prod(shapes[name]) for name in hint_fields(claim))
    return per_position * len(positions(claim))


def parse_hints(hints, dims, claim: Overwhelm, charge) -> dict[int, dict]:
    """{"bounds": [[p, box, pre, diff, dir, dir_lo], ...]} -> {p: {field: nested floats}},
    charged to the memory limit before anything is decoded."""
    from ..certificate import hold

    want = positions(claim)
    if not (isinstance(hints, dict) and set(hints) == {"bounds"}
            and isinstance(hints["bounds"], list) and len(hints["bounds"]) == len(want)):
        raise Malformed('rule overwhelm_family: hints must be {"bounds": [[p, box, pre, diff, '
                        f'dir, dir_lo], ...]}} with one entry per query position ({len(want)})')
    hold(charge, hint_elements(dims, claim), "hints")
    shapes, out, fields = hint_shapes(dims, claim), {}, hint_fields(claim)
    for p, entry in zip(want, hints["bounds"]):
        if not (isinstance(entry, list) and len(entry) == 1 + len(fields)
                and type(entry[0]) is int and entry[0] == p):
            raise Malformed(f"rule overwhelm_family: the hint entry for query position {p} must "
                            f"be [p, {', '.join(fields)}]")
        charge(0)  # the clock
        out[p] = {}
        for name, text in zip(fields, entry[1:]):
            out[p][name] = decode_hint(text, shapes[name], f"hint {name} at {p}")
    return out


# -- step 1: tables -------------------------------------------------------------------------

def centred_rows(mat: list, centre: bool) -> list:
    """Each row minus its mean (enclosed): (y W)_c = y·c(W) since c is linear."""
    if not centre:
        return mat
    means = [iv.fsum(row) / len(row) for row in mat]
    return [[x - mean for x in row] for row, mean in zip(mat, means)]


def centred(x: list, centre: bool) -> list:
    if not centre:
        return x
    mean = iv.fsum(x) / len(x)
    return [a - mean for a in x]


def dot(x: list, y: list):
    return iv.fsum(a * b for a, b in zip(x, y))


class Tables:
    """The model's per-(position, token) tables and, per head, the centred
    value-output vectors vo_j(i, u) as rows of VO_j (rotary: one row per token,
    since values are not rotated and LN1(E[u]) does not depend on i).  MODEL: the
    forward pass whose tables are read (float32: their float32 enclosures)."""

    MODEL = forward_model._Model
    VO_MATMUL = staticmethod(ops.matmul)  # VO_j = values · centred W_O (arb: exactly, in bulk)

    def __init__(self, dims, m, charge):
        f = dims.family
        self.dims, self.m, self.f = dims, m, f
        self.centre = f.normalization is not None
        self.model = self.MODEL(dims, m, charge)  # charges its own tables
        self.tick = self.model.tick  # the clock
        v, k, h = dims.d_vocab, dims.n_ctx, dims.d_head
        self.per_position = f.positional == "standard"
        keys = [(i, u) for i in range(k if self.per_position else 1) for u in range(v)]
        self.vo = []
        for j in range(f.n_heads):
            w_o_c = centred_rows(m["W_O"][j * h:(j + 1) * h], self.centre)
            rows = [self.model.val[j][i][u] for i, u in keys]
            self.vo.append(self.VO_MATMUL(rows, w_o_c, self.tick))  # (rows, d)

    def row(self, i: int, u: int) -> int:
        return i * self.dims.d_vocab + u if self.per_position else u

    def project(self, a_columns: list) -> list:
        """Per head, VO_j · A for A (d × F) given as F columns: rows × F intervals."""
        a = ops.transpose(a_columns)
        return [self.matmul(vo, a) for vo in self.vo]

    def matmul(self, a: list, b: list) -> list:
        """ops.matmul(a, b) with the clock (the arb path's BatchedTables: the same values)."""
        return ops.matmul(a, b, self.tick)

    def matmul_t(self, a: list, b_rows: list) -> list:
        """ops.matmul(a, ops.transpose(b_rows)) with the clock (BatchedTables: the same)."""
        return ops.matmul(a, ops.transpose(b_rows), self.tick)


# -- steps 2-3: attention weights and Lemma R ------------------------------------------------

class Head:
    """Head j at query position p: w(i, u) for every slot (i, u) the claim allows."""

    def __init__(self, tables: Tables, j: int, p: int, slots: list, perm=None):
        model = tables.model
        q = model.q[j][p][slots[p][0]]  # (h,) the query token at p, rotated by p
        self.slots, self.tables = slots, tables
        scores = {(i, u): dot(q, model.key[j][i][u]) * model.scale
                  for i, toks in enumerate(tables.model.ticking(slots)) for u in toks}
        shift = iv.mpf(scores[(p, slots[p][0])].mid)  # any real: softmax is shift-invariant
        self.w = {key: exp_interval(s - shift) for key, s in scores.items()}
        # permutation claims: (free positions, the multiset's items, potentials[key] (n,))
        self.perm = perm

    def average_below(self, y: list, col: int, lam: float, sign: int = 1,
                      key: int | None = None) -> bool:
        """Lemma R: True only if Σ_i a_i·sign·y(i, t_i) ≤ λ for every admissible t,
        y given as a matrix with rows Tables.row(i, u) and column `col`.  For a
        permutation claim the free positions' part is bounded by the dual
        potentials perm_u[key] (Lemma R-perm, rule overwhelm_perm's dual_bound)."""
        lam_iv, total, row = iv.mpf(lam), None, self.tables.row

        def term(i, u):
            value = y[row(i, u)][col]
            return up_mul(self.w[(i, u)], up_diff(value if sign > 0 else -value, lam_iv))

        free = set(self.perm[0]) if self.perm else set()
        for i, toks in enumerate(self.slots):
            if i in free:
                continue
            best = None
            for u in toks:
                b = term(i, u)
                best = b if best is None or greater(b, best) else best
            total = best if total is None else up_add(total, best)
        if self.perm and self.perm[0]:
            positions_, items, potentials = self.perm
            cost = [[term(i, x) for x in items] for i in positions_]
            total = up_add(total, dual_bound(MPMATH, cost, potentials[key]))
        return below_zero(total)

    def confirm(self, y: list, col: int, lo: float | None, hi: float, what: str,
                keys: tuple = (None, None)):
        """The interval [lo, hi] (lo None: only the upper end) of head j's attention
        average of column `col` of y, after confirming it by Lemma R."""
        self.tables.tick()  # the clock, at every bound (each O(slots) operations)
        ok = self.average_below(y, col, hi, key=keys[1])
        if lo is not None:
            ok = ok and lo <= hi and self.average_below(y, col, -lo, sign=-1, key=keys[0])
        if not ok:
            raise Rejected(f"overwhelm_family: the hint for {what} is not confirmed")
        return iv.mpf((lo, hi)) if lo is not None else hi


# -- step 5: LayerNorm scale ------------------------------------------------------------------

def ln_scale(box: list, eps: float, e: list, lower_dot):
    """Lemma LN: an enclosure of sqrt(|c|²/d + ε) for c in `box` with c·e >= lower_dot."""
    d = len(box)
    sq = [square_interval(c) for c in box]
    lo_sum, hi_sum = iv.fsum(sq).a, iv.fsum(sq).b
    e_norm = iv.fsum(iv.mpf(x) * iv.mpf(x) for x in e)
    if lower_dot is not None and lower_dot > 0 and e_norm.a > 0:
        cs = (iv.mpf(lower_dot) ** 2 / e_norm).a  # Cauchy–Schwarz: |c|² >= (c·e)²/|e|²
        lo_sum = max(lo_sum, cs)
    if lo_sum > hi_sum:  # the box and the confirmed direction bound admit no c: fail closed
        raise Rejected("overwhelm_family: the LayerNorm direction bound contradicts the box")
    return sqrt_interval(iv.mpf((lo_sum, hi_sum)) / d + iv.mpf(eps))


def _upper_ratio(numer, sigma):
    """An upper bound of N/σ for N ≤ numer (raw) and σ in the interval sigma (> 0):
    numer/σ_lo if numer >= 0, else numer/σ_hi, rounded upward."""
    lo, hi = sigma._mpi_
    if not mpf_lt(fzero, lo):
        raise Rejected("overwhelm_family: a LayerNorm scale enclosure reaches 0")
    return mpf_div(numer, hi if mpf_lt(numer, fzero) else lo, WORKING_PRECISION, round_ceiling)


# -- steps 2-6 at one query position; the work and memory charged ----------------------------

class Functionals:
    """The claim-wide linear functionals (d-vectors) and their projections:
    g_m (logit differences) and a_k (MLP pre-activations), per head VO_j·[G | A]."""

    def __init__(self, tables: Tables, o: int):
        m, f, v = tables.m, tables.f, tables.dims.d_vocab
        self.w_f, self.b_f = ln_params(m, f, "ln_final")
        u = m["W_U"]
        self.d_u = [[row[t] - row[o] for row in u] for t in range(v)]  # D_t as (d,)
        self.g = [d_t if self.w_f is None else [a * b for a, b in zip(d_t, self.w_f)]
                  for d_t in self.d_u]
        self.y_g = tables.project(self.g)
        self.a = []
        if f.d_mlp and not f.parallel:
            w2, b2 = ln_params(m, f, "ln2")
            cols = ops.transpose(m["W_in"])  # (d_mlp, d)
            self.a = [c if w2 is None else [x * y for x, y in zip(c, w2)] for c in cols]
            self.y_a = tables.project(self.a)
            # the constant of pre-activation k: b_2·W_in[:, k] + b_in[k]
            b2_w = ops.matmul([b2], m["W_in"], tables.tick)[0] if b2 else [0] * f.d_mlp
            self.pre_const = [a + b for a, b in zip(b2_w, m["b_in"][0])]
        if f.d_mlp:  # c_rows(W_out) g_t and c(b_out)·g_t, for every t (d_mlp × v), (v,)
            self.w_out_c = centred_rows(m["W_out"], tables.centre)
            self.b_out_c = centred(m["b_out"][0], tables.centre)
            g_cols = ops.transpose(self.g)  # (d, v)
            self.out_g = ops.matmul(self.w_out_c, g_cols, tables.tick)
            self.b_out_g = ops.matmul([self.b_out_c], g_cols, tables.tick)[0]


def ln_params(m, f, which: str):
    if f.normalization == "LN":
        return m[which + ".w"][0], m[which + ".b"][0]
    return None, None


class AtQuery:
    """Steps 2-6 at one query position p.  HEAD: the heads' class (float32: its own)."""

    HEAD = Head

    def __init__(self, tables: Tables, fun: Functionals, claim: Overwhelm, p: int, hint: dict):
        self.t, self.fun, self.claim, self.p, self.hint = tables, fun, claim, p, hint
        self.f, self.m, self.centre = tables.f, tables.m, tables.centre
        s = len(claim.prefix)
        free = list(alphabet(tables.dims, claim))
        slots = [[u] for u in claim.prefix] + [free] * (p - s) + [[claim.query]]
        perm = [None] * self.f.n_heads
        if claim.free_perm is not None:  # Lemma R-perm: the potentials of each head
            perm = [(list(range(s, p)), claim.free_perm, hint["perm_u"][j])
                    for j in range(self.f.n_heads)]
        self.heads = [self.HEAD(tables, j, p, slots, perm[j]) for j in range(self.f.n_heads)]
        self.x_p = tables.model.resid0[p][claim.query]
        self.base = centred(forward_model._add(self.x_p, self.m["b_O"][0]), self.centre)
        self.base_g = ops.matmul([self.base], ops.transpose(fun.g), tables.tick)[0]  # (v,)
        self.base_a = ops.matmul([self.base], ops.transpose(fun.a), tables.tick)[0] \
            if fun.a else []

    def functional(self, base_dot, y: list, col: int, lo_hi: list, what: str, keys: tuple):
        """Step 3: the confirmed interval of r_c·a = base·a + Σ_j z_j·a (lo_hi[j] =
        [lo, hi] per head; lo None: upper end only), given base·a."""
        total = base_dot
        for j, head in enumerate(self.heads):
            total = total + head.confirm(y[j], col, lo_hi[j][0], lo_hi[j][1],
                                         f"{what}, head {j}, query position {self.p}", keys)
        return total

    def box(self) -> list:
        """Step 4: the box of r_c, coordinate k from the columns of VO_j."""
        box = self.hint["box"]
        return [self.base[k] + iv.fsum(
            head.confirm(self.t.vo[j], k, box[j][k][0], box[j][k][1],
                         f"box coordinate {k}, head {j}, query position {self.p}",
                         (key(self.t.dims, "box", k, 0), key(self.t.dims, "box", k, 1)))
            for j, head in enumerate(self.heads)) for k in range(len(self.base))]

    def direction(self, which: int, extra_lower=None):
        """(e, a lower bound of r_c·e (+ extra_lower)) for hinted direction e_which,
        or (e, None) when e is zero."""
        e = self.hint["dir"][which]
        if not any(e):
            return e, None
        confirmed = self.confirmed_directions(e, which)  # the reference: none in advance
        y = None
        total = dot(self.base, [iv.mpf(x) for x in e])
        for j, head in enumerate(self.heads):
            self.t.tick()  # the clock, at every bound
            lam = self.hint["dir_lo"][j][which]
            if j not in confirmed:
                if y is None:
                    y = self.t.project([[iv.mpf(x) for x in e]])
                if not head.average_below(y[j], 0, -lam, sign=-1,
                                          key=key(self.t.dims, "dir", which)):
                    raise Rejected(f"overwhelm_family: the direction hint {which} of head {j} "
                                   f"at query position {self.p} is not confirmed")
            total = total + iv.mpf(lam)
        if extra_lower is not None:
            total = total + extra_lower(e)  # e as floats
        return e, total.a

    def confirmed_directions(self, e: list, which: int) -> tuple:
        """The heads j whose direction bound (z_j·e ≥ dir_lo[j][which], Lemma R on VO_j·e) a
        faster exact test has already confirmed; the reference confirms each below."""
        return ()

    def hidden(self, r_box: list) -> list:
        """Step 5: the box of the MLP's hidden layer ([] without an MLP)."""
        f, m = self.f, self.m
        if not f.d_mlp:
            return []
        if f.parallel:
            x_in = forward_model.layer_norm(self.x_p, f.ln_eps, *ln_params(m, f, "ln2")) \
                if self.centre else self.x_p
            return forward_model.activate(f.act_fn, forward_model._add(
                self.t.matmul([x_in], m["W_in"])[0], m["b_in"][0]), self.t.model.charge)
        sigma = iv.mpf(1)
        if self.centre:
            sigma = ln_scale(r_box, f.ln_eps, *self.direction(0))
        out = []
        for k in range(len(self.fun.a)):
            numer = self.functional(self.base_a[k], self.fun.y_a, k,
                                    [self.hint["pre"][j][k] for j in range(f.n_heads)],
                                    f"pre-activation {k}", (key(self.t.dims, "pre", k, 0),
                                                            key(self.t.dims, "pre", k, 1)))
            out.append(forward_model.activate(f.act_fn, [numer / sigma + self.fun.pre_const[k]],
                                              self.t.model.charge)[0])
        return out

    def logit_const(self, t: int):
        """The constant of logit t − logit o: b_U[t] − b_U[o] (+ b_f·D_t with LayerNorm)."""
        m, o, fun = self.m, self.claim.output, self.fun
        const = m["b_U"][0][t] - m["b_U"][0][o]
        if fun.b_f is not None:
            const = const + dot(fun.d_u[t], fun.b_f)
        return const

    def check(self) -> None:
        """Step 6: raise Rejected unless ℓ_m − ℓ_o < 0 for every m ≠ o.  Kept for a rule's
        note (reports only, spec/rules.md §distance to float32): the smallest slack
        −bound (binary64), its logit and σ (self.slack, self.worst, self.sigma)."""
        f, o, fun = self.f, self.claim.output, self.fun
        r_box = self.box()
        hidden = self.hidden(r_box)
        final, mlp_g = r_box, [iv.mpf(0)] * self.t.dims.d_vocab
        if hidden:
            final = forward_model._add(forward_model._add(
                r_box, self.t.matmul([hidden], fun.w_out_c)[0]), fun.b_out_c)
            mlp_g = forward_model._add(self.t.matmul([hidden], fun.out_g)[0], fun.b_out_g)

        def mlp_dot(e):  # hidden·(c(W_out) e) + c(b_out)·e, an interval
            if not hidden:
                return iv.mpf(0)
            col = self.t.matmul(fun.w_out_c, [[iv.mpf(x)] for x in e])  # (d_mlp, 1)
            return dot(hidden, [c[0] for c in col]) + dot(fun.b_out_c, [iv.mpf(x) for x in e])

        sigma = iv.mpf(1)
        if self.centre:
            e, low = self.direction(1, mlp_dot)
            sigma = ln_scale(final, f.ln_eps, e, low)
        self.slack, self.worst, self.sigma = None, None, sigma
        for t in range(self.t.dims.d_vocab):
            if t == o:
                continue
            numer = upper(self.functional(self.base_g[t], fun.y_g, t,
                                          [[None, self.hint["diff"][j][t]]
                                           for j in range(f.n_heads)], f"logit difference {t}",
                                          (None, key(self.t.dims, "diff", t))))
            numer = up_add(numer, upper(mlp_g[t]))
            bound = up_add(_upper_ratio(numer, sigma), upper(self.logit_const(t)))
            if not below_zero(bound):
                raise Rejected(f"overwhelm_family: at query position {self.p}, the bound on "
                               f"logit {t} − logit {o} is not negative")
            slack = -to_float(bound)
            if self.slack is None or slack < self.slack:
                self.slack, self.worst = slack, t


def _cost(dims, claim: Overwhelm, n_alpha: int) -> int:
    f, d, v, k, h = dims.family, dims.d_model, dims.d_vocab, dims.n_ctx, dims.d_head
    rows = v * k if f.positional == "standard" else v
    tables = f.n_heads * (3 * v * k * d * h + rows * d * (h + v + f.d_mlp)) + v * k * 20 * d
    functionals = 2 * d + 2 * f.d_mlp + v + 2
    return tables + sum(f.n_heads * functionals * (p + 1) * n_alpha * 6 + rows * d
                        + (4 * d + 1) * f.d_mlp
                        + v * (2 * d + f.d_mlp) for p in positions(claim))


def table_elements(dims) -> int:
    """The elements of Tables and Functionals beyond forward_model._Model's
    (forward_model.table_elements):
    VO_j (rows × d) and one centred W_O block per head, the functionals g, D (v × d each) and
    their projections (rows × v per head), the MLP's a_k and W_in's columns (d_mlp × d each)
    and projections (rows × d_mlp per head), c(W_out) (d_mlp × d), G's columns (d × v),
    c(W_out)·G (d_mlp × v), and the vectors beside them."""
    f, v, k, d, h = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    rows = v * k if f.positional == "standard" else v
    dm = f.d_mlp
    per_head = rows * d + h * d + rows * v + rows * dm
    return f.n_heads * per_head + 2 * v * d + 3 * dm * d + d * v + dm * v + 3 * dm + 2 * v + d


def query_elements(dims, claim: Overwhelm, p: int) -> int:
    """The elements built at query position p (AtQuery, kept until the next): per head the
    scores and weights of every admissible slot and a projected direction (rows), a
    permutation claim's cost matrix (|X|²), and the vectors base, base·g, base·a, box,
    hidden."""
    f, v, d = dims.family, dims.d_vocab, dims.d_model
    rows = v * dims.n_ctx if f.positional == "standard" else v
    s, n = len(claim.prefix), len(claim.free_perm or ())
    slots = s + 1 + (p - s) * len(alphabet(dims, claim))
    return f.n_heads * (2 * slots + 2 * rows + n * n) + v + 3 * d + 3 * f.d_mlp
