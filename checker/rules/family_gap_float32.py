"""Rule family_gap under the float32 semantics (one layer; spec/rules.md §Rule family_gap
under the float32 semantics).

Theorem.  For every class (q, m, S, g) (or merged class M(q, m, i0, g)) whose check passes
here, every sequence t of the class has output m, strictly, in EVERY binary32 execution of
spec/theorem.md §2c; every residue sequence counted has its strict argmax max(t) in every
binary32 execution.  So at least the returned number of sequences is correct in float32.

Proof (spec/rules.md): a class is a set of sequences with per-position token sets
slot[i] and the query q at p = k−1; rule overwhelm_family's float32 variant
(overwhelm_family_float32.py, Lemma W-family) proves "output m at position p for every
sequence whose token at position i lies in slot[i]" for slot sets built from a claim's
prefix and alphabet, and its proof never uses the shape of the slot sets: Lemma R is a
maximum per position over slot[i], the magnitude bounds V, M_j, Rz_j, Rr take maxima over the
same slots, and Lemma S's ρ the maximum |s̃| over them.  So `ClassQuery` is that variant's
AtQuery over the class's slots (and the family_gap functionals, which enclose the same
vectors).  The residue is decided by forward_float32.Float32Model (every step an enclosure
of its float32 value), not by the real forward pass.

Scope: that of overwhelm_family_float32.scope on one layer (LN, LNPre or no normalisation,
a sequential or parallel MLP; the real rule's), the rest refused by name (Rejected).
mpmath only (certificate.py passes mpmath for a float32 theorem).
Cost: family_gap's cost plus, per class, the float scores and Lemma S weights of every slot,
and the widening's own work per functional and head (M_j over the slots, Rz_j·|c(W_O[j])||a|),
and the float LayerNorms; charged before any work.
"""

from __future__ import annotations

from types import SimpleNamespace

from .. import ops
from ..errors import Malformed, Rejected
from . import family_gap_classes as gap
from . import forward
from . import overwhelm_family as base
from . import overwhelm_family_float32 as f32


def refuse(dims) -> None:
    """overwhelm_family_float32's one-layer scope (`scope`: LN, LNPre or no normalisation,
    sequential or parallel MLP), by name (Rejected): that of the real rule, which refuses
    several layers, RMS and a gated MLP itself."""
    if dims.family.n_layers > 1:  # overwhelm_family_float32.scope allows them: not this rule
        raise Rejected("family_gap, semantics == float32: several layers are not supported "
                       "(the real rule refuses them too)")
    f32.scope(dims, SimpleNamespace(free_perm=None))


class ClassQuery(f32.AtQuery):
    """overwhelm_family_float32.AtQuery at p = k−1 over the class's slots, output m."""

    def __init__(self, tables: f32.Tables, fun, cache: dict, q: int, m: int, slot_sets, hint):
        self.t, self.fun, self.p, self.hint = tables, fun, tables.dims.n_ctx - 1, hint
        self.claim = SimpleNamespace(output=m, query=q, prefix=(), free_perm=None)
        self.f, self.m, self.centre = tables.f, tables.m, tables.centre
        self.heads = [f32.Head(tables, j, self.p, slot_sets) for j in range(self.f.n_heads)]
        if ("base", q) not in cache:  # what depends on q only, once per query token
            x_p = tables.model.resid0[self.p][q]
            b = base.centred(forward._add(x_p, self.m["b_O"][0]), self.centre)
            cache["base", q] = (x_p, b, ops.matmul([b], ops.transpose(fun.a), tables.tick)[0]
                                if fun.a else [])
        self.x_p, self.base, self.base_a = cache["base", q]
        if ("base_g", q, m) not in cache:
            cache["base_g", q, m] = ops.matmul([self.base], ops.transpose(fun.g),
                                               tables.tick)[0]
        self.base_g = cache["base_g", q, m]
        self._errors()


def n_slots(dims, m: int, fixed, g: int) -> int:
    """The (position, token) slots of a class (as family_gap.cost counts them)."""
    k = dims.n_ctx
    if isinstance(fixed, gap.Box):
        return 1 + sum(max(0, hi - lo + 1) + e for lo, hi, e in fixed)
    if type(fixed) is int:
        return 2 + fixed * (m - g + 1) + (k - 2 - fixed) * (m - g + 2)
    return len(fixed) + 1 + (k - 1 - len(fixed)) * (m - g + 1)


def cost(dims, classes: list, residue: int = 0) -> int:
    """family_gap.cost (its tables, functionals, Lemma R bounds, a forward pass per residue
    sequence) plus the float32 work: |W_O| and |c(W_O)| per head, and per class the float
    scores and weights of every slot (score, its error bound, exp), the widening per
    functional and head (M_j over the slots, Rz_j·|c(W_O[j])||a|: h·d), and the float
    LayerNorms' deviation bounds (d each, three norms)."""
    f, d, h = dims.family, dims.d_model, dims.d_head
    extra = 2 * f.n_heads * h * d
    for _, m, fixed, g, _ in classes:
        slots = n_slots(dims, m, fixed, g)
        extra += (f.n_heads * slots * (3 * h + forward._EXP_COST)
                  + base.n_functionals(dims) * f.n_heads * (slots + h * d)
                  + 3 * 20 * d + f.n_heads * h * d)
    return gap.cost(dims, classes, residue) + extra


def check(dims, mats, hints, charge):
    """(the number of sequences proved correct in float32, the note)."""
    from ..certificate import hold

    refuse(dims)
    classes = gap.parse_hints(hints, dims, charge)
    classes = classes + gap.parse_boxes(hints, dims, charge, classes)  # Lemma B1, B2
    residue = gap.parse_residue(hints, dims, charge)
    charge(cost(dims, classes, len(residue)))
    hold(charge, gap.table_elements(dims) + 2 * dims.family.n_heads * dims.d_head
         * dims.d_model, "tables")
    tables = f32.Tables(dims, mats, charge)  # Float32Model's enclosures
    shared = gap.SharedFunctionals(tables)
    proven, fun, fun_m, cache = 0, None, None, {}
    for n in sorted(range(len(classes)), key=lambda n: (classes[n][1], classes[n][0], n)):
        q, m, fixed, g, hint = classes[n]
        charge(0)  # the clock
        if m != fun_m:
            cache = {key: x for key, x in cache.items() if key[0] == "base"}
            fun, fun_m = shared.for_output(m), m
        ClassQuery(tables, fun, cache, q, m, gap.slots(dims, q, m, fixed, g), hint).check()
        proven += gap.class_size(dims, m, fixed, g)
    keyed, merged, boxes = gap.class_index(classes)
    certified = 0
    for t in residue:  # outside every class, then its own FLOAT32 forward pass
        charge(0)  # the clock
        if gap.in_class(keyed, t, merged, boxes):
            raise Malformed(f"rule family_gap: residue sequence {list(t)} lies in a class")
        certified += forward._certified(tables.model.logits(t), max(t))
    return gap.total(dims, classes, proven, certified, len(residue), merged, boxes,
                     "float32 forward pass (float32 semantics: Lemma W-family, every bound "
                     "widened by its float32 error; evaluated with mpmath)")
