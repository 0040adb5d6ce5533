"""Rule family_gap on models with n_layers >= 2 (checker/rules/family_gap_deep.py,
spec/rules.md §family_gap on several layers): each class proved by overwhelm_deep's boxes
over its product set (`overwhelm_deep.ProductClaim`).

Soundness by enumeration: on small trained two-layer Max-of-K models (LN + MLP, attention
only with RoPE and two heads, LNPre with a parallel MLP), every sequence of every class the
checker accepts is correct under the independent 200-bit forward pass
(tests/test_depth.reference_logits_all, which shares no code with the rule or its strategy),
and the count is the classes' sizes.  The boxes lemma for product sets directly: every box
X_l(i, u) contains the float64 residual of every sequence its state stands for.  Mutants:
box and diff hints tampered, a class relabelled to one holding a wrong sequence, keys out of
order, ill-formed boxes, a box meeting a class, a false box, a residue sequence inside a class
or box, out of order or not correct, the cost charged.  Box classes (boxes=on): every sequence
of every accepted box correct at 200 bits and disjoint from the rest.  The residue
(sequences outside every class, each decided by its own forward pass):
every listed sequence lies in no class and is correct at 200 bits.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json

import numpy as np
import pytest
from family_gap_models import replay
from test_depth import reference_logits_all, rule_inputs
from test_overwhelm_deep import _residuals

from checker.certificate import Limits
from checker.errors import Malformed, Rejected
from checker.rules import family_gap as rule
from checker.rules import family_gap_deep, overwhelm_deep
from generator.certify.strategies import family_gap as strategy
from generator.certify.trace import Trace
from generator.train import TrainConfig, train

BASE = dict(n_ctx=3, d_model=16, d_head=8, steps=600, seed=0, n_layers=2)
FAMILIES = {
    "ln_mlp2": dict(d_vocab=6, layernorm="LN", d_mlp=16),
    "rope_2heads2": dict(d_vocab=5, n_heads=2, d_head=8, rope=True),
    "lnpre_parallel2": dict(d_vocab=5, layernorm="LNPre", d_mlp=16, parallel=True),
    "bad": dict(d_vocab=5, layernorm="LN", d_mlp=16, steps=3),  # mostly wrong
}


@functools.cache
def model(name: str):
    return train(TrainConfig(**{**BASE, **FAMILIES[name]}), progress=False).weights()


@functools.cache
def certificate(name: str, text: str = "family-gap:merge=always,confirm=off") -> tuple:
    trace = Trace(model(name), float_shadow=False)
    options = strategy.Options.parse(text)
    by, claim, _ = strategy.certify(trace, options=options)
    return tuple(trace.lines(options.name(), by, claim, {}, {}))


def _rule(lines) -> dict:
    return next(json.loads(x) for x in lines if '"kind":"rule"' in x)


def _with_hints(lines, hints) -> list:
    out = []
    for x in lines:
        obj = json.loads(x)
        if obj.get("kind") == "rule":
            obj["hints"] = hints
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


def _members(dims, q, m, fixed, g):
    return itertools.product(*rule.slots(dims, q, m, fixed, g))


def _correct(fw, t) -> bool:
    last = reference_logits_all(fw, list(t))[-1]
    m = max(t)
    return all(last[m] > x for o, x in enumerate(last) if o != m)


@pytest.mark.parametrize("name", [n for n in FAMILIES if n != "bad"])
def test_every_sequence_of_every_accepted_class_is_correct(name):
    """The checker's count is the classes' sizes, and every sequence of every class is
    correct at 200 bits (independent forward pass)."""
    fw, lines = model(name), certificate(name)
    classes = _rule(lines)["hints"]["classes"]
    assert classes, name  # the strategy proves something on every family
    result = replay(list(lines))
    dims = fw.dims
    sizes, seen = 0, set()
    for q, m, s, g, _ in classes:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        members = list(_members(dims, q, m, fixed, g))
        assert len(members) == rule.class_size(dims, m, fixed, g)
        for t in members:
            assert t not in seen  # disjoint
            seen.add(t)
            assert _correct(fw, t), (name, q, m, s, g, t)
        sizes += len(members)
    residue = [tuple(t) for t in _rule(lines)["hints"].get("residue", [])]
    for t in residue:  # outside every class, and correct
        assert t not in seen and _correct(fw, t), (name, t)
    assert result.facts.correct == sizes + len(residue) == len(seen) + len(residue)


def test_the_residue_raises_the_bound_to_the_exact_count():
    """On the small two-layer models the classes leave sequences out; the residue takes every
    correct one with a clear float64 margin, which the checker's forward pass certifies."""
    for name in ("ln_mlp2", "rope_2heads2", "lnpre_parallel2"):
        fw, lines = model(name), certificate(name)
        residue = _rule(lines)["hints"].get("residue", [])
        truth = sum(_correct(fw, t) for t in itertools.product(range(fw.dims.d_vocab),
                                                               repeat=fw.dims.n_ctx))
        assert residue, name
        claim = replay(list(lines)).facts.correct
        assert truth - 3 <= claim <= truth, (name, claim, truth)


