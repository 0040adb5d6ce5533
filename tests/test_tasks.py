"""Tasks in the theorem (checker/tasks.py, spec/theorem.md §3, issue 20): the checker's
prefix walk against the generator's independent numpy twin, enumeration soundness of
rule forward_brute_force for every built-in task and a dataset (every certified pair
confirmed by an independent 200-bit forward pass; both back-ends), and mutants."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import mpmath
import pytest

from checker import statement
from checker.arith import MPMATH, get
from checker.certificate import CertificateChecker
from checker.errors import Malformed, Rejected
from checker.modelspec import ATTN_ONLY, Dims, Family, parameter_table
from checker.rules import forward
from checker.tasks import make_task, parse_dataset
from generator.certify.strategies import STRATEGIES
from generator.certify.trace import Trace
from generator.tasks.builtin import domain, margins, truncated

# (task, params, d_vocab, n_ctx) small enough to enumerate with the 200-bit reference
CASES = {
    "max_of_k": ({}, 4, 3),
    "min_of_k": ({}, 4, 3),
    "sort": ({}, 4, 4),
    "modular_addition": ({"p": 5}, 6, 3),
    "modular_multiplication": ({"p": 5}, 6, 3),
    "parity": ({}, 2, 4),
    "cyclic": ({"n": 3}, 3, 3),
    "flipflop": ({}, 5, 4),
}
WALK_CASES = [("max_of_k", {}, 4, 3), ("min_of_k", {}, 3, 4), ("sort", {}, 4, 4),
              ("sort", {}, 5, 2), ("sort", {}, 3, 6), ("modular_addition", {"p": 5}, 6, 3),
              ("modular_multiplication", {"p": 7}, 8, 3), ("parity", {}, 2, 6),
              ("cyclic", {"n": 3}, 3, 5), ("cyclic", {"n": 1}, 1, 3), ("flipflop", {}, 5, 5),
              ("flipflop", {}, 5, 1), ("flipflop", {}, 5, 2)]


@pytest.mark.parametrize("name, params, v, k", WALK_CASES)
def test_walk_matches_the_independent_twin(name, params, v, k):
    """The checker's prefix walk scores exactly the (prefix, label) pairs of the generator's
    numpy enumeration (input by input, position by position), with the same multiplicities;
    the closed forms of pairs/inputs hold; evaluations bounds the distinct prefixes; the
    order is lexicographic (each prefix's queries consecutive)."""
    task = make_task(name, params, v, k)
    queries = list(task.queries())
    inputs, labels = domain(name, v, k, params)
    expected = Counter()
    for x, lab in zip(inputs, labels):
        for p in range(k):
            if lab[p] >= 0:
                expected[(tuple(int(a) for a in x[:p + 1]), int(lab[p]))] += 1
    got = Counter()
    for prefix, label, pairs in queries:
        got[(prefix, label)] += pairs
    assert got == expected
    assert task.pairs() == sum(expected.values()) == int((labels >= 0).sum())
    assert task.inputs() == len(inputs)
    prefixes = [q[0] for q in queries]
    assert prefixes == sorted(prefixes)
    assert len(set(prefixes)) <= task.evaluations()
    if name != "sort":  # sort's forced positions: fewer distinct prefixes than the bound
        assert len(set(prefixes)) == task.evaluations()


def test_task_parameters_must_fit_the_model():
    for name, params, v, k, needle in [
            ("modular_addition", {"p": 5}, 7, 3, "d_vocab = p"),
            ("modular_addition", {"p": 5}, 6, 4, "n_ctx = 3"),
            ("modular_addition", {}, 6, 3, "missing"),
            ("max_of_k", {"p": 5}, 6, 3, "belong to no parameter"),
            ("cyclic", {"n": 3}, 4, 3, "d_vocab = n"),
            ("parity", {}, 3, 3, "d_vocab = 2"),
            ("flipflop", {}, 4, 3, "d_vocab = 5"),
            ("sort", {}, 4, 3, "n_ctx = 2k"),
            ("dataset", {"dataset": "0" * 64}, 4, 3, "dataset line"),
            ("median", {}, 4, 3, "unknown task")]:
        with pytest.raises(Malformed, match=needle):
            make_task(name, params, v, k)


@pytest.mark.parametrize("text, needle", [
    ("", "empty"), ("1 0 1", "newline"), ("1 0 1\n\n", "decimal"), ("01 0 1\n", "decimal"),
    ("1 0\n", "decimal"), ("1  0 1\n", "decimal"), ("1 0 -1\n", "decimal"),
    ("1 2 3 4 0 1\n", "more than n_ctx"), ("1 2 2 1\n", "position 2 outside"),
    ("1 2 0 9\n", "d_vocab"), ("9 0 1\n", "d_vocab"), ("1 0 1\r\n", "decimal"),
    ("1 0 ١\n", "decimal")])
def test_dataset_text_is_strict(text, needle):
    with pytest.raises(Malformed, match=needle):
        parse_dataset(text, 4, 3)


def test_dataset_rows_parse():
    assert parse_dataset("0 1 2 2 3\n3 0 0\n", 4, 3) == (((0, 1, 2), 2, 3), ((3,), 0, 0))


# -- enumeration soundness --------------------------------------------------------------

def weights_for(v, k, seed, family=None, scale=3.0):
    family = family or Family(d_mlp=6)
    d_model, d_head = 5, 4
    from test_families import random_weights_for

    return random_weights_for(Dims(v, k, d_model, d_head, family), seed, scale)


def certificate(fw, task) -> list[str]:
    trace = Trace(fw)
    by, claim, _ = STRATEGIES["forward-brute-force"].certify(trace, task=task)
    d = fw.dims
    theorem = (f"{task.describe()} and d_vocab == {d.d_vocab} and n_ctx == {d.n_ctx} and "
               f"d_model == {d.d_model} and d_head == {d.d_head} and "
               f"weights == sha256:{trace.weights_sha256} and correct >= {claim}")
    return trace.lines("forward-brute-force", by, claim, {}, {}, theorem)


def replay(lines, arith=MPMATH):
    checker = CertificateChecker(arith=arith)
    for line in lines:
        checker.feed(line)
    return checker, checker.finish()


def reference_correct(fw, prefix, label) -> bool:
    """spec/theorem.md §2 at position len(prefix) − 1, in 200-bit mpmath
    (tests/test_families.reference_logits on the first len(prefix) positions)."""
    from test_families import reference_logits

    logits = reference_logits(truncated(fw, len(prefix)), prefix)
    return all(logits[label] > x for o, x in enumerate(logits) if o != label)


def _rule(lines):
    return next(json.loads(x) for x in lines if '"kind":"rule"' in x)


def _soundness(fw, task, lines):
    checker, report = replay(lines)
    rule = _rule(lines)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    certified = list(forward.certified_pairs(checker.dims, mats, lambda w: None, task))
    with mpmath.workprec(200):
        for prefix, label, _ in certified:
            assert reference_correct(fw, prefix, label), (prefix, label)
    count = sum(p for *_, p in certified)
    assert report.facts.correct == rule["claim"] == count
    assert report.facts.total == task.pairs()
    assert 0 < count < task.pairs()  # a non-trivial test
    # the generator's float64 margins (an independent enumeration) agree
    params = {f: v for f, v in task.params if f != "dataset"}
    m = margins(fw, *domain(task.name, task.d_vocab, task.n_ctx, params, task.rows))
    assert int((m > 0).sum()) == count
    try:
        arb = get("arb")
    except Exception:  # python-flint absent: the mpmath reference alone
        return
    _, report_arb = replay(lines, arb)
    assert report_arb.facts.correct == count


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_certified_pair_is_correct(name):
    params, v, k = CASES[name]
    task = make_task(name, params, v, k)
    fw = weights_for(v, k, seed=0)
    _soundness(fw, task, certificate(fw, task))


@pytest.mark.parametrize("family", [
    ATTN_ONLY,
    Family(normalization="LN", n_heads=2, d_mlp=6, positional="rotary", n_ctx=4, rotary_dim=2,
           rotary_base=10000, ln_eps=1e-5)], ids=["attn_only", "ln_mlp_rope_2heads"])
def test_other_families_on_a_scored_every_position_task(family):
    task = make_task("cyclic", {"n": 3}, 3, 4)
    fw = weights_for(3, 4, seed=5, family=family)
    _soundness(fw, task, certificate(fw, task))


def dataset_text(rows) -> str:
    return "".join(" ".join(map(str, (*t, p, lab))) + "\n" for t, p, lab in rows)


def _dataset_task(fw, rows):
    text = dataset_text(rows)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return make_task("dataset", {"dataset": digest}, fw.dims.d_vocab, fw.dims.n_ctx, text)


DATA_ROWS = [((0, 1, 2), 2, 2), ((0, 1, 2), 1, 1), ((0, 1), 1, 1), ((3, 3, 0), 2, 3),
             ((3, 3, 0), 2, 3), ((2,), 0, 2), ((1, 0, 3), 0, 1), ((1, 0, 3), 2, 0),
             ((2, 2, 2), 2, 0), ((0, 1, 3), 1, 2)]


def test_dataset_soundness():
    fw = weights_for(4, 3, seed=11)
    task = _dataset_task(fw, DATA_ROWS)
    lines = certificate(fw, task)
    _soundness(fw, task, lines)
    assert sum(1 for x in lines if '"kind":"dataset"' in x) == 1


# -- mutants -------------------------------------------------------------------------------

def _edit_header(lines, old, new):
    header = json.loads(lines[0])
    assert old in header["theorem"]
    header["theorem"] = header["theorem"].replace(old, new)
    return [json.dumps(header, separators=(",", ":")), *lines[1:]]


def _refused(lines, kind=(Malformed, Rejected)):
    with pytest.raises(kind) as info:
        replay(lines)
    return str(info.value)


@pytest.fixture(scope="module")
def modadd_cert():
    task = make_task("modular_addition", {"p": 5}, 6, 3)
    fw = weights_for(6, 3, seed=4)  # 3 certified; 2 under modular multiplication
    return fw, task, certificate(fw, task)


def test_mutant_task_parameter_changed(modadd_cert):
    _, _, lines = modadd_cert
    msg = _refused(_edit_header(lines, "p == 5", "p == 7"), Malformed)
    assert "d_vocab = p + 1" in msg


def test_mutant_task_changed_keeps_the_claim(modadd_cert):
    """The same rule line under another task's theorem: the other task's count is lower."""
    _, _, lines = modadd_cert
    claim = _rule(lines)["claim"]
    mutant = _edit_header(lines, "task == modular_addition and p == 5",
                          "task == modular_multiplication and p == 5")
    msg = _refused(mutant, Rejected)
    assert f"the line claims {claim}" in msg


def test_mutant_over_claim_beyond_the_pairs(modadd_cert):
    _, task, lines = modadd_cert
    claim = _rule(lines)["claim"]
    mutant = _edit_header(lines, f"correct >= {claim}", f"correct >= {task.pairs() + 1}")
    rule = _rule(mutant)
    out = []
    for x in mutant:
        obj = json.loads(x)
        if obj["kind"] == "rule":
            obj["claim"] = task.pairs() + 1
            x = json.dumps(obj, separators=(",", ":"))
        out.append(x)
    assert rule
    _refused(out, Malformed)


def test_mutant_decomposition_rule_refuses_other_tasks(modadd_cert):
    """The header of a non-max task on a max_of_k decomposition rule line: refused."""
    from checker.rules import brute_force

    _, _, lines = modadd_cert
    rule = _rule(lines)
    obj = {"id": rule["id"], "kind": "rule", "rule": "brute_force",
           "inputs": {n: 1 for n in brute_force.INPUTS}, "claim": 0}
    mutant = [x if json.loads(x)["id"] != rule["id"] else json.dumps(obj) for x in lines]
    with pytest.raises((Rejected, Malformed)) as info:
        replay(mutant)
    assert "max_of_k" in str(info.value) or "family" in str(info.value)


def _dataset_cert_with(fw, rows, claim=None):
    task = _dataset_task(fw, rows)
    lines = certificate(fw, task)
    if claim is not None:
        lines = _set_claim(lines, claim)
    return task, lines


def _set_claim(lines, claim):
    out = []
    for x in lines:
        obj = json.loads(x)
        if obj["kind"] == "rule":
            obj["claim"] = claim
        if obj["kind"] == "header":
            head, _ = obj["theorem"].rsplit("correct >= ", 1)
            obj["theorem"] = head + f"correct >= {claim}"
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


def _replace_dataset(lines, text, rehash=True):
    out = []
    for x in lines:
        obj = json.loads(x)
        if obj["kind"] == "dataset":
            old = hashlib.sha256(obj["text"].encode()).hexdigest()
            obj["text"] = text
        out.append(obj)
    if rehash:
        new = hashlib.sha256(text.encode()).hexdigest()
        out[0]["theorem"] = out[0]["theorem"].replace(old, new)
    return [json.dumps(o, separators=(",", ":")) for o in out]


@pytest.fixture(scope="module")
def dataset_cert():
    fw = weights_for(4, 3, seed=11)
    task = _dataset_task(fw, DATA_ROWS)
    lines = certificate(fw, task)
    checker, _ = replay(lines)
    rule = _rule(lines)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    good = {(p, lab) for p, lab, _ in forward.certified_pairs(checker.dims, mats,
                                                               lambda w: None, task)}
    return fw, task, lines, good


def test_mutant_dataset_row_changed_without_rehash(dataset_cert):
    _, _, lines, _ = dataset_cert
    rows = list(DATA_ROWS)
    rows[0] = ((0, 1, 3), 2, 2)
    assert "sha256" in _refused(_replace_dataset(lines, dataset_text(rows), rehash=False),
                                Malformed)


def test_mutant_label_changed(dataset_cert):
    """A certified row's label changed (and the theorem's digest updated): the claim no
    longer holds."""
    _, _, lines, good = dataset_cert
    rows = list(DATA_ROWS)
    i = next(j for j, (t, p, lab) in enumerate(rows) if (t[:p + 1], lab) in good)
    t, p, lab = rows[i]
    rows[i] = (t, p, (lab + 1) % 4)
    _refused(_replace_dataset(lines, dataset_text(rows)), Rejected)


def test_mutant_dataset_row_changed(dataset_cert):
    """A certified row's tokens changed so that its prefix is one the model gets wrong."""
    fw, _, lines, good = dataset_cert
    rows = list(DATA_ROWS)
    i = next(j for j, (t, p, lab) in enumerate(rows) if (t[:p + 1], lab) in good)
    t, p, lab = rows[i]
    wrong = next(((x, y, z), p, lab) for x in range(4) for y in range(4) for z in range(4)
                 if ((x, y, z)[:p + 1], lab) not in good
                 and not reference_correct(fw, (x, y, z)[:p + 1], lab))
    rows[i] = wrong
    _refused(_replace_dataset(lines, dataset_text(rows)), Rejected)


def test_mutant_scored_position_added(dataset_cert):
    """A row scoring one more position (one the model gets wrong) added, the claim raised by
    one as a generator counting rows might: refused."""
    fw, _, lines, good = dataset_cert
    claim = _rule(lines)["claim"]
    extra = next(((x, y, z), p, lab) for x in range(4) for y in range(4) for z in range(4)
                 for p in range(3) for lab in range(4)
                 if not reference_correct(fw, (x, y, z)[:p + 1], lab))
    mutant = _replace_dataset(lines, dataset_text([*DATA_ROWS, extra]))
    _refused(_set_claim(mutant, claim + 1), Rejected)
    replay(mutant)  # the same claim over one more row still holds (a weaker accuracy)


def test_built_in_task_scored_position_added():
    """Scoring one more position of a built-in task (parity at every position vs max_of_k
    at the last) changes the denominator: the max_of_k claim of all pairs is refused."""
    task = make_task("parity", {}, 2, 3)
    fw = weights_for(2, 3, seed=4)
    lines = certificate(fw, task)
    mutant = _edit_header(_set_claim(lines, 8), "task == parity", "task == max_of_k")
    _refused(mutant, (Rejected, Malformed))


def test_dataset_line_misuse(dataset_cert, modadd_cert):
    _, _, lines, _ = dataset_cert
    no_data = [x for x in lines if '"kind":"dataset"' not in x]
    renumbered = [json.dumps({**json.loads(x), "id": i}, separators=(",", ":"))
                  for i, x in enumerate(no_data)]
    fixed = []
    for x in renumbered:
        obj = json.loads(x)
        if obj["kind"] == "qed":
            obj["by"] -= 1
        fixed.append(json.dumps(obj, separators=(",", ":")))
    assert "no dataset" in _refused(fixed, Malformed)
    _, _, mlines = modadd_cert
    data_line = next(x for x in lines if '"kind":"dataset"' in x)
    n = int(len(parameter_table(Family(d_mlp=6))) + 1)
    obj = json.loads(data_line)
    obj["id"] = n
    shifted = [*mlines[:n], json.dumps(obj)]
    for x in mlines[n:]:
        o = json.loads(x)
        o["id"] += 1
        if o["kind"] == "qed":
            o["by"] += 1
        if o["kind"] == "rule":
            o["inputs"] = {k: (v + 1 if v >= n else v) for k, v in o["inputs"].items()}
        if o["kind"] == "op":
            o["args"] = [a + 1 if a >= n else a for a in o["args"]]
        shifted.append(json.dumps(o))
    assert "not dataset" in _refused(shifted, Malformed)


def test_policy_atoms_on_tasks(modadd_cert):
    _, task, lines = modadd_cert
    _, report = replay(lines)
    facts = report.facts
    assert facts.scored == task
    for text, ok in [("task == modular_addition", True), ("task == modular_addition and p == 5",
                                                          True),
                     ("p == 7", False), ("task == max_of_k", False), ("n == 5", False),
                     (f"accuracy >= {facts.correct}/{task.pairs()}", True),
                     (f"accuracy >= {facts.correct + 1}/{task.pairs()}", False)]:
        atoms = statement.parse(text)
        assert all(statement.holds(a, facts) for a in atoms) is ok, text
    assert statement.theorem_text(facts).startswith("task == modular_addition and p == 5 and")


def test_max_of_k_theorem_text_unchanged():
    facts = statement.Facts(dims={"d_vocab": 4, "n_ctx": 3, "d_model": 4, "d_head": 4},
                            weights_sha256="0" * 64, correct=7)
    assert statement.theorem_text(facts).startswith("task == max_of_k and d_vocab == 4")
    assert facts.total == 64


def test_each_distinct_prefix_is_evaluated_once():
    """The rule's note counts distinct prefixes: 2 + 4 + 8 for parity at n_ctx 3 (not the
    8 · 3 = 24 pairs); both back-ends."""
    task = make_task("parity", {}, 2, 3)
    fw = weights_for(2, 3, seed=4)
    lines = certificate(fw, task)
    _, report = replay(lines)
    assert "14 distinct prefixes evaluated" in report.rule_notes[-1]
    try:
        arb = get("arb")
    except Exception:
        return
    _, report = replay(lines, arb)
    assert "14 distinct prefixes evaluated" in report.rule_notes[-1]


def test_audit_policy_requires_the_task(tmp_path, capsys):
    """check-cert audit: a policy entry naming the certificate's task passes; one naming
    another task (or another parameter) fails."""
    from pathlib import Path

    from checker.cli import main as check_cert

    pytest.importorskip("flint")
    root = Path(__file__).resolve().parent.parent
    cert, model = "parity_n10_seed0.forward.jsonl", "parity_n10_seed0.pt"
    policy = tmp_path / "POLICY"
    for require, code in [("task == parity and accuracy >= 0.999", 0),
                          ("task == cyclic and n == 2", 1), ("task == max_of_k", 1)]:
        policy.write_text(f"{root / 'certs' / cert} {root / 'generator' / 'models' / model} "
                          f"{require}\n")
        assert check_cert(["audit", str(policy), "--arith", "arb"]) == code, require
    capsys.readouterr()


def test_gen_cert_and_check_cert_with_a_task(tmp_path, capsys):
    """The commands end to end: gen-cert --task (and --dataset), check-cert --json carries
    the task and its domain; a decomposition strategy with another task is refused (exit 2)."""
    from checker.cli import main as check_cert
    from generator.cli import main as gen_cert
    from generator.modelfile import save_model

    model = tmp_path / "m.pt"
    save_model(model, weights_for(6, 3, seed=4), None)
    cert = tmp_path / "c.jsonl"
    assert gen_cert([str(model), "--task", "modular_addition:p=5", "-o", str(cert), "-q"]) == 0
    capsys.readouterr()
    assert check_cert([str(cert), "--model", str(model), "--json",
                       "--require", "task == modular_addition and p == 5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["task"], out["task_params"], out["domain_inputs"], out["total"]) == \
        ("modular_addition", {"p": 5}, 25, 25)
    assert check_cert([str(cert), "--require", "p == 7"]) == 1
    assert gen_cert([str(model), "--task", "modular_addition:p=6", "-o", str(cert), "-q"]) == 2
    assert gen_cert([str(model), "--task", "modular_addition:p=5", "--strategy", "cubic",
                     "-o", str(cert), "-q"]) == 2
    data = tmp_path / "d.txt"
    data.write_text("0 1 2 1 1\n3 3 5 2 4\n")
    assert gen_cert([str(model), "--dataset", str(data), "-o", str(cert), "-q"]) == 0
    capsys.readouterr()
    assert check_cert([str(cert), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "dataset" and out["total"] == 2
    assert out["task_params"]["dataset"] == hashlib.sha256(data.read_bytes()).hexdigest()


def test_dataset_line_fields_are_strict(dataset_cert):
    """An unknown field, a non-string text, or a dataset line after the rule line: exit 2."""
    _, _, lines, _ = dataset_cert
    i = next(j for j, x in enumerate(lines) if '"kind":"dataset"' in x)
    for change in ({"extra": 1}, {"text": 5}):
        obj = {**json.loads(lines[i]), **change}
        _refused([*lines[:i], json.dumps(obj), *lines[i + 1:]], Malformed)
    rule_at = next(j for j, x in enumerate(lines) if '"kind":"rule"' in x)
    assert rule_at == i + 1
    moved = json.loads(lines[i])
    rule = json.loads(lines[rule_at])
    rule["id"], moved["id"] = i, rule_at
    qed = json.loads(lines[-1])
    qed["by"] = i
    out = [*lines[:i], json.dumps(rule), json.dumps(moved), *lines[rule_at + 1:-1], json.dumps(qed)]
    assert "no dataset line precedes" in _refused(out, Malformed)


@pytest.mark.parametrize("family", [
    Family(n_layers=2),
    Family(normalization="RMS", n_heads=2, d_mlp=6, act_fn="silu", positional="rotary", n_ctx=4,
           rotary_dim=2, rotary_base=10000, ln_eps=1e-6, gated_mlp=True, n_layers=2)],
    ids=["two_layers_attn_only", "two_layers_gated_silu_rms_rope"])
def test_deep_and_gated_families_on_a_scored_every_position_task(family):
    """The task walk over the several-layer path (issues 20 and 21 together): every certified
    (prefix, label) is correct by test_depth's independent 200-bit multi-layer reference at the
    prefix's last position, the claim is the rule's count, and the Arb route (the bulk pass,
    forward_arb) gives the same count and the same proof length."""
    from test_depth import reference_logits_all

    task = make_task("cyclic", {"n": 3}, 3, 4)
    fw = weights_for(3, 4, seed=5, family=family)
    lines = certificate(fw, task)
    checker, report = replay(lines)
    rule = _rule(lines)
    mats = {n: checker.values[i].matrix for n, i in rule["inputs"].items()}
    certified = list(forward.certified_pairs(checker.dims, mats, lambda w: None, task))
    with mpmath.workprec(200):
        for prefix, label, _ in certified:
            logits = reference_logits_all(fw, list(prefix))[-1]
            assert all(logits[label] > x for o, x in enumerate(logits) if o != label), prefix
    count = sum(p for *_, p in certified)
    assert report.facts.correct == rule["claim"] == count
    assert 0 < count < task.pairs()  # a non-trivial test
    try:
        arb = get("arb")
    except Exception:  # python-flint absent: the mpmath reference alone
        return
    arb_report = replay(lines, arb)[1]
    assert arb_report.facts.correct == count
    assert arb_report.work == report.work
