"""Rule family_gap under `--arith arb`: the class proofs on overwhelm_family's fast path
(overwhelm_family_arb.py; spec/rules.md §family_gap, spec/arithmetic.md §Rule family_gap
under `--arith arb`).

Everything family_gap.py states and checks (the classes, their signatures and sizes, the
hints, the residue, the cost) is unchanged; only the arithmetic of a class proof changes,
as overwhelm_family_arb changes it for one query position:

- the tables: overwhelm_family_arb.BatchedTables (exact products, RoPE on the exact integers,
  queries and keys kept exact; each enclosure inside the reference's);
- the attention weights per query token (ArbQueryWeights): each score q·key_j(i, u) the
  exact interval dot product of the exact integers rounded outward once (as exact_scores),
  then the reference's ·scale, shift (the mid of the score at (k−1, q)) and exp_interval,
  each when first read;
- Lemma R (ArbHead): decided exactly on integers;
- the per-query products of a class (BatchedTables.matmul): mp.matmul's values.

The residue's forward passes run in bulk as rule forward_brute_force's under `--arith arb`
(certified_residue: forward_arb._BulkModel, one matrix row per sequence).
"""

from __future__ import annotations

from mpmath import iv
from mpmath.libmp.libmpi import mpi_mul, mpi_sub

from ..errors import Malformed
from ..numbers import exp_interval
from . import family_gap_classes as gap
from .family_gap_bulk import BulkSteps
from .overwhelm_family_arb import (
    ArbHead,
    BatchedTables,
    IntMatrix,
    _Converter,
    _dyadic_or_none,
    _raws,
    confirmed_directions,
    float_pair,
    int_matmul,
    raw_dot,
)

__all__ = ["GapTables", "ArbQueryWeights", "ClassQueries", "certified_residue"]
# Residue sequences per bulk chunk: the class tables are still held when the residue runs, so
# its chunk is kept small (forward_arb's default is up to 2^17 / width rows).
RESIDUE_ROWS = 128


class GapTables(BatchedTables):
    """BatchedTables whose integer forms are kept in three bounded caches: the check's constant
    matrices (VO_j, and what `keep` registers: c(W_out), VO_j·A) for the whole check, an
    output's matrices (what `keep_for_output` registers: c(W_out)·G, VO_j·G) until the next
    output (`new_output`), every other matrix until the next (output, query) group of classes
    (`new_group`).  Their memory and the Lemma R column caches' (one converter for the check,
    its caches at the same three lifetimes: _GapConverter) are charged once, up front, at their
    largest (`group_elements`), instead of per matrix as for overwhelm_family's single claim."""

    def __init__(self, dims, m, charge):
        from ..certificate import hold

        super().__init__(dims, m, charge)
        hold(charge, group_elements(dims), "integer forms and column caches")
        self.constant_ids = {id(x) for x in self.vo}
        self.output_ids = set()
        self.output, self.group = {}, {}

    def keep(self, m: list) -> None:
        """Register m as a constant of the check (its integer form kept to the end)."""
        self.constant_ids.add(id(m))

    def keep_for_output(self, m: list) -> None:
        """Register m as a matrix of the current output (kept until `new_output`)."""
        self.output_ids.add(id(m))

    def new_output(self) -> None:
        self.output, self.output_ids, self.group = {}, set(), {}

    def new_group(self) -> None:
        self.group = {}

    def lifetime(self, m: list) -> dict:
        """The cache whose lifetime is m's (constant, output or group)."""
        if id(m) in self.constant_ids:
            return self.ints
        return self.output if id(m) in self.output_ids else self.group

    def integers(self, m: list):
        if len(m) < 2 or len(m[0]) < 2:
            return IntMatrix(m)
        cache = self.lifetime(m)
        hit = cache.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        out = IntMatrix(m)
        cache[id(m)] = (m, out)
        return out


def group_elements(dims) -> int:
    """An upper bound of GapTables' kept elements: eight integers per entry of the constants
    (VO_j: R × d per head; c(W_out), A: d_mlp × d each) and of one output's matrices
    (c(W_out)·G: d_mlp × v; G: v × d), and one integer and one float (the binary64
    filter's) per row of every Lemma R column kept at once (per head: the output's G's v
    columns, the constant A's d_mlp and VO's d columns at both signs, two direction columns
    per class of one group, at most 2^(k−1) classes), v logit constants (one output's), and
    the filter's two binary64 ends of every weight w_j(i, u) of every query token (kept with
    the weights: _ArbWeights.floats)."""
    f, v, k, d = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model
    rows = v * k if f.positional == "standard" else v
    constants = 8 * (f.n_heads * rows * d + 2 * f.d_mlp * d)
    group = 8 * (f.d_mlp * v + v * d)
    columns = 2 * f.n_heads * rows * (v + 2 * f.d_mlp + 2 * d + 2 * 2 ** (k - 1))
    weights = 2 * f.n_heads * k * v * v
    return constants + group + columns + v + weights


