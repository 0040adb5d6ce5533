"""Proof length as check-cert reports it (spec/rules.md §proof length): work in
the documented units, bytes, unexplained dimensionality; the subcubic rule's
count is exact and fails closed when it is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker import ops
from checker.certificate import CertificateChecker
from checker.cli import main as check_cert
from checker.errors import Malformed
from checker.modelspec import Dims
from checker.rules import subcubic_gap
from generator.cli import generate

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "generator/models/max3_v8_seed0.pt"
DIMS = Dims(8, 3, 8, 8)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("proof-length")
    out = {}
    for strategy in ("brute-force", "cubic", "subcubic:direct=mean+diff,near=2",
                     "subcubic:direct=max_diff,near=0"):
        lines, _ = generate(str(MODEL), strategy)
        path = d / f"{strategy.replace(':', '_')}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        out[strategy] = path
    return out


def report(capsys, path):
    assert check_cert([str(path), "--json", "--jobs", "1"]) == 0
    return json.loads(capsys.readouterr().out)


def documented_work(path: Path) -> int:
    """The work of spec/rules.md §proof length, recomputed from the lines."""
    lines = [json.loads(s) for s in path.read_text().splitlines()]
    shapes = {}
    for x in lines[1:]:
        if x["kind"] == "weight":
            s = x["shape"]
            shapes[x["id"]] = (s[1], s[2]) if len(s) == 3 else (1, s[-1]) if (
                len(s) == 1 or s[0] == 1) else tuple(s)
    total = 0
    v, k = DIMS.d_vocab, DIMS.n_ctx
    for x in lines:
        if x["kind"] == "op":
            r, c = x["shape"]
            a = shapes[x["args"][0]]
            unit = {"matmul": a[1], "mean_rows": a[0]}.get(x["op"], 1)
            total += r * c * unit * ops.COST.get(x["op"], 1)
            shapes[x["id"]] = (r, c)
        elif x["kind"] == "rule" and x["rule"] == "brute_force":
            total += 4 * v ** k * k * v
        elif x["kind"] == "rule" and x["rule"] == "cubic":
            joint = sum(bin(e[4]).count("1") for e in x["hints"]["good"] if len(e) == 5)
            total += v * v * k + v * v * (v + 1) * (k + 4) + joint * v * 4
        elif x["kind"] == "rule":
            total += rule_work(lines, x)
    return total


def rule_work(lines, rule):
    """table_work + entry_work, with the prefix extremes of the recorded EQKE."""
    from checker.numbers import decode_intervals, greater

    direct, gaps = subcubic_gap.parse_hints(rule["hints"], DIMS.d_vocab, DIMS.n_ctx)
    eqke = next(x for x in lines if x["id"] == rule["inputs"]["EQKE"])
    v = DIMS.d_vocab
    flat = decode_intervals(eqke["lo"], eqke["hi"], v * v, "EQKE")

    def extremes(q, j):
        row = flat[q * v:(q + 1) * v]
        lo = hi = 0
        for t in range(1, j + 1):
            lo = t if greater(row[lo]._mpi_[0], row[t]._mpi_[0]) else lo
            hi = t if greater(row[t]._mpi_[1], row[hi]._mpi_[1]) else hi
        return lo, hi
    return (subcubic_gap.table_work(DIMS, direct)
            + subcubic_gap.entry_work(DIMS, gaps, direct, extremes))


@pytest.mark.parametrize("strategy, dimensionality", [
    ("brute-force", 8 ** 4), ("cubic", 3 * 64 + 2 * 3 * 8),
    ("subcubic:direct=mean+diff,near=2", 3 * 64 + 2 * 3 * 8),
    ("subcubic:direct=max_diff,near=0", 3 * 64 + 2 * 3 * 8)])
def test_reported_metrics(certs, capsys, strategy, dimensionality):
    path = certs[strategy]
    s = report(capsys, path)
    assert s["bytes"] == path.stat().st_size
    assert s["unexplained_dimensionality"] == dimensionality
    assert s["work"] == documented_work(path)
    assert s["seconds"] >= 0
    assert check_cert([str(path), "--jobs", "1"]) == 0
    assert f"proof length: {s['work']} scalar operations" in capsys.readouterr().out


def test_subcubic_is_cheaper_than_cubic_in_the_rule(certs, capsys):
    """The rule's own work: O(v²k) against cubic's O(v³k) (here v = 8)."""
    sub = documented_work(certs["subcubic:direct=max_diff,near=0"])
    cub = documented_work(certs["cubic"])
    assert sub < cub


def test_a_wrong_operation_count_fails_closed(certs, monkeypatch):
    """If the rule's charge and its own count ever differ, the check is refused."""
    real = subcubic_gap.entry_work
    monkeypatch.setattr(subcubic_gap, "entry_work", lambda *a: real(*a) + 1)
    checker = CertificateChecker()
    with pytest.raises(Malformed, match="counted"):
        for text in certs["subcubic:direct=mean+diff,near=2"].read_text().splitlines():
            checker.feed(text)


def test_dimensionality_is_undefined_when_a_rule_defines_none(capsys):
    """exact has no definition (its residue depends on the hints): null, never 0."""
    from checker.cli import main

    code = main([str(Path(__file__).resolve().parents[1] / "certs" / "max5_v16_seed0.exact.jsonl"),
                 "--json", "--jobs", "1"])
    s = json.loads(capsys.readouterr().out)
    assert code == 0 and s["unexplained_dimensionality"] is None
