"""Rule family_gap's merged classes M(q, m, i0, g) (spec/rules.md §family_gap, Lemma G5).

Soundness by enumeration: on the small trained family models of tests/test_family_gap.py
with k = 3, 4, the generator's certificates with merged classes (strategy family-gap,
merge "always" and "lossless") are accepted; every sequence of every class is enumerated
here from the lemma's definition (written out independently of the rule's `slots`),
confirmed to have maximum m and to be correct by the independent 200-bit forward pass
(tests/test_families.py reference_logits), the classes are disjoint and the count equals
the checker's under mpmath and arb.  Mutants: a merged class overlapping an unmerged one
of its block (either order), a merged class repeated, a wrong i0, an inflated claim,
merged classes whose token sets would break max = m (gap 0, q > m, i0 at the query, an
empty alphabet), an unknown or ill-typed field, a residue sequence inside a merged class;
each with the same verdict under both back-ends.
"""

from __future__ import annotations

import itertools

import pytest
from family_gap_models import both_backends, certificate, class_members, model, replay
from family_gap_models import correct as _correct
from family_gap_models import mutate as _mutate
from family_gap_models import rule_line as _rule

from checker.errors import Malformed, Rejected
from checker.rules import family_gap as rule

K34 = ["ln_mlp_rope_2heads_k4", "lnpre_parallel_mlp_k3", "mlp_no_norm_k3",
       "ln_mlp_k4_well_trained"]


def merged_certificate(name: str, merge: str = "always") -> tuple:
    return certificate(name, merge)


def _merged(lines):
    return [c for c in _rule(lines)["hints"]["classes"] if isinstance(c[2], dict)]


@pytest.mark.parametrize("merge", ["always", "lossless"])
@pytest.mark.parametrize("name", K34)
def test_every_sequence_of_every_merged_certificate_is_correct(name, merge):
    fw = model(name)
    k = fw.dims.n_ctx
    lines = merged_certificate(name, merge)
    hints = _rule(lines)["hints"]
    if merge == "always":
        assert _merged(lines), f"{name}: no merged class (the test would prove nothing)"
    seen = set()
    for q, m, fixed, g, *_ in hints["classes"]:
        members = list(class_members(k, q, m, fixed, g))
        size = rule.class_size(fw.dims, m, fixed["first"] if isinstance(fixed, dict)
                               else tuple(fixed), g)
        assert len(members) == size  # the rule's size formula against the enumeration
        for tokens in members:
            assert tokens not in seen  # disjoint
            seen.add(tokens)
            assert max(tokens) == m and tokens[-1] == q
            assert _correct(fw, tokens), f"{name}: ACCEPTED but wrong: {tokens}"
    for t in hints.get("residue", []):
        t = tuple(t)
        assert t not in seen
        seen.add(t)
        assert _correct(fw, t), f"{name}: ACCEPTED but wrong residue sequence: {t}"
    mp, arb = replay(lines), replay(lines, "arb")
    assert mp.facts.correct == arb.facts.correct == len(seen) == _rule(lines)["claim"] > 0


NAME = "ln_mlp_rope_2heads_k4"


def _merged_index(classes, pred=lambda c: True):
    return next(i for i, c in enumerate(classes) if isinstance(c[2], dict) and pred(c))


def test_the_merged_certificate_has_merged_and_unmerged_classes():
    classes = _rule(merged_certificate(NAME))["hints"]["classes"]
    assert any(isinstance(c[2], dict) for c in classes)
    assert any(isinstance(c[2], list) for c in classes)
    lines = merged_certificate(NAME)
    assert both_backends(lines) == ("ok", _rule(lines)["claim"])


@pytest.mark.parametrize("where", ["after", "same key", "repeat"])
def test_a_merged_class_overlapping_its_block_is_malformed(where):
    lines = merged_certificate(NAME)
    k = model(NAME).dims.n_ctx
    classes = _rule(lines)["hints"]["classes"]
    n = _merged_index(classes, lambda c: c[2]["first"] < k - 2)

    def edit(r):
        cls = r["hints"]["classes"]
        i0 = cls[n][2]["first"]
        extra = list(cls[n])
        extra[2] = {"after": [i0, k - 2], "same key": [i0], "repeat": {"first": i0}}[where]
        cls.insert(n + 1, extra)  # sorted: (i0,) <= (i0, k-2), and before the next block
    verdict = both_backends(_mutate(lines, edit))
    assert verdict[0] is Malformed
    assert ("overlaps" in verdict[1]) or ("not after" in verdict[1])


