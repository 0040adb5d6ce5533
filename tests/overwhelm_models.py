"""Builders and checkers shared by the tests of rule overwhelm_family beyond its plain
one-layer real check (tests/test_overwhelm_deep.py, tests/test_float32_overwhelm_deep.py,
tests/test_float32_overwhelm_family.py): the untrained several-layer models, their claims,
every completion of a claim, the float32-correctness oracle's check, a certificate with its
semantics relabelled, and a planted near-tie with the verdicts it must get (the numpy float32
passes themselves are soundness_helpers.py's)."""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from overwhelm_fixtures import Loaded, check_lines

from checker.errors import Rejected
from checker.modelspec import Dims, Family
from checker.statement import Overwhelm
from generator.model import FamilyWeights
from generator.overwhelm import any_logits, certify

F32 = np.float32

# the untrained several-layer families (tests/test_overwhelm_deep.py checks the real rule on
# attn2, attn3, ln_mlp2, gated2 and rope_2heads2; tests/test_float32_overwhelm_deep.py the
# float32 rule on all of them)
DEEP_FAMILIES = {
    "attn2": dict(n_layers=2),
    "attn3": dict(n_layers=3),
    "ln_mlp2": dict(normalization="LN", d_mlp=8, ln_eps=1e-5, n_layers=2),
    "ln_mlp2_2heads": dict(normalization="LN", d_mlp=8, ln_eps=1e-5, n_layers=2, n_heads=2),
    "gated2": dict(normalization="LNPre", d_mlp=8, ln_eps=1e-5, n_layers=2, gated_mlp=True,
                   act_fn="silu"),
    "ln_parallel_gelu2": dict(normalization="LN", d_mlp=8, ln_eps=1e-5, n_layers=2,
                              parallel=True, act_fn="gelu"),
    "plain_mlp2": dict(d_mlp=8, n_layers=2),
    "rope_2heads2": dict(n_heads=2, positional="rotary", rotary_dim=4, rotary_base=10000,
                         n_layers=2),
}


@functools.cache
def deep_random(name: str, seed: int = 0, v: int = 4, k: int = 5, d: int = 8, h: int = 4,
                sharpness: float = 4.0):
    """An untrained model of DEEP_FAMILIES[name] with peaky attention in every layer (W_Q
    scaled up), norm gains and biases not the identity."""
    from generator.model import FamilyTransformer, FamilyWeights

    spec = dict(DEEP_FAMILIES[name])
    if spec.get("positional") == "rotary":
        spec["n_ctx"] = k
    dims = Dims(v, k, d, h, family=Family(**spec))
    w = FamilyTransformer(dims, generator=torch.Generator().manual_seed(seed)).weights()
    rng = np.random.default_rng(seed)
    params = dict(w.params)
    for key in params:
        if key.endswith("attn.W_Q"):
            params[key] = params[key] * np.float32(sharpness)
        elif key.endswith(".b") or key.endswith("b_in") or key.endswith("b_U"):
            params[key] = (rng.normal(size=params[key].shape) * 0.1).astype(np.float32)
        elif key.endswith(".w"):
            params[key] = (1 + rng.normal(size=params[key].shape) * 0.2).astype(np.float32)
    return Loaded(FamilyWeights(dims=dims, params=params))


def deep_claims(v: int) -> list:
    """Free claims on a v-token model: three shapes for every (first token, query)."""
    out = []
    for s0, q in itertools.product(range(v), range(v)):
        out.append(Overwhelm((s0,), q, -1, free_cmp="<=", free=2))
        out.append(Overwhelm((s0, q), q, -1, free_cmp="==", free=2, over=(0, 1)))
        out.append(Overwhelm((s0,), q, -1, free_cmp="<=", free=1, over=(s0,)))
    return out


def completion_arrays(claim: Overwhelm, v: int):
    """Every admissible sequence s + t + [q], grouped by length (numpy arrays); a
    permutation claim's orderings in one array."""
    if claim.free_perm is not None:
        ts = sorted(set(itertools.permutations(claim.free_perm)))
        yield np.array([claim.prefix + t + (claim.query,) for t in ts], dtype=np.int64)
        return
    alphabet = claim.over if claim.over is not None else range(v)
    for n in claim.lengths():
        ts = list(itertools.product(alphabet, repeat=n))
        yield np.array([claim.prefix + tuple(t) + (claim.query,) for t in ts], dtype=np.int64)


