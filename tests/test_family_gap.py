"""Rule family_gap (spec/rules.md §family_gap): Max-of-K accuracy on the LayerNorm /
MLP / RoPE / multi-head families by gap classes (q, m, S, g).

Soundness by enumeration: on small trained models of several families (k = 2..4) and
on models built to break a step (negative LayerNorm gains, a near-constant embedding
row, an MLP unit that switches on for one rare token, a head that attends to the
smallest token), every sequence of every class the checker accepts is confirmed
correct by the independent 200-bit forward pass of tests/test_families.py
(reference_logits, which shares no code with the rule or its strategy).  Mutants:
an inflated count, overlapping / unsorted / ill-formed classes, a tampered gap,
tampered λ hints of every kind, a false class with the generator's best hints, another
task, a family the rule does not support, a work limit below the charged cost.
"""

from __future__ import annotations

import base64
import itertools
import json
import struct

import numpy as np
import pytest
from family_gap_models import (
    ADVERSARIAL,
    FORCED,
    MODELS,
    NAME,
    certificate,
    forced_class_groups,
    model,
    replay,
    trained,
)
from family_gap_models import correct as _correct
from family_gap_models import mutate as _mutate
from family_gap_models import rule_line as _rule

from checker.errors import Malformed, Rejected
from checker.limits import Limits
from checker.modelspec import Dims, Family
from checker.rules import family_gap as rule
from generator.certify.strategies import family_gap as strategy
from generator.certify.trace import Trace
from generator.ground_truth import count_correct


def _class_sequences(dims, q, m, fixed, g):
    return itertools.product(*rule.slots(dims, q, m, tuple(fixed), g))


# -- soundness by enumeration ------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MODELS) + sorted(ADVERSARIAL))
def test_every_sequence_of_every_accepted_class_is_correct(name):
    fw = model(name)
    dims = fw.dims
    lines = certificate(name)
    report = replay(lines)
    classes = _rule(lines)["hints"]["classes"]
    seen = set()
    for q, m, fixed, g, *_ in classes:
        for tokens in _class_sequences(dims, q, m, fixed, g):
            assert tokens not in seen  # disjoint
            seen.add(tokens)
            assert max(tokens) == m and tokens[-1] == q
            assert _correct(fw, tokens), f"{name}: ACCEPTED but wrong: {tokens}"
    for t in _rule(lines)["hints"].get("residue", []):  # decided by their forward pass
        t = tuple(t)
        assert t not in seen
        seen.add(t)
        assert _correct(fw, t), f"{name}: ACCEPTED but wrong residue sequence: {t}"
    assert report.facts.correct == len(seen) == _rule(lines)["claim"]
    assert len(seen) <= count_correct(fw, progress=False).correct
    if name in MODELS:
        assert len(seen) > 0  # a test that proves nothing cannot fail




@pytest.mark.parametrize("name", FORCED)
def test_forced_classes_are_confirmed_only_when_true(name):
    """Every class (q, m, S) at gaps 1 and 2, proved or not by the generator, with its
    own best float64 hints and with the hints of the narrower class at the gap the
    generator proved (a smaller alphabet: what a Lemma R that skips tokens would
    accept): whatever the checker's code confirms is correct on every sequence (by the
    200-bit reference), and some class is refused.  The narrow hints are what catches a
    Lemma R that skips tokens: a class's own hints already bound its whole alphabet."""
    fw = model(name)
    dims = fw.dims
    trace = Trace(fw, float_shadow=False)
    groups = forced_class_groups(name)
    confirmed = [c for group in groups.values()  # one gap per key in a hint list
                 for c in strategy.checker_confirmed(trace, group)]
    for q, m, fixed, g, _ in confirmed:
        for t in _class_sequences(dims, q, m, fixed, g):
            assert _correct(fw, t), f"{name}: ACCEPTED but false: class {(q, m, fixed, g)}, {t}"
    total = sum(len(group) for group in groups.values())
    assert 0 < len(confirmed) < total  # both verdicts present: the test can fail


def test_bounds_on_the_trained_models():
    """The float64 exact count against the certified bound (a regression guard, not
    soundness): the well-trained model is certified exactly."""
    fw = trained("ln_mlp_k4_well_trained")
    assert replay(certificate("ln_mlp_k4_well_trained")).facts.correct == \
        count_correct(fw, progress=False).correct


def test_both_backends_agree():
    lines = certificate("ln_mlp_rope_2heads_k4")
    assert replay(lines, "arb").facts.correct == replay(lines).facts.correct


# -- mutants -------------------------------------------------------------------------------



def _f64(text):
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 8}d", raw))


def _b64(values):
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode()


FIELD = {name: 4 + i for i, name in enumerate(rule.HINT_FIELDS)}


def _first(classes, pred):
    return next(i for i, c in enumerate(classes) if pred(c))


def test_the_unmodified_certificate_is_accepted():
    assert replay(certificate(NAME)).facts.correct == _rule(certificate(NAME))["claim"]


def test_an_inflated_count_is_rejected():
    with pytest.raises(Rejected, match="proves"):
        replay(_mutate(certificate(NAME), lambda r: None, claim_delta=1))


