"""Rule family_gap's classes and class proofs (spec/rules.md §Rule family_gap, §merged
classes, §box classes): the class keys and their signatures (Lemma G1, G5, B1), sizes, slots,
hints, disjointness (G2, B2), the residue lookup (B3), the shared per-query and per-output
values, the class proof (`ClassQuery`, G3) and the cost.  The rule (family_gap.py) and its
parts (family_gap_arb.py, family_gap_float32.py, family_gap_bulk.py) import this module, and
it imports none of them: the import graph is a tree."""

from __future__ import annotations

import math
from types import SimpleNamespace

from mpmath import iv
from mpmath.libmp.libmpi import mpi_sub

from .. import ops
from ..errors import Malformed
from ..numbers import exp_interval
from . import forward
from . import overwhelm_family as family
from .overwhelm_family_bounds import decode_hint

HINT_FIELDS = family.HINT_FIELDS

# -- the classes --------------------------------------------------------------------------

def signature(dims, q: int, m: int, fixed, g: int) -> str | None:
    """None if the class (q, m, S = fixed, g) is well formed, so that every sequence of it
    has maximum m and exactly the non-query positions S holding m; for a merged class
    (fixed = i0, an int: Lemma G5) that every sequence has maximum m and first non-query
    position holding m at i0; else why not."""
    v, k = dims.d_vocab, dims.n_ctx
    if not (0 <= q <= m < v):
        return f"needs 0 <= q <= m < d_vocab, got q = {q}, m = {m}"
    if g < 1:
        return f"the gap must be >= 1, got {g}"
    if type(fixed) is int:  # merged class M(q, m, i0, g)
        if not 0 <= fixed <= k - 2:
            return f"the first position i0 must be in [0, {k - 2}], got {fixed}"
        if g > m:
            return f"the gap {g} leaves no token below the maximum (m = {m})"
        return None
    if list(fixed) != sorted(set(fixed)) or any(not 0 <= i < k - 1 for i in fixed):
        return f"S must be increasing non-query positions in [0, {k - 2}], got {list(fixed)}"
    if not fixed and q != m:
        return "S is empty but q < m: the class's maximum would not be m"
    if len(fixed) < k - 1 and g > m:
        return f"the gap {g} leaves no token for the free positions (m = {m})"
    return None


def class_size(dims, m: int, fixed, g: int) -> int:
    """|A|^(free positions), A = {0, …, m−g}: the sequences of the class; for a merged
    class (fixed = i0) |A|^i0 · (|A| + 1)^(k−2−i0) (Lemma G5); for a box Π |set_i| (Lemma
    B1: a product of its positions' sets)."""
    if isinstance(fixed, Box):
        return math.prod(max(0, hi - lo + 1) + e for lo, hi, e in fixed)
    if type(fixed) is int:
        a = m - g + 1
        return a ** fixed * (a + 1) ** (dims.n_ctx - 2 - fixed)
    free = dims.n_ctx - 1 - len(fixed)
    return (m - g + 1) ** free if free else 1


def slots(dims, q: int, m: int, fixed, g: int) -> list:
    """The token set of each position 0..k−1: {m} on S, A elsewhere, {q} at the query; for a
    merged class (fixed = i0) A before i0, {m} at i0, A ∪ {m} after it, {q} at the query."""
    if isinstance(fixed, Box):  # a box class: its own sets
        return [list(range(lo, hi + 1)) + [m] * e for lo, hi, e in fixed] + [[q]]
    alphabet = list(range(m - g + 1))
    if type(fixed) is int:
        return ([alphabet] * fixed + [[m]] + [alphabet + [m]] * (dims.n_ctx - 2 - fixed)
                + [[q]])
    return [[m] if i in fixed else alphabet for i in range(dims.n_ctx - 1)] + [[q]]


def first(fixed):
    """The first non-query position holding the maximum: i0 for a merged class, min S for an
    unmerged one, None when S is empty (Lemma G5's block key)."""
    if type(fixed) is int:
        return fixed
    return fixed[0] if fixed else None


