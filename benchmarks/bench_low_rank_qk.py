"""Benchmark low-rank EQKE (subcubic options attn=..., err=...; spec/rules.md
§low-rank EQKE): bound / exact count, checker work, unexplained dimensionality,
check seconds and bytes over freshly trained Max-of-4 models (the paper's
recipe), beside `subcubic` (EQKE multiplied out) and `cubic` — by running
benchmarks/bench_subcubic.py's table and scaling code on these rows.  Not a
test: it prints figures (benchmarks/RESULTS.md §low-rank EQKE).

    python benchmarks/bench_low_rank_qk.py --seeds 8                 # seeds 100..107
    python benchmarks/bench_low_rank_qk.py --seeds 2 --no-cubic
    python benchmarks/bench_low_rank_qk.py --scaling 64 128 256 512  # work vs d_vocab
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_subcubic as bench  # noqa: E402

from generator.train import TrainConfig  # noqa: E402

BASE = "subcubic:direct=min,near=2"
# (strategy, the paper's Table 1 row / variant, the paper's bound)
ROWS = [
    ("cubic", "Cubic", "0.9845 ± 0.0041"),
    (BASE, "Sub-cubic (EQKE multiplied out)", "0.832 ± 0.011"),
    (BASE + ",attn=rank4,err=cs", "Low-rank QK", "0.797 ± 0.013"),
    (BASE + ",attn=rank2,err=cs", "(rank 2)", "–"),
    (BASE + ",attn=rank1,err=cs", "(rank 1)", "–"),
    (BASE + ",attn=rank1,err=rowdiff", "(max row-diff trick, Thm 21)", "–"),
    (BASE + ",attn=rank1,err=mean+rowdiff", "(Thm 24)", "–"),
    (BASE + ",attn=rank1,err=svd", "Low-rank QK, SVD only", "0.643 ± 0.044"),
    (BASE + ",attn=rank2,err=svd", "(SVD only, rank 2)", "–"),
    (BASE + ",attn=rank1,err=exact", "(error multiplied out, O(v²d))", "–"),
    (BASE + ",attn=rank4,err=cs,eu=lowrank1", "Low-rank QK&EU", "0.627 ± 0.060"),
    (BASE + ",attn=rank1,err=cs,eu=lowrank1", "(QK&EU, rank 1)", "–"),
]
SCALING = [BASE, BASE + ",attn=rank1,err=cs", BASE + ",attn=rank4,err=cs"]


def scaling(vocabs, cache: Path, steps: int, args) -> None:
    """Checker work against d_vocab for EQKE multiplied out and low-rank."""
    series = {s: [] for s in SCALING}
    print("\n| d_vocab | strategy | total work | rule work (with handler) | check s | certified |")
    print("|---|---|---|---|---|---|")
    for v in vocabs:
        cfg = TrainConfig(d_vocab=v, n_ctx=4, d_model=32, d_head=32, seed=1, steps=steps)
        path = bench.model(cfg, cache)
        for strategy in SCALING:
            r = bench.certify(path, strategy, args)
            rule = r["work"] - r["ops_work"]
            series[strategy].append((v, r["work"], rule))
            print(f"| {v} | `{strategy}` | {r['work']:,d} | {rule:,d} | {r['check_s']:.1f} | "
                  f"{r['bound'] / v ** 4:.4f} |", flush=True)
    for strategy, pts in series.items():
        vs = [p[0] for p in pts]
        if len(vs) > 1:
            print(f"`{strategy}`: total work ∝ d_vocab^{bench.slope(vs, [p[1] for p in pts]):.2f},"
                  f" rule ∝ d_vocab^{bench.slope(vs, [p[2] for p in pts]):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--no-cubic", action="store_true")
    p.add_argument("--scaling", type=int, nargs="+", help="d_vocab values: run the scaling part")
    p.add_argument("--steps", type=int, default=400, help="training steps for --scaling")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--cache", default="/tmp/maxk-bench-models-qk")
    p.add_argument("--arith", choices=["mpmath", "arb"], default="mpmath")
    args = p.parse_args()
    args.reuse_certs, args.extra, args.only = False, False, None  # bench_subcubic's options
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if args.scaling:
        return scaling(args.scaling, cache, args.steps, args)
    bench.table(args, [r[0] for r in ROWS if not (args.no_cubic and r[0] == "cubic")])


if __name__ == "__main__":
    main()
