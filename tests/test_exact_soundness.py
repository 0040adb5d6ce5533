"""Soundness and completeness of rule exact, sequence by sequence.

For small models (k = 2..5; trained, half-trained, random, with biases, with
strong positional attention) generate an exact certificate, have the checker
accept it, then enumerate all v^k sequences and confirm:
  - partition: the cubic cover (enumerated here from the hints, independently
    of the rule) and the residue the rule enumerates (residue_verdicts, the
    rule's own code) are disjoint, have no repeats, and together are all v^k
    sequences;
  - soundness: every certified sequence (cover, and residue certified) is
    correct by an independent float64 forward pass;
  - the count: the rule's count (not only the claim the checker accepts) is
    |cover| + residue certified, the generator claims exactly that, and it equals
    the independent count of correct sequences minus near-ties (every
    sequence with margin > NEAR is certified, none with margin < −NEAR is).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import soundness_helpers
from soundness_helpers import cubic_covered, random_weights, rule_inputs, trained

from checker.cli import main as check_cert
from checker.rules import exact
from generator.model import logits_float64

# A float64 logit margin this small cannot decide the real model's verdict.
NEAR = 1e-6


_trained = trained
_random = random_weights


CASES = {
    "v6k2-trained": lambda: _trained(6, 2, 8, 300, 3),
    "v7k3-half-trained": lambda: _trained(7, 3, 8, 100, 2),
    "v6k4-half-trained": lambda: _trained(6, 4, 8, 150, 5),
    "v4k5-trained": lambda: _trained(4, 5, 8, 300, 4),
    "v5k3-random-biases": lambda: _random(5, 3, 6, 6, bias_scale=0.7),
    "v5k4-random-positional": lambda: _random(5, 4, 4, 90, pos_scale=6.0),
    "v4k5-random": lambda: _random(4, 5, 4, 7),
}


def certify(weights, tmp_path):
    return soundness_helpers.certify(weights, tmp_path, "exact")


def covered(hints, v, k):
    """The cubic cover, from the hints alone (spec/rules.md §cubic, Theorem)."""
    return cubic_covered(hints["good"], v, k)


def margins(weights, seqs):
    """Independent float64 logit margins ℓ_max − max_{o != max} ℓ_o."""
    seqs = np.array(sorted(seqs), dtype=np.int64).reshape(-1, weights.dims.n_ctx)
    if not len(seqs):
        return np.zeros(0)
    logits = logits_float64(weights, seqs)
    top, rows = seqs.max(axis=1), np.arange(len(seqs))
    value = logits[rows, top].copy()
    logits[rows, top] = -np.inf
    return value - logits.max(axis=1)


def audit(weights, lines, proven):
    """The partition, soundness and count checks of the module docstring."""
    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    dims, mats, hints = rule_inputs(lines)
    cover = covered(hints, v, k)
    verdicts = exact.residue_verdicts(dims, mats, hints)
    residue = [seq for seq, _ in verdicts]
    assert len(set(residue)) == len(residue), "a residue sequence is enumerated twice"
    assert not cover & set(residue), "a sequence is both covered and in the residue"
    assert len(cover) + len(residue) == v ** k, "cover and residue miss sequences"
    certified = cover | {seq for seq, ok in verdicts if ok}
    by_rule, _ = exact.check(dims, mats, hints, lambda work: None, 1)
    assert len(certified) == by_rule, "the rule's count is not cover + residue certified"
    assert proven == by_rule, "the generator's claim is not what the rule proves"
    everything = list(itertools.product(range(v), repeat=k))
    margin = dict(zip(sorted(everything), margins(weights, everything)))
    assert all(margin[s] > -NEAR for s in certified), "certified a wrong sequence"
    assert all(s in certified for s in everything if margin[s] > NEAR), \
        "a clearly correct sequence is not certified"
    near = sum(abs(m) <= NEAR for m in margin.values())
    correct = sum(m > 0 for m in margin.values())
    assert correct - near <= proven <= correct + near
    if near == 0:
        assert proven == correct
    return len(cover), len(residue)


@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_count_by_enumeration(case, tmp_path, capsys):
    weights = CASES[case]()
    model_path, cert, lines = certify(weights, tmp_path)
    jobs = "2" if case == "v6k4-half-trained" else "1"  # the forked path, once
    assert check_cert([str(cert), "--model", str(model_path), "--json", "--jobs", jobs]) == 0
    out = json.loads(capsys.readouterr().out)
    cover, residue = audit(weights, lines, out["correct"])
    note = next(r for r in out["rules"] if r.startswith("exact:"))
    assert f"{cover} in closed form" in note and f"of the {residue} residue sequences" in note


def test_residue_is_nontrivial_somewhere():
    """The corpus exercises the residue: some models leave sequences to it, and
    some residue sequences are certified (not only wrong ones)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        _, _, lines = certify(CASES["v7k3-half-trained"](), Path(tmp))
    verdicts = exact.residue_verdicts(*rule_inputs(lines))
    assert sum(ok for _, ok in verdicts) > 0 and sum(not ok for _, ok in verdicts) > 0