def order_key(fixed) -> tuple:
    """S for an unmerged class, (i0,) for a merged one: the hint order compares (q, m, this)."""
    return (fixed,) if type(fixed) is int else tuple(fixed)


def describe(fixed) -> str:
    if isinstance(fixed, Box):
        return "box " + str([list(x) for x in fixed])
    return f"i0={fixed} (merged)" if type(fixed) is int else f"S={list(fixed)}"


def hint_floats(dims) -> int:
    shapes = family.hint_shapes(dims)
    return sum(math.prod(shapes[name]) for name in HINT_FIELDS)


def parse_hints(hints, dims, charge, deep: bool = False) -> list:
    """{"classes": [[q, m, S, g, box, pre, diff, dir, dir_lo], ...]} -> [(q, m, S, g,
    {field: nested floats})], every class well formed (`signature`) and the keys
    (q, m, S) strictly increasing (so distinct: the classes are disjoint).  The floats
    are charged to the memory limit before any is decoded.  deep (several layers,
    family_gap_deep.py): [[q, m, S, g, hint], ...] -> [(q, m, S, g, hint)], the hint
    overwhelm_deep's {"boxes", "diff"}, left undecoded (its rule decodes and checks it)."""
    from ..certificate import hold

    if not (isinstance(hints, dict) and "classes" in hints
            and set(hints) <= {"classes", "residue", "boxes"}
            and isinstance(hints["classes"], list)):
        raise Malformed('rule family_gap: hints must be {"classes": [[q, m, S, g, box, pre, '
                        'diff, dir, dir_lo], ...]} and optionally "residue": [[t_0, ...], ...] '
                        'and "boxes": [[q, m, [[lo, hi, e], ...], box, pre, diff, dir, dir_lo], '
                        '...]')
    entries = hints["classes"]
    hold(charge, len(entries) * ((0 if deep else hint_floats(dims)) + dims.n_ctx + 4), "hints")
    shapes, out, last = (None if deep else family.hint_shapes(dims)), [], None
    for n, entry in enumerate(entries):
        charge(0)  # the clock
        if not (isinstance(entry, list) and len(entry) == 4 + (1 if deep else len(HINT_FIELDS))
                and all(type(x) is int for x in (entry[0], entry[1], entry[3]))
                and ((isinstance(entry[2], list) and all(type(i) is int for i in entry[2])
                      and len(entry[2]) < dims.n_ctx)
                     or (isinstance(entry[2], dict) and set(entry[2]) == {"first"}
                         and type(entry[2]["first"]) is int))):
            raise Malformed(f"rule family_gap: class {n} must be [q, m, S, g, "
                            f"{', '.join(HINT_FIELDS)}] with integers q, m, g and a list S "
                            'or {"first": i0} (a merged class, Lemma G5)')
        q, m, g = entry[0], entry[1], entry[3]
        fixed = entry[2]["first"] if isinstance(entry[2], dict) else tuple(entry[2])
        why = signature(dims, q, m, fixed, g)
        if why is not None:
            raise Malformed(f"rule family_gap: class {n} (q={q}, m={m}, {describe(fixed)}): "
                            f"{why}")
        key = (q, m, order_key(fixed))
        if last is not None and not last[0] < key:
            raise Malformed(f"rule family_gap: class {n} (q={q}, m={m}, {describe(fixed)}) is "
                            "not after the previous one: classes must be sorted by (q, m, S) "
                            "without repeats (distinct classes are disjoint)")
        # Lemma G5: the keys sort by (q, m, first position holding m), so the classes of one
        # block (q, m, i0) are adjacent; a merged class must be alone in its block.
        block = (q, m, first(fixed))
        if last is not None and last[1] == block and (last[2] or type(fixed) is int):
            raise Malformed(f"rule family_gap: class {n} (q={q}, m={m}, {describe(fixed)}) "
                            f"overlaps the previous one: a merged class must be the only class "
                            f"of its (q, m, first position of m) = {block} (Lemma G5)")
        last = (key, block, type(fixed) is int)
        if deep:
            out.append((q, m, fixed, g, entry[4]))
            continue
        arrays = {}
        for name, text in zip(HINT_FIELDS, entry[4:]):
            arrays[name] = decode_hint(text, shapes[name], f"hint {name} of class {n}")
        out.append((q, m, fixed, g, arrays))
    return out


