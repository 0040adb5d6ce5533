"""Rule overwhelm_family on models with n_layers >= 2 (checker/rules/overwhelm_deep.py,
spec/rules.md §overwhelm_family, several layers).

Soundness by enumeration: on small untrained 2- and 3-layer models (peaky attention in
every layer; attention-only, LayerNorm + MLP, gated MLP, RoPE) and the shipped two-layer
Max-of-each-prefix model, every claim the checker accepts -- from the generator's own
certificates and from certificates forced for claims it did not prove -- is confirmed on
EVERY admissible completion by the independent 200-bit forward pass
(tests/test_depth.reference_logits_all, which shares no code with the rule or its
strategy).  Mutants: box and diff hints tampered, the hint order changed, a false
output, both back-ends.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import re

import mpmath
import numpy as np
import pytest
from overwhelm_fixtures import MODELS, check_lines, shipped
from overwhelm_models import deep_claims, deep_random
from test_depth import reference_logits_all

from checker.errors import Malformed, Rejected
from checker.statement import Overwhelm
from generator.overwhelm import certify, completions

DEEP_DEMO = MODELS / "maxany_v64_k10_2layers_seed0.pt"

# the untrained families of the sweep (overwhelm_models.DEEP_FAMILIES; the float32 tests use
# all of them)
SWEEP = ("attn2", "attn3", "ln_mlp2", "gated2", "rope_2heads2")


def reference_truth(weights, claim: Overwhelm) -> bool:
    """Every completion's output is claim.output, strictly, at 200 bits."""
    for t in completions(claim, weights.dims.d_vocab):
        logits = reference_logits_all(weights, list(claim.prefix + tuple(t) + (claim.query,)))
        last = logits[-1]
        if any(not (last[claim.output] > x) for m, x in enumerate(last) if m != claim.output):
            return False
    return True


def _demo_claims():
    return [Overwhelm((63,), 5, 63, free_cmp="<=", free=2, over=tuple(range(12))),
            Overwhelm((63,), 5, 63, free_cmp="==", free=2, over=(0, 3, 62)),
            Overwhelm((40,), 7, 40, free_cmp="<=", free=1, over=tuple(range(8))),
            Overwhelm((20,), 30, 30, free_cmp="<=", free=1, over=(0, 25, 31))]


CASES = [(name, functools.partial(deep_random, name), lambda: deep_claims(4))
         for name in SWEEP]
CASES.append(("demo", lambda: shipped(DEEP_DEMO), _demo_claims))


@pytest.mark.parametrize("name, model, claims", CASES, ids=[c[0] for c in CASES])
def test_every_accepted_claim_holds_on_every_completion(name, model, claims):
    loaded = model()
    tally = {"proved": 0, "refuted": 0, "not proved": 0, "accepted": 0}
    for claim in claims():
        verdict = certify(loaded, claim, float_shadow=False)
        claim = verdict.claim
        tally[verdict.verdict] += 1
        lines = verdict.lines if verdict.verdict == "proved" else certify(
            loaded, claim, float_shadow=False, force=True).lines
        try:
            report = check_lines(lines)
        except Rejected:
            assert verdict.verdict != "proved", f"{name}: the generator's proof rejected: {claim}"
            continue
        tally["accepted"] += 1
        assert report.facts.overwhelm == claim
        assert "2 layers" in report.rule_notes[0] or "3 layers" in report.rule_notes[0]
        assert reference_truth(loaded.weights, claim), f"{name}: ACCEPTED but false: {claim}"
    assert tally["accepted"] > 0, tally
    assert tally["refuted"] + tally["not proved"] > 0 or name == "demo", tally


# -- mutants ------------------------------------------------------------------------------

PROVED = Overwhelm((63,), 5, 63, free_cmp="<=", free=2, over=tuple(range(8)))


@functools.cache
def _proved_text():
    verdict = certify(shipped(DEEP_DEMO), PROVED, float_shadow=False)
    assert verdict.verdict == "proved"
    return tuple(verdict.lines)


def _lines():
    return [json.loads(s) for s in _proved_text()]


def _rule(lines):
    return next(x for x in lines if x["kind"] == "rule")


def _edit(lines, kind: str, entry: int, edit):
    rule = _rule(lines)
    raw = rule["hints"][kind][entry][-1]
    arr = np.frombuffer(base64.b64decode(raw), dtype="<f8").copy()
    edit(arr)
    rule["hints"][kind][entry][-1] = base64.b64encode(arr.astype("<f8").tobytes()).decode()
    return lines


def test_the_unmodified_certificate_is_accepted_by_both_back_ends():
    for arith in ("mpmath", "arb"):
        report = check_lines(_lines(), arith=arith)
        assert report.facts.overwhelm == PROVED


