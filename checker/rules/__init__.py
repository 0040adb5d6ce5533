"""Proof rules (spec/rules.md).  Each module has INPUTS, the canonical model
quantities it reads, and check(dims, matrices, hints, charge) -> (proven, note),
where `proven` is a number of sequences the rule proves correct."""

from . import brute_force, cubic, subcubic_gap

RULES = {
    "brute_force": brute_force,
    "cubic": cubic,
    "subcubic_gap": subcubic_gap,
}
