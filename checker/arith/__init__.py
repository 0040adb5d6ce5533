"""Arithmetic back-ends of the checker (spec/arithmetic.md).

`get(name)` returns the back-end: "mpmath" (the reference and default; only
mpmath) or "arb" (FLINT's ball arithmetic through python-flint, imported only
when asked for).  Both compute rigorous enclosures; they must give the same
verdicts.
"""

from __future__ import annotations

from .base import Arithmetic

NAMES = ("mpmath", "arb")
DEFAULT = "mpmath"


class Unavailable(Exception):
    """The requested back-end cannot be loaded (e.g. python-flint is missing)."""


def __getattr__(attr: str):
    """MPMATH, imported on first use (mpmath's import is not needed by `check-cert --help`)."""
    if attr == "MPMATH":
        from .mp import MPMATH

        return MPMATH
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def get(name: str = DEFAULT) -> Arithmetic:
    """The back-end called `name`; Unavailable if it cannot be loaded."""
    if name == "mpmath":
        from .mp import MPMATH

        return MPMATH
    if name == "arb":
        from .arb import load

        return load()
    raise Unavailable(f"unknown arithmetic {name!r} (choose from {', '.join(NAMES)})")


__all__ = ["Arithmetic", "DEFAULT", "MPMATH", "NAMES", "Unavailable", "get"]
