"""Rule overwhelm_family (spec/rules.md §overwhelm_family): Algorithm 1 on the
model families.

Soundness by enumeration: on small models of four families (untrained with
peaky attention, and the shipped small trained LN+MLP+RoPE Max-of-prefix model)
every claim the checker accepts -- from the generator's own certificates and
from certificates forced for claims it did not prove -- is confirmed on EVERY
admissible free string by the independent float64 forward pass
(generator.tasks.family.family_logits_at, which shares no code with the rule or
its strategy).  Mutants: every hint kind forged, a wrong output, a prefix that
does not overwhelm (with its counterexample).
"""

from __future__ import annotations

import base64
import itertools
import json

import numpy as np
import pytest
from overwhelm_fixtures import (
    FAMILIES,
    MODELS,
    UNDECIDED,
    check_lines,
    family_random,
    shipped,
    truth,
)

from checker.errors import Malformed, Rejected
from checker.statement import Overwhelm
from generator.overwhelm import any_logits, certify

SMALL_FAMILY = MODELS / "maxany_v6_k6_ln_mlp_rope_seed0.pt"
DEMO_FAMILY = MODELS / "maxany_v16_k16_ln_mlp_rope_seed0.pt"


def _claims_random(v=5):
    out = []
    for s0, q in itertools.product(range(v), range(v)):
        out.append(Overwhelm((s0,), q, -1, free_cmp="<=", free=2))
    for s0, q in [(0, 1), (2, 3), (4, 4)]:
        out.append(Overwhelm((s0, q), q, -1, free_perm=(0, 1)))
    return out


def _claims_small_trained(v=6):
    out = []
    for m, q in itertools.product(range(v), (0, 3, 5)):
        out.append(Overwhelm((m,), q, m, free_cmp="<=", free=3))
        out.append(Overwhelm((m,), q, m, free_cmp="==", free=4, over=tuple(range(m + 1))))
    out.append(Overwhelm((5, 1), 2, 5, free_perm=(0, 3, 4)))
    return out


CASES = [(name, (lambda n=name: family_random(n)), _claims_random, name != "ln_mlp_rope")
         for name in FAMILIES]
CASES.append(("small_trained", lambda: shipped(SMALL_FAMILY), _claims_small_trained, True))


@pytest.mark.parametrize("name, model, claims, expect_proofs", CASES, ids=[c[0] for c in CASES])
def test_every_accepted_claim_holds_on_every_completion(name, model, claims, expect_proofs):
    loaded = model()
    tally = {"proved": 0, "refuted": 0, "not proved": 0}
    for claim in claims():
        verdict = certify(loaded, claim, float_shadow=False)
        claim = verdict.claim
        ok, counter, worst = truth(loaded.weights, claim)
        tally[verdict.verdict] += 1
        if verdict.verdict == "proved":
            report = check_lines(verdict.lines)
            assert report.facts.overwhelm == claim
            assert "overwhelm_family" in report.rule_notes[0]
            assert ok, f"{name}: ACCEPTED but false: {claim}, counterexample {counter}"
        else:
            try:
                check_lines(certify(loaded, claim, float_shadow=False, force=True).lines)
            except Rejected:
                pass
            else:
                assert ok, f"{name}: ACCEPTED but false: {claim}, counterexample {counter}"
        if verdict.verdict == "refuted":
            seq = claim.prefix + verdict.counterexample + (claim.query,)
            logits = any_logits(loaded.weights, np.array([seq]))[0]
            assert np.delete(logits, claim.output).max() >= logits[claim.output] - UNDECIDED
            assert not ok or worst < UNDECIDED
    assert tally["refuted"] > 0, tally
    if expect_proofs:
        assert tally["proved"] > 0, tally


# -- mutants ----------------------------------------------------------------------------

PROVED = Overwhelm((5,), 3, 5, free_cmp="<=", free=3)


def _proved_lines():
    verdict = certify(shipped(SMALL_FAMILY), PROVED, float_shadow=False)
    assert verdict.verdict == "proved"
    return [json.loads(s) for s in verdict.lines]


def _rule_line(lines):
    return next(x for x in lines if x["kind"] == "rule")


def _edit_hint(lines, entry: int, field: int, edit):
    """Decode hint array `field` (1 box, 2 pre, 3 diff, 4 dir, 5 dir_lo) of an entry,
    edit it in place, re-encode."""
    rule = _rule_line(lines)
    raw = rule["hints"]["bounds"][entry][field]
    arr = np.frombuffer(base64.b64decode(raw), dtype="<f8").copy()
    edit(arr)
    rule["hints"]["bounds"][entry][field] = base64.b64encode(arr.astype("<f8").tobytes()).decode()
    return lines


def test_the_unmodified_certificate_is_accepted():
    report = check_lines(_proved_lines())
    assert report.facts.overwhelm == PROVED


