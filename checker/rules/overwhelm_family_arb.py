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

The conversions are done once per table (a column's upper ends and negated lower ends, on
first use) and once per query position (the weights' ends), so the per-term work is four
Arb operations on exact points.
"""

from __future__ import annotations

import math

from mpmath import iv
from mpmath.libmp import from_man_exp, fzero, round_ceiling, round_floor

from ..arith import mp
from ..arith.arb import flint_module
from ..numbers import WORKING_PRECISION
from . import forward
from .overwhelm_family import AtQuery, Head, Tables


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
        normed = [[self.norm("ln1", x) for x in self.ticking(row)] for row in self.resid0]
        blocks = [(name, j) for name in "QKV" for j in range(f.n_heads)]
        # the columns of every W_name[head] side by side: d × (3·n_heads·h)
        w_all = [[x for name, j in blocks for x in m["W_" + name][j * d + r]] for r in range(d)]
        tables = {block: [] for block in blocks}
        # every (position, token) row times every block: one product, (k·v) × (3·n_heads·h)
        product = exact_matmul([x for row in normed for x in row], w_all, self.tick)
        for i in range(k):
            rows = product[i * v:(i + 1) * v]
            for n, (name, j) in enumerate(blocks):
                bias = m["b_" + name][j]
                tables[(name, j)].append([forward._add(p[n * h:(n + 1) * h], bias)
                                          for p in rows])
        self.q, self.key, self.val = [], [], []
        for j in range(f.n_heads):
            q, key, val = (tables[(name, j)] for name in "QKV")
            if f.positional == "rotary":
                q = [[self.rotate(x, i) for x in self.ticking(row)] for i, row in enumerate(q)]
                key = [[self.rotate(x, i) for x in self.ticking(row)]
                       for i, row in enumerate(key)]
            self.q.append(q)
            self.key.append(key)
            self.val.append(val)
        self.w_o = [[m["W_O"][j * h:(j + 1) * h] for j in range(f.n_heads)]]
        self.path = []
        self.position_work = forward.position_cost(dims)


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


class _Converter:
    """Exact conversion of mpmath raw numbers to Arb points, and per-table column caches."""

    def __init__(self):
        flint = flint_module()
        self.arb, self.arf = flint.arb, flint.arf
        self.zero = flint.arb(0)
        self.columns = {}  # (id(table), col, sign) -> (table, [arb points]) or None

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
        super().__init__(tables, fun, claim, p, hint)
        self.heads = [ArbHead(head, conv) for head in self.heads]


def query_checker(claim):
    """A constructor (tables, fun, claim, p, hint) -> AtQuery for `--arith arb`: the Arb
    heads for a free claim, the reference AtQuery for a permutation claim."""
    if claim.free_perm is not None:
        return AtQuery
    conv = _Converter()
    return lambda tables, fun, claim, p, hint: ArbAtQuery(tables, fun, claim, p, hint, conv)
