"""Strict getters of config fields, shared by the bindings tl_config.py and hf.py.  Trusted.

JSON and Python are loose: true == 1 (bool is a subclass of int), 2.0 == 2, int("8") == 8.
Here an integer has type exactly int (true, 2.0 and "8" are not integers), a real is a finite
int or float (not a bool), a flag is exactly true or false: a loose reading could accept a
config that its library reads otherwise, or refuses, and a certificate would then speak of
another model than the one that is run.
"""

import math
import sys

from .errors import Malformed


def of(*types):
    """A predicate: the type is exactly one of `types` (a bool is not an int), a float finite."""
    return lambda v: type(v) in types and (type(v) is not float or math.isfinite(v))


def is_real(value) -> bool:
    """An int or float within binary64's finite range (NaN and ±inf fail the comparison;
    an int beyond it, e.g. 10**400, is refused here rather than overflowing later)."""
    return type(value) in (int, float) and -sys.float_info.max <= value <= sys.float_info.max


def shown(value) -> str:
    """A value's repr for a refusal, cut to 60 characters."""
    return f"{value!r:.60}"


class Fields:
    """The strict getters of one config format: each returns cfg[name] (a missing field
    takes `default`) or raises Malformed("unsupported WHAT: NAME = VALUE is not ...")."""

    def __init__(self, what: str):
        self.what = what

    def refuse(self, message: str):
        raise Malformed(f"unsupported {self.what}: {message}")

    def get(self, cfg: dict, name: str, default, ok, text: str):
        value = cfg.get(name, default)
        if not ok(value):
            self.refuse(f"{name} = {shown(value)} is not {text}")
        return value

    def integer(self, cfg: dict, name: str, default=None, *, optional: bool = False):
        """An int (not true, not 2.0, not "8"); or None, if `optional`."""
        return self.get(cfg, name, default, of(int, type(None)) if optional else of(int),
                        "an integer")

    def real(self, cfg: dict, name: str, default):
        return self.get(cfg, name, default, is_real, "a finite number")

    def flag(self, cfg: dict, name: str, default: bool) -> bool:
        return self.get(cfg, name, default, of(bool), "true or false")
