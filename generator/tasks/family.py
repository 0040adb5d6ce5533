"""Tasks on the model families (LayerNorm, MLP, RoPE, several heads): causal
forward passes at every position and variable-length training, and the Max-of-K
overwhelm demo on a LayerNorm + MLP + RoPE model.

`family_logits_all_positions` (torch, for training) and `family_logits_at`
(numpy float64, an independent reference used by tests and benchmarks) compute
the family model of spec/theorem.md §2b with the query at any position p: the
sequence is tokens[0..p], position p attends to 0..p (causal), standard
positions use W_pos[0..p], rotary ones rotate position i by the angles i·θ_j.
Shape letters: n batch, L length, j head, d d_model, h d_head, v d_vocab.

    python -m generator.tasks.family --out generator/models/maxany_v16_k16_ln_mlp_rope_seed0.pt
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np
import torch

from checker.modelspec import Dims, Family

from ..model import (
    FamilyTransformer,
    FamilyWeights,
    _rotate_np,
    activation_np,
    activation_torch,
    norm_np,
    rope_angles,
)
from .causal import fit
from .maxk import prefix_max_batch

ATT = "blocks.0.attn."
# The shipped demo: Max-of-each-prefix with LayerNorm, 2 heads, a ReLU MLP and RoPE.
DEMO_FAMILY = Family(normalization="LN", n_heads=2, d_mlp=64, positional="rotary", n_ctx=16,
                     rotary_dim=16, rotary_base=10000, ln_eps=1e-5)
DEMO_DIMS = Dims(d_vocab=16, n_ctx=16, d_model=32, d_head=16, family=DEMO_FAMILY)
# A small one for enumeration tests (v^n completions stay small).
SMALL_FAMILY = Family(normalization="LN", n_heads=2, d_mlp=16, positional="rotary", n_ctx=6,
                      rotary_dim=8, rotary_base=10000, ln_eps=1e-5)
SMALL_DIMS = Dims(d_vocab=6, n_ctx=6, d_model=16, d_head=8, family=SMALL_FAMILY)
SMALL_STEPS = 3000
# Flip-flop on a family model (tokens as generator/tasks/flipflop.py).
FLIPFLOP_FAMILY = Family(normalization="LN", n_heads=2, d_mlp=32, positional="rotary", n_ctx=32,
                         rotary_dim=8, rotary_base=10000, ln_eps=1e-5)
FLIPFLOP_DIMS = Dims(d_vocab=5, n_ctx=32, d_model=16, d_head=8, family=FLIPFLOP_FAMILY)
FLIPFLOP_STEPS = 4000
DEMO_STEPS, DEMO_SEED, DEMO_BATCH, DEMO_LR = 6000, 0, 128, 1e-3
# issue 21: a two-layer attention-only Max-of-each-prefix model for the deep overwhelm demo
# (rule overwhelm_family on n_layers >= 2), the same sizes as maxany_v64_k10_seed0.pt.
DEEP_DIMS = Dims(d_vocab=64, n_ctx=10, d_model=32, d_head=32, family=Family(n_layers=2))
DEEP_STEPS = 4000


def family_logits_all_positions(model: FamilyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """tokens (n, L), L <= n_ctx -> logits (n, L, v) at every position (causal)."""
    f, L = model.dims.family, tokens.shape[1]
    x = model.p("embed.W_E")[tokens]  # (n, L, d)
    if f.positional == "standard":
        x = x + model.p("pos_embed.W_pos")[:L]
    a_in = model._norm(x, "blocks.0.ln1")
    q = torch.einsum("nld,jdh->njlh", a_in, model.p(ATT + "W_Q")) + model.p(ATT + "b_Q")[:, None]
    key = torch.einsum("nld,jdh->njlh", a_in, model.p(ATT + "W_K")) \
        + model.p(ATT + "b_K")[:, None]
    val = torch.einsum("nld,jdh->njlh", a_in, model.p(ATT + "W_V")) \
        + model.p(ATT + "b_V")[:, None]
    if f.positional == "rotary":
        q = model._rotate(q, model._cos[:L], model._sin[:L])
        key = model._rotate(key, model._cos[:L], model._sin[:L])
    scores = torch.einsum("njph,njih->njpi", q, key) / math.sqrt(model.dims.d_head)
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    attn = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    z = torch.einsum("njpi,njih->njph", attn, val)
    resid = x + torch.einsum("njph,jhd->npd", z, model.p(ATT + "W_O")) + model.p(ATT + "b_O")
    if f.d_mlp:
        m_in = model._norm(x if f.parallel else resid, "blocks.0.ln2")
        hidden = activation_torch(f.act_fn, m_in @ model.p("blocks.0.mlp.W_in")
                                  + model.p("blocks.0.mlp.b_in"))
        resid = resid + hidden @ model.p("blocks.0.mlp.W_out") + model.p("blocks.0.mlp.b_out")
    return model._norm(resid, "ln_final") @ model.p("unembed.W_U") + model.p("unembed.b_U")


def deep_logits_all_positions(model: FamilyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """tokens (n, L), L <= n_ctx -> logits (n, L, v) at every position, every layer
    (FamilyTransformer.forward's layers, causal, for any n_layers)."""
    f, L = model.dims.family, tokens.shape[1]
    x = model.p("embed.W_E")[tokens]
    if f.positional == "standard":
        x = x + model.p("pos_embed.W_pos")[:L]
    causal = torch.tril(torch.ones(L, L, dtype=torch.bool))
    for layer in range(f.n_layers):
        b = f"blocks.{layer}."
        att = b + "attn."
        a_in = model._norm(x, b + "ln1")
        q, key, val = (torch.einsum("nld,jdh->njlh", a_in, model.p(att + "W_" + c))
                       + model.p(att + "b_" + c)[:, None] for c in "QKV")
        if f.positional == "rotary":
            q = model._rotate(q, model._cos[:L], model._sin[:L])
            key = model._rotate(key, model._cos[:L], model._sin[:L])
        scores = torch.einsum("njqh,njkh->njqk", q, key) / math.sqrt(model.dims.d_head)
        attn = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        z = torch.einsum("njqk,njkh->njqh", attn, val)
        resid = x + torch.einsum("njqh,jhd->nqd", z, model.p(att + "W_O")) + model.p(att + "b_O")
        if f.d_mlp:
            resid = resid + model._mlp(model._norm(x if f.parallel else resid, b + "ln2"),
                                       b + "mlp.")
        x = resid
    return model._norm(x, "ln_final") @ model.p("unembed.W_U") + model.p("unembed.b_U")


def family_logits_at(weights: FamilyWeights, tokens: np.ndarray) -> np.ndarray:
    """Independent float64 forward: tokens (n, L), 1 <= L <= n_ctx -> the logits
    (n, v) at the last position p = L − 1, straight from spec/theorem.md §2b
    (no circuit tables, no interval arithmetic)."""
    dims, f = weights.dims, weights.dims.family
    tokens = np.asarray(tokens)
    n, L = tokens.shape
    if not 1 <= L <= dims.n_ctx:
        raise ValueError(f"length {L} outside 1..{dims.n_ctx}")
    w = {k: a.astype(np.float64) for k, a in weights.params.items()}

    def norm(x, which):
        return norm_np(x, f, w, which)

    x = w["embed.W_E"][tokens]  # (n, L, d)
    if f.positional == "standard":
        x = x + w["pos_embed.W_pos"][:L]
    a_in = norm(x, "blocks.0.ln1")
    q = np.einsum("nd,jdh->njh", a_in[:, -1], w[ATT + "W_Q"]) + w[ATT + "b_Q"]
    key = np.einsum("nld,jdh->njlh", a_in, w[ATT + "W_K"]) + w[ATT + "b_K"][:, None]
    val = np.einsum("nld,jdh->njlh", a_in, w[ATT + "W_V"]) + w[ATT + "b_V"][:, None]
    if f.positional == "rotary":
        angles = rope_angles(dims)[:L]
        cos, sin = np.cos(angles), np.sin(angles)
        q = _rotate_np(q[:, :, None], cos[-1:], sin[-1:], f.rotary_dim)[:, :, 0]
        key = _rotate_np(key, cos, sin, f.rotary_dim)
    scores = np.einsum("njh,njlh->njl", q, key) / math.sqrt(dims.d_head)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    z = np.einsum("njl,njlh->njh", e / e.sum(axis=-1, keepdims=True), val)
    resid = x[:, -1] + np.einsum("njh,jhd->nd", z, w[ATT + "W_O"]) + w[ATT + "b_O"]
    if f.d_mlp:
        m_in = norm(x[:, -1] if f.parallel else resid, "blocks.0.ln2")
        hidden = activation_np(f.act_fn, m_in @ w["blocks.0.mlp.W_in"] + w["blocks.0.mlp.b_in"])
        resid = resid + hidden @ w["blocks.0.mlp.W_out"] + w["blocks.0.mlp.b_out"]
    return norm(resid, "ln_final") @ w["unembed.W_U"] + w["unembed.b_U"]


def train_family_task(dims: Dims, batch_fn, steps: int, seed: int = 0, batch: int = DEMO_BATCH,
                      lr: float = DEMO_LR, progress: bool = True):
    """AdamW (weight decay 0.01) with cross-entropy at the positions the task
    marks, on a FamilyTransformer; deterministic per config on one machine
    (one seeded generator, one thread).  Returns (FamilyWeights, stats)."""
    from .causal import TaskTrainConfig

    cfg = TaskTrainConfig(d_vocab=dims.d_vocab, n_ctx=dims.n_ctx, d_model=dims.d_model,
                          d_head=dims.d_head, seed=seed, steps=steps, batch=batch, lr=lr)
    logits_fn = family_logits_all_positions if dims.family.n_layers == 1 \
        else deep_logits_all_positions
    model, loss, seconds = fit(cfg, lambda gen: FamilyTransformer(dims, generator=gen),
                               logits_fn, batch_fn, progress)
    return model.weights(), {"final_loss": loss, "train_config":
                             {**cfg.to_json(), "family": dims.family.to_json()},
                             "train_seconds": seconds}


def main(argv=None) -> int:
    from ..modelfile import save_model

    p = argparse.ArgumentParser(prog="train-max-any-family", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=DEMO_SEED)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--small", action="store_true", help="the small test model (SMALL_DIMS)")
    p.add_argument("--flipflop", action="store_true", help="the flip-flop task (FLIPFLOP_DIMS)")
    p.add_argument("--deep", action="store_true",
                   help="two layers, attention-only (DEEP_DIMS): the deep overwhelm demo")
    args = p.parse_args(argv)
    if args.flipflop:
        from .flipflop import flipflop_batch

        weights, stats = train_family_task(FLIPFLOP_DIMS, flipflop_batch,
                                           args.steps or FLIPFLOP_STEPS, args.seed, batch=64)
        sha = save_model(args.out, weights, {"task": "flipflop", **stats})
        print(f"saved {args.out} (sha256 {sha}); final loss {stats['final_loss']:.4g}")
        return 0
    dims = SMALL_DIMS if args.small else DEEP_DIMS if args.deep else DEMO_DIMS
    steps = args.steps or (SMALL_STEPS if args.small else DEEP_STEPS if args.deep
                           else DEMO_STEPS)
    weights, stats = train_family_task(dims, prefix_max_batch, steps, args.seed)
    sha = save_model(args.out, weights, {"task": "max_of_prefix", **stats})
    print(f"saved {args.out} (sha256 {sha}); final loss {stats['final_loss']:.4g}, "
          f"{stats['train_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
