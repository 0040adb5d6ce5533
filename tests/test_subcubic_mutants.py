"""Mutants of subcubic_gap certificates: each changes the rule line and must be
refused — rejected (exit 1) when well-formed but not provable, malformed
(exit 2) when the hints break the format — never accepted."""

from __future__ import annotations

import functools
import json
from math import comb

import pytest

from checker.certificate import CertificateChecker
from checker.errors import Malformed, Rejected
from generator.cli import generate
from generator.modelfile import save_model
from generator.train import TrainConfig, train


@functools.cache
def original(tmp_dir) -> list[dict]:
    config = TrainConfig(d_vocab=10, n_ctx=4, d_model=8, d_head=8, steps=400, seed=11)
    path = tmp_dir / "model.pt"
    save_model(path, train(config, progress=False).weights(), None)
    lines, _ = generate(str(path), "subcubic:direct=mean+diff,near=2")
    return [json.loads(s) for s in lines]


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return original(tmp_path_factory.mktemp("subcubic-mutants"))


def check(lines):
    checker = CertificateChecker()
    for obj in lines:
        checker.feed(json.dumps(obj))
    return checker.finish()


def mutate(lines, edit):
    """A deep copy of the certificate with `edit(rule_line, lines)` applied."""
    out = json.loads(json.dumps(lines))
    rule = next(x for x in out if x["kind"] == "rule")
    edit(rule, out)
    return out


def raise_claim(rule, lines, by=1):
    rule["claim"] += by
    header = lines[0]
    old = header["theorem"].rsplit("correct >= ", 1)
    header["theorem"] = f"{old[0]}correct >= {rule['claim']}"


def test_original_verifies_and_is_nontrivial(cert):
    report = check(cert)
    assert 0.3 * 10 ** 4 < report.facts.correct < 10 ** 4


def test_raised_claim_is_rejected(cert):
    with pytest.raises(Rejected, match="proves"):
        check(mutate(cert, raise_claim))


def _entry(rule, pred):
    return next(e for e in rule["hints"]["gaps"] if pred(e))


def test_forged_gap_is_rejected(cert):
    """A gap one smaller than the generator's (the smallest that held) covers
    one more token per slot: its bound is not negative."""
    def edit(rule, lines):
        entry = _entry(rule, lambda e: len(e) == 5 and e[2] >= 1 and e[3] >= 2)
        m, _, c, g, _ = entry
        entry[3] = g - 1
        raise_claim(rule, lines, (m - g + 2) ** c - (m - g + 1) ** c)
    with pytest.raises(Rejected, match="not negative"):
        check(mutate(cert, edit))


def test_forged_entry_is_rejected(cert):
    """An entry the generator could not confirm at any gap, claimed with g = 1."""
    def edit(rule, lines):
        v, k = 10, 4
        have = {tuple(e[:3]) for e in rule["hints"]["gaps"]}
        m, q, c = next((m, q, c) for m in range(1, v) for q in range(m + 1)
                       for c in range(1, (k - 1 if q == m else k - 2) + 1)
                       if (m, q, c) not in have)
        rule["hints"]["gaps"].append([m, q, c, 1, 1])
    with pytest.raises(Rejected, match="not negative"):
        check(mutate(cert, edit))


def _two_gap_count(m, c, g, g2, k=4):
    free = m - g2 + 1
    return comb(k - 1, c) * (free ** c + c * (g2 - g) * free ** (c - 1))


def test_forged_two_gap_entry_is_rejected(cert):
    """A two-gap entry claimed one token wider than the generator's — its first gap
    one smaller, or a one-gap entry g turned into (g − 1, g) — is not provable.  Had the
    generator been able to prove either it would have emitted it (it keeps the entry
    covering most)."""
    rule = next(x for x in cert if x["kind"] == "rule")
    entries = rule["hints"]["gaps"]
    two = [e for e in entries if len(e) == 7 and e[3] >= 2]
    one = [e for e in entries if len(e) == 5 and e[2] >= 2 and e[3] >= 2]
    assert two and one, "the fixture has no entry to forge from: the test would be vacuous"
    for index, forged in ((entries.index(two[0]), "two"), (entries.index(one[0]), "one")):
        def edit(rule, lines, index=index, forged=forged):
            e = rule["hints"]["gaps"][index]
            m, c, g = e[0], e[2], e[3]
            before = (_two_gap_count(m, c, g, e[5]) if forged == "two"
                      else comb(3, c) * (m - g + 1) ** c)
            e[:] = (e[:3] + [g - 1, e[4], e[5], e[6]] if forged == "two"
                    else e[:3] + [g - 1, e[4], g, e[4]])
            raise_claim(rule, lines, _two_gap_count(m, c, g - 1, e[5]) - before)
        with pytest.raises(Rejected, match="not negative"):
            check(mutate(cert, edit))


@pytest.mark.parametrize("edit, needle", [
    (lambda r: _entry(r, lambda e: e[2] >= 1).__setitem__(3, 0), "tokens >= max"),
    (lambda r: _entry(r, lambda e: e[2] >= 1).__setitem__(4, 99), "near band"),
    (lambda r: _entry(r, lambda e: e[2] == 0).__setitem__(3, 1), "gap"),
    (lambda r: r["hints"]["gaps"].append(list(r["hints"]["gaps"][0])), "duplicate"),
    (lambda r: r["hints"].__setitem__("direct", "mean_query+diff"), "hints must be"),
    (lambda r: r["hints"]["gaps"].append([5, 2, 3, 1, 1]), "out of range"),
    (lambda r: r["hints"]["gaps"].append([5, 7, 1, 1, 1]), "out of range"),
    (lambda r: r["hints"]["gaps"].append([5, 2, 1, 1.0, 1]), "bad hint entry"),
    (lambda r: r.__setitem__("hints", None), "hints must be"),
    (lambda r: r["hints"]["gaps"].append([5, 2, 0, 0, 0, 1, 1]), "two-gap"),
    (lambda r: r["hints"]["gaps"].append([5, 2, 2, 2, 2, 2, 2]), "two-gap"),
    (lambda r: r["hints"]["gaps"].append([5, 2, 2, 2, 2, 6, 6]), "two-gap"),
    (lambda r: r["hints"]["gaps"].append([5, 2, 2, 2, 2, 4, 3]), "two-gap"),
    (lambda r: r["hints"]["gaps"].append([5, 2, 2, 2, 2, 4]), "bad hint entry"),
])
def test_malformed_hints_are_refused(cert, edit, needle):
    with pytest.raises(Malformed, match=needle):
        check(mutate(cert, lambda rule, _: edit(rule)))


def test_a_non_canonical_input_is_rejected(cert):
    """EXP_EQKE's line where EQKE is required: the term check refuses it."""
    def edit(rule, lines):
        exp_line = next(x for x in lines if x.get("op") == "exp")
        rule["inputs"]["EQKE"] = exp_line["id"]
    with pytest.raises(Rejected, match="is not EQKE"):
        check(mutate(cert, edit))