@pytest.mark.parametrize("name", ["ln_mlp2", "lnpre_parallel2"])
def test_every_box_contains_every_residual_of_its_product_state(name):
    """overwhelm_deep's boxes lemma on a ProductClaim: X_l(i, u) contains the residual after
    layer l at position i of every sequence with t_i' ∈ slots[i'] (i' < i) and t_i = u."""
    fw, lines = model(name), certificate(name)
    dims, mats = rule_inputs(list(lines))
    checked = 0
    for q, m, s, g, hint in _rule(lines)["hints"]["classes"][:12]:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        sets = rule.slots(dims, q, m, fixed, g)
        record = {}
        overwhelm_deep.check(dims, mats, overwhelm_deep.ProductClaim(sets, m), hint,
                             lambda w: None, record=record)
        for (layer, i, u), box in record.items():
            for head in itertools.product(*sets[:i]):
                truth = _residuals(fw, head + (u,))[layer]
                for c, x in zip(box, truth):
                    pad = 1e-9 * (1 + abs(x))
                    assert float(c.a) - pad <= x <= float(c.b) + pad, (name, layer, i, u, head)
                checked += 1
    assert checked > 0


def test_a_product_claim_attends_to_its_sets():
    claim = overwhelm_deep.ProductClaim([[0, 1], [3], [0, 1, 3], [2]], 3)
    assert claim.query == 2 and claim.output == 3 and overwhelm_deep.positions(claim) == [3]
    assert overwhelm_deep.token_sets(None, claim) == [(0, 1), (3,), (0, 1, 3), (2,)]
    assert overwhelm_deep.attended(None, claim, 2, 1) == [(0, 1), (3,), (1,)]
    with pytest.raises(Malformed):
        overwhelm_deep.ProductClaim([[0], [1, 2]], 2)  # two query tokens


def _narrow(text: str, which: int) -> str:
    arr = np.frombuffer(base64.b64decode(text), "<f8").copy()
    arr[which] = arr[which] + (1.0 if which % 2 == 0 else -1.0) * (1 + abs(arr[which]))
    return base64.b64encode(arr.astype("<f8").tobytes()).decode()


@pytest.mark.parametrize("part", ["boxes", "diff"])
def test_tampered_hints_are_rejected(part):
    """A box hint narrowed (its lower end raised above the truth) or a diff hint lowered:
    the class's Lemma R confirmation fails (Rejected)."""
    lines = certificate("ln_mlp2")
    hints = json.loads(json.dumps(_rule(lines)["hints"]))
    entry = hints["classes"][-1][4]
    if part == "boxes":
        entry["boxes"][0][3] = _narrow(entry["boxes"][0][3], 0)
    else:
        arr = np.frombuffer(base64.b64decode(entry["diff"][0][1]), "<f8").copy()
        arr[:] = arr - 10 * (1 + np.abs(arr))
        entry["diff"][0][1] = base64.b64encode(arr.astype("<f8").tobytes()).decode()
    with pytest.raises(Rejected):
        replay(_with_hints(lines, hints))


