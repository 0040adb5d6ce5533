"""Strategy family-gap on models with n_layers >= 2 (checker/rules/family_gap_deep.py,
spec/rules.md §family_gap on several layers): every class (q, m, S, g), or merged class
M(q, m, i0, g) under merge=always / lossless, proved by the float64 mirror of
overwhelm_deep (`overwhelm_deep.deep_margins`) over the class's product set
(`ProductClaim`), the smallest proving gap by bisection (a smaller alphabet only shrinks
every box); then, within the budget, a residue as on one layer (the sequences outside every
class whose float64 margin is clear), kept only where the checker's own forward pass
certifies them; with boxes=on, box classes for the band a class's gap misses
(`find_boxes`; under float32 each re-proved with a float32 slack, `float32_boxes`).
Options sample, min_size and jobs as on one layer (jobs is ignored here: the search is
serial; a sampled certificate has no residue).
"""

from __future__ import annotations

import numpy as np

from checker.rules import family_gap as rule
from checker.rules.overwhelm_deep import ProductClaim

from ...progress import progress_bar
from .overwhelm import TOL
from .overwhelm_deep import deep_margins


def attempt(weights, dims, q: int, m: int, fixed, g: int):
    """overwhelm_deep's hints for the class if the float64 mirror proves output m, else None."""
    if rule.signature(dims, q, m, fixed, g) is not None:
        return None
    claim = ProductClaim(rule.slots(dims, q, m, fixed, g), m)
    found = deep_margins(weights, claim)
    if not np.isfinite(found.worst) or found.worst >= -TOL * found.scale:
        return None
    return found.hints


def smallest_gap(weights, dims, q: int, m: int, fixed):
    """(g, hints) for the smallest proving gap in [1, m], or None (monotone in g)."""
    if type(fixed) is not int and len(fixed) == dims.n_ctx - 1:  # one sequence
        hint = attempt(weights, dims, q, m, fixed, 1)
        return None if hint is None else (1, hint)
    lo, hi, best = 1, m, None
    while lo <= hi:
        g = (lo + hi) // 2
        hint = attempt(weights, dims, q, m, fixed, g)
        if hint is not None:
            best, hi = (g, hint), g - 1
        else:
            lo = g + 1
    return best


def find_classes(weights, dims, keys: list, merge: str, min_size: int, pairs,
                 progress=False) -> list:
    """[(q, m, fixed, g, hints)] in the checker's order: per block (q, m, first position of
    m), its classes (q, m, S, g), or (merge) the merged class in their place — always when it
    proves, lossless when it also holds at least as many sequences; then those holding at
    least min_size sequences.  keys: every (q, m, S) (family_gap.class_keys)."""
    blocks = {}
    for q, m, fixed in sorted(keys):
        if pairs is None or (q, m) in pairs:
            blocks.setdefault((q, m, rule.first(fixed)), []).append(fixed)
    out = []
    for (q, m, i0), keys in progress_bar(sorted(blocks.items(), key=lambda b: (
            b[0][0], b[0][1], -1 if b[0][2] is None else b[0][2])), "family-gap classes",
            progress):
        found = [(q, m, fixed, *r) for fixed in keys
                 for r in [smallest_gap(weights, dims, q, m, fixed)] if r is not None]
        if merge != "off" and i0 is not None:
            merged = smallest_gap(weights, dims, q, m, i0)
            if merged is not None:
                size = rule.class_size(dims, m, i0, merged[0])
                if merge == "always" or size >= sum(rule.class_size(dims, m, f, g)
                                                    for _, _, f, g, _ in found):
                    found = [(q, m, i0, *merged)]
        out.extend(c for c in found if rule.class_size(dims, m, c[2], c[3]) >= min_size)
    return out