def parse_residue(hints, dims, charge) -> list:
    """The optional residue: distinct sequences (strictly increasing lexicographically),
    each of length k with tokens in [0, v), charged to the memory limit first."""
    from ..certificate import hold

    rows = hints.get("residue", [])
    if not isinstance(rows, list):
        raise Malformed("rule family_gap: the residue must be a list of sequences")
    hold(charge, len(rows) * dims.n_ctx, "residue")
    out, last = [], None
    for n, row in enumerate(rows):
        charge(0)  # the clock
        if not (isinstance(row, list) and len(row) == dims.n_ctx
                and all(type(t) is int and 0 <= t < dims.d_vocab for t in row)):
            raise Malformed(f"rule family_gap: residue sequence {n} must be {dims.n_ctx} "
                            f"tokens in [0, {dims.d_vocab - 1}]")
        t = tuple(row)
        if last is not None and not last < t:
            raise Malformed(f"rule family_gap: residue sequence {n} {list(t)} is not after the "
                            "previous one (sorted, without repeats)")
        last = t
        out.append(t)
    return out


# -- box classes (spec/rules.md §family_gap: box classes, Lemmas B1–B3) ----------------------

class Box(tuple):
    """A box class's non-query positions, one (lo, hi, e) per position 0..k−2: the token set
    {lo, …, hi} ∪ ({m} if e) (lo = hi + 1: no interval)."""

    __slots__ = ()


def position_sets(dims, m: int, fixed, g: int) -> list:
    """The (lo, hi, e) token set of every non-query position of any class: a box's own; for
    C(q, m, S, g) {m} on S and A = [0, m−g] elsewhere; for M(q, m, i0, g) A before i0, {m}
    at i0, A ∪ {m} after (the sets of `slots`, as intervals)."""
    if isinstance(fixed, Box):
        return list(fixed)
    k, a = dims.n_ctx, m - g
    if type(fixed) is int:
        return [(0, a, 0) if i < fixed else (0, -1, 1) if i == fixed else (0, a, 1)
                for i in range(k - 1)]
    return [(0, -1, 1) if i in fixed else (0, a, 0) for i in range(k - 1)]


def sets_disjoint(x: tuple, y: tuple) -> bool:
    """Whether the token sets {lo..hi} ∪ ({m} if e) of x and y (one m) are disjoint: the
    intervals do not meet (one empty, or one ends before the other starts) and not both
    hold m (m lies above both intervals)."""
    (lo1, hi1, e1), (lo2, hi2, e2) = x, y
    apart = lo1 > hi1 or lo2 > hi2 or hi1 < lo2 or hi2 < lo1
    return apart and not (e1 and e2)


def box_signature(dims, q: int, m: int, sets) -> str | None:
    """None if the box class is well formed (Lemma B1: every member has maximum m), else why
    not: 0 <= q <= m < v, every position's set nonempty within [0, m] (lo >= 0, hi <= m−1,
    lo <= hi + 1, lo <= hi or e), and m attained (q = m or some position's set is {m})."""
    v = dims.d_vocab
    if not (0 <= q <= m < v):
        return f"needs 0 <= q <= m < d_vocab, got q = {q}, m = {m}"
    for i, (lo, hi, e) in enumerate(sets):
        if not (0 <= lo <= hi + 1 and hi <= m - 1 and e in (0, 1) and (lo <= hi or e)):
            return (f"position {i}'s set [{lo}, {hi}] (+m: {e}) must be a nonempty part of "
                    f"[0, m] with 0 <= lo <= hi + 1, hi <= m − 1")
    if q != m and not any(lo > hi and e for lo, hi, e in sets):
        return "q < m and no position's set is {m}: the maximum would not be m"
    return None


