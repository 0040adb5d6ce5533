"""Red-team campaign against rule overwhelm_family (spec/rules.md §overwhelm_family,
spec/overwhelm.md §5b): try to make the checker accept a FALSE overwhelm claim.

Models: the four small random families of tests/overwhelm_fixtures.py (LN+MLP+RoPE
two heads, LNPre parallel, plain MLP two heads, LN+RoPE) and crafted variants
(zero W_O, LayerNorm with a tiny ε and negative gains, huge/tiny unembedding
scales).  Certificates: the generator's own proofs (true claims) and forged
certificates (generator `force`) of claims it refutes.  Mutants of each:

  * hint mutation: each hint array (box, pre, diff, dir, dir_lo) zeroed, negated,
    scaled huge / tiny, set to the smallest subnormal or to ±1.7e308, its interval
    ends swapped, one entry moved; the directions replaced by a subnormal vector with
    a huge claimed lower bound (an attack on Lemma LN's Cauchy–Schwarz step);
  * claim mutation: a proved certificate's hints spliced (query positions relabelled)
    into a forged certificate of a wider / different false claim.

Every accepted certificate's claim is checked against the truth by enumeration
with the independent float64 forward pass (generator.tasks.family via
overwhelm_fixtures.truth); a claim whose worst margin is within UNDECIDED of 0 is
not counted either way.  Accepted and false = a false theorem (a FINDING).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
from overwhelm_fixtures import FAMILIES, UNDECIDED, Loaded, check_lines, family_random, truth

from checker.errors import Malformed, Rejected
from checker.statement import Overwhelm
from generator.model import FamilyWeights
from generator.overwhelm import certify

SEED = 20261126
FIELDS = {"box": 1, "pre": 2, "diff": 3, "dir": 4, "dir_lo": 5}
TINY, HUGE = 5e-324, 1.7e308


# -- models ---------------------------------------------------------------------------------

def crafted(name: str, kind: str, seed: int = 0) -> Loaded:
    """A family_random model changed to stress one bound."""
    base = family_random(name, seed)
    params = {k: np.array(v) for k, v in base.weights.params.items()}
    dims = base.weights.dims
    if kind == "eps_tiny":  # LayerNorm ε = 1e-12 and a residual of tiny variance
        dims = replace(dims, family=replace(dims.family, ln_eps=1e-12))
        params["embed.W_E"] = (params["embed.W_E"] * np.float32(1e-4)).astype(np.float32)
    elif kind == "rope_base2":  # RoPE base 2: large, fast-varying angles
        dims = replace(dims, family=replace(dims.family, rotary_base=2))
    if kind == "zero_W_O":
        params["blocks.0.attn.W_O"][:] = 0
    elif kind == "ln_sharp":  # negative gains; tiny ε is in the family, so scale instead
        for k in params:
            if k.endswith(".w"):
                params[k] = -params[k]
        params["embed.W_E"] = (params["embed.W_E"] * np.float32(1e-3)).astype(np.float32)
    elif kind == "unembed_huge":
        params["unembed.W_U"] = (params["unembed.W_U"] * np.float32(1e4)).astype(np.float32)
    elif kind == "unembed_tiny":
        params["unembed.W_U"] = (params["unembed.W_U"] * np.float32(1e-6)).astype(np.float32)
    return Loaded(FamilyWeights(dims=dims, params=params))


MODELS = [(name, None) for name in FAMILIES] + [
    ("ln_mlp_rope", "zero_W_O"), ("ln_rope", "ln_sharp"), ("plain_mlp", "unembed_huge"),
    ("lnpre_parallel", "unembed_tiny"), ("ln_mlp_rope", "eps_tiny"), ("ln_rope", "rope_base2")]


SHIPPED = "maxany_v6_k6_ln_mlp_rope_seed0.pt"  # the small trained LN+MLP+RoPE model


def load(name, kind, seed: int = 0):
    if name == "shipped":
        from overwhelm_fixtures import MODELS as MODEL_DIR
        from overwhelm_fixtures import shipped
        return shipped(MODEL_DIR / kind)
    return family_random(name, seed) if kind is None else crafted(name, kind, seed)


# -- certificates ---------------------------------------------------------------------------

def claims(v: int = 5):
    """Small claims (every truth enumerable): free <= 2 and == 2 with one prefix token."""
    for s0, q in itertools.product(range(v), range(0, v, 2)):
        yield Overwhelm((s0,), q, -1, free_cmp="<=", free=2)
        yield Overwhelm((s0,), q, -1, free_cmp="==", free=2, over=(0, 2, 4))
        yield Overwhelm((s0, q), q, s0, free_cmp="<=", free=1)  # a fixed output: often false
        yield Overwhelm((s0,), q, -1, free_perm=(1, 3, 3))  # Lemma R-perm (hints perm_u)


def certificates(loaded, n_false: int = 2, n_true: int = 4):
    """([(claim, lines)] of proved true claims, [(claim, lines)] of forged FALSE
    claims): the false ones nearest to true first (worst margin closest to 0 from
    below), since a sloppy bound most likely lets those through."""
    proved, false = [], []
    for claim in claims(loaded.weights.dims.d_vocab):
        verdict = certify(loaded, claim, float_shadow=False)
        claim = verdict.claim
        ok, _, worst = truth(loaded.weights, claim)
        if verdict.verdict == "proved":
            lines = [json.loads(s) for s in verdict.lines]
            # the generator's own proof: accepted and false would be a false theorem
            assert ok or worst > -UNDECIDED or not verdict_of(lines), \
                f"FALSE THEOREM (unmutated certificate): {claim}, margin {worst}"
            if ok:
                proved.append((claim, lines))
        elif not ok and worst < -UNDECIDED:
            false.append((float(worst), claim))
    false.sort(key=lambda x: -x[0])
    forged = [(c, [json.loads(s) for s in certify(loaded, c, float_shadow=False,
                                                    force=True).lines])
              for _, c in false[:n_false]]
    return proved[:n_true], forged


def rule_line(lines):
    return next(x for x in lines if x["kind"] == "rule")


def get(lines, entry, field):
    raw = rule_line(lines)["hints"]["bounds"][entry][field]
    return np.frombuffer(base64.b64decode(raw), dtype="<f8").copy()


def put(lines, entry, field, arr):
    rule_line(lines)["hints"]["bounds"][entry][field] = \
        base64.b64encode(np.asarray(arr, "<f8").tobytes()).decode()


# -- mutations ------------------------------------------------------------------------------

def _swap_pairs(a):
    if a.size % 2:
        return -a
    return a.reshape(-1, 2)[:, ::-1].reshape(-1)


ARRAY_MUTATIONS = {
    "zero": lambda a, rng: np.zeros_like(a),
    "negate": lambda a, rng: -a,
    "scale_huge": lambda a, rng: a * 1e300,
    "scale_tiny": lambda a, rng: a * 1e-300,
    "subnormal": lambda a, rng: np.full_like(a, TINY),
    "max_float": lambda a, rng: np.full_like(a, HUGE),
    "min_float": lambda a, rng: np.full_like(a, -HUGE),
    "swap_ends": lambda a, rng: _swap_pairs(a),
    "halve": lambda a, rng: a * 0.5,
    "one_entry": lambda a, rng: _one_entry(a, rng),
    "shuffle": lambda a, rng: rng.permutation(a),
}


def _one_entry(a, rng):
    a = a.copy()
    if a.size:
        i = int(rng.integers(a.size))
        a[i] += rng.choice([-1, 1]) * (abs(a[i]) + 1) * rng.choice([1e-6, 0.1, 10.0])
    return a


def hint_mutants(lines, rng, only=None):
    """(description, mutated lines) for every field, entry and mutation (or only
    the mutations named in `only`)."""
    n_entries = len(rule_line(lines)["hints"]["bounds"])
    for entry in range(n_entries):
        fields = dict(FIELDS)
        if len(rule_line(lines)["hints"]["bounds"][entry]) > 6:  # a permutation claim
            fields["perm_u"] = 6
        for field, idx in fields.items():
            arr = get(lines, entry, idx)
            for mname, fn in ARRAY_MUTATIONS.items():
                if only is not None and mname not in only:
                    continue
                new = copy.deepcopy(lines)
                put(new, entry, idx, fn(arr, rng))
                yield f"{field}@{entry}:{mname}", new
        # Lemma LN attack: a subnormal / huge direction claimed to have a large dot
        d_lo = get(lines, entry, 5)
        for e_val, lo_val in ((TINY, 1e3), (HUGE / 1e10, 1e300), (TINY, 1.0)):
            new = copy.deepcopy(lines)
            put(new, entry, 4, np.full_like(get(lines, entry, 4), e_val))
            put(new, entry, 5, np.full_like(d_lo, lo_val))
            yield f"dir_attack@{entry}:{e_val:g}/{lo_val:g}", new


def splice_mutants(lines, donors):
    """Hints of other (proved) certificates with the same number of query
    positions, relabelled to this certificate's positions."""
    mine = rule_line(lines)["hints"]["bounds"]
    for name, donor in donors:
        theirs = rule_line(donor)["hints"]["bounds"]
        if len(theirs) != len(mine) or donor is lines:
            continue
        new = copy.deepcopy(lines)
        bounds = copy.deepcopy(theirs)
        for e, m in zip(bounds, mine):
            e[0] = m[0]
        rule_line(new)["hints"]["bounds"] = bounds
        yield f"splice:{name}", new


