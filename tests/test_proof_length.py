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
            total += brute_force_work(v, k)
        elif x["kind"] == "rule" and x["rule"] == "cubic":
            total += cubic_work(v, k, x["hints"]["good"])
        elif x["kind"] == "rule":
            total += rule_work(lines, x)
    return total


def brute_force_work(v: int, k: int) -> int:
    """Closed form: per sequence k weights w_i = e·β, and for each of the v − 1
    outputs o ≠ m one difference of EU, per position 4 additions/subtractions and
    a product, and a sum of k terms."""
    return v ** k * (k + (v - 1) * (1 + 5 * k + k))


def cubic_work(v: int, k: int, hints: list) -> int:
    """Closed form of the cubic rule's operations (spec/rules.md §proof length),
    written from the rule's description."""
    n = k - 1  # non-query positions
    split = 1 if v >= 3 else 0  # v = 2: no output besides m and t', (II) is vacuous
    # tables: per (m, o) n differences + n − 1 selections (PVOU), one difference each
    # for the query position, ΔV_m, ΔV_t[t]; a top-three pass of EVOU; per (m, t) one
    # difference for max_{o∉{m,t}} ΔV_t where such an o exists (v = 2: only t = m)
    total = v * v * (n + (n - 1) + 1 + 1 + 1 + 3) + (v * v if split else v)
    # per query: B, two sorts (n² each), subset sums, B − S for c < n, β_{k−1}·e_q
    total += v * (n + 2 * n * n + n * (n + 1) + 2 * (n - 1) + 1)
    # per (q, m ≥ q): D, X_m, X_q (three vectors), e_m·X_m, β·e_q·X_q, top two of D
    total += v * (v + 1) // 2 * v * (1 + 1 + 1 + 3 + 1 + 1 + 2)
    pairs = {}
    for entry in hints:
        m, q, c, mask = entry[:4]
        joint = entry[4] if len(entry) == 5 else 0
        pairs.setdefault((m, q), []).append((c, mask, joint))
    for claims in pairs.values():
        tokens = joints = 0
        for c, mask, joint in claims:
            if c == 0:
                total += 2 * v * mask  # the all-m sequence: one affine vector
                continue
            tokens, joints = tokens | mask, joints | joint
            n_c, j_c = bin(mask).count("1"), bin(joint).count("1")
            placements = 2 if c < n else 1  # S at both extremes, or S = B
            ops = (2 * v if c < n else 0) + 2 * v  # Ã_S, its top two
            ops += 2 * n_c + 2 * (n_c - j_c) * split + j_c * (1 + 2 * v)  # (I), (II), (II′)
            total += placements * ops * (mask != 0)
        total += (2 + 2 * split) * bin(tokens).count("1") + 2 * v * bin(joints).count("1")
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


def _rule_work_reported(path: Path, arith: str = "mpmath") -> tuple[int, int]:
    """(the checker's whole work, the op lines' work in the documented units)."""
    from checker import arith as backends

    checker = CertificateChecker(arith=backends.get(arith))
    for text in path.read_text().splitlines():
        checker.feed(text)
    return checker.finish().work, checker


@pytest.mark.parametrize("name", ["max3_v8_seed0", "max5_v16_seed0", "max3_v32_seed0",
                                  "max4_v64_seed0"])
def test_cubic_work_is_the_closed_form(name):
    """The shipped cubic certificates (with and without joint tokens, k = 3..5):
    the checker's count of its operations equals the closed form of the rule."""
    path = ROOT / "certs" / f"{name}.cubic.jsonl"
    arith = "mpmath"
    if name == "max4_v64_seed0":  # the largest: Arb when installed (~1 s, mpmath ~7 s)
        pytest.importorskip("flint")
        arith = "arb"
    work, checker = _rule_work_reported(path, arith)
    lines = [json.loads(s) for s in path.read_text().splitlines()]
    rule = next(x for x in lines if x["kind"] == "rule")
    v, k = checker.dims.d_vocab, checker.dims.n_ctx
    ops_work = work - cubic_work(v, k, rule["hints"]["good"])
    # the op lines alone, recomputed from the certificate with the rule line dropped
    assert ops_work == op_lines_work(lines)


@pytest.mark.parametrize("v, k", [(2, 3), (2, 4), (3, 4), (5, 5)])
def test_cubic_work_is_the_closed_form_on_small_models(tmp_path, v, k):
    """Briefly trained small models (v = 2: check (II) is vacuous)."""
    from generator.modelfile import save_model
    from generator.train import TrainConfig, train

    cfg = TrainConfig(d_vocab=v, n_ctx=k, d_model=8, d_head=8, steps=150, seed=v * k)
    model = tmp_path / "m.pt"
    save_model(model, train(cfg, progress=False).weights(), {})
    lines, _ = generate(str(model), "cubic")
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    work, _ = _rule_work_reported(path)
    objs = [json.loads(s) for s in lines]
    rule = next(x for x in objs if x["kind"] == "rule")
    assert rule["claim"] > 0
    assert work == op_lines_work(objs) + cubic_work(v, k, rule["hints"]["good"])


def op_lines_work(lines) -> int:
    shapes, total = {}, 0
    for x in lines[1:]:
        if x["kind"] == "weight":
            s = x["shape"]
            shapes[x["id"]] = (s[1], s[2]) if len(s) == 3 else (1, s[-1]) if (
                len(s) == 1 or s[0] == 1) else tuple(s)
        elif x["kind"] == "op":
            r, c = x["shape"]
            a = shapes[x["args"][0]]
            total += r * c * {"matmul": a[1], "mean_rows": a[0]}.get(x["op"], 1) \
                * ops.COST.get(x["op"], 1)
            shapes[x["id"]] = (r, c)
    return total


@pytest.mark.parametrize("rule, formula", [("cubic", "entry_work"),
                                           ("brute_force", "work")])
def test_a_wrong_count_of_cubic_or_brute_force_fails_closed(certs, monkeypatch, rule, formula):
    """If the charge (closed form) and the operations performed ever differ, the
    check is refused (exit 2), so the reported proof length is always exact."""
    from checker import rules

    module = rules.RULES[rule]
    real = getattr(module, formula)
    monkeypatch.setattr(module, formula, lambda *a: real(*a) + 1)
    checker = CertificateChecker()
    with pytest.raises(Malformed, match="counted"):
        for text in certs["cubic" if rule == "cubic" else "brute-force"].read_text().splitlines():
            checker.feed(text)


def test_the_cubic_count_is_live(certs, monkeypatch):
    """The count is of operations performed: an operation left uncounted is caught."""
    from checker.rules import cubic

    real = cubic._Counted.v_add

    def uncounted(self, a, b):
        self.count -= len(a)
        return real(self, a, b)
    monkeypatch.setattr(cubic._Counted, "v_add", uncounted)
    checker = CertificateChecker()
    with pytest.raises(Malformed, match="counted"):
        for text in certs["cubic"].read_text().splitlines():
            checker.feed(text)


def test_a_wrong_count_of_the_exact_residue_fails_closed(monkeypatch):
    """The exact rule's residue: its closed form and the operations counted must agree."""
    from checker.rules import exact

    path = ROOT / "certs" / "max5_v16_seed0.exact.jsonl"
    work, _ = _rule_work_reported(path)  # agrees: accepted
    assert work > 0
    real = exact._class_work
    monkeypatch.setattr(exact, "_class_work", lambda *a: real(*a) + 1)
    with pytest.raises(Malformed, match="counted"):
        _rule_work_reported(path)
