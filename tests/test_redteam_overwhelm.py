"""Red-team audit of rules overwhelm_free / overwhelm_perm and the overwhelm
statement atoms (spec/overwhelm.md, spec/rules.md §overwhelm*).

Every certificate the checker accepts — from the generator, forced for random
claims, or a single-field mutant of one — is compared with an independent
256-bit forward pass (tests/redteam_truth.py) over every admissible free
string: the verified fact must be true.  Policy implication (statement.holds)
is compared with the sets of free strings it is about.  No false theorem was
found (see the red-team report); these are the seeded searches, kept small.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import random

import numpy as np
import pytest
from overwhelm_fixtures import Loaded, check_lines
from redteam_truth import (
    free_strings,
    overwhelm_margin,
    random_claim,
    random_model,
    with_arrays,
)

from checker import statement
from checker.errors import Malformed, Rejected
from checker.statement import Facts, Overwhelm, holds, parse
from generator.certify.strategies import NotApplicable
from generator.overwhelm import certify, model_output

SEED = 20261126
OVERWHELM_FIELDS = ("prefix", "query", "output", "free", "free_perm")


def _forced(w, claim):
    """Generator lines for claim, proved or not (None if the generator fails:
    a generator failure can only lose a certificate)."""
    try:
        return [json.loads(s) for s in certify(Loaded(w), claim, float_shadow=False,
                                               force=True).lines]
    except (FloatingPointError, ZeroDivisionError, OverflowError, NotApplicable):
        return None


def _verified(lines):
    """The overwhelm fact the checker verified, or None when it refuses."""
    try:
        return check_lines([json.dumps(x) for x in lines]).facts.overwhelm
    except (Rejected, Malformed):
        return None


def _assert_true(w, fact, what):
    worst, string = overwhelm_margin(w, fact)
    assert worst > 0, f"{what}: checker accepted the false claim {fact} (free string {string})"


def _resync_header(lines, claim):
    """Rewrite the header theorem's overwhelm atoms to state `claim` (a claim object)."""
    atoms = [str(a) for a in parse(lines[0]["theorem"]) if a.field not in OVERWHELM_FIELDS]
    c = claim
    if "free_perm" in c:
        free = f"free_perm == {list(c['free_perm'])}"
    else:
        over = "" if c["over"] is None else f" over {list(c['over'])}"
        free = f"free {c['free_cmp']} {c['free']}{over}"
    atoms += [f"prefix == {list(c['prefix'])}", f"query == {c['query']}",
              f"output == {c['output']}", free]
    lines[0]["theorem"] = " and ".join(atoms)


def _claim_mutants(c, v):
    """Single-field changes of a rule line's claim object."""
    for key, val in c.items():
        if key in ("query", "output"):
            yield from ((key, x) for x in range(v) if x != val)
        elif key == "free":
            yield from ((key, val + 1), (key, val - 1))
        elif key == "free_cmp":
            yield key, "<=" if val == "==" else "=="
        elif key == "over":
            yield key, None
            if val is not None:
                yield from ((key, sorted({*val, t})) for t in range(v) if t not in val)
        else:  # prefix, free_perm
            if val:
                yield key, val[1:]
            for t in range(v):
                yield key, sorted([*val, t]) if key == "free_perm" else [*val, t]


def _mutants(lines, v):
    rule_at = next(i for i, x in enumerate(lines) if x["kind"] == "rule")
    rule = lines[rule_at]
    for key, val in _claim_mutants(rule["claim"], v):
        for resync in (True, False):
            out = copy.deepcopy(lines)
            out[rule_at]["claim"][key] = val
            if resync:
                _resync_header(out, out[rule_at]["claim"])
            yield out
    for a, b in itertools.permutations(rule["inputs"], 2):
        out = copy.deepcopy(lines)
        out[rule_at]["inputs"][a] = rule["inputs"][b]
        yield out
    for j, (_, data) in enumerate((rule.get("hints") or {}).get("potentials", [])):
        u = np.frombuffer(base64.b64decode(data), "<f8").copy()
        for delta in (1e-9, -1.0, 1e30):
            if len(u):
                out, bumped = copy.deepcopy(lines), u.copy()
                bumped[0] += delta
                out[rule_at]["hints"]["potentials"][j][1] = base64.b64encode(
                    bumped.tobytes()).decode()
                yield out


def _borderline(rng, w, claim):
    """claim with the output the model gives on one random admissible free
    string: true for that string at least, so a rule that drops or misbinds
    a term has a chance to accept it where it is false."""
    strings = list(free_strings(claim, w.dims.d_vocab))
    t = strings[int(rng.integers(len(strings)))]
    output, _ = model_output(w, claim.prefix + tuple(t) + (claim.query,))
    return Overwhelm(**{**claim.__dict__, "output": int(output)})


