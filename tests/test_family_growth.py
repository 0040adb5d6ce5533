"""benchmarks/family_growth.py (issue 23, the d_vocab growth table): forward brute force's work
as the script computes it equals the work the checker reports for a forward_brute_force
certificate of the same model; the rows carry the checker's reported claim and work of
family_gap certificates; the exponent inverts a power law."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from checker.cli import main as check_cert
from generator.cli import main as gen_cert
from generator.modelfile import save_model
from generator.train import TrainConfig, train

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import family_growth  # noqa: E402

# the v64 / v128 family at toy size: LN, ReLU MLP, learned positions, one head
FAMILY = dict(n_ctx=4, d_model=8, d_head=8, layernorm="LN", d_mlp=16, steps=300, seed=0)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for v in (5, 7):
        path = tmp_path_factory.mktemp("models") / f"v{v}.pt"
        save_model(path, train(TrainConfig(d_vocab=v, **FAMILY), progress=False).weights())
        out[v] = path
    return out


def _report(capsys, cert: Path, model: Path, *extra: str) -> dict:
    capsys.readouterr()
    code = check_cert([str(cert), "--model", str(model), "--json", *extra])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "verified", report
    return report


@pytest.mark.parametrize("shipped", [None, "max3_v8_seed0.pt"])
def test_brute_force_work_is_the_checkers_charge(tmp_path, capsys, models, shipped):
    """The script's forward brute force work = the `work` check-cert reports for a
    forward_brute_force certificate (one layer, learned positions: LN + ReLU MLP, and the
    shipped attention-only model), under both back-ends."""
    root = Path(__file__).resolve().parent.parent
    model = models[5] if shipped is None else root / "generator/models" / shipped
    cert = tmp_path / "fbf.jsonl"
    assert gen_cert([str(model), "--strategy", "forward-brute-force", "-q", "-o", str(cert)]) == 0
    dims = family_growth.load_model(str(model)).weights.dims
    for arith in ("mpmath", "arb"):
        report = _report(capsys, cert, model, "--arith", arith)
        assert report["work"] == family_growth.brute_force_work(dims), (arith, report["work"])


def test_rows_carry_the_family_gap_reports(tmp_path, capsys, models):
    """Two family_gap certificates (d_vocab 5 and 7, boxes on): each row's claim and work are
    the checker's report, the brute force ratio and the exponent follow from them."""
    pairs = []
    for v, model in models.items():
        cert, report_path = tmp_path / f"v{v}.jsonl", tmp_path / f"v{v}.json"
        assert gen_cert([str(model), "--strategy", "family-gap:merge=always,boxes=on", "-q",
                         "-o", str(cert)]) == 0
        report = _report(capsys, cert, model, "--arith", "arb")
        assert report["rules"][0].startswith("family_gap")
        report_path.write_text(json.dumps(report))
        pairs.append((str(model), str(report_path), report))
    rows = family_growth.rows([(m, r) for m, r, _ in pairs], sample=2000)
    for row, (model, _, report) in zip(rows, pairs):
        dims = family_growth.load_model(model).weights.dims
        assert (row["claim"], row["work"]) == (report["correct"], report["work"])
        assert row["inputs"] == dims.d_vocab ** 4 and row["claim"] <= row["inputs"]
        assert row["brute_force_work"] == family_growth.brute_force_work(dims)
        assert row["brute_force_over_work"] == row["brute_force_work"] / row["work"]
        assert 0 < row["sampled_accuracy"] <= 1
        assert row["claim_over_estimated_exact"] == pytest.approx(
            row["claim"] / (row["sampled_accuracy"] * row["inputs"]))
    assert rows[1]["work_ratio"] == rows[1]["work"] / rows[0]["work"]
    assert rows[1]["work"] == pytest.approx(rows[0]["work"] * (7 / 5) ** rows[1]["work_exponent"])
    assert "work_ratio" not in rows[0]
    table = family_growth.table(rows)
    assert f"{rows[1]['work']:,}" in table and f"{rows[1]['work_exponent']:.3f}" in table
    with pytest.raises(SystemExit):  # a report of another model is refused
        family_growth.rows([(pairs[0][0], pairs[1][1])])


def test_other_families_are_refused():
    root = Path(__file__).resolve().parent.parent / "generator/models"
    for name in ("max3_v8_ln_mlp_rope_seed0.pt", "max3_v8_gelu_ln_seed0.pt"):
        dims = family_growth.load_model(str(root / name)).weights.dims
        with pytest.raises(SystemExit):
            family_growth.brute_force_work(dims)


@pytest.mark.parametrize("e", [0.5, 3.0, 3.5])
def test_exponent_inverts_a_power_law(e):
    assert family_growth.exponent(10**9, 64, round(10**9 * 2 ** e), 128) == pytest.approx(e)
    assert family_growth.exponent(7, 5, 7 * (11 / 5) ** e, 11) == pytest.approx(e)
    assert not math.isclose(family_growth.exponent(10**9, 64, 10**9 * 2 ** e, 128), e + 0.01)


