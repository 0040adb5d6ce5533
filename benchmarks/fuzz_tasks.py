"""Adversarial audit of the tasks (issue 20): random small models x random built-in tasks that
fit them (and random labelled datasets), every accepted claim re-checked pair by pair.

Each model draws a family at random (one layer, with or without LN/RMS, MLP, rotary, several
heads; or several layers / a gated MLP, as tests/test_depth.py FAMILIES; fuzz_deep.make_model
does the drawing) with d_vocab and n_ctx chosen to fit a task drawn from max_of_k, min_of_k,
sort, modular_addition/multiplication (p), parity, cyclic (n), flipflop, or a random dataset
(duplicate rows, rows shorter than n_ctx, labels of any token).  `gen-cert --task/--dataset`
writes the forward_brute_force certificate, check-cert checks it (`--model` bound) under
mpmath and, when python-flint is installed, under Arb (a different verdict is a finding).

The truth is independent of the checker: the domain, scored positions and labels of each task
are written here again from spec/theorem.md §3, and each scored prefix's logits come from
fuzz_deep.oracle_logits (spec/theorem.md §2b in mpmath at 256 bits, causal: the logits at
position p of t are those at the last position of t[:p+1]).  A pair whose margin is within the
oracle's rounding is "undecided" and counts against the claim.

Mutants (each checked; an accepted one is re-checked against the truth of the task it states):
the claim +1 and +k (rule line and theorem), the task changed (parity <-> cyclic n=2 must be
accepted with the same count; min_of_k <-> max_of_k, modular addition <-> multiplication and
any other task that fits the dims), a task parameter changed (p, n), and for datasets: a row's
tokens or label changed (with and without re-hashing the theorem's digest), a scored position
added (same claim, and claim +1), a row dropped or duplicated, the certificate's dataset line
dropped or duplicated; and each mutant stating a task again with its claim one above that
task's truth (must be refused whatever the model's accuracy).  An accepted claim above the
confirmed count of the task it states, an accepted certificate whose dataset digest does not
match, or an accepted task that does not fit the model, is a FALSE THEOREM.

    python benchmarks/fuzz_tasks.py --models 40 --seed 2026
    python benchmarks/fuzz_audit.py --tasks 40 --seed 2026     # the same, from the red team
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import mpmath
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import fuzz_audit  # noqa: E402
import fuzz_deep  # noqa: E402

from checker.errors import Malformed, Rejected  # noqa: E402
from checker.modelspec import Dims  # noqa: E402
from generator.certify.strategies import NotApplicable  # noqa: E402
from generator.cli import generate  # noqa: E402
from generator.model import FamilyWeights  # noqa: E402
from generator.modelfile import save_model  # noqa: E402

BUILTIN = ("max_of_k", "min_of_k", "sort", "modular_addition", "modular_multiplication",
           "parity", "cyclic", "flipflop")
TASKS = BUILTIN + ("dataset",)


# ---- tasks, written again (spec/theorem.md §3) ------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Spec:
    """A task as the fuzzer understands it: name, params {p|n: int}, rows for a dataset."""

    name: str
    params: tuple = ()
    rows: tuple | None = None

    def arg(self) -> str:
        return self.name + "".join(f"{':' if i == 0 else ','}{f}={v}"
                                   for i, (f, v) in enumerate(self.params))

    def atoms(self, digest: str | None = None) -> str:
        out = f"task == {self.name}"
        for f, v in self.params:
            out += f" and {f} == {v}"
        if self.name == "dataset":
            out += f" and dataset == sha256:{digest}"
        return out


def fits(spec: Spec, v: int, k: int) -> bool:
    """Whether the task is defined for d_vocab v and n_ctx k (spec/theorem.md §3)."""
    prm = dict(spec.params)
    return {"max_of_k": True, "min_of_k": True, "dataset": True,
            "sort": k % 2 == 0 and k >= 2 and v >= 2,
            "modular_addition": k == 3 and v == prm.get("p", -1) + 1,
            "modular_multiplication": k == 3 and v == prm.get("p", -1) + 1,
            "parity": v == 2, "cyclic": v == prm.get("n", -1),
            "flipflop": v == 5}[spec.name]


def specs_for(v: int, k: int) -> list[Spec]:
    """Every built-in task that fits d_vocab v, n_ctx k."""
    out = [Spec("max_of_k"), Spec("min_of_k"), Spec("parity"), Spec("cyclic", (("n", v),)),
           Spec("sort"), Spec("flipflop"), Spec("modular_addition", (("p", v - 1),)),
           Spec("modular_multiplication", (("p", v - 1),))]
    return [s for s in out if fits(s, v, k)]


def pairs_of(spec: Spec, v: int, k: int) -> list[tuple[tuple, int]]:
    """Every scored (prefix, label) pair of the task, one per (input, position)."""
    name, prm = spec.name, dict(spec.params)
    if name == "dataset":
        return [(tuple(t[:p + 1]), lab) for t, p, lab in spec.rows]
    out = []
    if name in ("max_of_k", "min_of_k", "parity", "cyclic"):
        for t in itertools.product(range(v), repeat=k):
            if name == "max_of_k":
                out.append((t, max(t)))
            elif name == "min_of_k":
                out.append((t, min(t)))
            else:
                n = 2 if name == "parity" else prm["n"]
                out += [(t[:i + 1], sum(t[:i + 1]) % n) for i in range(k)]
    elif name == "sort":
        h = k // 2
        for x in itertools.product(range(v - 1), repeat=h):
            s = sorted(x)
            t = tuple(x) + (v - 1,) + tuple(s[:h - 1])
            out += [(t[:i + 1], s[i - h]) for i in range(h, k)]
    elif name in ("modular_addition", "modular_multiplication"):
        p = prm["p"]
        for a in range(p):
            for b in range(p):
                lab = (a + b) % p if name == "modular_addition" else (a * b) % p
                out.append(((a, b, p), lab))
    elif name == "flipflop":
        for t in itertools.product(*([range(2)] + [range(5)] * (k - 1))):
            last = t[0]
            for i in range(1, k):
                if t[i] <= 1:
                    last = t[i]
                if t[i] == 4:
                    out.append((t[:i + 1], last))
    return out


def random_dataset(rng, v: int, k: int) -> tuple:
    """Random rows (tokens, position, label): some shorter than n_ctx, some duplicated,
    labels of any token (right or wrong for any built-in task)."""
    rows = []
    for _ in range(int(rng.integers(1, 13))):
        length = int(rng.integers(1, k + 1))
        tokens = tuple(int(x) for x in rng.integers(0, v, length))
        rows.append((tokens, int(rng.integers(0, length)), int(rng.integers(0, v))))
        if rng.random() < 0.2:
            rows.append(rows[-1])
    return tuple(rows)


def dataset_text(rows) -> str:
    return "".join(" ".join(map(str, (*t, p, lab))) + "\n" for t, p, lab in rows)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---- models and the truth ---------------------------------------------------------------------

def pick_task(rng, name: str | None = None) -> tuple[Spec, int, int]:
    """A random task (or `name`) and a d_vocab, n_ctx it fits (small: every pair is
    re-checked)."""
    name = name or TASKS[int(rng.integers(len(TASKS)))]
    if name in ("max_of_k", "min_of_k", "dataset"):
        return Spec(name), int(rng.integers(2, 5)), int(rng.integers(2, 4))
    if name == "sort":
        return Spec(name), int(rng.integers(2, 5)), int(rng.choice([2, 4]))
    if name in ("modular_addition", "modular_multiplication"):
        p = int(rng.integers(1, 5))
        return Spec(name, (("p", p),)), p + 1, 3
    if name == "parity":
        return Spec(name), 2, int(rng.integers(2, 5))
    if name == "cyclic":
        n = int(rng.integers(2, 5))
        return Spec(name, (("n", n),)), n, int(rng.integers(2, 4))
    return Spec(name), 5, int(rng.integers(2, 4))  # flipflop


def make_model(rng, v: int, k: int, light: bool = False) -> tuple[FamilyWeights, str]:
    """fuzz_deep's random family (one layer or several, gated or not, hostile variants), at
    d_vocab v and n_ctx k; half the time forced to one layer (LN/MLP/RoPE/heads).  light (the
    CI slice): at most two layers and a gated MLP only on one layer."""
    fw, variant = fuzz_deep.make_model(rng)
    f = fw.dims.family
    if rng.random() < 0.5 and not f.gated_mlp:
        f = dataclasses.replace(f, n_layers=1)
    if light:
        f = dataclasses.replace(f, n_layers=1 if f.gated_mlp else min(f.n_layers, 2))
    if f.positional == "rotary":
        f = dataclasses.replace(f, n_ctx=k)
    dims = Dims(v, k, fw.dims.d_model, fw.dims.d_head, f)
    # re-draw at the new shapes with the same recipe (fuzz_deep.make_model's distributions)
    from checker.modelspec import parameter_table

    params = {}
    for p in parameter_table(f):
        shape = dims.shape_of(p.key)
        if p.short.endswith(".w"):
            a = 1 + 0.3 * rng.standard_normal(shape)
        elif p.short.endswith(".b") or p.short.split(".")[-1].startswith("b_"):
            a = rng.standard_normal(shape) * (3.0 if variant == "biased" else 0.3)
        else:
            a = rng.standard_normal(shape) * 2.5 / np.sqrt(dims.d_model) * \
                (10 ** rng.uniform(-3, 1.5) if variant == "scaled" else 1.0)
        params[p.key] = a
    if variant == "tie":
        u = params["unembed.W_U"]
        a, b = rng.choice(v, 2, replace=False)
        u[:, a] = u[:, b]
        params["unembed.b_U"][a] = params["unembed.b_U"][b]
    return FamilyWeights(dims=dims, params={key: np.asarray(x, np.float32)
                                            for key, x in params.items()}), variant


class Truth:
    """Per-prefix verdicts by fuzz_deep.oracle_logits (256 bits), cached."""

    def __init__(self, fw: FamilyWeights):
        self.fw, self.cache, self.evaluations = fw, {}, 0

    def logits(self, prefix):
        if prefix not in self.cache:
            self.evaluations += 1
            self.cache[prefix] = fuzz_deep.oracle_logits(self.fw, list(prefix))
        return self.cache[prefix]

    def verdict(self, prefix, label) -> str:
        logits = self.logits(prefix)
        margin = logits[label] - max(x for o, x in enumerate(logits) if o != label)
        size = max(abs(x) for x in logits) + 1
        if abs(margin) <= size * mpmath.ldexp(1, -fuzz_deep.UNDECIDED_BITS):
            return "undecided"
        return "correct" if margin > 0 else "wrong"

    def count(self, spec: Spec) -> tuple[int, int, Counter]:
        d = self.fw.dims
        verdicts = Counter(self.verdict(pfx, lab) for pfx, lab in pairs_of(spec, d.d_vocab,
                                                                           d.n_ctx))
        return verdicts["correct"], sum(verdicts.values()), verdicts


# ---- certificate edits ------------------------------------------------------------------------

def _objs(lines):
    return [json.loads(x) for x in lines]


def _dumps(objs):
    return [json.dumps(o, separators=(",", ":")) for o in objs]


def set_claim(lines, claim):
    objs = _objs(lines)
    for o in objs:
        if o.get("kind") == "rule":
            o["claim"] = claim
        if o.get("kind") == "header":
            head, _ = o["theorem"].rsplit("correct >= ", 1)
            o["theorem"] = head + f"correct >= {claim}"
    return _dumps(objs)


def set_task(lines, old: str, new: str):
    objs = _objs(lines)
    assert objs[0]["theorem"].startswith(old + " and d_vocab"), (objs[0]["theorem"], old)
    objs[0]["theorem"] = new + objs[0]["theorem"][len(old):]
    return _dumps(objs)


def set_dataset(lines, text: str, rehash: bool):
    objs = _objs(lines)
    data = next(o for o in objs if o.get("kind") == "dataset")
    old = sha(data["text"])
    data["text"] = text
    if rehash:
        objs[0]["theorem"] = objs[0]["theorem"].replace(old, sha(text))
    return _dumps(objs)


def dataset_line_edit(lines, how: str):
    """The certificate's dataset line dropped (later ids renumbered) or duplicated."""
    objs = _objs(lines)
    i = next(n for n, o in enumerate(objs) if o.get("kind") == "dataset")
    if how == "duplicated":
        return _dumps(objs[:i + 1] + [dict(objs[i])] + objs[i + 1:])
    out = objs[:i]
    for o in objs[i + 1:]:
        o = dict(o, id=o["id"] - 1)
        for key in ("by",):
            if key in o and o[key] > i:
                o[key] -= 1
        if "inputs" in o:
            o["inputs"] = {n: (x - 1 if x > objs[i]["id"] else x) for n, x in o["inputs"].items()}
        if "args" in o:
            o["args"] = [x - 1 if x > objs[i]["id"] else x for x in o["args"]]
        out.append(o)
    return _dumps(out)


