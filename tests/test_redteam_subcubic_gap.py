"""Red-team audit of rule subcubic_gap (branch issue-8; skipped until merged).

Random models (d_vocab 2–5, n_ctx 2–4, scales 1e-30..10, biases, strong
positions, equal token rows); the generator's certificates for the three
direct-path bounds, then hint variants (gaps lowered, near bands and the
direct bound changed at random).  Whenever the rule accepts, the sequences
its hints cover (read from the hints, spec/rules.md §subcubic_gap) must number
exactly what it proves, and each must be correct by an independent 256-bit
forward pass.  No false theorem was found (see the report).
"""

from __future__ import annotations

import copy
import itertools
import json

import numpy as np
import pytest
from redteam_truth import margin, random_model
from soundness_helpers import accepted_inputs, subcubic_covered

from checker.errors import Malformed, Rejected

rule = pytest.importorskip("checker.rules.subcubic_gap")
SEED = 20261128
DIRECT = ("max_diff", "mean+diff", "min")


def _lines(w, tmp_path, direct):
    from generator.certify.strategies import NotApplicable
    from generator.cli import generate
    from generator.modelfile import save_model

    path = tmp_path / "model.pt"
    save_model(path, w, None)
    try:
        return generate(str(path), f"subcubic:direct={direct}", float_shadow=False)[0]
    except (FloatingPointError, ZeroDivisionError, OverflowError, NotApplicable):
        return None


_accepted_inputs = accepted_inputs
_covered = subcubic_covered


def test_subcubic_gap_proves_only_truths(tmp_path):
    rng = np.random.default_rng(SEED)
    variants = 0
    for _ in range(8):
        v, k = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        w = random_model(rng, v, k, int(rng.integers(1, 4)))
        truth = {s: margin(w, s, max(s)) > 0 for s in itertools.product(range(v), repeat=k)}
        for direct in DIRECT:
            lines = _lines(w, tmp_path, direct)
            replayed = lines and _accepted_inputs(lines)
            if not replayed:
                continue
            assert json.loads(lines[-2])["claim"] <= sum(truth.values())
            dims, mats, hints = replayed
            for _ in range(4):
                hv = copy.deepcopy(hints)
                for e in hv["gaps"]:
                    if e[2] > 0 and rng.random() < 0.3:
                        e[3] = max(1, e[3] - int(rng.integers(0, 3)))
                        e[4] = int(rng.integers(e[3], e[0] + 2))
                hv["direct"] = str(rng.choice(DIRECT))
                try:
                    proven, _ = rule.check(dims, mats, hv, lambda work: None, 1)
                except (Rejected, Malformed):
                    continue
                variants += 1
                covered = _covered(rule.parse_hints(hv, v, k)[1], v, k)
                assert len(covered) == proven
                assert all(truth[s] for s in covered), hv
    assert variants >= 30
