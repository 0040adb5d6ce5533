"""Confirm a forward-brute-force certificate sequence by sequence at 200 bits.

    python benchmarks/confirm_forward_cert.py MODEL CERT

Replays CERT with the checker, lists the sequences its rule certifies, evaluates the model on
every sequence with the independent 200-bit mpmath forward pass of tests/test_families.py, and
prints: certified, reference-correct, certified-but-wrong (must be empty), the smallest margin.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_families import reference_logits, replay  # noqa: E402

from checker.rules import forward  # noqa: E402
from generator.model import family_weights  # noqa: E402
from generator.modelfile import load_model  # noqa: E402


def main() -> None:
    model, cert = sys.argv[1], sys.argv[2]
    weights = family_weights(load_model(model).weights)
    lines = Path(cert).read_text().splitlines()
    started = time.perf_counter()
    checker, _ = replay(lines)
    rule = next(json.loads(x) for x in lines if '"rule":"forward_brute_force"' in x)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    certified = set(forward.certified_sequences(checker.dims, mats, lambda work: None))
    correct, wrong, margins = 0, [], []
    d = weights.dims
    for tokens in itertools.product(range(d.d_vocab), repeat=d.n_ctx):
        logits = reference_logits(weights, tokens)
        top = max(tokens)
        margin = min(logits[top] - x for o, x in enumerate(logits) if o != top)
        margins.append(float(margin))
        correct += margin > 0
        if margin <= 0 and tokens in certified:
            wrong.append(tokens)
    print(f"certified {len(certified)}, reference-correct {correct}, certified but wrong "
          f"{wrong}, smallest margin {min(margins):.6g} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