# ---- the audit --------------------------------------------------------------------------------

@dataclasses.dataclass
class Findings:
    tally: fuzz_audit.Tally
    tasks: Counter = dataclasses.field(default_factory=Counter)
    exact: int = 0  # accepted claims equal to the truth (the rule is exact off near-ties)
    loose: list = dataclasses.field(default_factory=list)  # accepted claims below the truth
    inconsistencies: list = dataclasses.field(default_factory=list)  # e.g. parity vs cyclic 2
    pairs_rechecked: int = 0
    false_mutants: int = 0  # mutants whose theorem is false (by the truth): must be refused
    false_refused: int = 0
    not_applicable: list = dataclasses.field(default_factory=list)  # gen-cert's reasons

    def summary(self) -> dict:
        s = self.tally.summary()
        made = sum(n for kind, n in self.tally.mutants.items()
                   if not kind.endswith(" accepted"))
        accepted = sum(n for kind, n in self.tally.mutants.items() if kind.endswith(" accepted"))
        return {**s, "tasks": dict(sorted(self.tasks.items())),
                "pairs_rechecked": self.pairs_rechecked, "claims_exact": self.exact,
                "claims_below_truth": len(self.loose), "mutants_made": made,
                "mutants_refused": made - accepted, "mutants_false": self.false_mutants,
                "false_mutants_refused": self.false_refused,
                "inconsistencies": len(self.inconsistencies)}


