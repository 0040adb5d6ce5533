"""train-induction: an induction task that needs two layers, trained on a
TransformerLens-layout model of any depth, and its held-out test set as a
dataset file (spec/format.md §dataset) for `gen-cert --dataset`.

The task (the standard induction-head task, Olsson et al. 2022): a sequence
t_0 … t_{n−1} whose last token A occurred exactly once before, at position j
(0 ≤ j ≤ n − 3); the answer is the token that followed it, t_{j+1}.  A model
must find the earlier A (a key that depends on the token) and read the token
*after* it — information that reaches position j+1's residual stream only
through a previous-token head in an earlier layer.  So one attention layer
cannot solve it in general; two can (previous-token head + induction head).

The checker knows nothing of induction: the theorem is the dataset theorem
(spec/theorem.md §3a, task `dataset`) on the rows written here, each scored at
the last position with the label t_{j+1}.

    python -m generator.tasks.induction --n-layers 2 --out ind2.pt --dataset-out test.txt
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from checker.modelspec import Dims, Family

from ..model import FamilyTransformer
from .dataset import dataset_text

D_VOCAB, N_CTX, D_MODEL, N_HEADS = 16, 8, 32, 2


def induction_batch(rng: np.random.Generator, count: int, d_vocab: int = D_VOCAB,
                    n_ctx: int = N_CTX) -> tuple[np.ndarray, np.ndarray]:
    """count random induction sequences (count, n_ctx) and their answers (count,).

    Postcondition: the last token A occurs exactly once among t_0 … t_{n−2}, at j ≤ n − 3,
    and the answer is t_{j+1} (≠ A).  Needs d_vocab ≥ 2, n_ctx ≥ 3."""
    if d_vocab < 2 or n_ctx < 3:
        raise ValueError("induction needs d_vocab >= 2 and n_ctx >= 3")
    a = rng.integers(0, d_vocab, count)
    # the other tokens: uniform over the d_vocab − 1 tokens other than A
    other = rng.integers(0, d_vocab - 1, (count, n_ctx))
    tokens = other + (other >= a[:, None])
    j = rng.integers(0, n_ctx - 2, count)
    rows = np.arange(count)
    tokens[rows, j] = a
    tokens[:, -1] = a
    return tokens, tokens[rows, j + 1]


def check_batch(tokens: np.ndarray, answers: np.ndarray) -> None:
    """Assert the postcondition of induction_batch, row by row (an independent reading)."""
    for t, y in zip(tokens.tolist(), answers.tolist()):
        earlier = [i for i in range(len(t) - 1) if t[i] == t[-1]]
        assert len(earlier) == 1 and earlier[0] <= len(t) - 3, t
        assert t[earlier[0] + 1] == y, (t, y)


def dims_for(n_layers: int, d_vocab: int = D_VOCAB, n_ctx: int = N_CTX,
             d_model: int = D_MODEL, n_heads: int = N_HEADS) -> Dims:
    """An attention-only model with learned positions, n_layers layers."""
    return Dims(d_vocab, n_ctx, d_model, d_model // n_heads,
                Family(n_heads=n_heads, n_layers=n_layers))


def accuracy(model: FamilyTransformer, tokens: np.ndarray, answers: np.ndarray) -> float:
    """The float32 model's top-1 accuracy (strict argmax) on the given rows."""
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens))
    right = logits.gather(1, torch.from_numpy(answers)[:, None])[:, 0]
    other = logits.scatter(1, torch.from_numpy(answers)[:, None], float("-inf")).max(1).values
    return float((right > other).float().mean())


def train(dims: Dims, steps: int = 4000, batch: int = 256, lr: float = 1e-3,
          weight_decay: float = 0.01, seed: int = 0, log=None):
    """AdamW with cross-entropy at the last position on fresh random batches; one
    thread, one seed (deterministic on one machine).  Returns (model, stats)."""
    torch.set_num_threads(1)
    started = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = FamilyTransformer(dims, generator=gen)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                            weight_decay=weight_decay)
    val_tokens, val_answers = induction_batch(np.random.default_rng(seed + 10_000), 4096,
                                              dims.d_vocab, dims.n_ctx)
    stats = {}
    for step in range(1, steps + 1):
        tokens, answers = induction_batch(rng, batch, dims.d_vocab, dims.n_ctx)
        loss = F.cross_entropy(model(torch.from_numpy(tokens)), torch.from_numpy(answers))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 500 == 0 or step == steps:
            stats = {"step": step, "loss": round(loss.item(), 5),
                     "val_accuracy": accuracy(model, val_tokens, val_answers),
                     "seconds": round(time.perf_counter() - started, 1)}
            if log:
                print(json.dumps(stats), file=log, flush=True)
    model.eval()
    return model, stats


def main(argv=None) -> int:
    from ..modelfile import save_model

    ap = argparse.ArgumentParser(prog="train-induction", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the model file to write (.pt)")
    ap.add_argument("--dataset-out", help="also write a held-out test set (dataset file)")
    ap.add_argument("--test-inputs", type=int, default=2000)
    ap.add_argument("--n-layers", type=int, default=2)
    ap.add_argument("--d-vocab", type=int, default=D_VOCAB)
    ap.add_argument("--n-ctx", type=int, default=N_CTX)
    ap.add_argument("--d-model", type=int, default=D_MODEL)
    ap.add_argument("--heads", type=int, default=N_HEADS)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    dims = dims_for(args.n_layers, args.d_vocab, args.n_ctx, args.d_model, args.heads)
    model, stats = train(dims, args.steps, args.batch, args.lr, seed=args.seed, log=sys.stderr)
    # the test set: a seed no training or validation batch used
    tokens, answers = induction_batch(np.random.default_rng(args.seed + 20_000),
                                      args.test_inputs, dims.d_vocab, dims.n_ctx)
    stats["test_accuracy"] = accuracy(model, tokens, answers)
    meta = {"task": "induction", "train_config": {k: v for k, v in vars(args).items()
                                                  if k not in ("out", "dataset_out")},
            "train_stats": stats}
    sha = save_model(args.out, model.weights(), meta)
    print(f"saved {args.out} (sha256 {sha}); {json.dumps(stats)}", file=sys.stderr)
    if args.dataset_out:
        labels = np.full(tokens.shape, -1)
        labels[:, -1] = answers
        with open(args.dataset_out, "w", newline="\n") as f:
            f.write(dataset_text(tokens, labels))
        print(f"wrote {args.dataset_out}: {len(tokens)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