def _widest_pair(arr):
    pairs = arr.reshape(-1, 2)
    return int(np.argmax(pairs[:, 1] - pairs[:, 0]))


@pytest.mark.parametrize("entry", [1, 3])  # entry 0: no free token, the box is a point
def test_a_forged_attention_box_is_rejected(entry):
    def shrink(arr):  # the widest coordinate's upper end moved to its midpoint
        k = _widest_pair(arr)
        arr[2 * k + 1] = (arr[2 * k] + arr[2 * k + 1]) / 2
    with pytest.raises(Rejected, match="box coordinate"):
        check_lines(_edit_hint(_proved_lines(), entry, 1, shrink))


def test_a_forged_box_lower_end_is_rejected():
    def raise_lo(arr):
        k = _widest_pair(arr)
        arr[2 * k] = (arr[2 * k] + arr[2 * k + 1]) / 2
    with pytest.raises(Rejected, match="box coordinate"):
        check_lines(_edit_hint(_proved_lines(), 2, 1, raise_lo))


def test_a_forged_mlp_preactivation_bound_is_rejected():
    def shrink(arr):
        k = _widest_pair(arr)
        arr[2 * k + 1] = (arr[2 * k] + arr[2 * k + 1]) / 2
    with pytest.raises(Rejected, match="pre-activation"):
        check_lines(_edit_hint(_proved_lines(), 3, 2, shrink))


def test_a_forged_logit_difference_bound_is_rejected():
    def lower(arr):
        arr[0] -= 1.0  # head 0, logit 0: below the true maximum of its attention average
    with pytest.raises(Rejected, match="logit difference 0"):
        check_lines(_edit_hint(_proved_lines(), 1, 3, lower))


def test_a_forged_layernorm_scale_direction_is_rejected():
    def raise_lower(arr):
        arr[:] = arr + 100.0  # claims r_c·e is far larger than it can be
    with pytest.raises(Rejected, match="direction hint"):
        check_lines(_edit_hint(_proved_lines(), 2, 5, raise_lower))


def test_a_flipped_direction_is_rejected():
    def flip(arr):
        arr[:] = -arr
    with pytest.raises(Rejected, match="direction hint"):
        check_lines(_edit_hint(_proved_lines(), 2, 4, flip))


def test_hints_for_the_wrong_positions_are_malformed():
    lines = _proved_lines()
    rule = _rule_line(lines)
    rule["hints"]["bounds"] = rule["hints"]["bounds"][:-1]
    with pytest.raises(Malformed):
        check_lines(lines)


def test_a_claim_for_the_wrong_output_is_rejected():
    claim = Overwhelm((5,), 3, 4, free_cmp="<=", free=3)
    verdict = certify(shipped(SMALL_FAMILY), claim, float_shadow=False, force=True)
    assert verdict.verdict == "refuted"
    with pytest.raises(Rejected):
        check_lines(verdict.lines)


def test_a_prefix_that_does_not_overwhelm_is_refuted_and_rejected():
    """Prefix [2] with free tokens up to 5: a larger free token takes over."""
    loaded = shipped(SMALL_FAMILY)
    claim = Overwhelm((2,), 3, 2, free_cmp="<=", free=2)
    verdict = certify(loaded, claim, float_shadow=False, force=True)
    assert verdict.verdict == "refuted"
    seq = claim.prefix + verdict.counterexample + (claim.query,)
    logits = any_logits(loaded.weights, np.array([seq]))[0]
    assert int(np.argmax(logits)) != 2
    with pytest.raises(Rejected):
        check_lines(verdict.lines)


def test_the_attention_only_rule_still_refuses_families():
    """overwhelm_free reads the attention-only decomposition: a family certificate
    naming it is rejected (only overwhelm_family applies to every family)."""
    lines = _proved_lines()
    rule = _rule_line(lines)
    rule["rule"] = "overwhelm_free"
    with pytest.raises(Rejected, match="attention-only"):
        check_lines(lines)


def test_the_family_rule_agrees_on_attention_only_models():
    """On an attention-only model overwhelm_family (forced with --family-rule)
    proves only true claims; the exact rule proves at least as many."""
    from overwhelm_fixtures import SMALL_MAXANY

    loaded = shipped(SMALL_MAXANY)
    proved_family = proved_exact = 0
    for m in range(3, 8):
        claim = Overwhelm((m,), 5, m, free_cmp="<=", free=2, over=tuple(range(m + 1)))
        fam = certify(loaded, claim, float_shadow=False, family_rule=True)
        exact = certify(loaded, claim, float_shadow=False)
        if fam.verdict == "proved":
            check_lines(fam.lines)
            assert truth(loaded.weights, claim)[0]
            proved_family += 1
        proved_exact += exact.verdict == "proved"
    assert proved_exact >= proved_family > 0


