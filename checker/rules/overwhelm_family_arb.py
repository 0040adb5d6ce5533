"""Rule overwhelm_family under `--arith arb`: the one-layer free claims' hot loops as exact
integer arithmetic (Python ints and FLINT fmpz_mat), each result inside the reference's
enclosure (spec/rules.md §overwhelm_family; spec/arithmetic.md §Rule overwhelm_family under
`--arith arb`, "Exact integers, issue 22 third step").

The theorem, the hints and every step not named here are overwhelm_family.py's, on its
mpmath interval inputs (certificate.py builds them in mpmath, INPUT_ARITHMETIC).  Every
mpmath endpoint is a dyadic n·2^e; a matrix's endpoints scaled to one common exponent are
exact integers (arith/mp._to_integers), and:

- Lemma R (ArbHead.average_below): Σ_i max_{u ∈ slots(i)} max(w_lo·a, w_hi·a) with
  a = (sign·y)'s upper end − λ, computed exactly on integers (the weights at one exponent,
  the column and the binary64 hint λ at another); the verdict is its sign.  This is the
  exact value of the quantity the reference bounds from above (spec/overwhelm.md §1), so it
  accepts whenever the reference does.  A non-finite endpoint, a weight below 0, a
  permutation claim (Lemma R-perm): the reference path.
- The tables (_BatchedModel): Q, K, V for every (position, token) row, every head, one exact
  product with the bias as one more row of the point factor against a column of ones
  (fmpz_mat, the sign split B⁺/B⁻ below); with RoPE the rows are per token (the residual
  W_E[t] and its LayerNorm do not depend on the position) and each position's rotation is
  applied to the exact integers (exact_rotate_ints: each product's exact interval, min/max of
  its four endpoint products); queries and keys stay exact integers, V and the rounded
  tables are rounded outward once.
- The attention scores (exact_scores): q·key as the exact interval dot product (mp.int_matmul)
  of the exact integers, rounded outward once; then the reference's ·scale, shift and
  exp_interval.
- The per-query products (form_product): mp.matmul's value; with a point factor by fmpz_mat
  products: lo = A_lo·B⁺ + A_hi·B⁻, hi = A_hi·B⁺ + A_lo·B⁻ with B⁺ = max(B, 0),
  B⁻ = min(B, 0) (x·y for a point y is [x_lo·y, x_hi·y] if y >= 0, else [x_hi·y, x_lo·y]),
  and symmetrically for a point A: the same integers as mp.int_matmul's loop, so the same
  values.

LayerNorm (raw_layer_norm) and the logit constants (once per claim) are the reference's own
mpmath operations on raw (lo, hi) pairs, bit for bit.  Each enclosure above contains the
exact real result of its operation for every real of its inputs (the inclusion principle)
and lies inside the reference's (one outward rounding of the exact interval-arithmetic value
instead of one per operation), so every later step, inclusion-monotone, sees narrower inputs.
"""

from __future__ import annotations

import math
from itertools import repeat
from operator import add, itemgetter, mul

from mpmath import iv
from mpmath.libmp import from_int, fzero
from mpmath.libmp.libmpi import mpi_abs, mpi_add, mpi_div, mpi_mul, mpi_sub, mpi_zero

from ..arith import mp
from ..arith.arb import flint_module
from ..elementary import sqrt_interval
from ..errors import Malformed
from ..numbers import exp_interval
from . import forward_model
from .overwhelm_family_bounds import AtQuery, Head, Tables, alphabet, centred


def exact_matmul(a: list, b: list, tick) -> list:
    """arith/mp.matmul(a, b, tick)'s result, identical entry by entry, by exact integer
    matrix products (exact_ints) when a or b has only point entries (module docstring)."""
    ints = exact_ints(a, b)
    if ints is None:
        return mp.matmul(a, b, tick)
    lo, hi, exponent = ints
    return _round_rows((lo, hi), exponent, tick)


def exact_ints(a: list, b: list):
    """The exact interval-arithmetic product a·b as integer endpoint matrices (lists of
    Python ints, by fmpz_mat products) (lo, hi, E): entry [i][j] = [lo·2^E, hi·2^E]
    exactly, when a or b has only point entries (module docstring); None otherwise (a
    non-finite entry: mp._dyadic's Malformed is raised)."""
    fmpz_mat = flint_module().fmpz_mat
    a_lo, a_hi, a_exp = mp._to_integers(a)
    b_lo, b_hi, b_exp = mp._to_integers(b)
    if b_lo == b_hi:
        pos = fmpz_mat([[max(x, 0) for x in r] for r in b_lo])
        neg = fmpz_mat([[min(x, 0) for x in r] for r in b_lo])
        lo_m, hi_m = fmpz_mat(a_lo), fmpz_mat(a_hi)
        return _ints(lo_m * pos + hi_m * neg), _ints(hi_m * pos + lo_m * neg), a_exp + b_exp
    if a_lo == a_hi:
        pos = fmpz_mat([[max(x, 0) for x in r] for r in a_lo])
        neg = fmpz_mat([[min(x, 0) for x in r] for r in a_lo])
        lo_m, hi_m = fmpz_mat(b_lo), fmpz_mat(b_hi)
        return _ints(pos * lo_m + neg * hi_m), _ints(pos * hi_m + neg * lo_m), a_exp + b_exp
    return None


