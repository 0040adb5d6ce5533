"""Rule family_gap's box classes (spec/rules.md §Rule family_gap: box classes, Lemmas B1–B3).

Soundness by enumeration: on small trained family models (k = 3, 4) and two models built to
break a step, the generator's certificates with box classes (strategy
family-gap:boxes=on, merge off and always) are accepted; every sequence of every class and
box is enumerated here from the definitions (written out independently of the rule's
`slots`, `class_size` and `position_sets`), confirmed to have maximum m and to be correct by
the independent 200-bit forward pass (tests/test_families.py reference_logits); classes,
boxes and residue are disjoint and the count equals the checker's under mpmath and arb.
Every box candidate the generator's search considers (each band, each x) is checked alone
with its own float64 hints by the checker's class proof, and every accepted one is
enumerated and confirmed the same way.  Mutants (same verdict under both back-ends): a box
overlapping its class, another box, or itself (repeated), a box whose sets would break
max = m, ill-formed boxes, a residue sequence inside a box, an inflated claim.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from family_gap_models import (
    both_backends,
    certificate,
    checker_inputs,
    class_members,
    model,
    replay,
)
from family_gap_models import correct as _correct
from family_gap_models import mutate as _mutate
from family_gap_models import rule_line as _rule

from checker.errors import Malformed, Rejected
from checker.rules import family_gap as rule
from checker.rules import overwhelm_family as family
from generator.certify.strategies import family_gap as strategy

# models whose certificates hold boxes (tests/family_gap_models.py), with the merge mode
BOXED = [("ln_mlp_rope_2heads_k4", "off"), ("ln_mlp_rope_2heads_k4", "always"),
         ("negative_ln_gains", "always"), ("attends_to_smallest", "off"),
         ("mlp_no_norm_k3", "always"), ("near_zero_variance", "off")]
NAME = "negative_ln_gains"


def boxed(name: str, merge: str = "always") -> tuple:
    return certificate(name, merge, "on")


def _box_members(v, q, m, sets):
    """A box's sequences from its definition: t_i in {lo..hi} ∪ ({m} if e), the query q."""
    for t in itertools.product(range(v), repeat=len(sets)):
        if all(lo <= u <= hi or (e == 1 and u == m) for u, (lo, hi, e) in zip(t, sets)):
            yield t + (q,)


@pytest.mark.parametrize("name,merge", BOXED)
def test_every_sequence_of_every_boxed_certificate_is_correct(name, merge):
    fw = model(name)
    v, k = fw.dims.d_vocab, fw.dims.n_ctx
    lines = boxed(name, merge)
    hints = _rule(lines)["hints"]
    assert hints.get("boxes"), f"{name}: no box (the test would prove nothing)"
    seen, in_boxes = set(), 0
    for q, m, fixed, g, *_ in hints["classes"]:
        for t in class_members(k, q, m, fixed, g):
            assert t not in seen
            seen.add(t)
    for q, m, sets, *_ in hints["boxes"]:
        members = list(_box_members(v, q, m, sets))
        parsed = rule.Box(tuple(x) for x in sets)
        assert len(members) == rule.class_size(fw.dims, m, parsed, 0) > 0  # size formula
        assert set(itertools.product(*rule.slots(fw.dims, q, m, parsed, 0))) == set(members)
        for t in members:
            assert t not in seen, f"{name}: box {sets} overlaps: {t}"  # disjoint
            seen.add(t)
            assert max(t) == m and t[-1] == q
            assert _correct(fw, t), f"{name}: ACCEPTED but wrong: {t} in box {sets}"
            in_boxes += 1
    for t in hints.get("residue", []):
        t = tuple(t)
        assert t not in seen
        seen.add(t)
        assert _correct(fw, t), f"{name}: ACCEPTED but wrong residue sequence: {t}"
    assert in_boxes > 0
    mp, arb = replay(lines), replay(lines, "arb")
    assert mp.facts.correct == arb.facts.correct == len(seen) == _rule(lines)["claim"] > 0


