"""Max-of-K trained at every position (the max of each prefix), so that the
model is meaningful for a query at any position — what an overwhelm theorem
with free strings of several lengths needs.  The overwhelm demo: a prefix
holding the largest token m forces the output m whatever the free tokens in
{0..m} are.

    python -m generator.tasks.maxk --out generator/models/maxany_v64_k10_seed0.pt
"""

from __future__ import annotations

import argparse
import sys

import torch

from .causal import TaskTrainConfig, train_task

DEFAULT = TaskTrainConfig(d_vocab=64, n_ctx=10, d_model=32, d_head=32, seed=0, steps=4000)


def prefix_max_batch(gen: torch.Generator, cfg: TaskTrainConfig):
    """Uniform sequences; the target at position p is max(tokens[0..p])
    (position 0 included: a length-1 sequence outputs its only token)."""
    tokens = torch.randint(0, cfg.d_vocab, (cfg.batch, cfg.n_ctx), generator=gen)
    return tokens, torch.cummax(tokens, dim=1).values


def main(argv=None) -> int:
    from ..modelfile import save_model

    p = argparse.ArgumentParser(prog="train-max-any", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=DEFAULT.seed)
    p.add_argument("--steps", type=int, default=DEFAULT.steps)
    p.add_argument("--d-vocab", type=int, default=DEFAULT.d_vocab)
    p.add_argument("--n-ctx", type=int, default=DEFAULT.n_ctx)
    p.add_argument("--d-model", type=int, default=DEFAULT.d_model)
    args = p.parse_args(argv)
    cfg = TaskTrainConfig(d_vocab=args.d_vocab, n_ctx=args.n_ctx, d_model=args.d_model,
                          d_head=args.d_model, seed=args.seed, steps=args.steps)
    model, stats = train_task(cfg, prefix_max_batch)
    sha = save_model(args.out, model.weights(), {"task": "max_of_prefix", "train_config":
                                                   cfg.to_json(),
                                                   "final_loss": stats["final_loss"]})
    print(f"saved {args.out} (sha256 {sha}); {stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