def _ints(m) -> list:
    """An fmpz_mat's entries as lists of Python ints."""
    return [[int(x) for x in row] for row in m.tolist()]


def _round_rows(table, exponent: int, tick, raw: bool = False) -> list:
    """Integer endpoint rows (lo, hi) at 2^exponent as intervals, rounded outward once (raw:
    as mpmath raw pairs, the same numbers without the interval objects)."""
    out, make = [], mp.raw_from_integers if raw else mp._from_integers
    for x_lo, x_hi in zip(*table):
        tick()
        out.append([make(a, b, exponent) for a, b in zip(x_lo, x_hi)])
    return out


def exact_rotate(x_lo, x_hi, exponent, c_lo, c_hi, s_lo, s_hi, e_cs, rotary_dim) -> list:
    """forward_model._rotate(x, cos, sin, rotary_dim)'s exact interval-arithmetic value
    (exact_rotate_ints) rounded outward once."""
    lo, hi = exact_rotate_ints(x_lo, x_hi, c_lo, c_hi, s_lo, s_hi, e_cs, rotary_dim)
    e = exponent + min(e_cs, 0)
    return [mp._from_integers(a, b, e) for a, b in zip(lo, hi)]


def exact_rotate_ints(x_lo, x_hi, c_lo, c_hi, s_lo, s_hi, e_cs, rotary_dim):
    """forward_model._rotate(x, cos, sin, rotary_dim)'s exact interval-arithmetic value as integer
    endpoints (lo, hi) at 2^(E + min(e_cs, 0)), for x = [x_lo, x_hi]·2^E and
    cos, sin = [c_lo, c_hi]·2^e_cs, ... (integer endpoints).  For j < r/2, a = x_j,
    b = x_{j+r/2}: a·c − b·s ∈ [min(a·c) − max(b·s), max(a·c) − min(b·s)] and
    b·c + a·s ∈ [min(b·c) + min(a·s), max(b·c) + max(a·s)], min/max over the four endpoint
    products (the exact range of an interval product), at 2^(E + e_cs); every coordinate is
    brought to 2^(E + min(e_cs, 0)) by an exact shift (the coordinates from r on pass
    through)."""
    half = rotary_dim // 2
    up, down = max(e_cs, 0), -min(e_cs, 0)  # products << up; pass-through << down
    lo = [n << down for n in x_lo]
    hi = [n << down for n in x_hi]
    for j in range(half):
        a0, a1, b0, b1 = x_lo[j], x_hi[j], x_lo[j + half], x_hi[j + half]
        c0, c1, s0, s1 = c_lo[j], c_hi[j], s_lo[j], s_hi[j]
        ac = (a0 * c0, a0 * c1, a1 * c0, a1 * c1)
        bs = (b0 * s0, b0 * s1, b1 * s0, b1 * s1)
        bc = (b0 * c0, b0 * c1, b1 * c0, b1 * c1)
        as_ = (a0 * s0, a0 * s1, a1 * s0, a1 * s1)
        lo[j], hi[j] = (min(ac) - max(bs)) << up, (max(ac) - min(bs)) << up
        lo[j + half], hi[j + half] = (min(bc) + min(as_)) << up, (max(bc) + max(as_)) << up
    return lo, hi


