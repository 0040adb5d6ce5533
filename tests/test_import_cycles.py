"""No two checker/ or generator/ modules import each other (benchmarks/import_cycles.py):
a rule and its parts form a tree (the rule -> its parts -> the model module; the rule ->
the model module), so each file can be read, and trusted, after the files it imports."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import import_cycles  # noqa: E402


def test_no_two_file_import_cycle_in_checker_or_generator():
    found = set(import_cycles.cycles(ROOT, ("checker", "generator")))
    assert found == set(), sorted(found)


def test_the_broken_cycles_stay_broken():
    """The rules whose cycles were broken: each part imports the model module, not the rule."""
    graph = import_cycles.edges(import_cycles.modules(ROOT, ("checker",)))
    rules = "checker.rules."
    for rule, parts, model in [
        ("forward", ("forward_arb", "forward_float32"), "forward_model"),
        ("overwhelm_family", ("overwhelm_family_arb", "overwhelm_family_float32",
                              "overwhelm_deep", "overwhelm_deep_float32"),
         "overwhelm_family_bounds"),
        ("family_gap", ("family_gap_arb", "family_gap_float32"), "family_gap_classes"),
    ]:
        assert rules + model in graph[rules + rule]
        assert graph[rules + model] & {rules + rule, *(rules + p for p in parts)} == set()
        for part in parts:
            assert rules + rule not in graph[rules + part], part
            assert rules + model in graph[rules + part], part


def _package(root: Path, files: dict) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _run(root: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "import_cycles.py"),
                           "--root", str(root), "checker", *args],
                          capture_output=True, text=True)


def test_a_cycle_is_found_and_fails_the_script(tmp_path):
    """A lazy (function-level) import back counts: the script names the pair and exits 1;
    the same files with the back edge removed pass."""
    _package(tmp_path, {
        "checker/__init__.py": "",
        "checker/rules/__init__.py": "",
        "checker/rules/r.py": "from . import r_part\n",
        "checker/rules/r_part.py": "def f():\n    from .r import g\n",
    })
    out = _run(tmp_path)
    assert out.returncode == 1 and "checker.rules.r <-> checker.rules.r_part" in out.stdout
    assert _run(tmp_path, "--allow", "checker.rules.r_part:checker.rules.r").returncode == 0
    (tmp_path / "checker/rules/r_part.py").write_text("def f():\n    return 1\n")
    out = _run(tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "none", out.stdout


def test_absolute_and_package_imports_count(tmp_path):
    """`import checker.rules.a` and `from checker.rules import a` are edges too; a package
    importing its own submodule is not a cycle."""
    _package(tmp_path, {
        "checker/__init__.py": "from . import tool\n",
        "checker/tool.py": "import checker\n",
        "checker/rules/__init__.py": "",
        "checker/rules/a.py": "import checker.rules.b\n",
        "checker/rules/b.py": "from checker.rules import a\n",
    })
    assert import_cycles.cycles(tmp_path, ("checker",)) == [("checker.rules.a",
                                                            "checker.rules.b")]
