"""Strategy forward-brute-force: every sequence's full forward pass, for any
model family, decided by the checker's rule forward_brute_force.

Mirrors checker/rules/forward.py: the rule takes every weight (and, for RoPE
models, the enclosed cos/sin tables) and evaluates the model on each of the
d_vocab^n_ctx sequences over intervals.  The generator only predicts the count
with a float64 forward pass (generator.model.family_logits_float64) and leaves
near-ties unclaimed.
"""

from __future__ import annotations

import itertools

import numpy as np

from checker.rules import forward

from . import NotApplicable, magnitude

NAME = "forward-brute-force"
MAX_CHECKER_WORK = 40_000_000  # below check-cert's default --max-work
# A logit margin this small (float64 forward) is a near-tie: not claimed.
NEAR_TIE = 1e-9


def predicted_margins(weights) -> tuple[np.ndarray, np.ndarray]:
    """(sequences (N, k), worst margin ℓ_max − max_{o≠max} ℓ_o per sequence) in float64."""
    from ...model import family_logits_float64, family_weights

    fw = family_weights(weights)
    d = fw.dims
    seqs = np.array(list(itertools.product(range(d.d_vocab), repeat=d.n_ctx)))
    logits = family_logits_float64(fw, seqs)
    top = seqs.max(axis=1)
    rows = np.arange(len(seqs))
    best = logits[rows, top]
    logits[rows, top] = -np.inf
    return seqs, best - logits.max(axis=1)


def _checker_count(trace, task=None, semantics="real") -> int:
    """The number of sequences (or, with a task, scored pairs) the rule forward_brute_force
    certifies, run on the trace's recorded inputs (as the checker reads them) with the
    reference back-end, mpmath: on deep models the Arb path's enclosures can be narrower,
    and a claim only Arb proves would be refused by a checker run with mpmath;
    NotApplicable if it cannot run."""
    from mpmath import iv

    from checker.errors import Malformed, Rejected

    d = trace.dims
    mats = {}
    for name in forward.inputs(d):
        value = trace.values[trace.quantity(name)]
        mats[name] = [[iv.mpf((float(a), float(b))) for a, b in zip(lo, hi)]
                      for lo, hi in zip(value.lo, value.hi)]
    try:
        if task is not None:
            return forward.certified_task_count(d, mats, lambda work: None, task, semantics)[0]
        return sum(1 for _ in forward.certified_sequences(d, mats, lambda work: None,
                                                          semantics))
    except (Malformed, Rejected, ArithmeticError) as exc:
        raise NotApplicable(f"the checker's forward pass cannot run on this model: {exc}") \
            from None


def certify(trace, progress=False, task=None, max_work=MAX_CHECKER_WORK, semantics="real"):
    if task is not None and task.name != "max_of_k":
        return certify_task(trace, task, max_work, semantics)
    d = trace.dims
    work = d.d_vocab ** d.n_ctx * forward._sequence_cost(d)
    if d.family.n_layers > 1:  # every position of the path too (charged as computed)
        work = forward.total_work(d)
    if work > MAX_CHECKER_WORK:
        raise NotApplicable(
            f"a full forward pass of all {d.d_vocab}^{d.n_ctx} sequences would need "
            f"~{magnitude(work)} interval operations in the checker; certify shorter "
            "sequences with --n-ctx K")
    seqs, margin = predicted_margins(trace.weights)
    certified = int((margin > NEAR_TIE).sum())
    near_ties = int((np.abs(margin) <= NEAR_TIE).sum())
    if semantics != "real":  # float32: claim exactly what the checker's rule proves
        certified = min(certified, _checker_count(trace, semantics=semantics))
    elif not d.family.is_one_layer_dense:
        # Several layers or a gate: interval widths grow with depth, so a float64 margin
        # says little about what the enclosures prove.  Claim what the checker's own rule
        # proves from the recorded inputs (the same evaluation: the claim is then accepted).
        certified = min(certified, _checker_count(trace))
    line = trace.rule("forward_brute_force", list(forward.inputs(d)), certified)
    return line, certified, {"near_ties": near_ties, "sequences": len(seqs)}


def certify_task(trace, task, max_work=MAX_CHECKER_WORK, semantics="real"):
    """Any task (checker/tasks.py): the float64 margin of every scored pair, the
    generator's own enumeration (generator/tasks/builtin.py); near-ties unclaimed.  A
    dataset's text goes in a dataset line before the rule line."""
    from ...tasks.builtin import domain, margins

    d = trace.dims
    work = task.evaluations() * forward._sequence_cost(d)
    if d.family.n_layers > 1:  # each evaluation may compute every position of its path
        work += task.evaluations() * d.n_ctx * forward.position_cost(d)
    if work > max_work:
        raise NotApplicable(
            f"task {task.name}: {task.evaluations()} forward passes would need "
            f"~{magnitude(work)} interval operations in the checker, over {max_work}; "
            "allow it with gen-cert --checker-max-work N (and check with check-cert "
            "--max-work N), or certify shorter sequences with --n-ctx K")
    params = {f: v for f, v in task.params if f != "dataset"}
    inputs, labels = domain(task.name, d.d_vocab, d.n_ctx, params, task.rows)
    margin = margins(trace.weights, inputs, labels)
    certified = int((margin > NEAR_TIE).sum())
    near_ties = int((np.abs(margin) <= NEAR_TIE).sum())
    if semantics != "real" or not d.family.is_one_layer_dense:  # claim what the checker proves
        certified = min(certified, _checker_count(trace, task, semantics))
    if task.rows is not None:
        trace._append({"kind": "dataset", "text": task_dataset_text(task)})
    line = trace.rule("forward_brute_force", list(forward.inputs(d)), certified)
    return line, certified, {"near_ties": near_ties, "pairs": len(margin),
                             "evaluations": task.evaluations()}


def task_dataset_text(task) -> str:
    return "".join(" ".join(str(t) for t in (*tokens, position, label)) + "\n"
                   for tokens, position, label in task.rows)