def _box_candidates(name, merge="always"):
    """Every box the generator's search would try for the certificate's classes: each free
    position j, each band (the whole band, its halves down to one token) and each x in
    [0, m−g], with its own float64 hints (proved or not)."""
    fw = model(name)
    dims = fw.dims
    tab = strategy.Tables(fw)
    hints = _rule(certificate(name, merge))["hints"]
    out = []
    for q, m, fixed, g, *_ in hints["classes"]:
        if g < 2:
            continue
        fixed = fixed["first"] if isinstance(fixed, dict) else tuple(fixed)
        sets = rule.position_sets(dims, m, fixed, g)
        bands = {(m - g + 1, m - 1)} | {(s, s) for s in range(m - g + 1, m)}
        for j, (a, b, _) in enumerate(sets):
            if a > b:
                continue
            for lo, hi in sorted(bands):
                for x in range(m - g + 1):
                    box = strategy.make_box(sets, j, lo, hi, x)
                    query = strategy._ClassQuery(tab, q, m, rule.slots(dims, q, m, box, 0))
                    with np.errstate(all="ignore"):
                        query.margins()
                    out.append((q, m, box, 0, query.hint))
    unique = {(q, m, tuple(box)): (q, m, box, g, h) for q, m, box, g, h in out}
    return list(unique.values())


@pytest.mark.parametrize("name", ["negative_ln_gains", "attends_to_smallest"])
def test_every_box_candidate_alone_is_sound_on_both_backends(name):
    """Every candidate box with its own hints, checked alone by the checker's class proof
    (mpmath and arb: the same verdict); every accepted one's members are correct."""
    from checker import arith as backends
    from checker.rules import family_gap_arb as fast

    fw = model(name)
    dims, mats = checker_inputs(fw)
    candidates = _box_candidates(name)
    assert len(candidates) > 20
    # (the candidates overlap one another: each is parsed and checked alone)
    verdicts = {}
    for arith in ("mpmath", "arb"):
        if arith == "mpmath":
            tables = family.Tables(dims, mats, lambda w: None)
            make_w, make_q = rule.QueryWeights, rule.ClassQuery
        else:
            backends.get("arb")
            tables = fast.GapTables(dims, mats, lambda w: None)
            make_w, make_q = fast.ArbQueryWeights, fast.ClassQueries()
        shared = rule.SharedFunctionals(tables)
        weights, funs = {}, {}
        for entry in sorted(candidates, key=lambda c: (c[1], c[0])):
            q, m, box, _, _ = entry
            one = strategy.encode([entry])
            (_, _, pbox, _, hint), = rule.parse_boxes(one, dims, lambda w: None, [])
            if m not in funs:
                funs = {m: shared.for_output(m)}
            if q not in weights:
                weights[q] = make_w(tables, q)
            query = make_q(tables, funs[m], weights[q], q, m, rule.slots(dims, q, m, pbox, 0),
                           hint)
            try:
                query.check()
                verdicts.setdefault((q, m, tuple(box)), []).append(True)
            except (Rejected, Malformed, ArithmeticError):
                verdicts.setdefault((q, m, tuple(box)), []).append(False)
    assert all(len(x) == 2 and x[0] == x[1] for x in verdicts.values())
    accepted = [key for key, x in verdicts.items() if x[0]]
    assert accepted and len(accepted) < len(verdicts)  # both outcomes occur
    for q, m, box in accepted:
        for t in _box_members(dims.d_vocab, q, m, box):
            assert _correct(fw, t), f"{name}: box {box} ACCEPTED alone but wrong: {t}"


# -- the rule's box primitives against their definitions ------------------------------------

def _tokens(x, m):
    lo, hi, e = x
    return set(range(lo, hi + 1)) | ({m} if e else set())


def test_sets_disjoint_matches_the_sets():
    rng = random.Random(0)
    m = 7
    shapes = [(lo, hi, e) for lo in range(m + 1) for hi in range(lo - 1, m) for e in (0, 1)]
    for _ in range(4000):
        x, y = rng.choice(shapes), rng.choice(shapes)
        assert rule.sets_disjoint(x, y) == (not (_tokens(x, m) & _tokens(y, m))), (x, y)