def parse_boxes(hints, dims, charge, classes: list, deep: bool = False) -> list:
    """{"boxes": [[q, m, [[lo, hi, e], ...k−1], box, pre, diff, dir, dir_lo], ...]} ->
    [(q, m, Box, 0, {field: nested floats})], each well formed (`box_signature`, Lemma B1)
    and disjoint from every other box and every class of the same (q, m) (`check_disjoint`,
    Lemma B2); the floats charged to the memory limit before any is decoded.  deep (several
    layers): [q, m, [[lo, hi, e], ...], hint] with the hint overwhelm_deep's, left to its
    check (which charges and decodes it), as parse_hints(deep=True)."""
    from ..certificate import hold

    entries = hints.get("boxes", [])
    if not isinstance(entries, list):
        raise Malformed("rule family_gap: the boxes must be a list")
    k = dims.n_ctx
    fields = 1 if deep else len(HINT_FIELDS)
    hold(charge, len(entries) * ((0 if deep else hint_floats(dims)) + 3 * k + 2), "hints")
    shapes, out = family.hint_shapes(dims), []
    for n, entry in enumerate(entries):
        charge(0)  # the clock
        if not (isinstance(entry, list) and len(entry) == 3 + fields
                and type(entry[0]) is int and type(entry[1]) is int
                and isinstance(entry[2], list) and len(entry[2]) == k - 1
                and all(isinstance(x, list) and len(x) == 3 and all(type(y) is int for y in x)
                        for x in entry[2])):
            raise Malformed(f"rule family_gap: box {n} must be [q, m, [[lo, hi, e], ... "
                            f"{k - 1} positions], "
                            f"{'hint' if deep else ', '.join(HINT_FIELDS)}] with integers")
        q, m, sets = entry[0], entry[1], Box(tuple(x) for x in entry[2])
        why = box_signature(dims, q, m, sets)
        if why is not None:
            raise Malformed(f"rule family_gap: box {n} (q={q}, m={m}, {list(map(list, sets))}):"
                            f" {why}")
        if deep:
            out.append((q, m, sets, 0, entry[3]))
            continue
        arrays = {}
        for name, text in zip(HINT_FIELDS, entry[3:]):
            arrays[name] = decode_hint(text, shapes[name], f"hint {name} of box {n}")
        out.append((q, m, sets, 0, arrays))
    check_disjoint(dims, classes, out, charge)
    return out


def check_disjoint(dims, classes: list, boxes: list, charge) -> None:
    """Lemma B2: every box is disjoint from every other box and every class with the same
    (q, m) — some non-query position's token sets are disjoint (`sets_disjoint`); classes
    and boxes of different (q, m) are disjoint (t_{k−1} and max t differ; Lemma B1), and
    the classes among themselves are (G2, G5: `parse_hints`).  Charged before the work:
    k per pair compared."""
    groups = {}
    for q, m, fixed, g, _ in classes:
        groups.setdefault((q, m), ([], []))[0].append(position_sets(dims, m, fixed, g))
    for n, (q, m, fixed, _g, _) in enumerate(boxes):
        groups.setdefault((q, m), ([], []))[1].append((n, list(fixed)))
    pairs = sum(len(b) * (len(c) + len(b)) for c, b in groups.values())
    charge(pairs * dims.n_ctx)
    for (q, m), (old, new) in groups.items():
        for a, (n, x) in enumerate(new):
            for y in old + [z for _, z in new[a + 1:]]:
                if not any(sets_disjoint(u, w) for u, w in zip(x, y)):
                    raise Malformed(f"rule family_gap: box {n} (q={q}, m={m}, "
                                    f"{[list(u) for u in x]}) meets another class or box of "
                                    f"the same (q, m) (Lemma B2: boxes must be disjoint)")


