"""float32 semantics for rule family_gap (one layer; spec/rules.md §Rule family_gap under the
float32 semantics; checker/rules/family_gap_float32.py).

- Enumeration: every sequence an accepted float32 certificate counts (every class's
  sequences and every residue sequence) outputs max(t), strictly, in float32 in several
  evaluation orders (soundness_helpers.family_float32_evaluations); the float32 claim is at
  most the real one and at most the number of sequences correct in all those orders.
- Mutants: a planted near-tie (real margin ~1e-6) is counted by the real certificate and not
  by the float32 one; its class added to the float32 certificate is rejected (and accepted
  with every float32 error dropped: the rejection is the widening's doing); added to the
  residue it is rejected (the residue is decided by the float32 forward pass, not the real
  one).  Real certificates relabelled float32 are rejected.
- Each float32 error term of the class proof is present (against an independent float64
  evaluation of the class's one sequence, as tests/test_float32_overwhelm_family.py).
- Scope: LN, LNPre with a parallel MLP and no normalisation are proved (enumeration above);
  RMS and a gated MLP refused by name; several layers are family_gap_deep's
  (tests/test_float32_family_gap_deep.py).
"""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from family_gap_models import model, replay, rule_line, trained
from soundness_helpers import family_float32_evaluations
from test_families import reference_logits
from test_float32_overwhelm_family import _float64_trace, _gamma

from checker.errors import Rejected
from checker.rules import family_gap as rule
from checker.rules import family_gap_float32 as f32_gap
from checker.rules import overwhelm_family_float32 as f32
from generator.certify.strategies import family_gap as strategy
from generator.certify.trace import Trace
from generator.model import FamilyWeights

F32 = np.float32
ROOT = Path(__file__).resolve().parent.parent
# the models of tests/family_gap_models.py: LN, LNPre with a parallel MLP, no normalisation
SUPPORTED = ["ln_mlp_rope_2heads_k4", "ln_3heads_k2", "negative_ln_gains",
             "attends_to_smallest", "lnpre_parallel_mlp_k3", "mlp_no_norm_k3"]


def relabelled(lines: list, semantics: str) -> list:
    """The certificate with its theorem's semantics atom set to `semantics` (compact JSON)."""
    out = [json.loads(s) for s in lines]
    theorem = out[0]["theorem"].replace(" and semantics == float32", "")
    out[0]["theorem"] = theorem + ("" if semantics == "real" else f" and semantics == {semantics}")
    return [json.dumps(o, separators=(",", ":")) for o in out]


def lines_of(weights, semantics: str, residue_limit: int = strategy.RESIDUE_LIMIT) -> list:
    trace = Trace(weights, float_shadow=False)
    by, claim, _ = strategy.certify(trace, semantics=semantics, residue_limit=residue_limit)
    lines = trace.lines("family-gap", by, claim, {}, {})
    return relabelled(lines, semantics)


@functools.cache
def certificates(name: str) -> tuple:
    w = model(name)
    return tuple(lines_of(w, "real")), tuple(lines_of(w, "float32"))


def counted(dims, lines) -> np.ndarray:
    """Every sequence the certificate's rule line counts: its classes' sequences and its
    residue (all of it: the claim equals their number, checked below)."""
    hints = rule_line(lines)["hints"]
    seqs, total = [], 0
    for q, m, s, g, *_ in hints["classes"]:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        part = list(itertools.product(*rule.slots(dims, q, m, fixed, g)))
        assert len(part) == rule.class_size(dims, m, fixed, g)
        seqs += part
        total += len(part)
    seqs += [tuple(t) for t in hints.get("residue", [])]
    assert len(set(seqs)) == len(seqs)  # the classes are disjoint and miss the residue
    assert rule_line(lines)["claim"] == len(seqs)
    return np.array(seqs, dtype=np.int64).reshape(-1, dims.n_ctx)


def float32_correct(weights, tokens: np.ndarray) -> np.ndarray:
    """Per sequence: strict argmax max(t) in every evaluation of
    family_float32_evaluations."""
    ok = np.ones(len(tokens), dtype=bool)
    top = tokens.max(axis=1)
    for logits in family_float32_evaluations(weights, tokens):
        assert logits.dtype == F32
        best = logits[np.arange(len(tokens)), top]
        rest = logits.copy()
        rest[np.arange(len(tokens)), top] = -np.inf
        ok &= (rest < best[:, None]).all(axis=1)
    return ok