class _BatchedModel(forward_model._Model):
    """forward_model._Model's one-layer tables (the same values, the same charges), its products
    batched by exact_matmul (one product for every position, token, head and name); every
    other method is the reference's."""

    def __init__(self, dims, m, charge):  # forward_model._Model.__init__, one layer
        from ..certificate import hold

        f = dims.family
        self.dims, self.f, self.m = dims, f, m
        v, k, h, d = dims.d_vocab, dims.n_ctx, dims.d_head, dims.d_model
        charge(forward_model.table_cost(dims))
        hold(charge, forward_model.table_elements(dims), "forward tables")
        self.tick = lambda: charge(0)
        self.charge = charge
        self.scale = forward_model.inv_sqrt_interval(h)
        self.resid0 = [[self.embed(t, i) for t in self.ticking(range(v))] for i in range(k)]
        rotary = f.positional == "rotary"
        # rotary: the residual W_E[t] is the same at every position, so are its LayerNorm and
        # its (unrotated) queries, keys and values: computed once, for position 0's rows
        sources = self.resid0[:1] if rotary else self.resid0
        normed = [[self.norm_raw("ln1", x) for x in self.ticking(row)] for row in sources]
        blocks = [(name, j) for name in "QKV" for j in range(f.n_heads)]
        # the columns of every W_name[head] side by side, and the biases as one more row:
        # (d + 1) × (3·n_heads·h), against every row with a 1 appended
        w_all = [[x for name, j in blocks for x in m["W_" + name][j * d + r]] for r in range(d)]
        w_all.append([x for name, j in blocks for x in m["b_" + name][j]])
        one = iv.mpf(1)
        rows = [x + [one] for row in normed for x in row]
        ints = exact_ints(rows, w_all)
        if ints is None:  # not a point factor: the reference's product (with the bias)
            ints = IntMatrix(mp.matmul(rows, w_all, self.tick)).rows()
        lo, hi, exponent = ints
        n_src = len(sources)
        tables = {block: [] for block in blocks}
        for n, (name, j) in enumerate(blocks):
            for i in range(n_src):
                part = range(i * v, (i + 1) * v)
                tables[(name, j)].append(([lo[r][n * h:(n + 1) * h] for r in part],
                                          [hi[r][n * h:(n + 1) * h] for r in part]))
        # queries and keys are kept as exact integer forms (lo rows, hi rows, exponent), read
        # by exact_scores; their rounded tables (self.q, self.key) are made on first use
        self.q_ints, self.key_ints, self.val = [], [], []
        self._q = self._key = None
        for j in range(f.n_heads):
            q, key, val = (tables[(name, j)] for name in "QKV")
            if rotary:
                q = [self.rotate_ints(q[0], exponent, i) for i in range(k)]
                key = [self.rotate_ints(key[0], exponent, i) for i in range(k)]
                val = [_round_rows(val[0], exponent, self.tick)] * k
            else:
                q, key = ([t + (exponent,) for t in table] for table in (q, key))
                val = [_round_rows(t, exponent, self.tick) for t in val]
            self.q_ints.append(q)
            self.key_ints.append(key)
            self.val.append(val)
        self.w_o = [[m["W_O"][j * h:(j + 1) * h] for j in range(f.n_heads)]]
        self.path = []
        self.position_work = forward_model.position_cost(dims)

    def norm_raw(self, which: str, x: list) -> list:
        """self.norm(which, x), bit for bit: LayerNorm / LNPre by raw_layer_norm (the same
        operations), any other normalisation by the reference."""
        norm = self.f.normalization
        if norm not in ("LN", "LNPre"):
            return self.norm(which, x)
        w = b = None
        if norm == "LN":
            name = forward_model.layer_short(0, which)
            w, b = _raws(self.m[name + ".w"][0]), _raws(self.m[name + ".b"][0])
        return [iv.make_mpf(y) for y in raw_layer_norm(_raws(x), self.f.ln_eps, w, b, iv.prec)]

    def rotate_raw(self, x: list, i: int) -> list:
        """self.rotate(x, i), bit for bit (raw_rotate: the same operations)."""
        out = raw_rotate(_raws(x), _raws(self.m["ROPE_COS"][i]), _raws(self.m["ROPE_SIN"][i]),
                         self.f.rotary_dim, iv.prec)
        return [iv.make_mpf(y) for y in out]

    @property
    def q(self) -> list:
        """The queries' tables (per head, position, token), rounded outward once."""
        if self._q is None:
            self._q = [[self._rounded(t) for t in per_head] for per_head in self.q_ints]
        return self._q

    @property
    def key(self) -> list:
        """The keys' tables, rounded outward once."""
        if self._key is None:
            self._key = [[self._rounded(t) for t in per_head] for per_head in self.key_ints]
        return self._key

    def _rounded(self, form) -> list:
        """An integer form (lo rows, hi rows, exponent) as intervals (charged to the memory
        limit: they are kept beside the integers); a list of rows as is."""
        if isinstance(form, tuple):
            from ..certificate import hold

            hold(self.charge, len(form[0]) * len(form[0][0]) if form[0] else 0,
                 "rounded query and key tables")
            return _round_rows(form[:2], form[2], self.tick)
        return form

    def rotate_ints(self, table, exponent: int, i: int):
        """The rows of `table` (integer endpoints (lo, hi) at 2^exponent: exact queries or
        keys before RoPE) rotated at position i, exactly (exact_rotate_ints): an integer form
        (lo rows, hi rows, exponent'); with a non-finite cos/sin enclosure, the rounded rows
        rotated by the reference's operations (a list of rows)."""
        cos_sin = [self.m["ROPE_COS"][i], self.m["ROPE_SIN"][i]]
        try:
            (c_lo, s_lo), (c_hi, s_hi), e_cs = mp._to_integers(cos_sin)
        except Malformed:  # a non-finite cos/sin enclosure: round, then the reference's ops
            return [self.rotate_raw(x, i) for x in _round_rows(table, exponent, self.tick)]
        lo_rows, hi_rows = [], []
        for x_lo, x_hi in zip(*table):
            self.tick()
            lo, hi = exact_rotate_ints(x_lo, x_hi, c_lo, c_hi, s_lo, s_hi, e_cs,
                                       self.f.rotary_dim)
            lo_rows.append(lo)
            hi_rows.append(hi)
        return lo_rows, hi_rows, exponent + min(e_cs, 0)

def _raws(xs: list) -> list:
    """The raw (lo, hi) of each entry, as mpmath's interval operations convert it (an
    iv.mpf as is; a number exactly, ivmpf.convert)."""
    return [x._mpi_ if hasattr(x, "_mpi_") else iv.convert(x)._mpi_ for x in xs]


class BatchedTables(Tables):
    """overwhelm_family.Tables with the model's tables from _BatchedModel (the same
    values); VO_j as the reference computes it."""

    MODEL = _BatchedModel
    VO_MATMUL = staticmethod(exact_matmul)

    def __init__(self, dims, m, charge):
        super().__init__(dims, m, charge)
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

        hold(self.model.charge, 8 * len(m) * len(m[0]), "integer forms of the tables")
        out = IntMatrix(m)
        self.ints[id(m)] = (m, out)
        return out

    def matmul(self, a: list, b: list) -> list:
        """ops.matmul(a, b)'s value entry by entry (form_product), the constant operands'
        integers converted once."""
        return form_product(self.integers(a), self.integers(b), False, self.tick)

    def matmul_t(self, a: list, b_rows: list) -> list:
        """ops.matmul(a, ops.transpose(b_rows))'s value entry by entry."""
        return form_product(self.integers(a), self.integers(b_rows), True, self.tick)