def total(dims, classes: list, proven: int, certified: int, n_residue: int, merged: dict,
          boxes: dict, residue_how: str) -> tuple:
    """(proven + certified, the verdict's sentence): the classes' sizes plus the certified
    residue sequences, which lie in no class (in_class).  More than the v^k sequences of the
    domain cannot come from disjoint sets: fail closed."""
    if proven + certified > dims.d_vocab ** dims.n_ctx:
        raise AssertionError("family_gap: the classes hold more sequences than the domain")
    n_boxes = sum(len(b) for b in boxes.values())
    return proven + certified, (
        f"{proven} sequences certified in {len(classes) - n_boxes} gap classes (q, m, S, g) "
        f"({len(merged)} merged (q, m, i0, g))"
        f"{f' and {n_boxes} box classes' if n_boxes else ''} by Lemma R bounds at the last "
        f"position, {certified} of {n_residue} residue sequences by their {residue_how}")


def in_class(classes: dict, t: tuple, merged: dict | None = None,
             boxes: dict | None = None) -> bool:
    """Whether sequence t lies in one of the classes {(q, m, S): g} or merged classes
    {(q, m, i0): g}: by Lemmas G4 and G5 only the class keyed by t's signature (t[k−1],
    max t, the non-query positions S holding it) or the merged class keyed by
    (t[k−1], max t, min S) can hold t, and it does iff every other non-query token is
    <= m − g."""
    m = max(t)
    fixed = tuple(i for i, u in enumerate(t[:-1]) if u == m)
    gaps = [classes.get((t[-1], m, fixed))]
    if merged and fixed:
        gaps.append(merged.get((t[-1], m, fixed[0])))
    if any(g is not None and all(u <= m - g for u in t[:-1] if u != m) for g in gaps):
        return True
    return any(all(lo <= u <= hi or (e and u == m) for u, (lo, hi, e) in zip(t, sets))
               for sets in (boxes or {}).get((t[-1], m), ()))


def class_index(classes: list) -> tuple:
    """in_class's three lookups: {(q, m, S): g}, {(q, m, i0): g}, {(q, m): [box sets]}."""
    keyed, merged, boxes = {}, {}, {}
    for q, m, fixed, g, _ in classes:
        if isinstance(fixed, Box):
            boxes.setdefault((q, m), []).append(tuple(fixed))
        elif type(fixed) is int:
            merged[(q, m, fixed)] = g
        else:
            keyed[(q, m, fixed)] = g
    return keyed, merged, boxes


# -- shared tables ------------------------------------------------------------------------

class QueryWeights:
    """w_j(i, u) = exp(score_j(i, u) − c_j) for position i and token u, with the query token q
    at p = k−1 (c_j any real: softmax is shift-invariant), each computed when first read
    (a slot of some class: a token no class reads is never exponentiated)."""

    def __init__(self, tables, q: int):
        model, p = tables.model, tables.dims.n_ctx - 1
        self.w, self.cache = [], {}  # cache: ClassQuery's vectors of this query token
        for j in range(tables.f.n_heads):
            query = model.q[j][p][q]

            def score(i, u, j=j, query=query):
                tables.tick()
                return family.dot(query, model.key[j][i][u]) * model.scale

            self.w.append(_Weights(score, iv.mpf(score(p, q).mid)))


class _Weights(dict):
    """(i, u) -> exp(score(i, u) − shift), filled on first access."""

    def __init__(self, score, shift):
        super().__init__()
        self.score, self.shift = score, shift

    def __missing__(self, key):
        value = self[key] = exp_interval(self.score(*key) - self.shift)
        return value


class SharedHead(family.Head):
    """overwhelm_family.Head over given slots, with precomputed weights (Lemma R reads
    w only at the slots' (position, token) pairs)."""

    def __init__(self, tables, weights: dict, slot_sets: list):
        self.slots, self.tables, self.w, self.perm = slot_sets, tables, weights, None


