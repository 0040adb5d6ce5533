"""The statement parser's stored tables (checker/statement_tables.py) are lark's own build of
checker/statement.lark up to the numbering of states, and the checker uses them only for that
grammar and that lark version (issue 22: the grammar is no longer rebuilt on every run)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import lark
import pytest

from checker import statement, statement_tables

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "statement_tables.py"
_spec = importlib.util.spec_from_file_location("statement_tables_script", SCRIPT)
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)
GRAMMAR = (ROOT / "checker" / "statement.lark").read_text(encoding="utf-8")

same_lark = pytest.mark.skipif(lark.__version__ != statement_tables.LARK_VERSION,
                               reason="the stored tables are for another lark version "
                                      "(the checker then builds the parser from the grammar)")


def theorems_and_policies() -> list[str]:
    """Every theorem of a shipped certificate and every policy of certs/POLICY."""
    out = []
    for cert in sorted((ROOT / "certs").glob("*.jsonl")):
        with open(cert, encoding="utf-8") as f:
            out.append(json.loads(f.readline())["theorem"])
    from checker import policy

    out.extend(e.require for e in policy.load(ROOT / "certs" / "POLICY").entries)
    return out


@same_lark
def test_stored_tables_are_a_fresh_build():
    assert statement_tables.GRAMMAR_SHA256 == \
        __import__("hashlib").sha256(tables.GRAMMAR.read_bytes()).hexdigest()
    assert tables.canonical(statement_tables.DATA, statement_tables.MEMO) == \
        tables.canonical(*tables.build(GRAMMAR))
    assert tables.main(["x", "--check"]) == 0


def test_canonical_form_does_not_depend_on_lark_numbering():
    """Two builds in processes with other hash seeds: lark's raw tables differ (else this
    test would not show that canonical removes the numbering), their canonical forms agree."""
    code = (f"import json, sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); "
            "import statement_tables as t; g = t.GRAMMAR.read_text(); d, m = t.build(g); "
            "print(json.dumps([repr((d, m)), t.canonical(d, m)]))")
    runs = [json.loads(subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env=dict(os.environ, PYTHONHASHSEED=seed)).stdout) for seed in ("1", "2", "3")]
    assert len({raw for raw, _ in runs}) > 1
    assert len({canon for _, canon in runs}) == 1


def test_canonical_form_sees_a_changed_table_or_grammar():
    data, memo = tables.build(GRAMMAR)
    before = tables.canonical(data, memo)
    states = data["parser"]["parser"]["states"]
    # a reduction by another rule
    s, tok = next((s, t) for s, row in states.items() for t, (a, _) in row.items() if a == 1)
    rule = states[s][tok][1]
    states[s][tok] = (1, next(r for r in data["rules"] if r != rule))
    assert tables.canonical(data, memo) != before
    states[s][tok] = (1, rule)
    assert tables.canonical(data, memo) == before
    # a shift redirected to the start state (another state becomes unreachable: refused)
    start = data["parser"]["parser"]["start_states"]["start"]
    s, tok = next((s, t) for s, row in states.items() for t, (a, x) in row.items()
                  if a == 0 and x != start)
    target = states[s][tok][1]
    states[s][tok] = (0, start)
    try:
        assert tables.canonical(data, memo) != before
    except ValueError as err:
        assert "unreachable" in str(err)
    states[s][tok] = (0, target)
    assert tables.canonical(data, memo) == before
    # a terminal's pattern changed in the memo
    key = next(k for k, v in memo.items() if v.get("name") == "FIELD")
    memo[key]["pattern"]["value"] = memo[key]["pattern"]["value"].replace("|semantics", "")
    assert tables.canonical(data, memo) != before
    # another grammar
    assert tables.canonical(*tables.build(GRAMMAR.replace('| "semantics"', ""))) != before


def test_checker_runs_the_stored_tables_only_for_its_grammar(monkeypatch):
    monkeypatch.setattr(statement, "_LARK", {})
    assert statement.parse("correct >= 5")[0].value == 5
    assert statement._LARK["by"] == "tables"  # lalr.py, lark not needed
    monkeypatch.setattr(statement, "_LARK", {})
    monkeypatch.setattr(statement_tables, "GRAMMAR_SHA256", "0" * 64)  # another grammar
    assert statement.parse("correct >= 5")[0].value == 5
    assert statement._LARK["by"] == "lark"


@same_lark
def test_stored_and_built_parsers_agree_on_every_shipped_statement():
    stored = lark.Lark._load_from_dict(statement_tables.DATA, statement_tables.MEMO)
    built = lark.Lark(GRAMMAR, parser="lalr")
    texts = theorems_and_policies()
    assert len(texts) > 40
    bad = ["", "task", "task ==", "and", "correct >= 5 and", "free <= 3 over [1,",
           "weights == sha256:00", "task == max_of_k andd x", "accuracy >= 1/", "[1, 2]"]
    for text in texts + [t[:n] for t in texts[:8] for n in range(0, len(t), 7)] + bad:
        results = []
        for parser in (stored, built):
            try:
                results.append(("tree", parser.parse(text)))
            except lark.LarkError as err:
                results.append(("error", type(err).__name__, str(err).splitlines()[0]))
        assert results[0] == results[1], text


def _outcome(parse, text):
    """The atoms, the rule's own Malformed message, or a refusal (any other parse error)."""
    from checker.errors import Malformed

    try:
        return ("atoms", parse(text))
    except Malformed as err:
        return ("malformed", str(err))
    except (lark.LarkError, ValueError, ArithmeticError) as err:
        cause = getattr(err, "orig_exc", None)  # lark wraps the rules' errors
        if isinstance(cause, Malformed):
            return ("malformed", str(cause))
        return ("refused",)


