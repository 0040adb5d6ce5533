"""Rule family_gap: Max-of-K accuracy on every family of rule overwhelm_family
(LayerNorm / LNPre, MLP, RoPE, several heads, parallel residual) by classes of
inputs with a gap; spec/rules.md §family_gap.

Claim: at least N of the v^k sequences are correct (task max_of_k only).

A class (q, m, S, g) — query token q, maximum m, the non-query positions S
holding m, gap g >= 1 — is the set of sequences t with t[k−1] = q, t[i] = m for
i in S and t[i] in A = {0, …, m−g} for every other non-query position i.
  * signature (`signature`): if q <= m, g >= 1 and (S ≠ ∅ or q = m), every t of
    the class has max(t) = m and {i < k−1 : t[i] = m} = S, so the class is
    determined by (q, m, S): classes with distinct keys are disjoint, and every
    t of a class has label m (the checker verifies the conditions and that no
    key repeats: `parse_hints`).
  * size (`class_size`): |A|^(k−1−|S|) = (m−g+1)^(k−1−|S|), computed here.
  * proof (`ClassQuery`): the output m is forced at position p = k−1 for every
    t of the class by overwhelm_family's steps 2–6 (Lemma R, the box, Lemma LN,
    the MLP pre-activations, each logit difference), with the per-position token
    sets slot[i] = {m} (i in S), A (other i < k−1), {q} (i = k−1): Lemma R takes
    the maximum over slot[i] at every position, fixed and free alike.
A merged class M(q, m, i0, g) (hint S field {"first": i0}; spec Lemma G5) is every
sequence with the query q, A before position i0, m at i0 and A ∪ {m} after it: the disjoint
union of the classes (q, m, S, g) with min S = i0, size |A|^i0·(|A|+1)^(k−2−i0), proved with
the slots A / {m} / A ∪ {m} / {q}.  The keys still sort by (q, m, S) (a merged class as
S = (i0,)), which groups the classes by block (q, m, first position of m); a merged class must
be the only class of its block (`parse_hints`), so all the classes are disjoint.
The rule proves the sum of the sizes of the classes whose checks pass; a class
whose check fails rejects the certificate (the generator claims only what it
proved in float64).  Residue (optional, like rule exact's): listed sequences,
each verified to lie in no class (`in_class`, by Lemma G1) and decided by its own
forward pass (forward_brute_force's enclosures); the certified ones are added.

Sharing: overwhelm_family's Tables once per model; attention weights w_j(i, u)
once per query token q (`QueryWeights`, kept for the whole check); the output-dependent
functionals once per maximum m from one projection of w_f ∘ W_U (`SharedFunctionals`: the
difference of two columns encloses the column of the difference), the classes being proved
in the order (m, q, S).

Hints {"classes": [[q, m, S, g, box, pre, diff, dir, dir_lo], ...]} sorted by
(q, m, S); the arrays are overwhelm_family's at p = k−1 (base64 f64); optionally
"residue": [[t_0, …, t_{k−1}], ...] sorted, distinct.
Cost (`cost`): charged before any work from the dimensions and the classes.
Memory: the tables and the decoded hints are charged to the memory limit first.
`--arith arb`: the same checks, each class proof on overwhelm_family's fast path
(family_gap_arb.py: exact integer tables, scores and Lemma R; the inputs stay mpmath's).
"""

from __future__ import annotations

from types import SimpleNamespace

from ..errors import Malformed
from . import forward
from . import overwhelm_family as family

# re-exported: family_gap.X as before (the classes live in family_gap_classes.py, which the
# parts import: no import cycle)
from .family_gap_classes import (  # noqa: F401
    Box,
    ClassQuery,
    QueryWeights,
    SharedFunctionals,
    SharedHead,
    _Weights,
    box_signature,
    check_disjoint,
    class_charge,
    class_index,
    class_size,
    column_differences,
    cost,
    describe,
    dimensionality,
    first,
    hint_floats,
    in_class,
    order_key,
    parse_boxes,
    parse_hints,
    parse_residue,
    position_sets,
    sets_disjoint,
    signature,
    slots,
    table_elements,
    total,
)
from .family_gap_jobs import Meter, Prover, combine, run_in_workers, workers

ARITHMETICS = ("mpmath", "arb")  # arb: the class proofs on the fast path (family_gap_arb.py)
INPUT_ARITHMETIC = "mpmath"  # certificate.py: the inputs are mpmath intervals whatever arith
# float32: one layer, LN, no parallel / gated MLP (family_gap_float32.py, spec/rules.md §Rule
# family_gap under the float32 semantics), or several layers (family_gap_deep.py with
# overwhelm_deep_float32); certificate.py passes mpmath for it
SEMANTICS = ("real", "float32")
HINT_FIELDS = family.HINT_FIELDS  # as family_gap_classes.HINT_FIELDS


def inputs(dims, hints=None) -> tuple[str, ...]:
    """Every weight of the family (and the RoPE tables), as forward_brute_force."""
    return forward.inputs(dims)




