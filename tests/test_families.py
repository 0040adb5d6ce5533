"""Model families (LayerNorm, MLP, RoPE, several heads): rigorous elementary
functions, the forward_brute_force rule's soundness against an independent
200-bit forward pass, mutants, and model files with their config."""

from __future__ import annotations

import base64
import itertools
import json
import math
import struct
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mpmath import iv

from checker import elementary
from checker.certificate import CertificateChecker
from checker.cli import main as check_cert
from checker.errors import Malformed, Rejected
from checker.modelspec import ATTN_ONLY, Dims, Family, parameter_table
from checker.rules import forward, forward_model
from generator.certify.strategies import STRATEGIES
from generator.certify.trace import Trace
from generator.ground_truth import count_correct
from generator.model import FamilyTransformer, FamilyWeights, family_logits_float64
from generator.modelfile import load_model, save_model

HIGH_PRECISION = 300  # bits of the reference values


def _mp(x) -> mpmath.mpf:
    return mpmath.mpf(Fraction(x).numerator) / Fraction(x).denominator


def _inside(enclosure, exact) -> bool:
    lo, hi = elementary.endpoints(enclosure)
    return lo <= exact <= hi


# --- elementary functions against high precision ------------------------------------------

dyadic = st.builds(lambda n, e: Fraction(n) * Fraction(2) ** e,
                   st.integers(-(1 << 60), 1 << 60), st.integers(-70, 5))


def _point(q: Fraction):
    return elementary._interval_from_rationals(q, q)


@settings(max_examples=150, deadline=None)
@given(dyadic)
def test_cos_sin_enclose_high_precision(q):
    q = max(min(q, Fraction(300)), Fraction(-300))
    x = _point(q)  # a tiny interval around q (rounded outward)
    with mpmath.workprec(HIGH_PRECISION):
        for fn, ref in ((elementary.cos_interval, mpmath.cos), (elementary.sin_interval,
                                                                mpmath.sin)):
            got = fn(x)
            lo, hi = elementary.endpoints(got)
            for end in elementary.endpoints(x):
                value = ref(_mp(end))
                assert _mp(lo) <= value <= _mp(hi)
            assert hi - lo < Fraction(1, 1 << 70) + 4 * (elementary.endpoints(x)[1]
                                                         - elementary.endpoints(x)[0])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 1 << 70), st.integers(-90, 40))
def test_sqrt_encloses_and_is_tight(n, e):
    x = _point(Fraction(n) * Fraction(2) ** e)
    x_lo, x_hi = elementary.endpoints(x)
    lo, hi = elementary.endpoints(elementary.sqrt_interval(x))
    assert lo * lo <= x_lo and x_hi <= hi * hi  # exact check, no reference function needed
    assert hi - lo <= Fraction(1, 1 << 70) * max(1, hi) + (x_hi - x_lo)


def test_sqrt_refuses_negative():
    with pytest.raises(Malformed):
        elementary.sqrt_interval(iv.mpf((-1, 1)))


def test_square_of_straddling_interval_is_non_negative():
    lo, hi = elementary.endpoints(elementary.square_interval(iv.mpf((-2, 1))))
    assert lo == 0 and hi >= 4


