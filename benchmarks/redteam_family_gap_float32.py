"""Red team for rule family_gap under the float32 semantics (issue 24): on the small LN family
models of tests/family_gap_models.py (and a planted near-tie), the float32 certificate and its
mutants — the claim raised, each class's gap lowered, classes the float32 certificate left out
added with the real mirror's hints at every F32 slack, λ hints shrunk, sequences added to the
residue with the claim raised, the real certificate relabelled float32.  Every accepted
certificate is checked against the truth: each sequence it counts must have strict argmax
max(t) in five float32 evaluations (soundness_helpers.family_float32_evaluations), and its
claim must not exceed the number of such sequences.  Prints counts; exit 1 on a false theorem.

    PYTHONPATH=$PWD python benchmarks/redteam_family_gap_float32.py --mutants 6
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import test_float32_family_gap as t32  # noqa: E402
from family_gap_models import model, rule_line  # noqa: E402

from checker.errors import Malformed, Rejected  # noqa: E402
from checker.rules import family_gap as rule  # noqa: E402
from generator.certify.strategies import family_gap as strategy  # noqa: E402

NAMES = ["ln_mlp_rope_2heads_k4", "ln_3heads_k2", "negative_ln_gains", "attends_to_smallest",
         "ln_mlp_k4_well_trained", "near_zero_variance", "rare_mlp_unit"]


def edit(lines, fn, delta=0):
    return t32._with_rule(list(lines), fn, delta)


def mutants(w, real, f32_lines, rng, n):
    dims = w.dims
    hints = rule_line(f32_lines)["hints"]
    classes = hints["classes"]
    yield "claim+1", edit(f32_lines, lambda h: None, 1)
    yield "real relabelled", t32.relabelled(list(real), "float32")
    yield "claim-1 (true)", edit(f32_lines, lambda h: None, -1)
    raised = [i for i, c in enumerate(classes) if isinstance(c[2], list)
              and len(c[2]) < dims.n_ctx - 1 and c[3] < c[1]]
    for i in rng.permutation(raised)[:n]:  # a smaller class: still proved, fewer sequences
        def high(h, i=int(i)):
            h["classes"][i][3] += 1
        c = classes[int(i)]
        fixed = tuple(c[2])
        fewer = (rule.class_size(dims, c[1], fixed, c[3] + 1)
                 - rule.class_size(dims, c[1], fixed, c[3]))
        yield f"gap raised {c[:4]}", edit(f32_lines, high, fewer)
    lowered = [i for i, c in enumerate(classes) if c[3] > 1]
    for i in rng.permutation(lowered)[:n]:
        def low(h, i=int(i)):
            h["classes"][i][3] -= 1
        c = classes[int(i)]
        fixed = c[2]["first"] if isinstance(c[2], dict) else tuple(c[2])
        extra = (rule.class_size(dims, c[1], fixed, c[3] - 1)
                 - rule.class_size(dims, c[1], fixed, c[3]))
        yield f"gap lowered {c[:4]}", edit(f32_lines, low, extra)
    have = {(c[0], c[1], tuple(c[2]) if isinstance(c[2], list) else c[2]["first"])
            for c in classes}
    tab = strategy.Tables(w)
    missing = [(q, m, s) for q, m, s in strategy.class_keys(dims.d_vocab, dims.n_ctx)
               if (q, m, s) not in have and rule.signature(dims, q, m, s, 1) is None
               and not any(c[0] == q and c[1] == m and isinstance(c[2], dict) for c in classes)]
    for j in rng.permutation(len(missing))[:n]:
        q, m, s = missing[int(j)]
        for rel in (*strategy.F32_SLACKS, 1e-9):
            hint = strategy.attempt(tab, q, m, s, 1, rel)
            if hint is None:
                continue
            entry = strategy.encode([(q, m, s, 1, hint)])["classes"][0]
            size = rule.class_size(dims, m, s, 1)
            inside = [t for t in hints.get("residue", [])
                      if rule.in_class({(q, m, s): 1}, tuple(t))]

            def add(h, entry=entry, inside=inside):
                h["residue"] = [t for t in h.get("residue", []) if t not in inside]
                if not h["residue"]:
                    del h["residue"]
                h["classes"] = sorted(h["classes"] + [entry], key=lambda c: (
                    c[0], c[1], rule.order_key(c[2]["first"] if isinstance(c[2], dict)
                                               else tuple(c[2]))))
            yield f"class added {(q, m, s)} rel {rel}", edit(f32_lines, add, size - len(inside))
            break
    for i in rng.permutation(len(classes))[:n]:
        def shrink(h, i=int(i)):
            c = h["classes"][i]
            diff = np.frombuffer(base64.b64decode(c[6]), "<f8").copy()
            diff -= 1e-3 * (1 + np.abs(diff))  # tighter upper ends of the logit differences
            c[6] = base64.b64encode(diff.astype("<f8").tobytes()).decode()
        yield f"diff hints tightened {classes[int(i)][:4]}", edit(f32_lines, shrink)
    counted = {tuple(x) for x in t32.counted(dims, f32_lines)}
    others = [t for t in itertools.product(range(dims.d_vocab), repeat=dims.n_ctx)
              if t not in counted]
    keyed = {(c[0], c[1], tuple(c[2])): c[3] for c in classes if isinstance(c[2], list)}
    merged = {(c[0], c[1], c[2]["first"]): c[3] for c in classes if isinstance(c[2], dict)}
    others = [t for t in others if not rule.in_class(keyed, t, merged)]
    for j in rng.permutation(len(others))[:n]:
        t = list(others[int(j)])

        def add_res(h, t=t):
            h["residue"] = sorted(h.get("residue", []) + [t])
        yield f"residue added {t}", edit(f32_lines, add_res, 1)


def members(dims, lines) -> np.ndarray:
    """Every sequence of the rule line's classes and residue."""
    hints = rule_line(lines)["hints"]
    seqs = []
    for q, m, s, g, *_ in hints["classes"]:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        seqs += list(itertools.product(*rule.slots(dims, q, m, fixed, g)))
    seqs += [tuple(t) for t in hints.get("residue", [])]
    return np.array(seqs, dtype=np.int64).reshape(-1, dims.n_ctx)