# --- enumeration soundness -----------------------------------------------------------------

@pytest.mark.parametrize("name", SUPPORTED)
def test_every_counted_sequence_is_float32_correct(name):
    w = model(name)
    dims = w.dims
    real, f32_lines = certificates(name)
    report = replay(f32_lines)
    assert report.facts.semantics == "float32"
    assert report.facts.correct == rule_line(f32_lines)["claim"]
    seqs = counted(dims, f32_lines)
    assert len(seqs) > 0
    assert float32_correct(w, seqs).all()
    # the float32 count is at most the real certificate's and at most the sequences correct
    # in every float32 order we ran
    every = np.array(list(itertools.product(range(dims.d_vocab), repeat=dims.n_ctx)))
    assert len(seqs) <= rule_line(real)["claim"]
    assert len(seqs) <= int(float32_correct(w, every).sum())
    assert replay(real).facts.semantics == "real"


def test_shipped_model_float32():
    """The shipped LN+MLP+RoPE model: the float32 certificate verifies and every sequence it
    counts is float32-correct; the shipped real certificate relabelled float32 is rejected."""
    from generator.modelfile import load_model

    w = load_model(str(ROOT / "generator/models/max3_v8_ln_mlp_rope_seed0.pt")).weights
    lines = lines_of(w, "float32")
    assert replay(lines).facts.semantics == "float32"
    assert float32_correct(w, counted(w.dims, lines)).all()
    shipped = (ROOT / "certs/max3_v8_ln_mlp_rope_seed0.family-gap.jsonl").read_text().splitlines()
    with pytest.raises(Rejected):
        replay(relabelled(shipped, "float32"))


@pytest.mark.parametrize("name", ["ln_mlp_rope_2heads_k4", "ln_3heads_k2"])
def test_real_certificate_relabelled_float32_rejected(name):
    real, _ = certificates(name)
    with pytest.raises(Rejected):
        replay(relabelled(list(real), "float32"))


# --- the planted near-tie ----------------------------------------------------------------

SEQ = (5, 5, 5, 3)  # the class (q=3, m=5, S={0, 1, 2}): this one sequence


def _near_tie(target: float = 1e-6) -> FamilyWeights:
    """ln_mlp_rope_2heads_k4 with b_U[5] lowered so that SEQ's real margin is ~target."""
    w = trained("ln_mlp_rope_2heads_k4")
    logits = np.array([float(x) for x in reference_logits(w, SEQ)])
    m = max(SEQ)
    margin = logits[m] - np.max(np.delete(logits, m))
    assert margin > 0
    params = {k: np.array(a, dtype=F32) for k, a in w.params.items()}
    params["unembed.b_U"][m] = F32(float(params["unembed.b_U"][m]) - margin + target)
    planted = FamilyWeights(dims=w.dims, params=params)
    logits = np.array([float(x) for x in reference_logits(planted, SEQ)])
    real_margin = logits[m] - np.max(np.delete(logits, m))
    assert 0 < real_margin < 10 * target
    return planted


@pytest.fixture(scope="module")
def near_tie():
    w = _near_tie()
    return w, lines_of(w, "real"), lines_of(w, "float32")


def _with_rule(lines, edit, delta):
    out = []
    for x in lines:
        obj = json.loads(x)
        if obj["kind"] == "rule":
            edit(obj["hints"])
            obj["claim"] += delta
        if obj["kind"] == "header":
            old = rule_line(lines)["claim"]
            obj["theorem"] = obj["theorem"].replace(f"correct >= {old}",
                                                    f"correct >= {old + delta}")
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


def test_near_tie_real_counts_float32_does_not(near_tie):
    w, real, f32_lines = near_tie
    assert SEQ in {tuple(t) for t in counted(w.dims, real)}
    assert SEQ not in {tuple(t) for t in counted(w.dims, f32_lines)}
    assert replay(real).facts.correct == rule_line(real)["claim"]
    assert replay(f32_lines).facts.correct == rule_line(f32_lines)["claim"]
    with pytest.raises(Rejected):
        replay(relabelled(real, "float32"))


def _planted_class(w):
    """The class of SEQ with the largest slack (of F32_SLACKS and smaller) with which the
    real float64 mirror proves it (the near-tie leaves little room)."""
    tab = strategy.Tables(w)
    hint = next(h for rel in (*strategy.F32_SLACKS[::-1], 1e-5, 1e-6, 1e-7, 1e-9)
                if (h := strategy.attempt(tab, 3, 5, (0, 1, 2), 1, rel)) is not None)
    return strategy.encode([(3, 5, (0, 1, 2), 1, hint)])["classes"][0]


