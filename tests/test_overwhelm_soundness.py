"""Soundness of the overwhelm rules (spec/rules.md §overwhelm_free, §overwhelm_perm)
by enumeration: for many candidate claims on small models (trained Max-of-prefix,
trained flip-flop, untrained models with peaky attention), the generator decides;
every certificate it writes -- and, for claims it does not prove, a certificate
written anyway -- goes to the checker in-process, and every claim the checker
accepts is confirmed on EVERY admissible free string by an independent float64
forward pass.  Every refutation's counterexample is
confirmed too, and since the rules are exact for attention-only models, every
claim that is true by a clear margin must be proved.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from overwhelm_fixtures import (
    SMALL_FLIPFLOP,
    SMALL_MAXANY,
    UNDECIDED,
    check_lines,
    sharp_random,
    shipped,
    truth,
)

from checker.errors import Rejected
from checker.statement import Overwhelm
from generator.model import logits_float64
from generator.overwhelm import certify
from generator.tasks.causal import logits_at
from generator.tasks.flipflop import IGNORE_TOKENS, R


def _claims_maxany():
    out = []
    for m, q in itertools.product(range(8), (0, 5, 7)):
        out.append(Overwhelm((m,), q, m, free_cmp="<=", free=3))
        out.append(Overwhelm((m,), q, m, free_cmp="==", free=4, over=tuple(range(m + 1))))
    rng = np.random.default_rng(0)
    for _ in range(12):
        m = int(rng.integers(3, 8))
        perm = tuple(sorted(int(x) for x in rng.integers(0, min(m + 2, 8), size=3)))
        out.append(Overwhelm((m, int(rng.integers(0, 8))), int(rng.integers(0, 8)), m,
                             free_perm=perm))
    return out


def _claims_flipflop():
    out = []
    for prefix in [(0,), (1,), (1, 2, 0), (0, 3, 1), (1, 4, 2), (0, 1), (2, 0)]:
        b = [t for t in prefix if t in (0, 1)][-1]
        out.append(Overwhelm(prefix, R, b, free_cmp="<=", free=10, over=IGNORE_TOKENS))
        out.append(Overwhelm(prefix, R, b, free_perm=(2, 2, 2, 3, 3, 3)))
        out.append(Overwhelm(prefix, R, b, free_cmp="<=", free=3))  # writes allowed: false
        for bit in (0, 1):  # both writes among the free tokens: the order decides, false
            out.append(Overwhelm(prefix, R, bit, free_perm=(0, 1, 2, 3)))
    return out


def _claims_random(v=5):
    out = []
    for s0, q in itertools.product(range(v), range(v)):
        out.append(Overwhelm((s0,), q, -1, free_cmp="<=", free=3))
        out.append(Overwhelm((s0, q), q, -1, free_perm=(0, 1, 1)))
    return out


CASES = [
    ("maxany", lambda: shipped(SMALL_MAXANY), _claims_maxany),
    ("flipflop", lambda: shipped(SMALL_FLIPFLOP), _claims_flipflop),
    ("random0", lambda: sharp_random(0), _claims_random),
    ("random1", lambda: sharp_random(1, sharpness=8.0), _claims_random),
]


@pytest.mark.parametrize("name, model, claims", CASES, ids=[c[0] for c in CASES])
def test_every_accepted_claim_holds_on_every_completion(name, model, claims):
    loaded = model()
    tally = {"proved": 0, "refuted": 0, "not proved": 0}
    for claim in claims():
        verdict = certify(loaded, claim, float_shadow=False)
        claim = verdict.claim  # the output filled in when the claim left it open
        ok, counter, worst = truth(loaded.weights, claim)
        tally[verdict.verdict] += 1
        if verdict.verdict == "proved":
            report = check_lines(verdict.lines)  # raises if the checker refuses
            assert report.facts.overwhelm == claim
            assert ok, f"{name}: ACCEPTED but false: {claim}, counterexample {counter}"
        else:  # the checker is shown a certificate of the claim anyway: it must refuse
            try:
                check_lines(certify(loaded, claim, float_shadow=False, force=True).lines)
            except Rejected:
                pass
            else:
                assert ok, f"{name}: ACCEPTED but false: {claim}, counterexample {counter}"
        if verdict.verdict == "refuted":
            seq = claim.prefix + verdict.counterexample + (claim.query,)
            logits = logits_at(loaded.weights, np.array([seq]))[0]
            assert np.delete(logits, claim.output).max() >= logits[claim.output] - UNDECIDED
            assert not ok or worst < UNDECIDED
        # exactness: a claim true by a clear margin is proved
        if ok and worst > 1e-6:
            assert verdict.verdict == "proved", (name, claim, worst)
    # the test is not vacuous: both outcomes occur
    assert tally["proved"] > 0 and tally["refuted"] > 0, tally


def test_query_position_forward_matches_the_full_length_forward():
    """logits_at (any query position) agrees with the project's last-position
    forward pass at full length."""
    w = shipped(SMALL_MAXANY).weights
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, w.dims.d_vocab, size=(50, w.dims.n_ctx))
    np.testing.assert_allclose(logits_at(w, tokens), logits_float64(w, tokens), rtol=1e-12,
                               atol=1e-12)


def test_flipflop_demo_overwhelms_at_many_lengths():
    """The flip-flop demo on the small model: the last write forces the read for
    ignore fillers of every length up to what the context allows."""
    loaded = shipped(SMALL_FLIPFLOP)
    k = loaded.weights.dims.n_ctx
    claim = Overwhelm((1, 3, 0), R, 0, free_cmp="<=", free=k - 4, over=IGNORE_TOKENS)
    verdict = certify(loaded, claim, float_shadow=False)
    assert verdict.verdict == "proved"
    check_lines(verdict.lines)
    assert truth(loaded.weights, claim)[0]