def truth(w, lines) -> tuple[bool, str]:
    """(sound, why) for an accepted certificate: its claim is at most the number of its
    classes' and residue's sequences that are float32-correct in every evaluation run (the
    rule counts no other sequence)."""
    dims = w.dims
    seqs = members(dims, lines)
    ok = t32.float32_correct(w, seqs) if len(seqs) else np.ones(0, bool)
    claim = rule_line(lines)["claim"]
    if claim > int(ok.sum()):
        bad = seqs[~ok][0].tolist() if (~ok).any() else None
        return False, f"claims {claim}, {int(ok.sum())} of its sequences float32-correct " \
                      f"(e.g. wrong: {bad})"
    return True, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=4, help="mutants of each kind per model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", type=int, default=len(NAMES),
                        help=f"how many of the {len(NAMES)} models (the near-tie always)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    counts = {"certificates": 0, "mutants": 0, "accepted": 0, "rejected": 0,
              "accepted_sound": 0, "false_theorems": 0}
    findings = []
    started = time.monotonic()
    models = [(name, model(name)) for name in NAMES[:args.models]] + [
        ("near_tie", t32._near_tie())]
    for name, w in models:
        real, f32_lines = t32.lines_of(w, "real"), t32.lines_of(w, "float32")
        t32.replay(f32_lines)
        counts["certificates"] += 1
        sound, why = truth(w, f32_lines)
        if not sound:
            findings.append(f"{name}: the generator's certificate: {why}")
        for what, lines in mutants(w, real, f32_lines, rng, args.mutants):
            counts["mutants"] += 1
            try:
                t32.replay(lines)
            except (Rejected, Malformed):
                counts["rejected"] += 1
                continue
            counts["accepted"] += 1
            sound, why = truth(w, lines)
            if sound:
                counts["accepted_sound"] += 1
            else:
                counts["false_theorems"] += 1
                findings.append(f"{name}: {what}: {why}")
        print(f"{name}: {counts} ({time.monotonic() - started:.0f} s)", flush=True)
    print(json.dumps(counts))
    for f in findings:
        print("  FALSE THEOREM:", f)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
