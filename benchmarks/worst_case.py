"""Build the worst certificates and model file the checker's default limits admit, and
measure them (spec/format.md §resource model).

    python benchmarks/worst_case.py /tmp/wc          # writes cert.jsonl and model.pt there
    /usr/bin/time -v check-cert /tmp/wc/cert.jsonl --jobs 1      # peak RSS: "Maximum resident"
    /usr/bin/time -v python -c "from checker.modelfile import read_model_tensors as r; \\
        r('/tmp/wc/model.pt')"

Both are refused (exit 2) — after the checker has spent the most memory the limits allow.
`--extra N` appends N more 2^20-element lines beyond the stored-element budget (for comparing
with a checker without it).

    python benchmarks/worst_case.py /tmp/wc --measure [--quick] [--cap S] [--memory-cap S]

builds, for every rule, a hostile certificate whose recorded matrices and rule tables fill the
default memory budget (--max-stored-elements) or whose rule work fills --max-work, plus a
stream of 100 MB of blank lines, runs `python -m checker CERT` on each with the default
limits and prints a table: exit code, verdict, wall time and peak RSS of the checker process
(ru_maxrss of RUSAGE_CHILDREN in a small wrapper process).  The cases that fill the work
limit would run up to the default --max-seconds (3600 s): they run under --max-seconds --cap
(30 s; 20 with --quick), which shows that they stop there; the memory cases run to the end
(--memory-cap 0) or under --memory-cap.  --quick skips the 32 MiB-line case (~5 min).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker import modelfile  # noqa: E402
from checker.certificate import Limits  # noqa: E402
from checker.modelspec import Dims, parameter_table  # noqa: E402
from checker.rules import RULES, cubic, overwhelm_family, subcubic_gap  # noqa: E402
from generator.certify.trace import Trace  # noqa: E402
from generator.model import ModelWeights  # noqa: E402

CERT_DIMS = Dims(2048, 2, 512, 256)  # W_E and W_U are 2^20 elements each
SHIPPED = ROOT / "generator" / "models" / "max3_v8_seed0.pt"


def worst_certificate(path: Path, extra: int = 0) -> int:
    """Weights (2.5M elements); every weight used as an argument of an arithmetic op (so its
    back-end elements are built, ~420 bytes each); a 2^20-element add; chains of adds, each
    used by the next, up to the stored-element budget; then a 32 MiB line of tiny JSON arrays.
    Returns the stored elements."""
    rng = np.random.default_rng(0)
    w = ModelWeights.zeros(CERT_DIMS)
    w = w.replace(**{n: rng.standard_normal(getattr(w, n).shape).astype(np.float32)
                     for n in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U")})
    t = Trace(w, float_shadow=False)
    limits = Limits()
    stored = sum(int(np.prod(line["shape"])) for line in t.body)

    def emit(term):
        nonlocal stored
        stored += int(np.prod(t.values[t.emit(term)].shape))
        return term

    for name in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U"):
        emit(("mean_rows", ("param", name)))
    e, k = ("param", "W_E"), ("param", "W_K")
    big = emit(("add", e, e))
    prev, block = emit(("add", ("param", "W_Q"), k)), CERT_DIMS.d_model * CERT_DIMS.d_head
    while stored + block <= limits.max_stored_elements:
        prev = emit(("add", prev, k))
    prev = emit(("add", ("mean_rows", e), ("mean_rows", e)))
    while stored + CERT_DIMS.d_model <= limits.max_stored_elements:
        prev = emit(("add", prev, ("mean_rows", e)))
    prev = big
    for _ in range(extra):
        prev = emit(("sub", prev, e))
    lines = t.lines("worst-case", 0, 0, {}, {})[:-1]  # no rule, no qed
    n = limits.max_line_bytes // 4 - 100
    junk = f'{{"id":{len(lines)},"kind":"op","x":[' + ",".join(["[0]"] * n) + "]}"
    path.write_text("\n".join([*lines, junk]) + "\n")
    return stored


def worst_model_file(path: Path) -> None:
    """The shipped parameters plus a float64 storage read through a transposed view up to the
    element limit, data.pkl led by EMPTY_SET opcodes up to the opcode limit, padded to the
    size limit."""
    sd = torch.load(SHIPPED, weights_only=True)["model"]
    side = int((modelfile.MAX_ELEMENTS - sum(v.numel() for v in sd.values())) ** 0.5)
    sd["junk"] = torch.zeros(side, side, dtype=torch.float64).t()
    buf = io.BytesIO()
    torch.save(sd, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    name = next(n for n in members if n.endswith("/data.pkl"))
    pkl = members[name]
    members[name] = pkl[:2] + b"\x8f" * (modelfile.MAX_PICKLE_OPCODES - 600) + pkl[2:]
    size = sum(len(v) for v in members.values())
    members[name.replace("data.pkl", "pad")] = bytes(modelfile.MAX_BYTES - size - 100_000)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for n, data in members.items():
            zf.writestr(n, data)


# -- hostile certificates, one per rule --------------------------------------------------------

def _weights(dims: Dims, winner: int | None = None, seed: int = 0) -> ModelWeights:
    """Random weights (scale 0.1); with `winner`, b_U makes that token's logit win by 10^4
    everywhere (so an overwhelm rule runs to the end instead of rejecting early)."""
    rng = np.random.default_rng(seed)
    w = ModelWeights.zeros(dims)
    w = w.replace(**{n: (0.1 * rng.standard_normal(getattr(w, n).shape)).astype(np.float32)
                     for n in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U")})
    if winner is not None:
        b_u = np.zeros(w.b_U.shape, np.float32)
        b_u[..., winner] = 1e4
        w = w.replace(b_U=b_u)
    return w


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def accuracy_certificate(path: Path, dims: Dims, rule: str, inputs, hints=None) -> Path:
    """A certificate whose one rule line claims 0 correct sequences (true of any model)."""
    t = Trace(_weights(dims), float_shadow=False)
    by = t.rule(rule, list(inputs), 0, hints)
    return _write(path, t.lines("worst-case", by, 0, {}, {}))


def overwhelm_certificate(path: Path, dims: Dims, name: str, claim: dict, hints=None) -> Path:
    """An overwhelm certificate (prefix [], query 0, output 0) for a model whose logit 0
    always wins, so the rule confirms every bound."""
    rule = RULES[name]
    t = Trace(_weights(dims, winner=0), float_shadow=False)
    parsed = rule.parse_claim(claim, dims, rule.FORM)
    inputs = {n: t.emit(term) for n, term in rule.inputs(dims, parsed).items()}
    line = {"kind": "rule", "rule": name, "inputs": inputs, "claim": claim}
    if hints is not None:
        line["hints"] = hints
    by = t._append(line)
    free = (f"free_perm == {list(claim['free_perm'])}" if "free_perm" in claim
            else f"free <= {claim['free']}")
    theorem = (f"property == overwhelm and d_vocab == {dims.d_vocab} and n_ctx == {dims.n_ctx} "
               f"and d_model == {dims.d_model} and d_head == {dims.d_head} and weights == "
               f"sha256:{t.weights_sha256} and prefix == [] and query == 0 and {free} "
               "and output == 0")
    return _write(path, t.lines("worst-case", by, 0, {}, {}, theorem))


def forward_certificate(path: Path, dims: Dims, overwhelm_hints: bool = False) -> Path:
    """forward_brute_force (claim 0), or overwhelm_family for prefix [], query 0, no free
    token, with all-zero hints, on a model written line by line (Trace would need torch-free
    family weights of this size)."""
    from checker.certificate import weights_digest

    rng = np.random.default_rng(0)
    body, decoded = [], {}
    for n, param in enumerate(parameter_table(dims.family), start=1):
        shape = dims.shape_of(param.key)
        arr = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        decoded[param.key] = (shape, tuple(float(x) for x in arr.ravel()))
        body.append({"id": n, "kind": "weight", "name": param.key, "shape": list(shape),
                     "dtype": "f32", "data": base64.b64encode(arr.astype("<f4").tobytes())
                     .decode("ascii")})
    digest = weights_digest(dims, decoded)
    sizes = (f"d_vocab == {dims.d_vocab} and n_ctx == {dims.n_ctx} and d_model == "
             f"{dims.d_model} and d_head == {dims.d_head} and weights == sha256:{digest}")
    inputs = {p.short: i for i, p in enumerate(parameter_table(dims.family), start=1)}
    n = len(body) + 1
    if overwhelm_hints:
        shapes = overwhelm_family.hint_shapes(dims)
        zeros = [base64.b64encode(bytes(8 * int(np.prod(shapes[f])))).decode("ascii")
                 for f in overwhelm_family.HINT_FIELDS]
        claim = {"prefix": [], "query": 0, "output": 0, "free": 0, "free_cmp": "<=",
                 "over": None}
        rule = {"id": n, "kind": "rule", "rule": "overwhelm_family", "inputs": inputs,
                "claim": claim, "hints": {"bounds": [[0, *zeros]]}}
        theorem = (f"property == overwhelm and {sizes} and prefix == [] and query == 0 and "
                   "free <= 0 and output == 0")
    else:
        rule = {"id": n, "kind": "rule", "rule": "forward_brute_force", "inputs": inputs,
                "claim": 0}
        theorem = f"task == max_of_k and {sizes} and correct >= 0"
    header = {"id": 0, "kind": "header", "format": "maxk-cert", "version": 1,
              "arithmetic": "real-intervals", "theorem": theorem, "strategy": "worst-case",
              "model": {}}
    objs = [header, *body, rule, {"id": n + 1, "kind": "qed", "by": n}]
    return _write(path, [json.dumps(o, separators=(",", ":")) for o in objs])


# Each case: (name, what it fills at the default limits, a builder of its input).  The sizes
# follow from the defaults (2^22 stored elements, 5·10^7 work, 2^20 elements per matrix).
CASES = [
    ("brute_force", "work: v^k·(k + (v−1)(6k+1)) = 4.7·10^7 (v 150, k 2)",
     lambda out: accuracy_certificate(out / "brute_force.jsonl", Dims(150, 2, 4, 4),
                                      "brute_force", ("EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU",
                                                      "EU"))),
    ("cubic", "work: ~5v³ = 4.1·10^7 (v 200, k 2, no good sets)",
     lambda out: accuracy_certificate(out / "cubic.jsonl", Dims(200, 2, 4, 4), "cubic",
                                      cubic.INPUTS, {"good": []})),
    ("exact", "work: cubic cover + every sequence as residue (v 50, k 3)",
     lambda out: accuracy_certificate(out / "exact.jsonl", Dims(50, 3, 4, 4), "exact",
                                      cubic.INPUTS, {"good": []})),
    ("subcubic_gap", "memory: ~5v² recorded + 11v² tables (v 480, direct min)",
     lambda out: accuracy_certificate(out / "subcubic_gap.jsonl", Dims(480, 2, 4, 4),
                                      "subcubic_gap", subcubic_gap.INPUTS,
                                      {"direct": "min", "gaps": []})),
    ("overwhelm_free", "work: 6v²·Σ(p − s) = 3.8·10^7, memory EVOU + 2v² (v 1024, free <= 3)",
     lambda out: overwhelm_certificate(out / "overwhelm_free.jsonl", Dims(1024, 4, 4, 4),
                                       "overwhelm_free", {"prefix": [], "query": 0, "output": 0,
                                                   "free": 3, "free_cmp": "<=", "over": None})),
    ("overwhelm_perm", "work: 18·v·n² (v 1024, n 48 of k 49)",
     lambda out: overwhelm_certificate(out / "overwhelm_perm.jsonl", Dims(1024, 49, 4, 4),
                                       "overwhelm_perm", {"prefix": [], "query": 0, "output": 0,
                                        "free_perm": [1] * 48},
                                       {"potentials": [[m, base64.b64encode(bytes(8 * 48))
                                                        .decode("ascii")]
                                                       for m in range(1, 1024)]})),
    ("forward_brute_force", "memory: 7h weights + 12h tables (v 2, k 2, d 1, h 2·10^5)",
     lambda out: forward_certificate(out / "forward.jsonl", Dims(2, 2, 1, 200_000))),
    ("overwhelm_family", "memory: 7h weights + 13h tables (v 2, k 2, d 1, h 2·10^5)",
     lambda out: forward_certificate(out / "overwhelm_family.jsonl", Dims(2, 2, 1, 200_000),
                                     overwhelm_hints=True)),
]


# Runs the checker from a small wrapper process, so that the peak RSS is the checker's own
# (a child forked from this script would start with this script's pages counted).
_WRAPPER = """import json, resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(json.dumps([code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))"""


def measure(args: list[str], stdin_bytes: int = 0) -> tuple[int, str, float, float]:
    """Run `python -m checker ARGS` (stdin: that many newlines): (exit code, the last line
    of its stderr, seconds, peak RSS in MB of the checker process)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", _WRAPPER, sys.executable, "-m", "checker",
                             *args], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE if stdin_bytes else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if stdin_bytes:
        try:
            chunk = b"\n" * (1 << 20)
            for _ in range(stdin_bytes >> 20):
                proc.stdin.write(chunk)
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
    out, err = proc.communicate()
    seconds = time.monotonic() - started
    code, rss_kb = json.loads(out.decode().strip().splitlines()[-1])
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return code, (lines[-1] if lines else "VERIFIED"), seconds, rss_kb / 1024