@pytest.mark.parametrize("r,base", [(2, 10000), (4, 10000), (8, 10000), (6, 500), (16, 2)])
def test_rope_frequencies_enclose(r, base):
    with mpmath.workprec(HIGH_PRECISION):
        for j in range(r // 2):
            lo, hi = elementary.rope_theta(j, r, base)
            exact = mpmath.power(base, mpmath.mpf(-2 * j) / r)
            assert _mp(lo) <= exact <= _mp(hi)
            assert hi - lo < Fraction(1, 1 << 100)


def test_rope_table_encloses_exact_angles():
    table = elementary.rope_table(5, 6, 10000, odd=False)
    with mpmath.workprec(HIGH_PRECISION):
        for i, j in itertools.product(range(5), range(3)):
            exact = mpmath.cos(i * mpmath.power(10000, mpmath.mpf(-2 * j) / 6))
            lo, hi = elementary.endpoints(table[i][j])
            assert _mp(lo) <= exact <= _mp(hi) and hi - lo < Fraction(1, 1 << 70)


def test_angle_limit():
    with pytest.raises(Malformed):
        elementary.cos_interval(iv.mpf(elementary.ANGLE_LIMIT * 2))


# --- an independent forward pass at 200 bits -----------------------------------------------

def reference_logits(fw: FamilyWeights, tokens) -> list:
    """spec/theorem.md §2 evaluated in 200-bit mpmath (no checker or generator code)."""
    d, f = fw.dims, fw.dims.family
    P = {k: np.asarray(a, dtype=np.float64) for k, a in fw.params.items()}
    with mpmath.workprec(200):
        def vec(a):
            return [mpmath.mpf(float(x)) for x in a]

        def vm(x, mat):  # x (n) @ mat (n, c)
            return [mpmath.fsum(x[i] * mpmath.mpf(float(mat[i, c])) for i in range(len(x)))
                    for c in range(mat.shape[1])]

        def norm(x, which):
            if f.normalization is None:
                return x
            if f.normalization in ("RMS", "RMSPre"):
                s = mpmath.sqrt(mpmath.fsum(a * a for a in x) / len(x) + mpmath.mpf(f.ln_eps))
                y = [a / s for a in x]
                return y if f.normalization == "RMSPre" else [
                    a * wi for a, wi in zip(y, vec(P[which + ".w"]))]
            mu = mpmath.fsum(x) / len(x)
            c = [a - mu for a in x]
            s = mpmath.sqrt(mpmath.fsum(a * a for a in c) / len(x) + mpmath.mpf(f.ln_eps))
            y = [a / s for a in c]
            if f.normalization == "LNPre":
                return y
            w, b = vec(P[which + ".w"]), vec(P[which + ".b"])
            return [a * wi + bi for a, wi, bi in zip(y, w, b)]

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

        k = d.n_ctx
        xs = []
        for i, t in enumerate(tokens):
            x = vec(P["embed.W_E"][t])
            if f.positional == "standard":
                x = [a + b for a, b in zip(x, vec(P["pos_embed.W_pos"][i]))]
            xs.append(x)
        normed = [norm(x, "blocks.0.ln1") for x in xs]
        a = "blocks.0.attn."
        resid = [r + b for r, b in zip(xs[-1], vec(P[a + "b_O"]))]
        for h in range(f.n_heads):
            def proj(x, name, i, h=h):
                return rot([p + b for p, b in zip(vm(x, P[a + "W_" + name][h]),
                                                  vec(P[a + "b_" + name][h]))], i)
            q = proj(normed[-1], "Q", k - 1)
            keys = [proj(normed[i], "K", i) for i in range(k)]
            vals = [[p + b for p, b in zip(vm(normed[i], P[a + "W_V"][h]),
                                           vec(P[a + "b_V"][h]))] for i in range(k)]
            scores = [mpmath.fsum(x * y for x, y in zip(q, kk)) / mpmath.sqrt(d.d_head)
                      for kk in keys]
            e = [mpmath.exp(s) for s in scores]
            attn = [x / mpmath.fsum(e) for x in e]
            z = [mpmath.fsum(attn[i] * vals[i][c] for i in range(k)) for c in range(d.d_head)]
            resid = [r + o for r, o in zip(resid, vm(z, P[a + "W_O"][h]))]
        if f.d_mlp:
            m_in = norm(xs[-1] if f.parallel else resid, "blocks.0.ln2")
            pre = [p + b for p, b in zip(vm(m_in, P["blocks.0.mlp.W_in"]),
                                         vec(P["blocks.0.mlp.b_in"]))]
            out = vm([_activation(f.act_fn, p) for p in pre], P["blocks.0.mlp.W_out"])
            resid = [r + o + b for r, o, b in zip(resid, out, vec(P["blocks.0.mlp.b_out"]))]
        return [p + b for p, b in zip(vm(norm(resid, "ln_final"), P["unembed.W_U"]),
                                      vec(P["unembed.b_U"]))]


def _activation(name: str, x):
    """spec/rules.md §Activations, in mpmath at the working precision."""
    if name == "relu":
        return max(x, 0)
    if name == "gelu":
        return x * (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2
    if name == "silu":
        return x / (1 + mpmath.exp(-x))
    k = mpmath.sqrt(2 / mpmath.pi) if name == "gelu_new" else mpmath.mpf(7978845608) / 10**10
    return x * (1 + mpmath.tanh(k * (x + mpmath.mpf(44715) / 10**6 * x ** 3))) / 2


FAMILIES = {
    "ln_mlp_rope_2heads": (Family(normalization="LN", n_heads=2, d_mlp=8, positional="rotary",
                                  n_ctx=3, rotary_dim=4, rotary_base=10000, ln_eps=1e-5),
                           Dims(5, 3, 6, 4)),
    "lnpre_parallel_partial_rotary": (Family(normalization="LNPre", d_mlp=6, parallel=True,
                                             positional="rotary", n_ctx=3, rotary_dim=2,
                                             rotary_base=500, ln_eps=1.0), Dims(4, 3, 5, 4)),
    "ln_learned_pos_3heads": (Family(normalization="LN", n_heads=3, ln_eps=0.25),
                              Dims(4, 3, 6, 2)),
    "mlp_no_norm": (Family(d_mlp=5), Dims(4, 3, 4, 3)),
    "attn_only": (ATTN_ONLY, Dims(4, 3, 4, 4)),
    # issue 21: the smooth activations
    "gelu_ln_learned_pos": (Family(normalization="LN", d_mlp=6, act_fn="gelu", ln_eps=1e-5),
                            Dims(4, 3, 5, 4)),
    "gelu_new_parallel_rotary": (Family(normalization="LN", d_mlp=6, act_fn="gelu_new",
                                        parallel=True, positional="rotary", n_ctx=3,
                                        rotary_dim=2, rotary_base=10000, ln_eps=1e-5),
                                 Dims(4, 3, 6, 3)),
    "gelu_fast_lnpre_2heads": (Family(normalization="LNPre", n_heads=2, d_mlp=5,
                                      act_fn="gelu_fast", ln_eps=1e-5), Dims(4, 3, 5, 3)),
    "silu_no_norm": (Family(d_mlp=5, act_fn="silu"), Dims(4, 3, 4, 3)),
    # issue 21: RMSNorm (Llama-style with SiLU and RoPE; RMSPre with GELU)
    "rms_silu_rotary": (Family(normalization="RMS", n_heads=2, d_mlp=6, act_fn="silu",
                               positional="rotary", n_ctx=3, rotary_dim=4, rotary_base=10000,
                               ln_eps=1e-6), Dims(4, 3, 6, 4)),
    "rmspre_gelu": (Family(normalization="RMSPre", d_mlp=5, act_fn="gelu", ln_eps=1e-5),
                    Dims(4, 3, 5, 4)),
}


def random_weights_for(dims: Dims, seed: int = 0, scale: float = 3.0) -> FamilyWeights:
    """Gaussian weights of scale/sqrt(d_model) for every parameter of dims' family (norm
    gains centred on 1), float32; shared by the family, depth and task tests."""
    g = np.random.default_rng(seed)
    params = {p.key: (g.normal(size=dims.shape_of(p.key)) * (scale / math.sqrt(dims.d_model))
                      + (1.0 if p.short.endswith(".w") else 0.0)).astype(np.float32)
              for p in parameter_table(dims.family)}
    return FamilyWeights(dims=dims, params=params)


def random_family_weights(name: str, seed: int = 0, scale: float = 3.0) -> FamilyWeights:
    family, base = FAMILIES[name]
    dims = Dims(base.d_vocab, base.n_ctx, base.d_model, base.d_head, family)
    return random_weights_for(dims, seed, scale)


def certificate(fw) -> list[str]:
    trace = Trace(fw)
    by, claim, _ = STRATEGIES["forward-brute-force"].certify(trace)
    return trace.lines("forward-brute-force", by, claim, {}, {})


def replay(lines):
    checker = CertificateChecker()
    for line in lines:
        checker.feed(line)
    return checker, checker.finish()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_forward_certificate_is_sound(name):
    """Every sequence the rule certifies is correct by the 200-bit reference, and the
    certified count is the exact count (no near-ties at these random weights)."""
    fw = random_family_weights(name)
    lines = certificate(fw)
    checker, report = replay(lines)
    rule = next(json.loads(x) for x in lines if '"kind":"rule"' in x)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    certified = set(forward.certified_sequences(checker.dims, mats, lambda w: None))
    correct = set()
    for tokens in itertools.product(range(fw.dims.d_vocab), repeat=fw.dims.n_ctx):
        logits = reference_logits(fw, tokens)
        top = max(tokens)
        if all(logits[top] > x for o, x in enumerate(logits) if o != top):
            correct.add(tokens)
    assert certified <= correct
    assert certified == correct  # no near-ties for these weights
    assert report.facts.correct == rule["claim"] == len(certified)
    assert 0 < len(certified) < fw.dims.d_vocab ** fw.dims.n_ctx  # a non-trivial test
    gt = count_correct(fw, progress=False)
    assert gt.correct == len(correct)


def test_float64_forward_matches_torch_module():
    family, base = FAMILIES["ln_mlp_rope_2heads"]
    dims = Dims(base.d_vocab, base.n_ctx, base.d_model, base.d_head, family)
    model = FamilyTransformer(dims, torch.Generator().manual_seed(1))
    tokens = np.array(list(itertools.product(range(5), repeat=3)))
    ours = family_logits_float64(model.weights(), tokens)
    theirs = model(torch.from_numpy(tokens)).detach().double().numpy()
    assert np.allclose(ours, theirs, atol=1e-5)


# --- mutants -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rope_cert():
    fw = random_family_weights("ln_mlp_rope_2heads")
    return fw, certificate(fw)


def _edit(lines, pred, change):
    out = []
    for line in lines:
        obj = json.loads(line)
        if pred(obj):
            change(obj)
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


def _f64(text):
    raw = base64.b64decode(text)
    return list(struct.unpack(f"<{len(raw) // 8}d", raw))


def _b64(values):
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode()


def _tighten(obj):
    lo, hi = _f64(obj["lo"]), _f64(obj["hi"])
    mid = [(a + b) / 2 for a, b in zip(lo, hi)]
    obj["lo"], obj["hi"] = _b64(mid), _b64(mid)


def _rejected(lines, model=None):
    checker = CertificateChecker(model_file=model)
    with pytest.raises((Rejected, Malformed)) as err:
        for line in lines:
            checker.feed(line)
        checker.finish()
    return err.value


def test_mutant_tightened_rope_enclosure(rope_cert):
    _, lines = rope_cert
    for op in ("rope_cos", "rope_sin"):
        bad = _edit(lines, lambda o, op=op: o.get("op") == op, _tighten)
        assert isinstance(_rejected(bad), Rejected)


def test_mutant_wrong_angle_base(rope_cert):
    _, lines = rope_cert
    bad = _edit(lines, lambda o: o.get("op") == "rope_cos",
                lambda o: o["params"].update(base=10001))
    assert isinstance(_rejected(bad), Rejected)  # not the family's ROPE_COS
    bad = _edit(lines, lambda o: o.get("kind") == "header",
                lambda o: o["family"].update(rotary_base=10001))
    assert isinstance(_rejected(bad), Rejected)  # a different model: digest differs


def test_mutant_wrong_eps(rope_cert):
    _, lines = rope_cert
    bad = _edit(lines, lambda o: o.get("kind") == "header",
                lambda o: o["family"].update(ln_eps=1e-3))
    assert isinstance(_rejected(bad), Rejected)


def test_mutant_swapped_heads(rope_cert):
    fw, lines = rope_cert

    def swap(obj):
        q = np.frombuffer(base64.b64decode(obj["data"]), "<f4").reshape(obj["shape"])
        obj["data"] = base64.b64encode(q[::-1].copy().tobytes()).decode()

    bad = _edit(lines, lambda o: o.get("name") == "blocks.0.attn.W_Q", swap)
    assert isinstance(_rejected(bad), Rejected)


def test_mutant_over_claim(rope_cert):
    _, lines = rope_cert
    bad = _edit(lines, lambda o: o.get("kind") == "rule", lambda o: o.update(claim=o["claim"] + 1))
    assert isinstance(_rejected(bad), Rejected)


def test_mutant_family_rule_inputs_must_be_weights(rope_cert):
    _, lines = rope_cert
    first_op = next(json.loads(x)["id"] for x in lines if '"kind":"op"' in x)
    bad = _edit(lines, lambda o: o.get("kind") == "rule",
                lambda o: o["inputs"].update(W_Q=first_op))
    assert isinstance(_rejected(bad), Rejected)


def test_decomposition_rules_refuse_other_families(rope_cert):
    _, lines = rope_cert
    bad = _edit(lines, lambda o: o.get("kind") == "rule",
                lambda o: o.update(rule="brute_force", inputs={
                    n: 1 for n in ("EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU")}))
    assert isinstance(_rejected(bad), Rejected)


# --- model files with their config ---------------------------------------------------------

@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_family_model_file_round_trip_and_binding(tmp_path, suffix, rope_cert):
    from checker.modelfile import read_model_tensors

    fw, lines = rope_cert
    path = tmp_path / f"m{suffix}"
    save_model(path, fw, {"note": "test"})
    assert load_model(path).weights.equals(fw)
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    assert check_cert([str(cert), "--model", str(path)]) == 0
    # the same tensors under another family's config are refused
    other = FamilyWeights(dims=Dims(5, 3, 6, 4, Family(
        normalization="LN", n_heads=2, d_mlp=8, positional="rotary", n_ctx=3, rotary_dim=4,
        rotary_base=10000, ln_eps=1e-6)), params=fw.params)
    save_model(path, other)
    assert check_cert([str(cert), "--model", str(path)]) == 1
    assert read_model_tensors(path).config["eps"] == 1e-6


def test_attn_only_file_refuses_family_tensors_without_config(tmp_path, rope_cert):
    fw, _ = rope_cert
    path = tmp_path / "bare.pt"
    torch.save(fw.to_state_dict(), path)
    with pytest.raises(Malformed, match="LayerNorm weights"):
        load_model(path)


def test_ties_are_never_certified():
    """The all-zero model ties on every sequence: nothing may be certified."""
    fw = random_family_weights("ln_mlp_rope_2heads")
    zero = FamilyWeights(dims=fw.dims, params={k: np.zeros_like(a) for k, a in
                                               fw.params.items()})
    lines = certificate(zero)
    _, report = replay(lines)
    assert report.facts.correct == 0
    bad = _edit(lines, lambda o: o.get("kind") == "rule", lambda o: o.update(claim=1))
    assert isinstance(_rejected(bad), Rejected)


def test_checker_config_stand_ins_refuse_what_they_do_not_know(tmp_path, rope_cert):
    """The whitelist for TransformerLens configs decodes numpy float scalars and torch
    dtypes only; other numpy scalars, tensors inside the config and other dtypes are
    refused (fail closed, exit 2)."""
    from checker.modelfile import ModelFileError, read_model_tensors

    fw, _ = rope_cert
    sd = fw.to_state_dict()
    ok = tmp_path / "ok.pt"
    torch.save({"config": {"a": np.float64(0.5), "b": np.float32(2.0), "c": np.int64(3),
                           "dtype": torch.float32}, "model": sd}, ok)
    assert read_model_tensors(ok).config == {"a": 0.5, "b": 2.0, "c": 3,
                                             "dtype": "torch.float32"}
    for bad in ({"x": np.complex128(1)}, {"x": torch.zeros(2)}, {"x": torch.int8}):
        path = tmp_path / "bad.pt"
        torch.save({"config": bad, "model": sd}, path)
        with pytest.raises(ModelFileError):
            read_model_tensors(path)


@pytest.mark.parametrize("change", [
    {"n_heads": 0}, {"n_heads": True}, {"normalization": "RMSNorm"}, {"act_fn": "solu_ln"},
    {"ln_eps": 0.0}, {"ln_eps": 1}, {"rotary_dim": 3}, {"rotary_base": 1.5},
    {"positional": "alibi"}, {"n_ctx": 1000}, {"extra": 1}, {"parallel": 1}])
def test_malformed_family_headers_exit_2(rope_cert, change):
    _, lines = rope_cert
    bad = _edit(lines, lambda o: o.get("kind") == "header", lambda o: o["family"].update(change))
    assert isinstance(_rejected(bad), Malformed)


def test_gen_cert_picks_the_family_strategy_and_refuses_decomposition(tmp_path, rope_cert):
    from generator.cli import main as gen_cert

    fw, _ = rope_cert
    path = tmp_path / "m.pt"
    save_model(path, fw)
    out = tmp_path / "c.jsonl"
    assert gen_cert([str(path), "-o", str(out), "-q"]) == 0  # default: forward-brute-force
    assert check_cert([str(out), "--model", str(path)]) == 0
    for strategy in ("cubic", "brute-force"):
        assert gen_cert([str(path), "--strategy", strategy, "-o", str(out), "-q"]) == 2


def test_forward_rule_agrees_with_brute_force_on_the_shipped_attention_only_model():
    """Two different rules, same model: the full forward pass certifies the 511 / 512
    sequences the decomposition-based brute_force certifies (exact count 511)."""
    from pathlib import Path

    from generator.cli import generate

    model = Path(__file__).resolve().parent.parent / "generator/models/max3_v8_seed0.pt"
    counts = {}
    for strategy in ("brute-force", "forward-brute-force"):
        lines, summary = generate(str(model), strategy)
        _, report = replay(lines)
        counts[strategy] = report.facts.correct
    assert counts == {"brute-force": 511, "forward-brute-force": 511}


def _logit_misses(fw) -> int:
    """Sequences whose 200-bit reference logits are not all inside the checker's logit
    enclosures (the rule's invariant, stronger than comparing certified sets)."""
    lines = certificate(fw)
    checker = CertificateChecker()
    for line in lines:
        if '"kind":"rule"' in line:
            break
        checker.feed(line)
    rule = next(json.loads(x) for x in lines if '"kind":"rule"' in x)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    model = forward._Model(checker.dims, mats, lambda w: None)
    misses = 0
    for tokens in itertools.product(range(fw.dims.d_vocab), repeat=fw.dims.n_ctx):
        ref = reference_logits(fw, tokens)
        got = model.logits(tokens)
        misses += not all(_mp_in(e, r) for e, r in zip(got, ref))
    return misses


def _mp_in(enclosure, value) -> bool:
    with mpmath.workprec(200):
        return mpmath.mpf(enclosure.a) <= value <= mpmath.mpf(enclosure.b)


@pytest.mark.parametrize("name", ["gelu_ln_learned_pos", "silu_no_norm",
                                  "gelu_new_parallel_rotary"])
def test_activation_replaced_by_relu_is_caught(monkeypatch, name):
    """The logit enclosures contain the 200-bit reference logits of every sequence; with
    the deliberate break (the checker applies ReLU whatever the family says) they do not."""
    fw = random_family_weights(name)
    assert _logit_misses(fw) == 0
    # forward_model: where _Model (and every rule running the model) looks the function up
    monkeypatch.setattr(forward_model, "activate",
                        lambda act_fn, x, tick=None: forward_model._relu(x))
    assert _logit_misses(fw) > 0


def test_rms_eps_dropped_is_caught(monkeypatch):
    """Deliberate break: RMSNorm without its ε (1e-6 here) moves every logit by ~1e-7,
    far outside the enclosures: the reference logits fall outside them."""
    fw = random_family_weights("rms_silu_rotary")
    assert _logit_misses(fw) == 0
    rms = forward_model.rms_norm
    monkeypatch.setattr(forward_model, "rms_norm", lambda x, eps, w: rms(x, 0.0, w))
    assert _logit_misses(fw) > 0
