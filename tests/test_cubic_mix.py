"""Rule cubic_mix (spec/rules.md §cubic_mix): soundness sequence by sequence, the exact
counting, its hints and mutants.

The enumeration tests certify small models with gen-cert's `cubic-mix`, have check-cert
accept the certificate under every back-end, then re-run the rule with `record` to get
every class's exact bounds, enumerate every tuple of every class, recount the tuples whose
exact sum is below 0 (Fractions, independent of the rule's two-pointer count), and confirm
with an independent float64 forward pass that each counted sequence is correct.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import random
from fractions import Fraction

import numpy as np
import pytest
from soundness_helpers import accepted_inputs, certify, random_scaled, random_weights, trained

from checker.arith import MPMATH
from checker.cli import main as check_cert
from checker.modelspec import Dims
from checker.rules import cubic_mix
from generator.ground_truth import count_correct
from generator.model import logits_float64

ARITHMETICS = ["mpmath"] + (["arb"] if importlib.util.find_spec("flint") else [])
UNDECIDED = 1e-9  # a float64 margin this small cannot decide the real model's verdict


CASES = {
    "random-scaled-90": lambda: random_scaled(90),
    "random-scaled-109": lambda: random_scaled(109),
    "v8k3-good": lambda: trained(8, 3, 8, 1500, 1),
    "v8k3-half-trained": lambda: trained(8, 3, 8, 120, 2),
    "v6k2-trained": lambda: trained(6, 2, 8, 600, 3),
    "v5k5-trained": lambda: trained(5, 5, 8, 800, 4),
    "v10k4-half-trained": lambda: trained(10, 4, 8, 300, 5),
    "v7k3-random-biases": lambda: random_weights(7, 3, 6, 6, bias_scale=0.7),
    "v6k4-random": lambda: random_weights(6, 4, 4, 7),
    "v2k3-random": lambda: random_weights(2, 3, 4, 8),
}


def _sequence(k, q, m, placement, tokens):
    seq = [m] * (k - 1) + [q]
    for i, t in zip(placement, tokens):
        seq[i] = t
    return tuple(seq)


def _counted_by_enumeration(record, k):
    """The sequences whose exact bound sum is below 0, class by class, checking each
    class's count against the rule's; c = 0 classes as recorded."""
    out = []
    for q, m, placement, columns, counted in record:
        if columns is None:  # c = 0: the sequence (m, …, m, q)
            if counted:
                out.append(_sequence(k, q, m, (), ()))
            continue
        values = [[Fraction(man) * Fraction(2) ** e for man, e in col] for col in columns]
        mine = [tokens for tokens in itertools.product(range(m), repeat=len(placement))
                if sum(values[j][t] for j, t in enumerate(tokens)) < 0]
        assert len(mine) == counted, f"class {(q, m, placement)}: count disagrees"
        out += [_sequence(k, q, m, placement, tokens) for tokens in mine]
    return out


@pytest.mark.parametrize("strategy", ["cubic-mix", "cubic-mix:placements=each"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_counted_sequence_is_correct(case, strategy, tmp_path, capsys):
    weights = CASES[case]()
    k = weights.dims.n_ctx
    model_path, cert, lines = certify(weights, tmp_path, strategy)
    counts = set()
    for arith in ARITHMETICS:  # every back-end accepts, with the same count
        assert check_cert([str(cert), "--model", str(model_path), "--json",
                           "--arith", arith]) == 0
        counts.add(json.loads(capsys.readouterr().out)["correct"])
    (proven,) = counts
    dims, mats, hints = accepted_inputs(lines)
    record = []
    count, _ = cubic_mix.check(dims, mats, hints, lambda work: None, record=record)
    assert count >= proven
    seqs = _counted_by_enumeration(record, k)
    assert len(seqs) == len(set(seqs)) == count, "classes overlap or miscount"
    if seqs:
        arr = np.array(seqs, dtype=np.int64)
        logits = logits_float64(weights, arr)
        top, rows = arr.max(axis=1), np.arange(len(arr))
        others = logits.copy()
        others[rows, top] = -np.inf
        margin = logits[rows, top] - others.max(axis=1)
        assert not (margin < -UNDECIDED).any(), f"{case}: certified a wrong sequence"
        assert (margin > UNDECIDED).all(), f"{case}: certified an undecidable near-tie"
    assert proven <= count_correct(weights, progress=False).correct


def test_tuples_below_matches_brute_force():
    rng = random.Random(5)
    for _ in range(300):
        c = rng.randint(1, 4)
        n = rng.randint(1, 6)
        scale = rng.choice([1, 10, 2**70])
        columns = [sorted(rng.randint(-5 * scale, 5 * scale) for _ in range(n))
                   for _ in range(c)]
        limit = rng.randint(-3 * scale, 3 * scale)
        want = sum(1 for t in itertools.product(*columns) if sum(t) < limit)
        assert cubic_mix._tuples_below(columns, limit) == want


@pytest.mark.parametrize("arith", ARITHMETICS)
def test_bound_exact_is_the_bound(arith):
    """bound_exact returns the upper bound itself, sign included, for tiny, huge and
    negative bounds; a non-finite bound is refused."""
    from checker.arith import get

    ar = get(arith)
    for x in (-3.5, 0.0, 2.25, -1e-300, 5e300, -7.0e-320, 1.0 / 3):
        man, e = ar.bound_exact(ar.upper(ar.interval(x, x)))
        assert Fraction(man) * Fraction(2) ** e == Fraction(x)
    a = ar.upper(ar.interval(-1.5, 2.0))
    b = ar.upper(ar.interval(-0.25, -1e-3))
    s = ar.up_add(a, b)
    man, e = ar.bound_exact(s)
    assert Fraction(man) * Fraction(2) ** e >= Fraction(2.0) + Fraction(-1e-3)
    with pytest.raises(ValueError):
        ar.bound_exact(ar.upper(ar.interval(float("-inf"), float("inf"))))


def _lines(tmp_path, weights):
    return certify(weights, tmp_path, "cubic-mix")


def _rewrite(lines, tmp_path, edit):
    out = [json.loads(s) for s in lines]
    rule = next(o for o in out if o.get("kind") == "rule")
    edit(rule)
    path = tmp_path / "mutant.jsonl"
    path.write_text("".join(json.dumps(o, separators=(",", ":")) + "\n" for o in out))
    return path


@pytest.mark.parametrize("arith", ARITHMETICS)
def test_mutants_are_refused(tmp_path, capsys, arith):
    weights = trained(8, 3, 8, 1500, 1)
    model, _, lines = _lines(tmp_path, weights)
    claim = next(json.loads(s) for s in lines if '"kind":"rule"' in s)["claim"]
    mutants = {
        "inflated claim": lambda r: r.update(claim=r["claim"] + 1),
        "claims everything": lambda r: r.update(claim=512),
        "cubic's hints": lambda r: r.update(hints={"good": []}),
        "extra hint key": lambda r: r.update(hints={"joint": [], "good": []}),
        "mask names the max": lambda r: r.update(hints={"joint": [[3, 1, 1 << 3]]}),
        "query above max": lambda r: r.update(hints={"joint": [[2, 3, 1]]}),
        "duplicate pair": lambda r: r.update(hints={"joint": [[3, 1, 1], [3, 1, 2]]}),
        "not an int": lambda r: r.update(hints={"joint": [[3, 1, 1.0]]}),
        "no hints": lambda r: r.pop("hints"),
        "unknown placements": lambda r: r["hints"].update(placements="some"),
        "placements not a string": lambda r: r["hints"].update(placements=1),
    }
    for name, edit in mutants.items():
        path = _rewrite(lines, tmp_path, edit)
        code = check_cert([str(path), "--model", str(model), "--arith", arith])
        capsys.readouterr()
        assert code != 0, name
    # any joint set is sound: every token joint still verifies
    def every(rule):
        rule["hints"]["joint"] = [[m, q, (1 << m) - 1] for m in range(1, 8)
                                  for q in range(m + 1)]

    path = _rewrite(lines, tmp_path, every)
    assert check_cert([str(path), "--model", str(model), "--arith", arith, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["correct"] == claim


def test_options_round_trip():
    from generator.certify.strategies import resolve

    for name in ("cubic-mix", "cubic-mix:placements=each"):
        assert resolve(name)[1]["options"].name() == name
    assert resolve("cubic-mix:placements=bounds")[1]["options"].name() == "cubic-mix"
    for bad in ("cubic-mix:placements=all", "cubic-mix:x=1", "cubic-mix:placements"):
        with pytest.raises(ValueError):
            resolve(bad)


@pytest.mark.parametrize("name", ["max3_v32_seed0", "max5_v16_seed0"])
def test_default_beats_cubic_at_no_more_work(name, tmp_path, capsys):
    """The default (Lemma M3: one column per (q, m, c)) on shipped models: at least cubic's
    count for at most cubic's proof length (measured when written: max3_v32 32,763 at
    589,495 against 32,763 at 632,469; max5_v16, k = 5, 1,048,498 at 152,284 against
    1,048,376 at 175,986)."""
    from pathlib import Path

    from generator.cli import generate

    model = Path(__file__).resolve().parent.parent / f"generator/models/{name}.pt"
    result = {}
    for strategy in ("cubic", "cubic-mix"):
        cert = tmp_path / f"{strategy}.jsonl"
        cert.write_text("\n".join(generate(str(model), strategy)[0]) + "\n")
        assert check_cert([str(cert), "--model", str(model), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        result[strategy] = (out["correct"], out["work"])
    assert result["cubic-mix"][0] >= result["cubic"][0]
    assert result["cubic-mix"][1] <= result["cubic"][1]


def test_float32_semantics(tmp_path, capsys):
    """gen-cert --semantics float32 with cubic-mix: verified, at most the real count, and the
    theorem names the semantics."""
    from generator.cli import generate
    from generator.modelfile import save_model

    weights = trained(8, 3, 8, 1500, 1)
    path = tmp_path / "m.pt"
    save_model(path, weights, None)
    counts = {}
    for semantics in ("real", "float32"):
        lines, _ = generate(str(path), "cubic-mix", semantics=semantics)
        cert = tmp_path / f"{semantics}.jsonl"
        cert.write_text("\n".join(lines) + "\n")
        assert check_cert([str(cert), "--model", str(path), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["semantics"] == semantics
        counts[semantics] = out["correct"]
    assert counts["float32"] <= counts["real"]


def test_shipped_model_beats_the_cubic_rule():
    """On the shipped Max-of-3 v32 model the mixture count is at least cubic's (measured
    32,763 both when written: the exact count) — a guard that the rule is not vacuous."""
    from pathlib import Path

    from generator.certify.trace import Trace
    from generator.modelfile import load_model

    root = Path(__file__).resolve().parent.parent
    weights = load_model(root / "generator/models/max3_v32_seed0.pt").weights
    trace = Trace(weights)
    mats = {n: trace.matrix(n) for n in cubic_mix.INPUTS}
    mats = {n: [[MPMATH.interval(float(a), float(b)) for a, b in zip(lo, hi)]
                for lo, hi in zip(m.lo, m.hi)] for n, m in mats.items()}
    count, _ = cubic_mix.check(weights.dims, mats, {"joint": []}, lambda work: None)
    exact = json.loads((root / "generator/models/models.json").read_text())
    truth = next(m["correct"] for m in exact["models"] if m["file"] == "max3_v32_seed0.pt")
    assert 0.99 * truth <= count <= truth


@pytest.mark.parametrize("placements", ["each", "bounds"])
def test_long_contexts_are_charged_before_any_work(placements):
    """n_ctx 40: the 2^39 placements ("each") are charged, and refused by the budget, before
    they are listed; "bounds" charges per query, not per placement."""
    from checker.errors import Rejected as Refused

    class Limit(Exception):
        pass

    def charge(work):
        if work > 10**9:
            raise Limit(work)

    dims = Dims(4, 40, 4, 4)
    hints = {"joint": [], "placements": placements}
    if placements == "each":
        with pytest.raises(Limit):
            cubic_mix.check(dims, {}, hints, charge)
    else:  # charged per (q, m) as the work is done: the tables' inputs are read next
        with pytest.raises((KeyError, Limit, Refused)):
            cubic_mix.check(dims, {}, hints, charge)