def assert_float32_correct(weights, claim: Overwhelm, evaluations, limit: int,
                           seed: int = 0) -> int:
    """Every completion (a random sample of `limit` per length if more) outputs
    claim.output strictly in every float32 evaluation `evaluations(weights, tokens, seed)`
    (five logit arrays at the last position: soundness_helpers.five_float32_evaluations);
    the number of completions checked."""
    g = np.random.default_rng(seed)
    total = 0
    for tokens in completion_arrays(claim, weights.dims.d_vocab):
        if len(tokens) > limit:
            tokens = tokens[g.choice(len(tokens), limit, replace=False)]
        runs = evaluations(weights, tokens, seed)
        assert len(runs) == 5  # torch in three orders, numpy both ways
        for logits in runs:
            assert logits.dtype == F32
            top = logits[:, claim.output]
            others = np.delete(logits, claim.output, axis=1)
            assert (others < top[:, None]).all(), (claim, tokens[(others >= top[:, None])
                                                                .any(1)][:3])
        total += len(tokens)
    return total


def relabelled(lines: list, semantics: str) -> list:
    """The certificate with its theorem's semantics atom set to `semantics`."""
    out = [json.loads(s) for s in lines]
    theorem = out[0]["theorem"].replace(" and semantics == float32", "")
    out[0]["theorem"] = theorem + ("" if semantics == "real" else f" and semantics == {semantics}")
    return [json.dumps(o) for o in out]


def planted_near_tie(w, target: float):
    """The model `w` (FamilyWeights) with b_U[o] lowered so that the one-completion claim
    s = (1,), free == 1 over (2,), query 3 has real margin ℓ_o − max ℓ_m about `target`
    (o the model's output there): (the planted Loaded model, the claim with output o)."""
    seq = (1, 2, 3)
    claim = Overwhelm((seq[0],), seq[2], -1, free_cmp="==", free=1, over=(seq[1],))
    logits = any_logits(w, np.array([seq]))[0]
    o = int(np.argmax(logits))
    margin = logits[o] - np.max(np.delete(logits, o))
    params = dict(w.params)
    b_u = params["unembed.b_U"].copy()
    b_u[o] = F32(float(b_u[o]) - margin + target)
    params["unembed.b_U"] = b_u
    planted = Loaded(FamilyWeights(dims=w.dims, params=params))
    logits = any_logits(planted.weights, np.array([seq]))[0]
    real_margin = logits[o] - np.max(np.delete(logits, o))
    assert 0 < real_margin < 10 * target
    return planted, replace(claim, output=o)


def assert_float32_refuses_near_tie(loaded, claim: Overwhelm) -> None:
    """A planted near-tie (planted_near_tie): the real claim is proved and verifies as real;
    gen-cert does not prove the float32 one; its forced float32 certificate and the real
    certificate relabelled float32 are both rejected, under mpmath and arb."""
    real = certify(loaded, claim, float_shadow=False)
    assert real.verdict == "proved"
    assert check_lines(real.lines).facts.semantics == "real"
    f32_verdict = certify(loaded, claim, float_shadow=False, semantics="float32")
    assert f32_verdict.verdict == "not proved" and f32_verdict.lines is None
    forced = certify(loaded, claim, float_shadow=False, semantics="float32", force=True)
    assert forced.verdict == "forced"
    for lines in (forced.lines, relabelled(real.lines, "float32")):
        for arith in ("mpmath", "arb"):
            with pytest.raises(Rejected):
                check_lines(lines, arith=arith)


def captured_checks(monkeypatch, at_query) -> list:
    """Spy on at_query.check (a query-position checker class): the list, filled as they run,
    of every instance whose check() is called (the real check still runs)."""
    captured, original = [], at_query.check

    def spy(self):
        captured.append(self)
        return original(self)

    monkeypatch.setattr(at_query, "check", spy)
    return captured


def gamma(n: int) -> float:
    """γ_n = n·u / (1 − n·u), u = 2^-24 (float32's unit roundoff)."""
    u = 2.0 ** -24
    return n * u / (1 - n * u)
