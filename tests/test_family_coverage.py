"""benchmarks/family_coverage.py (issue 23): its counts against a sequence-by-sequence reading of
the lemmas' definitions (G1, G5, B1, G4) on hand-made hints, and against the checker's own count
on the shipped v8 family_gap certificate."""

from __future__ import annotations

import copy
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import family_coverage  # noqa: E402

V, K = 6, 4
HINTS = {
    "classes": [[2, 5, [0], 2], [1, 5, {"first": 1}, 3], [0, 3, [1, 2], 1]],
    # t0 = 5, t1 = 4 (in class [2, 5, [0], 2]'s band (3, 5)), t2 in [0, 2]
    "boxes": [[2, 5, [[0, -1, 1], [4, 4, 0], [0, 2, 0]]]],
    "residue": [[5, 4, 3, 2]],
}


def reason(t: tuple, hints: dict) -> str:
    """The kind covering t, or why none does, straight from the definitions."""
    q, m, free = t[-1], max(t), t[:-1]
    s = [i for i, x in enumerate(free) if x == m]
    others = [x for x in free if x != m]
    if list(t) in hints["residue"]:
        return "residue"
    for bq, bm, sets in hints["boxes"]:
        if (bq, bm) == (q, m) and all(lo <= x <= hi or (e and x == m)
                                      for x, (lo, hi, e) in zip(free, sets)):
            return "box"
    g = 0
    for cq, cm, key, cg in hints["classes"]:
        if (cq, cm) != (q, m):
            continue
        if isinstance(key, dict) and s and key["first"] == s[0]:
            g, kind = cg, "merged"
        elif key == s and not isinstance(key, dict):
            g, kind = cg, "class"
    if not g:
        return "no class"
    if all(x <= m - g for x in others):
        return kind
    return f"band = {sum(m - g < x < m for x in others)}"


def test_counts_match_the_definitions():
    got = family_coverage.coverage(HINTS, V, K)
    want = {}
    for t in itertools.product(range(V), repeat=K):
        r = reason(t, HINTS)
        want[r] = want.get(r, 0) + 1
    for name in ("class", "merged", "box", "residue", "no class", "band = 1", "band = 2",
                 "band = 3"):
        assert got[name] == want.get(name, 0), (name, got, want)
    assert got["box"] == 3 and got["residue"] == 1 and got["class"] == 16 + 3 and got["merged"] > 0
    assert got["covered"] + got["uncovered"] == V ** K


def test_shipped_certificate_coverage_is_its_claim():
    """The checker accepted this claim: the analysis counts the same sequences."""
    hints, claim, v, k = family_coverage.read_rule(
        str(ROOT / "certs" / "max3_v8_ln_mlp_rope_seed0.family-gap.jsonl"))
    c = family_coverage.coverage(hints, v, k)
    assert (v, k) == (8, 3) and c["covered"] == claim == 512
    dropped = copy.deepcopy(hints)
    q, m, s, g = dropped["classes"].pop(40)[:4]
    lost = (m - g + 1) ** (k - 1 - len(s))
    d = family_coverage.coverage(dropped, v, k)
    assert d["covered"] == claim - lost and d["no class"] == lost
