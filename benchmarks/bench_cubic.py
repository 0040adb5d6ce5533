"""Benchmark the cubic certificate: tightness, generation and checking time, size.

For each seed: train a Max-of-K model with the paper's recipe (cached), count
its exact accuracy (float64, all sequences), run `gen-cert --strategy cubic`
and `check-cert` (as subprocesses, so times are what a user sees), and print
bound / exact ratio.  Not a test: it prints figures.

    python benchmarks/bench_cubic.py                 # 8 seeds, Max-of-4, d_vocab 64
    python benchmarks/bench_cubic.py --seeds 3 --d-vocab 16 --n-ctx 5 --d-model 16
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from common import ROOT, check_verified, generate, model_tag, trained_model

from generator.ground_truth import count_correct
from generator.modelfile import load_model
from generator.train import TrainConfig


def bench_one(cfg: TrainConfig, cache: Path, jobs: int) -> dict:
    tag = model_tag(cfg)
    model_path, _ = trained_model(cfg, cache)
    truth = count_correct(load_model(model_path).weights, progress=False)
    cert = cache / f"{tag}.cubic.jsonl"
    gen_s = generate(model_path, "cubic", cert)
    check_s, verdict = check_verified(cert, model_path, jobs)
    bound = verdict["correct"]
    if bound > truth.correct:
        raise SystemExit(f"UNSOUND: {tag} certified {bound} > exact {truth.correct}")
    return {"model": tag, "exact": truth.correct, "total": truth.total, "bound": bound,
            "ratio": bound / truth.correct, "gen_s": gen_s, "check_s": check_s,
            "mb": cert.stat().st_size / 1e6}


def write_svg(rows: list[dict], path: Path) -> None:
    """A small bar chart (no plotting library): bound / exact per model, with
    the paper's and the reference code's mean ratios as lines."""
    lo_axis, hi_axis = 0.94, 1.0
    width, height, left, bottom, top = 640, 340, 60, 50, 20
    plot_h = height - bottom - top
    bar = (width - left - 20) / max(1, len(rows))

    def y(r):
        return top + plot_h * (hi_axis - min(max(r, lo_axis), hi_axis)) / (hi_axis - lo_axis)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             'font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>']
    for tick in (0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0):
        parts.append(f'<line x1="{left}" x2="{width - 20}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     'stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                     f'{tick:.2f}</text>')
    for i, r in enumerate(rows):
        x = left + i * bar + bar * 0.15
        parts.append(f'<rect x="{x:.1f}" y="{y(r["ratio"]):.1f}" width="{bar * 0.7:.1f}" '
                     f'height="{y(lo_axis) - y(r["ratio"]):.1f}" fill="#3a7"/>')
        parts.append(f'<text x="{x + bar * 0.35:.1f}" y="{height - bottom + 14}" '
                     f'text-anchor="middle">{r["model"].rsplit("seed", 1)[-1]}</text>')
    legend = ((0.9845, "paper Table 1 cubic (float32, trusted)", "#c33"),
              (0.9531, "reference code after its fix", "#e90"))
    for n, (value, label, color) in enumerate(legend):
        parts.append(f'<line x1="{left}" x2="{width - 20}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}" stroke="{color}" stroke-width="2" '
                     'stroke-dasharray="6,3"/>')
        lx = left + 10 + n * 280
        parts.append(f'<line x1="{lx}" x2="{lx + 24}" y1="{height - 8}" y2="{height - 8}" '
                     f'stroke="{color}" stroke-width="2" stroke-dasharray="6,3"/>')
        parts.append(f'<text x="{lx + 30}" y="{height - 4}">{label}: {value}</text>')
    parts.append(f'<text x="{left}" y="{top - 6}">certified bound / exact accuracy (cubic, '
                 'sound over the reals), per seed</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--d-vocab", type=int, default=64)
    p.add_argument("--n-ctx", type=int, default=4)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cache", default=str(ROOT / "benchmarks" / ".cache"))
    p.add_argument("--svg", default=str(ROOT / "benchmarks" / "cubic_ratio.svg"),
                   help="where to draw the ratios ('' for no plot)")
    args = p.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'model':32} {'exact acc':>10} {'bound acc':>10} {'ratio':>8} {'gen s':>6} "
          f"{'check s':>8} {'MB':>6}")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        cfg = TrainConfig(d_vocab=args.d_vocab, n_ctx=args.n_ctx, d_model=args.d_model,
                          d_head=args.d_model, seed=seed, steps=args.steps)
        r = bench_one(cfg, cache, args.jobs)
        rows.append(r)
        print(f"{r['model']:32} {r['exact'] / r['total']:10.6f} {r['bound'] / r['total']:10.6f} "
              f"{r['ratio']:8.5f} {r['gen_s']:6.1f} {r['check_s']:8.1f} {r['mb']:6.2f}",
              flush=True)
    ratios = [r["ratio"] for r in rows]
    sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
    print(f"\nmean ratio bound/exact = {statistics.mean(ratios):.5f} ± {sd:.5f} "
          f"(min {min(ratios):.5f}) over {len(rows)} models; "
          f"check time mean {statistics.mean(r['check_s'] for r in rows):.1f} s, "
          f"max {max(r['check_s'] for r in rows):.1f} s; gen time mean "
          f"{statistics.mean(r['gen_s'] for r in rows):.1f} s; size mean "
          f"{statistics.mean(r['mb'] for r in rows):.2f} MB")
    print("reference: paper Table 1 cubic 0.9845 ± 0.0041; reference code after its fix "
          "0.9531 ± 0.0087 (ratio to exact accuracy)")
    if args.svg:
        write_svg(rows, Path(args.svg))
        print(f"plot: {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
