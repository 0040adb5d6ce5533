"""The generator's twin of checker/tasks.py, in numpy: every task's domain and labels
(for training, exact accuracy and gen-cert's prediction), written independently of the
checker's prefix walk (spec/theorem.md §3).

`domain(task)` -> (inputs (N, n_ctx) int64, labels (N, n_ctx) int64 with -1 at unscored
positions).  A dataset task's "inputs" are its rows (padded with 0 after the row's tokens,
which a causal model never reads at the scored position).

`prefix_logits_float64(weights, tokens)` is the float64 forward pass of any family at the
last position of (n, L) tokens, L <= n_ctx (generator.model.family_logits_float64 on the
first L positions: the model is causal).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from checker.modelspec import Dims

from . import flipflop

TASKS = ("max_of_k", "min_of_k", "sort", "modular_addition", "modular_multiplication",
         "parity", "cyclic", "flipflop", "dataset")


def all_inputs(widths_or_alphabets) -> np.ndarray:
    return np.array(list(itertools.product(*widths_or_alphabets)), dtype=np.int64)


def domain(name: str, d_vocab: int, n_ctx: int, params: dict | None = None,
           dataset_rows=None) -> tuple[np.ndarray, np.ndarray]:
    params, v, k = params or {}, d_vocab, n_ctx
    if name == "dataset":
        rows = list(dataset_rows)
        inputs = np.zeros((len(rows), k), dtype=np.int64)
        labels = np.full((len(rows), k), -1, dtype=np.int64)
        for r, (tokens, position, label) in enumerate(rows):
            inputs[r, :len(tokens)] = tokens
            labels[r, position] = label
        return inputs, labels
    if name in ("max_of_k", "min_of_k", "parity", "cyclic"):
        x = all_inputs([range(v)] * k)
        labels = np.full(x.shape, -1, dtype=np.int64)
        if name == "max_of_k":
            labels[:, -1] = x.max(axis=1)
        elif name == "min_of_k":
            labels[:, -1] = x.min(axis=1)
        else:
            labels[:] = np.cumsum(x, axis=1) % (2 if name == "parity" else params["n"])
        return x, labels
    if name == "sort":
        h, sep = k // 2, v - 1
        x = all_inputs([range(v - 1)] * h)
        s = np.sort(x, axis=1)
        inputs = np.concatenate([x, np.full((len(x), 1), sep), s[:, :h - 1]], axis=1)
        labels = np.full(inputs.shape, -1, dtype=np.int64)
        labels[:, h:] = s
        return inputs, labels
    if name in ("modular_addition", "modular_multiplication"):
        p = params["p"]
        ab = all_inputs([range(p)] * 2)
        inputs = np.concatenate([ab, np.full((len(ab), 1), p)], axis=1)
        labels = np.full(inputs.shape, -1, dtype=np.int64)
        op = np.add if name == "modular_addition" else np.multiply
        labels[:, 2] = op(ab[:, 0], ab[:, 1]) % p
        return inputs, labels
    if name == "flipflop":
        inputs = all_inputs([range(2)] + [range(5)] * (k - 1))
        labels = np.full(inputs.shape, -1, dtype=np.int64)
        last = inputs[:, 0].copy()
        for i in range(1, k):
            is_write = inputs[:, i] <= flipflop.W1
            last = np.where(is_write, inputs[:, i], last)
            labels[:, i] = np.where(inputs[:, i] == flipflop.R, last, -1)
        return inputs, labels
    raise ValueError(f"unknown task {name!r}; known: {', '.join(TASKS)}")


def truncated(weights, length: int):
    """The same model read on sequences of `length` <= n_ctx (W_pos's first rows)."""
    from ..model import FamilyWeights, family_weights

    fw = family_weights(weights)
    d = fw.dims
    if length == d.n_ctx:
        return fw
    family = d.family
    if family.positional == "rotary":
        family = dataclasses.replace(family, n_ctx=length)
    dims = Dims(d.d_vocab, length, d.d_model, d.d_head, family)
    params = dict(fw.params)
    if "pos_embed.W_pos" in params:
        params["pos_embed.W_pos"] = params["pos_embed.W_pos"][:length]
    return FamilyWeights(dims=dims, params=params)


def prefix_logits_float64(weights, tokens: np.ndarray) -> np.ndarray:
    """(n, L) tokens -> (n, v) float64 logits at position L − 1."""
    from ..model import family_logits_float64

    tokens = np.asarray(tokens)
    return family_logits_float64(truncated(weights, tokens.shape[1]), tokens)


def margins(weights, inputs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """float64 margins ℓ_label − max_{o≠label} ℓ_o of every scored pair, in the order of
    np.nonzero(labels >= 0) (row-major: input by input, position by position)."""
    rows, cols = np.nonzero(labels >= 0)
    out = np.empty(len(rows))
    for p in np.unique(cols):
        sel = np.nonzero(cols == p)[0]
        prefixes = inputs[rows[sel], :p + 1]
        uniq, inverse = np.unique(prefixes, axis=0, return_inverse=True)
        logits = prefix_logits_float64(weights, uniq)[inverse.reshape(-1)]
        lab = labels[rows[sel], p]
        idx = np.arange(len(sel))
        best = logits[idx, lab].copy()
        logits[idx, lab] = -np.inf
        out[sel] = best - logits.max(axis=1)
    return out
