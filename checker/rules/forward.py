"""Rule forward_brute_force: every sequence's full forward pass, over intervals.

Theorem (spec/rules.md §forward_brute_force).  For every model of a family in
spec/theorem.md §1 and every sequence t, the rule computes an interval
enclosure of each logit ℓ_o(t) by evaluating the model's definition (§2)
with outward-rounded interval arithmetic from the exact weights: LayerNorm
with the checker's own rigorous sqrt (elementary.py), softmax with its own exp
(numbers.py), RoPE with the enclosed cos/sin tables ROPE_COS/ROPE_SIN (op lines
checked against elementary.rope_table), ReLU exactly.  A sequence with max m is
certified when the lower end of ℓ_m − ℓ_o is > 0 for every o ≠ m; the rule
proves the number of certified sequences.  Every enclosure contains the true
real value, so a certified sequence is correct (a tie is never certified).

Any task (checker/tasks.py, spec/theorem.md §3): a scored pair (input t, position p) with
label y is certified when ℓ_y − ℓ_o > 0 for every o ≠ y at the last position of the prefix
t[:p+1] (the model is causal: those are the logits at position p of t).  The task walks
its prefixes in lexicographic order and each distinct prefix is evaluated once, however
many pairs it stands for (every completion of it in the domain, and every row of a
dataset with that prefix); the per-(position, token) tables are shared by all.

Cost: (distinct scored prefixes, Task.evaluations: d_vocab^n_ctx for max_of_k) ·
(per-sequence work, `_sequence_cost`) interval operations.
Memory: the per-(position, token) tables of `table_elements`, charged to the memory
limit before they are built; the clock is checked at every table row and every
element of a product (as in op matmul) and every sequence.
"""

from __future__ import annotations

import itertools

from mpmath import iv

from ..errors import Malformed
from . import notes

# The model (inputs, charged work and memory, _Model's forward pass and its interval helpers)
# is forward_model.py, which the parts forward_arb.py and forward_float32.py import as well (no
# import cycle); its names stay reachable here (forward.X) for other rules, the generator and
# the tests.  A monkeypatch must patch forward_model, where the code that uses them lives.
from .forward_model import (  # noqa: F401
    _EXP_COST,
    PIECE_COST,
    ROPE_INPUTS,
    _add,
    _Evaluations,
    _Model,
    _Position,
    _relu,
    _rotate,
    _sequence_cost,
    _vecmat,
    activate,
    exp_interval,
    inputs,
    layer_norm,
    layer_short,
    mlp_cost,
    path_elements,
    position_cost,
    rms_norm,
    table_cost,
    table_elements,
    total_work,
)

# Back-ends (spec/arithmetic.md): mpmath evaluates sequence by sequence (the reference);
# arb evaluates chunks of sequences in bulk (forward_arb.py), with the same theorem.
ARITHMETICS = ("mpmath", "arb")
_ZERO = iv.mpf(0)
ANY_TASK = True  # certifies every task of checker/tasks.py (the decomposition rules: max_of_k)


SEMANTICS = ("real", "float32")  # spec/theorem.md §2 and §2c


def model_class(semantics: str = "real"):
    """The forward pass of `semantics`: real (_Model) or float32 (Float32Model)."""
    if semantics == "float32":
        from .forward_float32 import Float32Model

        return Float32Model
    if semantics != "real":
        raise Malformed(f"rule forward_brute_force: unknown semantics {semantics!r}")
    return _Model


def check(dims, m, hints, charge, jobs=1, arith=None, task=None, semantics="real"):
    if hints is not None:
        raise Malformed("rule forward_brute_force takes no hints")
    v, k = dims.d_vocab, dims.n_ctx
    if semantics != "real":  # float32 (spec/theorem.md §2c): the mpmath path only
        model_class(semantics)
        if arith is not None and arith.name != "mpmath":  # certificate.py passes mpmath
            raise Malformed("rule forward_brute_force: the float32 pass reads mpmath intervals")
        return _check_float32(dims, m, charge, task, semantics, "; float32 semantics")
    if task is None or task.name == "max_of_k":  # every sequence, at its last position
        charge(v ** k * _sequence_cost(dims))  # the same work whatever the back-end
        if arith is not None and arith.name == "arb":
            from . import forward_arb

            certified = forward_arb.certified_count(dims, m, charge, arith)
            gap = ""
        else:
            certified, gap = _count_with_float32_gap(dims, m, charge)
        return certified, (f"{certified} of {v ** k} sequences certified correct (full forward "
                           f"pass){gap}")
    charge(task.evaluations() * _sequence_cost(dims))  # every prefix the walk may evaluate
    if arith is not None and arith.name == "arb":
        from . import forward_arb

        certified, evaluated = forward_arb.certified_task_count(dims, m, charge, arith, task)
    else:
        certified, evaluated = certified_task_count(dims, m, charge, task)
    return certified, (f"{certified} of {task.pairs()} (input, position) pairs of task "
                       f"{task.name} certified correct (full forward pass; {evaluated} "
                       "distinct prefixes evaluated)")


