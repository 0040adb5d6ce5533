"""How family_gap's checker work grows with d_vocab (issue 23): the table of benchmarks/RESULTS.md
§"family_gap at d_vocab 128: work growth".

    python benchmarks/family_growth.py MODEL REPORT [MODEL REPORT ...] [--sample N]

Each REPORT is `check-cert CERT --model MODEL --json`'s output (a file) for a family_gap
certificate of MODEL. Per model it prints d_vocab, the verdict, the claim and claim / v^k, the
proof length (the report's `work`: the checker's charged work) and forward brute force's charged
work for the same model, and their ratio. Forward brute force's work is the checker's own cost
code (`checker.rules.forward_model.total_work`: the per-(position, token) tables plus
v^k per-sequence charges, what rule forward_brute_force charges for every sequence of a
one-layer model with no smooth activation; `tests/test_family_growth.py` compares it with the
checker's reported work on shipped forward_brute_force certificates). Between consecutive rows
it prints the work ratio and its exponent log(ratio) / log(v ratio).

With `--sample N` it also prints each model's float64 accuracy on N uniformly random sequences
(seeded; a SAMPLE, with its standard error) and claim / (sampled accuracy · v^k), an ESTIMATE
of bound / exact count, not an exact count.

Untrusted benchmark code: it reads the checker's reports and cost functions, it proves nothing.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from checker.rules import forward_model
from generator.model import family_logits_float64, family_weights
from generator.modelfile import load_model


def brute_force_work(dims) -> int:
    """forward_brute_force's charged work over all v^k sequences: a one-layer model with
    learned positions and no smooth activation, whose forward_brute_force certificate is the
    weights and the rule line only (a rotary model's certificate also charges its RoPE
    tables' lines: refused here)."""
    f = dims.family
    if f.n_layers != 1 or f.positional != "standard" or (f.d_mlp and f.act_fn != "relu"):
        raise SystemExit(f"brute force's work is computed here for one layer, learned "
                         f"positions and ReLU only, not {f}")
    return forward_model.total_work(dims)


def sampled_accuracy(weights, n: int, seed: int = 12345) -> tuple[float, float]:
    """(accuracy, standard error) of the float64 forward pass on n uniform random sequences."""
    fw = family_weights(weights)
    v, k = fw.dims.d_vocab, fw.dims.n_ctx
    tokens = np.random.default_rng(seed).integers(0, v, size=(n, k))
    ok = family_logits_float64(fw, tokens).argmax(axis=1) == tokens.max(axis=1)
    p = float(ok.mean())
    return p, math.sqrt(p * (1 - p) / n)


def exponent(work_a: int, v_a: int, work_b: int, v_b: int) -> float:
    """The exponent e with work_b / work_a = (v_b / v_a)^e."""
    return math.log(work_b / work_a) / math.log(v_b / v_a)


def rows(pairs: list[tuple[str, str]], sample: int = 0) -> list[dict]:
    out = []
    for model_path, report_path in pairs:
        report = json.loads(Path(report_path).read_text())
        weights = load_model(model_path).weights
        d = weights.dims
        if report.get("domain_inputs") != d.d_vocab ** d.n_ctx:
            raise SystemExit(f"{report_path}: domain_inputs {report.get('domain_inputs')} is "
                             f"not {model_path}'s v^k = {d.d_vocab ** d.n_ctx}")
        row = {"model": model_path, "d_vocab": d.d_vocab, "n_ctx": d.n_ctx,
               "verdict": report["verdict"], "claim": report["correct"],
               "inputs": report["domain_inputs"], "work": report["work"],
               "brute_force_work": brute_force_work(d),
               "unexplained_dimensionality": report.get("unexplained_dimensionality")}
        row["claim_share"] = row["claim"] / row["inputs"]
        row["brute_force_over_work"] = row["brute_force_work"] / row["work"]
        if sample:
            acc, se = sampled_accuracy(weights, sample)
            row.update(sample=sample, sampled_accuracy=acc, sampled_se=se,
                       claim_over_estimated_exact=row["claim"] / (acc * row["inputs"]))
        out.append(row)
    for a, b in zip(out, out[1:]):
        b["work_ratio"] = b["work"] / a["work"]
        b["work_exponent"] = exponent(a["work"], a["d_vocab"], b["work"], b["d_vocab"])
    return out


def table(found: list[dict]) -> str:
    head = ["d_vocab", "verdict", "claim", "claim / v^k", "work", "brute force work",
            "brute force / work", "work ratio", "exponent"]
    if any("sample" in r for r in found):
        head += ["sampled acc (n)", "claim / (acc·v^k) (estimate)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        cells = [str(r["d_vocab"]), r["verdict"], f"{r['claim']:,}", f"{r['claim_share']:.4f}",
                 f"{r['work']:,}", f"{r['brute_force_work']:,}",
                 f"{r['brute_force_over_work']:.1f}",
                 f"{r['work_ratio']:.3f}" if "work_ratio" in r else "",
                 f"{r['work_exponent']:.3f}" if "work_exponent" in r else ""]
        if "sample" in r:
            cells += [f"{r['sampled_accuracy']:.5f} ± {r['sampled_se']:.5f} ({r['sample']:,})",
                      f"{r['claim_over_estimated_exact']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pairs", nargs="+", metavar="MODEL REPORT")
    p.add_argument("--sample", type=int, default=0,
                   help="also the float64 accuracy on this many random sequences (a sample)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)
    if len(args.pairs) % 2:
        p.error("give MODEL REPORT pairs")
    found = rows(list(zip(args.pairs[::2], args.pairs[1::2])), args.sample)
    print(json.dumps(found, indent=1) if args.json else table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