class SharedFunctionals:
    """The functionals of overwhelm_family.Functionals for every output o: the
    o-independent part (MLP pre-activations, c(W_out), c(b_out)) once, and per head
    P_j = VO_j·(w_f ∘ U) (rows × v), c(W_out)·(w_f ∘ U), c(b_out)·(w_f ∘ U) once;
    for output o, column t minus column o encloses the projection of
    g_t = w_f ∘ (U[:, t] − U[:, o]) (linearity)."""

    def __init__(self, tables):
        m, f = tables.m, tables.f
        self.tables = tables
        w_f, b_f = family.ln_params(m, f, "ln_final")
        u = m["W_U"]  # (d, v)
        self.u = u
        self.wu = u if w_f is None else [[x * w for x in row] for row, w in zip(u, w_f)]
        self.w_f, self.b_f = w_f, b_f
        self.y_u = [ops.matmul(vo, self.wu, tables.tick) for vo in tables.vo]  # rows × v
        self.a, self.y_a, self.pre_const = [], [], []
        if f.d_mlp and not f.parallel:
            w2, b2 = family.ln_params(m, f, "ln2")
            cols = ops.transpose(m["W_in"])
            self.a = [c if w2 is None else [x * y for x, y in zip(c, w2)] for c in cols]
            self.y_a = tables.project(self.a)
            b2_w = ops.matmul([b2], m["W_in"], tables.tick)[0] if b2 else [0] * f.d_mlp
            self.pre_const = [a + b for a, b in zip(b2_w, m["b_in"][0])]
        if f.d_mlp:
            self.w_out_c = family.centred_rows(m["W_out"], tables.centre)
            self.b_out_c = family.centred(m["b_out"][0], tables.centre)
            self.out_u = ops.matmul(self.w_out_c, self.wu, tables.tick)  # d_mlp × v
            self.b_out_u = ops.matmul([self.b_out_c], self.wu, tables.tick)[0]

    def for_output(self, o: int):
        """An object with overwhelm_family.Functionals' fields for output o."""
        v, f, t = self.tables.dims.d_vocab, self.tables.f, self.tables
        fun = SimpleNamespace(w_f=self.w_f, b_f=self.b_f, a=self.a, y_a=self.y_a,
                              pre_const=self.pre_const)
        fun.d_u = [[row[s] - row[o] for row in self.u] for s in range(v)]
        fun.g = [[row[s] - row[o] for row in self.wu] for s in range(v)]  # encloses w_f∘D_s
        t.tick()
        fun.y_g = [column_differences(y, o) for y in self.y_u]
        if f.d_mlp:
            fun.w_out_c, fun.b_out_c = self.w_out_c, self.b_out_c
            fun.out_g = column_differences(self.out_u, o)
            fun.b_out_g = [self.b_out_u[s] - self.b_out_u[o] for s in range(v)]
        return fun


def column_differences(matrix: list, o: int) -> list:
    """[[r[s] − r[o] for s] for r in matrix] for interval entries: each difference is
    mpmath's interval subtraction (iv.mpf.__sub__ is mpi_sub at iv.prec) on the raw pairs,
    the same values without the objects' dispatch."""
    prec, make = iv.prec, iv.make_mpf
    out = []
    for r in matrix:
        raws = [x._mpi_ for x in r]
        ro = raws[o]
        out.append([make(mpi_sub(x, ro, prec)) for x in raws])
    return out


class ClassQuery(family.AtQuery):
    """overwhelm_family.AtQuery (steps 2–6) at p = k−1 for the class's token sets, output m."""

    def __init__(self, tables, fun, weights: QueryWeights, q: int, m: int, slot_sets, hint):
        self.t, self.fun, self.p, self.hint = tables, fun, tables.dims.n_ctx - 1, hint
        self.claim = SimpleNamespace(output=m, query=q, prefix=(), free_perm=None)
        self.f, self.m, self.centre = tables.f, tables.m, tables.centre
        self.heads = [SharedHead(tables, weights.w[j], slot_sets)
                      for j in range(self.f.n_heads)]
        cache = weights.cache  # what depends on q only (and on m: base·g), once
        if "base" not in cache:
            cache["x_p"] = tables.model.resid0[self.p][q]
            cache["base"] = family.centred(forward._add(cache["x_p"], self.m["b_O"][0]),
                                           self.centre)
            cache["base_a"] = tables.matmul_t([cache["base"]], fun.a)[0] if fun.a else []
        if ("base_g", m) not in cache:
            cache["base_g", m] = tables.matmul_t([cache["base"]], fun.g)[0]
        self.x_p, self.base, self.base_a = cache["x_p"], cache["base"], cache["base_a"]
        self.base_g = cache["base_g", m]


