"""Benchmark the subcubic certificates against cubic: tightness, proof length.

Part 1 (the paper's Table 1, our sound rows beside the paper's): for each seed
train a Max-of-4 model with the paper's recipe (cached), count its exact
accuracy, and for every strategy run `gen-cert` and `check-cert --json` (as
subprocesses) and print bound / exact (mean ± sd), the checker's work,
unexplained dimensionality, check seconds and certificate bytes.

Part 2 (scaling): d_vocab 64, 128, 256, 512 (n_ctx 4, d_model 32, short
training); the checker's work for cubic and subcubic, and the fitted exponent
of work against d_vocab.  Cubic is checked up to d_vocab 128; beyond, its work
is the rule's documented charge computed from the certificate (spec/rules.md
§proof length), since checking would take hours.  Not a test: it prints figures.

    python benchmarks/bench_subcubic.py                     # both parts
    python benchmarks/bench_subcubic.py --part table --seeds 8
    python benchmarks/bench_subcubic.py --part scaling --vocabs 64 128
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker import ops  # noqa: E402
from generator.ground_truth import count_correct  # noqa: E402
from generator.modelfile import load_model, save_model  # noqa: E402
from generator.train import TrainConfig, train  # noqa: E402

# (our strategy, the paper's Table 1 row it corresponds to, the paper's bound)
ROWS = [
    ("cubic", "Cubic", "0.9845 ± 0.0041"),
    ("subcubic:direct=min,near=2", "Sub-cubic (best)", "0.832 ± 0.011"),
    ("subcubic:direct=min,near=4", "(wider near band)", "–"),
    ("subcubic:direct=mean+diff,near=4", "(mean+diff only)", "–"),
    ("subcubic:direct=max_diff,near=4", "without mean+diff", "0.758 ± 0.039"),
    ("subcubic:direct=mean+diff,near=0", "(Alg. 5 pessimisation, no near band)", "–"),
    ("subcubic:direct=max_diff,near=0", "(Alg. 5, no mean+diff, no near band)", "–"),
]
BIG_WORK = str(10 ** 12)


def run(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return time.monotonic() - started, done


def model(cfg: TrainConfig, cache: Path) -> Path:
    tag = f"v{cfg.d_vocab}_k{cfg.n_ctx}_d{cfg.d_model}_steps{cfg.steps}_seed{cfg.seed}"
    path = cache / f"{tag}.pt"
    if not path.exists():
        save_model(path, train(cfg, progress=False).weights(), {"seed": cfg.seed})
    return path


def certify(model_path: Path, strategy: str, jobs: int, run_checker: bool = True) -> dict:
    cert = model_path.with_suffix(f".{strategy.replace(':', '_').replace(',', '_')}.jsonl")
    gen_s, gen = run([sys.executable, "-m", "generator.cli", str(model_path), "--strategy",
                      strategy, "-o", str(cert), "-q"])
    if gen.returncode != 0:
        raise SystemExit(f"gen-cert failed on {model_path.name} {strategy}: {gen.stderr}")
    out = {"gen_s": gen_s, "bytes": cert.stat().st_size, "documented_work": work_of(cert)}
    if run_checker:
        check_s, chk = run([sys.executable, "-m", "checker", str(cert), "--model",
                            str(model_path), "--json", "--jobs", str(jobs),
                            "--max-work", BIG_WORK, "--max-seconds", "36000"])
        verdict = json.loads(chk.stdout)
        if verdict["verdict"] != "verified":
            raise SystemExit(f"check-cert refused {cert.name}: {verdict}")
        out.update(check_s=check_s, bound=verdict["correct"], work=verdict["work"],
                   dim=verdict["unexplained_dimensionality"])
    return out


def work_of(cert: Path) -> dict:
    """Work of the op lines and of the rule, in the documented units (spec/rules.md
    §proof length); the rule's part for cubic is its charge formula, for
    subcubic_gap the difference with the checker's total (filled in later)."""
    shapes, op_work, rule = {}, 0, None
    with cert.open() as f:
        for text in f:
            x = json.loads(text)
            if x["kind"] == "weight":
                s = x["shape"]
                shapes[x["id"]] = (s[1], s[2]) if len(s) == 3 else (
                    (1, s[-1]) if len(s) == 1 or s[0] == 1 else tuple(s))
            elif x["kind"] == "op":
                r, c = x["shape"]
                a = shapes[x["args"][0]]
                op_work += r * c * {"matmul": a[1], "mean_rows": a[0]}.get(x["op"], 1) \
                    * ops.COST.get(x["op"], 1)
                shapes[x["id"]] = (r, c)
            elif x["kind"] == "rule":
                rule = x
    out = {"ops": op_work, "rule": None}
    if rule and rule["rule"] == "cubic":
        v = shapes[rule["inputs"]["EVOU"]][0]
        k = shapes[rule["inputs"]["PVOU"]][0]
        joint = sum(bin(e[4]).count("1") for e in rule["hints"]["good"] if len(e) == 5)
        out["rule"] = v * v * k + v * v * (v + 1) * (k + 4) + joint * v * 4
    return out