def _random_statements(n: int, seed: int = 7) -> list[str]:
    """Statements of the language and near misses: random atoms from the grammar's pieces,
    joined by 'and', with random spacing, dropped, doubled or foreign pieces."""
    import random

    g = random.Random(seed)
    fields = list(statement.FIELDS) + ["fre", "frees", "Task", "d_vocabx"]
    cmps = [">=", "==", "<=", "=", "<", ">", "=>"]
    values = ["0", "5", "64", "007", "0.95", "1.0", "3/4", "0/1", "1/0", "max_of_k", "real",
              "float32", "overwhelm", "modular_addition", "sha256:" + "0" * 64,
              "sha256:" + "f" * 63, "[]", "[1]", "[1, 2, 3]", "[1,2,]", "[", "]", "-1", "x9",
              "9" * 30, "1e5", "_a", "a-b"]
    pieces = []
    for _ in range(n):
        atoms = []
        for _ in range(g.randint(1, 4)):
            atom = [g.choice(fields), g.choice(cmps), g.choice(values)]
            if g.random() < 0.2:
                atom += ["over", g.choice(["[0, 1]", "[2]", "[]", "[1, 1]", "1"])]
            if g.random() < 0.1:
                del atom[g.randrange(len(atom))]
            atoms.append(atom)
        joiners = [g.choice([" and ", " and ", "and", " AND ", " ", " and and "])
                   for _ in atoms[1:]]
        text = " ".join(atoms[0])
        for joiner, atom in zip(joiners, atoms[1:]):
            text += joiner + g.choice([" ", "", "  ", "\\t"]).join(atom)
        if g.random() < 0.1:
            i = g.randrange(len(text) + 1)
            text = text[:i] + g.choice(["#", "(", "é", " ", "and"]) + text[i:]
        pieces.append(text)
    return pieces


@same_lark
def test_the_driver_agrees_with_lark_everywhere():
    """checker/lalr.py against lark itself (the same rules as transformer): on every shipped
    theorem and policy, their prefixes, and 4,000 random statements and near misses, both give
    the same atoms, the same rule message, or both refuse."""
    from checker.lalr import Parser

    ours = Parser(statement_tables.DATA, statement_tables.MEMO)
    built = lark.Lark(GRAMMAR, parser="lalr")
    rules = type("_ToAtoms", (statement._AtomRules, lark.Transformer), {})
    texts = theorems_and_policies()
    texts += [t[:n] for t in texts for n in range(0, len(t), 5)]
    texts += _random_statements(4000)
    kinds = {"atoms": 0, "malformed": 0, "refused": 0}
    for text in texts:
        mine = _outcome(lambda s: ours.parse(s, statement._AtomRules()), text)
        theirs = _outcome(lambda s: rules().transform(built.parse(s)), text)
        assert mine == theirs, text
        kinds[mine[0]] += 1
    assert min(kinds.values()) > 100, kinds  # every outcome occurs: the comparison is not idle