def _add_class(hints, entry):
    classes = hints["classes"] + [entry]
    classes.sort(key=lambda c: (c[0], c[1], rule.order_key(
        c[2]["first"] if isinstance(c[2], dict) else tuple(c[2]))))
    hints["classes"] = classes
    hints["residue"] = [t for t in hints.get("residue", []) if tuple(t) != SEQ]
    if not hints["residue"]:
        del hints["residue"]


def _skip_widening(monkeypatch):
    """The float32 rule with every float32 error dropped (as in
    tests/test_float32_overwhelm_family.py)."""
    from checker import float32 as fp
    from checker.rules import forward

    monkeypatch.setattr(f32.Tables, "MODEL", forward._Model)
    monkeypatch.setattr(f32.AtQuery, "widening", lambda self, a, y, col: 0.0)
    monkeypatch.setattr(f32, "U", 0.0)
    monkeypatch.setattr(fp, "dot_error", lambda n, s: 0.0)
    monkeypatch.setattr(fp, "mean_error", lambda n, s: 0.0)
    monkeypatch.setattr(fp, "gamma", lambda n: 0.0)
    monkeypatch.setattr(fp, "exp_factor", lambda: 1)
    monkeypatch.setattr(fp, "ETA", 0.0)


def test_near_tie_class_rejected_in_float32(near_tie, monkeypatch):
    """SEQ's class added to the float32 certificate is rejected; with every float32 error
    dropped the same lines are accepted (so the rejection is the widening's doing)."""
    w, _, f32_lines = near_tie
    residue = rule_line(f32_lines)["hints"].get("residue", [])
    delta = 1 - (list(SEQ) in residue)
    lines = _with_rule(f32_lines, lambda h: _add_class(h, _planted_class(w)), delta)
    with pytest.raises(Rejected):
        replay(lines)
    _skip_widening(monkeypatch)
    assert replay(lines).facts.semantics == "float32"


def test_near_tie_residue_decided_in_float32(near_tie):
    """SEQ added to the float32 certificate's residue, the claim raised by one: rejected
    (its float32 forward pass does not certify it; the real one does: see below)."""
    from checker.rules import forward
    from generator.certify.strategies.family_gap import checker_inputs

    w, _, f32_lines = near_tie
    assert SEQ not in {tuple(t) for t in counted(w.dims, f32_lines)}

    def add(h):
        h["residue"] = sorted(h.get("residue", []) + [list(SEQ)])
    lines = _with_rule(f32_lines, add, 1)
    with pytest.raises(Rejected, match="proves"):
        replay(lines)
    mats = checker_inputs(Trace(w, float_shadow=False))
    assert forward._certified(forward._Model(w.dims, mats, lambda n: None).logits(SEQ), 5)


# --- each float32 error term is present ---------------------------------------------------

