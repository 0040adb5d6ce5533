"""The float32 semantics (spec/theorem.md §2c; issue 24): the rounding lemma against real
float32 arithmetic, the planted near-tie (real theorem counts it, float32 does not, and
float32 evaluations really disagree), mutants, statements and policies."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from mpmath import iv
from soundness_helpers import float32_evaluations, permute_residual

from checker import float32 as fp
from checker import statement
from checker.certificate import CertificateChecker
from checker.cli import main as check_cert
from checker.errors import Malformed, Rejected
from checker.rules import forward
from generator.cli import generate
from generator.model import MaxOfKTransformer
from generator.modelfile import load_model, save_model
from generator.planted import NEAR_TIE, near_tie_weights

F32 = np.float32
ROOT = Path(__file__).resolve().parent.parent


def replay(lines):
    checker = CertificateChecker()
    for line in lines:
        checker.feed(line)
    return checker.finish()


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    path = tmp_path_factory.mktemp("planted") / "near_tie.pt"
    save_model(path, near_tie_weights())
    certs = {name: generate(str(path), strategy, semantics=semantics)[0]
             for name, strategy, semantics in (("brute", "brute-force", "real"),
                                                ("forward", "forward-brute-force", "real"),
                                                ("float32", "forward-brute-force", "float32"))}
    return path, certs


# --- the lemma against float32 arithmetic -----------------------------------------------------

def _orders(a: np.ndarray, b: np.ndarray) -> list:
    """float32 dot products of a and b in several orders (left to right, reversed,
    pairwise, numpy's own, with float32 FMA emulated by one float64 rounding)."""
    prods = [F32(x) * F32(y) for x, y in zip(a, b)]

    def seq(xs):
        s = F32(0)
        for x in xs:
            s = F32(s + x)
        return s

    def pairwise(xs):
        if len(xs) == 1:
            return xs[0]
        mid = len(xs) // 2
        return F32(pairwise(xs[:mid]) + pairwise(xs[mid:]))

    def fma(xs, ys):
        s = F32(0)
        for x, y in zip(xs, ys):
            s = F32(np.float64(x) * np.float64(y) + np.float64(s))  # exact product, one rounding
        return s

    return [seq(prods), seq(prods[::-1]), pairwise(prods), F32(np.dot(a, b)),
            fma(a, b), fma(a[::-1], b[::-1]), seq(sorted(prods, key=abs))]


def test_dot_product_enclosure_contains_every_order():
    """float32.affine encloses x·W in every order tried, on vectors with cancellation and
    subnormal products; and the enclosure is needed (a real enclosure alone misses some)."""
    g = np.random.default_rng(0)
    missed = 0
    for trial in range(200):
        n = int(g.integers(2, 40))
        scale = 2.0 ** g.integers(-80, 20, size=n)
        a = (g.normal(size=n) * scale).astype(F32)
        b = (g.normal(size=n) * 2.0 ** g.integers(-80, 20, size=n)).astype(F32)
        if trial % 3 == 0:  # cancellation: a big pair that sums to zero
            a[0], a[1], b[0], b[1] = F32(2.0 ** 24), F32(2.0 ** 24), F32(1), F32(-1)
        x = [iv.mpf(float(t)) for t in a]
        col = [[iv.mpf(float(t))] for t in b]
        real = forward._vecmat(x, col)
        (enc,) = fp.affine(x, real, [fp.mags(iv.mpf(float(t)) for t in b)])
        for value in _orders(a, b):
            assert enc.a <= float(value) <= enc.b, (trial, value, enc)
            missed += not (real[0].a <= float(value) <= real[0].b)
    assert missed > 0  # the widening is load-bearing


def test_add_and_softmax_enclosures_contain_float32():
    g = np.random.default_rng(1)
    for _ in range(100):
        k = int(g.integers(2, 9))
        s = (g.normal(size=k) * 2.0 ** g.integers(-3, 6)).astype(F32)
        enc = fp.softmax([iv.mpf(float(t)) for t in s], forward.exp_interval)
        e = np.exp(s - s.max()).astype(F32)
        for a in (e / e.sum(dtype=F32), e * (F32(1) / e[::-1].sum(dtype=F32)),
                  torch.softmax(torch.from_numpy(s), 0).numpy()):
            for w, value in zip(enc, a):
                assert w.a <= float(value) <= w.b
        x, y = g.normal(size=k).astype(F32), g.normal(size=k).astype(F32)
        added = fp.add([iv.mpf(float(t)) for t in x], [iv.mpf(float(t)) for t in y])
        assert all(w.a <= float(v) <= w.b for w, v in zip(added, x + y))


def test_range_bound_refuses_overflow():
    with pytest.raises(fp.Overflow):
        fp.widen(iv.mpf(2.0 ** 126), 0.0)
    with pytest.raises(fp.Overflow):
        fp.dot_error(3, 2.0 ** 127)


# --- the planted near-tie ---------------------------------------------------------------------

def test_planted_real_counts_the_near_tie_float32_does_not(planted):
    path, certs = planted
    counts = {name: replay(lines).facts.correct for name, lines in certs.items()}
    assert counts == {"brute": 3, "forward": 3, "float32": 2}
    assert replay(certs["float32"]).facts.semantics == "float32"
    assert replay(certs["brute"]).facts.semantics == "real"
    # the one real-correct sequence the float32 theorem leaves out is the near-tie
    loaded = load_model(path)
    w = loaded.weights
    lines = certs["float32"]
    checker = CertificateChecker()
    for line in lines:
        checker.feed(line)
    rule = next(json.loads(x) for x in lines if '"kind":"rule"' in x)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    real = set(forward.certified_sequences(checker.dims, mats, lambda _: None))
    f32 = set(forward.certified_sequences(checker.dims, mats, lambda _: None, "float32"))
    assert real - f32 == {NEAR_TIE}
    assert w.dims.d_vocab == 2


def _real_logits(tokens) -> list:
    w = near_tie_weights()
    q = tokens[-1]  # attention is null: the last token's direct path
    x = [Fraction(float(a)) + Fraction(float(p)) for a, p in zip(w.W_E[q], w.W_pos[-1])]
    return [sum(x[j] * Fraction(float(w.W_U[j][o])) for j in range(3)) + Fraction(float(w.b_U[o]))
            for o in range(2)]


def test_planted_disagreement_is_real_in_float32():
    """The near-tie's float32 logits in several summation orders (numpy left to right,
    reversed, pairwise, numpy matmul, torch): the real model outputs the max, some float32
    orders do not — and every float32 value lies in the checker's float32 enclosure."""
    w = near_tie_weights()
    real = _real_logits(NEAR_TIE)
    assert real[0] > real[1] and max(NEAR_TIE) == 0  # real-correct, margin 1/2
    x = (w.W_E[NEAR_TIE[-1]] + w.W_pos[-1]).astype(F32)
    column = w.W_U[:, 0]
    lefts = _orders(x, column)
    logit0 = {float(v) + float(w.b_U[0]) for v in lefts}
    assert 0.0 in logit0 and 1.0 in logit0  # the order decides
    model = MaxOfKTransformer.from_weights(w)
    torch_logits = model(torch.tensor([NEAR_TIE])).detach().numpy()[0]
    assert torch_logits.dtype == np.float32
    outputs = {int(np.argmax([v, float(w.b_U[1])])) for v in logit0}
    assert outputs == {0, 1}  # some float32 evaluation outputs 1: wrong
    # every value is inside the float32 enclosure of the logit
    enc = fp.affine([iv.mpf(float(t)) for t in x],
                    forward._vecmat([iv.mpf(float(t)) for t in x],
                                    [[iv.mpf(float(t))] for t in column]),
                    [fp.mags(iv.mpf(float(t)) for t in column)])[0]
    for v in [*lefts, torch_logits[0] - w.b_U[0]]:
        assert enc.a <= float(v) <= enc.b


# --- mutants and statements -------------------------------------------------------------------

def _with_header(lines, change):
    header = json.loads(lines[0])
    header["theorem"] = change(header["theorem"])
    return [json.dumps(header, separators=(",", ":")), *lines[1:]]


def _with_claim(lines, claim):
    out = []
    for line in lines:
        obj = json.loads(line)
        if obj["kind"] == "rule":
            obj["claim"] = claim
        if obj["kind"] == "header":
            obj["theorem"] = obj["theorem"].replace("correct >= 2", f"correct >= {claim}")
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


def test_mutant_float32_claim_for_a_real_only_rule(planted):
    """A shipped cubic certificate relabelled float32, or a real brute_force certificate:
    the rule line lacks the weights Lemma G reads (tests/test_float32_decomp.py: more)."""
    shipped = (ROOT / "certs" / "max3_v8_seed0.cubic.jsonl").read_text().splitlines()
    lines = _with_header(shipped, lambda t: t + " and semantics == float32")
    with pytest.raises(Malformed, match="takes inputs"):
        replay(lines)
    _, certs = planted
    lines = _with_header(certs["brute"], lambda t: t + " and semantics == float32")
    with pytest.raises(Malformed, match="takes inputs"):
        replay(lines)


def test_mutant_real_certificate_relabelled_float32(planted):
    """The real forward certificate (3) with its theorem relabelled float32: the float32
    rule proves 2 < 3."""
    _, certs = planted
    lines = _with_header(certs["forward"], lambda t: t + " and semantics == float32")
    with pytest.raises(Rejected, match="proves 2 correct sequences, but the line claims 3"):
        replay(lines)


def test_mutant_tampered_float32_count(planted):
    _, certs = planted
    with pytest.raises(Rejected):
        replay(_with_claim(certs["float32"], 3))


def test_mutant_loosened_error_bound_would_accept(planted, monkeypatch):
    """The rounding bound is what refuses the count 3: with u, γ and η zeroed (a loosened
    bound), the same tampered certificate would pass — so the test above can fail."""
    _, certs = planted
    monkeypatch.setattr(fp, "gamma", lambda n: 0.0)
    monkeypatch.setattr(fp, "ETA", 0.0)
    monkeypatch.setattr(fp, "U", Fraction(0))
    assert replay(_with_claim(certs["float32"], 3)).facts.correct == 3


def test_float32_theorem_does_not_say_real_and_back(planted, tmp_path, capsys):
    path, certs = planted
    files = {}
    for name in ("brute", "float32"):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("\n".join(certs[name]) + "\n")
    run = lambda name, req: check_cert([str(files[name]), "--model", str(path),  # noqa: E731
                                        "--require", req, "--json"])
    assert run("float32", "semantics == float32") == 0
    assert json.loads(capsys.readouterr().out)["semantics"] == "float32"
    assert run("brute", "semantics == real") == 0
    assert json.loads(capsys.readouterr().out)["semantics"] == "real"
    assert run("brute", "semantics == float32") == 1
    assert run("float32", "semantics == real") == 1
    capsys.readouterr()
    assert check_cert([str(files["float32"])]) == 0
    assert "semantics: float32" in capsys.readouterr().out


def test_statement_semantics_atom():
    (atom,) = statement.parse("semantics == float32")
    assert atom.value == "float32"
    with pytest.raises(Malformed, match="unknown semantics"):
        statement.parse("semantics == float64")
    with pytest.raises(Malformed):
        statement.parse("semantics >= float32")


def test_every_rule_proves_float32():
    """Every rule names float32 among its semantics (family_gap too, since issue 24's
    family_gap_float32.py)."""
    from checker import rules

    assert sorted(n for n, r in rules.RULES.items()
                  if "float32" in getattr(r, "SEMANTICS", ())) \
        == ["brute_force", "cubic", "cubic_mix", "exact", "family_gap", "forward_brute_force",
            "overwhelm_family", "overwhelm_free", "overwhelm_perm", "subcubic_gap"]


def test_gen_cert_every_strategy_proves_float32(planted):
    """Every strategy is in gen-cert's float32 list (subcubic's low-rank EU too, since
    branch f32-lowrank: tests/test_float32_lowrank_eu.py); a strategy outside it would be
    refused by name."""
    from generator import cli as gen_cli
    from generator.certify import strategies

    assert set(strategies.STRATEGIES) == set(gen_cli.FLOAT32_STRATEGIES)
    path, _ = planted
    lines = generate(str(path), "subcubic:direct=min,near=2,eu=lowrank1", semantics="float32")[0]
    assert replay(lines).facts.correct == 2


# --- a family model: every float32-certified input is right in torch float32 ------------------

@pytest.mark.parametrize("name", ["max3_v8_ln_mlp_rope_seed0"])
def test_shipped_family_float32_certified_agree_with_torch(name):
    from generator.model import FamilyTransformer

    path = ROOT / "generator" / "models" / f"{name}.pt"
    lines, _ = generate(str(path), None, semantics="float32")
    checker = CertificateChecker()
    for line in lines:
        checker.feed(line)
    report = checker.finish()
    rule = next(json.loads(x) for x in lines if '"kind":"rule"' in x)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    certified = list(forward.certified_sequences(checker.dims, mats, lambda _: None,
                                                 "float32"))
    assert report.facts.correct == len(certified) > 0
    fw = load_model(path).weights
    model = FamilyTransformer(fw.dims)
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in fw.params.items()},
                          strict=True)
    tokens = torch.tensor(certified)
    logits = model(tokens).detach()
    assert logits.dtype == torch.float32
    assert logits.argmax(-1).tolist() == tokens.max(-1).values.tolist()