def test_position_sets_match_the_class_definitions():
    """Every class of a v = 6, k = 4 domain: the product of position_sets (and of slots) is
    the class's definition."""
    dims = model("ln_mlp_rope_2heads_k4").dims
    v, k = dims.d_vocab, dims.n_ctx
    for q, m, fixed in strategy.class_keys(v, k):
        for g in range(1, m + 1):
            for f in ([fixed] + ([fixed[0]] if fixed else [])):
                if rule.signature(dims, q, m, f, g) is not None:
                    continue
                spec = {"first": f} if type(f) is int else f
                want = set(class_members(k, q, m, spec, g))
                sets = rule.position_sets(dims, m, f, g)
                got = {t + (q,) for t in itertools.product(*[sorted(_tokens(x, m))
                                                              for x in sets])}
                assert got == want, (q, m, f, g)


def test_box_size_and_in_class_match_the_definition():
    """class_size and in_class (with boxes) against the enumeration of random boxes."""
    dims = model("ln_mlp_rope_2heads_k4").dims
    v, k = dims.d_vocab, dims.n_ctx
    rng = random.Random(1)
    for _ in range(300):
        m, q = rng.randrange(1, v), None
        q = rng.randrange(0, m + 1)
        sets = []
        for _ in range(k - 1):
            kind = rng.randrange(3)
            lo = rng.randrange(0, m)
            hi = rng.randrange(lo, m)
            sets.append((0, -1, 1) if kind == 0 else (lo, hi, rng.randrange(2)))
        box = rule.Box(sets)
        if rule.box_signature(dims, q, m, box) is not None:
            continue
        members = set(_box_members(v, q, m, sets))
        assert rule.class_size(dims, m, box, 0) == len(members)
        assert all(max(t) == m for t in members)  # Lemma B1
        index = rule.class_index([(q, m, box, 0, None)])
        for t in itertools.product(range(v), repeat=k):
            keyed, merged, boxes = index
            assert rule.in_class(keyed, t, merged, boxes) == (t in members), (sets, t)


# -- mutants ---------------------------------------------------------------------------------

def _edit_boxes(lines, fn, delta=0):
    def edit(r):
        fn(r["hints"])
    return _mutate(lines, edit, delta)


def test_the_boxed_certificate_is_accepted_on_both_backends():
    lines = boxed(NAME)
    assert both_backends(lines) == ("ok", _rule(lines)["claim"])


def _first_box_of_a_merged_class(hints):
    merged = {(c[0], c[1]) for c in hints["classes"] if isinstance(c[2], dict)}
    return next(i for i, b in enumerate(hints["boxes"]) if (b[0], b[1]) in merged)


@pytest.mark.parametrize("how", [
    "band into the class", "repeated", "other box's band", "m into the band position",
    "inside the class",
])
def test_an_overlapping_box_is_malformed(how):
    lines = boxed(NAME)
    hints = _rule(lines)["hints"]
    n = _first_box_of_a_merged_class(hints)

    def fn(h):
        box = h["boxes"][n]
        sets = box[2]
        j = next(i for i, (lo, hi, e) in enumerate(sets) if lo > 0)  # the band position
        extra = [list(x) for x in sets]
        if how == "band into the class":  # the band reaches A = [0, m − g]
            extra[j][0] = 0
        elif how == "repeated":
            pass
        elif how == "other box's band":  # a free position of the box widened to the top
            i = next(i for i, (lo, hi, e) in enumerate(sets) if lo == 0 and lo <= hi
                     and i != j)
            extra[j] = [0, sets[j][1], 0]
            extra[i] = [0, box[1] - 1, extra[i][2]]
        elif how == "m into the band position":  # j may hold m, as the class may after i0
            extra[j][0] = 0
            extra[j][2] = 1
        else:  # token 0 at every position not {m}: inside the box's class, in no other box
            extra = [list(x) if x[0] > x[1] else [0, 0, 0] for x in sets]
        h["boxes"].insert(n + 1, [box[0], box[1], extra] + box[3:])

    bad = _edit_boxes(lines, fn)
    verdict = both_backends(bad)
    assert verdict[0] is Malformed and "Lemma B2" in verdict[1], verdict


