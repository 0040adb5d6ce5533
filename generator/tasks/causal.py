"""Causal forward passes at every position, and variable-length training.

`logits_all_positions` (torch, for training) and `logits_at` (numpy float64,
an independent reference used by tests and benchmarks) compute the model of
spec/theorem.md §2 with the query at any position p: position p attends to
positions 0..p only (causal), with the positional embeddings of those
positions.  Shape letters: n batch, k n_ctx, d d_model, h d_head, v d_vocab.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from checker.modelspec import Dims

from ..model import MaxOfKTransformer, ModelWeights
from ..progress import progress_bar


def logits_all_positions(model: MaxOfKTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """tokens (n, L) with L <= n_ctx -> logits (n, L, v) at every position (causal)."""
    a = model.attn
    L = tokens.shape[1]
    h0 = model.embed.W_E[tokens] + model.pos_embed.W_pos[:L]  # (n, L, d)
    q = h0 @ a.W_Q[0] + a.b_Q[0]  # (n, L, h)
    key = h0 @ a.W_K[0] + a.b_K[0]
    val = h0 @ a.W_V[0] + a.b_V[0]
    scores = torch.einsum("nph,nih->npi", q, key) / math.sqrt(model.dims.d_head)
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    scores = scores.masked_fill(~causal, float("-inf"))
    attn = torch.softmax(scores, dim=-1)  # (n, L, L)
    z = torch.einsum("npi,nih->nph", attn, val)
    resid = h0 + z @ a.W_O[0] + a.b_O  # (n, L, d)
    return resid @ model.unembed.W_U + model.unembed.b_U  # (n, L, v)


def logits_at(weights: ModelWeights, tokens: np.ndarray) -> np.ndarray:
    """Independent float64 forward: tokens (n, L), 1 <= L <= n_ctx -> the logits
    (n, v) of the last position p = L − 1, straight from spec/theorem.md §2 with
    the softmax over positions 0..p (no circuit tables)."""
    tokens = np.asarray(tokens)
    n, L = tokens.shape
    if not 1 <= L <= weights.dims.n_ctx:
        raise ValueError(f"length {L} outside 1..{weights.dims.n_ctx}")
    w = {name: getattr(weights, name).astype(np.float64) for name in ModelWeights.names()}
    h0 = w["W_E"][tokens] + w["W_pos"][:L]  # (n, L, d)
    q = h0[:, -1] @ w["W_Q"] + w["b_Q"]  # (n, h)
    key = h0 @ w["W_K"] + w["b_K"]  # (n, L, h)
    val = h0 @ w["W_V"] + w["b_V"]
    scores = np.einsum("nh,nih->ni", q, key) / math.sqrt(weights.dims.d_head)
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    attn = e / e.sum(axis=1, keepdims=True)
    z = np.einsum("ni,nih->nh", attn, val)
    resid = h0[:, -1] + z @ w["W_O"] + w["b_O"]
    return resid @ w["W_U"] + w["b_U"]


@dataclass(frozen=True)
class TaskTrainConfig:
    """AdamW on fresh batches, cross-entropy at the positions a task marks."""

    d_vocab: int
    n_ctx: int
    d_model: int
    d_head: int
    seed: int = 0
    steps: int = 3000
    batch: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.01

    @property
    def dims(self) -> Dims:
        return Dims(self.d_vocab, self.n_ctx, self.d_model, self.d_head)

    def to_json(self) -> dict:
        return asdict(self)


# A batch maker: (generator, config) -> (tokens (n, k), targets (n, k), with −100
# at positions that carry no loss).
BatchFn = Callable[[torch.Generator, TaskTrainConfig], tuple[torch.Tensor, torch.Tensor]]


@contextlib.contextmanager
def _single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def fit(cfg: TaskTrainConfig, make_model, logits_fn, batch_fn: BatchFn, progress: bool = True):
    """AdamW with cross-entropy at the positions the task marks (target −100 elsewhere):
    make_model(generator) builds the model from the one seeded generator, which then
    draws every batch; one thread.  Deterministic for a config on one machine/torch
    build.  Returns (model, mean loss of the last 100 steps, seconds)."""
    started = time.perf_counter()
    with _single_thread():
        gen = torch.Generator().manual_seed(cfg.seed)
        model = make_model(gen)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        losses = []
        for _ in progress_bar(range(cfg.steps), "training", enabled=progress):
            tokens, targets = batch_fn(gen, cfg)
            logits = logits_fn(model, tokens)
            loss = F.cross_entropy(logits.reshape(-1, cfg.d_vocab), targets.reshape(-1),
                                   ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        model.eval()
    tail = losses[-100:]
    return model, sum(tail) / len(tail), round(time.perf_counter() - started, 2)


def train_task(cfg: TaskTrainConfig, batch_fn: BatchFn, progress: bool = True):
    """Train a model of the checker's class on a task; returns (model, stats)."""
    model, loss, seconds = fit(cfg, lambda gen: MaxOfKTransformer(cfg.dims, generator=gen),
                               logits_all_positions, batch_fn, progress)
    return model, {"final_loss": loss, "train_seconds": seconds}