def _check_float32(dims, m, charge, task, semantics, note):
    """check under a semantics other than real, with the mpmath model of that semantics."""
    v, k = dims.d_vocab, dims.n_ctx
    if task is None or task.name == "max_of_k":
        charge(v ** k * _sequence_cost(dims))
        certified = sum(1 for _ in certified_sequences(dims, m, charge, semantics))
        return certified, (f"{certified} of {v ** k} sequences certified correct "
                           f"(full forward pass{note})")
    charge(task.evaluations() * _sequence_cost(dims))
    certified, evaluated = certified_task_count(dims, m, charge, task, semantics)
    return certified, (f"{certified} of {task.pairs()} (input, position) pairs of task "
                       f"{task.name} certified correct (full forward pass; {evaluated} "
                       f"distinct prefixes evaluated{note})")


def _count_with_float32_gap(dims, m, charge) -> tuple[int, str]:
    """The certified count (real semantics, mpmath), and a note for the reader: the
    smallest certified margin (lower end of ℓ_top − ℓ_o) and how much of it a float32
    evaluation may lose at that sequence (the float32 pass of spec/theorem.md §2c on that
    one sequence).  The note decides nothing; its float32 pass charges no work."""
    model = _Model(dims, m, charge)
    count, worst, at = 0, None, None
    for tokens in itertools.product(range(dims.d_vocab), repeat=dims.n_ctx):
        charge(0)
        logits, top = model.logits(tokens), max(tokens)
        if _certified(logits, top):
            count += 1
            margin = min((logits[top] - x).a for o, x in enumerate(logits) if o != top)
            if worst is None or margin < worst:
                worst, at = margin, tokens
    if at is None:
        return count, ""
    del model
    top = max(at)

    def loss(clock):  # the float32 pass of the one sequence (its time limit stands)
        logits = model_class("float32")(dims, m, clock).logits(at)
        lost = worst - min((logits[top] - x).a for o, x in enumerate(logits) if o != top)
        return f"a float32 evaluation may lose {float(lost.b):.2g} of it there"

    loss = notes.attempt(charge, loss, "no float32 bound there", 300)
    return count, (f"; smallest certified margin {float(worst.a):.3g} at {list(at)}, {loss} "
                   "(spec/theorem.md §2c; gen-cert --semantics float32 proves the float32 "
                   "theorem)")


def certified_sequences(dims, m, charge, semantics="real"):
    """Yield every sequence (a tuple of tokens) the enclosures prove correct."""
    model = model_class(semantics)(dims, m, charge)
    for tokens in itertools.product(range(dims.d_vocab), repeat=dims.n_ctx):
        charge(0)  # the time limit: one sequence may cost ~max-elements operations
        if _certified(model.logits(tokens), max(tokens)):
            yield tokens


def certified_pairs(dims, m, charge, task):
    """Yield (prefix, label, pairs) for every scored prefix of `task` whose label the
    enclosures prove correct (Task.queries's order); each distinct prefix is evaluated
    once (the queries of one prefix are consecutive)."""
    model, budget = _Model(dims, m, charge), _Evaluations(task, dims, charge)
    last, logits = None, None
    for prefix, label, pairs in task.queries(lambda: charge(0)):
        if prefix != last:
            budget.spend()
            last, logits = prefix, model.logits(prefix)
        if _certified(logits, label):
            yield prefix, label, pairs


def certified_task_count(dims, m, charge, task, semantics="real") -> tuple[int, int]:
    """(certified pairs, distinct prefixes evaluated) of `task` (mpmath, prefix by prefix,
    as certified_pairs)."""
    model = model_class(semantics)(dims, m, charge)
    budget = _Evaluations(task, dims, charge)
    last, logits, evaluated, total = None, None, 0, 0
    for prefix, label, pairs in task.queries(lambda: charge(0)):
        if prefix != last:
            budget.spend()
            evaluated += 1
            last, logits = prefix, model.logits(prefix)
        if _certified(logits, label):
            total += pairs
    return total, evaluated


def _certified(logits: list, top: int) -> bool:
    """ℓ_top − ℓ_o > 0 for every o ≠ top, for every real in the enclosures."""
    return all((logits[top] - x > _ZERO) is True for o, x in enumerate(logits) if o != top)
