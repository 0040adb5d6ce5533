"""Rule overwhelm_family under `--arith arb`: Lemma R's upper-bound arithmetic with Arb
(python-flint) on the one-layer path (spec/rules.md §overwhelm_family,
spec/arithmetic.md §Lemma R with Arb).

The theorem, the tables, the hints and every other step are overwhelm_family.py's (the
inputs are its mpmath intervals: certificate.py builds them in mpmath, INPUT_ARITHMETIC).
Only Lemma R's hot loop changes back-end: for a functional y (a column of a table, as
mpmath intervals) and a hinted λ, the bound

    Σ_{i} max_{u ∈ slots(i)} up_mul(w(i, u), up_diff(sign·y(i, u), λ))

is the reference's expression term by term, on the same exact endpoints (the mpmath
intervals' endpoints are dyadic rationals, converted to Arb points exactly), with each
operation's result replaced by the upper end of Arb's ball at ARB_PRECISION = 128 bits
(arb.upper(): arb_get_ubound_arf, rounded up) instead of mpmath's ceiling at 80 bits:

- up_diff: sign·y's upper end minus λ's lower end (λ a binary64 hint: exact), rounded up;
- up_mul: the weight's lower end if the bound a < 0, else its upper end, times a, rounded
  up (w >= 0 is checked, as the reference does: a weight enclosure reaching below 0 is
  Rejected);
- the maximum over a free position's tokens: exact comparison of exact points;
- the sum over positions: rounded up; the verdict: the total < 0, exact.

Each result is >= the exact value of its operation on its inputs, and each operation is
monotone in the bounded input (w >= 0), so the total bounds the left side of Lemma R
from above (spec/overwhelm.md §1): the same quantity bounded as the reference bounds it,
at a higher precision.  A non-finite endpoint (an infinite or NaN enclosure) is not
converted: that bound is computed by the reference (mpmath) path itself.  Permutation
claims (Lemma R-perm, dual potentials) stay on the reference path.

The tables (forward._Model's queries, keys and values, per (position, token)) are the
reference's values bit for bit: each product x·W_name[head] is computed for all the tokens of
a position and every head and name at once (`exact_matmul`) instead of one vector at a time.
arith/mp.matmul's result is the exact interval-arithmetic product rounded outward once to
the working precision; when one factor's entries are all points (the weights, recorded
points), that exact product is two integer matrix products per endpoint on the endpoints
scaled to a common exponent (FLINT fmpz_mat_mul: exact), with B⁺ = max(B, 0),
B⁻ = min(B, 0):  lo = A_lo·B⁺ + A_hi·B⁻,  hi = A_hi·B⁺ + A_lo·B⁻  (each term's interval
product x·y with y a point is [x_lo·y, x_hi·y] if y >= 0, else [x_hi·y, x_lo·y]), and
symmetrically for a point A; rounded outward by the same from_man_exp calls.  Any other
case is arith/mp.matmul itself.

LayerNorm, RoPE (raw_layer_norm, raw_rotate), the attention weights (raw_head) and the logit
constants (once per claim) are the reference's own mpmath interval operations on raw (lo, hi)
pairs, bit for bit; the per-query products (BatchedTables.matmul, int_matmul) are mp.matmul's
loop on the constant operands' integer forms, converted once (spec/arithmetic.md).

The conversions are done once per table (a column's upper ends and negated lower ends, on
first use) and once per query position (the weights' ends), so the per-term work is four
Arb operations on exact points.
"""

from __future__ import annotations

import math

from mpmath import iv
from mpmath.libmp import from_int, from_man_exp, fzero, round_ceiling, round_floor
from mpmath.libmp.libmpi import mpi_abs, mpi_add, mpi_div, mpi_mul, mpi_sub, mpi_zero

from ..arith import mp
from ..arith.arb import flint_module
from ..elementary import sqrt_interval
from ..numbers import WORKING_PRECISION, exp_interval
from . import forward
from .overwhelm_family import AtQuery, Head, Tables, alphabet, centred


