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