@pytest.mark.parametrize("entry", [0, 5, -1])  # layer 0 at the prefix, layer 0 free, last layer
@pytest.mark.parametrize("side", [0, 1])
def test_a_narrowed_box_hint_is_rejected(entry, side):
    """Every box end is a confirmed bound: moving one inward by 3/4 of the box's width (past
    the generator's slack, the ends still ordered) fails at that very coordinate and state
    (not later, through a table it changed)."""
    lines = _lines()
    layer, i, u = _rule(lines)["hints"]["boxes"][entry][:3]
    picked = []

    def edit(arr):
        box = arr.reshape(-1, 2)
        k = int(np.argmax(box[:, 1] - box[:, 0]))
        picked.append(k)
        width = box[k, 1] - box[k, 0]
        assert width > 0
        box[k, side] += (0.75 if side == 0 else -0.75) * width  # still lo <= hi

    lines = _edit(lines, "boxes", entry, edit)
    where = f"box coordinate {picked[0]}, head 0, layer {layer}, state ({i}, {u}) is not confirmed"
    with pytest.raises(Rejected, match=re.escape(where)):
        check_lines(lines)


def test_a_lowered_diff_hint_is_rejected():
    def edit(arr):
        arr[:] = arr - 0.5 * np.abs(arr) - 1e-3

    with pytest.raises(Rejected):
        check_lines(_edit(_lines(), "diff", 0, edit))


def test_hints_out_of_order_or_missing_are_malformed():
    lines = _lines()
    boxes = _rule(lines)["hints"]["boxes"]
    boxes[0], boxes[1] = boxes[1], boxes[0]
    with pytest.raises(Malformed):
        check_lines(lines)
    lines = _lines()
    del _rule(lines)["hints"]["boxes"][-1]
    with pytest.raises(Malformed):
        check_lines(lines)


@pytest.mark.parametrize("arith", ["mpmath", "arb"])
def test_a_false_claim_is_rejected(arith):
    """Output 62 after prefix [63] (the model outputs 63): forced certificates fail."""
    false = Overwhelm((63,), 5, 62, free_cmp="<=", free=2, over=tuple(range(8)))
    assert not reference_truth(shipped(DEEP_DEMO).weights,
                               Overwhelm((63,), 5, 62, free_cmp="==", free=0))
    with pytest.raises(Rejected):
        check_lines(certify(shipped(DEEP_DEMO), false, float_shadow=False, force=True).lines,
                    arith=arith)


def test_hints_of_a_true_claim_spliced_into_a_false_one_are_rejected():
    """The same states and hint layout, another output: the true claim's boxes and diff
    hints (bounds of ℓ_m − ℓ_63) do not bound the false claim's differences."""
    false = Overwhelm((63,), 5, 62, free_cmp="<=", free=2, over=tuple(range(8)))
    lines = [json.loads(s) for s in certify(shipped(DEEP_DEMO), false, float_shadow=False,
                                            force=True).lines]
    _rule(lines)["hints"] = _rule(_lines())["hints"]
    with pytest.raises(Rejected):
        check_lines(lines)


def test_permutation_claims_are_refused_with_a_message():
    with pytest.raises(Malformed, match="free_perm|free-perm"):
        certify(shipped(DEEP_DEMO), Overwhelm((63,), 5, 63, free_perm=(0, 1, 2)),
                float_shadow=False)


def test_reference_agrees_with_float_forward_on_the_demo():
    """The 200-bit reference and the generator's float64 pass agree (sanity of the
    enumeration oracle on a two-layer model)."""
    from generator.overwhelm import any_logits

    fw = shipped(DEEP_DEMO).weights
    seq = [63, 3, 7, 5]
    with mpmath.workprec(60):
        ref = [float(x) for x in reference_logits_all(fw, seq)[-1]]
    assert np.allclose(ref, any_logits(fw, np.array([seq]))[0], atol=1e-6)


# -- each step against direct evaluation ---------------------------------------------------