def exact_matmul(a: list, b: list, tick) -> list:
    """arith/mp.matmul(a, b, tick)'s result, identical entry by entry, by exact integer
    matrix products (fmpz_mat) when a or b has only point entries (module docstring)."""
    fmpz_mat = flint_module().fmpz_mat
    a_lo, a_hi, a_exp = mp._to_integers(a)
    b_lo, b_hi, b_exp = mp._to_integers(b)
    if b_lo == b_hi:
        pos = fmpz_mat([[max(x, 0) for x in r] for r in b_lo])
        neg = fmpz_mat([[min(x, 0) for x in r] for r in b_lo])
        lo_m, hi_m = fmpz_mat(a_lo), fmpz_mat(a_hi)
        lo, hi = lo_m * pos + hi_m * neg, hi_m * pos + lo_m * neg
    elif a_lo == a_hi:
        pos = fmpz_mat([[max(x, 0) for x in r] for r in a_lo])
        neg = fmpz_mat([[min(x, 0) for x in r] for r in a_lo])
        lo_m, hi_m = fmpz_mat(b_lo), fmpz_mat(b_hi)
        lo, hi = pos * lo_m + neg * hi_m, pos * hi_m + neg * lo_m
    else:
        return mp.matmul(a, b, tick)
    exponent, prec, out = a_exp + b_exp, WORKING_PRECISION, []
    cols = len(b[0]) if b else 0
    for i in range(len(a)):
        tick()
        out.append([iv.make_mpf((from_man_exp(int(lo[i, j]), exponent, prec, round_floor),
                                 from_man_exp(int(hi[i, j]), exponent, prec, round_ceiling)))
                    for j in range(cols)])
    return out


class _BatchedModel(forward._Model):
    """forward._Model's one-layer tables (the same values, the same charges), its products
    batched by exact_matmul (one product for every position, token, head and name); every
    other method is the reference's."""

    def __init__(self, dims, m, charge):  # forward._Model.__init__, one layer
        from ..certificate import hold

        f = dims.family
        self.dims, self.f, self.m = dims, f, m
        v, k, h, d = dims.d_vocab, dims.n_ctx, dims.d_head, dims.d_model
        charge(forward.table_cost(dims))
        hold(charge, forward.table_elements(dims), "forward tables")
        self.tick = lambda: charge(0)
        self.charge = charge
        self.scale = forward.inv_sqrt_interval(h)
        self.resid0 = [[self.embed(t, i) for t in self.ticking(range(v))] for i in range(k)]
        normed = [[self.norm_raw("ln1", x) for x in self.ticking(row)] for row in self.resid0]
        blocks = [(name, j) for name in "QKV" for j in range(f.n_heads)]
        # the columns of every W_name[head] side by side: d × (3·n_heads·h)
        w_all = [[x for name, j in blocks for x in m["W_" + name][j * d + r]] for r in range(d)]
        tables = {block: [] for block in blocks}
        # every (position, token) row times every block: one product, (k·v) × (3·n_heads·h)
        product = exact_matmul([x for row in normed for x in row], w_all, self.tick)
        for i in range(k):
            rows = product[i * v:(i + 1) * v]
            for n, (name, j) in enumerate(blocks):
                bias = _raws(m["b_" + name][j])  # forward._add(x, bias), bit for bit
                tables[(name, j)].append([[iv.make_mpf(mpi_add(a._mpi_, b, iv.prec))
                                           for a, b in zip(p[n * h:(n + 1) * h], bias)]
                                          for p in rows])
        self.q, self.key, self.val = [], [], []
        for j in range(f.n_heads):
            q, key, val = (tables[(name, j)] for name in "QKV")
            if f.positional == "rotary":
                q = [[self.rotate_raw(x, i) for x in self.ticking(row)]
                     for i, row in enumerate(q)]
                key = [[self.rotate_raw(x, i) for x in self.ticking(row)]
                       for i, row in enumerate(key)]
            self.q.append(q)
            self.key.append(key)
            self.val.append(val)
        self.w_o = [[m["W_O"][j * h:(j + 1) * h] for j in range(f.n_heads)]]
        self.path = []
        self.position_work = forward.position_cost(dims)

    def norm_raw(self, which: str, x: list) -> list:
        """self.norm(which, x), bit for bit: LayerNorm / LNPre by raw_layer_norm (the same
        operations), any other normalisation by the reference."""
        norm = self.f.normalization
        if norm not in ("LN", "LNPre"):
            return self.norm(which, x)
        w = b = None
        if norm == "LN":
            name = forward.layer_short(0, which)
            w, b = _raws(self.m[name + ".w"][0]), _raws(self.m[name + ".b"][0])
        return [iv.make_mpf(y) for y in raw_layer_norm(_raws(x), self.f.ln_eps, w, b, iv.prec)]

    def rotate_raw(self, x: list, i: int) -> list:
        """self.rotate(x, i), bit for bit (raw_rotate: the same operations)."""
        out = raw_rotate(_raws(x), _raws(self.m["ROPE_COS"][i]), _raws(self.m["ROPE_SIN"][i]),
                         self.f.rotary_dim, iv.prec)
        return [iv.make_mpf(y) for y in out]