def form_product(a, b, b_transposed: bool, tick, raw: bool = False) -> list:
    """mp.matmul's value of a·b (a·bᵀ if b_transposed) on integer forms (IntMatrix): the exact
    sums Σ_k min / max of the endpoint products, rounded outward once at 2^(E_a + E_b).
    When a or b has only point entries those sums are integer matrix products (fmpz_mat,
    exact; module docstring: lo = A_lo·B⁺ + A_hi·B⁻, hi = A_hi·B⁺ + A_lo·B⁻, or
    lo = A⁺·B_lo + A⁻·B_hi, hi = A⁺·B_hi + A⁻·B_lo for a point A): the same integers, so the
    same values; for a one-row a, by the signs of its entries (row_product: the same
    integers again).  Otherwise mp.int_matmul's loop.  raw: the values as raw pairs (the
    fmpz paths only)."""
    exponent = a.exp + b.exp
    if b.is_point() or a.is_point():
        bt = (lambda name: b.fmpz(name).transpose()) if b_transposed else b.fmpz
        if b.is_point():
            lo, hi = times_point(a, bt("pos"), bt("neg"))
        else:
            pos, neg = a.fmpz("pos"), a.fmpz("neg")
            lo, hi = pos * bt("lo") + neg * bt("hi"), pos * bt("hi") + neg * bt("lo")
        return _round_rows((_ints(lo), _ints(hi)), exponent, tick, raw)
    if len(a.lo) == 1:  # one row: by the signs of its entries (row_product)
        return _round_rows(row_product(a, b, b_transposed), exponent, tick, raw)
    if raw:
        raise ValueError("form_product: raw values only on the integer-product paths")
    return int_matmul(a.rows(), b.rows() if b_transposed else b.cols(), tick)


def times_point(a, pos, neg) -> tuple:
    """The exact integer ends (lo, hi) of a·b for a point b given as b⁺ = pos, b⁻ = neg
    (fmpz_mat): lo = A_lo·b⁺ + A_hi·b⁻, hi = A_hi·b⁺ + A_lo·b⁻."""
    return a.fmpz("lo") * pos + a.fmpz("hi") * neg, a.fmpz("hi") * pos + a.fmpz("lo") * neg


def column_entries(a, e_int, rows: list) -> list:
    """form_product(a, e_int, False, ·, raw=True)'s entries at `rows` for a point column e_int
    (IntMatrix.point_column): the same exact sums (times_point), each rounded outward once,
    only where read."""
    lo, hi = times_point(a, e_int.fmpz("pos"), e_int.fmpz("neg"))
    lo, hi, exponent = lo.entries(), hi.entries(), a.exp + e_int.exp
    return [mp.raw_from_integers(int(lo[k]), int(hi[k]), exponent) for k in rows]


def row_product(a, b, b_transposed: bool):
    """The exact sums of mp.int_matmul for a one-row a (integer endpoint lists ([lo], [hi])):
    Σ_k min and max of the four endpoint products of x_k = [x_lo, x_hi] and y = b[k, j].
    For x_k >= 0 they are x_lo·y_lo⁺ + x_hi·y_lo⁻ and x_hi·y_hi⁺ + x_lo·y_hi⁻; for x_k <= 0,
    x_lo·y_hi⁺ + x_hi·y_hi⁻ and x_lo·y_lo⁻ + x_hi·y_lo⁺ (y⁺ = max(y, 0), y⁻ = min(y, 0)): so the
    entries of each sign are fmpz_mat products of a's ends masked to them; an entry with
    x_lo < 0 < x_hi adds min(x_lo·y_hi, x_hi·y_lo) and max(x_lo·y_lo, x_hi·y_hi) (the range
    of the product) by a loop.  The same integers as mp.int_matmul's loop."""
    fmpz_mat = flint_module().fmpz_mat
    x_lo, x_hi = a.lo[0], a.hi[0]
    pos = [lo >= 0 for lo in x_lo]
    neg = [hi <= 0 and lo < 0 for lo, hi in zip(x_lo, x_hi)]
    bt = (lambda name: b.fmpz(name).transpose()) if b_transposed else b.fmpz

    def masked(ends, mask):
        return fmpz_mat([[x if keep else 0 for x, keep in zip(ends, mask)]])

    lo = hi = None
    if any(pos):  # (a's own fmpz_mat when every entry is >= 0)
        lo_p, hi_p = ((a.fmpz("lo"), a.fmpz("hi")) if all(pos) else
                      (masked(x_lo, pos), masked(x_hi, pos)))
        lo, hi = lo_p * bt("lo+") + hi_p * bt("lo-"), hi_p * bt("hi+") + lo_p * bt("hi-")
    if any(neg):
        lo_n, hi_n = masked(x_lo, neg), masked(x_hi, neg)
        lo_2, hi_2 = lo_n * bt("hi+") + hi_n * bt("hi-"), lo_n * bt("lo-") + hi_n * bt("lo+")
        lo, hi = (lo_2, hi_2) if lo is None else (lo + lo_2, hi + hi_2)
    width = b.lo_count(b_transposed)
    lo, hi = (_ints(lo)[0], _ints(hi)[0]) if lo is not None else ([0] * width, [0] * width)
    both = [k for k, (p, n) in enumerate(zip(pos, neg)) if not (p or n)]
    if both:  # x_lo < 0 < x_hi: the loop over b's row k
        b_lo, b_hi, _ = b.rows() if not b_transposed else b.cols()
        for k in both:
            x0, x1 = x_lo[k], x_hi[k]
            for j, (y0, y1) in enumerate(zip(b_lo[k], b_hi[k])):
                lo[j] += min(x0 * y1, x1 * y0)
                hi[j] += max(x0 * y0, x1 * y1)
    return [lo], [hi]