def find_boxes(weights, dims, classes: list, min_size: int = 0, progress=False) -> list:
    """Box classes (spec/rules.md §box classes, Lemmas B1–B3) for the inputs a class misses
    by its gap: for each class with g >= 2 and each of its free positions j, the box with the
    band [m − g + 1, m − 1] (no m) at j and the class's own sets elsewhere, kept if the float64
    mirror of overwhelm_deep proves it over its product set and it holds >= min_size
    sequences.  Boxes of one class are disjoint at their band positions (band against the
    class's set there); every kept box is also checked disjoint from the classes and boxes
    kept before it of its (q, m) (rule.sets_disjoint, Lemma B2), as the checker will."""
    kept, seen = [], {}
    for q, m, fixed, g, _ in classes:
        seen.setdefault((q, m), []).append(rule.position_sets(dims, m, fixed, g))
    for q, m, fixed, g, _ in progress_bar(classes, "family-gap boxes", progress):
        if g < 2:
            continue
        sets = rule.position_sets(dims, m, fixed, g)
        for j, (lo, hi, _e) in enumerate(sets):
            if lo > hi:  # a position holding m only
                continue
            box = rule.Box(tuple((m - g + 1, m - 1, 0) if i == j else x
                                 for i, x in enumerate(sets)))
            if rule.box_signature(dims, q, m, box) is not None or \
                    rule.class_size(dims, m, box, 0) < max(1, min_size):
                continue
            if not all(any(rule.sets_disjoint(a, b) for a, b in zip(box, other))
                       for other in seen[(q, m)]):
                continue
            found = deep_margins(weights, ProductClaim(rule.slots(dims, q, m, box, 0), m))
            if not np.isfinite(found.worst) or found.worst >= -TOL * found.scale:
                continue
            kept.append((q, m, box, 0, found.hints))
            seen[(q, m)].append(list(box))
    return kept


def within(dims, boxes: list, room: int, semantics: str = "real") -> list:
    """The boxes with the most sequences per unit of checker work (of `semantics`) whose
    cost fits in room."""
    from checker.rules import family_gap_deep

    ranked = sorted(boxes, key=lambda b: -rule.class_size(dims, b[1], b[2], 0)
                    / max(1, family_gap_deep.cost(dims, [b], semantics)))
    out = []
    for b in ranked:
        c = family_gap_deep.cost(dims, [b], semantics)
        if c <= room:
            out.append(b)
            room -= c
    return sorted(out, key=lambda b: (b[0], b[1]))


def float32_hints(weights, dims, mats: dict, claim):
    """The float64 mirror's hints for the ProductClaim `claim` with the first float32 slack
    (overwhelm_family.F32_SLACKS, each as `overwhelm_deep.margins` takes it: a λ slack and
    box inflation of rel/100) that the checker's overwhelm_deep_float32 confirms on the
    recorded inputs `mats` (untrusted use), or None."""
    from checker.errors import Malformed, Rejected
    from checker.rules import overwhelm_deep_float32

    from .overwhelm_family import F32_SLACKS

    for rel in F32_SLACKS:
        margin = deep_margins(weights, claim, rel / 100, rel / 100)
        if not np.isfinite(margin.worst) or margin.worst >= -TOL * margin.scale:
            continue
        try:
            overwhelm_deep_float32.check(dims, mats, claim, margin.hints, lambda work: None)
        except (Rejected, Malformed, ArithmeticError):
            continue
        return margin.hints
    return None


def float32_confirmed(weights, dims, mats: dict, classes: list, extra_gaps: int = 2,
                      progress=False) -> list:
    """semantics == float32: per class (from the real search), `float32_hints` at the real
    gap and up to extra_gaps larger ones; the first gap that passes is kept, a class none
    proves is dropped."""
    kept = []
    for q, m, fixed, g0, _ in progress_bar(classes, "family-gap float32 classes", progress):
        last = m if type(fixed) is int or len(fixed) < dims.n_ctx - 1 else g0
        for g in range(g0, min(last, g0 + extra_gaps) + 1):
            hints = float32_hints(weights, dims, mats,
                                  ProductClaim(rule.slots(dims, q, m, fixed, g), m))
            if hints is not None:
                kept.append((q, m, fixed, g, hints))
                break
    return kept


def float32_boxes(weights, dims, mats: dict, boxes: list, progress=False) -> list:
    """semantics == float32: the boxes (from find_boxes on the float32 classes) that
    `float32_hints` proves over their product sets, with those hints; the others dropped."""
    kept = []
    for q, m, box, g, _ in progress_bar(boxes, "family-gap float32 boxes", progress):
        hints = float32_hints(weights, dims, mats, ProductClaim(rule.slots(dims, q, m, box, 0),
                                                                m))
        if hints is not None:
            kept.append((q, m, box, g, hints))
    return kept


