"""Prefix sharing of rule forward_brute_force on tasks scored at every position (issue 20).

Per-input work: every input evaluated at each of its scored positions on its own
(inputs x scored positions forward passes).  Shared: each distinct scored prefix once
(Task.queries in lexicographic order; what the checker does).  Printed: both counts,
their ratio, and the mpmath wall time of both on the shipped parity model (n_ctx 10),
plus the Arb time of the shared walk.

    python benchmarks/bench_tasks.py
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker import tasks  # noqa: E402
from checker.arith import get  # noqa: E402
from checker.certificate import CertificateChecker  # noqa: E402
from checker.rules import forward  # noqa: E402


def counts(task) -> tuple[int, int]:
    shared = len({prefix for prefix, _, _ in task.queries()})
    return task.pairs(), shared


def rule_inputs(cert: Path, arith):
    import json

    checker = CertificateChecker(arith=arith)
    lines = cert.read_text().splitlines()
    for line in lines[:-2]:  # up to (not including) the rule line
        checker.feed(line)
    rule = json.loads(lines[-2])
    return checker.dims, {n: checker.values[i].rows(arith) for n, i in rule["inputs"].items()}


def main() -> int:
    print("task                 pairs(per-input)  distinct prefixes  ratio  1/n_ctx")
    for name, params, v, k in [("parity", {}, 2, 10), ("cyclic", {"n": 3}, 3, 10),
                               ("flipflop", {}, 5, 8), ("flipflop", {}, 5, 10)]:
        task = tasks.make_task(name, params, v, k)
        pairs, shared = counts(task)
        print(f"{name + str(params or ''):20s} {pairs:16d} {shared:18d}  {shared / pairs:.3f}  "
              f"{1 / k:.3f}")
    cert = ROOT / "certs" / "parity_n10_seed0.forward.jsonl"
    mp = get("mpmath")
    dims, m = rule_inputs(cert, mp)
    task = tasks.make_task("parity", {}, 2, 10)
    started = time.perf_counter()
    shared_count, evaluated = forward.certified_task_count(dims, m, lambda w: None, task)
    shared_s = time.perf_counter() - started
    model = forward._Model(dims, m, lambda w: None)
    started = time.perf_counter()
    per_input, passes = 0, 0
    for tokens in itertools.product(range(2), repeat=10):
        for p in range(10):
            passes += 1
            per_input += forward._certified(model.logits(tokens[:p + 1]),
                                            sum(tokens[:p + 1]) % 2)
    per_input_s = time.perf_counter() - started
    assert per_input == shared_count
    print(f"\nparity_n10_seed0 (mpmath): shared {evaluated} passes {shared_s:.1f} s; per-input "
          f"{passes} passes {per_input_s:.1f} s; time ratio {shared_s / per_input_s:.3f}; "
          f"certified {shared_count} of {task.pairs()} both ways")
    try:
        arb = get("arb")
    except Exception as err:  # python-flint absent
        print(f"arb: unavailable ({err})")
        return 0
    from checker.rules import forward_arb

    dims, m = rule_inputs(cert, arb)
    started = time.perf_counter()
    count, _ = forward_arb.certified_task_count(dims, m, lambda w: None, arb, task)
    print(f"parity_n10_seed0 (arb, shared): {time.perf_counter() - started:.2f} s, "
          f"certified {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