def _raws(xs: list) -> list:
    """The raw (lo, hi) of each entry, as mpmath's interval operations convert it (an
    iv.mpf as is; a number exactly, ivmpf.convert)."""
    return [x._mpi_ if hasattr(x, "_mpi_") else iv.convert(x)._mpi_ for x in xs]


class BatchedTables(Tables):
    """overwhelm_family.Tables with the model's tables from _BatchedModel (the same
    values); VO_j as the reference computes it."""

    def __init__(self, dims, m, charge):  # overwhelm_family.Tables.__init__
        from .overwhelm_family import centred_rows

        f = dims.family
        self.dims, self.m, self.f = dims, m, f
        self.centre = f.normalization is not None
        self.model = _BatchedModel(dims, m, charge)
        self.tick = self.model.tick
        v, k, h = dims.d_vocab, dims.n_ctx, dims.d_head
        self.per_position = f.positional == "standard"
        keys = [(i, u) for i in range(k if self.per_position else 1) for u in range(v)]
        self.vo = []
        for j in range(f.n_heads):
            w_o_c = centred_rows(m["W_O"][j * h:(j + 1) * h], self.centre)
            rows = [self.model.val[j][i][u] for i, u in keys]
            self.vo.append(exact_matmul(rows, w_o_c, self.tick))
        self.ints = {}  # id(matrix) -> (matrix, IntMatrix): the constant operands' integers

    def integers(self, m: list):
        """m's IntMatrix, kept (charged to the memory limit: two integers per entry) when m
        is a matrix (>= 2 rows and columns: the tables' and functionals' constants; the
        per-query vectors and columns are converted afresh)."""
        if len(m) < 2 or len(m[0]) < 2:
            return IntMatrix(m)
        hit = self.ints.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        from ..certificate import hold

        hold(self.model.charge, 2 * len(m) * len(m[0]), "integer forms of the tables")
        out = IntMatrix(m)
        self.ints[id(m)] = (m, out)
        return out

    def matmul(self, a: list, b: list) -> list:
        """ops.matmul(a, b)'s value entry by entry (int_matmul), the constant operands'
        integers converted once."""
        return int_matmul(self.integers(a).rows(), self.integers(b).cols(), self.tick)

    def matmul_t(self, a: list, b_rows: list) -> list:
        """ops.matmul(a, ops.transpose(b_rows))'s value entry by entry."""
        return int_matmul(self.integers(a).rows(), self.integers(b_rows).rows(), self.tick)


class IntMatrix:
    """A matrix of intervals as arith/mp._to_integers makes it (integer endpoints lo, hi
    and the common exponent E: entry [i][j] = [lo·2^E, hi·2^E] exactly), in row and (lazily)
    column order."""

    def __init__(self, m: list):
        self.lo, self.hi, self.exp = mp._to_integers(m)
        self._cols = None

    def rows(self):
        return self.lo, self.hi, self.exp

    def cols(self):
        if self._cols is None:
            self._cols = ([list(c) for c in zip(*self.lo)], [list(c) for c in zip(*self.hi)],
                          self.exp)
        return self._cols


def int_matmul(a_rows, b_cols, tick) -> list:
    """arith/mp.matmul's own loop on integer forms (mp.int_matmul): the same integers as
    mp.matmul's (mp._to_integers of the same matrix, or of its transpose: the same entries,
    the same minimum exponent), so the same values."""
    return mp.int_matmul(a_rows, b_cols, tick)


