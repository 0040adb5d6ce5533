"""The attention-only distance-to-float32 notes under the clock (spec/rules.md §distance to
float32; branch f32-lowrank): cubic, cubic_mix, exact, subcubic_gap and brute_force compute
their notes (the margin pass of cubic/exact, Lemma G's δ row of all five) inside
rules/notes.attempt, which looks at the clock, gives a note at most half of the time the check
has left and names any failure; float32.distance_note has no exception handler of its own.

A monkeypatched clock jumps forward when a note starts:
- by less than the note's share: the notes are the same as without the jump;
- past the note's share but within --max-seconds: the note says it was skipped; verdict,
  count and work are those of the check without the note;
- past --max-seconds: the time limit stands (the check fails), and the note stopped at its
  first look at the clock (δ's per-query part never ran).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from checker import float32
from checker.arith import MPMATH
from checker.certificate import CertificateChecker
from checker.checkfile import float32_distance
from checker.errors import Malformed
from checker.limits import Limits
from checker.rules import cubic, notes
from generator.cli import generate

ROOT = Path(__file__).resolve().parent.parent
CERTS, MODELS = ROOT / "certs", ROOT / "generator" / "models"
V8 = MODELS / "max3_v8_seed0.pt"
LIMIT = 100.0  # --max-seconds of these checks (s)
TIMING = re.compile(r" \(\d+\.\d s\)$")  # the rule note's own timing, which may differ


def _lines(rule: str, tmp_path_factory=None) -> list:
    if rule == "cubic_mix":
        return generate(str(V8), "cubic-mix")[0]
    if rule == "exact":  # the cubic certificate's line under rule exact (as the notes tests)
        lines = (CERTS / "max3_v8_seed0.cubic.jsonl").read_text().splitlines()
        line = json.loads(lines[-2])
        line["rule"] = "exact"
        return lines[:-2] + [json.dumps(line), lines[-1]]
    name = {"brute_force": "brute-force", "cubic": "cubic", "subcubic_gap": "subcubic"}[rule]
    return (CERTS / f"max3_v8_seed0.{name}.jsonl").read_text().splitlines()


RULES = ["cubic", "exact", "cubic_mix", "subcubic_gap", "brute_force"]


@pytest.fixture(scope="module")
def certificates():
    return {rule: _lines(rule) for rule in RULES}


def _check(lines, distance=True, limit=LIMIT):
    checker = CertificateChecker(Limits(max_seconds=limit), distance=distance)
    for line in lines:
        checker.feed(line)
    report = checker.finish()
    (note,) = [TIMING.sub("", n) for n in report.rule_notes if not n.startswith("op")]
    return report.facts.correct, report.work, note


class _Jump:
    """time.monotonic as the checker and the notes see it, moved forward by `seconds` when a
    note starts (installed on the note's first step: cubic.margin_note for cubic and exact,
    float32.attention_only_delta_rows for the δ notes)."""

    def __init__(self, monkeypatch, seconds: float, rule: str):
        self.offset, self.seconds, self.deltas_ran = 0.0, seconds, 0
        real = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: real() + self.offset)
        target = (cubic, "margin_note") if rule in ("cubic", "exact") else \
            (float32, "attention_only_delta_rows")
        original = getattr(*target)

        def jumped(*args, **kwargs):
            self.offset += self.seconds
            return original(*args, **kwargs)
        monkeypatch.setattr(*target, jumped)
        self.pairs_ran = 0  # cubic's margin pass: (q, m) pairs computed after the jump
        pair = cubic._token_terms

        def pair_counted(*args, **kwargs):
            self.pairs_ran += 1
            return pair(*args, **kwargs)
        monkeypatch.setattr(cubic, "_token_terms", pair_counted)
        self.products_ran = 0  # δ's exact products (blocks of rows) after the jump
        product = MPMATH.int_matmul

        def product_counted(a, b):
            self.products_ran += 1
            return product(a, b)
        monkeypatch.setattr(MPMATH, "int_matmul", product_counted)
        inner = float32._deltas

        def counted(*args, **kwargs):
            self.deltas_ran += 1
            return inner(*args, **kwargs)
        monkeypatch.setattr(float32, "_deltas", counted)


@pytest.mark.parametrize("rule", RULES)
def test_a_short_jump_leaves_the_note_unchanged(certificates, monkeypatch, rule):
    """Within the note's share the note is the one computed without a clock jump (and has
    its float32 error)."""
    plain = _check(certificates[rule])
    assert "float32 error " in plain[2] and "unavailable" not in plain[2], plain[2]
    _Jump(monkeypatch, 0.2 * LIMIT, rule)
    assert _check(certificates[rule]) == plain


@pytest.mark.parametrize("rule", RULES)
def test_a_note_past_its_share_is_skipped_and_the_verdict_stands(certificates, monkeypatch,
                                                                 rule):
    """The clock jumps by 0.6 of --max-seconds when the note starts: past the note's share
    (half the time left), within the limit.  The note says it was skipped, and verdict, count
    and work are those of the same check without the note (--float32-distance off)."""
    without = _check(certificates[rule], distance=False)
    jump = _Jump(monkeypatch, 0.6 * LIMIT, rule)
    correct, work, note = _check(certificates[rule])
    assert (correct, work) == without[:2]
    assert "(skipped: it would use more than 0.5 of the check's remaining time" in note, note
    assert re.search(r"float32 error \d", note) is None, note
    if rule in ("cubic", "exact"):  # the margin pass stopped at once: the note is skipped
        assert "smallest certified margin unavailable (skipped" in note, note
        assert jump.pairs_ran == 0
    else:  # the margin is printed, δ skipped
        assert "float32 error unavailable (skipped" in note, note
    assert jump.deltas_ran == jump.products_ran == 0  # δ stopped at its first look
    # --json's float32_distance: no float32 error for a skipped note
    assert all(row["float32_error"] is None for row in float32_distance([note]))


@pytest.mark.parametrize("rule", RULES)
def test_past_the_limit_the_time_limit_stands(certificates, monkeypatch, rule):
    """The clock jumps past --max-seconds when the note starts: the check fails on the time
    limit (a resource limit: exit 2), at the note's first look at the clock."""
    jump = _Jump(monkeypatch, 2 * LIMIT, rule)
    with pytest.raises(Malformed, match="checking took longer than"):
        _check(certificates[rule])
    assert jump.deltas_ran == 0


