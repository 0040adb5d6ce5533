"""Low-rank direct path (checker/rules/subcubic_direct.py, option eu=...):
sequence-by-sequence soundness on small models, exact work, and mutants.

Every covered sequence of an accepted certificate is confirmed by an
independent float64 forward pass (helpers of test_subcubic_soundness.py)."""

from __future__ import annotations

import json

import pytest
from test_subcubic_soundness import (  # helpers only (no test functions imported)
    CASES,
    assert_all_correct,
    certify,
    covered,
)

from checker.cli import main as check_cert
from checker.numbers import decode_floats, encode_floats
from checker.rules import subcubic_direct
from generator.certify.strategies import subcubic
from generator.ground_truth import count_correct

# every handler, with each way of composing the coefficients
OPTIONS = ["subcubic:direct=min,near=2,eu=lowrank1", "subcubic:direct=max_diff,near=0,eu=quad",
           "subcubic:direct=mean+diff,near=2,eu=svd_query",
           "subcubic:direct=min,near=0,eu=quad_mean", "subcubic:direct=max_diff,near=2,eu=lowrank0",
           "subcubic:direct=mean+diff,near=1,eu=lowrank2", "subcubic:direct=min,near=2,eu=lowrank4",
           "subcubic:direct=min,near=2,attn=rank1,err=cs,eu=lowrank1"]  # with low-rank EQKE


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    return request.param, CASES[request.param]()


def run(weights, tmp_path, strategy, capsys):
    model_path, cert, lines = certify(weights, tmp_path, strategy)
    code = check_cert([str(cert), "--model", str(model_path), "--json", "--jobs", "1"])
    out = json.loads(capsys.readouterr().out)
    return code, out, lines, cert, model_path


@pytest.mark.parametrize("strategy", OPTIONS)
def test_every_covered_sequence_is_correct(case, strategy, tmp_path, capsys):
    name, weights = case
    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    code, out, lines, _, _ = run(weights, tmp_path, strategy, capsys)
    assert code == 0, out
    rule = next(json.loads(s) for s in lines if '"kind":"rule"' in s)
    assert "EU" not in rule["inputs"] and "EU_LEFT" in rule["inputs"]
    n = assert_all_correct(weights, covered(rule["hints"], v, k), f"{name} {strategy}")
    assert n == out["correct"], "counting formula disagrees with enumeration"
    assert out["correct"] <= count_correct(weights, progress=False).correct


def test_no_line_computes_eu(tmp_path, capsys):
    """The low-rank certificate never multiplies out EU (nor EU_LEFT·W_U)."""
    weights = CASES["v12k4-trained"]()
    code, out, lines, _, _ = run(weights, tmp_path, "subcubic:eu=lowrank1", capsys)
    assert code == 0 and out["correct"] > 0.5 * 12 ** 4
    rule = next(json.loads(s) for s in lines if '"kind":"rule"' in s)
    left, w_u = rule["inputs"]["EU_LEFT"], rule["inputs"]["W_U"]
    ops = [json.loads(s) for s in lines if '"kind":"op"' in s]
    assert not any(o["args"] == [left, w_u] for o in ops), "EU_LEFT·W_U is multiplied out"
    assert any(o["args"][-1] == w_u for o in ops)  # (EVOU, PVOU are: the test can fail)


def _mutate(cert, edit):
    lines = [json.loads(s) for s in cert.read_text().splitlines()]
    rule = next(x for x in lines if x["kind"] == "rule")
    edit(rule, lines)
    cert.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _identity_forged(rule, lines):
    """T' = 0: G = 0, so the rank-r part and the residual vanish; only the
    error term E = I carries EU — a smaller forged bound must not pass."""
    n = len(_entries(rule, "inverse"))
    rule["hints"]["eu"]["inverse"] = encode_floats([0.0] * n, "f64")


