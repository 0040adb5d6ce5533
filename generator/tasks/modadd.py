"""The grokking modular-addition model (Nanda et al. 2023, "Progress measures for
grokking via mechanistic interpretability"): inputs `a b =` with a, b in [0, p)
and the `=` token p, output (a + b) mod p at the last position.

Recipe (Nanda et al.): 1 layer, 4 heads, d_model 128, d_head 32, d_mlp 512, ReLU,
no LayerNorm, learned positional embeddings, p = 113, a random 30% of the p²
pairs for training, full batch, AdamW lr 1e-3, weight decay 1.0, betas (0.9, 0.98).
Biases are frozen at zero (this repository's family models); the cross-entropy is over all
p + 1 logits (the theorem compares the label with the `=` logit too); a 10-step linear
warm-up.  Training stops once every one of the p² inputs is right with a margin
(`--stop-margin`), or at `--steps`.

The shipped generator/models/modadd_p113_seed0.pt is grokked: 12,769 / 12,769 correct,
smallest margin 1.66 (training stops once every input has margin > --stop-margin 1).  It was
trained in three legs on the shared 2-core machine (0.6-1.4 s per full-batch step under load,
0.08 s idle): steps 1-2,000, then 2,001-7,500 and 7,501-13,300, each resumed from the previous
leg's weights with `--resume` (AdamW's moments and the warm-up restart; the data split is
the same, from the seed).  Test accuracy: 3.1% at step 2,000, 5.4% at 8,000, 18.5% at
11,000, 84.0% at 12,000, 99.0% at 12,500, 100% at 13,300 (the exact commands: `remake` in
generator/models/models.json).  In one run:

    python -m generator.tasks.modadd --out generator/models/modadd_p113_seed0.pt
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

from checker.modelspec import Dims, Family

from ..model import FamilyTransformer


def all_pairs(p: int) -> torch.Tensor:
    a = torch.arange(p).repeat_interleave(p)
    b = torch.arange(p).repeat(p)
    return torch.stack([a, b, torch.full_like(a, p)], dim=1)  # (p², 3), lexicographic


def dims_for(p: int, d_model=128, d_head=32, n_heads=4, d_mlp=512) -> Dims:
    return Dims(p + 1, 3, d_model, d_head,
                Family(n_heads=n_heads, d_mlp=d_mlp, act_fn="relu"))


def train(p=113, frac=0.3, seed=0, steps=40000, lr=1e-3, wd=1.0, stop_margin=1.0,
          log=None, checkpoint=None, threads=1, resume=None, every=1000):
    """Full-batch AdamW; returns (model, stats)."""
    torch.set_num_threads(threads)
    started = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    dims = dims_for(p)
    model = FamilyTransformer(dims, generator=gen)
    first = 1
    if resume is not None:  # the weights of a checkpoint; AdamW's moments start afresh
        import torch as _torch

        saved = _torch.load(resume, weights_only=True)
        model.load_state_dict(saved["model"])
        first = saved["train_metrics"]["train_stats"]["step"] + 1
    data = all_pairs(p)
    labels = (data[:, 0] + data[:, 1]) % p
    perm = torch.randperm(p * p, generator=gen)
    n_train = int(frac * p * p)
    tr, te = perm[:n_train], perm[n_train:]
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(s / 10, 1.0))
    stats = {}
    for step in range(first, steps + 1):
        logits = model(data[tr])  # all p + 1 logits: the theorem compares the `=` logit too
        loss = F.cross_entropy(logits.float(), labels[tr])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps:
            with torch.no_grad():
                full = model(data)  # all p+1 logits: the theorem compares against all of them
                right = full.gather(1, labels[:, None])[:, 0]
                other = full.scatter(1, labels[:, None], float("-inf")).max(dim=1).values
                margin = right - other
                test_acc = (margin[te] > 0).float().mean().item()
                all_ok = int((margin > 0).sum())
                min_margin = margin.min().item()
            stats = {"step": step, "train_loss": loss.item(), "test_acc": test_acc,
                     "correct_all": all_ok, "min_margin": min_margin,
                     "seconds": round(time.perf_counter() - started, 1)}
            if log:
                print(json.dumps(stats), file=log, flush=True)
            if checkpoint and step % every == 0:
                _save(checkpoint, model, p, frac, seed, lr, wd, stats)
            if min_margin > stop_margin:
                break
    model.eval()
    return model, stats


def _save(path, model, p, frac, seed, lr, wd, stats):
    from ..modelfile import save_model

    meta = {"task": "modular_addition", "p": p, "train_config": {
        "frac_train": frac, "seed": seed, "lr": lr, "weight_decay": wd,
        "betas": [0.9, 0.98], "full_batch": True, "warmup_steps": 10},
        "train_stats": stats}
    return save_model(path, model.weights(), meta)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="train-modadd", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--p", type=int, default=113)
    ap.add_argument("--frac", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40000)
    ap.add_argument("--stop-margin", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log", default=None, help="JSON-lines progress log (default: stderr)")
    ap.add_argument("--resume", default=None, help="continue from this checkpoint's weights "
                    "(a fresh AdamW; the data split is the seed's)")
    ap.add_argument("--every", type=int, default=1000, help="checkpoint every N steps")
    args = ap.parse_args(argv)
    log = open(args.log, "a") if args.log else sys.stderr
    model, stats = train(args.p, args.frac, args.seed, args.steps, stop_margin=args.stop_margin,
                         log=log, checkpoint=args.out + ".ckpt.pt", threads=args.threads,
                         resume=args.resume, every=args.every)
    sha = _save(args.out, model, args.p, args.frac, args.seed, 1e-3, 1.0, stats)
    print(f"saved {args.out} (sha256 {sha}); {stats}", file=log, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