def test_real_forward_note_reports_margin_and_float32_loss(planted):
    """A real forward_brute_force check names its smallest certified margin and what a
    float32 evaluation may lose there: on the planted model the near-tie's 1/2, lost."""
    _, certs = planted
    (note,) = [n for n in replay(certs["forward"]).rule_notes if n.startswith("forward")]
    assert "smallest certified margin 0.5 at [0, 0]" in note
    lost = float(note.split("may lose ")[1].split(" ")[0])
    assert lost > 0.5  # more than the margin: the float32 theorem cannot count it


def test_float32_under_arb_runs_the_mpmath_float32_pass(planted, tmp_path, capsys):
    pytest.importorskip("flint")
    _, certs = planted
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(certs["float32"]) + "\n")
    assert check_cert([str(path), "--arith", "arb", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["correct"] == 2 and out["semantics"] == "float32"
    assert "evaluated with mpmath, the float32 passes are mpmath-only" in out["rules"][-1]


def test_float32_other_task(planted):
    """Any task: the float32 pass walks the task's prefixes (parity fits v = 2)."""
    path, _ = planted
    lines, _ = generate(str(path), None, task="parity", semantics="float32")
    report = replay(lines)
    assert report.facts.semantics == "float32" and report.facts.scored.name == "parity"
    real = replay(generate(str(path), None, task="parity")[0]).facts.correct
    assert report.facts.correct <= real


# --- Lemma G (brute_force under float32) -------------------------------------------------------

def _random_attn_only(seed: int, v=5, k=3, d=6, h=4, scale=0.7):
    from checker.modelspec import Dims
    from generator.model import ModelWeights

    g = np.random.default_rng(seed)
    shapes = {"W_E": (v, d), "W_pos": (k, d), "W_Q": (d, h), "W_K": (d, h), "W_V": (d, h),
              "W_O": (h, d), "b_Q": (h,), "b_K": (h,), "b_V": (h,), "b_O": (d,),
              "W_U": (d, v), "b_U": (v,)}
    return ModelWeights(dims=Dims(v, k, d, h), **{
        n: (g.normal(size=s) * scale * 2.0 ** g.integers(-1, 2)).astype(F32)
        for n, s in shapes.items()})


def _interval_weights(w) -> dict:
    """The attention-only weights as rows of point intervals (biases one row)."""
    return {n: [[iv.mpf(float(x)) for x in row] for row in np.atleast_2d(getattr(w, n))]
            for n in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V",
                      "b_O", "W_U", "b_U")}


def test_lemma_g_refuses_outside_its_model():
    """Scores too large for the softmax linearisation: Overflow (a Rejected), never a δ."""
    w = _random_attn_only(0, scale=40.0)
    with pytest.raises(fp.Overflow):
        fp.attention_only_delta(w.dims, _interval_weights(w))


@pytest.mark.parametrize("seed", range(4))
def test_lemma_g_bounds_float32_logits(seed):
    """|float32 logit − real logit| ≤ δ on every sequence, for torch (in several orders of
    the residual coordinates) and numpy (left to right, reversed) evaluations."""
    from generator.model import logits_float64

    w = _random_attn_only(seed)
    deltas = np.array(fp.attention_only_deltas(w.dims, _interval_weights(w)), dtype=float)
    tokens = np.array(list(itertools.product(range(w.dims.d_vocab), repeat=w.dims.n_ctx)))
    real = logits_float64(w, tokens)
    delta = deltas[tokens[:, -1]]  # δ[q][o] of each sequence's query token q
    worst = 0.0
    # torch in three residual orders, numpy left to right and reversed (shared helper)
    for logits in float32_evaluations(w, tokens, seed, reciprocal_when_reversed=False):
        err = np.abs(logits - real)
        assert (err <= delta).all()  # float64's own error (~1e-15 here) is far below the slack
        worst = max(worst, err.max())
    assert worst > 0
    assert float(fp.attention_only_delta(w.dims, _interval_weights(w))) == deltas.max()


def test_brute_force_float32_mutants(tmp_path, monkeypatch):
    """brute_force under float32 counts the planted model's two robust sequences, reads
    the weights (without them the line is malformed), refuses the near-tie's count 3, which
    δ zeroed (a loosened bound) would accept."""
    path = tmp_path / "p.pt"
    save_model(path, near_tie_weights())
    lines, _ = generate(str(path), "brute-force", semantics="float32")
    report = replay(lines)
    # δ is per query token: q = 1 (E[1] = 0) keeps its two sequences, the near-tie goes
    assert report.facts.correct == 2 and report.facts.semantics == "float32"
    rule_at = next(i for i, x in enumerate(lines) if '"kind":"rule"' in x)
    rule = json.loads(lines[rule_at])
    for name in ("W_E", "b_U"):
        cut = dict(rule, inputs={n: i for n, i in rule["inputs"].items() if n != name})
        mutant = list(lines)
        mutant[rule_at] = json.dumps(cut, separators=(",", ":"))
        with pytest.raises(Malformed, match="takes inputs"):
            replay(mutant)
    tampered = _with_claim(lines, 3)
    with pytest.raises(Rejected):
        replay(tampered)
    monkeypatch.setattr(fp, "attention_only_deltas",
                        lambda dims, w: [[Fraction(0)] * 2 for _ in range(2)])
    assert replay(tampered).facts.correct == 3


def test_gen_cert_pins_the_semantics(planted, tmp_path, capsys):
    from generator.cli import main as gen_cert

    path, _ = planted
    out, pol = tmp_path / "c.jsonl", tmp_path / "POLICY"
    assert gen_cert([str(path), "--semantics", "float32", "-q", "-o", str(out), "--pin", str(pol),
                     "--floor", "0.5"]) == 0
    assert "semantics == float32" in pol.read_text()
    # float32 overwhelm certificates: tests/test_float32_overwhelm.py


# --- red team: families under float32 --------------------------------------------------------

@pytest.mark.parametrize("name", ["ln_mlp_rope_2heads", "lnpre_parallel_partial_rotary",
                                  "gelu_new_parallel_rotary", "rms_silu_rotary", "attn_only"])
def test_family_float32_certified_are_float32_correct(name):
    """Random family models: every sequence the float32 pass certifies is real-correct
    (200-bit reference) and right in torch float32, with its residual coordinates in two
    orders (a permutation of d_model changes every sum's order, not the real function);
    and the float32 count is at most the real one."""
    from generator.certify.strategies import STRATEGIES
    from generator.certify.trace import Trace
    from generator.model import FamilyTransformer
    from tests.test_families import random_family_weights, reference_logits

    fw = random_family_weights(name)
    trace = Trace(fw)
    by, claim, _ = STRATEGIES["forward-brute-force"].certify(trace, semantics="float32")
    d = fw.dims
    mats = {}
    for n in forward.inputs(d):
        value = trace.values[trace.quantity(n)]
        mats[n] = [[iv.mpf((float(a), float(b))) for a, b in zip(lo, hi)]
                   for lo, hi in zip(value.lo, value.hi)]
    certified = list(forward.certified_sequences(d, mats, lambda _: None, "float32"))
    real = list(forward.certified_sequences(d, mats, lambda _: None))
    assert claim == len(certified) <= len(real) and set(certified) <= set(real)
    assert certified  # a non-trivial test
    for t in certified:
        logits = reference_logits(fw, t)
        assert all(logits[max(t)] > x for o, x in enumerate(logits) if o != max(t))
    tokens = torch.tensor(certified)
    g = np.random.default_rng(0)
    for perm in (None, g.permutation(d.d_model)):
        params = {k: np.array(v) for k, v in fw.params.items()}
        if perm is not None:
            params = permute_residual(params, perm)
        model = FamilyTransformer(d)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()}, strict=True)
        out = model(tokens).detach()
        assert out.dtype == torch.float32
        assert out.argmax(-1).tolist() == tokens.max(-1).values.tolist()
