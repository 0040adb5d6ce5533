"""certify-zoo: Table 1 and Figures 3-5 of the paper for a zoo of models.

    certify-zoo --seeds 8 --out zoo-report          # train 8 models (paper recipe), all strategies
    certify-zoo --seeds 5 --recipes all --strategies cubic   # 5 seeds × every training recipe
    certify-zoo --models DIR --out zoo-report       # every .pt/.safetensors model in DIR
    certify-zoo --seeds 3 --family ln-mlp,ln-mlp-rope --d-vocab 16   # LayerNorm + MLP models
    certify-zoo --seeds 20 --scheduler tcp://127.0.0.1:8786   # an existing Dask cluster

Runs every strategy gen-cert has on every model as whole (model, strategy)
jobs on Dask (by default a LocalCluster on 127.0.0.1 using all cores, started
and stopped here), checks each certificate with check-cert in a separate
process, and writes OUT/results.csv, table1.md, fig3/4/5 PNGs, run.json and
index.html.  Results are cached in OUT/cache: a rerun does only what is
missing.  Exit 0 when every job produced a result, 1 when some failed (they
are in the report), 2 on a bad argument.  With --scheduler, OUT must be on a
filesystem the workers share.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from checker import HelpFormatter, add_version_option
from generator.progress import pipe_safe

INTERRUPTED = 130  # the shell's code for a run stopped by Ctrl-C


def _seed_list(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None


def _recipe_names() -> list[str]:
    from generator.recipes import RECIPES

    return list(RECIPES)


def _family_names() -> list[str]:
    from .families import FAMILIES

    return list(FAMILIES)


def parser() -> argparse.ArgumentParser:
    from generator.train import TrainConfig

    d = TrainConfig()
    p = argparse.ArgumentParser(prog="certify-zoo", description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter,
                                epilog="examples:" + "\n".join(__doc__.splitlines()[1:]))
    add_version_option(p)
    p.add_argument("--out", default="zoo-report", help="report directory")
    p.add_argument("--seeds", type=int, help="train this many models (seeds FIRST..FIRST+N-1)")
    p.add_argument("--first-seed", type=int, default=0, help="FIRST of --seeds")
    p.add_argument("--seed-list", type=_seed_list, help="train these seeds, e.g. 3,7,11")
    p.add_argument("--models", type=Path, help="also load every model file in this directory")
    p.add_argument("--strategies", help="comma-separated subset (default: every strategy "
                                        "gen-cert has, including parametrised variants)")
    p.add_argument("--d-vocab", type=int, default=d.d_vocab, help="trained models: tokens")
    p.add_argument("--n-ctx", type=int, default=d.n_ctx, help="trained models: sequence length")
    p.add_argument("--d-model", type=int, default=d.d_model,
                   help="trained models: residual and head width")
    p.add_argument("--steps", type=int, default=d.steps, help="trained models: training steps")
    p.add_argument("--recipes", default="paper",
                   help="train every seed under each of these recipes (comma-separated, or "
                        "all): " + ", ".join(_recipe_names()) + " (generator/recipes.py); "
                        "Table 1 is then reported per recipe and pooled")
    p.add_argument("--family", default="attn-only",
                   help="train every seed in each of these model families (comma-separated, "
                        "or all): " + ", ".join(_family_names()) + " (generator/zoo/"
                        "families.py); without attn-only the default strategies are those "
                        "that apply to LayerNorm / MLP models")
    p.add_argument("--scheduler", help="tcp://HOST:PORT of an existing Dask scheduler")
    p.add_argument("--workers", type=int, help="LocalCluster worker processes (default: cores)")
    p.add_argument("--check-jobs", type=int, default=1,
                   help="check-cert --jobs within one job (default 1: the jobs are the "
                        "parallelism)")
    p.add_argument("--check-timeout", type=float, help="seconds before a check is a failure")
    p.add_argument("--check-arith", help="check-cert --arith back-end (default: check-cert's); "
                                         "cached results are reused whichever checked them")
    p.add_argument("--check-max-work", type=int, help="check-cert --max-work (default: "
                                                        "check-cert's; 10^9 with a --family "
                                                        "other than attn-only)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def options(args, p):
    from generator.certify.strategies import STRATEGIES
    from generator.train import TrainConfig

    from .catalog import strategy_names
    from .run import ZooOptions

    seeds = list(args.seed_list or [])
    if args.seeds:
        seeds += range(args.first_seed, args.first_seed + args.seeds)
    if not seeds and args.models is None:
        p.error("give --seeds N, --seed-list, or --models DIR")
    if args.models is not None and not args.models.is_dir():
        p.error(f"--models {args.models}: not a directory")
    train = {"d_vocab": args.d_vocab, "n_ctx": args.n_ctx, "d_model": args.d_model,
             "d_head": args.d_model, "steps": args.steps}
    try:
        TrainConfig(**train).validate()
    except ValueError as err:
        p.error(str(err))
    from generator.recipes import parse_recipes

    from .families import default_check_max_work, default_strategies, parse_families

    try:
        families = parse_families(args.family)
    except ValueError as err:
        p.error(f"--family: {err}")
    try:
        recipes = parse_recipes(args.recipes)
        for recipe in recipes:
            for family in families:
                TrainConfig(**{**train, **recipe.overrides(), **family.overrides(train)}
                            ).validate()
    except ValueError as err:
        p.error(f"--recipes / --family: {err}")
    strategies = default_strategies(families)
    if args.strategies:
        known = set(strategy_names()) | set(STRATEGIES)
        strategies = split_strategies(args.strategies, set(STRATEGIES))
        unknown = [s for s in strategies if s not in known and s.split(":")[0] not in known]
        if unknown:
            p.error(f"unknown strategies {unknown}; gen-cert has {sorted(known)}")
    return ZooOptions(out=Path(args.out), seeds=list(dict.fromkeys(seeds)),
                      models_dir=args.models, train=train, strategies=strategies,
                      recipes=[r.name for r in recipes], families=[f.name for f in families],
                      scheduler=args.scheduler, workers=args.workers,
                      check_jobs=max(1, args.check_jobs), check_timeout=args.check_timeout,
                      check_arith=args.check_arith,
                      check_max_work=args.check_max_work or default_check_max_work(families),
                      progress=not args.no_progress)


@pipe_safe
def main(argv: list[str] | None = None) -> int:
    try:
        import dask.distributed  # noqa: F401  (the zoo extra)
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401  (the generator extra)
        import torch  # noqa: F401

        from .report import write_report
        from .run import run_zoo
    except ImportError as missing:
        sys.exit(f"certify-zoo needs the generator and zoo extras ({missing}); install\n"
                 "  pip install torch==2.13.0 'maxk-certify[generator,zoo]'")
    p = parser()
    args = p.parse_args(argv)
    opts = options(args, p)
    from .cache import project_version
    from .run import _relative

    started = time.time()
    try:
        summary = run_zoo(opts)
    except KeyboardInterrupt:  # finished results are already cached, one file each
        print("certify-zoo: interrupted; every finished result is cached in "
              f"{opts.out / 'cache'}: rerun the same command to do only what is missing",
              file=sys.stderr)
        return INTERRUPTED
    run = {"command": "certify-zoo " + " ".join(argv if argv is not None else sys.argv[1:]),
           "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
           "seconds": summary.seconds, "peak_mib": summary.peak_bytes / 2 ** 20,
           "load_average_at_end": list(os.getloadavg()), "cores": os.cpu_count(),
           "scheduler": opts.scheduler or "LocalCluster on 127.0.0.1",
           "started_cluster": summary.started_cluster, "project_version": project_version(),
           "models": [_relative(m, opts.out) for m in summary.models],
           "strategies": summary.strategies,
           "computed": summary.computed, "cached": summary.cached,
           "failed": summary.failed, "retried": summary.retried}
    write_report(opts.out, summary.rows, run)
    verified = sum(r["status"] == "verified" for r in summary.rows)
    refused = [r for r in summary.rows if r["status"] in REFUSED]
    for r in refused:  # a certificate its own checker refuses is a generator bug: say so
        print(f"certify-zoo: {r['status'].upper()} {r['strategy']} on {r.get('model', '?')}: "
              f"{r.get('reason', '')}", file=sys.stderr)
    print(f"certify-zoo: {len(summary.models)} models × {len(summary.strategies)} strategies: "
          f"{verified} verified, {len(refused)} refused by check-cert; {summary.computed} jobs "
          f"computed, {summary.cached} cached, {len(summary.failed)} failed; "
          f"{summary.seconds:.0f} s, peak memory {summary.peak_bytes / 2 ** 20:.0f} MiB; "
          f"report: {opts.out / 'index.html'}")
    return 1 if summary.failed or refused else 0


REFUSED = ("rejected", "malformed", "failed")  # jobs.REJECTED, MALFORMED, FAILED


def split_strategies(text: str, bases: set[str]) -> list[str]:
    """A comma-separated list of strategies whose variants contain commas themselves
    (subcubic:direct=min,near=2): a piece that does not start a strategy (no known base
    before its ':' or end) continues the previous one."""
    out: list[str] = []
    for piece in (s.strip() for s in text.split(",")):
        if not piece:
            continue
        if out and piece.split(":")[0] not in bases and "=" in piece:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


if __name__ == "__main__":
    sys.exit(main())
