"""Red-team audit of rule forward_brute_force (branch issue-10; skipped until
merged), on the attention-only family: random models (scales 1e-30..10,
biases, strong positions, equal token rows); the generator's certificate and
copies claiming 1, 2 and 5 more correct sequences.  An accepted claim must not
exceed the number of sequences correct by an independent 256-bit forward pass.
No false theorem was found (see the report)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from redteam_truth import margin, random_model

from checker.certificate import CertificateChecker, Limits
from checker.errors import Malformed, Rejected

pytest.importorskip("checker.rules.forward")
SEED = 20261129


def _accepted(objs):
    checker = CertificateChecker(Limits())
    try:
        for obj in objs:
            checker.feed(json.dumps(obj))
        checker.finish()
    except (Rejected, Malformed):
        return False
    return True


def test_forward_brute_force_proves_only_truths(tmp_path):
    from generator.certify.strategies import NotApplicable
    from generator.cli import generate
    from generator.modelfile import save_model

    rng = np.random.default_rng(SEED)
    accepted = 0
    for _ in range(10):
        v, k = int(rng.integers(2, 5)), int(rng.integers(2, 4))
        w = random_model(rng, v, k, int(rng.integers(1, 4)))
        save_model(tmp_path / "m.pt", w, None)
        try:
            lines, _ = generate(str(tmp_path / "m.pt"), "forward-brute-force",
                                float_shadow=False)
        except (FloatingPointError, ZeroDivisionError, OverflowError, NotApplicable):
            continue
        correct = sum(margin(w, s, max(s)) > 0 for s in itertools.product(range(v), repeat=k))
        base = [json.loads(x) for x in lines]
        claim = base[-2]["claim"]
        for extra in (0, 1, 2, 5):
            objs = [dict(x) for x in base]
            objs[-2]["claim"] = claim + extra
            objs[0]["theorem"] = base[0]["theorem"].replace(f"correct >= {claim}",
                                                            f"correct >= {claim + extra}")
            if _accepted(objs):
                accepted += 1
                assert claim + extra <= correct
    assert accepted >= 8
