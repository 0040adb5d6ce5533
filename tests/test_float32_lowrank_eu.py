"""subcubic_gap with low-rank EU ("eu" hints) under the float32 semantics (spec/rules.md
§low-rank EU under float32, Lemma 8f): the rule raises its tables U and N by
w[q][m] ≥ δ[q][m] + max_(o≠m) δ[q][o] (checker/rules/subcubic_direct.widened_float32).

- the shipped Max-of-4 v64 model's low-rank EU certificate regenerated under float32 is
  accepted with a count ≤ the real one (and within 0.1 % of it);
- the planted near-tie: counted by the real low-rank certificate, not by the float32 one;
- entry by entry (each entry of the REAL certificate's table offered alone under float32):
  every entry the checker accepts covers only sequences that are correct over the reals
  with margin beyond δ_o + δ_m and in float32 in five evaluation orders, and on the large-
  weight models some real entries are refused (so a looser widening would be caught);
- mutants: a real line relabelled float32, a tampered count, δ zeroed, the weights missing;
- the charged work is the real line's plus δ's and the widening's, exactly.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from soundness_helpers import subcubic_covered
from test_float32 import _random_attn_only, _with_header, replay
from test_float32_decomp import arb_float32_report, float32_good

from checker import float32 as fp
from checker.errors import Malformed, Rejected
from checker.modelspec import Dims
from checker.rules import subcubic_direct, subcubic_gap
from generator.cli import generate
from generator.model import ModelWeights
from generator.modelfile import load_model, save_model
from generator.planted import NEAR_TIE, near_tie_weights

V64 = "generator/models/max4_v64_seed0.pt"
SHIPPED_REAL = 15348998  # certs/max4_v64_seed0.lowrank-qk-eu.jsonl (certs/POLICY)


def _rule(lines) -> dict:
    return next(json.loads(x) for x in lines if '"kind":"rule"' in x)


def _gaps(obj) -> dict:
    return {tuple(e[:3]): tuple(e[3:]) for e in obj["hints"]["gaps"]}


def _replace_rule(lines, change, claim=None):
    """The lines with the rule line's object changed by change(obj) and, given claim, the
    claim (and the header's correct >= …) set to it."""
    out = [json.loads(x) for x in lines]
    for obj in out:
        if obj["kind"] == "rule":
            change(obj)
            if claim is not None:
                old, obj["claim"] = obj["claim"], claim
                out[0]["theorem"] = out[0]["theorem"].replace(f"correct >= {old}",
                                                              f"correct >= {claim}")
    return [json.dumps(o, separators=(",", ":")) for o in out]


# --- the shipped model ---------------------------------------------------------------------------

def test_shipped_lowrank_eu_float32_accepted(tmp_path):
    """The shipped low-rank QK&EU strategy (certs/POLICY) regenerated under float32: the
    checker accepts it, its count is ≤ the real one and within 0.1 % of it."""
    strategy = "subcubic:direct=min,near=2,attn=rank4,err=cs,eu=lowrank1"
    lines = generate(V64, strategy, semantics="float32")[0]
    report = replay(lines)
    assert report.facts.semantics == "float32"
    count = report.facts.correct
    assert count <= SHIPPED_REAL and count >= 0.999 * SHIPPED_REAL
    note = report.rule_notes[-1]
    assert "U and N raised by Lemma G" in note, note
    # the weights are inputs (for δ), besides EU's factors
    assert set(_rule(lines)["inputs"]) >= {"EU_LEFT", "W_U", "b_U", "W_E", "W_Q", "b_O"}


# --- the planted near-tie ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    path = tmp_path_factory.mktemp("planted") / "near_tie.pt"
    save_model(path, near_tie_weights())
    return path, {(eu, sem): generate(str(path), f"subcubic:direct=min,near=2,eu={eu}",
                                      semantics=sem)[0]
                  for eu in ("lowrank1", "svd_query") for sem in ("real", "float32")}


@pytest.mark.parametrize("eu", ["lowrank1", "svd_query"])
def test_planted_near_tie_counted_by_real_not_float32(planted, eu):
    _, certs = planted
    real, f32 = certs[(eu, "real")], certs[(eu, "float32")]
    assert replay(real).facts.correct == 3
    assert replay(f32).facts.correct == 2
    assert NEAR_TIE in subcubic_covered(_gaps(_rule(real)), 2, 2)
    assert NEAR_TIE not in subcubic_covered(_gaps(_rule(f32)), 2, 2)


def test_mutant_real_line_relabelled_float32(planted):
    """A real low-rank line under a float32 theorem lacks the weights: malformed.  With
    the weights (the float32 body) but the real hints and count: refused; with δ zeroed
    the same mutant passes, so it is the widening that refuses it."""
    _, certs = planted
    real, f32 = certs[("lowrank1", "real")], certs[("lowrank1", "float32")]
    with pytest.raises(Malformed, match="takes inputs"):
        replay(_with_header(real, lambda t: t + " and semantics == float32"))
    hints = _rule(real)["hints"]
    mutant = _replace_rule(f32, lambda obj: obj.update(hints=hints), claim=3)
    with pytest.raises(Rejected):
        replay(mutant)
    with pytest.raises(Rejected, match="proves 2 correct sequences, but the line claims 3"):
        replay(_replace_rule(f32, lambda obj: None, claim=3))
    zero = pytest.MonkeyPatch()
    try:
        zero.setattr(fp, "attention_only_deltas",
                     lambda dims, w, *_: [[Fraction(0)] * 2 for _ in range(2)])
        assert replay(mutant).facts.correct == 3
    finally:
        zero.undo()


def test_mutant_weight_line_with_width_refused(planted):
    """δ is read from exact weights: a weight input pointing at a line of another quantity
    is refused by the kernel; the rule fails closed on weights without low-rank EU."""
    _, certs = planted
    f32 = certs[("lowrank1", "float32")]

    def swap(obj):
        obj["inputs"]["W_Q"] = obj["inputs"]["W_K"]
    with pytest.raises((Rejected, Malformed)):
        replay(_replace_rule(f32, swap))
    with pytest.raises(Malformed, match="without low-rank EU"):
        subcubic_gap.check(Dims(2, 2, 3, 1), {}, {"direct": "min", "gaps": []},
                           lambda work: None, float32_weights={})


def test_kernel_refuses_a_rule_that_does_not_raise_its_tables(planted, monkeypatch):
    """A rule widening EU whose line reads no EU is refused unless it declares that it raises
    its own tables (FLOAT32_RAISES_TABLES): the kernel fails closed."""
    _, certs = planted
    f32 = certs[("lowrank1", "float32")]
    assert replay(f32).facts.correct == 2
    monkeypatch.setattr(subcubic_gap, "FLOAT32_RAISES_TABLES", False)
    with pytest.raises(Rejected, match="reads no EU to widen"):
        replay(f32)


# --- entry by entry: what the checker accepts is float32-correct ---------------------------------

def ladder(scale_o=(1.0, 1.0, 1.0, 1.0)) -> ModelWeights:
    """A planted ladder (the near-tie of generator/planted.py, one rung per query token):
    attention null, v = 4, k = 2, d = 7; E[t] = (B_t, 1, −B_t, e_t) with B_t = 2^16, 2^18,
    2^19, 2^20, W_U's rows 0..2 = scale_o, rows 3.. = I, b_U = −scale_o, so that the real
    logits at query q are e_q (margin 1 whenever q is the max) while δ[q][o] ∝ B_q·scale_o
    grows along the ladder: q = 0, 1 robust, q = 2, 3 not (margin 1 < δ_m + max δ_o).
    Its EU = e_q-rows has rank 4: the handler lowrank4 (rank 4 of d = 7) bounds it closely."""
    v, d = 4, 7
    e = np.zeros((v, d), np.float32)
    for t, b in enumerate((2.0 ** 16, 2.0 ** 18, 2.0 ** 19, 2.0 ** 20)):
        e[t, :3] = (b, 1.0, -b)
        e[t, 3 + t] = 1.0
    w_u = np.zeros((d, v), np.float32)
    w_u[:3] = np.array(scale_o, np.float32)
    w_u[3:] = np.eye(v, dtype=np.float32)
    z = np.zeros
    return ModelWeights(dims=Dims(v, 2, d, 1), W_E=e, W_pos=z((2, d), np.float32),
                        W_Q=z((d, 1), np.float32), W_K=z((d, 1), np.float32),
                        W_V=z((d, 1), np.float32), W_O=z((1, d), np.float32),
                        b_Q=z(1, np.float32), b_K=z(1, np.float32), b_V=z(1, np.float32),
                        b_O=z(d, np.float32), W_U=w_u,
                        b_U=-np.array(scale_o, np.float32))


def _models():
    yield "max3_v8", "lowrank1", load_model("generator/models/max3_v8_seed0.pt").weights
    yield "random1_v5", "lowrank1", _random_attn_only(1, v=5, scale=0.5)
    # δ of the order of the margins: some real-covered sequences are not float32-robust
    yield "ladder", "lowrank4", ladder()
    # δ[q][o] larger at o = 3: δ[q][m] + max_(o≠m) δ[q][o] differs from 2δ[q][m]
    yield "ladder_o3", "lowrank4", ladder((1.0, 1.0, 1.0, 2.0))


@pytest.mark.parametrize("direct", ["max_diff", "mean+diff", "min"])
@pytest.mark.parametrize("name,eu,w", list(_models()),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_entries_accepted_under_float32_are_float32_correct(name, eu, w, direct, tmp_path):
    """Each entry of the REAL low-rank certificate's table, offered alone in the float32
    certificate (its count claimed), is accepted only if every sequence it covers is correct
    over the reals with margin beyond δ_o + δ_m and correct in five float32 evaluations;
    the float32 certificate's own table is such a set of entries.  max_diff reads U only,
    mean+diff N only: each widening is tested on its own."""
    path = tmp_path / "m.pt"
    save_model(path, w)
    v, k = w.dims.d_vocab, w.dims.n_ctx
    _, _, good, index = float32_good(w)
    strategy = f"subcubic:direct={direct},near=2,eu={eu}"
    real_lines = generate(str(path), strategy)[0]
    f32_lines = generate(str(path), strategy, semantics="float32")[0]
    report = replay(f32_lines)
    covered = subcubic_covered(_gaps(_rule(f32_lines)), v, k)
    assert report.facts.correct == len(covered)
    assert good[[index[t] for t in covered]].all(), name
    real_gaps = _gaps(_rule(real_lines))
    accepted = refused = 0
    for key, gh in sorted(real_gaps.items()):
        cls = subcubic_covered({key: gh}, v, k)
        entry = [*key, *gh]
        lines = _replace_rule(f32_lines, lambda obj, e=entry: obj["hints"].update(gaps=[e]),
                              claim=len(cls))
        try:
            replay(lines)
        except Rejected:
            refused += 1
            continue
        accepted += 1
        assert good[[index[t] for t in cls]].all(), (name, entry)
    assert accepted > 0
    if name.startswith("ladder"):  # real entries with sequences that are not float32-robust
        not_robust = [e for e, gh in real_gaps.items()
                      if not good[[index[t] for t in subcubic_covered({e: gh}, v, k)]].all()]
        assert not_robust and refused >= len(not_robust), name


# --- work ----------------------------------------------------------------------------------------

def test_float32_work_is_real_plus_delta_plus_widening(planted, tmp_path):
    """The float32 line's charged work is the real rule's plus float32.delta_work and
    subcubic_direct.float32_work (3v² + v² per widened table), exactly, on the same hints;
    a --max-work one below it refuses the line."""
    from checker.cli import main as check_cert

    path, certs = planted
    f32 = certs[("lowrank1", "float32")]
    obj = _rule(f32)
    dims = Dims(2, 2, 3, 1)
    # the real line with the float32 line's hints: the same rule work without δ
    real = _replace_rule(certs[("lowrank1", "real")], lambda o: o.update(hints=obj["hints"]),
                         claim=obj["claim"])
    base, with_f32 = replay(real).work, replay(f32).work
    tables = subcubic_direct.Direct([[0] * 2] * 2, None, [[0] * 2] * 2)  # direct = min: U, N
    extra = fp.delta_work(dims) + subcubic_direct.float32_work(dims, tables)
    assert with_f32 - base == extra == fp.delta_work(dims) + 3 * 4 + 2 * 4
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(f32) + "\n")
    assert check_cert([str(cert), "--max-work", str(with_f32)]) == 0
    assert check_cert([str(cert), "--max-work", str(with_f32 - 1)]) != 0


def test_arb_same_count(planted, tmp_path, capsys):
    """Under --arith arb the low-rank float32 line runs in arb (δ exact integers, the
    tables in Arb) and proves the same count; a tampered count is refused."""
    pytest.importorskip("flint")
    from checker.cli import main as check_cert

    path, certs = planted
    for model in ("generator/models/max3_v8_seed0.pt", str(path)):
        lines = generate(model, "subcubic:direct=min,near=2,eu=lowrank1",
                         semantics="float32")[0]
        count = replay(lines).facts.correct
        cert = tmp_path / "c.jsonl"
        arb_float32_report(lines, cert, capsys)
    cert.write_text("\n".join(_replace_rule(lines, lambda o: None, claim=count + 1)) + "\n")
    assert check_cert([str(cert), "--arith", "arb"]) == 1
    capsys.readouterr()


def test_widening_is_delta_m_plus_max_other():
    """widened_float32 on hand-made δ: U and N raised by exactly δ[q][m] + max_(o≠m) δ[q][o]
    (binary64, rounded up by at most one ulp), the summary row unchanged."""
    from mpmath import mpf

    from checker.arith import MPMATH

    deltas = [[0.5, 0.25, 0.125], [1.0, 2.0, 4.0], [0.0, 0.0, 3.0]]
    dims = Dims(3, 2, 2, 1)
    zero = MPMATH.upper(MPMATH.point(0.0))
    tables = subcubic_direct.Direct([[zero] * 3 for _ in range(3)], ["s"],
                                    [[zero] * 3 for _ in range(3)])
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(fp, "attention_only_deltas", lambda *a, **k: deltas)
        charged = []
        out, worst = subcubic_direct.widened_float32(dims, tables, {}, charged.append, MPMATH)
    finally:
        patch.undo()
    assert charged[0] == fp.delta_work(dims) + 3 * 9 + 2 * 9
    for q, row in enumerate(deltas):
        for m in range(3):
            want = row[m] + max(x for o, x in enumerate(row) if o != m)
            for table in (out.u, out.n):
                got = float(mpf(table[q][m]))  # a raw mpmath upper bound
                assert want <= got <= np.nextafter(want, np.inf), (q, m, got, want)
    assert out.mean == ["s"] and worst == np.nextafter(6.0, np.inf)  # q = 1: 4 + 2