def test_a_class_holding_a_wrong_sequence_is_rejected():
    """A barely trained model (most outputs wrong): for classes holding a sequence it gets
    wrong at 200 bits, the float64 mirror's hints (written whether or not they prove)
    spliced into its certificate are rejected, never counted."""
    fw = model("bad")
    dims, lines = fw.dims, certificate("bad")
    from generator.certify.strategies.overwhelm_deep import deep_margins

    tried = 0
    for q, m, fixed in strategy.class_keys(dims.d_vocab, dims.n_ctx):
        if tried == 3:
            break
        if rule.signature(dims, q, m, fixed, 1) is not None or all(
                _correct(fw, t) for t in _members(dims, q, m, fixed, 1)):
            continue
        claim = overwhelm_deep.ProductClaim(rule.slots(dims, q, m, fixed, 1), m)
        forged = {"classes": [[q, m, list(fixed), 1, deep_margins(fw, claim).hints]]}
        with pytest.raises((Rejected, Malformed)):
            replay(_with_hints(lines, forged))
        tried += 1
    assert tried == 3


def test_keys_out_of_order_and_ill_formed_boxes_are_malformed():
    lines = certificate("ln_mlp2")
    hints = _rule(lines)["hints"]
    swapped = {**hints, "classes": [hints["classes"][1], hints["classes"][0],
                                    *hints["classes"][2:]]}
    with pytest.raises(Malformed, match="not after the previous"):
        replay(_with_hints(lines, swapped))
    with pytest.raises(Malformed, match="several layers"):
        replay(_with_hints(lines, {**hints, "extra": []}))
    for bad in ([[0, 1, [[0, 0, 0], [0, 0, 1]]]],  # no hint
                [[0, 1, [[0, 0, 0], [0, 0, 1]], {}, {}]],  # one-layer arity
                [[0, 1, [[0, 1, 0], [0, 0, 1]], {}]]):  # hi = m: outside [0, m − 1]
        with pytest.raises(Malformed, match="box 0"):
            replay(_with_hints(lines, {**hints, "boxes": bad}))


BOXES = "family-gap:merge=always,confirm=off,boxes=on"


@pytest.mark.parametrize("name", [n for n in FAMILIES if n != "bad"])
def test_every_sequence_of_every_accepted_box_is_correct(name):
    """boxes=on: the boxes' sequences are correct at 200 bits and disjoint from every class,
    box and residue sequence; the count is the sizes plus the residue."""
    fw, lines = model(name), certificate(name, BOXES)
    hints, dims = _rule(lines)["hints"], fw.dims
    assert hints.get("boxes"), name  # the search finds some on every family
    seen = set()
    for q, m, s, g, _ in hints["classes"]:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        seen.update(_members(dims, q, m, fixed, g))
    boxed = 0
    for q, m, sets, _ in hints["boxes"]:
        box = rule.Box(tuple(x) for x in sets)
        members = list(_members(dims, q, m, box, 0))
        assert len(members) == rule.class_size(dims, m, box, 0)
        for t in members:
            assert t not in seen and _correct(fw, t), (name, q, m, sets, t)
            seen.add(t)
        boxed += len(members)
    residue = [tuple(t) for t in hints.get("residue", [])]
    assert not seen & set(residue)
    assert replay(list(lines)).facts.correct == len(seen) + len(residue)
    assert boxed > 0


def test_a_box_meeting_a_class_or_holding_a_residue_sequence_is_malformed():
    lines = certificate("ln_mlp2", BOXES)
    hints, dims = _rule(lines)["hints"], model("ln_mlp2").dims
    q, m, sets, h = hints["boxes"][0]
    box = rule.Box(tuple(x) for x in sets)
    j = next(i for i, (lo, hi, e) in enumerate(sets) if lo == m - 1 or lo <= hi)
    grown = [list(x) for x in sets]
    grown[j] = [0, m - 1, 0]  # the whole [0, m − 1] at its band position: meets its class
    with pytest.raises(Malformed, match="meets another"):
        replay(_with_hints(lines, {**hints, "boxes": [[q, m, grown, h]] + hints["boxes"][1:]}))
    member = list(next(iter(_members(dims, q, m, box, 0))))
    residue = sorted(hints.get("residue", []) + [member])
    with pytest.raises(Malformed, match="lies in a class"):
        replay(_with_hints(lines, {**hints, "residue": residue}))