def test_a_duplicated_class_is_malformed():
    def dup(r):
        r["hints"]["classes"].insert(1, r["hints"]["classes"][0])
    with pytest.raises(Malformed, match="sorted"):
        replay(_mutate(certificate(NAME), dup))


def test_unsorted_classes_are_malformed():
    def swap(r):
        c = r["hints"]["classes"]
        c[0], c[1] = c[1], c[0]
    with pytest.raises(Malformed, match="sorted"):
        replay(_mutate(certificate(NAME), swap))


@pytest.mark.parametrize("change, why", [
    (lambda c: c.__setitem__(2, []), "S is empty"),       # q < m with S = ∅: max not m
    (lambda c: c.__setitem__(0, c[1] + 1), "q <= m"),      # query above the maximum
    (lambda c: c.__setitem__(3, 0), "gap"),                # gap 0: m in the free alphabet
    (lambda c: c.__setitem__(2, [5]), "non-query"),        # S beyond the non-query positions
    (lambda c: c.__setitem__(2, [1, 0]), "increasing"),    # S not increasing
    (lambda c: c.__setitem__(3, 99), "no token"),          # a gap above m: empty alphabet
])
def test_ill_formed_classes_are_malformed(change, why):
    def edit(r):
        classes = r["hints"]["classes"]
        i = _first(classes, lambda c: c[0] < c[1] and len(c[2]) == 1 and c[2][0] == 0)
        change(classes[i])
    with pytest.raises(Malformed, match=why):
        replay(_mutate(certificate(NAME), edit))


def test_a_lowered_gap_is_rejected():
    """The class (q, m, S) with its hints at g − 1 (a larger class) is not proved."""
    lines = certificate(NAME)
    classes = _rule(lines)["hints"]["classes"]
    i = _first(classes, lambda c: c[3] >= 2)
    q, m, fixed, g = classes[i][:4]
    grown = rule.class_size(model(NAME).dims, m, tuple(fixed), g - 1) - \
        rule.class_size(model(NAME).dims, m, tuple(fixed), g)

    def edit(r):
        r["hints"]["classes"][i][3] -= 1
    with pytest.raises(Rejected, match="not"):
        replay(_mutate(lines, edit, claim_delta=grown))


def test_a_raised_gap_proves_less_than_claimed():
    lines = certificate(NAME)
    classes = _rule(lines)["hints"]["classes"]
    i = _first(classes, lambda c: len(c[2]) < 3 and c[1] - c[3] >= 1)

    def edit(r):
        r["hints"]["classes"][i][3] += 1
    with pytest.raises(Rejected, match="proves"):
        replay(_mutate(lines, edit))


@pytest.mark.parametrize("field, index, delta", [
    ("diff", None, -1.0),   # a logit-difference λ lowered
    ("box", 1, -1.0),       # a box upper end lowered
    ("box", 0, +1.0),       # a box lower end raised
    ("pre", 1, -1.0),       # an MLP pre-activation upper end lowered
    ("dir_lo", None, +5.0),  # a LayerNorm direction lower bound raised
])
def test_tampered_lambda_hints_are_rejected(field, index, delta):
    lines = certificate(NAME)
    classes = _rule(lines)["hints"]["classes"]
    i = _first(classes, lambda c: len(c[2]) == 1)  # two free positions
    values = _f64(classes[i][FIELD[field]])
    shape = rule.family.hint_shapes(model(NAME).dims)[field]
    if field == "diff":  # the competitor with the largest bound (not the output m)
        m = classes[i][1]
        flat = [j for j in range(len(values)) if j % shape[-1] != m]
        hit = max(flat, key=lambda j: values[j])
        values[hit] += delta * (abs(values[hit]) + 1)
    elif index is None:
        values = [x + delta for x in values]
    else:  # every interval's end `index` moved towards the other end
        for j in range(index, len(values), 2):
            lo_hi = values[j - index:j - index + 2]
            values[j] = lo_hi[0] + (lo_hi[1] - lo_hi[0]) * (0.1 if index == 1 else 0.9) \
                if lo_hi[1] > lo_hi[0] else values[j] + delta
    text = _b64(values)

    def edit(r):
        r["hints"]["classes"][i][FIELD[field]] = text
    with pytest.raises(Rejected, match="not"):
        replay(_mutate(lines, edit))


def test_a_false_class_is_rejected():
    """A class with a wrong sequence, with the generator's own best hints, spliced in."""
    fw = model(NAME)
    dims = fw.dims
    tab = strategy.Tables(fw)
    lines = certificate(NAME)
    classes = _rule(lines)["hints"]["classes"]
    proved = {(c[0], c[1], tuple(c[2])) for c in classes}
    false = None
    for q, m, fixed in strategy.class_keys(dims.d_vocab, dims.n_ctx):
        if (q, m, fixed) in proved or len(fixed) == dims.n_ctx - 1:
            continue
        if not all(_correct(fw, t) for t in _class_sequences(dims, q, m, fixed, 1)):
            false = (q, m, fixed)
            break
    assert false is not None
    q, m, fixed = false
    query = strategy._ClassQuery(tab, q, m, rule.slots(dims, q, m, fixed, 1))
    query.margins()
    entry = [q, m, list(fixed), 1] + [_b64(list(np.ravel(query.hint[n])))
                                      for n in rule.HINT_FIELDS]

    def edit(r):
        r["hints"]["classes"].append(entry)
        r["hints"]["classes"].sort(key=lambda c: (c[0], c[1], c[2]))
    size = rule.class_size(dims, m, fixed, 1)
    with pytest.raises(Rejected, match="not"):
        replay(_mutate(lines, edit, claim_delta=size))