class IntMatrix:
    """A matrix of intervals as arith/mp._to_integers makes it (integer endpoints lo, hi
    and the common exponent E: entry [i][j] = [lo·2^E, hi·2^E] exactly), in row and (lazily)
    column order, and (lazily) as fmpz_mat: lo, hi, and for a point matrix
    pos = max(lo, 0), neg = min(lo, 0) entrywise."""

    def __init__(self, m: list):
        self.lo, self.hi, self.exp = mp._to_integers(m)
        self._cols = None
        self._point = None
        self._fmpz = {}

    @classmethod
    def point_column(cls, xs: list):
        """The IntMatrix of the column [[iv.mpf(x)] for x in xs] for finite binary64 xs,
        without the interval objects: x = num·2^-k exactly (float.as_integer_ratio), every
        entry scaled to the least exponent, so entry r is n_r·2^E = x_r exactly, as
        mp._to_integers gives it (the same values; products read only the values).
        Raises Malformed for a non-finite x, as mp._dyadic would."""
        out = cls.__new__(cls)
        ratios = []
        for x in xs:
            if not math.isfinite(x):
                raise Malformed("matmul: an operand is not finite")
            num, den = float(x).as_integer_ratio()  # den = 2^k
            ratios.append((num, 1 - den.bit_length()))
        exponent = min((e for _, e in ratios), default=0)
        out.lo = out.hi = [[n << (e - exponent)] for n, e in ratios]
        out.exp, out._cols, out._point, out._fmpz = exponent, None, True, {}
        return out

    def rows(self):
        return self.lo, self.hi, self.exp

    def lo_count(self, transposed: bool) -> int:
        """The number of columns of this matrix (of rows, if transposed)."""
        return len(self.lo) if transposed else len(self.lo[0]) if self.lo else 0

    def cols(self):
        if self._cols is None:
            self._cols = ([list(c) for c in zip(*self.lo)], [list(c) for c in zip(*self.hi)],
                          self.exp)
        return self._cols

    def is_point(self) -> bool:
        if self._point is None:
            self._point = self.lo == self.hi
        return self._point

    def fmpz(self, name: str):
        """lo, hi, pos (= lo+), neg (= lo−), hi+, hi− as fmpz_mat (x+ = max(x, 0),
        x− = min(x, 0) entrywise), kept."""
        hit = self._fmpz.get(name)
        if hit is None:
            fmpz_mat = flint_module().fmpz_mat
            ends = self.hi if name.startswith("hi") else self.lo
            if name in ("pos", "lo+", "hi+"):
                hit = fmpz_mat([[max(x, 0) for x in r] for r in ends])
            elif name in ("neg", "lo-", "hi-"):
                hit = fmpz_mat([[min(x, 0) for x in r] for r in ends])
            else:
                hit = fmpz_mat(self.lo if name == "lo" else self.hi)
            self._fmpz[name] = hit
        return hit


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

    def float_column(self, table: list, col: int, sign: int):
        """(floats ŷ_r, max_r |ŷ_r|): ŷ_r the upper end of sign·table[r][col] rounded to the
        nearest binary64 (filter_float); None if one is out of the filter's range.  Cached
        per table object, as int_column."""
        return self._floats(table, (col,), sign, (id(table), col, sign, "float"))[0]

    def float_columns(self, table: list, sign: int) -> list:
        """[float_column(table, c, sign) for every column c], built and cached at once."""
        cols = tuple(range(len(table[0]))) if table else ()
        return self._floats(table, cols, sign, (id(table), sign, "floats"))

    def _floats(self, table: list, cols: tuple, sign: int, key) -> list:
        hit = self.columns.get(key)
        if hit is not None and hit[0] is table:
            return hit[1]
        if self.charge is not None:  # the memory limit, before the columns are built
            from ..certificate import hold

            hold(self.charge, len(table) * len(cols), "float column caches")
        end, out = 1 if sign > 0 else 0, []
        for col in cols:
            ys = [filter_float(row[col]._mpi_[end]) for row in table]
            column = None
            if None not in ys:
                if sign < 0:
                    ys = [-x for x in ys]
                column = (ys, max(map(abs, ys), default=0.0))
            out.append(column)
        self.columns[key] = (table, out)
        return out

    def int_column(self, table: list, col: int, sign: int):
        """(integers n_r, exponent E) with n_r·2^E = the upper end of sign·table[r][col]
        exactly, for every row r; None if one is not finite.  Cached per table object."""
        key = (id(table), col, sign, "int")
        hit = self.columns.get(key)
        if hit is not None and hit[0] is table:
            return hit[1]
        if self.charge is not None:  # the memory limit, before the column is built
            from ..certificate import hold

            hold(self.charge, len(table), "integer column caches")
        pairs = []
        for row in table:
            end = row[col]._mpi_[1 if sign > 0 else 0]
            s_, man, exp, _ = end
            if man == 0 and exp != 0:  # inf, -inf, nan
                pairs = None
                break
            n = -man if s_ else man
            pairs.append((n if sign > 0 else -n, exp))
        out = None
        if pairs is not None:
            exponent = min((e for _, e in pairs), default=0)
            out = ([n << (e - exponent) for n, e in pairs], exponent)
        self.columns[key] = (table, out)
        return out


