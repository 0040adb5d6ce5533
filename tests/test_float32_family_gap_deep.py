"""Rule family_gap on several layers under the float32 semantics (spec/rules.md §family_gap on
several layers, float32; checker/rules/family_gap_deep.py with overwhelm_deep_float32).

- Enumeration: on the trained two-layer models of tests/test_family_gap_deep.py (LN + MLP;
  attention only with RoPE and two heads; LNPre with a parallel MLP), every sequence an
  accepted float32 certificate counts (its classes' and its residue's) outputs max(t),
  strictly, in five float32 evaluation orders (test_float32_overwhelm_deep's torch and numpy
  passes); the float32 claim is at most the real one.
- Box classes (boxes=on): the same enumeration over classes, boxes and residue, and claim + 1
  refused.
- Mutants: the real certificate relabelled float32 is rejected (its tight real hints do not
  cover the float32 widenings), an inflated float32 claim is rejected, and a float32 class
  whose hints lose their float32 slack is rejected.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from family_gap_models import mutate, replay, rule_line
from test_family_gap_deep import FAMILIES, model
from test_float32_family_gap import relabelled
from test_float32_overwhelm_deep import deep_float32_evaluations

from checker.errors import Malformed, Rejected
from checker.rules import family_gap as rule
from generator.certify.strategies import family_gap as strategy
from generator.certify.trace import Trace

TRAINED = [n for n in FAMILIES if n != "bad"]


@functools.cache
def lines_of(name: str, semantics: str, extra: str = "") -> tuple:
    trace = Trace(model(name), float_shadow=False)
    options = strategy.Options.parse("family-gap:merge=always,confirm=off" + extra)
    by, claim, _ = strategy.certify(trace, options=options, semantics=semantics)
    return tuple(relabelled(list(trace.lines(options.name(), by, claim, {}, {})), semantics))


def counted(dims, lines) -> np.ndarray:
    hints, seqs = rule_line(lines)["hints"], []
    for q, m, s, g, _ in hints["classes"]:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        seqs += list(itertools.product(*rule.slots(dims, q, m, fixed, g)))
    for q, m, sets, _ in hints.get("boxes", []):
        box = rule.Box(tuple(tuple(x) for x in sets))
        seqs += list(itertools.product(*rule.slots(dims, q, m, box, 0)))
    seqs += [tuple(t) for t in hints.get("residue", [])]
    assert len(set(seqs)) == len(seqs) == rule_line(lines)["claim"]
    return np.array(seqs, dtype=np.int64).reshape(-1, dims.n_ctx)


def float32_correct(weights, tokens: np.ndarray) -> np.ndarray:
    ok, top = np.ones(len(tokens), dtype=bool), tokens.max(axis=1)
    for logits in deep_float32_evaluations(weights, tokens):
        assert logits.dtype == np.float32
        best = logits[np.arange(len(tokens)), top]
        rest = logits.copy()
        rest[np.arange(len(tokens)), top] = -np.inf
        ok &= (rest < best[:, None]).all(axis=1)
    return ok


@pytest.mark.parametrize("name", TRAINED)
def test_every_counted_sequence_is_float32_correct(name):
    w, lines = model(name), lines_of(name, "float32")
    report = replay(list(lines))
    assert report.facts.semantics == "float32"
    assert report.facts.correct == rule_line(lines)["claim"]
    seqs = counted(w.dims, lines)
    assert len(rule_line(lines)["hints"]["classes"]) > 0  # classes, not only a residue
    assert float32_correct(w, seqs).all()
    assert len(seqs) <= rule_line(lines_of(name, "real"))["claim"]


@pytest.mark.parametrize("name", TRAINED)
def test_float32_box_classes_count_only_float32_correct_sequences(name):
    """boxes=on under float32 (generator: find_boxes, then float32_boxes re-proves each box
    with a float32 slack): the certificate has box classes, the checker accepts it with the
    float32 semantics, every sequence of its classes, boxes and residue is float32-correct in
    every evaluation order, and claim + 1 is refused."""
    w, lines = model(name), lines_of(name, "float32", ",boxes=on")
    assert rule_line(lines)["hints"].get("boxes"), "no box class found"
    report = replay(list(lines))
    assert report.facts.semantics == "float32"
    assert report.facts.correct == rule_line(lines)["claim"]
    assert float32_correct(w, counted(w.dims, lines)).all()
    with pytest.raises((Rejected, Malformed)):  # (Malformed: above all v^k sequences)
        replay(mutate(lines, lambda obj: None, claim_delta=1))


def _classes_only(lines) -> list:
    """The certificate without its residue, claiming its classes' sizes only."""
    return mutate(lines, lambda obj: obj["hints"].pop("residue", None),
                  claim_delta=-len(rule_line(lines)["hints"].get("residue", [])))


def test_the_real_classes_relabelled_float32_are_rejected():
    """The real certificate's classes (its residue dropped: the float32 forward pass decides
    a residue, a different test) claimed under float32: rejected; as real: accepted."""
    real = _classes_only(lines_of("ln_mlp2", "real"))
    assert rule_line(real)["hints"]["classes"]
    assert replay(real).facts.correct == rule_line(real)["claim"]
    with pytest.raises(Rejected, match="not confirmed|not negative"):
        replay(relabelled(real, "float32"))


def test_an_inflated_float32_claim_is_rejected():
    lines = lines_of("ln_mlp2", "float32")  # 56 of 216: room to inflate
    with pytest.raises(Rejected, match="proves"):
        replay(mutate(lines, lambda obj: None, claim_delta=1))


def test_a_float32_class_with_the_real_hints_is_rejected():
    """The first float32 class's hints replaced by the float64 mirror's real ones (no float32
    slack): its float32 proof fails."""
    from checker.rules.overwhelm_deep import ProductClaim
    from generator.certify.strategies.overwhelm_deep import deep_margins

    w, lines = model("ln_mlp2"), lines_of("ln_mlp2", "float32")
    q, m, s, g, _ = rule_line(lines)["hints"]["classes"][0]
    fixed = s["first"] if isinstance(s, dict) else tuple(s)
    tight = deep_margins(w, ProductClaim(rule.slots(w.dims, q, m, fixed, g), m)).hints

    def edit(obj):
        obj["hints"]["classes"][0][4] = tight
    with pytest.raises(Rejected, match="not confirmed|not negative"):
        replay(mutate(lines, edit))
