"""Benchmark brute force, cubic and every subcubic row: tightness, proof length, scaling.

Part 1, `--part table` (the paper's Table 1, our sound rows beside the paper's):
for each seed train a Max-of-4 model with the paper's recipe (cached), count its
exact accuracy, and for every row run `gen-cert` and `check-cert --json` (as
subprocesses) and print bound / exact (mean ± sd), the checker's work (its exact
count of scalar operations, spec/rules.md §proof length), unexplained
dimensionality, check seconds and certificate bytes.  The rows are
  brute-force  the sound brute force; not run at d_vocab 64 (its work, the
               closed form brute_force.work plus the op lines, is printed)
  exact        per-sequence evaluation of what the cubic cover leaves: the
               sound counterpart of the paper's brute-force bound
  cubic
  every variant the subcubic strategy declares (VARIANTS, with the Table 1 row
  of PAPER_ROWS): rows added there appear here without editing this file;
  `--extra` adds our own ablations (EXTRA_ROWS).

Part 2, `--part scaling`: d_vocab 64, 128, 256, 512 (n_ctx 4, d_model 32, short
training); the checker's work for cubic and every subcubic variant, and the
fitted exponent of work against d_vocab (least squares on log-log), as a
table and optionally a plot (`--plot FILE.svg`, matplotlib).  Work counts are
deterministic (independent of load and back-end); seconds are not.  Every check
runs with `--max-work 10^12 --max-seconds 36000 --max-line-bytes 2^27`: the
default 5·10^7 work limit is below cubic's work from d_vocab 128 on, and the
d_vocab 512 cubic certificate's rule line (the good sets) is 35 MB, above the
default 32 MB line limit.  `--reuse-certs` checks existing certificates
instead of regenerating them (the d_vocab 512 cubic generator takes ~12 min).

Not a test: it prints figures.

    python benchmarks/bench_subcubic.py --part table --seeds 8
    python benchmarks/bench_subcubic.py --part table --only cubic exact
    python benchmarks/bench_subcubic.py --part scaling --vocabs 64 128 256 512 --plot s.svg
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
from pathlib import Path

from common import generate, load, run

from checker import ops
from checker.rules import brute_force
from generator.certify.strategies import subcubic
from generator.ground_truth import count_correct
from generator.modelfile import load_model, save_model
from generator.train import TrainConfig, train
from generator.zoo.catalog import paper_row
from generator.zoo.paper import TABLE1

# Our own ablations of the subcubic option grid (`--extra`), beside the declared variants.
EXTRA_ROWS = ("subcubic:direct=min,near=4", "subcubic:direct=mean+diff,near=4",
              "subcubic:direct=mean+diff,near=0", "subcubic:direct=max_diff,near=0")
NOT_RUN = "brute-force"  # too much work at d_vocab 64: its closed form is printed instead
BIG_WORK = str(10 ** 12)
BIG_SECONDS = "36000"
BIG_LINE = str(1 << 27)  # the d_vocab 512 cubic certificate's rule line (its hints) is 35 MB


def subcubic_rows() -> list[str]:
    """Every subcubic variant the strategy declares (VARIANTS), in its order."""
    return [v if isinstance(v, str) else v.name() for v in subcubic.VARIANTS]


def table_rows(extra: bool) -> list[str]:
    rows = ["brute-force", "exact", "cubic", *subcubic_rows()]
    return rows + [r for r in EXTRA_ROWS if r not in rows] if extra else rows


def paper_cell(strategy: str) -> tuple[str, str]:
    """(the Table 1 row label, the paper's bound) for a strategy, or dashes."""
    if strategy == "exact":
        return "Brute force (sound stand-in)", _paper_bound("Brute force")
    label = paper_row(strategy)
    return (label, _paper_bound(label)) if label else ("–", "–")


def _paper_bound(label: str) -> str:
    row = next(r for r in TABLE1 if r.label == label)
    if row.bound_mean < 1e-3:
        return f"{row.bound_mean:.3g} ± {row.bound_sd:.2g}"
    return f"{row.bound_mean:.4g} ± {row.bound_sd:.2g}"


def run_timed(cmd: list[str]):
    """common.run, with the CPU seconds of the child and its workers:
    (wall seconds, CPU seconds, completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, done = run(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


def model(cfg: TrainConfig, cache: Path) -> Path:
    tag = f"v{cfg.d_vocab}_k{cfg.n_ctx}_d{cfg.d_model}_steps{cfg.steps}_seed{cfg.seed}"
    path = cache / f"{tag}.pt"
    if not path.exists():
        save_model(path, train(cfg, progress=False).weights(), {"seed": cfg.seed})
    return path


def cert_path(model_path: Path, strategy: str) -> Path:
    return model_path.with_suffix(f".{strategy.replace(':', '_').replace(',', '_')}.jsonl")


def certify(model_path: Path, strategy: str, args, run_checker: bool = True) -> dict:
    """gen-cert (unless --reuse-certs and the certificate exists), then check-cert.
    A certificate the checker refuses is reported ("refused": its message), not
    counted: a generator/checker mismatch, never a false claim accepted."""
    cert = cert_path(model_path, strategy)
    gen_s = float("nan")
    if not (args.reuse_certs and cert.exists()):
        gen_s = generate(model_path, strategy, cert)
    out = {"gen_s": gen_s, "bytes": cert.stat().st_size, "ops_work": op_lines_work(cert)}
    if run_checker:
        check_s, cpu_s, chk = run_timed([sys.executable, "-m", "checker", str(cert), "--model",
                                   str(model_path), "--json", "--jobs", str(args.jobs),
                                   "--arith", args.arith, "--max-work", BIG_WORK,
                                   "--max-seconds", BIG_SECONDS, "--max-line-bytes", BIG_LINE])
        verdict = json.loads(chk.stdout)
        if verdict["verdict"] != "verified":
            print(f"REFUSED {cert.name}: {verdict.get('message', verdict)}", flush=True)
            return dict(out, refused=verdict.get("message", str(verdict)))
        out.update(check_s=check_s, cpu_s=cpu_s, bound=verdict["correct"],
                   work=verdict["work"], dim=verdict["unexplained_dimensionality"])
    return out


def op_lines_work(cert: Path) -> int:
    """The work of the op lines in the documented units (spec/rules.md §proof length)."""
    shapes, total = {}, 0
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
                total += r * c * {"matmul": a[1], "mean_rows": a[0]}.get(x["op"], 1) \
                    * ops.COST.get(x["op"], 1)
                shapes[x["id"]] = (r, c)
    return total


def brute_force_row(cubic_row: dict, v: int, k: int) -> dict:
    """Brute force, not run: the rule's exact closed form plus the op lines (the
    same matrices as the cubic certificate's: EXP_EQKE, EXP_EQKP, EVOU, PVOU, EU)."""
    return {"work": cubic_row["ops_work"] + brute_force.work(v, k), "dim": v ** (k + 1),
            "bytes": cubic_row["bytes"], "not_run": True}


def table(args, strategies: list[str] | None = None) -> list[dict]:
    """Part 1 over `strategies` (default: table_rows, filtered by --only)."""
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    if strategies is None:
        strategies = [s for s in table_rows(args.extra) if not args.only or s in args.only]
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        cfg = TrainConfig(d_vocab=64, n_ctx=4, d_model=32, d_head=32, seed=seed)
        path = model(cfg, cache)
        exact = count_correct(load_model(path).weights, progress=False).correct
        runnable = [s for s in strategies if s != NOT_RUN]
        if NOT_RUN in strategies and "cubic" not in runnable:
            runnable.append("cubic")  # brute force's op lines are cubic's
        done = {}
        for strategy in runnable:
            r = certify(path, strategy, args)
            if "refused" in r:
                continue
            if r["bound"] > exact:
                raise SystemExit(f"UNSOUND: {path.name} {strategy} {r['bound']} > {exact}")
            r.update(seed=seed, strategy=strategy, exact=exact, ratio=r["bound"] / exact)
            done[strategy] = r
            print(f"seed {seed} {strategy:38s} ratio {r['ratio']:.4f} work {r['work']:>12,d} "
                  f"check {r['check_s']:6.1f} s (cpu {r['cpu_s']:6.1f}) gen {r['gen_s']:5.1f} s "
                  f"{r['bytes'] / 1e6:.2f} MB  load {load()}", flush=True)
        if NOT_RUN in strategies:
            done[NOT_RUN] = dict(brute_force_row(done["cubic"], 64, 4), seed=seed,
                                 strategy=NOT_RUN)
        rows += [done[s] for s in strategies if s in done]
    print_table(rows, strategies)
    return rows


def print_table(rows: list[dict], strategies: list[str]) -> None:
    print("\n| strategy | paper row | paper (float32, trusted) | ours: bound/exact mean ± sd (min) "
          "| models | checker work (mean) | work / cubic (mean, max) | unexpl. dim. "
          "| check s (median) | MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cubic = {r["seed"]: r["work"] for r in rows if r["strategy"] == "cubic"}
    for strategy in strategies:
        rs = [r for r in rows if r["strategy"] == strategy]
        if not rs:
            continue
        label, paper = paper_cell(strategy)
        work = statistics.mean(r["work"] for r in rs)
        rel = [r["work"] / cubic[r["seed"]] for r in rs if r["seed"] in cubic]
        rel_cell = f"{statistics.mean(rel):.3f}, {max(rel):.3f}" if rel else "–"
        dim = "not defined" if rs[0]["dim"] is None else f"{rs[0]['dim']:,d}"
        mb = f"{statistics.mean(r['bytes'] for r in rs) / 1e6:.2f}"
        if rs[0].get("not_run"):
            print(f"| `{strategy}` | {label} | {paper} | not run (closed-form work) | "
                  f"{len(rs)} | {work:,.0f} | {rel_cell} | {dim} | – | – |")
            continue
        ratios = [r["ratio"] for r in rs]
        sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
        print(f"| `{strategy}` | {label} | {paper} | {statistics.mean(ratios):.4f} ± {sd:.4f} "
              f"({min(ratios):.4f}) | {len(rs)} | {work:,.0f} | {rel_cell} | {dim} | "
              f"{statistics.median(r['check_s'] for r in rs):.1f} | {mb} |")


def slope(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.mean(lx), statistics.mean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def scaling(args) -> dict:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    strategies = ["cubic", *subcubic_rows()]
    strategies = [s for s in strategies if not args.only or s in args.only]
    series = {s: [] for s in strategies}
    print("\n| d_vocab | strategy | total work | rule work | check s | check CPU s | MB | "
          "load |")
    print("|---|---|---|---|---|---|---|---|")
    for v in args.vocabs:
        cfg = TrainConfig(d_vocab=v, n_ctx=4, d_model=32, d_head=32, seed=1, steps=args.steps)
        path = model(cfg, cache)
        for strategy in strategies:
            r = certify(path, strategy, args)
            if "refused" in r:
                print(f"| {v} | `{strategy}` | refused by check-cert | | | | | {load()} |")
                continue
            series[strategy].append((v, r["work"], r["work"] - r["ops_work"]))
            print(f"| {v} | `{strategy}` | {r['work']:,d} | {r['work'] - r['ops_work']:,d} | "
                  f"{r['check_s']:.1f} | {r['cpu_s']:.1f} | {r['bytes'] / 1e6:.1f} | "
                  f"{load()} |", flush=True)
    print("\n| strategy | d_vocab | total work ∝ d_vocab^a | rule work ∝ d_vocab^a | "
          "last doubling (total, rule) |")
    print("|---|---|---|---|---|")
    for strategy, pts in series.items():
        if len(pts) < 2:
            continue
        vs, total, rule = ([p[i] for p in pts] for i in range(3))
        last = (f"{math.log2(total[-1] / total[-2]) / math.log2(vs[-1] / vs[-2]):.2f}, "
                f"{math.log2(rule[-1] / rule[-2]) / math.log2(vs[-1] / vs[-2]):.2f}")
        print(f"| `{strategy}` | {', '.join(map(str, vs))} | {slope(vs, total):.2f} | "
              f"{slope(vs, rule):.2f} | {last} |")
    if args.plot:
        plot(series, args.plot)
    return series


def plot(series: dict, out: str) -> None:
    """Log-log plot of the checker's work against d_vocab (matplotlib, zoo extra)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: a small file
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for strategy, pts in series.items():
        vs, total = [p[0] for p in pts], [p[1] for p in pts]
        ax.loglog(vs, total, "o-", base=2,
                  label=f"{strategy} (∝ v^{slope(vs, total):.2f})" if len(pts) > 1 else strategy)
    ax.set_xlabel("d_vocab (n_ctx 4, d_model 32)")
    ax.set_ylabel("checker work (scalar interval operations)")
    ax.set_title("check-cert's exact proof length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    print(f"plot written to {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["table", "scaling", "both"], default="both")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--first-seed", type=int, default=100)
    p.add_argument("--only", nargs="+", help="run only these strategies (names)")
    p.add_argument("--extra", action="store_true", help="add our ablations (EXTRA_ROWS)")
    p.add_argument("--vocabs", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--steps", type=int, default=400, help="training steps for the scaling part")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--arith", choices=["mpmath", "arb"], default="arb")
    p.add_argument("--reuse-certs", action="store_true",
                   help="check an existing certificate instead of regenerating it")
    p.add_argument("--plot", help="write the scaling plot to this file (e.g. .svg)")
    p.add_argument("--cache", default="/tmp/maxk-bench-models")
    args = p.parse_args()
    print(f"load {load()}, arithmetic {args.arith}, jobs {args.jobs}", flush=True)
    if args.part in ("table", "both"):
        table(args)
    if args.part in ("scaling", "both"):
        scaling(args)


if __name__ == "__main__":
    main()
