"""The pure-sequence ceiling of a Max-of-K model (issue 25): the count the cubic rule's
theorem would give if every check were exact.

The cubic rule (spec/rules.md §cubic) covers the class (q, m, c) — query q, max m, c
non-max tokens among the k−1 other positions — by the set G of tokens t' < m that are
"good": it proves every sequence with tokens from G on the c positions correct through the
*pure* sequences t'_P (t' on a placement P of c positions, m elsewhere).  So no proof of
that shape counts more than

    N* = Σ_{m} Σ_{q ≤ m} [ z*_{q,m} + Σ_c C(k−1, c)·|G*_{q,m,c}|^c ]

where G*_{q,m,c} holds the t' whose pure sequences t'_P are correct (float64, strict argmax)
for EVERY placement P of size c, and z*_{q,m} = 1 if (m, …, m, q) is.  N* is an
evaluation, not a proof (a mixed sequence of good tokens may still be wrong; N* is then
above what is true, which the report shows against the exact count).

    python benchmarks/pure_ceiling.py MODEL.pt [CERT.jsonl ...]

prints N*, the exact count, N*/exact, and for each certificate its verified count and
the gap to N* (checked with check-cert --arith arb).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from math import comb
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pure_ceiling(weights) -> int:
    """N* above, for an attention-only Max-of-K model (generator.model.ModelWeights)."""
    from generator.model import logits_float64

    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    m, q, t = (a.ravel() for a in np.meshgrid(np.arange(v), np.arange(v), np.arange(v),
                                               indexing="ij"))
    keep = (q <= m) & (t < m)
    m, q, t = m[keep], q[keep], t[keep]
    total = 0
    # c = 0: the sequence (m, …, m, q)
    for mm in range(v):
        qs = np.arange(mm + 1)
        seqs = np.full((len(qs), k), mm)
        seqs[:, -1] = qs
        total += int(_correct(logits_float64(weights, seqs), np.full(len(qs), mm)).sum())
    for c in range(1, k):
        ok = np.ones(len(m), dtype=bool)
        allowed = (q == m) if c == k - 1 else np.ones(len(m), dtype=bool)
        for placement in itertools.combinations(range(k - 1), c):
            seqs = np.repeat(m[:, None], k, axis=1)
            seqs[:, list(placement)] = t[:, None]
            seqs[:, -1] = q
            ok &= _correct(logits_float64(weights, seqs), m)
        good = np.zeros((v, v), dtype=np.int64)  # (m, q) -> |G*|
        np.add.at(good, (m[ok & allowed], q[ok & allowed]), 1)
        total += comb(k - 1, c) * int((good.astype(object) ** c).sum())
    return total


def _correct(logits: np.ndarray, target: np.ndarray) -> np.ndarray:
    rows = np.arange(len(target))
    right = logits[rows, target].copy()
    logits = logits.copy()
    logits[rows, target] = -np.inf
    return right > logits.max(axis=1)


def verified_count(cert: Path, model: Path) -> int | None:
    out = subprocess.run([sys.executable, "-m", "checker.cli", str(cert), "--model", str(model),
                          "--arith", "arb", "--json"], capture_output=True, text=True,
                         cwd=ROOT)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)["correct"]


def main(argv=None) -> int:
    from generator.ground_truth import count_correct
    from generator.modelfile import load_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("certs", type=Path, nargs="*")
    args = ap.parse_args(argv)
    weights = load_model(args.model).weights
    ceiling = pure_ceiling(weights)
    exact = count_correct(weights, progress=False).correct
    print(f"{args.model.name}: pure-sequence ceiling N* = {ceiling}, exact = {exact}, "
          f"N*/exact = {ceiling / exact:.5f}")
    for cert in args.certs:
        n = verified_count(cert, args.model)
        if n is None:
            print(f"  {cert.name}: not verified")
        else:
            print(f"  {cert.name}: {n} (/exact {n / exact:.5f}, /N* {n / ceiling:.5f}, "
                  f"N* − n = {ceiling - n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