def _theorem_atoms(claim: Overwhelm) -> str:
    """The claim's header atoms after `weights` (spec/overwhelm.md §2)."""
    out = f"prefix == {list(claim.prefix)} and query == {claim.query} and "
    if claim.free_perm is not None:
        out += f"free_perm == {list(claim.free_perm)}"
    else:
        out += f"free {claim.free_cmp} {claim.free}"
        if claim.over is not None:
            out += f" over {list(claim.over)}"
    return out + f" and output == {claim.output}"


def _claim_json(claim: Overwhelm) -> dict:
    if claim.free_perm is not None:
        return {"prefix": list(claim.prefix), "query": claim.query, "output": claim.output,
                "free_perm": list(claim.free_perm)}
    return {"prefix": list(claim.prefix), "query": claim.query, "output": claim.output,
            "free": claim.free, "free_cmp": claim.free_cmp,
            "over": None if claim.over is None else list(claim.over)}


def restated(lines, old: Overwhelm, header: Overwhelm, rule: Overwhelm | None):
    """lines with the header's claim atoms replaced by `header`'s and the rule
    line's claim by `rule`'s (None: the rule line unchanged)."""
    new = copy.deepcopy(lines)
    head = new[0]
    before = _theorem_atoms(old)
    assert before in head["theorem"], (before, head["theorem"])
    head["theorem"] = head["theorem"].replace(before, _theorem_atoms(header))
    if rule is not None:
        rule_line(new)["claim"] = _claim_json(rule)
    return new