def test_a_false_box_is_rejected():
    """On the barely trained model, a box holding a wrong sequence, with the float mirror's
    hints for it, is not proved."""
    from checker.rules.overwhelm_deep import ProductClaim
    from generator.certify.strategies.overwhelm_deep import deep_margins

    fw, lines = model("bad"), certificate("bad")
    hints, dims = _rule(lines)["hints"], fw.dims
    keyed, merged, _ = rule.class_index(rule.parse_hints(hints, dims, lambda w: None,
                                                         deep=True))
    residue = {tuple(t) for t in hints.get("residue", [])}
    tried = 0
    for t in itertools.product(range(dims.d_vocab), repeat=dims.n_ctx):
        m, q = max(t), t[-1]
        if t in residue or rule.in_class(keyed, t, merged) or _correct(fw, t) or q == m \
                or list(t[:-1]).count(m) != 1:
            continue
        box = rule.Box(tuple((0, -1, 1) if u == m else (u, u, 0) for u in t[:-1]))
        claim = ProductClaim(rule.slots(dims, q, m, box, 0), m)
        forged = {**hints, "boxes": [[q, m, [list(x) for x in box],
                                      deep_margins(fw, claim).hints]]}
        with pytest.raises((Rejected, Malformed)):
            replay(_with_hints(lines, forged))
        tried += 1
        if tried == 3:
            break
    assert tried == 3


def _a_class_member(hints, dims):
    q, m, s, g, _ = hints["classes"][0]
    fixed = s["first"] if isinstance(s, dict) else tuple(s)
    return list(next(iter(_members(dims, q, m, fixed, g))))


def test_a_residue_sequence_in_a_class_or_out_of_order_is_malformed():
    lines = certificate("ln_mlp2")
    hints, dims = _rule(lines)["hints"], model("ln_mlp2").dims
    residue = hints["residue"]
    inside = sorted(residue + [_a_class_member(hints, dims)])
    with pytest.raises(Malformed, match="lies in a class"):
        replay(_with_hints(lines, {**hints, "residue": inside}))
    with pytest.raises(Malformed, match="not after the previous"):
        replay(_with_hints(lines, {**hints, "residue": residue[::-1]}))
    with pytest.raises(Malformed, match="not after the previous"):
        replay(_with_hints(lines, {**hints, "residue": residue + residue[-1:]}))


def test_a_wrong_residue_sequence_is_not_counted():
    """A sequence outside every class that the model gets wrong, listed in the residue in
    place of a correct one: the claim is no longer proved."""
    fw, lines = model("bad"), certificate("bad")  # the trained models make no error
    hints, dims = _rule(lines)["hints"], fw.dims
    keyed, merged, _ = rule.class_index(rule.parse_hints(hints, dims, lambda w: None,
                                                         deep=True))
    wrong = next(list(t) for t in itertools.product(range(dims.d_vocab), repeat=dims.n_ctx)
                 if not rule.in_class(keyed, t, merged) and not _correct(fw, t))
    assert hints["residue"] and replay(list(lines)).facts.correct == _rule(lines)["claim"]
    residue = sorted(hints["residue"][1:] + [wrong])
    with pytest.raises(Rejected, match="proves"):
        replay(_with_hints(lines, {**hints, "residue": residue}))


def test_the_cost_is_charged_and_limits_the_check():
    """The checker's reported work is at least the classes' overwhelm_deep cost and a forward
    pass per residue sequence, and a work limit below the classes' cost refuses the
    certificate."""
    lines = certificate("ln_mlp2")
    dims = model("ln_mlp2").dims
    hints = _rule(lines)["hints"]
    classes = rule.parse_hints(hints, dims, lambda w: None, deep=True)
    cost = family_gap_deep.cost(dims, classes)
    assert cost > 0
    from checker.rules import forward
    assert replay(list(lines)).work >= cost + len(hints["residue"]) * forward._sequence_cost(dims)
    with pytest.raises(Malformed, match="max-work"):
        replay(list(lines), limits=Limits(max_work=cost // 2))


def test_sampled_and_min_size_options_apply_on_several_layers():
    full = _rule(certificate("ln_mlp2"))["hints"]["classes"]
    part = _rule(certificate("ln_mlp2", "family-gap:merge=always,confirm=off,sample=2")
                 )["hints"]["classes"]
    chosen = strategy.sampled_pairs(6, 2)
    assert [c[:4] for c in part] == [c[:4] for c in full if (c[0], c[1]) in chosen]


def test_confirm_keeps_only_what_the_checker_accepts():
    on = certificate("ln_mlp2", "family-gap:merge=always")
    assert replay(list(on)).facts.correct == _rule(on)["claim"]