def _entries(rule, key) -> list:
    """The "eu" hint matrix `key` (base64 f64, d × d) as a flat list."""
    text = rule["hints"]["eu"][key]
    return list(decode_floats(text, len(text) * 3 // 4 // 8, "f64", key))


def _set_first(key, value):
    """An edit setting entry [0, 0] of the "eu" hint matrix `key` (encoded again)."""
    def edit(rule, lines):
        flat = _entries(rule, key)
        flat[0] = value
        rule["hints"]["eu"][key] = encode_floats(flat, "f64")
    return edit


def _as_json_matrix(rule, lines):
    """The basis as JSON rows of numbers (a second encoding of a hint matrix: refused)."""
    flat = _entries(rule, "basis")
    d = int(round(len(flat) ** 0.5))
    rule["hints"]["eu"]["basis"] = [flat[i:i + d] for i in range(0, d * d, d)]


MUTANTS = {
    "raised claim": (lambda r, ls: r.update(claim=r["claim"] + 1), 1),
    "wrong input term (W_E for EU_LEFT)": (lambda r, ls: r["inputs"].update(
        EU_LEFT=next(x["id"] for x in ls if x.get("name") == "embed.W_E")), 1),
    "wrong input term (W_U for EU_LEFT)": (lambda r, ls: r["inputs"].update(
        EU_LEFT=r["inputs"]["W_U"]), 1),
    "rank above d_model": (lambda r, ls: r["hints"]["eu"].update(rank=10 ** 6), 2),
    "non-finite basis": (_set_first("basis", float("inf")), 2),
    "huge entry in the basis (2^65)": (_set_first("basis", 2.0 ** 65), 2),
    "tiny entry in the inverse (2^-65)": (_set_first("inverse", 2.0 ** -65), 2),
    "basis as JSON rows (not base64 f64)": (_as_json_matrix, 2),
    "bool mean": (lambda r, ls: r["hints"]["eu"].update(mean=1), 2),
    "missing inverse": (lambda r, ls: r["hints"]["eu"].pop("inverse"), 2),
    "forged inverse (T' = 0)": (_identity_forged, 1),
    "eu hints dropped (inputs no longer match)": (lambda r, ls: r["hints"].pop("eu"), 2),
}


@pytest.fixture(scope="module")
def accepted(tmp_path_factory):
    """A model and an accepted low-rank certificate (made once)."""
    tmp = tmp_path_factory.mktemp("low_eu")
    model_path, cert, _ = certify(CASES["v12k4-trained"](), tmp, "subcubic:eu=lowrank1")
    assert check_cert([str(cert), "--model", str(model_path), "--jobs", "1"]) == 0
    return model_path, cert.read_text()


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutants_are_refused(mutant, accepted, tmp_path, capsys):
    model_path, text = accepted
    cert = tmp_path / "cert.jsonl"
    cert.write_text(text)
    edit, expected = MUTANTS[mutant]
    _mutate(cert, edit)
    assert check_cert([str(cert), "--model", str(model_path), "--json", "--jobs", "1"]) == expected
    capsys.readouterr()


def test_forged_basis_is_still_sound(tmp_path, capsys):
    """Any basis is sound: a random T, T' (not inverse to each other) gives a
    certificate whose claim, if accepted, is still confirmed sequence by
    sequence (the checker bounds the error of T·T' ≠ I)."""
    import numpy as np

    weights = CASES["v8k3-good"]()
    v, k, d = weights.dims.d_vocab, weights.dims.n_ctx, weights.dims.d_model
    model_path, cert, lines = certify(weights, tmp_path, "subcubic:eu=lowrank2")
    rng = np.random.default_rng(0)
    basis = rng.standard_normal((d, d))
    inverse = np.linalg.inv(basis) + 0.01 * rng.standard_normal((d, d))

    def forge(rule, ls):
        rule["hints"]["eu"].update(basis=encode_floats(basis.ravel().tolist(), "f64"),
                                   inverse=encode_floats(inverse.ravel().tolist(), "f64"))
    _mutate(cert, forge)
    code = check_cert([str(cert), "--model", str(model_path), "--json", "--jobs", "1"])
    out = capsys.readouterr().out
    if code == 0:
        rule = next(json.loads(s) for s in cert.read_text().splitlines() if '"kind":"rule"' in s)
        assert_all_correct(weights, covered(rule["hints"], v, k), "forged basis")
        assert json.loads(out)["correct"] <= count_correct(weights, progress=False).correct
    else:
        assert code == 1


def test_work_is_counted_exactly():
    """The work formula equals what tables() counts (it fails closed otherwise),
    for every handler, rank 0..d, and each need_u/need_n."""
    from checker.arith import MPMATH
    from checker.modelspec import Dims

    d, v = 3, 5
    dims = Dims(v, 3, d, d)
    point = MPMATH.point
    mats = {"EU_LEFT": [[point(0.25 * (i - j)) for j in range(d)] for i in range(v)],
            "W_U": [[point(0.5 * ((i * j) % 3) - 0.5) for j in range(v)] for i in range(d)],
            "b_U": [[point(0.125 * j) for j in range(v)]]}
    eye = [[float(i == j) for j in range(d)] for i in range(d)]
    twice = [[2.0 * x for x in row] for row in eye]
    half = [[0.5 * x for x in row] for row in eye]
    for basis, inverse in ((eye, eye), (twice, half)):
        for rank in range(d + 1):
            for mean in (False, True):
                for need in ((True, False), (False, True), (True, True)):
                    spec = {"rank": rank, "mean": mean, "basis": basis, "inverse": inverse}
                    charged = []
                    subcubic_direct.tables(dims, mats, spec, *need, charged.append, MPMATH)
                    assert charged[0] == subcubic_direct.work(dims, spec, *need)


def test_options_round_trip_and_declare_the_row():
    for o in subcubic.grid():
        assert subcubic.Options.parse(o.name()) == o
    low = [o for o in subcubic.grid() if o.eu != "full"]
    assert {o.eu for o in low} == set(subcubic.low_eu.HANDLERS)
    assert {"Low-rank EU", "Low-rank QK&EU"} <= set(subcubic.PAPER_ROWS.values())
    assert all(name in subcubic.VARIANTS for name in subcubic.PAPER_ROWS)
    assert subcubic.Options.parse("subcubic:direct=min,near=2").eu == "full"


@pytest.mark.parametrize("strategy", ["subcubic:eu=lowrank1",
                                      "subcubic:direct=mean+diff,eu=quad_mean",
                                      "subcubic:attn=rank2,err=cs,eu=lowrank2"])
def test_both_back_ends_agree(strategy, tmp_path, capsys):
    """mpmath and Arb give the same verdict and count on low-rank EU certificates."""
    pytest.importorskip("flint")
    model_path, cert, _ = certify(CASES["v8k3-trained-biases"](), tmp_path, strategy)
    got = []
    for arith in ("mpmath", "arb"):
        code = check_cert([str(cert), "--model", str(model_path), "--json", "--arith", arith])
        got.append((code, json.loads(capsys.readouterr().out).get("correct")))
    assert got[0] == got[1] and got[0][0] == 0, got