def test_demo_model_certifies_a_long_free_string():
    """The shipped LN+MLP+RoPE demo: the largest token forces the output through
    free strings of every length up to 3 (brute force confirms all 4369 of them)."""
    loaded = shipped(DEMO_FAMILY)
    claim = Overwhelm((15, 15), 3, 15, free_cmp="<=", free=3)
    verdict = certify(loaded, claim, float_shadow=False)
    assert verdict.verdict == "proved"
    check_lines(verdict.lines)
    assert truth(loaded.weights, claim)[0]


def test_hints_of_a_narrower_claim_do_not_prove_a_false_claim():
    """Red team: the tightest honest hints of a TRUE sub-claim (free tokens restricted
    to one token a) spliced into a certificate of a FALSE claim (all tokens).  Lemma R
    must see every token of every free position, so the checker rejects each splice
    (a checker that looked at one token only would accept)."""
    from generator.certify.strategies.overwhelm_family import family_margins

    loaded = shipped(SMALL_FAMILY)
    spliced = 0
    for m, q in [(2, 3), (3, 0), (4, 5)]:
        claim = Overwhelm((m,), q, m, free_cmp="<=", free=2)
        assert not truth(loaded.weights, claim)[0]
        lines = [json.loads(s) for s in
                 certify(loaded, claim, float_shadow=False, force=True).lines]
        for a in range(m + 1):
            narrow = family_margins(loaded.weights, Overwhelm((m,), q, m, free_cmp="<=", free=2,
                                                              over=(a,)))
            if not narrow.proved:
                continue
            _rule_line(lines)["hints"] = narrow.hints
            spliced += 1
            with pytest.raises(Rejected):
                check_lines(lines)
    assert spliced > 0


# -- the steps, each against direct evaluation -----------------------------------------------

def test_upper_ratio_bounds_every_quotient():
    """Step 6's division: ⌈N̄/σ⌉ >= N/σ for every N <= N̄ and σ in the enclosure,
    whatever N̄'s sign (dividing a negative bound by σ's lower end would not be)."""
    from mpmath import iv, mp

    from checker.rules.overwhelm_family import _upper_ratio

    sigma = iv.mpf(("0.5", "2"))
    for numer in (-3.0, -1e-3, 0.0, 2.0):
        bound = float(mp.make_mpf(_upper_ratio(iv.mpf(numer)._mpi_[1], sigma)))
        for s in np.linspace(0.5, 2.0, 31):
            assert bound >= numer / s - 1e-15, (numer, s, bound)


def test_ln_scale_encloses_sigma_on_sampled_points():
    """Lemma LN: for random boxes and a direction e with c·e >= L on the box's
    sampled points, sqrt(|c|²/d + ε) lies in the enclosure."""
    from mpmath import iv

    from checker.rules.overwhelm_family import ln_scale

    rng = np.random.default_rng(0)
    for _ in range(20):
        d = 6
        mid = rng.normal(size=d)
        rad = np.abs(rng.normal(size=d)) * 0.3
        pts = mid + rad * rng.uniform(-1, 1, size=(400, d))
        e = mid + rng.normal(size=d) * 0.1
        low = float((pts @ e).min())
        box = [iv.mpf((float(a), float(b))) for a, b in zip(mid - rad, mid + rad)]
        sigma = ln_scale(box, 1e-5, list(e), low)
        true = np.sqrt((pts ** 2).mean(axis=1) + 1e-5)
        assert float(sigma.a) <= true.min() and true.max() <= float(sigma.b)


def test_lemma_r_against_enumeration():
    """Lemma R: whenever average_below accepts λ, the attention average of y over
    every string (2 fixed positions, 3 free ones over 3 tokens) is <= λ; and it
    accepts the exact maximum plus a little."""
    from mpmath import iv

    from checker.rules.overwhelm_family import Head

    rng = np.random.default_rng(1)
    slots = [[1], [0, 1, 2], [0, 1, 2], [0, 1, 2], [2]]
    for _ in range(10):
        w = rng.uniform(0.1, 3.0, size=(5, 3))
        y = rng.normal(size=(5, 3))
        head = Head.__new__(Head)
        head.slots, head.perm = slots, None
        head.w = {(i, u): iv.mpf(float(w[i, u])) for i in range(5) for u in range(3)}
        head.tables = type("T", (), {"row": staticmethod(lambda i, u: 3 * i + u)})()
        ymat = [[iv.mpf(float(y[i, u]))] for i in range(5) for u in range(3)]
        best = max(sum(w[i, t[i]] * y[i, t[i]] for i in range(5)) /
                   sum(w[i, t[i]] for i in range(5))
                   for t in itertools.product(*slots))
        assert head.average_below(ymat, 0, best + 1e-9)
        assert not head.average_below(ymat, 0, best - 1e-6)


