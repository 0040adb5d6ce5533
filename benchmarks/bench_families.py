"""Brute-force certificates for every model family: certified count vs exact count and times.

    python benchmarks/bench_families.py [--steps 1500] [--d-vocab 8] [--n-ctx 3]

Trains one small Max-of-K model per family (train-max-of-k's recipe, seed 0), writes a
forward-brute-force certificate, checks it with --model, and prints per family: exact count
(float64), near-ties, certified count, gen-cert and check-cert seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from pathlib import Path

from checker.cli import main as check_cert
from generator.cli import generate
from generator.ground_truth import count_correct
from generator.modelfile import load_model, save_model
from generator.train import TrainConfig, train_with_stats, training_metadata

FAMILIES = {
    "attn-only (1 head)": {},
    "LN + MLP + RoPE, 2 heads": dict(layernorm="LN", d_mlp=32, rope=True, n_heads=2),
    "LNPre + MLP, learned pos": dict(layernorm="LNPre", d_mlp=32),
    "LN, 4 heads, attn-only": dict(layernorm="LN", n_heads=4, d_head=4),
    "LN + MLP + RoPE, parallel (NeoX)": dict(layernorm="LN", d_mlp=32, rope=True,
                                              parallel=True, n_heads=2),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--d-vocab", type=int, default=8)
    p.add_argument("--n-ctx", type=int, default=3)
    args = p.parse_args()
    print(f"{'family':36} {'exact':>7} {'near':>5} {'certified':>9} {'gen s':>6} {'check s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in FAMILIES.items():
            cfg = TrainConfig(**{"d_vocab": args.d_vocab, "n_ctx": args.n_ctx, "d_model": 16,
                                 "d_head": 8, "steps": args.steps, **extra})
            result = train_with_stats(cfg, progress=False)
            path = Path(tmp) / "m.pt"
            save_model(path, result.model.weights(), training_metadata(cfg, result))
            gt = count_correct(load_model(path).weights, progress=False)
            t0 = time.perf_counter()
            lines, summary = generate(str(path), "forward-brute-force")
            t1 = time.perf_counter()
            cert = Path(tmp) / "c.jsonl"
            cert.write_text("\n".join(lines) + "\n")
            with contextlib.redirect_stdout(io.StringIO()):  # the verdict JSON
                code = check_cert([str(cert), "--model", str(path), "--json"])
            t2 = time.perf_counter()
            status = summary["claim"] if code == 0 else f"exit {code}"
            print(f"{name:36} {gt.correct:>7} {summary['near_ties']:>5} {status:>9} "
                  f"{t1 - t0:>6.1f} {t2 - t1:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
