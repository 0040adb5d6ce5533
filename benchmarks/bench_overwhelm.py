"""Overwhelm certificates on the shipped demo models (spec/overwhelm.md).

Prints, per demo model:
  * candidates: how many candidate claims are certified (generator proves, the
    checker accepts) vs how many truly overwhelm (brute force over every free
    string with the float64 forward pass, where enumerable);
  * Algorithm 1 vs Algorithm 2: multisets X, claims "every ordering of X"
    (overwhelm_perm) vs the same claim through overwhelm_free (`free == |X|
    over set(X)`, which covers more strings), with brute-force truth on orderings;
  * large claims (>= 10^12 free strings): generation and check seconds, bytes;
  * check time as n_free grows;
  * the model families (rule overwhelm_family): the shipped LN+MLP+RoPE
    max-of-prefix models, certified vs true, >= 10^12 strings, growth, and the
    family rule vs the exact attention-only rule on an attention-only model.

    python benchmarks/bench_overwhelm.py [--quick] [--arith arb] [--only families]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from checker.certificate import CertificateChecker  # noqa: E402
from checker.statement import Overwhelm  # noqa: E402
from generator.modelfile import load_model  # noqa: E402
from generator.overwhelm import brute_force, certify  # noqa: E402
from generator.tasks.flipflop import IGNORE_TOKENS, R  # noqa: E402

MODELS = REPO / "generator" / "models"


def check(lines) -> tuple[float, bool]:
    """(seconds, accepted) for checking `lines` in-process, one job; the rule's own
    time (without the op lines) is in LAST_RULE_NOTE."""
    global LAST_RULE_NOTE
    started = time.monotonic()
    checker = CertificateChecker(jobs=1, arith=ARITH)
    try:
        for line in lines:
            checker.feed(line)
        LAST_RULE_NOTE = checker.finish().rule_notes[-1]
        ok = True
    except Exception as err:  # noqa: BLE001 - a benchmark reports, never hides
        print(f"    checker refused: {err}")
        ok = False
    return time.monotonic() - started, ok


LAST_RULE_NOTE = ""
ARITH = None  # the checker's arithmetic back-end (--arith), set in main


def rule_seconds() -> str:
    """The rule line's time from the checker's note "... (0.1 s)"."""
    return LAST_RULE_NOTE.rsplit("(", 1)[-1].rstrip(")")


def n_strings(claim: Overwhelm, v: int) -> int:
    if claim.free_perm is not None:
        return len(set(itertools.permutations(claim.free_perm)))
    a = len(claim.over) if claim.over is not None else v
    return sum(a ** n for n in claim.lengths())


def tally(loaded, claims, label, brute=True, family_rule=False):
    """Certified vs truly overwhelming over candidate claims."""
    v = loaded.weights.dims.d_vocab
    counts = {"candidates": 0, "certified": 0, "true": 0, "refuted": 0, "not proved": 0,
              "certified_but_false": 0}
    gen_s, chk_s = [], []
    for claim in claims:
        t0 = time.monotonic()
        verdict = certify(loaded, claim, float_shadow=False, family_rule=family_rule)
        gen_s.append(time.monotonic() - t0)
        counts["candidates"] += 1
        certified = False
        if verdict.verdict == "proved":
            seconds, certified = check(verdict.lines)
            chk_s.append(seconds)
        counts["certified"] += certified
        if verdict.verdict in ("refuted", "not proved"):
            counts[verdict.verdict] += 1
        if brute:
            ok = brute_force(loaded.weights, verdict.claim)[0]
            counts["true"] += ok
            counts["certified_but_false"] += certified and not ok
    sizes = [n_strings(c, v) for c in claims]
    print(f"  {label}: {json.dumps(counts)}; free strings per claim {min(sizes)}..{max(sizes)}; "
          f"gen {statistics.median(gen_s):.2f} s, check "
          f"{statistics.median(chk_s) if chk_s else float('nan'):.2f} s (medians)")
    return counts


def big(loaded, claim, label):
    v = loaded.weights.dims.d_vocab
    t0 = time.monotonic()
    verdict = certify(loaded, claim, float_shadow=False)
    gen = time.monotonic() - t0
    if verdict.verdict != "proved":
        print(f"  {label}: {verdict.text()}")
        return None
    seconds, ok = check(verdict.lines)
    size = sum(len(s) + 1 for s in verdict.lines)
    print(f"  {label}: {n_strings(claim, v):.3g} free strings; certified={ok}; gen {gen:.2f} s, "
          f"check {seconds:.2f} s (rule {rule_seconds()}), {size / 1e6:.2f} MB, "
          f"{len(verdict.lines)} lines")
    return gen, seconds, size


def growth(loaded, make_claim, ns, label):
    rows = []
    for n in ns:
        claim = make_claim(n)
        verdict = certify(loaded, claim, float_shadow=False)
        if verdict.verdict != "proved":
            rows.append(f"n={n}: {verdict.verdict}")
            continue
        seconds, ok = check(verdict.lines)
        rows.append(f"n={n}: {seconds:.2f} s (rule {rule_seconds()})")
    print(f"  {label} check time vs n_free: " + "; ".join(rows))


def shipped_maxk(quick: bool):
    """The accuracy project's Max-of-K models, trained at the last position only:
    claims with free strings of exactly n_ctx − 2 tokens (the query at n_ctx − 1)."""
    for name, queries in (("max4_v64_seed0.pt", (0, 30, 63)), ("max5_v16_seed0.pt", (0, 7, 15))):
        path = MODELS / name
        loaded = load_model(path)
        d = loaded.weights.dims
        n = d.n_ctx - 2
        print(f"\n== {name} (Max-of-K, v={d.d_vocab}, n_ctx={d.n_ctx}; free == {n}) ==")
        step = 16 if quick else 4
        tally(loaded, [Overwhelm((m,), q, m, free_cmp="==", free=n, over=tuple(range(m + 1)))
                       for m in range(d.d_vocab - 1, -1, -step) for q in queries if q <= m],
              f"prefix [m], free == {n} over [0..m], output m")
        tally(loaded, [Overwhelm((m,), q, m, free_cmp="==", free=n)
                       for m in range(d.d_vocab - 1, -1, -4 * step) for q in queries],
              f"prefix [m], free == {n} over all tokens (true only for m = v−1)")


def maxany(quick: bool):
    path = MODELS / "maxany_v64_k10_seed0.pt"
    loaded = load_model(path)
    print(f"\n== {path.name} (Max-of-prefix, v=64, n_ctx=10) ==")
    queries = (5,)
    # prefix [m], free == 2 over all tokens: true only if m = 63 (the largest token)
    tally(loaded, [Overwhelm((m,), q, m, free_cmp="==", free=2)
                   for m in range(3, 64, 4 if quick else 1) for q in queries],
          "prefix [m], free == 2 (all tokens), output m")
    # the prefix holds the largest token of the alphabet [0..m]: true for trained models
    tally(loaded, [Overwhelm((m,), q, m, free_cmp="<=", free=2, over=tuple(range(m + 1)))
                   for m in range(3, 64, 4 if quick else 2) for q in queries],
          "prefix [m], free <= 2 over [0..m], output m")
    rng = np.random.default_rng(0)
    perm_claims, free_claims = [], []
    for _ in range(20 if quick else 40):
        m = int(rng.integers(8, 64))
        x = tuple(sorted(int(t) for t in rng.integers(m - 8, min(m + 2, 64), size=5)))
        q = int(rng.integers(0, 64))
        perm_claims.append(Overwhelm((m,), q, m, free_perm=x))
        free_claims.append(Overwhelm((m,), q, m, free_cmp="==", free=5, over=tuple(sorted(set(x)))))
    a2 = tally(loaded, perm_claims, "Alg 2 (overwhelm_perm), |X| = 5")
    a1 = tally(loaded, free_claims, "Alg 1 (overwhelm_free, free == 5 over set(X))")
    print(f"  Alg 2 certifies {a2['certified']} permutation claims; Alg 1 "
          f"{a1['certified']} of the same prefixes (for the larger set of strings)")
    big(loaded, Overwhelm((63,), 5, 63, free_cmp="<=", free=8), "prefix [63], free <= 8")
    big(loaded, Overwhelm((63,), 5, 63, free_perm=tuple(range(0, 64, 8))),
        "prefix [63], free_perm of 8 tokens")
    growth(loaded, lambda n: Overwhelm((63,), 5, 63, free_cmp="<=", free=n),
           (1, 2, 4, 8) if quick else (1, 2, 3, 4, 5, 6, 7, 8), "free <= n")


def flipflop(quick: bool):
    path = MODELS / "flipflop_k64_seed0.pt"
    loaded = load_model(path)
    print(f"\n== {path.name} (flip-flop, v=5, n_ctx=64) ==")
    rng = np.random.default_rng(1)
    prefixes = []
    for _ in range(20 if quick else 40):
        n = int(rng.integers(1, 6))
        body = [int(t) for t in rng.choice(5, size=n)]
        prefixes.append(tuple([int(rng.integers(0, 2))] + body))
    last_write = [[t for t in p if t in (0, 1)][-1] for p in prefixes]
    tally(loaded, [Overwhelm(p, R, b, free_cmp="<=", free=10, over=IGNORE_TOKENS)
                   for p, b in zip(prefixes, last_write)],
          "random prefixes, free <= 10 over ignores, output = last write")
    tally(loaded, [Overwhelm(p, R, b, free_cmp="<=", free=2)
                   for p, b in zip(prefixes, last_write)],
          "same, free <= 2 over ALL tokens (writes allowed: false)")
    perm = [Overwhelm(p, R, b, free_perm=(0, 1, 2, 2, 3, 3)) for p, b in
            zip(prefixes, last_write)]
    tally(loaded, perm, "Alg 2, multiset {W0, W1, I0, I0, I1, I1} (order decides: false)")
    tally(loaded, [Overwhelm(p, R, b, free_perm=(2, 2, 2, 3, 3, 3)) for p, b in
                   zip(prefixes, last_write)], "Alg 2, multiset of 6 ignores")
    big(loaded, Overwhelm((1, 2, 0), R, 0, free_cmp="<=", free=40, over=IGNORE_TOKENS),
        "prefix W1 I0 W0, free <= 40 over ignores")
    big(loaded, Overwhelm((1, 2, 0), R, 0, free_cmp="<=", free=60, over=IGNORE_TOKENS),
        "prefix W1 I0 W0, free <= 60 over ignores")
    growth(loaded, lambda n: Overwhelm((1, 2, 0), R, 0, free_cmp="<=", free=n,
                                       over=IGNORE_TOKENS), (5, 10, 20, 40, 60), "ignores")


def families(quick: bool):
    """Rule overwhelm_family (Algorithm 1 with LayerNorm/MLP/RoPE bounds)."""
    small = load_model(MODELS / "maxany_v6_k6_ln_mlp_rope_seed0.pt")
    print("\n== maxany_v6_k6_ln_mlp_rope_seed0.pt (LN + 2 heads + MLP + RoPE, v=6, n_ctx=6) ==")
    tally(small, [Overwhelm((m,), q, m, free_cmp="<=", free=3) for m in range(6) for q in range(6)],
          "prefix [m], free <= 3 (all tokens), output m")
    tally(small, [Overwhelm((m,), q, m, free_cmp="<=", free=4, over=tuple(range(m + 1)))
                  for m in range(6) for q in range(6)], "prefix [m], free <= 4 over [0..m]")
    tally(small, [Overwhelm((a, b), q, max(a, b), free_cmp="<=", free=3)
                  for a in range(6) for b in range(6) for q in (0, 5)],
          "prefix [a, b], free <= 3 (all tokens), output max(a, b)")
    demo = load_model(MODELS / "maxany_v16_k16_ln_mlp_rope_seed0.pt")
    print("\n== maxany_v16_k16_ln_mlp_rope_seed0.pt (LN + 2 heads + MLP(64) + RoPE, v=16, "
          "n_ctx=16) ==")
    step = 3 if quick else 1
    tally(demo, [Overwhelm((m,), 3, m, free_cmp="<=", free=2, over=tuple(range(m + 1)))
                 for m in range(0, 16, step)], "prefix [m], free <= 2 over [0..m], output m")
    tally(demo, [Overwhelm((m,), 3, m, free_cmp="==", free=3) for m in range(0, 16, step)],
          "prefix [m], free == 3 (all tokens; true only for m = 15)")
    tally(demo, [Overwhelm((15,) * r, q, 15, free_cmp="<=", free=4) for r in (1, 2, 3)
                 for q in (0, 7, 15)], "prefix [15]*r, free <= 4 (all tokens)", brute=not quick)
    rng = np.random.default_rng(2)
    perms = [tuple(sorted(int(t) for t in rng.integers(0, 16, size=5))) for _ in range(8)]
    tally(demo, [Overwhelm((15, 15), 3, 15, free_perm=x) for x in perms],
          "free_perm of 5 tokens (assignment duals)")
    perm_vs_free(small, demo)
    for r, n in ((1, 8), (2, 9), (3, 12)):
        big(demo, Overwhelm((15,) * r, 3, 15, free_cmp="<=", free=n),
            f"prefix [15]*{r}, free <= {n}")
    growth(demo, lambda n: Overwhelm((15, 15, 15), 3, 15, free_cmp="<=", free=n),
           (2, 6, 12) if quick else (1, 2, 4, 6, 8, 10, 12), "prefix [15]*3, free <= n")
    print("\n== Algorithm 1 with family bounds vs the exact attention-only rule "
          "(maxany_v64_k10_seed0.pt) ==")
    att = load_model(MODELS / "maxany_v64_k10_seed0.pt")
    claims = [Overwhelm((m,), 5, m, free_cmp="<=", free=3, over=tuple(range(m + 1)))
              for m in range(3, 64, 8 if quick else 4)]
    tally(att, claims, "overwhelm_free (exact)", brute=False)
    tally(att, claims, "overwhelm_family (boxes)", brute=False, family_rule=True)


def perm_vs_free(small, demo):
    """Algorithm 2 (assignment potentials) vs Algorithm 1 over set(X), rule overwhelm_family."""
    rng = np.random.default_rng(5)
    for name, loaded, v, k in (("small", small, 6, 2), ("demo", demo, 16, 6)):
        perms, frees = [], []
        for _ in range(12):
            m = int(rng.integers(2, v))
            x = tuple(sorted(int(t) for t in rng.integers(max(0, m - 3), min(m + 2, v), size=k)))
            q = int(rng.integers(0, v))
            perms.append(Overwhelm((m, m), q, m, free_perm=x))
            frees.append(Overwhelm((m, m), q, m, free_cmp="==", free=k,
                                   over=tuple(sorted(set(x)))))
        tally(loaded, perms, f"{name}: Alg 2 on the family (free_perm, |X| = {k})",
              brute=name == "small")
        tally(loaded, frees, f"{name}: Alg 1 on the family (free == {k} over set(X))",
              brute=name == "small")


def main(argv=None) -> int:
    global ARITH
    from checker import arith

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer candidates")
    p.add_argument("--arith", default="mpmath", help="the checker's back-end: mpmath or arb")
    p.add_argument("--only", choices=("maxk", "maxany", "flipflop", "families"))
    args = p.parse_args(argv)
    ARITH = arith.get(args.arith)
    print(f"load: {os.getloadavg()}; arithmetic {args.arith}")
    sections = {"maxk": shipped_maxk, "maxany": maxany, "flipflop": flipflop,
                "families": families}
    for name, run in sections.items():
        if args.only in (None, name):
            run(args.quick)
    print(f"load: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