class ArbHead(Head):
    """overwhelm_family.Head with Lemma R's sum decided exactly on integers (module
    docstring, spec/arithmetic.md §Lemma R exactly), after a binary64 filter that can only
    accept when the exact sum is < 0 (spec/arithmetic.md §Lemma R filtered in binary64): the
    same verdicts as the integers alone."""

    def __init__(self, head: Head, conv: _Converter):  # the reference head's fields
        self.slots, self.tables, self.w, self.perm = head.slots, head.tables, head.w, head.perm
        self.conv = conv
        self.keys = [(i, u) for i, toks in enumerate(head.slots) for u in toks]  # slots read
        self._groups = None  # the integer groups, built on the first exact decision
        # the filter: per position, a getter of its slots' rows and fl(W_hi) per slot, and
        # Σ_i G_i (filter_groups); None when a weight is out of range or W_lo < 0
        floats = getattr(head.w, "floats", None)  # a weight table's cached floats, if it has
        pairs = [floats(k) if floats else float_pair(head.w[k]) for k in self.keys]
        self.fast = None if None in pairs else filter_groups(head.slots, head.tables.row,
                                                              dict(zip(self.keys, pairs)))

    @property
    def groups(self) -> list:
        """Per position, its slots' table rows, W_lo and W_hi (integers at one exponent), in
        the reference's order; [] (and usable False) when a weight's end is not finite or
        W_lo < 0 (the reference path then decides, and rejects W_lo < 0 as numbers.up_mul)."""
        if self._groups is None:
            dyadic = getattr(self.w, "dyadic", None)  # a weight table's cached ends, if it has
            ends = [dyadic(k) if dyadic else _dyadic_or_none(self.w[k]) for k in self.keys]
            self.usable, self._groups = all(e is not None for e in ends), []
            if self.usable:
                exponent = min((e for pair in ends for _, e in pair), default=0)
                ints = {k: tuple(n << (e - exponent) for n, e in pair)
                        for k, pair in zip(self.keys, ends)}
                self.usable = all(lo >= 0 for lo, _ in ints.values())
                row = self.tables.row
                self._groups = [([row(i, u) for u in toks], [ints[(i, u)][0] for u in toks],
                                 [ints[(i, u)][1] for u in toks])
                                for i, toks in enumerate(self.slots)]
        return self._groups

    def average_below(self, y: list, col: int, lam: float, sign: int = 1,
                      key: int | None = None) -> bool:
        if self.perm:  # Lemma R-perm: the reference path
            return super().average_below(y, col, lam, sign, key)
        if self.fast is not None and isinstance(lam, float) and abs(lam) <= FILTER_HIGH:
            column = self.conv.float_column(y, col, sign)
            if column is not None and filter_below(self.fast, column, lam):
                return True  # the exact sum is < 0 (spec/arithmetic.md)
        return self.exact_below(y, col, lam, sign, key)

    def exact_below(self, y: list, col: int, lam: float, sign: int = 1,
                    key: int | None = None) -> bool:
        """Lemma R's verdict from the exact integer sum (or the reference path)."""
        groups = self.groups
        column = self.conv.int_column(y, col, sign)
        if column is None or not self.usable or not (isinstance(lam, float)
                                                     and math.isfinite(lam)):
            return super().average_below(y, col, lam, sign, key)
        values, y_exp = column
        lam_num, lam_den = lam.as_integer_ratio()  # λ = num / 2^k exactly
        lam_exp = 1 - lam_den.bit_length()  # -k
        if lam_exp >= y_exp:
            lam_int = lam_num << (lam_exp - y_exp)
        else:  # the column's integers scaled down to λ's exponent (exact)
            values = [x << (y_exp - lam_exp) for x in values]
            lam_int = lam_num
        a = [x - lam_int for x in values]  # per row: (sign·y)'s upper end − λ, exact
        total = 0
        for rows, w_lo, w_hi in groups:  # position i: max over u of W·a(i, u)
            if len(rows) == 1:
                x = a[rows[0]]
                total += (w_lo[0] if x < 0 else w_hi[0]) * x
            else:  # max over W in [w_lo, w_hi] of W·a is w_lo·a if a < 0, else w_hi·a
                total += max([(lo if x < 0 else hi) * x
                              for x, lo, hi in zip([a[r] for r in rows], w_lo, w_hi)])
        return total < 0  # the exact sum (times 2^(E_y + E_w) > 0): its sign


