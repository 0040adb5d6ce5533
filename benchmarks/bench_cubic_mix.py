"""cubic-mix beside cubic on a certify-zoo run (issue 25; spec/rules.md §cubic_mix).

    python benchmarks/bench_cubic_mix.py ZOO_DIR [--out DIR]

ZOO_DIR is a `certify-zoo --recipes ...` output (its results.csv names each model, recipe,
seed, exact count and the cubic row).  For every model: `gen-cert --strategy cubic-mix`,
then `check-cert --arith arb --json`; prints one line per model and the per-recipe table of
bound ÷ exact count (pooled, and the held-back split: seed ≡ 4 mod 5), with the checker work
beside cubic's.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("zoo", type=Path)
    p.add_argument("--out", type=Path, default=None, help="where to keep the certificates")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="cubic_mix_"))
    out.mkdir(parents=True, exist_ok=True)
    models = {}
    for row in csv.DictReader(open(args.zoo / "results.csv")):
        if row["strategy"] == "cubic" and row["status"] == "verified":
            models[row["model"]] = row
    rows = []
    for name, row in sorted(models.items()):
        model = args.zoo / "models" / name
        cert = out / (Path(name).stem + ".cubic-mix.jsonl")
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "generator.cli", str(model), "--strategy",
                        "cubic-mix", "-o", str(cert), "-q"], check=True)
        t1 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "checker.cli", str(cert), "--model",
                               str(model), "--arith", "arb", "--json"], capture_output=True,
                              text=True)
        t2 = time.monotonic()
        result = json.loads(done.stdout)
        exact = int(row["exact"])
        rows.append({"recipe": row["recipe"], "seed": int(row["seed"]),
                     "cubic": int(row["bound"]) / exact,
                     "mix": result["correct"] / exact if done.returncode == 0 else None,
                     "work_cubic": int(row["checker_work"]), "work_mix": result.get("work"),
                     "gen": t1 - t0, "check": t2 - t1, "verdict": result.get("verdict")})
        r = rows[-1]
        print(f"{r['recipe']:7s} {r['seed']} cubic {r['cubic']:.5f} cubic-mix {r['mix']:.5f} "
              f"work {r['work_cubic']} / {r['work_mix']}  gen {r['gen']:.1f} s  "
              f"check {r['check']:.1f} s  {r['verdict']}", flush=True)
    recipes = sorted({r["recipe"] for r in rows})
    print("\n| strategy | " + " | ".join(recipes) + " | pooled | held-back |")
    print("|---" * (len(recipes) + 3) + "|")
    for key, label in (("cubic", "`cubic`"), ("mix", "`cubic-mix`")):
        per = [statistics.mean(r[key] for r in rows if r["recipe"] == rc) for rc in recipes]
        held = [r[key] for r in rows if r["seed"] % 5 == 4]
        print(f"| {label} | " + " | ".join(f"{x:.4f}" for x in per)
              + f" | {statistics.mean(r[key] for r in rows):.4f} | "
              + (f"{statistics.mean(held):.4f} |" if held else "– |"))
    print(f"\nchecker work, median: cubic {statistics.median(r['work_cubic'] for r in rows):,.0f}, "
          f"cubic-mix {statistics.median(r['work_mix'] for r in rows):,.0f}; "
          f"verified {sum(r['verdict'] == 'verified' for r in rows)} / {len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