def measure_all(out: Path, work_cap: float, memory_cap: float, quick: bool) -> list[tuple]:
    """Build and run every case; print and return the table rows.  Cases that fill the work
    limit run under --max-seconds work_cap (they would run up to the default 3600 s), the
    others under memory_cap (0: the default), long enough to build their tables."""
    rows = []

    def run(name, fills, args, cap, stdin_bytes=0):
        code, message, seconds, rss = measure([*args, *(["--max-seconds", str(cap)] if cap
                                                         else [])], stdin_bytes)
        row = (name, fills, cap or "default", code, message[:80], seconds, rss)
        print("| " + " | ".join(str(x) for x in row[:5]) + f" | {seconds:.1f} | {rss:.0f} |",
              flush=True)
        rows.append(row)

    print("| case | what it fills | --max-seconds | exit | verdict | s | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for name, fills, build in CASES:
        path = build(out)
        cap = work_cap if fills.startswith("work") else memory_cap
        run(name, fills, [str(path), "--jobs", "1"], cap)
    run("cubic --jobs 2", "as cubic, two forked workers (largest process)",
        [str(out / "cubic.jsonl"), "--jobs", "2"], work_cap)
    run("blank lines", "100 MB of newlines on stdin (--max-lines)", ["-"], 0,
        stdin_bytes=100 << 20)
    if not quick:
        stored = worst_certificate(out / "cert.jsonl")
        run("recorded matrices", f"memory: {stored} stored elements, then a 32 MiB line",
            [str(out / "cert.jsonl"), "--jobs", "1"], memory_cap)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--extra", type=int, default=0)
    p.add_argument("--measure", action="store_true", help="build and run every rule's case")
    p.add_argument("--quick", action="store_true",
                   help="with --measure: work cases capped at 20 s, no 32 MiB-line case")
    p.add_argument("--cap", type=float, default=None,
                   help="with --measure: --max-seconds for the work-filling cases (default 30)")
    p.add_argument("--memory-cap", type=float, default=0,
                   help="with --measure: --max-seconds for the memory-filling cases "
                        "(default 0: the default limit, 3600 s)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.measure:
        cap = args.cap if args.cap is not None else (20 if args.quick else 30)
        measure_all(args.out, cap, args.memory_cap, args.quick)
        return
    stored = worst_certificate(args.out / "cert.jsonl", args.extra)
    worst_model_file(args.out / "model.pt")
    print(f"{args.out}/cert.jsonl: {stored} stored elements "
          f"(budget {Limits().max_stored_elements}); {args.out}/model.pt")


if __name__ == "__main__":
    main()