def _check(find, cert, path, lines, what):
    cert.write_text("\n".join(lines) + "\n")
    return fuzz_audit.check_both(cert, path, find.tally, what)


def mutants(spec: Spec, lines, claim: int, v: int, k: int, rng, others_max: int = 2):
    """(kind, lines, the Spec the mutated theorem states or None if it must be refused,
    expected count or None)."""
    digest = sha(dataset_text(spec.rows)) if spec.name == "dataset" else None
    here = spec.atoms(digest)
    for e in (1, int(rng.integers(2, 6))):
        yield f"claim+{'1' if e == 1 else 'k'}", set_claim(lines, claim + e), spec, None
    if spec.name == "dataset":
        rows = list(spec.rows)
        i = int(rng.integers(len(rows)))
        t, p, lab = rows[i]
        new_label = rows[:i] + [(t, p, (lab + 1 + int(rng.integers(v - 1))) % v)] + rows[i + 1:]
        j = int(rng.integers(len(t)))
        t2 = t[:j] + ((t[j] + 1) % v,) + t[j + 1:]
        new_tokens = rows[:i] + [(t2, p, lab)] + rows[i + 1:]
        length = int(rng.integers(1, k + 1))
        extra = (tuple(int(x) for x in rng.integers(0, v, length)), int(rng.integers(length)),
                 int(rng.integers(v)))
        for kind, new in (("row label changed", new_label), ("row tokens changed", new_tokens),
                          ("row dropped", rows[:i] + rows[i + 1:]),
                          ("row duplicated", rows[:i + 1] + rows[i:]),
                          ("position added", rows + [extra])):
            if not new:
                continue
            text = dataset_text(new)
            mutated = Spec("dataset", (), tuple(new))
            yield kind, set_dataset(lines, text, True), mutated, None
            if kind == "position added":
                yield kind + " claim+1", set_claim(set_dataset(lines, text, True), claim + 1), \
                    mutated, None
            else:
                yield kind + " not rehashed", set_dataset(lines, text, False), None, None
        for how in ("dropped", "duplicated"):
            yield f"dataset line {how}", dataset_line_edit(lines, how), None, None
        return
    # the task changed: the same-semantics pair, then others that fit the dims
    prm = dict(spec.params)
    if spec.name == "parity":
        yield "parity->cyclic n=2", set_task(lines, here, "task == cyclic and n == 2"), \
            Spec("cyclic", (("n", 2),)), claim
    if spec.name == "cyclic" and prm["n"] == 2:
        yield "cyclic n=2->parity", set_task(lines, here, "task == parity"), Spec("parity"), claim
    swap = {"min_of_k": "max_of_k", "max_of_k": "min_of_k",
            "modular_addition": "modular_multiplication",
            "modular_multiplication": "modular_addition"}
    if spec.name in swap:
        other = Spec(swap[spec.name], spec.params)
        yield f"{spec.name}->{other.name}", set_task(lines, here, other.atoms()), other, None
    others = [s for s in specs_for(v, k) if s.name != spec.name and s.name != swap.get(spec.name)
              and {spec.name, s.name} != {"parity", "cyclic"}]
    for j in rng.permutation(len(others))[:others_max]:
        other = others[int(j)]
        yield "task changed", set_task(lines, here, other.atoms()), other, None
    # a task parameter changed (the task no longer fits the model: must be refused)
    for f, val in spec.params:
        for new in (val + 1, val - 1):
            if new >= 1:
                bad = Spec(spec.name, ((f, new),))
                yield "task parameter changed", set_task(lines, here, bad.atoms()), \
                    (bad if fits(bad, v, k) else None), None
    # a scored position added: a task scoring more positions, the same claim plus one
    if spec.name in ("max_of_k", "min_of_k") and fits(Spec("cyclic", (("n", v),)), v, k):
        more = Spec("cyclic", (("n", v),))
        yield "scored positions added claim+1", set_claim(
            set_task(lines, here, more.atoms()), claim + 1), more, None