class ArbQueryWeights:
    """family_gap.QueryWeights (w_j(i, u) = exp(score_j(i, u) − c_j), the query token q at
    p = k−1, each computed when first read) with the exact scores of `score_function`."""

    def __init__(self, tables, q: int):
        p = tables.dims.n_ctx - 1
        self.w, self.cache = [], {}
        for j in range(tables.f.n_heads):
            score = score_function(tables, j, p, q)
            shift = iv.mpf(iv.make_mpf(score(p, q)).mid)._mpi_
            self.w.append(_ArbWeights(score, shift))


class _ArbWeights(dict):
    """(i, u) -> exp_interval(score(i, u) − shift) on first access; `dyadic(key)`: its ends as
    exact (n, e) pairs (None if one is not finite), kept (ArbHead reads them per class)."""

    def __init__(self, score, shift):
        super().__init__()
        self.score, self.shift, self.ends, self.float_ends = score, shift, {}, {}

    def __missing__(self, key):
        raw = mpi_sub(self.score(*key), self.shift, iv.prec)
        value = self[key] = exp_interval(iv.make_mpf(raw))
        return value

    def dyadic(self, key):
        hit = self.ends.get(key)
        if hit is None and key not in self.ends:
            hit = self.ends[key] = _dyadic_or_none(self[key])
        return hit

    def floats(self, key):
        """(fl(W_lo), fl(W_hi)) of the weight at key for Lemma R's binary64 filter (None out
        of its range, or W_lo < 0: float_pair), kept."""
        hit = self.float_ends.get(key)
        if hit is None and key not in self.float_ends:
            hit = self.float_ends[key] = float_pair(self[key])
        return hit


def score_function(tables, j: int, p: int, q: int):
    """(i, u) -> the raw enclosure of q·key_j(i, u)·(1/√h) with q the query token at p: the
    exact interval dot product of the model's exact query and key integers (mp.int_matmul),
    rounded outward once, times the scale by one mpi_mul (the reference: family.dot, rounded
    at every step, then ·scale).  A non-finite entry: the reference's dot (raw_dot)."""
    model, prec = tables.model, iv.prec
    scale = model.scale._mpi_
    q_form = model.q_ints[j][p]
    try:
        q_int = (([q_form[0][q]], [q_form[1][q]], q_form[2]) if isinstance(q_form, tuple)
                 else IntMatrix([q_form[q]]).rows())
    except Malformed:
        q_int = None
    forms = {}

    def key_form(i):
        if i not in forms:
            k_form = model.key_ints[j][i]
            forms[i] = k_form if isinstance(k_form, tuple) else tables.integers(k_form).rows()
        return forms[i]

    def score(i: int, u: int):
        tables.tick()
        try:
            if q_int is None:
                raise Malformed("not finite")
            lo, hi, exponent = key_form(i)
            dot = int_matmul(q_int, ([lo[u]], [hi[u]], exponent), lambda: None)[0][0]._mpi_
        except Malformed:  # a non-finite entry (mp._dyadic): the reference's operations
            forms.pop(i, None)
            dot = raw_dot(_raws(model.q[j][p][q]), _raws(model.key[j][i][u]), prec)
        return mpi_mul(dot, scale, prec)

    return score


class ArbClassQuery(BulkSteps, gap.ClassQuery):
    """family_gap.ClassQuery with overwhelm_family_arb's heads (Lemma R on integers, after the
    binary64 filter), the logit constants once per output, and the class proof in one pass
    (family_gap_bulk.BulkSteps: the same values and verdict, AtQuery.check on a failure)."""

    def __init__(self, tables, fun, weights, q, m, slot_sets, hint, conv: _Converter):
        super().__init__(tables, fun, weights, q, m, slot_sets, hint)
        self.conv = conv  # conv.charge None: its caches are charged by GapTables, up front
        self.heads = [ArbHead(head, conv) for head in self.heads]

    def confirmed_directions(self, e: list, which: int) -> tuple:
        return confirmed_directions(self, e, which)

    def logit_const(self, t: int):
        """AtQuery.logit_const(t), once per (output, t) (it depends on nothing else)."""
        key = ("logit", self.claim.output, t)
        if key not in self.conv.consts:
            self.conv.consts[key] = super().logit_const(t)
        return self.conv.consts[key]


