"""Proof rules (spec/rules.md).  Each module has INPUTS, the canonical model
quantities it reads, and check(dims, matrices, hints, charge) -> (proven, note),
where `proven` is a number of sequences the rule proves correct.  A rule whose
inputs depend on the model family has inputs(dims) instead of INPUTS."""

from . import brute_force, cubic, forward

RULES = {
    "brute_force": brute_force,
    "cubic": cubic,
    "forward_brute_force": forward,
}