def _residue_lines():
    lines = certificate(NAME)
    assert len(_rule(lines)["hints"]["residue"]) >= 2
    return lines


def test_a_residue_sequence_inside_a_class_is_malformed():
    lines = _residue_lines()
    q, m, fixed, g = _rule(lines)["hints"]["classes"][-1][:4]
    inside = next(iter(_class_sequences(model(NAME).dims, q, m, fixed, g)))

    def edit(r):
        r["hints"]["residue"] = sorted(r["hints"]["residue"] + [list(inside)])
    with pytest.raises(Malformed, match="lies in a class"):
        replay(_mutate(lines, edit, claim_delta=1))


@pytest.mark.parametrize("change", ["duplicate", "unsorted", "out of range"])
def test_an_ill_formed_residue_is_malformed(change):
    def edit(r):
        res = r["hints"]["residue"]
        if change == "duplicate":
            res.insert(0, res[0])
        elif change == "unsorted":
            res[0], res[1] = res[1], res[0]
        else:
            res[0] = [model(NAME).dims.d_vocab] + res[0][1:]
    with pytest.raises(Malformed, match="residue"):
        replay(_mutate(_residue_lines(), edit))


def test_a_wrong_residue_sequence_is_not_counted():
    """A sequence the model gets wrong, outside every class, claimed: rejected."""
    fw = model(NAME)
    lines = _residue_lines()
    keyed = {(c[0], c[1], tuple(c[2])): c[3] for c in _rule(lines)["hints"]["classes"]}
    listed = {tuple(t) for t in _rule(lines)["hints"]["residue"]}
    wrong = next(t for t in itertools.product(range(fw.dims.d_vocab), repeat=fw.dims.n_ctx)
                 if t not in listed and not rule.in_class(keyed, t) and not _correct(fw, t))

    def edit(r):
        r["hints"]["residue"] = sorted(r["hints"]["residue"] + [list(wrong)])
    with pytest.raises(Rejected, match="proves"):
        replay(_mutate(lines, edit, claim_delta=1))


def test_other_tasks_are_refused_by_name():
    lines = certificate(NAME)
    out = []
    for x in lines:
        obj = json.loads(x)
        if obj["kind"] == "header":
            obj["theorem"] = obj["theorem"].replace("task == max_of_k", "task == min_of_k")
        out.append(json.dumps(obj, separators=(",", ":")))
    with pytest.raises(Rejected, match="max_of_k"):
        replay(out)


@pytest.mark.parametrize("family", [
    Family(normalization="RMS", ln_eps=1e-5),
    Family(normalization="RMS", ln_eps=1e-5, n_layers=2),
])
def test_unsupported_families_are_refused(family):
    dims = Dims(4, 3, 4, 4, family)
    with pytest.raises(Malformed, match="family_gap"):
        rule.check(dims, {}, {"classes": []}, lambda work: None)


def test_the_cost_is_charged_before_the_work():
    lines = certificate(NAME)
    classes = rule.parse_hints(_rule(lines)["hints"], model(NAME).dims, lambda w: None)
    cost = rule.cost(model(NAME).dims, classes)
    with pytest.raises(Malformed, match="max-work"):
        replay(lines, limits=Limits(max_work=cost // 2))


def test_the_gap_is_the_smallest_the_float_bound_proves():
    """The strategy's bisection: g proves, g − 1 does not (in float64)."""
    fw = model(NAME)
    tab = strategy.Tables(fw)
    for q, m, fixed, g, *_ in _rule(certificate(NAME))["hints"]["classes"][:40]:
        fixed = tuple(fixed)
        assert strategy.attempt(tab, q, m, fixed, g) is not None
        if g > 1 and len(fixed) < fw.dims.n_ctx - 1:
            assert strategy.attempt(tab, q, m, fixed, g - 1) is None


def test_unexplained_dimensionality_is_reported():
    """H·(k·v² + R·d) + d·v + 2·d·d_mlp + v per residue sequence (spec/rules.md
    §family_gap), recomputed here from the dimensions."""
    lines = certificate(NAME)
    d = model(NAME).dims
    f = d.family
    rows = d.d_vocab if f.positional == "rotary" else d.d_vocab * d.n_ctx
    residue = len(_rule(lines)["hints"].get("residue", []))
    want = (f.n_heads * (d.n_ctx * d.d_vocab ** 2 + rows * d.d_model) + d.d_model * d.d_vocab
            + 2 * d.d_model * f.d_mlp + residue * d.d_vocab)
    assert replay(lines).dimensionality == want