def sharpened(edits, truth: Truth, light: bool = False):
    """Each mutant, then (for those stating a task) the same with the claim set one above the
    truth of the task it states: the sharpest false claim, whatever the model's accuracy
    (light: only for a task changed and a row's label changed)."""
    for kind, mutated, states, expect in edits:
        yield kind, mutated, states, expect
        if light and not ("->" in kind or kind in ("task changed", "row label changed")):
            continue
        if states is not None and not kind.startswith("claim+"):
            yield (kind + " claim=truth+1", set_claim(mutated, truth.count(states)[0] + 1),
                   states, None)


def audit(fw, spec: Spec, tag: str, work: Path, find: Findings, rng, light: bool = False
          ) -> None:
    tally = find.tally
    tally.models += 1
    find.tasks[spec.name] += 1
    path = work / f"{tag}.pt"
    save_model(path, fw, None)
    d = fw.dims
    v, k = d.d_vocab, d.n_ctx
    kwargs = {}
    if spec.name == "dataset":
        data = work / f"{tag}.txt"
        data.write_text(dataset_text(spec.rows), newline="\n")
        kwargs["dataset"] = str(data)
    else:
        kwargs["task"] = spec.arg()
    name = "forward-brute-force"
    try:
        lines, _ = generate(str(path), name, float_shadow=bool(rng.random() < 0.5), **kwargs)
    except NotApplicable as err:
        tally.certificates[name, "not applicable"] += 1
        find.not_applicable.append(f"{tag}: {err}"[:300])
        return
    except Exception as err:  # noqa: BLE001 -- a generator crash is a finding
        tally.certificates[name, "generator error"] += 1
        tally.generator_errors.append(f"{tag}: {type(err).__name__}: {err}"[:300])
        return
    cert = work / f"{tag}.jsonl"
    try:
        report = _check(find, cert, path, lines, tag)
    except (Rejected, Malformed) as err:
        tally.certificates[name, type(err).__name__.lower()] += 1
        tally.generator_errors.append(f"{tag}: checker refused: {err}"[:300])
        return
    tally.certificates[name, "accepted"] += 1
    truth = Truth(fw)
    claim = report.facts.correct
    tally.claimed += claim
    verify(find, tag, spec, claim, report, truth)
    for kind, mutated, states, expect in sharpened(mutants(spec, lines, claim, v, k, rng,
                                                                  1 if light else 2),
                                                        truth, light):
        tally.mutants[kind] += 1
        what = f"{tag} mutant {kind}"
        stated = next(json.loads(x)["claim"] for x in mutated if '"kind":"rule"' in x)
        false = states is None or stated > truth.count(states)[0]
        find.false_mutants += false
        try:
            rep = _check(find, cert, path, mutated, what)
        except (Rejected, Malformed) as err:
            find.false_refused += false
            if expect is not None:
                find.inconsistencies.append(f"{what}: refused ({err})"[:300])
            continue
        tally.mutants[kind + " accepted"] += 1
        if states is None:
            tally.false_theorems.append(f"{what}: accepted (claims {rep.facts.correct}), "
                                        "but the theorem's task or dataset is not the model's")
            continue
        verify(find, what, states, rep.facts.correct, rep, truth, counted=False)
        if expect is not None and rep.facts.correct != expect:
            find.inconsistencies.append(f"{what}: count {rep.facts.correct}, expected {expect}")