class _GapConverter(_Converter):
    """overwhelm_family_arb's converter whose Lemma R column caches live as long as their
    table's integer form in GapTables (`lifetime`): the constant tables' columns (VO_j,
    VO_j·A) for the whole check, an output's (VO_j·G) until the next output, the others (a
    class's direction projections) until the next group; the logit constants per output."""

    def __init__(self, tables):
        super().__init__()
        self.tables = tables
        self.stores = [None, None, None]  # (GapTables' cache, its columns): constant, output, group

    def new_output(self) -> None:
        self.consts = {}

    def use_store(self, table: list) -> None:
        """Point the column cache at the store of table's lifetime."""
        t = self.tables
        life = t.lifetime(table)
        level = 0 if life is t.ints else 1 if life is t.output else 2
        store = self.stores[level]
        if store is None or store[0] is not life:  # a new output's or group's: the old released
            store = self.stores[level] = (life, {})
        self.columns = store[1]

    def int_column(self, table: list, col: int, sign: int):
        self.use_store(table)
        return super().int_column(table, col, sign)

    def float_column(self, table: list, col: int, sign: int):
        self.use_store(table)
        return super().float_column(table, col, sign)

    def float_columns(self, table: list, sign: int) -> list:
        self.use_store(table)
        return super().float_columns(table, sign)


class ClassQueries:
    """A constructor (tables, fun, weights, q, m, slot_sets, hint) -> ArbClassQuery, with one
    converter (Lemma R's integer column caches, the logit constants) for the check: a new
    output's functionals `fun` start a new output (its G-dependent integer forms and columns
    replace the previous output's), a new query token q a new group of classes (the previous
    group's forms and columns are released; at most 2^(k−1) classes per (output, query),
    distinct keys, as group_elements assumes; their bound is charged once)."""

    def __init__(self):
        self.fun, self.q, self.conv, self.in_group = None, None, None, 0

    def __call__(self, tables, fun, weights, q, m, slot_sets, hint):
        if self.conv is None:
            self.conv = _GapConverter(tables)
        if self.fun is not fun:
            self.fun, self.q = fun, None
            tables.new_output()
            self.conv.new_output()
            for y in list(fun.y_a) + [fun.a]:  # VO_j·A, A and c(W_out): shared by every output
                tables.keep(y)
            if getattr(fun, "w_out_c", None) is not None:
                tables.keep(fun.w_out_c)
            for y in list(fun.y_g) + [fun.g]:  # VO_j·G and G: this output's
                tables.keep_for_output(y)
            if getattr(fun, "out_g", None) is not None:
                tables.keep_for_output(fun.out_g)
        # a new group at a new query token, and after every 2^(k−1) classes of one (output,
        # query): box classes (Lemma B) may add more classes to a (q, m) than group_elements
        # counts, so their direction columns are released in groups of at most that many
        if self.q != q or self.in_group >= 2 ** (tables.dims.n_ctx - 1):
            self.q, self.in_group = q, 0
            tables.new_group()
        self.in_group += 1
        return ArbClassQuery(tables, fun, weights, q, m, slot_sets, hint, self.conv)


def arb_ball(arb, x):
    """The Arb ball of the mpmath interval x: its two dyadic ends, each exact
    (arb((man, exp))), joined by arb_union (rigorous), so it contains x."""
    from .forward_arb import _man_exp

    lo, hi = (arb(_man_exp(e)) for e in x._mpi_)
    return lo if lo == hi else lo.union(hi)


def residue_elements(dims, mats: dict) -> int:
    """The elements certified_residue holds: the inputs as balls, forward_arb's tables and one
    chunk of sequences."""
    from . import forward, forward_arb

    rows = min(RESIDUE_ROWS, forward_arb.chunk_rows(dims))
    copies = sum(len(row) for table in mats.values() for row in table)
    return copies + forward.table_elements(dims) + forward_arb.working_elements(dims, rows)


def certified_residue(dims, mats: dict, charge, arith, residue: list) -> int:
    """How many residue sequences their forward pass proves correct (ℓ_max − ℓ_o > 0 for
    every o ≠ max over the enclosures: forward._certified's test), evaluated in bulk as rule
    forward_brute_force under --arith arb (forward_arb._BulkModel: the same theorem,
    spec/rules.md §forward_brute_force, spec/arithmetic.md §Bulk forward pass).  The rule's
    inputs are mpmath intervals with dyadic ends; each becomes the Arb ball of its two exact
    ends (arb((man, exp)) is exact, arb_union rigorous), which contains it, so every logit
    ball contains the exact logit.  Work: family_gap charges a forward pass per residue
    sequence up front (cost); memory: the inputs' ball copies, forward_arb's tables and one
    chunk of RESIDUE_ROWS sequences, held before they are built; the clock at every chunk."""
    from ..certificate import hold
    from . import forward_arb

    if not residue:
        return 0
    rows = min(RESIDUE_ROWS, forward_arb.chunk_rows(dims))
    hold(charge, residue_elements(dims, mats), "residue forward tables (bulk)")
    arb = arith.arb
    m = {name: [[arb_ball(arb, x) for x in row] for row in table] for name, table in mats.items()}
    model = forward_arb._BulkModel(dims, m, arith, charge)
    total = 0
    for start in range(0, len(residue), rows):
        charge(0)  # the clock, at every chunk
        total += model.certified_in([tuple(t) for t in residue[start:start + rows]])
    return total