def test_random_generator_certificates_prove_only_truths():
    """Forced certificates of random borderline claims (with free positions)."""
    rng = np.random.default_rng(SEED)
    accepted = 0
    for _ in range(70):
        v, k = int(rng.integers(2, 6)), int(rng.integers(3, 6))
        w = random_model(rng, v, k, int(rng.integers(1, 4)))
        for _ in range(3):
            claim = random_claim(rng, v, k)
            if claim.free_perm is None and claim.free == 0:
                claim = Overwhelm(**{**claim.__dict__, "free": 1, "prefix": claim.prefix[1:]})
            claim = _borderline(rng, w, claim)
            lines = _forced(w, claim)
            fact = lines and _verified(lines)
            if fact:
                accepted += 1
                _assert_true(w, fact, "generator certificate")
    assert accepted >= 50  # the search exercised acceptance, not only refusals


def test_single_field_mutants_prove_only_truths():
    rng = np.random.default_rng(SEED + 1)
    tried = 0
    for _ in range(4):
        v, k = int(rng.integers(2, 4)), int(rng.integers(3, 5))
        w = random_model(rng, v, k, 2)
        lines = _forced(w, random_claim(rng, v, k))
        if not lines or not _verified(lines):
            continue
        for mutant in _mutants(lines, v):
            tried += 1
            fact = _verified(mutant)
            if fact:
                _assert_true(w, fact, "mutant")
    assert tried >= 50


def test_query_position_binding():
    """Positional embeddings alone decide the output (W_E = 0): the output at
    query position p is argmax(P[p]·W_U).  `free == n` for the position whose
    output is o holds; `free <= n` fails at a shorter length and is refused."""
    v, k, d = 3, 5, 3
    w = random_model(np.random.default_rng(0), v, k, d)
    w_pos = np.zeros((k, d), np.float32)
    outputs = [0, 1, 2, 0, 1]  # the output at query position p
    for p, o in enumerate(outputs):
        w_pos[p, o] = 10.0
    w = with_arrays(w, W_E=np.zeros((v, d), np.float32), W_pos=w_pos,
                    W_U=np.eye(d, v, dtype=np.float32), b_U=np.zeros(v, np.float32),
                    b_O=np.zeros(d, np.float32), W_O=np.zeros((d, d), np.float32),
                    W_Q=np.zeros((d, d), np.float32))
    exact = Overwhelm((1,), 2, outputs[3], free_cmp="==", free=2)  # query at p = 3
    assert _verified(_forced(w, exact)) == exact
    _assert_true(w, exact, "crafted")
    for wrong in (Overwhelm((1,), 2, outputs[3], free_cmp="<=", free=2),
                  Overwhelm((1,), 2, outputs[3], free_cmp="==", free=1),
                  Overwhelm((1,), 2, outputs[3], free_cmp="==", free=3)):
        assert overwhelm_margin(w, wrong)[0] <= 0
        assert _verified(_forced(w, wrong)) is None


def test_exact_logit_tie_is_refused():
    """Output columns 0 and 1 of W_U (and b_U) equal: ℓ_0 = ℓ_1 on every input,
    a tie, which the theorem counts as a failure."""
    rng = np.random.default_rng(SEED + 2)
    for _ in range(6):
        v, k = 3, 4
        w = random_model(rng, v, k, 2)
        W_U, b_U = np.array(w.W_U), np.array(w.b_U)
        W_U[:, 1], b_U[1] = W_U[:, 0], b_U[0]
        w = with_arrays(w, W_U=W_U, b_U=b_U)
        for o in (0, 1):
            claim = Overwhelm((2,), 0, o, free_cmp="<=", free=2)
            lines = _forced(w, claim)
            assert lines is None or _verified(lines) is None


def _strings(v, fact):
    if fact.free_perm is not None:
        return set(itertools.permutations(fact.free_perm))
    alphabet = fact.over if fact.over is not None else range(v)
    return {t for n in fact.lengths() for t in itertools.product(alphabet, repeat=n)}


def _atom_strings(v, atom):
    if atom.field == "free_perm":
        return set(itertools.permutations(atom.value))
    alphabet = atom.over if atom.over is not None else range(v)
    lengths = range(0 if atom.cmp == "<=" else atom.value, atom.value + 1)
    return {t for n in lengths for t in itertools.product(alphabet, repeat=n)}