def test_sampled_accuracy_counts_the_argmax(models):
    """The sample's accuracy equals the float64 forward pass's count on the same tokens."""
    import numpy as np

    from generator.model import family_logits_float64, family_weights

    weights = family_growth.load_model(str(models[5])).weights
    acc, se = family_growth.sampled_accuracy(weights, 3000, seed=7)
    tokens = np.random.default_rng(7).integers(0, 5, size=(3000, 4))
    logits = family_logits_float64(family_weights(weights), tokens)
    count = sum(int(np.argmax(row)) == max(t) for row, t in zip(logits, tokens.tolist()))
    assert acc == count / 3000 and se == pytest.approx(math.sqrt(acc * (1 - acc) / 3000))


# ---- sampled certificates (option sample=N): the d_vocab 256 row's estimate -------------

SAMPLED = "family-gap:merge=always,confirm=off,boxes=on"


def _classes_of(lines_or_path) -> list:
    """The certificate's (q, m, fixed, g) keys, as family_growth reads them."""
    return family_growth.read_classes(str(lines_or_path))[1]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory, models):
    """{N: (certificate, strategy)}: the v7 model's full certificate (N = 1) and its
    sample=2 and sample=3 certificates."""
    out, root = {}, tmp_path_factory.mktemp("sampled")
    for n in (1, 2, 3):
        strategy = SAMPLED + ("" if n == 1 else f",sample={n}")
        cert = root / f"n{n}.jsonl"
        assert gen_cert([str(models[7]), "--strategy", strategy, "-q", "-o", str(cert)]) == 0
        out[n] = (cert, strategy)
    return out