# -- Lemma R filtered in binary64 (spec/arithmetic.md §Lemma R filtered in binary64) ----------
# Every input of the exact sum (the weights' ends, the column's upper ends) is rounded to the
# nearest binary64 once (relative error <= 2^-53 <= FILTER_U) inside [FILTER_LOW, FILTER_HIGH]
# (or exactly 0), where that conversion, λ − ŷ and the products cannot overflow and only a
# product can underflow (absolute error <= 2^-1075 <= FILTER_TINY).
FILTER_U = 2.0 ** -50
FILTER_TINY = 1e-300
FILTER_LOW, FILTER_HIGH = 2.0 ** -1000, 2.0 ** 500


def filter_float(raw):
    """The raw mpmath number rounded to the nearest binary64 (float(man) is correctly rounded,
    the scaling by 2^exp exact in the normal range), or None if it is not 0 and its
    magnitude is outside [FILTER_LOW, FILTER_HIGH] (or it is not finite)."""
    sign, man, exp, _ = raw
    if not man:
        return 0.0 if raw == fzero or raw[3] == 0 else None  # (·, 0, ·, 0): an integer's 0
    try:
        x = math.ldexp(man, exp)
    except OverflowError:
        return None
    if not FILTER_LOW <= x <= FILTER_HIGH:
        return None
    return -x if sign else x


def float_pair(w):
    """(fl(W_lo), fl(W_hi)) of a weight enclosure, or None if one is out of range or
    W_lo < 0 (filter_float)."""
    lo, hi = (filter_float(e) for e in w._mpi_)
    return None if lo is None or hi is None or lo < 0 else (lo, hi)


def filter_groups(slots: list, row, pairs: dict):
    """The filter's per-head data: ([(getter of position i's rows, [fl(W_hi(u))]), ...] for
    the positions of several slots, [(row, fl(W_hi))] for those of one, Σ_i G_i) with G_i =
    max over position i's slots of 8U·fl(W_hi) + 2·fl(fl(W_hi) − fl(W_lo)) (a bound of the
    error terms, spec/arithmetic.md)."""
    groups, singles, g_sum = [], [], 0.0
    for i, toks in enumerate(slots):
        rows = [row(i, u) for u in toks]
        w_hi = [pairs[(i, u)][1] for u in toks]
        if len(rows) == 1:
            singles.append((rows[0], w_hi[0]))
        else:
            groups.append((row_getter(rows), w_hi))
        g_sum += max(8 * FILTER_U * hi + 2 * (hi - lo) for lo, hi in
                     (pairs[(i, u)] for u in toks))
    return groups, singles, g_sum


def row_getter(rows: list):
    """A callable ys -> the entries of ys at `rows`, in that order (len(rows) >= 2): the list
    slice ys[r0:r0+n] when the rows are consecutive (r0, r0+1, …: a token interval at one
    position, the usual slot), else itemgetter(*rows).  Both give the same values in the
    same order; the slice is one C copy instead of n indexed reads (the filter's hot loop)."""
    first = rows[0]
    if list(rows) == list(range(first, first + len(rows))):
        return itemgetter(slice(first, first + len(rows)))
    return itemgetter(*rows)


def filter_below(fast, column, lam: float) -> bool:
    """True only if Lemma R's exact integer sum Σ_i max_u max(W_lo·a, W_hi·a), a = y − λ, is
    < 0: its binary64 evaluation Ŝ = Σ_i max_u fl(fl(W_hi)·fl(fl(y) − λ)) plus the error bound
    2·(P·U·Σ_i |M̂_i| + (Y_max + |λ|)·Σ_i G_i + P·η) is < 0 (spec/arithmetic.md §Lemma R
    filtered in binary64; P positions)."""
    groups, singles, g_sum = fast
    ys, y_max = column
    neg = -lam
    total = s_abs = 0.0
    for get, w_hi in groups:  # fl(ŷ + (−λ)) = fl(ŷ − λ) (−λ exact), then fl(W·that)
        best = max(map(mul, w_hi, map(add, get(ys), repeat(neg))))
        total += best
        s_abs += abs(best)
    for r, w_hi in singles:  # a one-slot position: its one product
        best = w_hi * (ys[r] + neg)
        total += best
        s_abs += abs(best)
    n = len(groups) + len(singles)
    err = 2.0 * (n * FILTER_U * s_abs + (y_max + abs(lam)) * g_sum + n * FILTER_TINY)
    return math.isfinite(total) and total + err < 0.0


def negated_floats(ns, exponent: int):
    """[filter_float of −n·2^exponent for n in ns] (upper(−y) = −y_lo), or None if one is
    None: each −n·2^E is float(−n) (correctly rounded) scaled by 2^E (exact in the normal
    range), as filter_float's math.ldexp(man, exp) with its sign; 0 for n = 0 (its man 0
    case); out of [FILTER_LOW, FILTER_HIGH] in magnitude, or overflowing: None.  O(len(ns))."""
    ints = [int(n) for n in ns]
    try:
        ys = [math.ldexp(-n, exponent) for n in ints]
    except OverflowError:
        return None
    for n, y in zip(ints, ys):  # (n != 0 whose float underflows to 0: refused, as there)
        if n and not FILTER_LOW <= abs(y) <= FILTER_HIGH:
            return None
    return ys