def test_every_float32_error_term_is_present(monkeypatch):
    """On the class (q=3, m=5, S={0,1,2}) of ln_mlp_rope_2heads_k4 (one sequence), each error
    term is at least its value at the sequence's own float64 quantities (spec/rules.md
    §overwhelm_family under float32): Lemma S's spread, Rr, E(g_t), the unembedding's
    roundings, the final LayerNorm's D and Ec, the weights' width 16u."""
    w = trained("ln_mlp_rope_2heads_k4")
    captured = []
    original = f32_gap.ClassQuery.check

    def spy(self):
        captured.append(self)
        return original(self)

    monkeypatch.setattr(f32_gap.ClassQuery, "check", spy)
    _, f32_lines = certificates("ln_mlp_rope_2heads_k4")
    assert SEQ in {tuple(t) for t in counted(w.dims, f32_lines)}
    replay(list(f32_lines))
    at = next(c for c in captured if c.claim.query == 3 and c.claim.output == 5
              and all(len(s) == 1 for s in c.heads[0].slots))
    tr = _float64_trace(w, SEQ)
    wt, dims, f = tr["w"], w.dims, w.dims.family
    d, h, n, low, u = dims.d_model, dims.d_head, len(SEQ), 1 - 1e-9, 2.0 ** -24
    assert at.spread >= _gamma(n + 1)
    w_o = wt["blocks.0.attn.W_O"]
    t_sum = (np.abs(tr["x_p"]) + np.abs(wt["blocks.0.attn.b_O"])
             + np.einsum("jh,jhd->d", np.abs(tr["z"]), np.abs(w_o)))
    rr_ref = _gamma(f.n_heads * h + 2) * t_sum
    assert (np.array(at.rr) >= rr_ref * low).all()
    u_mat, b_u = wt["unembed.W_U"], wt["unembed.b_U"]
    o = 5
    wo_c = w_o - w_o.mean(-1, keepdims=True)
    unemb = _gamma(d + 1) * (np.abs(tr["y_f"]) @ np.abs(u_mat) + np.abs(b_u))
    w_f, b_f = wt["ln_final.w"], wt["ln_final.b"]
    n_f = tr["c_f"] / tr["sigma_f"]
    dev_ref = (_gamma(2) * (np.abs(n_f * w_f) + np.abs(b_f))
               + np.abs(w_f) * _gamma(8) * np.abs(tr["c_f"]) / tr["sigma_f"])
    for t in range(dims.d_vocab):
        if t == o:
            continue
        g = (u_mat[:, t] - u_mat[:, o]) * w_f
        cg = g - g.mean()
        vo_g = np.einsum("jlh,jhd,d->jl", tr["val"], wo_c, g)
        e_ref = float(rr_ref @ np.abs(cg)) + _gamma(n + 1) * float(np.abs(vo_g).max(-1).sum())
        assert at.parts[t]["E"] >= e_ref * low, t
        assert at.parts[t]["unembed"] >= (unemb[t] + unemb[o]) * low, t
        dt = np.abs(u_mat[:, t] - u_mat[:, o])
        assert float(np.array(at.last_dev) @ dt) >= float(dev_ref @ dt) * low, t
    r2 = tr["resid2"]
    ec_ref = _gamma(d + 1) * np.abs(r2).sum() / d + u * np.abs(tr["c_f"])
    assert (np.array(at.last_ec) >= ec_ref * low).all()
    for head in at.heads:
        for x in head.w.values():
            assert float((x.b - x.a).a) >= 15 * u * float(x.b)  # a lower bound of the width


def test_tables_are_float32_enclosures(monkeypatch):
    """The class proofs read Float32Model's tables (not the real forward pass's)."""
    from checker.rules.forward_float32 import Float32Model

    seen = []
    original = f32_gap.ClassQuery.check
    monkeypatch.setattr(f32_gap.ClassQuery, "check",
                        lambda self: (seen.append(type(self.t.model)), original(self))[1])
    _, f32_lines = certificates("ln_3heads_k2")
    replay(list(f32_lines))
    assert seen and all(t is Float32Model for t in seen)


# --- scope ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["lnpre_parallel_mlp_k3", "mlp_no_norm_k3"])
def test_lnpre_parallel_and_no_norm_are_in_scope(name):
    """LNPre with a parallel MLP and no normalisation (the real rule's families on one layer):
    the float32 certificate is accepted and proves something, the real one relabelled float32
    is not accepted at the real count (the widening costs sequences or is rejected)."""
    w = model(name)
    real, f32_lines = certificates(name)
    assert replay(list(f32_lines)).facts.correct > 0
    try:
        relabelled_count = replay(relabelled(list(real), "float32")).facts.correct
    except Rejected:
        return
    assert relabelled_count <= rule_line(real)["claim"]
    del w


@pytest.mark.parametrize("family", [dict(normalization="RMS"), dict(gated_mlp=True),
                                    dict(n_layers=2)])
def test_scope_refused_by_name(family):
    """Outside the real rule's families (RMS, a gated MLP, several layers) the float32 variant
    refuses by name too."""
    from dataclasses import replace

    dims = model("ln_3heads_k2").dims
    with pytest.raises(Rejected, match="semantics == float32"):
        f32_gap.refuse(replace(dims, family=replace(dims.family, **family)))


def test_cost_charges_the_float32_work():
    """The float32 rule charges more than the real one for the same classes (the widening's
    work), and the certificate checks within its charge."""
    w = trained("ln_3heads_k2")
    dims = w.dims
    classes = [(q, m, fixed, 1, None) for q, m, fixed in strategy.class_keys(dims.d_vocab,
                                                                              dims.n_ctx)
               if rule.signature(dims, q, m, fixed, 1) is None]
    assert f32_gap.cost(dims, classes, 3) > rule.cost(dims, classes, 3)


