"""Proof strategies.  Each module has NAME and
`certify(trace, progress) -> (rule line id, claimed count, notes dict)`:
it searches (untrusted) and writes the rule lines the checker will confirm."""

from . import brute_force, cubic

STRATEGIES = {brute_force.NAME: brute_force, cubic.NAME: cubic}
