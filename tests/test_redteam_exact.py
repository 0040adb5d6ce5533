"""Red-team audit of rule exact (branch issue-9; skipped until it is merged).

Random models (d_vocab 2–5, n_ctx 2–4, matrices at scales 1e-30..10, biases,
strong positions, equal token rows), the generator's certificate checked in
full, then hint variants (every good set weakened at random, random good sets,
no good sets at all): whenever rule exact accepts, its count must not exceed
the number of sequences that are correct by an independent 256-bit forward
pass, the cover (read from the hints) and the residue (what the rule
enumerates) must partition all v^k sequences, and every sequence the rule
certifies must be correct.  No false theorem was found (see the report).
"""

from __future__ import annotations

import copy
import itertools
import json

import numpy as np
import pytest
from redteam_truth import margin, random_model
from soundness_helpers import accepted_inputs, cubic_covered, rule_inputs

from checker.errors import Malformed, Rejected

exact = pytest.importorskip("checker.rules.exact")
SEED = 20261127


def _generate(w, tmp_path):
    from generator.certify.strategies import NotApplicable
    from generator.cli import generate
    from generator.modelfile import save_model

    path = tmp_path / "model.pt"
    save_model(path, w, None)
    try:
        lines, _ = generate(str(path), "exact")
    except (FloatingPointError, ZeroDivisionError, OverflowError, NotApplicable):
        return None  # a generator failure only loses a certificate
    return lines


_replay = rule_inputs


def _accepted(lines):
    return accepted_inputs(lines) is not None


_covered = cubic_covered


def _variants(rng, hints, v, k):
    yield {"good": []}
    for _ in range(3):
        good = copy.deepcopy(hints["good"])
        for entry in good:
            if rng.random() < 0.5:
                entry[3] &= int(rng.integers(0, 1 << max(entry[0], 1)))
                if len(entry) == 5:
                    entry[4] &= entry[3]
        yield {"good": good}
    for _ in range(3):
        yield {"good": [[m, q, c, int(rng.integers(0, 2 if c == 0 else 1 << m))]
                        for q in range(v) for m in range(q, v)
                        for c in range((k - 1 if q == m else k - 2) + 1) if rng.random() < 0.5]}


def test_exact_proves_only_truths(tmp_path):
    rng = np.random.default_rng(SEED)
    accepted = variants = 0
    for _ in range(14):
        v, k = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        w = random_model(rng, v, k, int(rng.integers(1, 4)))
        lines = _generate(w, tmp_path)
        if lines is None or not _accepted(lines):
            continue
        truth = {s: margin(w, s, max(s)) > 0 for s in itertools.product(range(v), repeat=k)}
        assert json.loads(lines[-2])["claim"] <= sum(truth.values())
        dims, mats, hints = _replay(lines)
        accepted += 1
        for hv in _variants(rng, hints, v, k):
            try:
                proven, _ = exact.check(dims, mats, hv, lambda work: None, 1)
            except (Rejected, Malformed):
                continue
            variants += 1
            assert proven <= sum(truth.values()), hv
            residue = exact.residue_verdicts(dims, mats, hv)
            seqs = [s for s, _ in residue]
            cover = _covered(hv["good"], v, k)
            assert len(set(seqs)) == len(seqs) and not cover & set(seqs)
            assert len(cover) + len(seqs) == v ** k
            assert all(truth[s] for s in cover)
            assert all(truth[s] for s, ok in residue if ok)
            assert proven == len(cover) + sum(ok for _, ok in residue)
    assert accepted >= 6 and variants >= 30