@pytest.mark.parametrize("how,why", [
    ("no m position", "maximum would not be m"), ("hi = m", "nonempty part"),
    ("lo > hi + 1", "nonempty part"), ("e = 2", "nonempty part"),
    ("negative lo", "nonempty part"), ("empty set", "nonempty part"),
    ("short", "must be [q, m"), ("float", "must be [q, m"), ("q > m", "q <= m"),
])
def test_an_ill_formed_box_is_malformed(how, why):
    lines = boxed(NAME)
    hints = _rule(lines)["hints"]
    n = _first_box_of_a_merged_class(hints)

    def fn(h):
        box = h["boxes"][n]
        sets = box[2]
        j = next(i for i, (lo, hi, e) in enumerate(sets) if lo > 0)
        i_m = next(i for i, (lo, hi, e) in enumerate(sets) if lo > hi)
        if how == "no m position":
            sets[i_m] = [0, 0, 0]
        elif how == "hi = m":
            sets[j][1] = box[1]
        elif how == "lo > hi + 1":
            sets[i_m] = [3, 0, 1]
        elif how == "e = 2":
            sets[j][2] = 2
        elif how == "negative lo":
            sets[j][0] = -1
        elif how == "empty set":
            sets[i_m] = [0, -1, 0]
        elif how == "short":
            box[2] = sets[:-1]
        elif how == "float":
            sets[j][0] = float(sets[j][0])
        else:
            box[0] = box[1] + 1

    verdict = both_backends(_edit_boxes(lines, fn))
    assert verdict[0] is Malformed and why in verdict[1], verdict


def test_a_residue_sequence_inside_a_box_is_malformed():
    lines = boxed(NAME)
    hints = _rule(lines)["hints"]
    q, m, sets = hints["boxes"][0][:3]
    t = next(_box_members(model(NAME).dims.d_vocab, q, m, sets))

    def fn(h):
        h["residue"] = sorted(set(map(tuple, h.get("residue", []))) | {t})
        h["residue"] = [list(x) for x in h["residue"]]

    verdict = both_backends(_edit_boxes(lines, fn))
    assert verdict[0] is Malformed and "lies in a class" in verdict[1], verdict


def test_an_inflated_claim_and_a_dropped_box_are_rejected():
    lines = boxed(NAME)
    assert both_backends(_mutate(lines, lambda r: None, 1))[0] is Rejected

    def drop(h):
        del h["boxes"][0]
    assert both_backends(_edit_boxes(lines, drop))[0] is Rejected  # the claim counts the box


def test_a_box_with_another_box_s_hints_is_rejected():
    """A box's hints swapped for a narrower box's (one token band, smaller x): the Lemma R
    bounds of the wider box are not confirmed (a false hint is never trusted)."""
    lines = boxed(NAME)
    hints = _rule(lines)["hints"]
    sizes = [(rule.class_size(model(NAME).dims, b[1], rule.Box(map(tuple, b[2])), 0), i)
             for i, b in enumerate(hints["boxes"])]
    big = max(sizes)[1]
    small = min(sizes)[1]

    def fn(h):
        h["boxes"][big][3:] = h["boxes"][small][3:]

    verdict = both_backends(_edit_boxes(lines, fn))
    assert verdict[0] is Rejected, verdict


def test_old_certificates_read_as_before():
    """Without "boxes" the hints are read exactly as before; an unknown hint key is refused."""
    lines = certificate(NAME, "always")
    assert "boxes" not in _rule(lines)["hints"]
    assert both_backends(lines) == ("ok", _rule(lines)["claim"])

    def fn(h):
        h["boxez"] = []
    verdict = both_backends(_edit_boxes(lines, fn))
    assert verdict[0] is Malformed and "hints must be" in verdict[1]


def test_the_box_options_round_trip_and_refuse_bad_values():
    o = strategy.Options.parse("family-gap:merge=always,budget=2.1e9,boxes=on,min_size=150")
    assert (o.boxes, o.min_size, o.budget) == ("on", 150, 2_100_000_000)
    assert strategy.Options.parse(o.name()) == o
    assert strategy.Options.parse("family-gap") == strategy.Options()  # boxes off by default
    for bad in ("boxes=yes", "min_size=-1", "min_size=1.5", "min_size="):
        with pytest.raises(ValueError):
            strategy.Options.parse(f"family-gap:{bad}")