def test_an_unmerged_class_before_a_merged_one_of_its_block_is_malformed():
    lines = merged_certificate(NAME)
    k = model(NAME).dims.n_ctx
    classes = _rule(lines)["hints"]["classes"]
    n = _merged_index(classes, lambda c: c[2]["first"] < k - 2)

    def edit(r):
        cls = r["hints"]["classes"]
        i0 = cls[n][2]["first"]
        extra = list(cls[n])
        extra[2] = [i0 - 1, i0] if i0 > 0 else [i0]  # i0 > 0: another block, allowed order
        cls.insert(n, extra)
    verdict = both_backends(_mutate(lines, edit))
    if classes[n][2]["first"] == 0:
        assert verdict[0] is Malformed and "not after" in verdict[1]


def test_a_wrong_i0_is_refused_or_proves_less():
    lines = merged_certificate(NAME)
    classes = _rule(lines)["hints"]["classes"]
    k = model(NAME).dims.n_ctx
    n = _merged_index(classes, lambda c: c[2]["first"] < k - 2)

    def edit(r):
        r["hints"]["classes"][n][2] = {"first": r["hints"]["classes"][n][2]["first"] + 1}
    verdict = both_backends(_mutate(lines, edit))
    assert verdict[0] in (Malformed, Rejected)  # the class shrinks: the claim is not proved


def test_an_inflated_claim_is_rejected():
    verdict = both_backends(_mutate(merged_certificate(NAME), lambda r: None, claim_delta=1))
    assert verdict[0] is Rejected and "proves" in verdict[1]


@pytest.mark.parametrize("change, why", [
    (lambda c: c.__setitem__(3, 0), "gap must be >= 1"),
    (lambda c: c.__setitem__(0, c[1] + 1), "q <= m"),
    (lambda c: c.__setitem__(2, {"first": 3}), "first position"),
    (lambda c: c.__setitem__(2, {"first": -1}), "first position"),
    (lambda c: c.__setitem__(3, c[1] + 1), "leaves no token"),
    (lambda c: c.__setitem__(2, {"first": c[2]["first"], "last": 2}), "must be"),
    (lambda c: c.__setitem__(2, {"from": c[2]["first"]}), "must be"),
    (lambda c: c.__setitem__(2, {"first": True}), "must be"),
    (lambda c: c.__setitem__(2, {"first": 0.0}), "must be"),
])
def test_ill_formed_merged_classes_are_malformed(change, why):
    lines = merged_certificate(NAME)
    n = _merged_index(_rule(lines)["hints"]["classes"])

    def edit(r):
        change(r["hints"]["classes"][n])
    verdict = both_backends(_mutate(lines, edit))
    assert verdict[0] is Malformed and why in verdict[1], verdict


def test_a_residue_sequence_inside_a_merged_class_is_malformed():
    lines = merged_certificate(NAME)
    classes = _rule(lines)["hints"]["classes"]
    k = model(NAME).dims.n_ctx
    q, m, fixed, g = classes[_merged_index(classes)][:4]
    # a member with an m after i0 (not in the unmerged class C(q, m, {i0}, g))
    members = [t for t in class_members(k, q, m, fixed, g)
               if sum(u == m for u in t[:-1]) >= 2] or list(class_members(k, q, m, fixed, g))

    def edit(r):
        res = r["hints"].get("residue", [])
        r["hints"]["residue"] = sorted(res + [list(members[-1])])
    verdict = both_backends(_mutate(lines, edit, claim_delta=1))
    assert verdict[0] is Malformed and "lies in a class" in verdict[1]


def test_in_class_matches_the_definition():
    """in_class against the enumeration, on every sequence of a small domain."""
    k, v = 4, 5
    dims = model(NAME).dims
    merged = {(1, 3, 0): 1, (3, 3, 1): 2, (0, 4, 2): 1}
    keyed = {(2, 4, (0, 2)): 2, (4, 4, ()): 3}
    members = set()
    for (q, m, i0), g in merged.items():
        members |= set(class_members(k, q, m, {"first": i0}, g))
    for (q, m, fixed), g in keyed.items():
        members |= set(class_members(k, q, m, list(fixed), g))
    assert dims.n_ctx == k
    for t in itertools.product(range(v), repeat=k):
        assert rule.in_class(keyed, t, merged) == (t in members), t


@pytest.mark.parametrize("k", [3, 4, 5])
def test_the_rules_token_sets_are_the_definition(k):
    """rule.slots (what Lemma R bounds over, both back-ends) is exactly the class's product."""
    from types import SimpleNamespace
    dims = SimpleNamespace(n_ctx=k, d_vocab=6)
    for q, m, g in [(0, 5, 1), (2, 5, 3), (5, 5, 2), (1, 1, 1)]:
        for i0 in range(k - 1):
            got = set(itertools.product(*rule.slots(dims, q, m, i0, g)))
            assert got == set(class_members(k, q, m, {"first": i0}, g))
            assert len(got) == rule.class_size(dims, m, i0, g)
            assert all(rule.first(i0) == min(i for i, u in enumerate(t[:-1]) if u == m)
                       for t in got)
