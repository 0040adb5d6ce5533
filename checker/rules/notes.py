"""The rules' "distance to float32" notes (spec/rules.md §distance to float32): a note
reports, it never decides.  `attempt` runs a note's computation so that it can neither
fail a check nor charge work, nor spend the check's time: a note may use at most half of
the time the check has left (--max-seconds), and is skipped beyond it; the time limit itself
stands."""

from __future__ import annotations

import time

NOTE_SHARE = 0.5  # the share of the check's remaining time a note may use


class _OutOfTime(Exception):
    """A note's own deadline passed (raised by its clock, caught by `attempt`)."""


def attempt(charge, compute, failed: str, limit: int = 200, detail: bool = True) -> str:
    """compute(clock) -> the note's text, clock(work) the rule's clock alone (charge(0)
    whatever `work`: no work is charged).  If compute raises, the text is `failed` naming
    the exception (detail: with its message; cut to `limit` characters), after one more look
    at the clock: when the time limit ran out (wherever compute looked at it: clock or the
    rule's own tables), that look raises again, and the limit stands.

    The note's deadline: when `charge` is the checker's RuleBudget (it has the checker's
    start time and limits), clock also raises once NOTE_SHARE of the time the check had left
    when the note started has passed; the text is then `failed` followed by "(skipped: …)"
    and the check goes on with the rest of its time (a verdict never waits on a note).  An
    attempt nested in another's compute (given that clock as its charge) passes the outer
    note's deadline on (its skipped() looks at the outer clock): the whole outer note is
    skipped."""
    deadline = _deadline(charge)

    def clock(work=0):
        if deadline is not None and time.monotonic() > deadline:
            raise _OutOfTime("the note's share of the time limit ran out")
        charge(0)

    def skipped():
        charge(0)  # the time limit stands (nested: the outer note's clock, which raises)
        return (f"{failed} (skipped: it would use more than {NOTE_SHARE:g} of the check's "
                "remaining time, --max-seconds)")[:limit]

    try:
        return compute(clock)
    except _OutOfTime:
        return skipped()
    except Exception as err:  # noqa: BLE001 -- the note decides nothing: name the failure
        why = f"{type(err).__name__}: {err}" if detail else type(err).__name__
    try:
        clock()  # the time limit stands (and the note's deadline, or an outer note's)
    except _OutOfTime:
        return skipped()
    return f"{failed} ({why})"[:limit]


def _deadline(charge) -> float | None:
    """time.monotonic() at which the note's share of the check's remaining time ends, from
    the RuleBudget the checker gives a rule (its checker's start and --max-seconds); None
    for any other charge (a test calling a rule directly, a rule's wrapper): no deadline."""
    checker = getattr(charge, "checker", None)
    limits, started = getattr(checker, "limits", None), getattr(checker, "started", None)
    if limits is None or started is None:
        return None
    now = time.monotonic()
    return now + NOTE_SHARE * (limits.max_seconds - (now - started))
