"""The checker's trust base, measured: which files a verdict depends on, and
their size in lines (non-blank, non-comment; docstrings included).

spec/trust.md explains the groups.  Every file under checker/ must belong to
exactly one group below: the script exits 1 naming any file that does not (a
test runs it), so a new checker file cannot grow the trust base unseen.

    python benchmarks/trust_base.py            # table of groups, files, lines
    python benchmarks/trust_base.py --json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "checker"

# group -> (when a verdict depends on it, files relative to checker/); rules/*.py
# other than __init__.py are grouped automatically, one group per rule.
GROUPS = {
    "kernel": ("every verdict", [
        "__init__.py", "__main__.py", "errors.py", "cli.py", "checkfile.py", "progress.py",
        "certificate.py",
        "ops.py", "numbers.py", "definitions.py", "statement.py", "statement.lark", "lalr.py",
        "modelspec.py",
        "modelfile.py", "tl_config.py", "config_fields.py", "elementary.py", "limits.py",
        "tasks.py", "arith/__init__.py", "arith/base.py", "arith/mp.py",
        "rules/__init__.py"]),
    "statement tables": ("every verdict (data: lark's LALR tables of statement.lark, run by "
                         "lalr.py; tests/test_statement_tables.py)", ["statement_tables.py"]),
    "arb": ("only with --arith arb", ["arith/arb.py"]),
    "hf": ("only for a Hugging Face save_pretrained directory", ["hf.py"]),
    "audit": ("only for `check-cert audit POLICY`", ["audit.py", "policy.py"]),
    "float32": ("for a `semantics == float32` theorem; and the distance-to-float32 notes of "
                "real checks, which decide nothing (rules/notes.py)", ["float32.py"]),
}


def code_lines(path: Path) -> int:
    """Non-blank lines that are not comments (docstrings count: they state the theorems)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


def registered_rules() -> list[str]:
    """The rule modules the registry (rules/__init__.py) names: the proof rules proper.  The
    registry imports each when it is first looked up; its table is the dict `_MODULES`
    (rule name -> module name), read here without importing it."""
    tree = ast.parse((CHECKER / "rules" / "__init__.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_MODULES" for t in node.targets)):
            return sorted({v.value for v in node.value.values})
    raise SystemExit("trust_base: rules/__init__.py has no _MODULES table")


def grouped() -> dict[str, tuple[str, list[str]]]:
    """GROUPS plus one group per file in rules/: a registered rule, or a module
    that only rules import (named after the rules that use it)."""
    groups = dict(GROUPS)
    rules = registered_rules()
    for path in sorted((CHECKER / "rules").glob("*.py")):
        name = path.stem
        if name == "__init__":
            continue
        if name in rules:
            groups[f"rule {name}"] = ("only if a certificate uses it", [f"rules/{path.name}"])
        else:
            users = [r for r in rules if name in rule_dependencies(r)]
            groups[f"  part {name}"] = (f"only through rule {', '.join(users) or '(none)'}",
                                        [f"rules/{path.name}"])
    return groups


def rule_dependencies(rule: str) -> list[str]:
    """The other rule modules `rule` imports, transitively (their lines count too)."""
    seen, todo = [], [rule]
    while todo:
        tree = ast.parse((CHECKER / "rules" / f"{todo.pop()}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                for name in names:
                    if name not in seen and name != rule:
                        seen.append(name)
                        todo.append(name)
    return sorted(seen)


def ungrouped(groups) -> list[str]:
    """Checker source files in no group (or in two)."""
    named = [f for _, files in groups.values() for f in files]
    present = sorted(str(p.relative_to(CHECKER)) for p in CHECKER.rglob("*")
                     if p.suffix in (".py", ".lark") and "__pycache__" not in p.parts)
    twice = sorted({f for f in named if named.count(f) > 1})
    return [f for f in present if f not in named] + twice + [f for f in named if f not in present]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    groups = grouped()
    problems = ungrouped(groups)
    if problems:
        print(f"checker files in no group, in two, or missing: {', '.join(problems)} "
              "(edit GROUPS in benchmarks/trust_base.py and spec/trust.md)", file=sys.stderr)
        return 1
    table = {name: {"when": when, "files": {f: code_lines(CHECKER / f) for f in files}}
             for name, (when, files) in groups.items()}
    for name, group in table.items():
        if name.startswith("rule "):
            deps = rule_dependencies(name.removeprefix("rule "))
            group["uses"] = deps
            group["with_uses"] = sum(group["files"].values()) + sum(
                code_lines(CHECKER / "rules" / f"{d}.py") for d in deps)
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    for name, group in table.items():
        total = sum(group["files"].values())
        uses = (f"; with {', '.join(group['uses'])}: {group['with_uses']}"
                if group.get("uses") else "")
        print(f"{name:26} {total:6d}  ({group['when']}{uses})")
        if len(group["files"]) > 1:
            for f, n in group["files"].items():
                print(f"    {f:32} {n:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
