"""The checker refuses altered overwhelm certificates: forged dual potentials,
forged bounds (recorded enclosures, inputs from another query position), a
claim for the wrong output, a longer or wider free set than proved, and a prefix
that is in fact not overwhelming (with its counterexample confirmed)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from overwhelm_fixtures import SMALL_MAXANY, check_lines, decoded, forged, shipped, truth

from checker import statement
from checker.errors import Malformed, Rejected
from checker.statement import Facts, Overwhelm
from generator.overwhelm import certify

TOP = 7  # the largest token of the small Max-of-prefix model
FREE = Overwhelm((TOP,), 3, TOP, free_cmp="<=", free=3)
OVER = Overwhelm((5,), 3, 5, free_cmp="==", free=4, over=(0, 1, 2, 3, 4, 5))
PERM = Overwhelm((6, 1), 2, 6, free_perm=(0, 3, 3))
FALSE_FREE = Overwhelm((5,), 3, 5, free_cmp="<=", free=3)  # a free 7 beats the prefix's 5
FALSE_PERM = Overwhelm((4, 1), 2, 4, free_perm=(0, 3, 6))  # every permutation contains 6


@pytest.fixture(scope="module")
def loaded():
    return shipped(SMALL_MAXANY)


def _lines(loaded, claim):
    verdict = certify(loaded, claim, float_shadow=False)
    assert verdict.verdict == "proved", verdict.text()
    return decoded(verdict.lines)


def _rule(lines):
    return next(x for x in lines if x["kind"] == "rule")


def _reject(lines, exc=Rejected, match=None):
    with pytest.raises(exc, match=match):
        check_lines([json.dumps(x) for x in lines])


def _set_header(lines, claim):
    facts = Facts(dims={"d_vocab": 8, "n_ctx": 6, "d_model": 8, "d_head": 8},
                  weights_sha256="0" * 64, correct=None, overwhelm=claim)
    text = statement.theorem_text(facts)
    old = statement.parse(lines[0]["theorem"])
    digest = next(a.value for a in old if a.field == "weights")
    lines[0]["theorem"] = text.replace("0" * 64, digest)


def test_genuine_certificates_are_accepted(loaded):
    for claim in (FREE, OVER, PERM):
        report = check_lines([json.dumps(x) for x in _lines(loaded, claim)])
        assert report.facts.overwhelm == claim


@pytest.mark.parametrize("claim", [FALSE_FREE, FALSE_PERM], ids=["free", "perm"])
def test_a_prefix_that_does_not_overwhelm_is_refused(loaded, claim):
    ok, counter, _ = truth(loaded.weights, claim)
    assert not ok and counter is not None  # brute force finds the counterexample
    verdict = certify(loaded, claim, float_shadow=False)
    assert verdict.verdict == "refuted"
    forced = forged(loaded, claim)  # lines written anyway, with the best potentials
    _reject(decoded(forced.lines), match="not negative")


@pytest.mark.parametrize("claim", [FREE, PERM], ids=["free", "perm"])
def test_a_claim_for_the_wrong_output_is_refused(loaded, claim):
    lines = _lines(loaded, claim)
    wrong = Overwhelm(**{**claim.__dict__, "output": 6 if claim.output != 6 else 5})
    _rule(lines)["claim"]["output"] = wrong.output
    _set_header(lines, wrong)
    if claim.free_perm is not None:  # potentials are keyed by the competitor
        _reject(lines, Malformed)
    else:
        _reject(lines, match="not negative")


def test_header_must_not_claim_more_than_the_rule_proved(loaded):
    lines = _lines(loaded, OVER)
    for stronger in (Overwhelm((5,), 3, 5, free_cmp="==", free=4),  # all tokens, not [0..5]
                     Overwhelm((5,), 3, 5, free_cmp="<=", free=4, over=OVER.over),  # lengths
                     Overwhelm((5,), 3, 5, free_cmp="==", free=4, over=(0, 1, 6)),
                     Overwhelm((4,), 3, 5, free_cmp="==", free=4, over=OVER.over)):
        changed = [dict(x) for x in lines]
        _set_header(changed, stronger)
        _reject(changed, match="not verified")
    weaker = [dict(x) for x in lines]  # a subset of the proven strings follows
    _set_header(weaker, Overwhelm((5,), 3, 5, free_cmp="==", free=4, over=(1, 2)))
    check_lines([json.dumps(x) for x in weaker])


def test_inputs_of_another_query_position_are_refused(loaded):
    lines = _lines(loaded, FREE)
    inputs = _rule(lines)["inputs"]
    inputs["EXP_EQKE_Q@2"], inputs["EXP_EQKE_Q@3"] = inputs["EXP_EQKE_Q@3"], inputs["EXP_EQKE_Q@2"]
    _reject(lines, match="not that quantity")
    lines = _lines(loaded, FREE)
    del _rule(lines)["inputs"]["EU_Q@1"]
    _reject(lines, Malformed, match="takes inputs")


def _f64(values):
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode()


def test_forged_attention_bounds_are_refused(loaded):
    """Shrink the recorded enclosure of exp(EQKE) at one query position: the op
    line no longer contains the checker's own enclosure."""
    lines = _lines(loaded, FREE)
    target = _rule(lines)["inputs"]["EXP_EQKE_Q@2"]
    line = lines[target]
    lo = struct.unpack(f"<{len(base64.b64decode(line['lo'])) // 8}d", base64.b64decode(line["lo"]))
    line["hi"] = _f64([x * 0.5 for x in lo])
    line["lo"] = _f64([x * 0.25 for x in lo])
    _reject(lines, match="does not enclose")


