"""Shared fixtures of the family_gap tests (tests/test_family_gap*.py): the small trained
family models and the models built to break a step, their generated certificates, a
replay through the checker (and under both back-ends), the sequences of a class
from its definition, the 200-bit reference verdict of one sequence, certificate
mutation, and the rule's checker inputs (the generator's own conversion,
strategy.checker_inputs)."""

from __future__ import annotations

import functools
import itertools
import json

import numpy as np
from test_families import reference_logits

from checker import arith as backends
from checker.certificate import CertificateChecker
from checker.errors import Malformed, Rejected
from checker.rules import family_gap as rule
from generator.certify.strategies import family_gap as strategy
from generator.certify.trace import Trace
from generator.model import FamilyWeights
from generator.train import TrainConfig, train

MODELS = {
    "ln_mlp_rope_2heads_k4": dict(d_vocab=6, n_ctx=4, d_model=8, d_head=4, steps=250,
                                  layernorm="LN", d_mlp=8, n_heads=2, rope=True, seed=1),
    "lnpre_parallel_mlp_k3": dict(d_vocab=6, n_ctx=3, d_model=8, d_head=8, steps=300,
                                  layernorm="LNPre", d_mlp=8, parallel=True, seed=2),
    "ln_3heads_k2": dict(d_vocab=7, n_ctx=2, d_model=8, d_head=4, steps=300, layernorm="LN",
                         n_heads=3, seed=3),
    "mlp_no_norm_k3": dict(d_vocab=6, n_ctx=3, d_model=8, d_head=8, steps=300, d_mlp=8,
                           seed=4),
    "ln_mlp_k4_well_trained": dict(d_vocab=5, n_ctx=4, d_model=8, d_head=4, steps=400,
                                   layernorm="LN", d_mlp=8, n_heads=2, rope=True, seed=1),
}


@functools.cache
def trained(name: str) -> FamilyWeights:
    return train(TrainConfig(**MODELS[name]), progress=False).weights()


def _edited(name: str, edit) -> FamilyWeights:
    w = trained(name)
    params = {k: np.array(a, dtype=np.float32) for k, a in w.params.items()}
    edit(params, w.dims)
    return FamilyWeights(dims=w.dims, params=params)


def _negative_gains(p, dims):
    for key in ("blocks.0.ln1.w", "blocks.0.ln2.w", "ln_final.w"):
        p[key][::2] *= -1.5


def _flat_embedding(p, dims):  # token 0's residual nearly constant: LayerNorm's c ≈ 0
    p["embed.W_E"][0] = 0.3 + 1e-4 * np.arange(dims.d_model)


def _rare_unit(p, dims):  # MLP unit 0 switches on for the largest token only
    top = p["embed.W_E"][dims.d_vocab - 1]
    p["blocks.0.mlp.W_in"][:, 0] = 4 * (top - top.mean())
    p["blocks.0.mlp.b_in"][0] = -3.0
    p["blocks.0.mlp.W_out"][0] = 2 * p["unembed.W_U"][:, 0]


def _smallest_attention(p, dims):  # head 1 attends to small tokens
    p["blocks.0.attn.W_Q"][1] *= -2


ADVERSARIAL = {
    "negative_ln_gains": ("ln_mlp_rope_2heads_k4", _negative_gains),
    "near_zero_variance": ("ln_mlp_k4_well_trained", _flat_embedding),
    "rare_mlp_unit": ("ln_mlp_k4_well_trained", _rare_unit),
    "attends_to_smallest": ("ln_mlp_rope_2heads_k4", _smallest_attention),
}


# the models whose every class is forced at gaps 1 and 2 (tests/test_family_gap*.py), and the
# mutants' certificate (gaps 1..5, classes with and without free positions)
FORCED = ["ln_mlp_rope_2heads_k4", "negative_ln_gains", "attends_to_smallest",
          "mlp_no_norm_k3", "lnpre_parallel_mlp_k3"]
NAME = "ln_mlp_rope_2heads_k4"


def model(name: str) -> FamilyWeights:
    if name in MODELS:
        return trained(name)
    base, edit = ADVERSARIAL[name]
    return _edited(base, edit)


