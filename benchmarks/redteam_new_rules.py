"""Red-team benchmark for today's rules (overwhelm_family; subcubic_gap's
low-rank EQKE / EU options): the CI campaigns of tests/test_redteam_overwhelm_family.py
and tests/test_redteam_lowrank.py on more models, every mutation.  Prints counts:
certificates, mutants, accepted, accepted-and-confirmed-true, false theorems.

    PYTHONPATH=$PWD python benchmarks/redteam_new_rules.py --models 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_redteam_lowrank as lowrank  # noqa: E402
import test_redteam_overwhelm_family as family  # noqa: E402


def run_family(n_models: int) -> dict:
    total: dict = {}
    findings = []
    for seed in range(n_models):
        models = family.MODELS + ([("shipped", family.SHIPPED)] if seed == 0 else [])
        for name, kind in models:
            rng = np.random.default_rng(family.SEED + seed)
            counts, found = family.campaign(name, kind, rng, n_false=3, n_true=4, seed=seed)
            findings += found
            for key, value in counts.items():
                total[key] = total.get(key, 0) + value
    return total, findings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=2,
                        help="seeds per overwhelm family model; x10 random low-rank models "
                        "(v <= 5) on the full option grid")
    args = parser.parse_args()
    started = time.monotonic()
    total, findings = run_family(args.models)
    print(f"overwhelm_family: {total} ({time.monotonic() - started:.0f} s)")
    for f in findings:
        print("  FALSE THEOREM:", f)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        counts, found = lowrank.campaign(10 * args.models,
                                         np.random.default_rng(lowrank.SEED + 1), Path(tmp),
                                         strategies=lowrank.STRATEGIES + lowrank.GRID, v_max=5)
    print(f"subcubic low-rank: {counts} ({time.monotonic() - started:.0f} s)")
    for f in found:
        print("  FALSE THEOREM:", f)
    return 1 if findings or found else 0


if __name__ == "__main__":
    sys.exit(main())
