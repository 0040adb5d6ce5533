"""The trusted checker imports only the standard library, mpmath, lark and itself;
python-flint only in the optional Arb back-end (checker/arith/arb.py), and only
lazily, when `--arith arb` asks for it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECKER = REPO / "checker"
ALLOWED = set(sys.stdlib_module_names) | {"mpmath", "lark", "checker"}
# Stdlib ways of importing by name at run time would hide imports from this test
# (importlib itself stays allowed: importlib.resources reads the grammar files).
DYNAMIC = {"__import__", "import_module", "runpy", "imp", "zipimport"}
# The one module allowed python-flint, and only inside a function (lazily).
ARB_MODULE = CHECKER / "arith" / "arb.py"


def imported_modules(tree: ast.AST) -> set[str]:
    """Top-level names of every absolute import (relative imports stay in checker/)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def top_level_imports(tree: ast.Module) -> set[str]:
    """Modules imported at module level (run when the module is imported)."""
    return imported_modules(ast.Module(body=[n for n in tree.body
                                             if isinstance(n, (ast.Import, ast.ImportFrom))],
                                       type_ignores=[]))


def checker_files() -> list[Path]:
    files = sorted(CHECKER.rglob("*.py"))
    assert CHECKER / "modelfile.py" in files
    return files


def test_checker_imports_only_allowed_modules():
    bad = {}
    for path in checker_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        outside = imported_modules(tree) - ALLOWED
        if path == ARB_MODULE:
            outside -= {"flint"}
            assert "flint" not in top_level_imports(tree), "python-flint must be imported lazily"
        dynamic = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in DYNAMIC}
        dynamic |= {n.attr for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and n.attr in DYNAMIC}
        dynamic |= imported_modules(tree) & DYNAMIC
        if outside or dynamic:
            bad[str(path.relative_to(REPO))] = sorted(outside | dynamic)
    assert not bad, f"checker/ must import only stdlib, mpmath and lark: {bad}"
    assert ARB_MODULE in checker_files()


def test_imported_modules_helper():
    tree = ast.parse("import os.path, torch\nfrom numpy import x\nfrom . import y\n"
                     "from .z import w\nimport checker.errors\n")
    assert imported_modules(tree) == {"os", "torch", "numpy", "checker"}


def test_checker_modules_import_with_torch_numpy_safetensors_blocked():
    """At run time too: every checker module imports with the untrusted stack unavailable,
    and none of it gets loaded."""
    modules = [".".join(p.relative_to(REPO).with_suffix("").parts) for p in checker_files()]
    modules = [m.removesuffix(".__init__") for m in modules if not m.endswith("__main__")]
    code = ("import sys\n"
            "blocked = ('torch', 'numpy', 'safetensors', 'generator')\n"
            "sys.modules.update(dict.fromkeys(blocked))\n"
            f"for m in {modules!r}:\n    __import__(m)\n"
            "loaded = [m for m in blocked if sys.modules.get(m) is not None]\n"
            "assert not loaded, loaded\n"
            "assert 'flint' not in sys.modules, 'python-flint imported without --arith arb'\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