def test_forged_potentials_are_refused(loaded):
    lines = _lines(loaded, PERM)
    hints = _rule(lines)["hints"]["potentials"]
    good = [list(e) for e in hints]
    # any reals are admissible potentials, but bad ones give a bound that is not < 0
    _rule(lines)["hints"]["potentials"] = [[m, _f64([1e6, -1e6, 1e6])] for m, _ in good]
    _reject(lines, match="not negative")
    for broken, exc in [
        ([[m, _f64([0.0, 0.0])] for m, _ in good], Malformed),  # wrong length
        (good[1:], Malformed),  # a competitor missing
        (good + [good[0]], Malformed),  # duplicated
        ([[m, _f64([float("nan")] * 3)] for m, _ in good], Malformed),
        ([[PERM.output, good[0][1]]] + good[1:], Malformed),  # potentials for the output itself
    ]:
        _rule(lines)["hints"]["potentials"] = broken
        _reject(lines, exc)


def test_claims_that_do_not_fit_the_context_are_refused(loaded):
    lines = _lines(loaded, FREE)
    _rule(lines)["claim"]["free"] = 5  # 1 + 5 + 1 > n_ctx = 6
    _reject(lines, match="longer than n_ctx")


def test_overwhelm_header_needs_its_fields(loaded):
    lines = _lines(loaded, FREE)
    lines[0]["theorem"] = lines[0]["theorem"].replace(" and output == 7", "")
    _reject(lines, Malformed, match="must state")
    lines = _lines(loaded, FREE)
    lines[0]["theorem"] += " and free_perm == [1]"
    _reject(lines, Malformed, match="exactly one")
    lines = _lines(loaded, FREE)
    lines[0]["theorem"] += " and correct >= 0"
    _reject(lines, match="not verified")


def test_free_rule_takes_no_hints_and_a_strict_claim(loaded):
    lines = _lines(loaded, FREE)
    _rule(lines)["hints"] = {"potentials": []}
    _reject(lines, Malformed, match="no hints")
    for key, value in [("free_cmp", "<"), ("over", [3, 1]), ("over", [1, 1]), ("prefix", [8]),
                       ("query", -1), ("free", True)]:
        lines = _lines(loaded, FREE)
        _rule(lines)["claim"][key] = value
        _reject(lines, Malformed)


