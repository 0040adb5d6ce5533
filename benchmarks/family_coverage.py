"""Which sequences a family_gap certificate covers, and why the others are not covered (issue 23:
where the bound's missing mass is, to aim the generator at it).

    python benchmarks/family_coverage.py CERT [CERT ...]

For each certificate it enumerates all v^k sequences (numpy, ~1.5 CPU-minutes and ~1 GB at
v = 64, k = 4) and reports those in a gap class C(q, m, S, g) or merged class M(q, m, i0, g)
(spec/rules.md Lemmas G1, G4, G5), in a box (Lemmas B1, B3), in the residue, and their total,
which must equal the certificate's claim when every residue sequence is certified (the generator
lists only sequences it expects the checker to certify). The sequences covered by nothing are
split by *why*:

- `no class`: the key (q, m, S) has no class and its block (q, m, min S) no merged class;
- `band = j`: it has one, with gap g, and j of its non-query tokens other than m lie in the band
  (m − g, m), above the class's alphabet [0, m − g]. A box covers sequences with one token in
  the band; none covers two.

Not a proof: untrusted benchmark code that reads the hints as the checker's lemmas define the
classes. Correctness is not evaluated: an uncovered sequence may be one the model gets wrong
(models.json's exact count bounds how many).
"""
from __future__ import annotations

import argparse
import json
import re

import numpy as np


def read_rule(path: str) -> tuple[dict, int, int, int]:
    """(hints, claim, d_vocab, n_ctx) of the certificate's family_gap line."""
    v = k = None
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "theorem" in d:
                v = int(re.search(r"d_vocab == (\d+)", d["theorem"]).group(1))
                k = int(re.search(r"n_ctx == (\d+)", d["theorem"]).group(1))
            if d.get("rule") == "family_gap":
                return d["hints"], d["claim"], v, k
    raise SystemExit(f"{path}: no family_gap line")


def sequences(v: int, k: int) -> np.ndarray:
    """All v^k sequences in lexicographic order, shape (v^k, k)."""
    idx = np.arange(v ** k, dtype=np.int64)
    return np.stack([(idx // v ** (k - 1 - i)) % v for i in range(k)], axis=1).astype(np.int16)


def coverage(hints: dict, v: int, k: int) -> dict:
    """Counts of covered sequences by kind, and of uncovered ones by reason (module docstring).

    Postcondition: class + merged + box + residue = covered (the kinds are disjoint: Lemmas G2,
    G5(d), B2, and the residue is outside every class by G4 / B3) -- asserted.
    """
    t = sequences(v, k)
    q, m, free = t[:, k - 1], t.max(axis=1), t[:, :k - 1]
    is_m = free == m[:, None]
    key = (is_m * (1 << np.arange(k - 1))).sum(axis=1)  # S as a bit mask
    first = np.where(is_m.any(axis=1), is_m.argmax(axis=1), 0)
    other = np.where(is_m, -1, free).max(axis=1)  # largest non-query token other than m
    g_class = np.zeros((v, v, 1 << (k - 1)), np.int32)
    g_merged = np.zeros((v, v, k - 1), np.int32)
    for c in hints["classes"]:
        cq, cm, s, g = c[:4]
        if isinstance(s, dict):
            g_merged[cq, cm, s["first"]] = g
        else:
            g_class[cq, cm, sum(1 << i for i in s)] = g
    g_u = g_class[q, m, key]
    g_m = np.where(is_m.any(axis=1), g_merged[q, m, first], 0)
    assert not np.any((g_u > 0) & (g_m > 0)), "a key with both a class and a merged class"
    in_class = (g_u > 0) & (other <= m - g_u)
    in_merged = (g_m > 0) & (other <= m - g_m)
    in_box = np.zeros(len(t), bool)
    for b in hints.get("boxes", []):
        bq, bm, sets = b[:3]
        member = (q == bq) & (m == bm)
        for i, (lo, hi, e) in enumerate(sets):
            member &= ((free[:, i] >= lo) & (free[:, i] <= hi)) | ((e == 1) & (free[:, i] == bm))
        assert not np.any(member & (in_box | in_class | in_merged)), "a box overlaps"
        in_box |= member
    in_residue = np.zeros(len(t), bool)
    if hints.get("residue"):
        r = np.array(hints["residue"], dtype=np.int64)
        in_residue[(r * v ** np.arange(k - 1, -1, -1)).sum(axis=1)] = True
    covered = in_class | in_merged | in_box | in_residue
    out = {"sequences": len(t), "class": int(in_class.sum()), "merged": int(in_merged.sum()),
           "box": int(in_box.sum()), "residue": int(in_residue.sum()),
           "covered": int(covered.sum())}
    assert out["covered"] == out["class"] + out["merged"] + out["box"] + out["residue"]
    g = np.maximum(g_u, g_m)
    band = ((free > (m - g)[:, None]) & ~is_m).sum(axis=1)
    loose = ~covered
    out["uncovered"] = int(loose.sum())
    out["no class"] = int((loose & (g == 0)).sum())
    for j in range(1, k):
        out[f"band = {j}"] = int((loose & (g > 0) & (band == j)).sum())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("certificates", nargs="+")
    args = p.parse_args(argv)
    for path in args.certificates:
        hints, claim, v, k = read_rule(path)
        c = coverage(hints, v, k)
        print(f"{path}: d_vocab {v}, n_ctx {k}, claim {claim:,}")
        for name, n in c.items():
            share = f"  ({n / c['uncovered']:.1%} of the uncovered)" if (
                name == "no class" or name.startswith("band")) and c["uncovered"] else ""
            print(f"  {name:<10} {n:>12,}{share}")
        if c["covered"] != claim:
            print(f"  note: covered {c['covered']:,} != claim {claim:,} "
                  "(not every residue sequence certified)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