def claim_mutants(claim: Overwhelm, lines, v: int):
    """(the claim the header now states, mutated lines): the proved certificate's
    hints kept, the claim changed in the header and the rule line (or the header only)."""
    others = [t for t in range(v)]
    variants = []
    for o in others:
        if o != claim.output:
            variants.append(("output", replace(claim, output=o), True))
            variants.append(("header-only output", replace(claim, output=o), False))
    for q in others:
        if q != claim.query:
            variants.append(("query", replace(claim, query=q), True))
    if claim.prefix:
        for t in others:
            if t != claim.prefix[0]:
                variants.append(("prefix", replace(claim, prefix=(t,) + claim.prefix[1:]), True))
    if claim.over is not None:
        variants.append(("over dropped", replace(claim, over=None), True))
        variants.append(("header-only over dropped", replace(claim, over=None), False))
        for t in others:
            if t not in claim.over:
                wider = tuple(sorted(claim.over + (t,)))
                variants.append((f"over + {t}", replace(claim, over=wider), True))
    if claim.free_perm is not None:
        for t in others:
            bigger = tuple(sorted(claim.free_perm[:-1] + (t,)))
            if bigger != claim.free_perm:
                variants.append((f"free_perm {bigger}", replace(claim, free_perm=bigger), True))
    if claim.free_perm is None:  # header-only restatements: implied or not (spec §2)
        n, over = claim.free, claim.over
        alpha = over if over is not None else tuple(range(v))
        for n2 in range(n + 2):
            for cmp in ("<=", "=="):
                variants.append((f"header-only free {cmp} {n2}",
                                 replace(claim, free_cmp=cmp, free=n2), False))
            if n2 >= 1:
                variants.append((f"header-only perm of {n2}",
                                 Overwhelm(claim.prefix, claim.query, claim.output,
                                           free_perm=tuple(sorted(alpha[-1:] * n2))), False))
        variants.append(("header-only over subset",
                         replace(claim, over=tuple(alpha[:max(1, len(alpha) - 1)])), False))
        variants.append(("header-only over all", replace(claim, over=tuple(range(v))), False))
    for desc, new_claim, both in variants:
        yield desc, new_claim, restated(lines, claim, new_claim, new_claim if both else None)


# -- the campaign ---------------------------------------------------------------------------

def verdict_of(lines):
    try:
        check_lines(lines)
    except (Rejected, Malformed):
        return False
    return True


