"""A deterministic slice of the adversarial audit (benchmarks/fuzz_audit.py): small random and
hostile models, every strategy, every accepted claim re-checked by an independent 256-bit
mpmath forward pass.  A false theorem, or a certificate the generator writes and its own
checker refuses, fails the test.  The full run (hundreds of models) is on demand; its counts
are in benchmarks/RESULTS.md."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import fuzz_audit  # noqa: E402

from generator.certify.strategies import STRATEGIES  # noqa: E402
from generator.ground_truth import count_correct  # noqa: E402


def test_ci_slice_has_no_false_theorem():
    tally = fuzz_audit.run(models=2 * len(fuzz_audit.FAMILIES), seed=7)
    s = tally.summary()
    assert s["false_theorems"] == 0, tally.false_theorems
    assert s["generator_errors"] == 0, tally.generator_errors
    assert s["backend_disagreements"] == 0, tally.backend_disagreements
    if fuzz_audit.SECOND_BACKEND is not None:  # Arb installed: every check was done twice
        assert s["checked_by_both_backends"] > 0, s
    for name in STRATEGIES:  # not vacuous: every strategy had claims re-checked
        assert tally.certificates[name, "accepted"] >= 3, s
    assert s["claimed_total"] > 0 and s["covered_sequences_confirmed"] > 0, s


def test_forward_pass_agrees_with_the_float64_evaluation():
    """The oracle is the model of spec/theorem.md: on models without near-ties its count of
    correct sequences is the float64 exact-accuracy count."""
    for n, family in enumerate(("random", "planted", "biased", "positional")):
        weights = fuzz_audit.make_model(np.random.default_rng([11, n]), family)
        oracle = fuzz_audit.Oracle(weights)
        d = weights.dims
        verdicts = [oracle.verdict(s) for s in np.ndindex(*(d.d_vocab,) * d.n_ctx)]
        assert "undecided" not in verdicts
        assert verdicts.count("correct") == count_correct(weights, progress=False).correct


def test_an_inflated_claim_is_caught(monkeypatch):
    """The audit can fail: a checker that reported one sequence more than is correct."""
    real = fuzz_audit.check_file

    def inflated(*args, **kwargs):
        report = real(*args, **kwargs)
        d = report.facts.dims
        report.facts = dataclasses.replace(report.facts, correct=d["d_vocab"] ** d["n_ctx"])
        return report  # claims every sequence

    monkeypatch.setattr(fuzz_audit, "check_file", inflated)
    tally = fuzz_audit.run(models=2, seed=7)
    assert tally.false_theorems


def test_deep_and_gated_slice_has_no_false_theorem():
    """Issue 21: random deep and gated family models (benchmarks/fuzz_deep.py), the
    forward certificate and its mutants against a 256-bit multi-layer forward pass."""
    import fuzz_deep

    tally = fuzz_deep.run(models=6, seed=7)
    s = tally.summary()
    assert s["false_theorems"] == 0, tally.false_theorems
    assert s["generator_errors"] == 0, tally.generator_errors
    assert s["backend_disagreements"] == 0, tally.backend_disagreements
    assert s["certificates"].get("forward-brute-force:accepted", 0) == 6
    assert s["certificates"].get("cubic:not applicable", 0) == 6



def test_deep_float32_family_gap_slice_has_no_false_theorem():
    """Issue 23: random deep models, family-gap under --semantics float32 (classes by
    overwhelm_deep_float32, residue by the float32 forward pass): every counted sequence
    correct in a float32 execution, claim + 1 refused (benchmarks/fuzz_deep.py --float32);
    and family-gap with box classes: every counted sequence correct by the 256-bit oracle."""
    import fuzz_deep

    tally = fuzz_deep.run(models=4, seed=31, float32=True)
    s = tally.summary()
    assert s["false_theorems"] == 0, tally.false_theorems
    assert s["generator_errors"] == 0, tally.generator_errors
    assert s["certificates"].get("family-gap float32:accepted", 0) > 0, s
    assert s["mutants"].get("float32 claim+1", 0) > 0, s
    assert s["certificates"].get("family-gap boxes:accepted", 0) > 0, s  # box classes too
    assert s["mutants"].get("boxes claim+1", 0) > 0, s


def test_deep_overwhelm_slice_has_no_false_theorem():
    """Issue 21: random free overwhelm claims on random deep models (rule overwhelm_family on
    several layers, benchmarks/fuzz_deep.py --overwhelm), every accepted claim and mutant
    against the 256-bit oracle on every completion."""
    import fuzz_deep

    tally = fuzz_deep.run(models=4, seed=5, overwhelm=2)
    s = tally.summary()
    assert s["false_theorems"] == 0, tally.false_theorems
    assert s["generator_errors"] == 0, tally.generator_errors
    assert s["backend_disagreements"] == 0, tally.backend_disagreements
    assert s["certificates"].get("overwhelm:proved accepted", 0) > 0, s
    assert s["mutants"].get("overwhelm box narrowed", 0) > 0, s


def test_tasks_slice_has_no_false_theorem():
    """Issue 20: random one-layer, deep and gated models x every built-in task and random
    datasets (benchmarks/fuzz_tasks.py), each certified count against an independent 256-bit
    forward pass per scored pair, and the task mutants (claim raised, task or parameter
    changed, dataset rows edited with and without re-hashing, positions added, lines dropped
    or duplicated): every false one refused, parity and cyclic n=2 agree."""
    import fuzz_tasks

    find = fuzz_tasks.run(models=len(fuzz_tasks.TASKS), seed=7, in_turn=True, light=True)
    s = find.summary()
    assert s["false_theorems"] == 0, find.tally.false_theorems
    assert s["generator_errors"] == 0, find.tally.generator_errors
    assert s["backend_disagreements"] == 0, find.tally.backend_disagreements
    assert s["inconsistencies"] == 0, find.inconsistencies
    if fuzz_audit.SECOND_BACKEND is not None:
        assert s["checked_by_both_backends"] > 0, s
    assert set(s["tasks"]) == set(fuzz_tasks.TASKS), s  # not vacuous: every task ran
    assert s["certificates"].get("forward-brute-force:accepted", 0) == s["models"], s
    assert s["mutants_false"] >= 25 and s["false_mutants_refused"] == s["mutants_false"], s
    for kind in ("row label changed not rehashed", "position added claim+1",
                 "dataset line dropped", "parity->cyclic n=2", "task parameter changed"):
        assert s["mutants"].get(kind, 0) > 0, (kind, s["mutants"])


def test_tasks_audit_catches_a_false_claim(monkeypatch):
    """The task audit can fail: a checker that reported every pair correct."""
    import fuzz_tasks

    real = fuzz_audit.check_file

    def inflated(*args, **kwargs):
        report = real(*args, **kwargs)
        report.facts = dataclasses.replace(report.facts, correct=report.facts.total)
        return report

    monkeypatch.setattr(fuzz_audit, "check_file", inflated)
    find = fuzz_tasks.run(models=3, seed=7, in_turn=True, light=True)
    assert find.tally.false_theorems
