"""Rule family_gap on a model with n_layers >= 2 (spec/rules.md §family_gap on several
layers): the same classes and count, each class proved by overwhelm_deep's layer-after-layer
boxes over its product set.

A class (q, m, S, g) or merged class M(q, m, i0, g) is a product set: position i holds a
token of slots[i] (`family_gap_classes.slots`: {m}, A = {0, …, m−g} or A ∪ {m}), the query
position k−1 holds q.  overwhelm_deep's Theorem holds for any product set (its states (i, u),
u ∈ slots[i], stand for the sequences with t_i' ∈ slots[i'] for i' < i and t_i = u, and a
state attends to exactly those: `overwhelm_deep.ProductClaim`), so its check proves that
logit m exceeds every other at position k−1 for every sequence of the class: each is
correct (its maximum is m, Lemma G1 / G5).  Keys, disjointness and sizes are family_gap's
(`parse_hints`, `class_size`); the rule proves the sum of the sizes.

Hints {"classes": [[q, m, S, g, {"boxes": [...], "diff": [...]}], ...]} sorted by (q, m, S)
as on one layer; each class's hint is overwhelm_deep's for its ProductClaim.  Optionally
"residue": sequences sorted and distinct, as on one layer: each verified to lie in no class
(`in_class`, Lemmas G1 / G5) and decided by its own forward pass (forward_brute_force's
_Model over every layer); the certified ones are added.  Optionally "boxes": [[q, m,
[[lo, hi, e], ...k−1], hint], ...]: box classes (Lemmas B1–B2, checked by family_gap's
`parse_boxes`: well formed, disjoint from every class and box of their (q, m)), each a product
set proved like a class, its hint overwhelm_deep's for its ProductClaim.
Cost: overwhelm_deep's `cost` per class, charged by its check before the class's tables; a
forward pass per residue sequence (forward_brute_force's per-sequence charge, and its
tables and positions as _Model computes them).
Memory: the largest class's decoded hints and layer boxes, held once before any class (a
class's are released before the next is built).
"""

from __future__ import annotations

from ..errors import Malformed
from . import overwhelm_deep as deep
from .family_gap_classes import (
    class_index,
    class_size,
    describe,
    in_class,
    parse_boxes,
    parse_hints,
    parse_residue,
    slots,
    total,
)


def claims(dims, classes: list):
    """The ProductClaim of each class in turn (its slots, output m), built one at a time: a
    class's slots hold up to k·v tokens, so all of them at once could exceed what the memory
    limit charged for the class keys."""
    return (deep.ProductClaim(slots(dims, q, m, fixed, g), m) for q, m, fixed, g, _ in classes)


def cost(dims, classes: list, semantics: str = "real") -> int:
    """The work the classes' checks charge (overwhelm_deep.cost per class; float32: plus
    overwhelm_deep_float32.extra_cost)."""
    if semantics == "float32":
        from .overwhelm_deep_float32 import extra_cost

        return sum(deep.cost(dims, c) + extra_cost(dims, c) for c in claims(dims, classes))
    return sum(deep.cost(dims, c) for c in claims(dims, classes))


def check(dims, mats, hints, charge, semantics: str = "real") -> tuple:
    """(the number of sequences in the classes, the note), after proving every class.
    semantics float32: every class by overwhelm_deep_float32 (Lemma W-deep over its product
    set) and every residue sequence by forward_float32's pass: every binary32 execution."""
    from ..certificate import hold

    prove, elements = deep.check, deep.elements
    if semantics == "float32":
        from . import overwhelm_deep_float32 as deep_f32

        prove, elements = deep_f32.check, (lambda d, c: 2 * deep.elements(d, c))
    elif semantics != "real":
        raise Malformed(f"rule family_gap: unknown semantics {semantics!r}")

    if not (isinstance(hints, dict) and "classes" in hints
            and set(hints) <= {"classes", "boxes", "residue"}):
        raise Malformed('rule family_gap on several layers: hints must be {"classes": [[q, m, '
                        'S, g, {"boxes": ..., "diff": ...}], ...]} and optionally "boxes": '
                        '[[q, m, [[lo, hi, e], ...], hint], ...] and "residue"')
    classes = parse_hints(hints, dims, charge, deep=True)
    classes = classes + parse_boxes(hints, dims, charge, classes, deep=True)
    residue = parse_residue(hints, dims, charge)
    hold(charge, max((deep.hint_elements(dims, c) + elements(dims, c)
                      for c in claims(dims, classes)), default=0),
         "one class's decoded hints and layer boxes")

    def one_class(n):  # no `hold`: a class's tables are held above, once
        charge(n)

    proven, worst = 0, None
    for (q, m, fixed, g, hint), claim in zip(classes, claims(dims, classes)):
        charge(0)  # the clock
        smallest = prove(dims, mats, claim, hint, one_class)
        proven += class_size(dims, m, fixed, g)
        if smallest and (worst is None or smallest[0] < worst[0]):  # (float32: "")
            worst = (smallest[0], f"(q={q}, m={m}, {describe(fixed)}, g={g}) logit "
                                  f"{smallest[2]}")
    keyed, merged, boxes = class_index(classes)
    certified = certified_residue(dims, mats, charge, residue, keyed, merged, semantics, boxes)
    proven, _ = total(dims, classes, proven, certified, len(residue), merged, boxes,
                      "forward pass")  # <= v^k
    n_boxes = sum(len(b) for b in boxes.values())
    said = (f"{proven} sequences certified in {len(classes) - n_boxes} gap classes (q, m, S, g) "
            f"({len(merged)} merged (q, m, i0, g))"
            f"{f' and {n_boxes} box classes' if n_boxes else ''} by {dims.family.n_layers} "
            "layers of boxes "
            "(overwhelm_deep) and Lemma R at the last position"
            + ("; float32 semantics: every box widened by its float32 error (Lemma W-deep), "
               "the residue by the float32 forward pass" if semantics == "float32" else ""))
    if residue:
        said += f", {certified} of {len(residue)} residue sequences by their forward pass"
    if worst is not None:
        said += f"; smallest certified slack {worst[0]:.3g} at class {worst[1]}"
    return proven, said


def certified_residue(dims, mats, charge, residue: list, keyed: dict, merged: dict,
                      semantics: str = "real", boxes: dict | None = None) -> int:
    """How many residue sequences their own forward pass proves correct (forward._certified
    on forward_brute_force's model of `semantics`, every layer: _Model, or Float32Model for
    every binary32 execution), after verifying that each lies in no class: a sequence in a
    class is Malformed (it would be counted twice)."""
    from . import forward

    for t in residue:
        charge(0)  # the clock
        if in_class(keyed, t, merged, boxes):
            raise Malformed(f"rule family_gap: residue sequence {list(t)} lies in a class")
    if not residue:
        return 0
    charge(len(residue) * forward._sequence_cost(dims))  # as forward_brute_force, up front
    model = forward.model_class(semantics)(dims, mats, charge)  # charges, holds its tables
    return sum(forward._certified(model.logits(t), max(t)) for t in residue)