class _Converter:
    """Exact conversion of mpmath raw numbers to Arb points, and per-table column caches."""

    def __init__(self):
        flint = flint_module()
        self.arb, self.arf = flint.arb, flint.arf
        self.zero = flint.arb(0)
        self.columns = {}  # (id(table), col, sign) -> (table, [arb points]) or None
        self.consts = {}  # (id(fun), o, t) -> (fun, AtQuery.logit_const(t))
        self.charge = None  # the rule's charge (set by ArbAtQuery): the caches' memory

    def point(self, raw):
        """The mpmath raw number `raw` as an exact Arb point; None if not finite."""
        sign, man, exp, _ = raw
        if not man:
            return self.zero if raw == fzero else None  # inf, -inf, nan: not converted
        return self.arb(self.arf((-man if sign else man, exp)))

    def column(self, table: list, col: int, sign: int):
        """Upper ends of sign·table[r][col] for every row r (exact points), or None if one is
        not finite.  Cached per table object (kept alive with its entry)."""
        key = (id(table), col, sign)
        hit = self.columns.get(key)
        if hit is not None and hit[0] is table:
            return hit[1]
        if self.charge is not None:  # the memory limit, before the column is built
            from ..certificate import hold

            hold(self.charge, len(table), "Arb column caches")
        out = []
        for row in table:
            lo, hi = row[col]._mpi_
            x = self.point(hi) if sign > 0 else self.point(lo)
            if x is None:
                out = None
                break
            out.append(x if sign > 0 else -x)  # negation of a point: exact
        self.columns[key] = (table, out)
        return out


class ArbHead(Head):
    """overwhelm_family.Head with Lemma R's sum computed with Arb points (module docstring)."""

    def __init__(self, head: Head, conv: _Converter):  # the reference head's fields
        self.slots, self.tables, self.w, self.perm = head.slots, head.tables, head.w, head.perm
        self.conv = conv
        self.w_ends = {}  # (i, u) -> (w_lo, w_hi) as Arb points
        # usable: every weight's ends finite and w_lo >= 0 (else the reference path, which
        # rejects a weight reaching below 0 as numbers.up_mul does)
        self.usable = True
        for slot, w in head.w.items():
            lo, hi = (conv.point(x) for x in w._mpi_)
            if lo is None or hi is None or not lo >= conv.zero:
                self.usable = False
            self.w_ends[slot] = (lo, hi)
        # per position, its slots as (table row, w_lo, w_hi), in the reference's order
        row = head.tables.row
        self.groups = [[(row(i, u),) + self.w_ends[(i, u)] for u in toks]
                       for i, toks in enumerate(head.slots)]

    def average_below(self, y: list, col: int, lam: float, sign: int = 1,
                      key: int | None = None) -> bool:
        if self.perm:  # Lemma R-perm: the reference path
            return super().average_below(y, col, lam, sign, key)
        values = self.conv.column(y, col, sign)
        finite = isinstance(lam, float) and math.isfinite(lam)
        lam_point = self.conv.arb(lam) if finite else None  # arf_set_d: exact
        if values is None or lam_point is None or not self.usable:
            return super().average_below(y, col, lam, sign, key)
        zero, total = self.conv.zero, None
        for group in self.groups:  # position i
            best = None
            for r, w_lo, w_hi in group:  # token u: row r = Tables.row(i, u), w(i, u)
                a = (values[r] - lam_point).upper()  # up_diff
                b = ((w_lo if a < zero else w_hi) * a).upper()  # up_mul
                if best is None or b > best:
                    best = b
            total = best if total is None else (total + best).upper()  # up_add
        return total < zero  # below_zero


class ArbAtQuery(AtQuery):
    """overwhelm_family.AtQuery whose heads compute Lemma R with Arb."""

    def __init__(self, tables, fun, claim, p: int, hint: dict, conv: _Converter):
        # AtQuery.__init__ (a free claim: perm None) with each head's weights by raw_head
        conv.charge, self.conv = tables.model.charge, conv
        self.t, self.fun, self.claim, self.p, self.hint = tables, fun, claim, p, hint
        self.f, self.m, self.centre = tables.f, tables.m, tables.centre
        s = len(claim.prefix)
        free = list(alphabet(tables.dims, claim))
        slots = [[u] for u in claim.prefix] + [free] * (p - s) + [[claim.query]]
        self.heads = [ArbHead(raw_head(tables, j, p, slots), conv)
                      for j in range(self.f.n_heads)]
        self.x_p = tables.model.resid0[p][claim.query]
        self.base = centred(forward._add(self.x_p, self.m["b_O"][0]), self.centre)
        self.base_g = tables.matmul_t([self.base], fun.g)[0]  # (v,)
        self.base_a = tables.matmul_t([self.base], fun.a)[0] if fun.a else []

    def logit_const(self, t: int):
        """AtQuery.logit_const(t), computed once per (functionals, output, t) for the whole
        claim (it does not depend on the query position): the same value."""
        key = (id(self.fun), self.claim.output, t)
        hit = self.conv.consts.get(key)
        if hit is not None and hit[0] is self.fun:
            return hit[1]
        from ..certificate import hold

        hold(self.conv.charge, 1, "logit constants")
        const = super().logit_const(t)
        self.conv.consts[key] = (self.fun, const)
        return const