def check(dims, mats, hints, charge, jobs=1, arith=None, semantics="real"):
    """The number of sequences in the classes, after confirming every class.  semantics
    float32: every binary32 execution (family_gap_float32.py)."""
    from ..certificate import hold

    if semantics not in SEMANTICS:
        raise Malformed(f"rule family_gap: unknown semantics {semantics!r}")
    if dims.family.n_layers > 1 and dims.family.normalization not in ("RMS", "RMSPre"):
        from . import family_gap_deep  # overwhelm_deep's boxes per class (several layers)

        return family_gap_deep.check(dims, mats, hints, charge, semantics)
    if semantics == "float32":
        from . import family_gap_float32

        return family_gap_float32.check(dims, mats, hints, charge)
    if not dims.family.is_one_layer_dense:
        raise Malformed(f"family_gap supports one layer without a gated MLP, or several "
                        f"layers without RMS normalization, not n_layers = "
                        f"{dims.family.n_layers}, gated_mlp = {dims.family.gated_mlp}, "
                        f"normalization = {dims.family.normalization} (forward_brute_force "
                        "does)")
    if dims.family.normalization in ("RMS", "RMSPre"):
        raise Malformed("family_gap does not support RMS normalization (Lemma LN assumes "
                        "centring; forward_brute_force does)")
    classes = parse_hints(hints, dims, charge)
    classes = classes + parse_boxes(hints, dims, charge, classes)
    residue = parse_residue(hints, dims, charge)
    charge(cost(dims, classes, len(residue)))
    hold(charge, table_elements(dims), "tables")
    make_tables, make_weights, make_query = family.Tables, QueryWeights, ClassQuery
    fast = None
    if arith is not None and arith.name == "arb":  # the same checks on the fast path
        from . import family_gap_arb as fast

        make_tables, make_weights, make_query = (fast.GapTables, fast.ArbQueryWeights,
                                                 fast.ClassQueries())
    keyed, merged, boxes = class_index(classes)
    for t in residue:  # outside every class (Lemma G1), before any proof
        charge(0)  # the clock
        if in_class(keyed, t, merged, boxes):
            raise Malformed(f"rule family_gap: residue sequence {list(t)} lies in a class")
    meter = Meter(charge)  # what the proofs charge, wherever they run (workers: returned)
    tables = make_tables(dims, mats, meter)
    shared = SharedFunctionals(tables)
    prover = Prover(dims, tables, shared, classes, make_weights, make_query, tick=meter.tick)
    blocks = prover.blocks()

    def count_residue() -> int:  # each sequence's own forward pass (forward_brute_force)
        if fast is not None:  # arb: every residue sequence in bulk, the same theorem
            return fast.certified_residue(dims, mats, meter, arith, residue)
        certified = 0
        for t in residue:
            meter.tick()  # the clock
            certified += forward._certified(tables.model.logits(t), max(t))
        return certified

    n_workers = workers(jobs, len(blocks))
    if n_workers > 1:  # each maximum's classes, and the residue, in forked workers
        extra = (n_workers - 1) * (table_elements(dims) + (fast.group_elements(dims) if fast
                                                           else 0))
        if fast is not None and residue:  # the residue's bulk tables, in a worker
            extra += fast.residue_elements(dims, mats)
        hold(charge, extra, "every worker's query weights and caches")
        results, certified = run_in_workers(n_workers, prover, blocks, count_residue, meter)
    else:
        results, certified = [prover.prove(b) for b in blocks], count_residue()
    proven, worst = combine(results)
    proven, said = total(dims, classes, proven, certified, len(residue), merged, boxes,
                         "forward pass")
    return proven, said + distance_note(dims, tables, shared, classes, worst, charge)


def distance_note(dims, tables, shared, classes, worst, charge) -> str:
    """The note's distance to float32 (spec/rules.md §distance to float32; reports only,
    decides nothing): the smallest slack s = −(the bound on ℓ_t − ℓ_m) over the proven
    classes and logits, its class and t, and the float32 error the float32 variant would add
    to that bound's numerator, E(g_t)/upper(σ) (Lemma W-family's widening of c(r̃)·g_t,
    family_gap_float32), evaluated over the real tables' enclosures."""
    if worst is None:
        return ""
    slack, n, t, sigma = worst
    q, m, fixed, g, hint = classes[n]
    where = f"(q={q}, m={m}, {describe(fixed)}, g={g}) logit {t}"
    from . import family_gap_float32 as f32_gap
    from .overwhelm_family_float32 import note_error

    def make():
        # g_t = w_f ∘ (U[:, t] − U[:, m]) (enclosed as in SharedFunctionals.for_output) and its
        # projections VO_j·g_t: one column, not the output's whole functionals
        g_t = [row[t] - row[m] for row in shared.wu]
        query = f32_gap.ClassQuery(tables, SimpleNamespace(a=shared.a, g=[g_t]), {}, q, m,
                                   slots(dims, q, m, fixed, g), hint)
        return query, g_t, tables.project([g_t]), 0

    text = note_error(charge, tables, make, sigma)
    return (f"; smallest certified slack {slack:.3g} at class {where}, {text}; the float32 "
            "variant also widens the box, LayerNorms, MLP and unembedding (spec/rules.md "
            "§distance to float32)")
