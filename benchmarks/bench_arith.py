"""Benchmark the checker's two arithmetic back-ends (mpmath, Arb) side by side.

For each d_vocab: train a Max-of-4 model (cached; d_vocab 64 uses the shipped
model and certificate), write its cubic certificate once (cached), then check
it with each back-end in a fresh interpreter (as `check-cert --arith ...`
does, with --jobs processes for the rule), splitting the wall time into
start-up (imports), op lines (parsing, decoding, recomputing and comparing
every recorded op) and the rule, and summing the CPU time of all processes.
Verdicts and certified counts must be identical.  Not a test: it prints
figures.  The machine may be shared: the load average is printed with every row.

    python benchmarks/bench_arith.py                      # d_vocab 64, 128, 256
    python benchmarks/bench_arith.py --d-vocab 64 128 --arith arb --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = {64: (ROOT / "generator" / "models" / "max4_v64_seed0.pt",
                ROOT / "certs" / "max4_v64_seed0.cubic.jsonl")}

# Run in a child process: per-kind wall time of feeding each line (json out).
_SPLIT = """
import json, sys, time
t0 = time.monotonic()
from checker import arith
from checker.certificate import CertificateChecker, Limits
ar = arith.get(sys.argv[2])
checker = CertificateChecker(Limits(max_work=10**12, max_seconds=1e6), None, int(sys.argv[3]), ar)
split = {"startup": time.monotonic() - t0, "op": 0.0, "rule": 0.0, "other": 0.0}
with open(sys.argv[1], "rb") as f:
    for raw in f:
        text = raw.decode()
        if not text.strip():
            continue
        kind = text[text.index('"kind":"') + 8:].split('"', 1)[0]
        t = time.monotonic()
        checker.feed(text)
        key = kind if kind in ("op", "rule") else "other"
        split[key] += time.monotonic() - t
report = checker.finish()
split["correct"] = report.facts.correct
print(json.dumps(split))
"""


def model_and_cert(v: int, cache: Path, steps: int) -> tuple[Path, Path]:
    """The shipped v=64 pair, or a model trained with the paper's recipe (fewer
    steps allowed) and its cubic certificate, both cached."""
    if v in SHIPPED:
        return SHIPPED[v]
    sys.path.insert(0, str(ROOT))
    from generator.modelfile import save_model
    from generator.train import TrainConfig, train

    tag = f"max4_v{v}_steps{steps}_seed0"
    model, cert = cache / f"{tag}.pt", cache / f"{tag}.cubic.jsonl"
    if not model.exists():
        cfg = TrainConfig(d_vocab=v, n_ctx=4, d_model=32, d_head=32, seed=0, steps=steps)
        save_model(model, train(cfg, progress=False).weights(), {"seed": 0, "steps": steps})
    if not cert.exists():
        done = subprocess.run([sys.executable, "-m", "generator.cli", str(model), "--strategy",
                               "cubic", "-o", str(cert), "-q"], cwd=ROOT, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(f"gen-cert failed for v={v}: {done.stderr}")
    return model, cert


def measure(cert: Path, arith: str, jobs: int) -> dict:
    """One check in a fresh interpreter (with `jobs` processes for the rule): its
    wall-time split, and the CPU seconds of it and its workers."""
    before = os.times()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _SPLIT, str(cert), arith, str(jobs)],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    after = os.times()
    if done.returncode != 0:
        return {"verdict": "refused: " + done.stderr.strip().splitlines()[-1][:80],
                "correct": None, "wall": wall, "cpu": 0.0, "startup": 0.0, "op": 0.0,
                "rule": 0.0}
    out = json.loads(done.stdout)
    out["verdict"] = "verified"
    out["wall"] = wall
    out["cpu"] = (after.children_user - before.children_user
                  + after.children_system - before.children_system)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-vocab", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--arith", nargs="+", default=["mpmath", "arb"])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1,
                   help="check runs per cell (the median is shown; the best of 2)")
    p.add_argument("--steps", type=int, default=3000, help="training steps (v != 64)")
    p.add_argument("--cache", default="/tmp/maxk-bench-arith")
    args = p.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    print(f"{'v':>4} {'arith':7} {'verdict':9} {'correct':>11} {'wall s':>7} {'cpu s':>7} "
          f"{'startup':>7} {'ops':>6} {'rule':>7}  load (1 min)")
    for v in args.d_vocab:
        _, cert = model_and_cert(v, cache, args.steps)
        counts = set()
        for arith in args.arith:
            runs = [measure(cert, arith, args.jobs) for _ in range(args.repeats)]
            r = min(runs, key=lambda run: run["wall"]) if len(runs) < 3 else \
                sorted(runs, key=lambda run: run["wall"])[len(runs) // 2]  # median
            counts.add((r["verdict"], r["correct"]))
            print(f"{v:>4} {arith:7} {r['verdict']:9} {r['correct']!s:>11} {r['wall']:7.2f} "
                  f"{r['cpu']:7.2f} {r['startup']:7.2f} {r['op']:6.2f} {r['rule']:7.2f}  "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
        if len(counts) != 1:
            raise SystemExit(f"DISAGREEMENT at v={v}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
