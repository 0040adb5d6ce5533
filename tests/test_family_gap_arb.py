"""Rule family_gap under `--arith arb` (checker/rules/family_gap_arb.py): the class proofs on
overwhelm_family's fast path give the same verdict and message as the mpmath reference on
every class of tests/test_family_gap.py's models (proved, forced and narrowed hints), on the
generator's certificates and on their mutants; the Arb heads are really used."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("flint")

from family_gap_models import (  # noqa: E402
    ADVERSARIAL,
    FORCED,
    MODELS,
    NAME,
    certificate,
    checker_inputs,
    forced_class_groups,
    model,
    replay,
)
from family_gap_models import mutate as _mutate  # noqa: E402
from family_gap_models import rule_line as _rule  # noqa: E402

from checker.errors import Malformed, Rejected  # noqa: E402
from checker.rules import family_gap as rule  # noqa: E402
from generator.certify.strategies import family_gap as strategy  # noqa: E402


@pytest.fixture
def arb_used(monkeypatch):
    """Counts the Lemma R bounds the integer heads decide themselves (step by step, or in the
    class proof's one pass: family_gap_bulk.BulkSteps._below)."""
    from checker.rules import family_gap_bulk as bulk
    from checker.rules import overwhelm_family_arb as arb_rule

    calls = {"arb": 0}
    original = arb_rule.ArbHead.average_below
    original_bulk = bulk.BulkSteps._below

    def counting(self, y, col, lam, sign=1, key=None):
        calls["arb"] += 1
        return original(self, y, col, lam, sign, key)

    def counting_bulk(self, *args):
        calls["arb"] += 1
        return original_bulk(self, *args)

    monkeypatch.setattr(arb_rule.ArbHead, "average_below", counting)
    monkeypatch.setattr(bulk.BulkSteps, "_below", counting_bulk)
    return calls


def _verdict(lines, arith):
    try:
        report = replay(lines, arith)
    except (Rejected, Malformed) as e:
        return type(e).__name__, str(e)
    return "accepted", report.facts.correct, [n.split(" (")[0] for n in report.rule_notes]


@pytest.mark.parametrize("name", sorted(MODELS) + sorted(ADVERSARIAL))
def test_generated_certificates_agree(name, arb_used):
    lines = certificate(name)
    ref = _verdict(lines, "mpmath")
    assert ref[0] == "accepted"
    assert _verdict(lines, "arb") == ref
    assert arb_used["arb"] > 0


def _class_verdicts(fw, classes, fast: bool) -> list:
    """Each class's verdict (accepted, or the error class and message) by the rule's own class
    proof, on the reference's or the fast path's tables, weights and heads."""
    from checker.rules import overwhelm_family as family

    d, mats = checker_inputs(fw)
    parsed = rule.parse_hints(strategy.encode(classes), d, lambda work: None)
    if fast:
        from checker.rules import family_gap_arb as arb

        tables = arb.GapTables(d, mats, lambda work: None)
        make_weights, make_query = arb.ArbQueryWeights, arb.ClassQueries()
    else:
        tables = family.Tables(d, mats, lambda work: None)
        make_weights, make_query = rule.QueryWeights, rule.ClassQuery
    shared = rule.SharedFunctionals(tables)
    out, weights, fun = [], {}, {}
    for q, m, fixed, g, hint in parsed:
        if q not in weights:
            weights = {q: make_weights(tables, q)}
        if m not in fun:
            fun = {m: shared.for_output(m)}
        try:
            make_query(tables, fun[m], weights[q], q, m, rule.slots(d, q, m, fixed, g),
                       hint).check()
            out.append("accepted")
        except (Rejected, Malformed, ArithmeticError) as e:
            out.append((type(e).__name__, str(e)))
    return out


@pytest.mark.parametrize("name", FORCED)
def test_every_forced_class_gets_the_same_verdict(name, arb_used):
    """Every class (q, m, S) at gaps 1 and 2 with its own best float64 hints, and with the
    hints of the narrower class the generator proved (tests/test_family_gap.py's forced
    classes): the same verdict and message on both paths, both verdicts present."""
    fw = model(name)
    groups = forced_class_groups(name)
    kinds = set()
    for group in groups.values():
        ref, fast = _class_verdicts(fw, group, False), _class_verdicts(fw, group, True)
        assert ref == fast
        kinds |= {v if isinstance(v, str) else v[0] for v in ref}
    assert "accepted" in kinds and kinds - {"accepted"}, kinds
    assert arb_used["arb"] > 0


def _edit_class_hint(lines, field, factor):
    """Every class's hint `field` scaled towards 0 by `factor` (a forgery when it binds)."""
    import base64
    import struct

    position = 4 + rule.HINT_FIELDS.index(field)

    def edit(r):
        for c in r["hints"]["classes"]:
            raw = base64.b64decode(c[position])
            values = struct.unpack(f"<{len(raw) // 8}d", raw)
            c[position] = base64.b64encode(struct.pack(
                f"<{len(values)}d", *(x * factor for x in values))).decode()
    return _mutate(lines, edit)


@pytest.mark.parametrize("field, factor", [("diff", 0.5), ("diff", 1.5), ("box", 0.9),
                                           ("pre", 0.5), ("dir_lo", 2.0)])
def test_mutants_get_the_same_verdict(field, factor, arb_used):
    lines = _edit_class_hint(certificate(NAME), field, factor)
    ref = _verdict(lines, "mpmath")
    assert _verdict(lines, "arb") == ref
    assert arb_used["arb"] > 0


def test_residue_and_inflated_claims_agree():
    lines = certificate(NAME)
    assert _rule(lines)["hints"].get("residue")
    for delta in (0, 1):
        edited = _mutate(lines, lambda r: None, claim_delta=delta)
        assert _verdict(edited, "arb") == _verdict(edited, "mpmath")


def test_the_arb_path_reads_mpmath_inputs():
    """family_gap declares INPUT_ARITHMETIC = "mpmath": under --arith arb certificate.py still
    builds its inputs as mpmath intervals (the fast path's integer forms read their ends)."""
    from checker.rules import family_gap_arb

    assert rule.INPUT_ARITHMETIC == "mpmath" and "arb" in rule.ARITHMETICS
    seen = []
    original = family_gap_arb.GapTables.__init__

    def spy(self, dims, mats, charge):
        seen.append(type(mats["W_E"][0][0]).__module__)
        original(self, dims, mats, charge)

    family_gap_arb.GapTables.__init__ = spy
    try:
        replay(certificate(NAME), "arb")
    finally:
        family_gap_arb.GapTables.__init__ = original
    assert seen and all(m.startswith("mpmath") for m in seen), seen
    assert json.loads(certificate(NAME)[0])["kind"] == "header"


def test_scores_enclose_the_exact_dot_and_lie_inside_the_reference():
    """score_function(i, u) contains q·key·scale at exact points of its inputs (the kept exact
    query and key integers' ends, the scale's lower end) and lies inside the reference's
    family.dot(q, key)·scale, for every query token, position, token and head.  (Break
    tried: the key's upper end replaced by its lower end — a narrower, unsound enclosure the
    verdict comparisons above do not see: caught here.)"""
    from fractions import Fraction

    from checker.rules import overwhelm_family as family
    from checker.rules.family_gap_arb import GapTables, score_function

    def frac(raw):
        sign, man, exp, _ = raw
        return (-1 if sign else 1) * Fraction(man) * Fraction(2) ** exp

    d, mats = checker_inputs(model(NAME))
    ref = family.Tables(d, mats, lambda work: None)
    fast = GapTables(d, mats, lambda work: None)
    p, model_ = d.n_ctx - 1, fast.model
    scale_lo = frac(model_.scale._mpi_[0])
    for q in range(d.d_vocab):
        for j in range(d.family.n_heads):
            score = score_function(fast, j, p, q)
            q_lo, q_hi, q_exp = model_.q_ints[j][p]
            for i in range(d.n_ctx):
                k_lo, k_hi, k_exp = model_.key_ints[j][i]
                for u in range(d.d_vocab):
                    got = score(i, u)
                    want = family.dot(ref.model.q[j][p][q], ref.model.key[j][i][u]) * \
                        ref.model.scale
                    assert frac(want._mpi_[0]) <= frac(got[0])
                    assert frac(got[1]) <= frac(want._mpi_[1])
                    for q_end, k_end in ((q_lo, k_lo), (q_hi, k_hi), (q_lo, k_hi)):
                        exact = sum(Fraction(a) * Fraction(b)
                                    for a, b in zip(q_end[q], k_end[u])) \
                            * Fraction(2) ** (q_exp + k_exp) * scale_lo
                        assert frac(got[0]) <= exact <= frac(got[1])


@pytest.mark.parametrize("name, merge, boxes", [
    (NAME, "off", "off"), ("ln_mlp_k4_well_trained", "always", "off"),
    ("lnpre_parallel_mlp_k3", "always", "off"),
    ("attends_to_smallest", "always", "on")])  # box classes: more than 2^(k−1) per (q, m)
def test_kept_caches_stay_within_their_charged_bound(name, merge, boxes, monkeypatch):
    """The check proves the classes in (m, q, S) order, computes each output's functionals
    once, and keeps Lemma R's column caches and the integer forms at three lifetimes
    (constant, output, group: _GapConverter, GapTables.lifetime).  At every column read (integer
    or binary64), the entries kept in the three column stores plus eight per entry of the kept
    integer forms stay
    within `group_elements`, charged up front; the constant store is reused across outputs.
    (Breaks tried: every column in the constant store; VO·G registered as a constant: both
    exceed the bound here.)"""
    from checker.rules import family_gap_arb as arb

    lines = certificate(name, merge, boxes)
    dims, _ = checker_inputs(model(name))
    bound = arb.group_elements(dims)
    if boxes == "on":  # the test must see a (q, m) with more classes and boxes than 2^(k−1)
        hints = _rule(lines)["hints"]
        per = {}
        for c in hints["classes"] + hints["boxes"]:
            per[c[0], c[1]] = per.get((c[0], c[1]), 0) + 1
        assert max(per.values()) > 2 ** (dims.n_ctx - 1)
    seen = {"max": 0, "outputs": [], "reads": 0, "const_hits": 0}
    kinds = {"int": "int_column", "float": "float_column", "floats": "float_columns"}
    originals = {kind: getattr(arb._GapConverter, name) for kind, name in kinds.items()}
    for_output = rule.SharedFunctionals.for_output

    def counted(self, m):
        seen["outputs"].append(m)
        return for_output(self, m)

    def rows(key, value):  # the entries one cached column (or table of columns) keeps
        if key[-1] == "floats":
            return sum(len(c[0]) for c in value if c is not None)
        return len(value[0])

    def spy(self, table, args, kind):
        constant = self.tables.lifetime(table) is self.tables.ints
        hit = constant and self.stores[0] is not None and \
            (id(table), *args, kind) in self.stores[0][1]
        out = originals[kind](self, table, *args)
        seen["reads"] += 1
        seen["const_hits"] += hit and len(seen["outputs"]) > 1
        columns = sum(rows(key, hit[1]) for s in self.stores if s is not None
                      for key, hit in s[1].items() if hit[1] is not None)
        t = self.tables
        forms = sum(8 * len(f[0]) * len(f[0][0]) for c in (t.ints, t.output, t.group)
                    for f in c.values())
        seen["max"] = max(seen["max"], columns + forms)
        return out

    for kind, name in kinds.items():
        monkeypatch.setattr(arb._GapConverter, name,
                            lambda self, table, *args, kind=kind: spy(self, table, args, kind))
    monkeypatch.setattr(rule.SharedFunctionals, "for_output", counted)
    # group_elements counts the direction columns of at most 2^(k−1) classes per group: no
    # group (between GapTables.new_group / new_output calls) may prove more classes
    seen.update(groups=0, group_at=None, in_group=0, most=0)
    for hook in ("new_group", "new_output"):
        original = getattr(arb.GapTables, hook)

        def opened(self, original=original):
            seen["groups"] += 1
            return original(self)
        monkeypatch.setattr(arb.GapTables, hook, opened)
    make = arb.ClassQueries.__call__

    def counted_class(self, *args):
        out = make(self, *args)
        if seen["group_at"] != seen["groups"]:
            seen["group_at"], seen["in_group"] = seen["groups"], 0
        seen["in_group"] += 1
        seen["most"] = max(seen["most"], seen["in_group"])
        return out
    monkeypatch.setattr(arb.ClassQueries, "__call__", counted_class)
    report = replay(lines, "arb")
    assert report.facts.correct == _rule(lines)["claim"]
    classes = _rule(lines)["hints"]["classes"]
    assert seen["outputs"] == sorted({c[1] for c in classes})  # once per m, in order
    assert seen["reads"] > 0 and seen["const_hits"] > 0
    assert 0 < seen["max"] <= bound, (seen["max"], bound)
    assert 0 < seen["most"] <= 2 ** (dims.n_ctx - 1), seen["most"]


@pytest.mark.parametrize("name", ["ln_mlp_rope_2heads_k4", "attends_to_smallest"])
@pytest.mark.parametrize("arith", ["mpmath", "arb"])
def test_a_class_proof_does_not_depend_on_the_others(name, arith):
    """The rule proves the classes in (m, q, S) order sharing per-output functionals and
    per-query caches: every class at gap 1 with its own float64 hints is checked alone (a
    fresh check) and then the accepted ones all together by the rule's check — accepted,
    with the sum of their sizes.  (Break tried: the per-(q, m) cache entry base·G keyed by q
    only — a stale logit base for the query's later outputs: the joint check rejects.)"""
    from checker import arith as backends

    fw = model(name)
    dims, mats = checker_inputs(fw)
    tab = strategy.Tables(fw)
    charge = lambda work: None  # noqa: E731
    accepted = []
    for q, m, fixed in sorted(strategy.class_keys(dims.d_vocab, dims.n_ctx)):
        if rule.signature(dims, q, m, fixed, 1) is not None:
            continue
        query = strategy._ClassQuery(tab, q, m, rule.slots(dims, q, m, fixed, 1))
        with np.errstate(all="ignore"):
            query.margins()
        cls = (q, m, fixed, 1, query.hint)
        try:
            rule.check(dims, mats, strategy.encode([cls]), charge, arith=backends.get(arith))
        except (Rejected, Malformed, ArithmeticError):
            continue
        accepted.append(cls)
    assert len(accepted) > 2 * dims.d_vocab  # several outputs and queries
    proved, _ = rule.check(dims, mats, strategy.encode(accepted), charge,
                           arith=backends.get(arith))
    assert proved == sum(rule.class_size(dims, m, f, g) for _, m, f, g, _ in accepted)


@pytest.mark.parametrize("name", sorted(MODELS) + sorted(ADVERSARIAL))
def test_bulk_residue_decides_every_sequence_as_the_reference(name):
    """certified_residue (the residue's forward passes in bulk, forward_arb._BulkModel) proves
    exactly the sequences the mpmath reference's forward pass proves, one at a time and all at
    once, on every sequence of the model (not only a generator's residue).  (Break tried: the
    first sequence of each chunk skipped: caught here.)"""
    import itertools

    from checker.arith import get
    from checker.rules import forward
    from checker.rules import overwhelm_family as family
    from checker.rules.family_gap_arb import certified_residue

    arb_arith = get("arb")
    d, mats = checker_inputs(model(name))
    ref = family.Tables(d, mats, lambda work: None).model
    every = list(itertools.product(range(d.d_vocab), repeat=d.n_ctx))
    want = [int(forward._certified(ref.logits(t), max(t))) for t in every]
    got = [certified_residue(d, mats, lambda work: None, arb_arith, [t]) for t in every]
    assert got == want
    assert certified_residue(d, mats, lambda work: None, arb_arith, every) == sum(want)
    assert certified_residue(d, mats, lambda work: None, arb_arith, []) == 0


def test_arb_ball_contains_the_interval():
    """arb_ball(x) ⊇ x exactly, for intervals of every sign, width and exponent (Break
    tried: the ball of the lower end only: caught here.)"""
    from fractions import Fraction

    from flint import arb
    from mpmath import iv

    from checker.rules.family_gap_arb import arb_ball

    def exact(point):  # an exact arb point as a Fraction
        man, exp = point.man_exp()
        return Fraction(int(man)) * Fraction(2) ** int(exp)

    rng = np.random.default_rng(7)
    cases = [(0.0, 0.0), (-0.0, 0.0), (-1.0, -1.0), (2.0 ** -1074, 2.0 ** -1070),
             (-1e300, 1e300), (3.0, 3.0 + 2.0 ** -50)]
    for _ in range(300):
        a = float(rng.normal() * 10.0 ** rng.integers(-40, 40))
        cases.append((a, a + abs(float(rng.normal())) * 10.0 ** rng.integers(-60, 10)))
    for lo, hi in cases:
        x = iv.mpf((lo, hi))
        ball = arb_ball(arb, x)
        assert exact(ball.lower()) <= Fraction(lo) and Fraction(hi) <= exact(ball.upper())
        if lo == hi:
            assert exact(ball.lower()) == exact(ball.upper()) == Fraction(lo)


def test_bulk_residue_holds_its_memory_before_building(monkeypatch):
    """certified_residue charges the inputs' ball copies, the bulk tables and one chunk of
    RESIDUE_ROWS sequences to the memory limit before it builds them (v64 with its class
    tables held: the default chunk overflowed the default limit; the held count is what
    the check refuses under a smaller --max-stored-elements)."""
    from checker.arith import get
    from checker.rules import family_gap_arb as fast
    from checker.rules import forward, forward_arb

    d, mats = checker_inputs(model(NAME))
    events = []

    class Budget:
        def __call__(self, work):
            pass

        def hold(self, count, what):
            events.append(("hold", count, what))

    built = forward_arb._BulkModel.__init__

    def spy(self, *args):
        events.append(("build",))
        built(self, *args)

    monkeypatch.setattr(forward_arb._BulkModel, "__init__", spy)
    fast.certified_residue(d, mats, Budget(), get("arb"), [(0,) * d.n_ctx])
    rows = min(fast.RESIDUE_ROWS, forward_arb.chunk_rows(d))
    copies = sum(len(row) for table in mats.values() for row in table)
    want = copies + forward.table_elements(d) + forward_arb.working_elements(d, rows)
    assert events[0] == ("hold", want, "residue forward tables (bulk)") and events[1] == ("build",)
    assert forward_arb.working_elements(d, rows) <= forward_arb.working_elements(d)