def test_facts_imply_exactly_the_weaker_statements():
    dims = {"d_vocab": 4, "n_ctx": 8, "d_model": 2, "d_head": 2}
    facts = Facts(dims=dims, weights_sha256="a" * 64, correct=None,
                  overwhelm=Overwhelm((3,), 1, 3, free_cmp="<=", free=4, over=(0, 1, 2)))

    def holds(text):
        return all(statement.holds(a, facts) for a in statement.parse(text))

    assert holds("property == overwhelm and prefix == [3] and query == 1 and output == 3")
    for weaker in ("free <= 4 over [0, 1, 2]", "free <= 2 over [2]", "free == 3 over [0, 1]",
                   "free_perm == [0, 0, 2, 1]", "free_perm == []"):
        assert holds(weaker), weaker
    assert not holds("free <= 4")  # all tokens: more than proven
    assert not holds("free <= 5 over [0]") and not holds("free == 4 over [0, 3]")
    assert not holds("free_perm == [0, 3]") and not holds("free_perm == [0, 0, 0, 0, 0]")
    assert not holds("property == accuracy") and not holds("correct >= 0")
    assert not holds("task == max_of_k") and not holds("accuracy >= 0")
    assert not holds("prefix == [3, 3]") and not holds("output == 2")
    perm = Facts(dims=dims, weights_sha256="a" * 64, correct=None,
                 overwhelm=Overwhelm((3,), 1, 3, free_perm=(0, 1, 1)))
    assert statement.holds(statement.parse("free_perm == [1, 0, 1]")[0], perm)
    assert not statement.holds(statement.parse("free <= 0")[0], perm)
    accuracy = Facts(dims=dims, weights_sha256="a" * 64, correct=5)
    assert statement.holds(statement.parse("property == accuracy")[0], accuracy)
    assert not statement.holds(statement.parse("prefix == []")[0], accuracy)
    assert statement.parse(statement.theorem_text(facts))  # canonical text parses
    assert np.all([statement.holds(a, facts)
                   for a in statement.parse(statement.theorem_text(facts))])


def test_arb_back_end_gives_the_same_verdicts(loaded):
    """Both rules are written against checker/arith: Arb accepts the genuine
    certificates and refuses the false claims, like mpmath."""
    pytest.importorskip("flint")
    for claim in (FREE, PERM):
        report = check_lines([json.dumps(x) for x in _lines(loaded, claim)], arith="arb")
        assert report.facts.overwhelm == claim
    for claim in (FALSE_FREE, FALSE_PERM):
        with pytest.raises(Rejected, match="not negative"):
            check_lines(forged(loaded, claim).lines, arith="arb")


def test_accuracy_certificates_may_state_their_property():
    """`property == accuracy` is optional in an accuracy header; `property == overwhelm`
    on an accuracy proof is refused."""
    cert = Path(__file__).resolve().parent.parent / "certs" / "max3_v8_seed0.brute-force.jsonl"
    lines = [json.loads(s) for s in cert.read_text().splitlines() if s.strip()]
    lines[0]["theorem"] = "property == accuracy and " + lines[0]["theorem"]
    report = check_lines([json.dumps(x) for x in lines])
    assert report.facts.correct > 0 and report.facts.overwhelm is None
    lines[0]["theorem"] = lines[0]["theorem"].replace("== accuracy", "== overwhelm")
    _reject(lines, Malformed, match="exactly one")


def test_rule_work_is_charged_before_it_is_done(loaded):
    """A work limit below the rule's stated cost is exit 2 (Malformed), never a pass."""
    from checker.certificate import CertificateChecker, Limits

    lines = [json.dumps(x) for x in _lines(loaded, FREE)]
    ops_only = CertificateChecker(Limits(max_work=10 ** 9))
    for line in lines:
        ops_only.feed(line)
    needed = ops_only.work
    tight = CertificateChecker(Limits(max_work=needed - 1))
    with pytest.raises(Malformed, match="interval operations"):
        for line in lines:
            tight.feed(line)