def test_without_hints_the_residue_is_brute_force(tmp_path, capsys):
    """No good sets at all: every class is residue, and the rule still certifies
    exactly the correct sequences (the cover is empty, nothing is missed)."""
    weights = CASES["v5k3-random-biases"]()
    model_path, cert, lines = certify(weights, tmp_path)
    objs = [json.loads(s) for s in lines]
    objs[-2]["hints"] = {"good": []}
    cert.write_text("\n".join(json.dumps(o) for o in objs) + "\n")
    assert check_cert([str(cert), "--json", "--jobs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    lines = [json.dumps(o) for o in objs]
    cover, residue = audit(weights, lines, out["correct"])
    assert cover == 0 and residue == 5 ** 3


@pytest.mark.parametrize("v,k", [(2, 2), (3, 3), (4, 4), (3, 5), (5, 3)])
def test_plan_partitions_every_sequence(v, k):
    """The closed form (Plan) against enumeration, for random hints without a
    model: cover + residue = v^k, the cover is the enumerated cover, and each
    class's residue has the closed-form size."""
    from collections import Counter

    from checker.rules.cubic import parse_hints

    rng = np.random.default_rng(v * 10 + k)
    entries = []
    for m in range(v):
        for q in range(m + 1):
            for c in range(k if q == m else k - 1):
                if rng.random() < 0.7:
                    limit = 2 if c == 0 else 1 << m
                    entries.append([m, q, c, int(rng.integers(0, limit)) if limit > 1 else 0])
    hints = {"good": entries}
    plan = exact.Plan(parse_hints(hints, v, k), v, k)
    cover = covered(hints, v, k)
    assert plan.cover == len(cover) and plan.cover + plan.residue == v ** k
    sizes = Counter()
    for seq in itertools.product(range(v), repeat=k):
        if seq not in cover:
            m = max(seq)
            sizes[(seq[-1], m, sum(t < m for t in seq[:-1]))] += 1
    planned = {(q, m, c): 1 if c == 0 else exact._class_residue_size(k, m, c, bad)
               for q in range(v) for m, c, bad in plan.classes[q]}
    assert planned == dict(sizes)


def test_integer_endpoints_are_exact():
    """Recorded endpoints become integers times 2^E without rounding, zeros and
    exponents above 0 included."""
    from fractions import Fraction

    from mpmath import iv

    rng = np.random.default_rng(0)
    values = [0.0, 4.0, -2.0**60, 2.0**-1074, 1e300, -3.5] + list(rng.standard_normal(20) * 1e3)
    for group in (values, [0.0, 4.0, 8.0, 2.0**70]):
        row = [iv.mpf((min(a, b), max(a, b))) for a, b in zip(group, group[::-1])]
        e = exact._common_exponent([row])
        lo, hi = exact._integer_matrix([row], [e])
        for x, a, b in zip(row, lo[0], hi[0]):
            assert Fraction(a) * Fraction(2) ** e == Fraction(float(x.a))
            assert Fraction(b) * Fraction(2) ** e == Fraction(float(x.b))