def test_lemma_R_with_interval_weights_takes_each_end_where_it_matters():
    """Step 3: a negative term takes the LOW end of its weight, a positive one the high end,
    and the value's high end: the bound is the exact maximum over the enclosures."""
    from mpmath import iv

    from checker.rules.overwhelm_deep import ratio_below

    slots = [(0,), (0,)]
    w = {(0, 0): iv.mpf((1, 10)), (1, 0): iv.mpf(1)}
    y = {(0, 0): iv.mpf(-1), (1, 0): iv.mpf((0.5, 1))}
    # max over w0 in [1, 10], y1 in [0.5, 1] of (−w0 + y1)/(w0 + 1) = 0 at w0 = 1, y1 = 1
    assert not ratio_below(w, lambda i, u: y[(i, u)], slots, -0.01)
    assert ratio_below(w, lambda i, u: y[(i, u)], slots, 0.01)
    # lower bound: min of the same average = (−10 + 0.5)/11
    assert ratio_below(w, lambda i, u: y[(i, u)], slots, 9.5 / 11 + 0.01, sign=-1)
    assert not ratio_below(w, lambda i, u: y[(i, u)], slots, 9.5 / 11 - 0.01, sign=-1)


def _residuals(fw, seq) -> list:
    """float64 (centred when normalised) residual stream after each layer at the last
    position of seq, straight from spec/theorem.md §2b (standard positions)."""
    import math

    from generator.model import mlp_np, norm_np

    f, d = fw.dims.family, fw.dims
    w = {k: np.asarray(a, np.float64) for k, a in fw.params.items()}
    x = w["embed.W_E"][list(seq)] + w["pos_embed.W_pos"][:len(seq)]
    out = []
    for layer in range(f.n_layers):
        b = f"blocks.{layer}."
        u = norm_np(x, f, w, b + "ln1")
        r = x + w[b + "attn.b_O"]
        for j in range(f.n_heads):
            q, k, v = (u @ w[b + "attn.W_" + c][j] + w[b + "attn.b_" + c][j] for c in "QKV")
            s = q @ k.T / math.sqrt(d.d_head)
            s = np.where(np.tril(np.ones((len(seq), len(seq)))) > 0, s, -np.inf)
            e = np.exp(s - s.max(1, keepdims=True))
            r = r + (e / e.sum(1, keepdims=True)) @ v @ w[b + "attn.W_O"][j]
        if f.d_mlp:
            r = r + mlp_np(f, w, b + "mlp.", norm_np(x if f.parallel else r, f, w, b + "ln2"))
        x = r
        last = x[-1] - x[-1].mean() if f.normalization is not None else x[-1]
        out.append(last)
    return out


@pytest.mark.parametrize("name", ["attn2", "attn3", "ln_mlp2", "gated2"])
def test_every_box_contains_every_residual_it_stands_for(name):
    """The boxes lemma, directly: for a proved claim, X_l(i, u) contains the residual after
    layer l at position i of every sequence the state (i, u) stands for (float64, with a
    1e-9 relative margin)."""
    from test_depth import rule_inputs

    from checker.rules import overwhelm_deep

    loaded = deep_random(name)
    claims = [c for c in deep_claims(4) if c.free_cmp == "<="]
    checked = 0
    for claim in claims:
        verdict = certify(loaded, claim, float_shadow=False)
        if verdict.verdict != "proved":
            continue
        claim, lines = verdict.claim, verdict.lines
        dims, mats = rule_inputs(lines)
        hints = next(json.loads(x) for x in lines if '"kind":"rule"' in x)["hints"]
        record = {}
        overwhelm_deep.check(dims, mats, claim, hints, lambda w: None, record=record)
        s = len(claim.prefix)
        for (layer, i, u), box in record.items():
            lengths = [0] if i < s else [i - s]
            for n in lengths:
                for t in itertools.product(overwhelm_deep.alphabet(dims, claim), repeat=n):
                    seq = claim.prefix[:min(i, s)] + t + (u,)
                    truth = _residuals(loaded.weights, seq)[layer]
                    for c, x in zip(box, truth):
                        pad = 1e-9 * (1 + abs(x))
                        assert float(c.a) - pad <= x <= float(c.b) + pad, (name, layer, i, u, seq)
                    checked += 1
    assert checked > 0


@pytest.mark.parametrize("family", ["demo", "ln_mlp2"])
def test_huge_box_hints_are_rejected_not_an_internal_error(family):
    """Every box hint ±1e300 (true, useless bounds): the rule fails closed with Rejected —
    huge boxes, keys beyond binary32, scores too wide to exponentiate — not a crash."""
    if family == "demo":
        lines = _lines()
    else:
        claim = Overwhelm((0,), 1, -1, free_cmp="<=", free=1)
        lines = [json.loads(s) for s in certify(deep_random(family), claim,
                                                float_shadow=False, force=True).lines]

    def edit(arr):
        box = arr.reshape(-1, 2)
        box[:, 0], box[:, 1] = -1e300, 1e300

    for entry in range(len(_rule(lines)["hints"]["boxes"])):
        lines = _edit(lines, "boxes", entry, edit)
    with pytest.raises(Rejected):
        check_lines(lines)