def confirmed(dims, mats: dict, classes: list) -> list:
    """The classes the checker's own code (overwhelm_deep on the class's product set)
    confirms on the recorded inputs `mats` (family_gap.checker_inputs); float32:
    float32_confirmed."""
    from checker.errors import Malformed, Rejected
    from checker.rules.overwhelm_deep import check as prove

    d, kept = dims, []
    for q, m, fixed, g, hint in classes:
        claim = ProductClaim(rule.slots(d, q, m, fixed, g), m)
        try:
            prove(d, mats, claim, hint, lambda work: None)
        except (Rejected, Malformed, ArithmeticError):
            continue
        kept.append((q, m, fixed, g, hint))
    return kept


def certified_residue(dims, mats: dict, candidates, certified_by,
                      semantics: str = "real") -> list:
    """The candidates the checker's forward pass (forward_brute_force's model of `semantics`,
    every layer) certifies correct, as lists of ints (family_gap.certified_by, passed in:
    no import cycle)."""
    from checker.rules import forward

    return certified_by(lambda: forward.model_class(semantics)(dims, mats, lambda work: None),
                        candidates)


def certify(trace, options, keys: list, pairs, inputs, residue, residue_limit: int,
            certified_by, progress=False, semantics: str = "real"):
    """(the rule line, claim, notes) for a model with several layers.  From family_gap's
    certify (which this module does not import: no cycle): keys every (q, m, S), pairs the
    sampled (q, m) or None, inputs() the checker's inputs (family_gap.checker_inputs),
    residue(classes, limit) family_gap's residue candidates with a clear float64 margin,
    certified_by family_gap.certified_by.
    semantics float32: every class and residue sequence confirmed by the checker's float32
    code (the float64 search bounds the real model only)."""
    from . import NotApplicable

    d = trace.dims
    if options.hints != "f64":
        raise NotApplicable("family-gap on several layers: hints=f64 only")
    classes = find_classes(trace.weights, d, keys, options.merge, options.min_size, pairs,
                           progress)
    from checker.rules import family_gap_deep, forward

    if semantics == "float32":  # the float64 search bounds the real model only
        classes = float32_confirmed(trace.weights, d, inputs(), classes, progress=progress)
    elif options.confirm == "on":
        classes = confirmed(d, inputs(), classes)
    work = family_gap_deep.cost(d, classes, semantics)
    if work > options.budget:
        raise NotApplicable(f"the {len(classes)} classes found need ~{work:.1e} interval "
                            f"operations in the checker (over the budget {options.budget:.0e})")
    boxes = []
    if options.boxes == "on":
        found = find_boxes(trace.weights, d, classes, options.min_size, progress)
        if semantics == "float32":  # each box's hints re-found with a float32 slack
            found = float32_boxes(trace.weights, d, inputs(), found, progress)
        boxes = within(d, found, options.budget - work, semantics)
        if options.confirm == "on" and semantics == "real":
            boxes = confirmed(d, inputs(), boxes)
        work += family_gap_deep.cost(d, boxes, semantics)
    limit = min(residue_limit, (options.budget - work) // forward._sequence_cost(d))
    rest = []
    if pairs is None and limit > 0:
        rest = certified_residue(d, inputs(), residue(classes + boxes, limit), certified_by,
                                 semantics)
        work += len(rest) * forward._sequence_cost(d)  # (and _Model's tables and positions)
    claim = sum(rule.class_size(d, m, fixed, g) for _, m, fixed, g, _ in classes + boxes) + \
        len(rest)
    hints = {"classes": [[q, m, {"first": fixed} if type(fixed) is int else list(fixed), g, h]
                         for q, m, fixed, g, h in classes]}
    if boxes:
        hints["boxes"] = [[q, m, [list(x) for x in sets], h] for q, m, sets, _, h in boxes]
    if rest:
        hints["residue"] = rest
    line = trace.rule("family_gap", list(forward.inputs(d)), claim, hints)
    return line, claim, {"classes": len(classes), "boxes": len(boxes), "residue": len(rest),
                         "checker_work": work,
                         "merged": sum(type(c[2]) is int for c in classes),
                         "layers": d.family.n_layers}
