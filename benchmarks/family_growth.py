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
checker's reported work on shipped forward_brute_force certificates). Rows are sorted by d_vocab
(a measured row before an estimated one of the same d_vocab); against the first row of the next
smaller d_vocab each row gets the work ratio and its exponent log(ratio) / log(v ratio).

A row may also come from a SAMPLED certificate (`--sampled MODEL REPORT CERT`, CERT made with
`--strategy family-gap:...,sample=N`: the classes and boxes of a seeded random 1/N of the
(q, m) pairs, no residue; for sizes where the whole search does not fit a session). Its work
and claim are then ESTIMATES of the full certificate's (same options, sample=1), with a
standard error, from the checker's own cost function (`checker.rules.family_gap.cost`, which
the checker charges in full before any arithmetic, from the class list alone):

    work ≈ report work − cost(sampled classes)        (the lines before the rule, and the
                                                       note's float32 distance at one class)
         + cost(no class) + the query and output terms with all v query tokens and maxima
                                                      (an upper bound: small m have no class)
         + (P/n) Σ_(sampled pairs) per-pair class charge   (± its standard error)
         + RESIDUE_LIMIT · forward's per-sequence charge   (the residue's cap: an upper bound)

with P = v(v+1)/2 pairs and n sampled; the standard error is that of a simple random sample
without replacement, P·s/√n·√(1 − n/P), s the per-pair charges' standard deviation (pairs
with no class count as 0). The claim (without any residue) is estimated by the ratio
estimator v^k · Σ claim / Σ inputs over the sampled pairs (a pair's inputs: the sequences with
query q and maximum m), standard error v^k · s_d / (mean inputs) / √n · √(1 − n/P), s_d the
standard deviation of claim − ratio · inputs (first order; the estimator's bias is O(1/n)).
The checker's report must be VERIFIED (every sampled class proved).

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

from checker.rules import family_gap as gap_rule
from checker.rules import forward, forward_model
from generator.certify.strategies.family_gap import RESIDUE_LIMIT, sampled_pairs
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


def read_classes(cert_path: str) -> tuple[str, list]:
    """(strategy, [(q, m, fixed, g)]) of a family_gap certificate: its classes (fixed a tuple
    S, or the int i0 of a merged class) and boxes (fixed a Box, g = 0), keys only, as the
    checker's cost function reads them (no hint is decoded)."""
    strategy, found = None, None
    with open(cert_path) as f:
        for line in f:
            entry = json.loads(line)
            strategy = entry.get("strategy", strategy)
            if entry.get("rule") == "family_gap":
                hints = entry["hints"]
                found = [(c[0], c[1], c[2]["first"] if isinstance(c[2], dict) else tuple(c[2]),
                          c[3]) for c in hints["classes"]]
                found += [(b[0], b[1], gap_rule.Box(tuple(x) for x in b[2]), 0)
                          for b in hints.get("boxes", [])]
    if found is None or strategy is None:
        raise SystemExit(f"{cert_path}: no strategy or no family_gap line")
    return strategy, found


def sample_of(strategy: str) -> int:
    """N of option sample=N in a family-gap strategy name (1 if absent)."""
    for field in strategy.partition(":")[2].split(","):
        if field.startswith("sample="):
            return int(field[len("sample="):])
    return 1


def pair_inputs(k: int, q: int, m: int) -> int:
    """The sequences of length k with query (last) token q and maximum m >= q: the other k − 1
    tokens in [0, m], one of them m unless q = m."""
    return (m + 1) ** (k - 1) - (m ** (k - 1) if q < m else 0)


def sampled_estimate(dims, report: dict, strategy: str, classes: list) -> dict:
    """The full certificate's work and claim estimated from a sampled one (module docstring):
    {"work", "work_se", "claim", "claim_se", "pairs", "sampled_pairs", "one_in"} (one_in: N)."""
    v, n_sample = dims.d_vocab, sample_of(strategy)
    chosen = sampled_pairs(v, n_sample)
    if chosen is None:
        raise SystemExit(f"strategy {strategy} is not sampled (no sample=N, N > 1)")
    if report["correct"] != sum(gap_rule.class_size(dims, m, f, g) for _, m, f, g in classes):
        raise SystemExit("the report's claim is not the sampled classes' size (a residue, or "
                         "the report of another certificate)")
    charge = {p: 0 for p in chosen}
    size = {p: 0 for p in chosen}
    for q, m, fixed, g in classes:
        if (q, m) not in chosen:
            raise SystemExit(f"class (q={q}, m={m}) is outside the sample of {strategy}")
        charge[q, m] += gap_rule.class_charge(dims, m, fixed, g)
        size[q, m] += gap_rule.class_size(dims, m, fixed, g)
    keyed = [(q, m, fixed, g, None) for q, m, fixed, g in classes]
    before_rule = report["work"] - gap_rule.cost(dims, keyed)
    every = [(t, t, (), 0, None) for t in range(v)]  # every query token and maximum once
    per_query_output = (gap_rule.cost(dims, every)
                        - sum(gap_rule.class_charge(dims, t, (), 0) for t in range(v)))
    total_pairs, n = v * (v + 1) // 2, len(chosen)

    def total(values) -> tuple[float, float]:
        xs = np.array(list(values), dtype=float)
        sd = float(xs.std(ddof=1)) if n > 1 else 0.0
        return (total_pairs * float(xs.mean()),
                total_pairs * sd / math.sqrt(n) * math.sqrt(1 - n / total_pairs))

    charged, charged_se = total(charge.values())
    # the claim by the ratio estimator: a pair's claim against its inputs (sequences with query
    # q and maximum m, all v^k of them over the pairs), whose ratio varies far less than the
    # claim itself (a class's size grows ~m³)
    inputs = np.array([pair_inputs(dims.n_ctx, q, m) for q, m in chosen], dtype=float)
    claims = np.array([size[p] for p in chosen], dtype=float)
    ratio = float(claims.sum() / inputs.sum())
    spread = float((claims - ratio * inputs).std(ddof=1)) if n > 1 else 0.0
    claim = ratio * v ** dims.n_ctx
    claim_se = (v ** dims.n_ctx * spread / float(inputs.mean()) / math.sqrt(n)
                * math.sqrt(1 - n / total_pairs))
    residue_cap = RESIDUE_LIMIT * forward._sequence_cost(dims)
    return {"work": before_rule + per_query_output + charged + residue_cap,
            "work_se": charged_se, "claim": claim, "claim_se": claim_se,
            "pairs": total_pairs, "sampled_pairs": n, "one_in": n_sample,
            "sample_work": report["work"], "sample_claim": report["correct"]}


def rows(pairs: list[tuple[str, str]], sample: int = 0,
         sampled: list[tuple[str, str, str]] = ()) -> list[dict]:
    out = []
    for model_path, report_path, *cert in [*pairs, *sampled]:
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
        if cert:
            if report["verdict"] != "verified":
                raise SystemExit(f"{report_path}: the sampled certificate is not verified")
            strategy, classes = read_classes(cert[0])
            row.update(sampled_estimate(d, report, strategy, classes))
        row["claim_share"] = row["claim"] / row["inputs"]
        row["brute_force_over_work"] = row["brute_force_work"] / row["work"]
        if sample:
            acc, se = sampled_accuracy(weights, sample)
            row.update(sample=sample, sampled_accuracy=acc, sampled_se=se,
                       claim_over_estimated_exact=row["claim"] / (acc * row["inputs"]))
        out.append(row)
    # by d_vocab, a measured row before an estimated one of the same d_vocab; each row's ratio
    # and exponent against the first row of the next smaller d_vocab
    out.sort(key=lambda r: (r["d_vocab"], "work_se" in r))
    first = {}
    for r in out:
        first.setdefault(r["d_vocab"], r)
    for b in out:
        smaller = [v for v in first if v < b["d_vocab"]]
        if not smaller:
            continue
        a = first[max(smaller)]
        b["work_ratio"] = b["work"] / a["work"]
        b["work_exponent"] = exponent(a["work"], a["d_vocab"], b["work"], b["d_vocab"])
        if "work_se" in a or "work_se" in b:  # the exponent at ± 2 standard errors of each
            lo = exponent(a["work"] + 2 * a.get("work_se", 0), a["d_vocab"],
                          b["work"] - 2 * b.get("work_se", 0), b["d_vocab"])
            hi = exponent(a["work"] - 2 * a.get("work_se", 0), a["d_vocab"],
                          b["work"] + 2 * b.get("work_se", 0), b["d_vocab"])
            b["work_exponent_2se"] = (lo, hi)
    return out


def table(found: list[dict]) -> str:
    head = ["d_vocab", "verdict", "claim", "claim / v^k", "work", "brute force work",
            "brute force / work", "work ratio", "exponent"]
    if any("sampled_accuracy" in r for r in found):
        head += ["sampled acc (n)", "claim / (acc·v^k) (estimate)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        est = "work_se" in r
        cells = [str(r["d_vocab"]) + (f" (est. from 1/{r['one_in']}: {r['sampled_pairs']:,} "
                                      f"of {r['pairs']:,} (q, m))" if est else ""),
                 r["verdict"],
                 f"{r['claim']:,.0f} ± {r['claim_se']:,.0f}" if est else f"{r['claim']:,}",
                 f"{r['claim_share']:.4f}",
                 f"{r['work']:,.0f} ± {r['work_se']:,.0f}" if est else f"{r['work']:,}",
                 f"{r['brute_force_work']:,}",
                 f"{r['brute_force_over_work']:.1f}",
                 f"{r['work_ratio']:.3f}" if "work_ratio" in r else "",
                 (f"{r['work_exponent']:.3f}" if "work_exponent" in r else "")
                 + (" ({:.3f} … {:.3f} at ± 2 SE)".format(*r["work_exponent_2se"])
                    if "work_exponent_2se" in r else "")]
        if "sampled_accuracy" in r:
            cells += [f"{r['sampled_accuracy']:.5f} ± {r['sampled_se']:.5f} ({r['sample']:,})",
                      f"{r['claim_over_estimated_exact']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pairs", nargs="+", metavar="MODEL REPORT")
    p.add_argument("--sample", type=int, default=0,
                   help="also the float64 accuracy on this many random sequences (a sample)")
    p.add_argument("--sampled", nargs=3, action="append", default=[],
                   metavar=("MODEL", "REPORT", "CERT"),
                   help="a row estimated from a sampled certificate (sample=N; module docstring)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)
    if len(args.pairs) % 2:
        p.error("give MODEL REPORT pairs")
    found = rows(list(zip(args.pairs[::2], args.pairs[1::2])), args.sample, args.sampled)
    print(json.dumps(found, indent=1) if args.json else table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