def table(args) -> list[dict]:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        cfg = TrainConfig(d_vocab=64, n_ctx=4, d_model=32, d_head=32, seed=seed)
        path = model(cfg, cache)
        exact = count_correct(load_model(path).weights, progress=False).correct
        for strategy, _, _ in ROWS:
            if args.only and not any(o == strategy for o in args.only):
                continue
            r = certify(path, strategy, args.jobs)
            if r["bound"] > exact:
                raise SystemExit(f"UNSOUND: {path.name} {strategy} {r['bound']} > {exact}")
            r.update(seed=seed, strategy=strategy, exact=exact, ratio=r["bound"] / exact)
            rows.append(r)
            print(f"seed {seed} {strategy:36s} ratio {r['ratio']:.4f} work {r['work']:>10,d} "
                  f"check {r['check_s']:5.1f} s gen {r['gen_s']:4.1f} s {r['bytes'] / 1e6:.2f} MB",
                  flush=True)
    print("\n| strategy | paper row | paper bound | bound/exact (mean ± sd, min) | checker work "
          "(mean) | work / cubic | unexplained dim. | check s (median) | MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    cubic_work = statistics.mean(r["work"] for r in rows if r["strategy"] == "cubic") if any(
        r["strategy"] == "cubic" for r in rows) else float("nan")
    for strategy, paper_row, paper in ROWS:
        rs = [r for r in rows if r["strategy"] == strategy]
        if not rs:
            continue
        ratios = [r["ratio"] for r in rs]
        sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
        work = statistics.mean(r["work"] for r in rs)
        print(f"| `{strategy}` | {paper_row} | {paper} | {statistics.mean(ratios):.4f} ± {sd:.4f}"
              f" ({min(ratios):.4f}) | {work:,.0f} | {work / cubic_work:.3f} | {rs[0]['dim']:,d} | "
              f"{statistics.median(r['check_s'] for r in rs):.1f} | "
              f"{statistics.mean(r['bytes'] for r in rs) / 1e6:.2f} |")
    return rows


def slope(xs, ys) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def scaling(args) -> None:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    best = ROWS[1][0]
    series = {"cubic": [], best: []}
    print("\n| d_vocab | strategy | total work | rule work | check s | checked? |")
    print("|---|---|---|---|---|---|")
    for v in args.vocabs:
        cfg = TrainConfig(d_vocab=v, n_ctx=4, d_model=32, d_head=32, seed=1, steps=args.steps)
        path = model(cfg, cache)
        for strategy in series:
            checked = strategy != "cubic" or v <= args.max_cubic_vocab
            r = certify(path, strategy, args.jobs, run_checker=checked)
            ops_work = r["documented_work"]["ops"]
            total = r["work"] if checked else ops_work + r["documented_work"]["rule"]
            series[strategy].append((v, total, total - ops_work))
            seconds = f"{r['check_s']:.1f}" if checked else "–"
            print(f"| {v} | `{strategy}` | {total:,d} | {total - ops_work:,d} | {seconds} | "
                  f"{'yes' if checked else 'work from the certificate'} |", flush=True)
    print()
    for strategy, pts in series.items():
        vs = [p[0] for p in pts]
        print(f"`{strategy}`: work ∝ d_vocab^{slope(vs, [p[1] for p in pts]):.2f} (total), "
              f"rule alone ∝ d_vocab^{slope(vs, [p[2] for p in pts]):.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["table", "scaling", "both"], default="both")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--only", nargs="+", help="run only these strategies of the table")
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--vocabs", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--steps", type=int, default=400, help="training steps for the scaling part")
    p.add_argument("--max-cubic-vocab", type=int, default=128)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cache", default="/tmp/maxk-bench-models")
    args = p.parse_args()
    if args.part in ("table", "both"):
        table(args)
    if args.part in ("scaling", "both"):
        scaling(args)


if __name__ == "__main__":
    main()