def test_lemma_s_weights_enclose_the_spec_factor(monkeypatch):
    """Every class proof's head weights enclose Lemma W-family's W(i, u) = exp(S(i, u) − σ)·
    [1 − ρ, 1 + 2ρ]·[1 − 8u, 1 + 8u] (ρ = 2u·max|S| over the slots; the exp factor written
    here from spec/theorem.md §2c's 4 ulps, not read from checker/float32.py): so dropping
    Lemma S's ρ factor or the exp factor is caught."""
    from mpmath import iv

    from checker import float32 as fp
    from checker.rules import overwhelm_family as base

    captured = []
    original = f32_gap.ClassQuery.check

    def spy(self):
        captured.append(self)
        return original(self)

    monkeypatch.setattr(f32_gap.ClassQuery, "check", spy)
    _, f32_lines = certificates("ln_3heads_k2")
    replay(list(f32_lines))
    assert captured
    u = 2.0 ** -24
    for at in captured[:20]:
        model, p = at.t.model, at.p
        for j, head in enumerate(at.heads):
            q = model.q[j][p][head.slots[p][0]]
            scores = {}
            for i, toks in enumerate(head.slots):
                for tok in toks:
                    key = model.key[j][i][tok]
                    real = base.dot(q, key) * model.scale
                    scores[(i, tok)] = fp.widen(real, fp.score_error(
                        len(q), fp.mag(model.scale), fp.mags(q), fp.mags(key)))
            rho = 2 * u * max(float(max(abs(s.a), abs(s.b))) for s in scores.values())
            shift = iv.mpf(scores[(p, head.slots[p][0])].mid)
            for k, s in scores.items():
                hi = float(iv.exp(s - shift).b) * (1 + 2 * rho) * (1 + 8 * u)
                lo = float(iv.exp(s - shift).a) * (1 - rho) * (1 - 8 * u)
                assert float(head.w[k].b) >= hi * (1 - 1e-12), (j, k)
                assert float(head.w[k].a) <= lo * (1 + 1e-12), (j, k)


def test_gen_cert_family_gap_float32_end_to_end(tmp_path):
    """gen-cert's entry point (generator.cli.generate) with --strategy family-gap --semantics
    float32 on the shipped LN+MLP+RoPE model: a float32 theorem that check-cert accepts with
    the model file."""
    from checker import cli as check_cli
    from generator.cli import generate

    model = ROOT / "generator/models/max3_v8_ln_mlp_rope_seed0.pt"
    lines, summary = generate(str(model), "family-gap", semantics="float32")
    assert summary["claim"] > 0
    assert json.loads(lines[0])["theorem"].endswith("and semantics == float32")
    cert = tmp_path / "f32.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    assert check_cli.main([str(cert), "--model", str(model),
                           "--require", "semantics == float32"]) == 0


@pytest.mark.parametrize("name", ["ln_mlp_rope_2heads_k4", "mlp_no_norm_k3"])
def test_real_box_certificate_relabelled_float32(name):
    """A real certificate with box classes (family-gap boxes=on) relabelled float32: the float32
    path reads the boxes (parse, disjointness, sizes, its class proof over their slots); if it
    accepts, every counted sequence — classes, boxes, residue — is float32-correct in every
    evaluation order and the count is at most the real one; else it rejects (the real hints are
    tight for the real model).  Either way it never accepts a wrong sequence."""
    from family_gap_models import certificate

    w = model(name)
    dims = w.dims
    real = list(certificate(name, "always", "on"))
    hints = rule_line(real)["hints"]
    assert hints.get("boxes")
    try:
        got = replay(relabelled(real, "float32")).facts.correct
    except Rejected:
        return
    seqs = set()
    for q, m, s, g, *_ in hints["classes"]:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        seqs |= set(itertools.product(*rule.slots(dims, q, m, fixed, g)))
    for q, m, sets, *_ in hints["boxes"]:
        seqs |= set(itertools.product(*rule.slots(dims, q, m, rule.Box(tuple(x) for x in sets),
                                                  0)))
    seqs |= {tuple(t) for t in hints.get("residue", [])}
    assert got <= len(seqs) <= rule_line(real)["claim"]
    tokens = np.array(sorted(seqs), dtype=np.int64).reshape(-1, dims.n_ctx)
    assert float32_correct(w, tokens).all()
