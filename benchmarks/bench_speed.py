"""Where check-cert's time goes, per rule and back-end, beside a C baseline (issue 22).

For each case (a rule on a shipped certificate) and each back-end, one fresh process runs
the whole `check-cert` path (checker.cli.check_file, --jobs 1) and measures its own CPU
time (time.process_time, which includes the interpreter's start):

  start-up   interpreter + importing the checker and the back-end
  decode     JSON lines, base64 floats, the model file, building back-end elements
  arith      everything else: the checker's arithmetic (ops and rules)
  total      the whole process
  command    the median CPU time (the OS's accounting) of the user's whole command,
             `python -m checker.cli CERT --model M --arith A --jobs 1`, printing included
             (--repeat runs; the issue's targets are stated for this figure)

`--help` is the CPU time of `check-cert --help` (a separate process).  The C baseline is
numpy (float64, one BLAS thread) doing as many multiply-adds as the certificate's proof
length (its scalar operations, as check-cert reports them), timed in the same run; the
ratio is arith / baseline.

    python benchmarks/bench_speed.py                # the table, Markdown
    python benchmarks/bench_speed.py --grok         # also the d_model 128 / 12,769-input model
    python benchmarks/bench_speed.py --only cubic exact --cubic-sizes 128 256  # + v 128, 256

--cubic-sizes trains (or reuses, cached in --cache) the Max-of-4 models of
benchmarks/bench_arith.py and their cubic certificates, and adds one row per size (arb only,
and mpmath with --cubic-mpmath: ~10 CPU minutes at v 256).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CERTS, MODELS = ROOT / "certs", ROOT / "generator" / "models"

CASES = [  # (rule, certificate, model file): None = generated in the run
    ("forward_brute_force", None, MODELS / "max3_v8_ln_mlp_rope_seed0.pt"),
    ("forward_brute_force (GELU)", CERTS / "max3_v8_gelu_ln_seed0.forward.jsonl",
     MODELS / "max3_v8_gelu_ln_seed0.pt"),
    ("forward_brute_force (RMS, SiLU)", CERTS / "max3_v8_rms_silu_rope_seed0.forward.jsonl",
     MODELS / "max3_v8_rms_silu_rope_seed0.pt"),
    ("cubic", CERTS / "max4_v64_seed0.cubic.jsonl", MODELS / "max4_v64_seed0.pt"),
    ("exact", CERTS / "max4_v64_seed0.exact.jsonl", MODELS / "max4_v64_seed0.pt"),
    ("subcubic_gap", CERTS / "max4_v64_seed0.subcubic.jsonl", MODELS / "max4_v64_seed0.pt"),
    ("overwhelm_family", CERTS / "maxany_v16_k16_ln_mlp_rope_seed0.overwhelm-15x3-free10.jsonl",
     MODELS / "maxany_v16_k16_ln_mlp_rope_seed0.pt"),
]
BACKENDS = ("mpmath", "arb")
SINGLE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# -- one measurement, in a fresh process --------------------------------------------------

def measure_one(cert: str, model: str | None, arith: str, max_work: int) -> dict:
    """Run in the child: the phases of one check (CPU seconds of this process)."""
    import checker.certificate as certificate
    import checker.cli as cli
    from checker import arith as arithmetic
    from checker.limits import Limits

    backend = arithmetic.get(arith)
    startup = time.process_time()
    spent = [0.0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - t
        return wrapper

    certificate._json_object = timed(certificate._json_object)
    certificate.decode_bounds = timed(certificate.decode_bounds)
    certificate.decode_floats = timed(certificate.decode_floats)
    certificate.Value.rows = timed(certificate.Value.rows)
    import checker.modelfile as modelfile
    modelfile.read_model_tensors = timed(modelfile.read_model_tensors)
    limits = Limits(max_work=max_work, max_seconds=36000.0)
    report = cli.check_file(cert, limits, model, jobs=1, arith=backend)
    total = time.process_time()
    return {"startup": startup, "decode": spent[0], "arith": total - startup - spent[0],
            "total": total, "work": report.work, "verdict": report.theorem}


def run_child(cert: Path, model: Path | None, arith: str, max_work: int) -> dict:
    cmd = [sys.executable, __file__, "--child", str(cert), str(model or ""), arith,
           str(max_work)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def command_seconds(cert: Path, model: Path | None, arith: str, max_work: int,
                    runs: int) -> float:
    """Median CPU seconds (user + system, the OS's accounting) of the whole user command
    `python -m checker.cli CERT [--model M] --arith A --jobs 1` over `runs` runs: the
    interpreter, every import, the check and the printed report (the issue's figure)."""
    cmd = [sys.executable, "-m", "checker.cli", str(cert), "--arith", arith, "--jobs", "1",
           "--max-work", str(max_work), *(["--model", str(model)] if model else [])]
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(cmd, capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{cmd} failed:\n{done.stderr.decode()[-2000:]}")
        times.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return sorted(times)[len(times) // 2]


def help_seconds() -> float:
    """CPU seconds of `python -m checker.cli --help` (the entry point's work)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "checker.cli", "--help"], capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# -- the C baseline -------------------------------------------------------------------------

def baseline_rate() -> float:
    """Multiply-adds per CPU second of numpy float64 matmul, one thread, this run."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 256)), rng.standard_normal((256, 256))
    a @ b  # warm up
    t, n = time.process_time(), 0
    while time.process_time() - t < 0.5:
        a @ b
        n += 1
    return n * 256 ** 3 / (time.process_time() - t)


# -- certificates made in the run ----------------------------------------------------------

def forward_certificate(model: Path, out: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "generator.cli", str(model), "--strategy",
                           "forward-brute-force", "-o", str(out), "-q"], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if done.returncode != 0:
        raise SystemExit("gen-cert failed")
    return out


def grok_certificate(out: Path) -> Path:
    """A random 1-layer LN+MLP model of the grokking architecture (d_vocab 113, n_ctx 2:
    12,769 inputs; d_model 128, d_mlp 512, 4 heads of 32) and its forward certificate."""
    import math

    import numpy as np

    import generator.certify.strategies.forward_brute_force as fbf
    from checker.modelspec import Dims, Family, parameter_table
    from generator.certify.strategies import STRATEGIES
    from generator.certify.trace import Trace
    from generator.model import FamilyWeights

    family = Family(normalization="LN", n_heads=4, d_mlp=512, ln_eps=1e-5)
    dims = Dims(113, 2, 128, 32, family)
    g = np.random.default_rng(0)
    params = {p.key: (g.normal(size=dims.shape_of(p.key)) * (3.0 / math.sqrt(dims.d_model))
                      + (1.0 if p.short.endswith(".w") else 0.0)).astype(np.float32)
              for p in parameter_table(family)}
    fbf.MAX_CHECKER_WORK = 1 << 62  # the generator's own feasibility cap, lifted here
    trace = Trace(FamilyWeights(dims=dims, params=params))
    by, claim, _ = STRATEGIES["forward-brute-force"].certify(trace)
    out.write_text("\n".join(trace.lines("forward-brute-force", by, claim, {}, {})) + "\n")
    return out


# -- the table -------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grok", action="store_true", help="also the 12,769-input model (arb only)")
    p.add_argument("--only", nargs="+", metavar="RULE",
                   help="only the cases whose rule starts with one of these words")
    p.add_argument("--cubic-sizes", type=int, nargs="*", default=[],
                   help="also cubic at these d_vocab (bench_arith.py's trained models)")
    p.add_argument("--cubic-mpmath", action="store_true",
                   help="the --cubic-sizes rows with mpmath too")
    p.add_argument("--cache", default="/tmp/maxk-bench-arith",
                   help="where --cubic-sizes keeps its models and certificates")
    p.add_argument("--repeat", type=int, default=5,
                   help="runs of the whole command per row, their median printed (rows whose "
                        "check takes over 5 s: one run)")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        cert, model, arith, max_work = args.child
        print(json.dumps(measure_one(cert, model or None, arith, int(max_work))))
        return 0
    os.environ.update(SINGLE_THREAD)
    tmp = Path(tempfile.mkdtemp(prefix="bench_speed_"))
    chosen = [c for c in CASES if not args.only or c[0].split()[0] in args.only]
    cases = [(rule, cert or forward_certificate(model, tmp / "forward.jsonl"), model,
              BACKENDS, 50_000_000) for rule, cert, model in chosen]
    if args.cubic_sizes:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import bench_arith

        cache = Path(args.cache)
        cache.mkdir(parents=True, exist_ok=True)
        for v in args.cubic_sizes:
            model, cert = bench_arith.model_and_cert(v, cache, 3000)
            cases.append((f"cubic (d_vocab {v})", cert, model,
                          BACKENDS if args.cubic_mpmath else ("arb",), 1 << 40))
    if args.grok:
        cases.append(("forward_brute_force (d 128, 12,769 inputs)",
                      grok_certificate(tmp / "grok.jsonl"), None, ("arb",), 1 << 40))
    rate = baseline_rate()
    print(f"load before: {os.getloadavg()}; `python -m checker.cli --help`: "
          f"{help_seconds():.3f} s CPU; C baseline (numpy float64 matmul, 1 thread): "
          f"{rate / 1e9:.2f} G multiply-adds/s")
    print()
    print("| rule | back-end | start-up s | decode s | arith s | total s | command s "
          "| work (ops) | C baseline s | arith / C |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rule, cert, model, backends, max_work in cases:
        for arith in backends:
            r = run_child(cert, model, arith, max_work)
            base = r["work"] / rate
            runs = args.repeat if r["total"] < 5 else 1  # a slow row once
            command = command_seconds(cert, model, arith, max_work, runs)
            print(f"| {rule} | {arith} | {r['startup']:.3f} | {r['decode']:.3f} | "
                  f"{r['arith']:.3f} | {r['total']:.3f} | {command:.3f} | {r['work']:.3g} | "
                  f"{base:.2g} | {r['arith'] / base:.0f}× |", flush=True)
    print()
    print(f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