def test_shipped_family_certificate_holds_by_brute_force():
    """certs/: the small family certificate's claim, confirmed on all 259 free strings."""
    from overwhelm_fixtures import decoded

    from checker.certificate import CertificateChecker

    path = MODELS.parent.parent / "certs" / "maxany_v6_k6_ln_mlp_rope_seed0.overwhelm-5-free3.jsonl"
    checker = CertificateChecker()
    for line in path.read_text().splitlines():
        checker.feed(line)
    claim = checker.finish().facts.overwhelm
    assert claim == Overwhelm((5,), 3, 5, free_cmp="<=", free=3)
    assert truth(shipped(SMALL_FAMILY).weights, claim)[0]
    assert decoded(path.read_text().splitlines())[0]["family"]["normalization"] == "LN"


def test_any_perm_potentials_prove_only_truths():
    """Lemma R-perm holds for ANY potentials: random perm_u never makes the checker
    accept a false permutation claim; the generator's potentials prove a true one."""
    loaded = shipped(SMALL_FAMILY)
    rng = np.random.default_rng(3)
    accepted = 0
    for claim in [Overwhelm((4, 1), 2, 4, free_perm=(0, 3, 5)),  # false: 5 is larger
                  Overwhelm((5, 1), 2, 5, free_perm=(0, 3, 4))]:  # true
        ok = truth(loaded.weights, claim)[0]
        verdict = certify(loaded, claim, float_shadow=False, force=True)
        assert (verdict.verdict == "proved") == ok
        lines = [json.loads(s) for s in verdict.lines]
        if ok:
            check_lines(lines)
        for _ in range(5):
            def scramble(arr):
                arr[:] = rng.normal(size=arr.shape) * 10
            try:
                check_lines(_edit_hint(lines, 0, 6, scramble))
                accepted += 1
            except Rejected:
                continue
            assert ok, claim
    assert accepted == 0  # random potentials are far from the duals: nothing is proved


def test_lemma_r_perm_against_enumeration():
    """Lemma R-perm: with the generator's potentials the checker accepts the exact
    maximum over orderings (+ a little) and rejects below it; any accepted λ bounds
    the attention average of every ordering (enumerated)."""
    from mpmath import iv

    from checker.rules.overwhelm_family import Head
    from generator.certify.strategies.overwhelm_family import max_ratio_perm, perm_potentials

    rng = np.random.default_rng(4)
    items = (0, 1, 1, 2)
    slots = [[1], list(items), list(items), list(items), list(items), [2]]
    free = [1, 2, 3, 4]
    for _ in range(10):
        wt = rng.uniform(0.1, 3.0, size=(6, 3))
        y = rng.normal(size=(6, 3))
        w_arr = np.array([[wt[i, u] for u in (s + [s[0]] * 3)[:4]] for i, s in enumerate(slots)])
        y_arr = np.array([[y[i, u] for u in (s + [s[0]] * 3)[:4]] for i, s in enumerate(slots)])
        best = max((w_arr[0, 0] * y_arr[0, 0] + w_arr[5, 0] * y_arr[5, 0]
                    + sum(w_arr[j, s] * y_arr[j, s] for j, s in zip(free, sigma)))
                   / (w_arr[0, 0] + w_arr[5, 0] + sum(w_arr[j, s] for j, s in zip(free, sigma)))
                   for sigma in itertools.permutations(range(4)))
        lam, _ = max_ratio_perm(w_arr, y_arr, free)
        assert abs(lam - best) < 1e-12
        head = Head.__new__(Head)
        head.slots = slots
        head.w = {(i, u): iv.mpf(float(wt[i, u])) for i in range(6) for u in range(3)}
        head.tables = type("T", (), {"row": staticmethod(lambda i, u: 3 * i + u)})()
        ymat = [[iv.mpf(float(y[i, u]))] for i in range(6) for u in range(3)]
        for target, expect in ((best + 1e-9, True), (best - 1e-6, False)):
            u = perm_potentials(w_arr, y_arr, free, target)
            head.perm = (free, items, {0: list(u)})
            assert head.average_below(ymat, 0, target, key=0) is expect


def test_ln_scale_rejects_a_direction_bound_the_box_cannot_meet():
    """c in [0, 1]² has c·(1, 0) <= 1, so a confirmed-looking lower bound 5 is
    contradictory: the rule rejects instead of building an empty interval."""
    from mpmath import iv

    from checker.errors import Rejected
    from checker.rules.overwhelm_family import ln_scale

    box = [iv.mpf((0, 1)), iv.mpf((0, 1))]
    assert ln_scale(box, 1e-5, [1.0, 0.0], 0.5).b > 0  # consistent: an enclosure
    with pytest.raises(Rejected, match="contradicts"):
        ln_scale(box, 1e-5, [1.0, 0.0], 5.0)