# -- cost and the rule --------------------------------------------------------------------

def cost(dims, classes: list, residue: int = 0) -> int:
    """Interval operations charged before any work: overwhelm_family's tables, the shared
    projections, the weights per query token, the functionals per maximum, and per class
    every Lemma R bound over its (position, token) slots plus the box, MLP and logit work,
    and a forward pass (forward_brute_force's per-sequence charge) per residue sequence."""
    f, d, v, k, h = dims.family, dims.d_model, dims.d_vocab, dims.n_ctx, dims.d_head
    rows = v * k if f.positional == "standard" else v
    tables = f.n_heads * (3 * v * k * d * h + rows * d * (h + v + f.d_mlp)) + v * k * 20 * d
    shared = d * v + f.d_mlp * d * (v + 2)
    queries = len({c[0] for c in classes}) * f.n_heads * k * v * (2 * h + forward._EXP_COST)
    outputs = len({c[1] for c in classes}) * (2 * v * d + f.n_heads * rows * v
                                               + f.d_mlp * v + v)
    per_class = sum(class_charge(dims, m, fixed, g) for _, m, fixed, g, _ in classes)
    return tables + shared + queries + outputs + per_class + residue * forward._sequence_cost(dims)


def class_charge(dims, m: int, fixed, g: int) -> int:
    """`cost`'s charge for one class: its Lemma R bounds over its (position, token) slots,
    the box, MLP and logit work."""
    f, d, v, k = dims.family, dims.d_model, dims.d_vocab, dims.n_ctx
    rows = v * k if f.positional == "standard" else v
    functionals = 2 * d + 2 * f.d_mlp + v + 2
    if isinstance(fixed, Box):  # a box: its sets and the query
        n_slots = 1 + sum(max(0, hi - lo + 1) + e for lo, hi, e in fixed)
    elif type(fixed) is int:  # merged: A before i0, {m} at i0, A ∪ {m} after, the query
        n_slots = 2 + fixed * (m - g + 1) + (k - 2 - fixed) * (m - g + 2)
    else:
        n_slots = len(fixed) + 1 + (k - 1 - len(fixed)) * (m - g + 1)
    return (f.n_heads * functionals * n_slots * 6 + rows * d + d * (v + f.d_mlp)
            + (4 * d + 1) * f.d_mlp + v * (2 * d + f.d_mlp))


def dimensionality(dims, hints=None) -> int:
    """Unexplained dimensionality (spec/rules.md §proof length, §family_gap): the black boxes
    the rule enumerates — the attention scores (query token, position, token) -> ℝ^H
    (k·v²·H), the value-output vectors (row, head) -> ℝ^d (R·d·H, R = v·k rows or v with
    RoPE), W_U (d·v) and the MLP's W_in, W_out (2·d·d_mlp) read entry by entry through the
    functionals — and each residue sequence's logits (v each).  On several layers
    (family_gap_deep.py) every layer's attention scores, value-output vectors and MLP
    (n_layers times the per-layer part), W_U once."""
    f, v, k, d = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model
    rows = v * k if f.positional == "standard" else v
    residue = len(hints.get("residue", [])) if isinstance(hints, dict) else 0
    return (f.n_layers * (f.n_heads * (k * v * v + rows * d) + 2 * d * f.d_mlp) + d * v
            + residue * v)


def table_elements(dims) -> int:
    """overwhelm_family's tables, every query token's weights and per-token vectors (x_p, base,
    base·A, base·G of one output), one output's functionals."""
    f, v, k, d = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model
    rows = v * k if f.positional == "standard" else v
    return (family.table_elements(dims) + v * (2 * f.n_heads * k * v + 2 * d + f.d_mlp + v)
            + 2 * (f.n_heads * rows * v + f.d_mlp * v + v * d) + 4 * d + 3 * f.d_mlp)
