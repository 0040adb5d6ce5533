"""Issue 21: several layers and gated MLPs.

Enumeration soundness against an independent 200-bit forward pass that computes every
position of every layer (causal attention) straight from spec/theorem.md §2b, written
here without checker or generator code; the prefix interface of forward._Model
(`logits(t[:p+1])` = the logits at position p); deliberate breaks (a layer skipped, a
layer reading the wrong stream, the gate's product dropped) caught; headers, digests and
refusals (decomposition and overwhelm rules, wrong depth in a config, a gated config
without W_gate)."""

from __future__ import annotations

import itertools
import json

import mpmath
import numpy as np
import pytest
from test_families import certificate, random_weights_for

from checker.certificate import CertificateChecker, weights_digest
from checker.errors import Malformed, Rejected
from checker.modelspec import ATTN_ONLY, Dims, Family, infer_dims, parameter_table
from checker.rules import forward
from checker.statement import Overwhelm
from checker.tl_config import family_from_tl_config
from generator.certify.strategies import STRATEGIES
from generator.certify.trace import Trace
from generator.ground_truth import count_correct
from generator.model import FamilyWeights, family_logits_float64

# --- the independent reference ---------------------------------------------------------------


def _activation(name: str, x):
    if name == "relu":
        return max(x, 0)
    if name == "gelu":
        return x * (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2
    if name == "silu":
        return x / (1 + mpmath.exp(-x))
    k = mpmath.sqrt(2 / mpmath.pi) if name == "gelu_new" else mpmath.mpf(7978845608) / 10**10
    return x * (1 + mpmath.tanh(k * (x + mpmath.mpf(44715) / 10**6 * x ** 3))) / 2


def reference_logits_all(fw: FamilyWeights, tokens) -> list:
    """The logits at every position of `tokens` (a list per position), 200 bits."""
    d, f = fw.dims, fw.dims.family
    P = {k: np.asarray(a, dtype=np.float64) for k, a in fw.params.items()}
    with mpmath.workprec(200):
        def vec(a):
            return [mpmath.mpf(float(x)) for x in np.ravel(a)]

        def vm(x, mat):
            return [mpmath.fsum(x[i] * mpmath.mpf(float(mat[i, c])) for i in range(len(x)))
                    for c in range(mat.shape[1])]

        def add(*xs):
            return [mpmath.fsum(t) for t in zip(*xs)]

        def norm(x, which):
            if f.normalization is None:
                return x
            centre = f.normalization in ("LN", "LNPre")
            mu = mpmath.fsum(x) / len(x) if centre else 0
            c = [a - mu for a in x]
            s = mpmath.sqrt(mpmath.fsum(a * a for a in c) / len(x) + mpmath.mpf(f.ln_eps))
            y = [a / s for a in c]
            if f.normalization in ("LNPre", "RMSPre"):
                return y
            y = [a * wi for a, wi in zip(y, vec(P[which + ".w"]))]
            return add(y, vec(P[which + ".b"])) if f.normalization == "LN" else y

        def rot(x, i):
            if f.positional != "rotary":
                return x
            half, out = f.rotary_dim // 2, list(x)
            for j in range(half):
                ang = i * mpmath.power(f.rotary_base, mpmath.mpf(-2 * j) / f.rotary_dim)
                c, s = mpmath.cos(ang), mpmath.sin(ang)
                out[j] = x[j] * c - x[j + half] * s
                out[j + half] = x[j + half] * c + x[j] * s
            return out

        n = len(tokens)
        xs = []
        for i, t in enumerate(tokens):
            x = vec(P["embed.W_E"][t])
            if f.positional == "standard":
                x = add(x, vec(P["pos_embed.W_pos"][i]))
            xs.append(x)
        for layer in range(f.n_layers):
            b = f"blocks.{layer}."
            a = b + "attn."
            u = [norm(x, b + "ln1") for x in xs]
            outs = [vec(P[a + "b_O"]) for _ in range(n)]
            for j in range(f.n_heads):
                def proj(x, name, i, rotate, j=j, a=a):
                    y = add(vm(x, P[a + "W_" + name][j]), vec(P[a + "b_" + name][j]))
                    return rot(y, i) if rotate else y
                qs = [proj(u[i], "Q", i, True) for i in range(n)]
                ks = [proj(u[i], "K", i, True) for i in range(n)]
                vs = [proj(u[i], "V", i, False) for i in range(n)]
                for p in range(n):  # causal: position p attends to 0..p
                    sc = [mpmath.fsum(x * y for x, y in zip(qs[p], ks[i])) / mpmath.sqrt(d.d_head)
                          for i in range(p + 1)]
                    e = [mpmath.exp(s) for s in sc]
                    tot = mpmath.fsum(e)
                    z = [mpmath.fsum(e[i] / tot * vs[i][c] for i in range(p + 1))
                         for c in range(d.d_head)]
                    outs[p] = add(outs[p], vm(z, P[a + "W_O"][j]))
            new = []
            for p in range(n):
                r = add(xs[p], outs[p])
                if f.d_mlp:
                    y = norm(xs[p] if f.parallel else r, b + "ln2")
                    m = b + "mlp."
                    if f.gated_mlp:
                        g = [_activation(f.act_fn, v) for v in vm(y, P[m + "W_gate"])]
                        hid = add([gi * li for gi, li in zip(g, vm(y, P[m + "W_in"]))],
                                  vec(P[m + "b_in"]))
                    else:
                        hid = [_activation(f.act_fn, v)
                               for v in add(vm(y, P[m + "W_in"]), vec(P[m + "b_in"]))]
                    r = add(r, vm(hid, P[m + "W_out"]), vec(P[m + "b_out"]))
                new.append(r)
            xs = new
        return [add(vm(norm(x, "ln_final"), P["unembed.W_U"]), vec(P["unembed.b_U"]))
                for x in xs]


# --- families ----------------------------------------------------------------------------------

FAMILIES = {
    "two_layers_attn_only": (Family(n_layers=2), Dims(4, 3, 4, 4)),
    "two_layers_ln_gelu_rotary_2heads": (
        Family(normalization="LN", n_heads=2, d_mlp=6, act_fn="gelu", positional="rotary",
               n_ctx=3, rotary_dim=2, rotary_base=10000, ln_eps=1e-5, n_layers=2),
        Dims(4, 3, 6, 3)),
    "gated_silu_rms_rotary": (
        Family(normalization="RMS", n_heads=2, d_mlp=6, act_fn="silu", positional="rotary",
               n_ctx=3, rotary_dim=4, rotary_base=10000, ln_eps=1e-6, gated_mlp=True),
        Dims(4, 3, 6, 4)),
    "two_layers_gated_gelu_new_parallel_lnpre": (
        Family(normalization="LNPre", d_mlp=5, act_fn="gelu_new", parallel=True,
               ln_eps=1e-5, n_layers=2, gated_mlp=True), Dims(4, 3, 5, 3)),
    "three_layers_relu_mlp": (Family(d_mlp=4, n_layers=3), Dims(3, 3, 4, 3)),
}


def random_weights(name: str, seed: int = 0, scale: float = 3.0) -> FamilyWeights:
    family, base = FAMILIES[name]
    dims = Dims(base.d_vocab, base.n_ctx, base.d_model, base.d_head, family)
    return random_weights_for(dims, seed, scale)


def rule_inputs(lines):
    checker = CertificateChecker()
    for line in lines:
        if '"kind":"rule"' in line:
            break
        checker.feed(line)
    rule = next(json.loads(x) for x in lines if '"kind":"rule"' in x)
    return checker.dims, {n: checker.values[i].matrix for n, i in rule["inputs"].items()}


def _mp_in(enclosure, value) -> bool:
    with mpmath.workprec(200):
        return mpmath.mpf(enclosure.a) <= value <= mpmath.mpf(enclosure.b)


def _correct(logits, top) -> bool:
    return all(logits[top] > x for o, x in enumerate(logits) if o != top)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def case(request):
    fw = random_weights(request.param)
    lines = certificate(fw)
    refs = {t: reference_logits_all(fw, t)
            for t in itertools.product(range(fw.dims.d_vocab), repeat=fw.dims.n_ctx)}
    return request.param, fw, lines, refs


def test_certificate_is_sound_and_exact(case):
    """Every sequence the rule certifies is correct by the 200-bit reference, the count is
    the exact count (no near-ties at these weights), and the generator's float64 count
    agrees."""
    name, fw, lines, refs = case
    checker = CertificateChecker()
    for line in lines:
        checker.feed(line)
    report = checker.finish()
    dims, mats = rule_inputs(lines)
    certified = set(forward.certified_sequences(dims, mats, lambda w: None))
    correct = {t for t, logits in refs.items() if _correct(logits[-1], max(t))}
    assert certified <= correct
    assert certified == correct, name
    assert report.facts.correct == len(certified)
    assert 0 < len(certified) < fw.dims.d_vocab ** fw.dims.n_ctx, name
    assert count_correct(fw, progress=False).correct == len(correct)


def test_enclosures_contain_the_reference_at_every_prefix(case):
    """The interface the tasks build on: logits(t[:p+1]) encloses the logits at position
    p of t, for every p, also when prefixes are asked out of lexicographic order (the
    memoised path is then rebuilt)."""
    name, fw, lines, refs = case
    dims, mats = rule_inputs(lines)
    model = forward._Model(dims, mats, lambda w: None)
    seqs = list(refs)
    order = seqs[::-1] + seqs[::7]  # reversed, then strided: the path diverges often
    for t in order:
        for p in range(len(t)):
            got = model.logits(t[:p + 1])
            assert all(_mp_in(e, r) for e, r in zip(got, refs[t][p])), (name, t, p)


def test_float64_forward_agrees_with_the_reference(case):
    name, fw, lines, refs = case
    seqs = np.array(list(refs))
    ours = family_logits_float64(fw, seqs)
    ref = np.array([[float(x) for x in refs[tuple(t)][-1]] for t in seqs])
    assert np.abs(ours - ref).max() < 1e-9 * max(1.0, np.abs(ref).max())


def test_path_work_is_charged_and_bounded():
    """Each position computed is charged position_cost; in lexicographic order the
    total stays within total_work (the generator's estimate; a smooth activation's pieces,
    charged as they run, come on top, as with one layer: here ReLU)."""
    fw = random_weights("three_layers_relu_mlp")
    dims, mats = rule_inputs(certificate(fw))
    charged = []
    list(forward.certified_sequences(dims, mats, charged.append))
    v, k = dims.d_vocab, dims.n_ctx
    positions = sum(v ** n for n in range(1, k + 1))
    assert charged.count(forward.position_cost(dims)) == positions
    assert sum(charged) + v ** k * forward._sequence_cost(dims) <= forward.total_work(dims)


# --- deliberate breaks -------------------------------------------------------------------------

def _logit_misses(fw) -> int:
    dims, mats = rule_inputs(certificate(fw))
    model = forward._Model(dims, mats, lambda w: None)
    misses = 0
    for tokens in itertools.product(range(fw.dims.d_vocab), repeat=fw.dims.n_ctx):
        ref = reference_logits_all(fw, tokens)[-1]
        misses += not all(_mp_in(e, r) for e, r in zip(model.logits(tokens), ref))
    return misses


def _claims_false(fw) -> bool:
    """Whether the (possibly mutated) checker accepts a certificate claiming more correct
    sequences than the reference finds: the count the mutated rule proves, against the truth."""
    dims, mats = rule_inputs(certificate(fw))
    proved = set(forward.certified_sequences(dims, mats, lambda w: None))
    truly = {t for t in proved if _correct(reference_logits_all(fw, t)[-1], max(t))}
    return proved != truly


def test_layer_skipped_is_caught(monkeypatch):
    """Deliberate break: the checker skips every layer after the first."""
    fw = random_weights("two_layers_attn_only")
    assert _logit_misses(fw) == 0 and not _claims_false(fw)
    real_position = forward._Model.position

    def skip(self, tokens):
        out = forward._Position()
        out.resid = self.block_out(self.resid0[len(tokens) - 1][tokens[-1]],
                                   self.attention(tokens), 0)
        return out

    monkeypatch.setattr(forward._Model, "position", skip)
    assert _logit_misses(fw) > 0
    assert _claims_false(fw)  # the mutant proves sequences the real model gets wrong
    monkeypatch.setattr(forward._Model, "position", real_position)
    assert _logit_misses(fw) == 0


def test_gate_product_dropped_is_caught(monkeypatch):
    """Deliberate break: the gated MLP's hidden layer φ(y W_gate) + b_in, the product
    with y W_in dropped."""
    fw = random_weights("gated_silu_rms_rotary")
    assert _logit_misses(fw) == 0
    real = forward._Model.mlp

    def no_product(self, x, layer=0):
        m, s = self.m, lambda name: forward.layer_short(layer, name)
        y = self.norm("ln2", x, layer)
        gate = forward.activate(self.f.act_fn, forward._vecmat(y, m[s("W_gate")]))
        hidden = forward._add(gate, m[s("b_in")][0])
        return forward._add(forward._vecmat(hidden, m[s("W_out")]), m[s("b_out")][0])

    monkeypatch.setattr(forward._Model, "mlp", no_product)
    assert _logit_misses(fw) > 0
    monkeypatch.setattr(forward._Model, "mlp", real)


def test_later_layer_with_layer_0_parameters_is_caught(monkeypatch):
    """Deliberate break: layer 1 normalises with layer 0's ln1 weights (a per-layer
    parameter read from the wrong layer)."""
    fw = random_weights("two_layers_ln_gelu_rotary_2heads")
    assert _logit_misses(fw) == 0
    real = forward._Model.norm

    def stale(self, which, x, layer=0):
        return real(self, which, x, 0 if which == "ln1" else layer)

    monkeypatch.setattr(forward._Model, "norm", stale)  # layer 1 uses layer 0's ln1 weights
    assert _logit_misses(fw) > 0


# --- headers, digests, refusals ----------------------------------------------------------------

def test_one_layer_family_json_and_table_are_unchanged():
    f = Family(normalization="LN", d_mlp=4, ln_eps=1e-5)
    assert set(f.to_json()) == {"normalization", "n_heads", "d_mlp", "act_fn", "positional",
                                "n_ctx", "rotary_dim", "rotary_base", "ln_eps", "parallel"}
    assert all(not p.key.startswith("blocks.1") for p in parameter_table(f))
    assert Family.from_json(f.to_json()) == f
    deep = Family(n_layers=2, d_mlp=4, gated_mlp=True)
    assert deep.to_json()["n_layers"] == 2 and deep.to_json()["gated_mlp"] is True
    assert Family.from_json(deep.to_json()) == deep
    assert not deep.is_attn_only and not Family(n_layers=2).is_attn_only
    shorts = [p.short for p in parameter_table(deep)]
    assert "W_Q" in shorts and "blocks.1.W_Q" in shorts and "blocks.1.W_gate" in shorts


@pytest.mark.parametrize("change", [{"n_layers": 0}, {"n_layers": 65}, {"n_layers": True},
                                    {"gated_mlp": 1}, {"gated_mlp": True, "d_mlp": 0},
                                    {"depth": 2}])
def test_bad_family_fields_are_refused(change):
    obj = {**Family(d_mlp=4).to_json(), **change}
    with pytest.raises(Malformed):
        Family.from_json(obj)


def test_digest_distinguishes_depth_and_gate():
    """The family JSON in the digest names n_layers and gated_mlp (only when not default)."""
    fw = random_weights("two_layers_attn_only")
    flat = {k: (a.shape, tuple(float(x) for x in a.ravel())) for k, a in fw.params.items()}
    one = Dims(4, 3, 4, 4, ATTN_ONLY)
    assert weights_digest(fw.dims, flat) != weights_digest(one, flat)


def test_more_layers_than_the_family_are_named():
    fw = random_weights("two_layers_attn_only")
    shapes = {k: a.shape for k, a in fw.params.items()}
    with pytest.raises(Malformed, match="more than one layer"):
        infer_dims(shapes, ATTN_ONLY)
    with pytest.raises(Malformed, match="more than 2 layers"):
        infer_dims({**shapes, "blocks.2.attn.W_Q": (1, 4, 4)}, Family(n_layers=2))


def _tl_cfg(**over):
    cfg = {"n_layers": 2, "d_model": 4, "d_head": 4, "n_heads": 1, "n_ctx": 3, "d_vocab": 4,
           "attn_only": True, "normalization_type": None}
    cfg.update(over)
    return cfg


def test_tl_config_depth_and_gate():
    fw = random_weights("two_layers_attn_only")
    shapes = {k: a.shape for k, a in fw.params.items()}
    assert family_from_tl_config(_tl_cfg(), shapes) == Family(n_layers=2)
    with pytest.raises(Malformed, match="n_layers = 3"):
        family_from_tl_config(_tl_cfg(n_layers=3), shapes)
    with pytest.raises(Malformed, match="n_layers = 0"):
        family_from_tl_config(_tl_cfg(n_layers=0))
    gated = family_from_tl_config(_tl_cfg(n_layers=1, attn_only=False, d_mlp=8,
                                          act_fn="silu", gated_mlp=True))
    assert gated.gated_mlp and gated.d_mlp == 8
    # a gated config whose tensors lack W_gate is refused, naming it
    dims = Dims(4, 3, 4, 4, Family(d_mlp=8, act_fn="silu"))
    plain = {p.key: dims.shape_of(p.key) for p in parameter_table(dims.family)}
    with pytest.raises(Malformed, match="W_gate"):
        infer_dims(plain, gated)


def test_decomposition_and_overwhelm_rules_refuse_two_layers():
    """The attention-only decomposition terms (EQKE, ...) are not defined for a
    two-layer attention-only family: a cubic rule line is rejected; overwhelm_family
    applies to it (its several-layer path, which then demands its own hints)."""
    from checker.definitions import model_terms
    from checker.rules import overwhelm_family

    fw = random_weights("two_layers_attn_only")
    assert "EQKE" not in model_terms(fw.dims)
    lines = certificate(fw)
    rule = json.loads(lines[-2])
    rule["rule"], rule["inputs"] = "cubic", {n: 1 for n in
                                             ("EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU")}
    bad = lines[:-2] + [json.dumps(rule), lines[-1]]
    checker = CertificateChecker()
    with pytest.raises((Rejected, Malformed), match="does not define|takes inputs"):
        for line in bad:
            checker.feed(line)
    claim = Overwhelm((3,), 3, 3, free_cmp="<=", free=1)
    with pytest.raises(Malformed, match="several layers"):
        overwhelm_family.check(fw.dims, {}, claim, None, lambda w: None)


def test_generator_decomposition_strategies_refuse_two_layers(tmp_path):
    from generator.certify.strategies import NotApplicable

    fw = random_weights("two_layers_attn_only")
    for name in ("cubic", "cubic-mix", "brute-force", "subcubic"):
        with pytest.raises(NotApplicable, match="not defined for this model family"):
            STRATEGIES[name].certify(Trace(fw))


def test_arb_checks_deep_and_gated_families_in_bulk():
    """Under --arith arb the bulk pass (forward_arb) checks several-layer and gated families:
    the same count and the same proof length (work) as the mpmath path."""
    pytest.importorskip("flint")
    from checker.arith import get

    for name in ("two_layers_attn_only", "gated_silu_rms_rotary"):
        fw = random_weights(name)
        lines = certificate(fw)
        reports = []
        for arith in ("mpmath", "arb"):
            checker = CertificateChecker(arith=get(arith))
            for line in lines:
                checker.feed(line)
            reports.append(checker.finish())
        assert reports[0].facts.correct == reports[1].facts.correct == json.loads(
            lines[-2])["claim"]
        assert reports[0].work == reports[1].work


def test_gen_cert_overwhelm_refuses_permutations_on_two_layers_by_name(tmp_path, capsys):
    """Free claims on several layers are rule overwhelm_family's (tests/
    test_overwhelm_deep.py); permutation claims are refused, and the message says so."""
    from generator.cli import main as gen_cert
    from generator.modelfile import save_model

    path = tmp_path / "m.pt"
    save_model(path, random_weights("two_layers_attn_only"), None)
    assert gen_cert([str(path), "--property", "overwhelm", "--prefix", "3", "--query", "3",
                     "--free-perm", "1", "-o", str(tmp_path / "c.jsonl"), "-q"]) == 2
    assert "free-perm" in capsys.readouterr().err


def test_shipped_demonstrations_are_deep_and_gated():
    """The shipped issue-21 models are what their names say, and their certificates claim
    the float64 exact count (models.json)."""
    from pathlib import Path

    from generator.modelfile import load_model

    root = Path(__file__).resolve().parent.parent
    manifest = {e["file"]: e for e in json.loads(
        (root / "generator" / "models" / "models.json").read_text())["models"]}
    for name, layers, gated in (("max3_v8_2layers_attn_only_seed0", 2, False),
                                ("max3_v8_llama_seed0", 2, True)):
        f = load_model(root / "generator" / "models" / f"{name}.pt").weights.dims.family
        assert (f.n_layers, f.gated_mlp) == (layers, gated)
        cert = (root / "certs" / f"{name}.forward.jsonl").read_text().splitlines()
        assert json.loads(cert[-2])["claim"] == manifest[f"{name}.pt"]["correct"]


@pytest.mark.parametrize("rule_name", ["brute_force", "cubic", "cubic_mix", "exact", "subcubic_gap",
                                       "overwhelm_free", "overwhelm_perm", "overwhelm_family"])
@pytest.mark.parametrize("family", ["two_layers_attn_only", "gated_silu_rms_rotary"])
def test_checker_rules_other_than_forward_refuse_deep_and_gated(rule_name, family):
    """A certificate of a two-layer (or gated) model whose rule line names any other rule,
    with the inputs that rule takes, is refused, and the message says why."""
    from checker import rules

    fw = random_weights(family)
    lines = certificate(fw)
    rule = json.loads(lines[-2])
    rule["rule"] = rule_name
    module = rules.RULES[rule_name]
    if rule_name.startswith("overwhelm"):
        rule["claim"] = {"prefix": [3], "query": 3, "free": 1, "free_cmp": "<=",
                         "output": 3, "over": None}
        if rule_name != "overwhelm_family":
            rule["inputs"] = {}
    else:
        rule["inputs"] = {name: 1 for name in module.INPUTS}
    checker = CertificateChecker()
    with pytest.raises((Rejected, Malformed)) as info:
        for line in lines[:-2] + [json.dumps(rule), lines[-1]]:
            checker.feed(line)
        checker.finish()
    assert any(why in str(info.value) for why in (
        "does not define", "applies only to the attention-only", "n_layers = 2",
        "gated_mlp = True", "RMS normalization",
        "(several layers): hints must be")), str(info.value)


def test_one_layer_training_config_json_is_unchanged():
    """Model files record TrainConfig.to_json(): a one-layer config's has no n_layers or
    gated_mlp key, so re-made one-layer models are byte for byte those of before."""
    from generator.train import TrainConfig

    one = TrainConfig(d_vocab=8, n_ctx=3, d_model=8, d_head=8, d_mlp=8)
    assert "n_layers" not in one.to_json() and "gated_mlp" not in one.to_json()
    deep = TrainConfig(d_vocab=8, n_ctx=3, d_model=8, d_head=8, d_mlp=8, n_layers=2,
                       gated_mlp=True)
    assert deep.to_json()["n_layers"] == 2 and deep.to_json()["gated_mlp"] is True
    assert deep.family.n_layers == 2 and deep.family.gated_mlp