def test_policy_implication_is_set_inclusion():
    """holds(free atom, verified) only when the atom's free strings are a subset
    of the verified ones (e.g. `free <= 3` does not give `free <= 4`, nor
    `over [1, 2]` give `over [1, 2, 3]`)."""
    rnd, implied = random.Random(SEED), 0
    for _ in range(3000):
        v = rnd.randint(1, 4)
        if rnd.random() < 0.3:
            fact = Overwhelm((), 0, 0, free_perm=tuple(sorted(
                rnd.randrange(v) for _ in range(rnd.randint(0, 3)))))
        else:
            over = None if rnd.random() < 0.4 else tuple(sorted(rnd.sample(range(v),
                                                                         rnd.randint(1, v))))
            fact = Overwhelm((), 0, 0, free_cmp=rnd.choice(["<=", "=="]),
                             free=rnd.randint(0, 3), over=over)
        facts = Facts(dims={"d_vocab": v, "n_ctx": 5, "d_model": 1, "d_head": 1},
                      weights_sha256="0" * 64, correct=None, overwhelm=fact)
        if rnd.random() < 0.4:
            text = f"free_perm == {[rnd.randint(0, v) for _ in range(rnd.randint(0, 3))]}"
        else:
            over = sorted({rnd.randint(0, v) for _ in range(rnd.randint(1, 3))})
            text = (f"free {rnd.choice(['<=', '=='])} {rnd.randint(0, 4)}"
                    + ("" if rnd.random() < 0.4 else f" over {over}"))
        (atom,) = parse(text)
        if holds(atom, facts):
            implied += 1
            assert _atom_strings(v, atom) <= _strings(v, fact), (fact, text)
    assert implied >= 300


@pytest.mark.parametrize("verified,policy,expected", [
    (Overwhelm((), 0, 0, free_cmp="<=", free=3), "free <= 4", False),
    (Overwhelm((), 0, 0, free_cmp="<=", free=3, over=(1, 2)), "free <= 3 over [1, 2, 3]", False),
    (Overwhelm((), 0, 0, free_cmp="<=", free=3, over=(1, 2)), "free <= 3", False),
    (Overwhelm((), 0, 0, free_cmp="==", free=3), "free <= 3", False),
    (Overwhelm((), 0, 0, free_cmp="==", free=3), "free_perm == [0, 1]", False),
    (Overwhelm((), 0, 0, free_perm=(0, 1)), "free == 2 over [0, 1]", False),
    (Overwhelm((), 0, 0, free_cmp="<=", free=3, over=(1, 2)), "free == 2 over [2, 1]", True),
])
def test_policy_implication_cases(verified, policy, expected):
    facts = Facts(dims={"d_vocab": 4, "n_ctx": 5, "d_model": 1, "d_head": 1},
                  weights_sha256="0" * 64, correct=None, overwhelm=verified)
    assert holds(parse(policy)[0], facts) is expected
    assert statement  # the module under audit


def _with_potentials(lines, edit):
    out = copy.deepcopy(lines)
    rule = next(x for x in out if x["kind"] == "rule")
    for entry in rule["hints"]["potentials"]:
        u = np.frombuffer(base64.b64decode(entry[1]), "<f8")
        entry[1] = base64.b64encode(np.asarray(edit(u), "<f8").tobytes()).decode()
    return out


def test_perm_potentials_any_values_prove_only_truths():
    """overwhelm_perm accepts ANY potentials u (weak duality): shifted, scaled,
    random or huge potentials must never make a false permutation claim pass.
    A uniform shift of u leaves the dual bound unchanged."""
    rng = np.random.default_rng(SEED + 3)
    tried = 0
    for _ in range(40):
        v, k = int(rng.integers(2, 5)), int(rng.integers(3, 6))
        w = random_model(rng, v, k, int(rng.integers(1, 4)))
        s = int(rng.integers(0, k - 2))
        items = tuple(sorted(int(x) for x in rng.integers(0, v, int(rng.integers(1, k - s)))))
        claim = _borderline(rng, w, Overwhelm(tuple(int(x) for x in rng.integers(0, v, s)),
                                              int(rng.integers(0, v)), -1, free_perm=items))
        if rng.random() < 0.5:  # often false: any edit that makes it pass is a finding
            claim = Overwhelm(**{**claim.__dict__, "output": int(rng.integers(0, v))})
        lines = _forced(w, claim)
        if not lines:
            continue
        for edit in (lambda u: u, lambda u: u + 1e3, lambda u: u - 1e3, lambda u: u * 0,
                     lambda u: u + 1e30, lambda u: -2 * u,
                     lambda u: rng.standard_normal(len(u)) * 10):
            tried += 1
            fact = _verified(_with_potentials(lines, edit))
            if fact:
                _assert_true(w, fact, "overwhelm_perm with edited potentials")
    assert tried >= 200
