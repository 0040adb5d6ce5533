"""The reference implementation's `mean_query+diff` attention correction is
unsound (spec/rules.md §subcubic_gap): a concrete model and sequence on which
its claimed bound is false, by exact forward passes; and the same formula with
the other extreme for queries below the average attention is sound there.

The reference formula is re-implemented in tests/reference_mean_query_diff.py
(not in checker/: the checker never uses it)."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from reference_mean_query_diff import (
    crafted_weights,
    forward_logits,
    reference_bound,
    sequence_class,
)

from generator.model import MaxOfKTransformer, logits_float64

COUNTEREXAMPLE = (2, 0)  # token 2 (the max), then the query 0


def exact_margin(w, tokens) -> float:
    """max_{o≠m} ℓ_o − ℓ_m by three independent float64 forward passes (which agree)."""
    m = max(tokens)
    passes = [forward_logits(w, tokens), logits_float64(w, np.array([tokens]))[0]]
    with torch.no_grad():
        model = MaxOfKTransformer.from_weights(w).double()
        passes.append(model(torch.tensor([tokens])).numpy()[0])  # (v,) at the last position
    for logits in passes[1:]:
        assert np.allclose(logits, passes[0], atol=1e-9)
    return max(passes[0][o] - passes[0][m] for o in range(w.dims.d_vocab) if o != m)


def test_the_reference_bound_is_violated_by_an_exact_forward_pass():
    w = crafted_weights()
    q, m, c = sequence_class(COUNTEREXAMPLE)
    claimed = reference_bound(w)[q, m, c]
    actual = exact_margin(w, COUNTEREXAMPLE)
    # the reference claims every wrong logit is below the max's by 0.1 (so it counts the
    # class correct); in fact output 0 beats the max token 2 by 3.0: the model is wrong
    assert claimed < -0.09
    assert actual > 2.9
    assert actual > claimed


def test_the_violation_is_the_query_below_the_average():
    """Query 0 attends 0.10 to the max, the average over queries is 0.60: the step
    (a_q − ā)·R[o] <= (a_q − ā)·max_o R[o] is false for a_q < ā.  With the other
    extreme there, the bound holds for every sequence of the model."""
    w = crafted_weights()
    v, k = w.dims.d_vocab, w.dims.n_ctx
    fixed, reference = reference_bound(w, fixed=True), reference_bound(w)
    violated = []
    for tokens in itertools.product(range(v), repeat=k):
        q, m, c = sequence_class(tokens)
        actual = exact_margin(w, tokens)
        assert fixed[q, m, c] >= actual - 1e-9, tokens
        if reference[q, m, c] < actual - 1e-9:
            violated.append(tokens)
    assert violated == [COUNTEREXAMPLE]
    assert fixed[0, 2, 1] > 0  # not counted correct any more