def verify(find, what, spec, claim, report, truth, counted=True) -> None:
    tally = find.tally
    confirmed, pairs, verdicts = truth.count(spec)
    find.pairs_rechecked += pairs
    tally.sequences_rechecked += pairs
    if claim > confirmed:
        tally.false_theorems.append(f"{what}: claims {claim} of {spec.arg()}, the forward pass "
                                    f"confirms {confirmed} ({dict(verdicts)})")
    total = getattr(report.facts, "total", None)
    if total is not None and total != pairs:
        find.inconsistencies.append(f"{what}: the checker's denominator {total}, "
                                    f"pairs of {spec.arg()}: {pairs}")
    if counted:
        if claim == confirmed:
            find.exact += 1
        elif claim < confirmed:
            find.loose.append(f"{what}: claims {claim}, confirmed {confirmed} {dict(verdicts)}")


def run(models: int, seed: int, progress: bool = False, in_turn: bool = False,
        light: bool = False) -> Findings:
    """Audit `models` models deterministically from `seed`; in_turn: the tasks in turn (every
    task at least once when models >= len(TASKS)); light: smaller models and one other task
    per certificate (the CI slice)."""
    find = Findings(fuzz_audit.Tally())
    with tempfile.TemporaryDirectory(prefix="maxk-fuzz-tasks-") as tmp:
        for n in range(models):
            rng = np.random.default_rng([seed, n, 20])
            spec, v, k = pick_task(rng, TASKS[n % len(TASKS)] if in_turn else None)
            if light and spec.name in ("flipflop", "cyclic"):  # the largest trees: 2 positions
                k = 2
            fw, variant = make_model(rng, v, k, light)
            if spec.name == "dataset":
                spec = Spec("dataset", (), random_dataset(rng, v, k))
            f = fw.dims.family
            tag = (f"s{seed}_{n}_{spec.name}_L{f.n_layers}{'g' if f.gated_mlp else ''}"
                   f"_{variant}")
            audit(fw, spec, tag, Path(tmp), find, rng, light)
            if progress and (n + 1) % 5 == 0:
                print(f"  {n + 1}/{models} models, {len(find.tally.false_theorems)} false "
                      "theorems", file=sys.stderr)
    return find


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=40)
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args(argv)
    started = time.monotonic()
    find = run(args.models, args.seed, progress=True)
    print(json.dumps(find.summary(), indent=1))
    for line in (find.tally.false_theorems + find.tally.generator_errors
                 + find.tally.backend_disagreements + find.inconsistencies + find.loose
                 + find.not_applicable):
        print(line)
    print(f"{time.monotonic() - started:.0f} s")
    return 1 if find.tally.false_theorems else 0


if __name__ == "__main__":
    sys.exit(main())
