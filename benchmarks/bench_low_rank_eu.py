"""Benchmark the low-rank direct path (subcubic option eu=..., spec/rules.md
§low-rank EU): bound / exact count, checker work (whole certificate and EU's
share), unexplained dimensionality, check seconds, bytes, over freshly trained
Max-of-4 models (the paper's recipe), beside `subcubic` (EU multiplied out)
and `cubic`.  Not a test: it prints figures.

    python benchmarks/bench_low_rank_eu.py --seeds 8            # seeds 100..107
    python benchmarks/bench_low_rank_eu.py --seeds 2 --no-cubic
    python benchmarks/bench_low_rank_eu.py --scaling 64 128 256 512   # work vs d_vocab

--scaling: d_vocab 64..512 (n_ctx 4, d_model 32, 400 training steps, seed 1), the
checker's whole-certificate work for EU multiplied out and for eu=lowrank1, and the
exponent of their difference's growth (EU's v²·d against O(v·d² + v²·r)).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from common import ROOT, check_verified, generate, load, trained_model

sys.path.insert(0, str(ROOT))

from generator.certify.strategies import subcubic  # noqa: E402
from generator.ground_truth import count_correct  # noqa: E402
from generator.modelfile import load_model  # noqa: E402
from generator.train import TrainConfig  # noqa: E402

# (strategy, the paper's Table 1 row / variant it corresponds to, the paper's bound)
LOW = [("subcubic:direct=min,near=2,eu=" + eu, what) for eu, what in (
    ("lowrank1", "Low-rank EU (paper 0.662 ± 0.061)"),
    ("lowrank0", "Thm 24 in EU's singular basis, O(v·d²)"),
    ("lowrank2", "rank 2"),
    ("lowrank4", "rank 4"),
    ("svd_query", "paper's svd_query+max_diff (rank 1, no mean)"),
    ("quad_mean", "paper's direct-quadratic mean_query+max_diff (Thm 24)"),
    ("quad", "paper's direct-quadratic max_diff (Thm 21)"))]
BOTH = [(subcubic.Options(attn="rank1", err="cs").name(), "low-rank EQKE only (helper 8a)"),
        (subcubic.Options(attn="rank1", err="cs", eu="lowrank1").name(),
         "Low-rank QK&EU (paper 0.627 ± 0.060)")]
ROWS = [("cubic", "Cubic"), (subcubic.Options().name(), "Sub-cubic, EU multiplied out"),
        *LOW, *BOTH]


def scaling(vocabs, cache: Path, jobs: int) -> None:
    full, low = subcubic.Options().name(), subcubic.Options(eu="lowrank1").name()
    print("| d_vocab | work, EU multiplied out | work, eu=lowrank1 | difference | "
          "certified, full | certified, lowrank1 | check s full / lowrank1 |")
    print("|---|---|---|---|---|---|---|")
    for v in vocabs:
        cfg = TrainConfig(d_vocab=v, n_ctx=4, d_model=32, d_head=32, seed=1, steps=400)
        path, _ = trained_model(cfg, cache)
        out = {}
        for strategy in (full, low):
            cert = path.with_suffix(f".{strategy.replace(':', '_').replace(',', '_')}.jsonl")
            generate(path, strategy, cert)
            out[strategy] = check_verified(cert, path, jobs, "--arith", "arb",
                                           "--max-work", str(10 ** 12))
        (s_f, f), (s_l, lo) = out[full], out[low]
        print(f"| {v} | {f['work']:,d} | {lo['work']:,d} | {f['work'] - lo['work']:,d} | "
              f"{f['correct']:,d} | {lo['correct']:,d} | {s_f:.1f} / {s_l:.1f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--no-cubic", action="store_true")
    p.add_argument("--only", nargs="+", help="run only these strategies")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--cache", default="/tmp/8b-models")
    p.add_argument("--scaling", type=int, nargs="+", help="d_vocab values (scaling part only)")
    args = p.parse_args()
    if args.scaling:
        cache = Path(args.cache) / "scaling"
        cache.mkdir(parents=True, exist_ok=True)
        return scaling(args.scaling, cache, args.jobs)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        cfg = TrainConfig(d_vocab=64, n_ctx=4, d_model=32, d_head=32, seed=seed)
        path, _ = trained_model(cfg, cache)
        exact = count_correct(load_model(path).weights, progress=False).correct
        for strategy, _ in ROWS:
            if strategy == "cubic" and args.no_cubic or args.only and strategy not in args.only:
                continue
            cert = path.with_suffix(f".{strategy.replace(':', '_').replace(',', '_')}.jsonl")
            generate(path, strategy, cert)
            seconds, verdict = check_verified(cert, path, args.jobs)
            if verdict["correct"] > exact:
                raise SystemExit(f"UNSOUND: {path.name} {strategy}")
            rows.append({"seed": seed, "strategy": strategy, "ratio": verdict["correct"] / exact,
                         "work": verdict["work"], "dim": verdict["unexplained_dimensionality"],
                         "seconds": seconds, "bytes": cert.stat().st_size})
            print(f"seed {seed} {strategy:44s} ratio {rows[-1]['ratio']:.4f} "
                  f"work {verdict['work']:>10,d} check {seconds:5.1f} s (load {load()})",
                  flush=True)
    cubic = [r["work"] for r in rows if r["strategy"] == "cubic"]
    cubic_work = statistics.mean(cubic) if cubic else float("nan")
    print("\n| strategy | what | bound/exact (mean ± sd, min) | checker work (mean) | "
          "work / cubic | unexplained dim. | check s (median) | MB |")
    print("|---|---|---|---|---|---|---|---|")
    for strategy, what in ROWS:
        rs = [r for r in rows if r["strategy"] == strategy]
        if not rs:
            continue
        ratios = [r["ratio"] for r in rs]
        sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
        work = statistics.mean(r["work"] for r in rs)
        print(f"| `{strategy}` | {what} | {statistics.mean(ratios):.4f} ± {sd:.4f} "
              f"({min(ratios):.4f}) | {work:,.0f} | {work / cubic_work:.3f} | {rs[0]['dim']} | "
              f"{statistics.median(r['seconds'] for r in rs):.1f} | "
              f"{statistics.mean(r['bytes'] for r in rs) / 1e6:.2f} |")
    print(f"\n{len({r['seed'] for r in rows})} models; load {load()}")


if __name__ == "__main__":
    main()
