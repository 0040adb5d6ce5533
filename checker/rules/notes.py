"""The rules' "distance to float32" notes (spec/rules.md §distance to float32): a note
reports, it never decides.  `attempt` runs a note's computation so that it can neither
fail a check nor charge work; only the time limit stands."""

from __future__ import annotations


def attempt(charge, compute, failed: str, limit: int = 200) -> str:
    """compute(clock) -> the note's text, clock(work) the rule's clock alone (charge(0)
    whatever `work`: no work is charged).  If compute raises, the text is `failed` naming
    the exception (cut to `limit` characters), after one more look at the clock: when the
    time limit ran out (wherever compute looked at it: clock or the rule's own tables), that
    look raises again, and the limit stands."""
    try:
        return compute(lambda work=0: charge(0))
    except Exception as err:  # noqa: BLE001 -- the note decides nothing: name the failure
        charge(0)  # the time limit stands
        return f"{failed} ({type(err).__name__}: {err})"[:limit]
