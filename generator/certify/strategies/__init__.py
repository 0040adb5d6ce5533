"""Proof strategies.  Each module has NAME and
`certify(trace, progress) -> (rule line id, claimed count, notes dict)`:
it searches (untrusted) and writes the rule lines the checker will confirm.
A strategy that cannot apply to a model raises NotApplicable with the reason."""


class NotApplicable(Exception):
    """The strategy does not apply to this model (the message says why)."""


from . import brute_force, cubic, forward_brute_force  # noqa: E402  (they use NotApplicable)

STRATEGIES = {brute_force.NAME: brute_force, cubic.NAME: cubic,
              forward_brute_force.NAME: forward_brute_force}