def test_distance_note_has_no_handler_of_its_own():
    """float32.distance_note names a failure through notes.attempt (no clock: a direct call);
    with a clock that reports the time limit, the limit stands (it is not named)."""
    from checker.modelspec import Dims

    dims = Dims(2, 2, 3, 1)
    bad = float32.distance_note(dims, lambda: {"W_E": [[0.5]]}, 0, 1)
    assert bad.startswith("float32 error unavailable (KeyError"), bad

    def late(work):
        raise Malformed("checking took longer than 1 s")
    with pytest.raises(Malformed, match="longer"):
        float32.distance_note(dims, lambda: {"W_E": [[0.5]]}, 0, 1, charge=late)


class _Budget:
    """A stand-in for certificate.RuleBudget: what notes.attempt reads for the deadline."""

    def __init__(self, started: float, limit: float):
        self.checker = type("C", (), {"started": started, "limits": Limits(max_seconds=limit)})
        self.calls = []

    def __call__(self, work):
        self.calls.append(work)


def test_attempt_deadline_and_nesting(monkeypatch):
    """The deadline is half the time left when the note starts; an inner attempt (given the
    outer note's clock as its charge) passes the outer deadline on, so the outer note is
    skipped whole; an inner failure is named by the inner note only."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    budget = _Budget(started=990.0, limit=30.0)  # 20 s left: the note may use 10 s

    def slow(seconds):
        def compute(clock):
            now[0] += seconds
            clock()
            return "done"
        return compute
    assert notes.attempt(budget, slow(9.0), "none") == "done"
    now[0] = 1000.0
    assert notes.attempt(budget, slow(11.0), "none").startswith("none (skipped: ")
    assert set(budget.calls) == {0}

    def outer(clock):
        inner = notes.attempt(clock, slow(20.0), "inner")
        return "outer sees " + inner
    now[0] = 1000.0
    assert notes.attempt(budget, outer, "outer").startswith("outer (skipped: ")

    def failing(clock):
        raise ZeroDivisionError("planted")
    now[0] = 1000.0
    assert notes.attempt(budget, lambda clock: "outer sees " + notes.attempt(
        clock, failing, "inner"), "outer") == "outer sees inner (ZeroDivisionError: planted)"
    assert notes.attempt(budget, failing, "x", detail=False) == "x (ZeroDivisionError)"
    # a plain function as charge: no deadline, whatever the time
    now[0] = 10 ** 9
    assert notes.attempt(lambda work: None, slow(10 ** 6), "none") == "done"
