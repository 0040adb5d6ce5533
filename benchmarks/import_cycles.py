"""Two-file import cycles among the checker/ and generator/ modules: a module A that imports
B while B imports A (package __init__ edges excluded).  Every import counts, at module level
or inside a function (a lazy import still makes the two files depend on each other).

    python benchmarks/import_cycles.py                # from the repository root
    python benchmarks/import_cycles.py --root DIR checker
    python benchmarks/import_cycles.py --allow checker.rules.a:checker.rules.b

Prints the cycles ("none" if there are none) and exits 1 if any cycle is not --allow'ed
(tests/test_import_cycles.py runs it).  The usual cure: move what both files need into a
third module that imports neither (e.g. checker/rules/forward_model.py).
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("checker", "generator")


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages."""
    mods = {}
    for package in packages:
        for dirpath, _dirs, files in os.walk(root / package):
            for f in files:
                if f.endswith(".py"):
                    path = Path(dirpath) / f
                    name = ".".join(path.relative_to(root).with_suffix("").parts)
                    if name.endswith(".__init__"):
                        name = name[: -len(".__init__")]
                    mods[name] = path
    return mods


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `mods` it imports (anywhere in the file)."""
    out = {m: set() for m in mods}
    for m, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        pkg = m if path.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for alias in node.names:
                    for cand in (mod + "." + alias.name, mod):
                        if cand in mods:
                            out[m].add(cand)
                            break
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        out[m].add(alias.name)
    return out


def cycles(root: Path = ROOT, packages=PACKAGES) -> list[tuple[str, str]]:
    """The pairs (a, b), a < b, where a imports b and b imports a (a package and its own
    submodules excluded)."""
    graph = edges(modules(root, packages))

    def nested(a, b):
        return a.startswith(b + ".") or b.startswith(a + ".")

    return sorted((a, b) for a in graph for b in graph[a]
                  if a < b and a in graph.get(b, ()) and not nested(a, b))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("packages", nargs="*", default=list(PACKAGES))
    p.add_argument("--root", type=Path, default=ROOT)
    p.add_argument("--allow", action="append", default=[], metavar="A:B",
                   help="a known cycle not to fail on (repeatable)")
    args = p.parse_args(argv)
    allowed = {tuple(sorted(a.split(":"))) for a in args.allow}
    found = cycles(args.root, args.packages)
    print("\n".join(f"{a} <-> {b}" + (" (allowed)" if (a, b) in allowed else "")
                    for a, b in found) or "none")
    return 1 if any(c not in allowed for c in found) else 0


if __name__ == "__main__":
    sys.exit(main())