def confirmed_directions(query, e: list, which: int, e_int=None) -> tuple:
    """The heads j whose direction bound Lemma R's binary64 filter confirms on the exact
    product VO_j·e: its lower ends y_lo = VO_lo·e⁺ + VO_hi·e⁻ (fmpz_mat, exact), each rounded
    to the nearest binary64 (filter_float).  The reference rounds y_lo down at 80 bits
    (form_product) before Lemma R reads −y_lo; fl(y_lo) lies within (2^-53 + 2^-79)·|y| <= U·|y|
    of that rounded end, the error the filter allows (spec/arithmetic.md), so a confirmation
    here is one of the reference's exact integer sum.  Heads not confirmed: the reference.
    e_int: e's integer column if the caller has it (IntMatrix.point_column(e)), else built."""
    from mpmath import iv as _iv

    heads, out = query.heads, []
    if not all(getattr(h, "fast", None) is not None and not h.perm for h in heads):
        return ()
    if e_int is None:  # e as an exact integer column (IntMatrix.point_column: the same values)
        e_int = IntMatrix([[_iv.mpf(x)] for x in e])
    for j, head in enumerate(heads):
        lam = query.hint["dir_lo"][j][which]
        if not (isinstance(lam, float) and abs(lam) <= FILTER_HIGH):
            continue
        vo = query.t.integers(query.t.vo[j])
        y_lo = vo.fmpz("lo") * e_int.fmpz("pos") + vo.fmpz("hi") * e_int.fmpz("neg")
        ys = negated_floats(y_lo.entries(), vo.exp + e_int.exp)
        if ys is None:
            continue
        if filter_below(head.fast, (ys, max(map(abs, ys), default=0.0)), -lam):
            out.append(j)
    return tuple(out)


def _dyadic_or_none(x):
    """Interval x's endpoints as exact ((n_lo, e_lo), (n_hi, e_hi)) (arith/mp._dyadic), or
    None if one is not finite."""
    out = []
    for sign, man, exp, _ in x._mpi_:
        if man == 0 and exp != 0:
            return None
        out.append((-man if sign else man, exp))
    return tuple(out)


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
        self.base = centred(forward_model._add(self.x_p, self.m["b_O"][0]), self.centre)
        self.base_g = tables.matmul_t([self.base], fun.g)[0]  # (v,)
        self.base_a = tables.matmul_t([self.base], fun.a)[0] if fun.a else []

    def confirmed_directions(self, e: list, which: int) -> tuple:
        return confirmed_directions(self, e, which)

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
    """Head(tables, j, p, slots) (free claim) with each score dot(q, key) computed exactly and
    rounded outward once (`exact_scores`), then ·scale by one mpi_mul, the shift = the mid of
    the score at (p, query), and exp_interval(s − shift) (mpi_sub) as the reference."""
    model, prec = tables.model, iv.prec
    scale = model.scale._mpi_
    dots = exact_scores(tables, j, p, slots)
    scores = {k: mpi_mul(d, scale, prec) for k, d in dots.items()}
    shift = iv.mpf(iv.make_mpf(scores[(p, slots[p][0])]).mid)._mpi_
    head = Head.__new__(Head)
    head.slots, head.tables, head.perm = slots, tables, None
    head.w = {k: exp_interval(iv.make_mpf(mpi_sub(x, shift, prec))) for k, x in scores.items()}
    return head


def exact_scores(tables, j: int, p: int, slots: list) -> dict:
    """{(i, u): raw enclosure of q·key_j(i, u)} for every slot, q = the query at p: the exact
    interval dot product Σ_k [min, max of the four endpoint products] (mp.int_matmul) of
    the exact (unrounded) query and keys the model keeps as integers, rounded outward once;
    it lies inside the reference's (0 + q_0·k_0) + ... on tables rounded at every step.  A
    non-finite endpoint: the reference's dot (raw_dot) on the rounded tables."""
    model, prec, t = tables.model, iv.prec, slots[p][0]
    q_form = model.q_ints[j][p]
    try:
        if isinstance(q_form, tuple):  # the query's exact integers
            q_int = ([q_form[0][t]], [q_form[1][t]], q_form[2])
        else:
            q_int = IntMatrix([q_form[t]]).rows()
        out = {}
        for i, toks in enumerate(model.ticking(slots)):
            k_form = model.key_ints[j][i]
            lo, hi, exponent = (k_form if isinstance(k_form, tuple)
                                else tables.integers(k_form).rows())
            row = int_matmul(q_int, ([lo[u] for u in toks], [hi[u] for u in toks], exponent),
                             tables.tick)[0]
            out.update(((i, u), x._mpi_) for u, x in zip(toks, row))
        return out
    except Malformed:  # a non-finite entry (mp._dyadic): the reference's dot
        q_raw = _raws(model.q[j][p][t])
        return {(i, u): raw_dot(q_raw, _raws(model.key[j][i][u]), prec)
                for i, toks in enumerate(slots) for u in toks}

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
    """forward_model._rotate on raw intervals: (a·cos − b·sin, b·cos + a·sin) per pair."""
    half = rotary_dim // 2
    out = list(x)
    for j in range(half):
        a, b, c, s = x[j], x[j + half], cos_row[j], sin_row[j]
        out[j] = mpi_sub(mpi_mul(a, c, prec), mpi_mul(b, s, prec), prec)
        out[j + half] = mpi_add(mpi_mul(b, c, prec), mpi_mul(a, s, prec), prec)
    return out


def raw_layer_norm(x: list, eps: float, w: list | None, b: list | None, prec: int) -> list:
    """forward_model.layer_norm on raw intervals, step for step: mean = fsum(x)/n, c = x − mean,
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