def campaign(name, kind, rng, n_false: int = 2, n_true: int = 4, mutations=None,
             seed: int = 0):
    """Counts and the false theorems accepted [(claim, mutation, counterexample, margin)].
    Mutants are made of the FALSE claims' forged certificates (hint mutations and
    hints spliced from the proved ones); the proved certificates' own hint mutants
    are also checked (any acceptance there must still be a true claim)."""
    loaded = load(name, kind, seed)
    proved, forged = certificates(loaded, n_false, n_true)
    counts = dict(certificates=len(proved) + len(forged), false_claims=len(forged), mutants=0,
                  accepted=0, accepted_true=0, undecided=0, false_theorems=0)
    findings = []
    donors = [(str(c), lines) for c, lines in proved]
    truth_cache = {}
    targets = forged + (proved if mutations is None else [])
    for claim, lines in targets:
        mutants = itertools.chain(hint_mutants(lines, rng, mutations),
                                  splice_mutants(lines, donors))
        for desc, mutant in mutants:
            counts["mutants"] += 1
            if not verdict_of(mutant):
                continue
            counts["accepted"] += 1
            if claim not in truth_cache:
                truth_cache[claim] = truth(loaded.weights, claim)
            ok, counter, worst = truth_cache[claim]
            if ok:
                counts["accepted_true"] += 1
            elif worst > -UNDECIDED:
                counts["undecided"] += 1
            else:
                counts["false_theorems"] += 1
                findings.append((claim, desc, counter, float(worst)))
    for claim, lines in proved:
        for desc, new_claim, mutant in claim_mutants(claim, lines, loaded.weights.dims.d_vocab):
            counts["mutants"] += 1
            if not verdict_of(mutant):
                continue
            counts["accepted"] += 1
            if new_claim not in truth_cache:
                truth_cache[new_claim] = truth(loaded.weights, new_claim)
            ok, counter, worst = truth_cache[new_claim]
            if ok:
                counts["accepted_true"] += 1
            elif worst > -UNDECIDED:
                counts["undecided"] += 1
            else:
                counts["false_theorems"] += 1
                findings.append((new_claim, f"claim:{desc}", counter, float(worst)))
    return counts, findings


# a CI slice of the mutations (the benchmark runs all of them on more claims)
CI_MUTATIONS = ("zero", "negate", "scale_huge", "subnormal", "swap_ends", "one_entry")


@pytest.mark.parametrize("name, kind", MODELS, ids=[f"{n}-{k}" for n, k in MODELS])
def test_no_hint_or_splice_mutant_proves_a_false_claim(name, kind):
    rng = np.random.default_rng(SEED)
    counts, findings = campaign(name, kind, rng, n_false=1, n_true=2, mutations=CI_MUTATIONS)
    assert not findings, f"FALSE THEOREM(S) ACCEPTED: {findings[:3]} ({counts})"
    assert counts["false_claims"] == 1 and counts["mutants"] > 0


def test_the_campaign_has_false_claims_to_attack():
    """The campaign is not vacuous: on every model some claim is false, its forged
    certificate is rejected unmutated, and the truth oracle names a counterexample."""
    for name, kind in MODELS:
        loaded = load(name, kind)
        _, forged = certificates(loaded, n_false=1, n_true=0)
        assert forged, (name, kind)
        claim, lines = forged[0]
        assert not verdict_of(lines), claim
        ok, counter, worst = truth(loaded.weights, claim)
        assert not ok and worst < -UNDECIDED and counter is not None
    # the claim-mutation pipeline itself: restating the proved claim is accepted
    loaded = load("ln_rope", None)
    proved, _ = certificates(loaded, n_false=0, n_true=1)
    claim, lines = proved[0]
    assert verdict_of(restated(lines, claim, claim, claim))
    assert any(verdict_of(mutant) for desc, _, mutant in claim_mutants(claim, lines, 5)
               if desc.startswith("header-only free"))


def test_the_campaign_catches_a_broken_rule(monkeypatch):
    """Deliberately broken rule (step 6: the bound (r'_c·g_m)/σ_f replaced by −1e9,
    every Lemma R bound still confirmed): the campaign must then report false theorems."""
    from mpmath.libmp import from_float

    from checker.rules import overwhelm_family_bounds  # where AtQuery.check looks it up

    monkeypatch.setattr(overwhelm_family_bounds, "_upper_ratio",
                        lambda numer, sigma: from_float(-1e9))
    counts, findings = campaign("ln_rope", None, np.random.default_rng(SEED), n_false=1,
                                n_true=1, mutations=("zero",))
    assert findings and counts["false_theorems"] > 0, counts
