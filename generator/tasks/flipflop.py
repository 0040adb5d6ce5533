"""The flip-flop language (Liu et al., "Exposing Attention Glitches with
Flip-Flop Language Modeling"; sandboxes thesis ch. on flip-flop) as a task for a
one-layer attention-only model, and its overwhelm demo.

Instructions carry their bit in one token, so that one attention layer suffices:

    token 0 = W0 (write 0)   1 = W1 (write 1)   2 = I0, 3 = I1 (ignore, with a bit)
    token 4 = R  (read)

A sequence starts with a write; at every R the correct output is the bit of the
most recent write, emitted as token id 0 or 1.  The overwhelm demo: a prefix
ending in "W b" followed by any ignore filler (free tokens over {I0, I1}) and
the query R must output b — for every filler of length <= n.

    python -m generator.tasks.flipflop --out generator/models/flipflop_k64_seed0.pt
"""

from __future__ import annotations

import argparse
import sys

import torch

from .causal import TaskTrainConfig, train_task

W0, W1, I0, I1, R = range(5)
IGNORE_TOKENS = (I0, I1)
NAMES = ("W0", "W1", "I0", "I1", "R")
P_WRITE, P_READ = 0.1, 0.2  # the rest are ignores (Liu et al. use p_w = p_r = 0.1)

DEFAULT = TaskTrainConfig(d_vocab=5, n_ctx=64, d_model=16, d_head=16, seed=0, steps=3000,
                          batch=64)


def flipflop_batch(gen: torch.Generator, cfg: TaskTrainConfig):
    """Random flip-flop strings of length n_ctx: (tokens, targets) with the
    written bit as target at every R and −100 elsewhere."""
    n, k = cfg.batch, cfg.n_ctx
    kind = torch.rand((n, k), generator=gen)
    bits = torch.randint(0, 2, (n, k), generator=gen)
    tokens = torch.where(kind < P_WRITE, bits, torch.where(kind < P_WRITE + P_READ, R, I0 + bits))
    tokens[:, 0] = bits[:, 0]  # always start with a write
    last = torch.zeros(n, dtype=torch.long)
    targets = torch.full((n, k), -100, dtype=torch.long)
    for i in range(k):
        is_write = tokens[:, i] <= W1
        last = torch.where(is_write, tokens[:, i], last)
        targets[:, i] = torch.where(tokens[:, i] == R, last, torch.tensor(-100))
    return tokens, targets


def reference_output(tokens) -> int:
    """The flip-flop answer at the end of `tokens`: the last written bit."""
    written = [t for t in tokens if t in (W0, W1)]
    return written[-1]


def main(argv=None) -> int:
    from ..modelfile import save_model

    p = argparse.ArgumentParser(prog="train-flipflop", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=DEFAULT.seed)
    p.add_argument("--steps", type=int, default=DEFAULT.steps)
    p.add_argument("--n-ctx", type=int, default=DEFAULT.n_ctx)
    p.add_argument("--d-model", type=int, default=DEFAULT.d_model)
    args = p.parse_args(argv)
    cfg = TaskTrainConfig(d_vocab=5, n_ctx=args.n_ctx, d_model=args.d_model,
                          d_head=args.d_model, seed=args.seed, steps=args.steps,
                          batch=DEFAULT.batch)
    model, stats = train_task(cfg, flipflop_batch)
    sha = save_model(args.out, model.weights(), {"task": "flipflop", "train_config":
                                                   cfg.to_json(),
                                                   "final_loss": stats["final_loss"]})
    print(f"saved {args.out} (sha256 {sha}); {stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