def _check(capsys, cert, model) -> dict:
    capsys.readouterr()
    code = check_cert([str(cert), "--model", str(model), "--json", "--arith", "arb"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "verified", report
    return report


@pytest.mark.parametrize("n", [2, 3])
def test_a_sampled_certificate_is_the_full_one_restricted_to_its_pairs(sampled, models,
                                                                       capsys, n):
    """The classes and boxes of sample=N are exactly the full certificate's classes and boxes
    whose (q, m) is in `sampled_pairs(v, N)` (each is found from its (q, m) alone), there is
    no residue, the strategy name carries sample=N, and the checker verifies it at the size
    of its classes."""
    from checker.rules import family_gap as gap_rule
    from generator.certify.strategies.family_gap import sampled_pairs

    full = _classes_of(sampled[1][0])
    part = _classes_of(sampled[n][0])
    chosen = sampled_pairs(7, n)
    assert len(chosen) == -(-28 // n)
    assert part == [c for c in full if (c[0], c[1]) in chosen]
    assert 0 < len(part) < len(full)
    first = json.loads(Path(sampled[n][0]).read_text().splitlines()[0])
    assert first["strategy"] == sampled[n][1]
    report = _check(capsys, sampled[n][0], models[7])
    dims = family_growth.load_model(str(models[7])).weights.dims
    assert report["correct"] == sum(gap_rule.class_size(dims, m, f, g) for _, m, f, g in part)


@pytest.mark.parametrize("v,k", [(5, 2), (7, 4), (64, 4), (13, 3)])
def test_pair_inputs_partition_the_sequences(v, k):
    """The ratio estimator's inputs per (q, m): their sum over the pairs is v^k, and each is
    the count of sequences with that query and maximum."""
    import itertools

    assert sum(family_growth.pair_inputs(k, q, m) for q in range(v) for m in range(q, v)) == v ** k
    if v ** k <= 3000:
        for q, m in [(0, 0), (1, v - 1), (v - 1, v - 1), (2, 3)]:
            count = sum(1 for t in itertools.product(range(v), repeat=k)
                        if t[-1] == q and max(t) == m)
            assert family_growth.pair_inputs(k, q, m) == count


def test_sampled_pairs_are_fixed_and_sized():
    from generator.certify.strategies.family_gap import Options, sampled_pairs

    assert sampled_pairs(64, 1) is None
    a = sampled_pairs(64, 16)
    assert a == sampled_pairs(64, 16) and len(a) == -(-64 * 65 // 2 // 16)
    assert all(0 <= q <= m < 64 for q, m in a) and a != sampled_pairs(64, 15)
    assert Options.parse("family-gap:sample=16").name() == "family-gap:sample=16"
    assert Options.parse("family-gap:sample=1").name() == "family-gap"
    for bad in ("sample=0", "sample=x", "sample=", "sample=-2", "sample=1.5"):
        with pytest.raises(ValueError):
            Options.parse("family-gap:" + bad)


def test_the_estimate_from_a_sample_brackets_the_full_certificate(sampled, models, capsys,
                                                                  tmp_path):
    """family_growth's row for a sampled certificate: its work and claim estimate the full
    certificate's (the same options), which is measured here: the full report's work with
    its residue's charge replaced by the cap's, within 3 standard errors; what the checker
    charges beyond the rule's cost is within 1 % in both."""
    from checker.rules import family_gap as gap_rule
    from checker.rules import forward

    dims = family_growth.load_model(str(models[7])).weights.dims
    full = _check(capsys, sampled[1][0], models[7])
    residue = len(json.loads(_rule_line(sampled[1][0]))["hints"].get("residue", []))
    per_seq = forward._sequence_cost(dims)
    full_classes = [(q, m, f, g, None) for q, m, f, g in _classes_of(sampled[1][0])]
    before_rule = full["work"] - gap_rule.cost(dims, full_classes, residue)
    truth_work = full["work"] + (family_growth.RESIDUE_LIMIT - residue) * per_seq
    truth_claim = sum(gap_rule.class_size(dims, m, f, g) for _, m, f, g, _ in full_classes)
    for n in (2, 3):
        report = _check(capsys, sampled[n][0], models[7])
        path = tmp_path / f"n{n}.json"
        path.write_text(json.dumps(report))
        (row,) = family_growth.rows([], sampled=[(str(models[7]), str(path),
                                                  str(sampled[n][0]))])
        assert row["one_in"] == n and row["sampled_pairs"] == -(-28 // n)
        assert row["sample_work"] == report["work"]
        part = [(q, m, f, g, None) for q, m, f, g in _classes_of(sampled[n][0])]
        # the lines before the rule, and the note's distance to float32 at the smallest slack
        # (one class's evaluation, so not the same class in both)
        assert abs(report["work"] - gap_rule.cost(dims, part) - before_rule) <= 0.01 * full["work"]
        # the formula: the query and output terms for every query token and maximum (an upper
        # bound: the full certificate may lack some, here m < 3), the residue at its cap
        every = full_classes + [(t, t, (1,), 1, None) for t in range(7)]
        charges = sum(gap_rule.class_charge(dims, m, f, g) for _, m, f, g, _ in part)
        expected = (report["work"] - gap_rule.cost(dims, part)
                    + gap_rule.cost(dims, every)
                    - sum(gap_rule.class_charge(dims, m, f, g) for _, m, f, g, _ in every)
                    + 28 / row["sampled_pairs"] * charges
                    + family_growth.RESIDUE_LIMIT * per_seq)
        assert row["work"] == pytest.approx(expected, rel=1e-12)
        assert abs(row["work"] - truth_work) <= 3 * row["work_se"] + 1e-6 * truth_work, (
            row["work"], truth_work, row["work_se"])
        assert abs(row["claim"] - truth_claim) <= 3 * row["claim_se"] + 1, (
            row["claim"], truth_claim, row["claim_se"])
        assert row["work_se"] > 0 and row["claim_se"] > 0
        table = family_growth.table([row])
        assert f"est. from 1/{n}" in table and f"{row['work']:,.0f}" in table
        full_path = tmp_path / "full.json"
        full_path.write_text(json.dumps(full))
        both = family_growth.rows([(str(models[7]), str(full_path))],
                                  sampled=[(str(models[7]), str(path), str(sampled[n][0]))])
        assert "work_se" not in both[0] and "work_se" in both[1]  # measured first
        assert "work_ratio" not in both[1]  # no exponent between rows of one d_vocab
        (with_acc,) = family_growth.rows([], sample=500, sampled=[
            (str(models[7]), str(path), str(sampled[n][0]))])
        assert with_acc["one_in"] == n and with_acc["sample"] == 500  # two names, two things


def _rule_line(cert) -> str:
    for line in Path(cert).read_text().splitlines():
        if json.loads(line).get("rule") == "family_gap":
            return line
    raise AssertionError("no family_gap line")


def test_a_sampled_row_refuses_what_it_cannot_estimate(sampled, models, capsys, tmp_path):
    """A certificate without sample=N, a class outside the sample, and a report that is not
    the certificate's are refused."""
    report = _check(capsys, sampled[2][0], models[7])
    path = tmp_path / "n2.json"
    path.write_text(json.dumps(report))
    full = _check(capsys, sampled[1][0], models[7])
    full_path = tmp_path / "n1.json"
    full_path.write_text(json.dumps(full))
    with pytest.raises(SystemExit):  # not sampled
        family_growth.rows([], sampled=[(str(models[7]), str(full_path), str(sampled[1][0]))])
    with pytest.raises(SystemExit):  # the full certificate's classes are outside the sample
        family_growth.rows([], sampled=[(str(models[7]), str(path), str(sampled[1][0]))])
    lines = Path(sampled[2][0]).read_text().splitlines()
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join(line.replace("sample=2", "sample=3") for line in lines) + "\n")
    with pytest.raises(SystemExit):  # the classes are not sample=3's
        family_growth.rows([], sampled=[(str(models[7]), str(path), str(other))])
