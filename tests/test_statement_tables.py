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
    for line in (ROOT / "certs" / "POLICY").read_text(encoding="utf-8").splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and not line.startswith("#"):
            out.append(parts[2])
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


@same_lark
def test_checker_loads_the_stored_tables_only_for_its_grammar(monkeypatch):
    monkeypatch.setattr(statement, "_LARK", {})
    statement._lark()
    assert statement._LARK["parser"].source_path == "<deserialized>"
    monkeypatch.setattr(statement, "_LARK", {})
    monkeypatch.setattr(statement_tables, "GRAMMAR_SHA256", "0" * 64)  # another grammar
    statement._lark()
    assert statement._LARK["parser"].source_path != "<deserialized>"
    monkeypatch.setattr(statement, "_LARK", {})
    monkeypatch.undo()
    monkeypatch.setattr(statement, "_LARK", {})
    monkeypatch.setattr(statement_tables, "LARK_VERSION", "0.0.1")  # another lark
    statement._lark()
    assert statement._LARK["parser"].source_path != "<deserialized>"


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
