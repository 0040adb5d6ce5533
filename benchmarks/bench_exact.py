"""Benchmark the exact certificate (rule exact): certified count vs the exact
float64 count, residue size, checker work of each part, check time.

For each seed: train a Max-of-K model with the paper's recipe (cached), count
its exact accuracy (generator.ground_truth, float64, all sequences), run
`gen-cert --strategy exact` and `check-cert --jobs J` as subprocesses (times
are what a user sees) and read the rule's note: how many sequences came from
the closed form (cubic cover) and from the residue, and the work of each.
The work of a full brute-force certificate's rule is brute_force.work(v, k)
= v^k·(k + (v−1)(6k+1)), the operations rule brute_force counts.  Not a
test: it prints figures, and the machine's load.

    python benchmarks/bench_exact.py                       # 8 seeds, Max-of-4, d_vocab 64
    python benchmarks/bench_exact.py --scaling             # plus d_vocab 32/128, n_ctx 3/5
    python benchmarks/bench_exact.py --seeds 0 --scaling   # the scaling runs only
    python benchmarks/bench_exact.py --seeds 0 --scaling --dims 32x3,32x5
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

from common import ROOT, check_verified, generate, load, model_tag, trained_model

from checker.rules import brute_force
from generator.ground_truth import count_correct
from generator.modelfile import load_model
from generator.train import TrainConfig

NOTE = re.compile(r"exact: (\d+) sequences certified: (\d+) in closed form by the cubic good "
                  r"sets \(work (\d+)\), (\d+) of the (\d+) residue sequences evaluated one by "
                  r"one \(work (\d+)\)")
# (d_vocab, n_ctx) of the scaling runs, one seed each (d_vocab 64, n_ctx 4 is the main run)
SCALING = ((32, 4), (128, 4), (64, 3), (64, 5))
BIG_WORK = 10**11  # --max-work for the scaling runs (the default is 5e7)


def bench_one(cfg: TrainConfig, cache: Path, jobs: int) -> dict:
    tag = model_tag(cfg)
    model_path, train_s = trained_model(cfg, cache)
    truth = count_correct(load_model(model_path).weights, progress=False)
    cert = cache / f"{tag}.exact.jsonl"
    gen_s = generate(model_path, "exact", cert)
    load_before = load()
    check_s, verdict = check_verified(cert, model_path, jobs, "--max-work", str(BIG_WORK))
    bound = verdict["correct"]
    if bound > truth.correct:
        raise SystemExit(f"UNSOUND: {tag} certified {bound} > exact {truth.correct}")
    note = next(NOTE.search(r) for r in verdict["rules"] if NOTE.search(r))
    _, cover, cover_work, res_ok, residue, res_work = map(int, note.groups())
    v, k = cfg.d_vocab, cfg.n_ctx
    return {"model": tag, "exact": truth.correct, "near_ties": truth.near_ties,
            "total": truth.total, "certified": bound, "missing": truth.correct - bound,
            "cover": cover, "residue": residue, "residue_certified": res_ok,
            "cover_work": cover_work, "residue_work": res_work,
            "brute_work": brute_force.work(v, k), "train_s": train_s, "gen_s": gen_s,
            "check_s": check_s, "load": f"{load_before} -> {load()}"}


HEADER = (f"{'model':28} {'exact':>11} {'certified':>11} {'miss':>5} {'near':>5} "
          f"{'residue':>8} {'cover work':>11} {'resid work':>11} {'ratio':>8} {'gen s':>6} "
          f"{'check s':>8}  load (1/5/15 min)")


def show(r: dict) -> None:
    ratio = r["brute_work"] / (r["cover_work"] + r["residue_work"])
    print(f"{r['model']:28} {r['exact']:11d} {r['certified']:11d} {r['missing']:5d} "
          f"{r['near_ties']:5d} {r['residue']:8d} {r['cover_work']:11d} {r['residue_work']:11d} "
          f"1/{ratio:<6.0f} {r['gen_s']:6.1f} {r['check_s']:8.1f}  {r['load']}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=200)
    p.add_argument("--d-vocab", type=int, default=64)
    p.add_argument("--n-ctx", type=int, default=4)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--scaling", action="store_true",
                   help="also one model each at the --dims (d_vocab, n_ctx)")
    p.add_argument("--dims", default=",".join(f"{v}x{k}" for v, k in SCALING),
                   help="the scaling runs, as d_vocab x n_ctx pairs (default: %(default)s)")
    p.add_argument("--cache", default=str(ROOT / "benchmarks" / ".cache"))
    args = p.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    print("ratio = rule work of a full brute-force certificate / rule work of the exact one; "
          "miss = exact - certified; near = float64 near-ties (ground_truth)")
    print(HEADER)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        cfg = TrainConfig(d_vocab=args.d_vocab, n_ctx=args.n_ctx, d_model=args.d_model,
                          d_head=args.d_model, seed=seed, steps=args.steps)
        rows.append(bench_one(cfg, cache, args.jobs))
        show(rows[-1])
    if rows:
        checks = [r["check_s"] for r in rows]
        ratios = [r["brute_work"] / (r["cover_work"] + r["residue_work"]) for r in rows]
        print(f"\n{sum(r['certified'] == r['exact'] for r in rows)} of {len(rows)} models "
              f"certified exactly; missing total {sum(r['missing'] for r in rows)}; residue "
              f"median {statistics.median(r['residue'] for r in rows):.0f} (max "
              f"{max(r['residue'] for r in rows)}); check time median "
              f"{statistics.median(checks):.1f} s (max {max(checks):.1f} s, --jobs {args.jobs});"
              f" work ratio min 1/{min(ratios):.0f}")
    if args.scaling:
        print("\nscaling (one seed each):")
        print(HEADER)
        for v, k in (map(int, pair.split("x")) for pair in args.dims.split(",")):
            cfg = TrainConfig(d_vocab=v, n_ctx=k, d_model=args.d_model, d_head=args.d_model,
                              seed=args.first_seed, steps=args.steps)
            show(bench_one(cfg, cache, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