def raw_head(tables, j: int, p: int, slots: list) -> Head:
    """Head(tables, j, p, slots) (free claim), its weights bit for bit: each score
    dot(q, key)·scale by raw_dot and one mpi_mul, the shift from the reference's score at
    (p, query), then exp_interval(s − shift) (mpi_sub) as the reference."""
    model, prec = tables.model, iv.prec
    q = _raws(model.q[j][p][slots[p][0]])
    scale = model.scale._mpi_
    scores = {(i, u): mpi_mul(raw_dot(q, _raws(model.key[j][i][u]), prec), scale, prec)
              for i, toks in enumerate(model.ticking(slots)) for u in toks}
    shift = iv.mpf(iv.make_mpf(scores[(p, slots[p][0])]).mid)._mpi_
    head = Head.__new__(Head)
    head.slots, head.tables, head.perm = slots, tables, None
    head.w = {k: exp_interval(iv.make_mpf(mpi_sub(x, shift, prec))) for k, x in scores.items()}
    return head


def query_checker(claim):
    """A constructor (tables, fun, claim, p, hint) -> AtQuery for `--arith arb`: the Arb
    heads for a free claim, the reference AtQuery for a permutation claim."""
    if claim.free_perm is not None:
        return AtQuery
    conv = _Converter()
    return lambda tables, fun, claim, p, hint: ArbAtQuery(tables, fun, claim, p, hint, conv)


# -- the reference's scalar interval steps on raw mpmath intervals ---------------------------
# Each helper below performs exactly the reference's sequence of mpmath interval operations
# (the same libmpi functions, in the same order, at the same precision iv.prec), on the raw
# (lo, hi) pairs instead of iv.mpf objects: the results are the reference's bit for bit; only
# the per-operation object overhead (type dispatch, conversion, allocation) is saved.

def raw_dot(x: list, y: list, prec: int):
    """overwhelm_family.dot(x, y)'s raw interval: iv.fsum(a·b) = ((0 + x0·y0) + x1·y1) + ...
    (iv.fsum is sum(args, iv.zero)), each step mpi_mul / mpi_add at `prec`."""
    total = mpi_zero
    for a, b in zip(x, y):
        total = mpi_add(total, mpi_mul(a, b, prec), prec)
    return total


def raw_rotate(x: list, cos_row: list, sin_row: list, rotary_dim: int, prec: int) -> list:
    """forward._rotate on raw intervals: (a·cos − b·sin, b·cos + a·sin) per pair."""
    half = rotary_dim // 2
    out = list(x)
    for j in range(half):
        a, b, c, s = x[j], x[j + half], cos_row[j], sin_row[j]
        out[j] = mpi_sub(mpi_mul(a, c, prec), mpi_mul(b, s, prec), prec)
        out[j + half] = mpi_add(mpi_mul(b, c, prec), mpi_mul(a, s, prec), prec)
    return out


def raw_layer_norm(x: list, eps: float, w: list | None, b: list | None, prec: int) -> list:
    """forward.layer_norm on raw intervals, step for step: mean = fsum(x)/n, c = x − mean,
    var = fsum(|c|·|c|)/n (elementary.square_interval), scale = sqrt_interval(var + eps),
    y = c/scale (· w + b)."""
    n = len(x)
    n_raw = (from_int(n), from_int(n))
    total = mpi_zero
    for a in x:
        total = mpi_add(total, a, prec)
    mean = mpi_div(total, n_raw, prec)
    c = [mpi_sub(a, mean, prec) for a in x]
    total = mpi_zero
    for a in c:
        m = mpi_abs(a, prec)
        total = mpi_add(total, mpi_mul(m, m, prec), prec)
    var = mpi_div(total, n_raw, prec)
    eps_raw = iv.mpf(eps)._mpi_
    scale = sqrt_interval(iv.make_mpf(mpi_add(var, eps_raw, prec)))._mpi_
    y = [mpi_div(a, scale, prec) for a in c]
    if w is None:
        return y
    return [mpi_add(mpi_mul(a, wi, prec), bi, prec) for a, wi, bi in zip(y, w, b)]