@functools.cache
def certificate(name: str, merge: str = "off", boxes: str = "off") -> tuple:
    """The generator's certificate (strategy family-gap, confirmed by the checker's code;
    boxes "on": with box classes, spec/rules.md §box classes)."""
    trace = Trace(model(name), float_shadow=False)
    options = strategy.Options(merge=merge, boxes=boxes)
    by, claim, _ = strategy.certify(trace, options=options)
    return tuple(trace.lines(options.name(), by, claim, {}, {}))


def replay(lines, arith="mpmath", limits=None):
    checker = CertificateChecker(arith=backends.get(arith), **({"limits": limits} if limits
                                                              else {}))
    for line in lines:
        checker.feed(line if isinstance(line, str) else json.dumps(line, separators=(",", ":")))
    return checker.finish()


def both_backends(lines):
    """The verdict under both back-ends, asserted equal: ("ok", count) or the exception class
    and message."""
    out = []
    for arith in ("mpmath", "arb"):
        try:
            out.append(("ok", replay(lines, arith).facts.correct))
        except (Malformed, Rejected) as e:
            out.append((type(e), str(e)))
    assert out[0] == out[1], out
    return out[0]


def class_members(k, q, m, fixed, g):
    """A class's sequences straight from Lemma G1 / G5's definitions (not the rule's
    `slots`): C(q, m, S, g) for a tuple S, M(q, m, i0, g) for {"first": i0}."""
    for t in itertools.product(range(m + 1), repeat=k - 1):
        if isinstance(fixed, dict):  # M(q, m, i0, g)
            i0 = fixed["first"]
            ok = (t[i0] == m and all(u <= m - g for u in t[:i0])
                  and all(u <= m - g or u == m for u in t[i0 + 1:]))
        else:  # C(q, m, S, g)
            ok = all((u == m) if i in fixed else (u <= m - g) for i, u in enumerate(t))
        if ok:
            yield t + (q,)


def rule_line(lines) -> dict:
    return next(json.loads(x) for x in lines if '"kind":"rule"' in x)


def forced_class_groups(name: str) -> dict:
    """{("own" | "narrow", g): [(q, m, fixed, g, hints)]}: every class (q, m, S) of model
    `name` at gaps g = 1 and 2, with its own best float64 hints ("own") and with the hints of
    the narrower class the generator proved for that key ("narrow"); one gap per key in a
    group, so each group is a valid hint list."""
    fw = model(name)
    dims = fw.dims
    tab = strategy.Tables(fw)
    proved = {(c[0], c[1], tuple(c[2])): c[3]
              for c in rule_line(certificate(name))["hints"]["classes"]}

    def hints(q, m, fixed, g):
        query = strategy._ClassQuery(tab, q, m, rule.slots(dims, q, m, fixed, g))
        with np.errstate(all="ignore"):
            query.margins()
        return query.hint

    groups = {}
    for q, m, fixed in sorted(strategy.class_keys(dims.d_vocab, dims.n_ctx)):
        for g in (1, 2):
            if rule.signature(dims, q, m, fixed, g) is not None:
                continue
            groups.setdefault(("own", g), []).append((q, m, fixed, g, hints(q, m, fixed, g)))
            narrow = proved.get((q, m, fixed))
            if narrow is not None and narrow > g:
                groups.setdefault(("narrow", g), []).append(
                    (q, m, fixed, g, hints(q, m, fixed, narrow)))
    return groups


def correct(fw, tokens) -> bool:
    """The independent 200-bit forward pass (tests/test_families.py) decides t correctly."""
    logits = reference_logits(fw, tokens)
    top = max(tokens)
    return all(logits[top] > x for o, x in enumerate(logits) if o != top)


def mutate(lines, edit, claim_delta=0):
    """The certificate with edit(rule object) applied and the claim (and theorem) moved."""
    out = []
    for x in lines:
        obj = json.loads(x)
        if obj["kind"] == "rule":
            edit(obj)
            obj["claim"] += claim_delta
        if obj["kind"] == "header" and claim_delta:
            obj["theorem"] = obj["theorem"].replace(
                f"correct >= {rule_line(lines)['claim']}",
                f"correct >= {rule_line(lines)['claim'] + claim_delta}")
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


def checker_inputs(fw) -> tuple:
    """(dims, the rule's inputs as the checker reads them) for model fw, by the generator's
    own conversion of its recorded enclosures."""
    trace = Trace(fw, float_shadow=False)
    return trace.dims, strategy.checker_inputs(trace)
