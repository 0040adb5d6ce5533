"""Proof strategies.  Each module has NAME and
`certify(trace, progress) -> (rule line id, claimed count, notes dict)`:
it searches (untrusted) and writes the rule lines the checker will confirm.
A strategy that cannot apply to a model raises NotApplicable with the reason."""


class NotApplicable(Exception):
    """The strategy does not apply to this model (the message says why)."""


def option_fields(text: str, name: str, keys: tuple[str, ...], usage: str) -> dict[str, str]:
    """'NAME' or 'NAME:key=value,...' -> {key: value} (the values as text; each strategy's
    Options.parse types and checks them).  ValueError for another name, a part without '=',
    a key not in `keys` or a key given twice; `usage` says what the options are."""
    head, _, rest = text.partition(":")
    if head != name:
        raise ValueError(f"not a {name} strategy name: {text!r}")
    fields: dict[str, str] = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or key not in keys or key in fields:
            raise ValueError(f"bad option {part!r} in {text!r} (options: {usage})")
        fields[key] = value
    return fields


def magnitude(n: int) -> str:
    """An integer of any size as text for a message (float() overflows past 1e308)."""
    return f"{n:.1e}" if n < 10**300 else f"10^{len(str(n)) - 1}"


from . import (  # noqa: E402
    brute_force,
    cubic,
    cubic_mix,
    exact,
    family_gap,
    forward_brute_force,
    subcubic,
)

STRATEGIES = {brute_force.NAME: brute_force, cubic.NAME: cubic, cubic_mix.NAME: cubic_mix,
              exact.NAME: exact,
              family_gap.NAME: family_gap,
              forward_brute_force.NAME: forward_brute_force, subcubic.NAME: subcubic}


def resolve(name: str):
    """'cubic' or 'subcubic:direct=...,near=...' -> (module, keyword arguments
    for its certify()); ValueError for an unknown name or bad options."""
    base = name.partition(":")[0]
    if base not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(sorted(STRATEGIES))}")
    module = STRATEGIES[base]
    if hasattr(module, "Options"):
        return module, {"options": module.Options.parse(name)}
    if base != name:
        raise ValueError(f"strategy {base} takes no options")
    return module, {}


def listing(name: str) -> list[str]:
    """The named option combinations of a strategy (`gen-cert --list`)."""
    module, _ = resolve(name)
    return [o.name() for o in module.grid()] if hasattr(module, "grid") else [module.NAME]
