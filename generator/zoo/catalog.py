"""Which strategies the zoo runs, and which paper Table 1 row each one is.

Every strategy registered in generator.certify.strategies.STRATEGIES is run;
nothing here lists them.  A strategy module may declare

  VARIANTS    an iterable of the full names gen-cert accepts for its
              parametrised variants (e.g. "subcubic:<options>"); the zoo runs
              each variant instead of the bare name;
  PAPER_ROWS  a mapping from its (full) names to the paper's Table 1 row
              labels (generator.zoo.paper.TABLE1), or PAPER_ROW, one label for
              the bare name.

Without either, brute-force and cubic map to the paper's rows of the same
name; any other strategy is reported as "not in the paper's table".
"""

from __future__ import annotations

from collections.abc import Iterable

from .paper import TABLE1

# The two strategies that predate the protocol above.
BUILTIN_ROWS = {"brute-force": "Brute force", "cubic": "Cubic"}


def _registry() -> dict:
    from generator.certify.strategies import STRATEGIES

    return STRATEGIES


def strategy_names(registry: dict | None = None) -> list[str]:
    """Every strategy (and variant) name gen-cert accepts, in registry order."""
    names: list[str] = []
    for name, module in (registry if registry is not None else _registry()).items():
        variants = getattr(module, "VARIANTS", None)
        names.extend(_as_names(variants) if variants is not None else [name])
    return names


def _as_names(variants: Iterable) -> list[str]:
    return [v if isinstance(v, str) else str(getattr(v, "name", v)) for v in variants]


def paper_row(strategy: str, registry: dict | None = None) -> str | None:
    """The Table 1 row label `strategy` reproduces, or None."""
    registry = registry if registry is not None else _registry()
    base = strategy.split(":", 1)[0]
    module = registry.get(base)
    rows = getattr(module, "PAPER_ROWS", None)
    if rows and strategy in rows:
        label = rows[strategy]
    elif getattr(module, "PAPER_ROW", None) and strategy == base:
        label = module.PAPER_ROW
    else:
        label = BUILTIN_ROWS.get(strategy)
    if label is not None and label not in {r.label for r in TABLE1}:
        raise ValueError(f"strategy {strategy} names an unknown Table 1 row {label!r}")
    return label
