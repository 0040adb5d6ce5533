"""train-task: train a TransformerLens-layout model (layers, heads, MLP, activation, LN or
RMSNorm as asked) on any built-in task of checker/tasks.py, with cross-entropy at every
scored position (the causal model fed the true prefix), on batches drawn from the task's
whole domain (generator/tasks/builtin.py).  modular_addition has its own full-batch
grokking recipe (generator/tasks/modadd.py).

examples:
  train-task --task parity --n-ctx 10 --out parity.pt
  train-task --task cyclic:n=3 --n-ctx 8 --d-mlp 64 --out z3.pt
  train-task --task flipflop --n-ctx 8 --out flipflop8.pt
  train-task --task parity --n-ctx 8 --n-layers 2 --normalization RMS --gated-mlp --out p.pt
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from checker import HelpFormatter, add_version_option
from checker.errors import Malformed
from checker.modelspec import ACTIVATIONS, NORMALIZATIONS, Dims, Family

from ..model import FamilyTransformer
from .builtin import domain, margins
from .family import deep_logits_all_positions, family_logits_all_positions


def logits_all_positions(model: FamilyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """(n, L) tokens -> (n, L, v) logits at every position (causal), any family: the
    one-layer dense pass of generator/tasks/family.py (the shipped task models' floats), or
    the general one for several layers or a gated MLP."""
    f = model.dims.family
    if f.n_layers == 1 and not f.gated_mlp:
        return family_logits_all_positions(model, tokens)
    return deep_logits_all_positions(model, tokens)


def parse_task(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition(":")
    params = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        params[key] = int(value)
    return name, params


def vocab_for(name: str, params: dict, d_vocab: int | None) -> int:
    fixed = {"parity": 2, "flipflop": 5}
    if name in fixed:
        return fixed[name]
    if name == "cyclic":
        return params["n"]
    if d_vocab is None:
        raise SystemExit(f"train-task: task {name} needs --d-vocab")
    return d_vocab


def train(name, params, dims, steps=3000, batch=256, lr=1e-3, weight_decay=0.01, seed=0,
          stop_margin=0.5, log=None):
    """AdamW on random batches of the domain; stops once every scored pair of the domain has
    float32 margin > stop_margin (checked every 250 steps).  Returns (model, stats)."""
    started = time.perf_counter()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(seed)
    model = FamilyTransformer(dims, generator=gen)
    inputs, labels = domain(name, dims.d_vocab, dims.n_ctx, params)
    x_all = torch.from_numpy(inputs)
    y_all = torch.from_numpy(np.where(labels >= 0, labels, -100))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr,
                            weight_decay=weight_decay)
    stats = {}
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(x_all), (batch,), generator=gen)
        logits = logits_all_positions(model, x_all[idx])
        loss = F.cross_entropy(logits.reshape(-1, dims.d_vocab), y_all[idx].reshape(-1),
                               ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 250 == 0 or step == steps:
            with torch.no_grad():
                worst, wrong = math.inf, 0
                for s in range(0, len(x_all), 8192):
                    lg = logits_all_positions(model, x_all[s:s + 8192])
                    y = y_all[s:s + 8192]
                    mask = y >= 0
                    yy = y.clamp(min=0)
                    right = lg.gather(2, yy[..., None])[..., 0]
                    other = lg.scatter(2, yy[..., None], float("-inf")).max(dim=2).values
                    m = (right - other)[mask]
                    worst = min(worst, m.min().item())
                    wrong += int((m <= 0).sum())
            stats = {"step": step, "loss": loss.item(), "wrong": wrong, "min_margin": worst,
                     "seconds": round(time.perf_counter() - started, 1)}
            if log:
                print(json.dumps(stats), file=log, flush=True)
            if worst > stop_margin:
                break
    model.eval()
    return model, stats


def main(argv=None) -> int:
    from ..modelfile import save_model

    ap = argparse.ArgumentParser(prog="train-task", formatter_class=HelpFormatter,
                                 description="train a TransformerLens-layout model on a "
                                             "built-in task (spec/theorem.md §3)",
                                 epilog="\n".join(__doc__.splitlines()[6:]))
    add_version_option(ap)
    ap.add_argument("--task", required=True, help="NAME[:param=value,...], e.g. cyclic:n=3")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--d-vocab", type=int)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--d-head", type=int, default=None, help="(default: d_model / heads)")
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--d-mlp", type=int, default=64, help="0: attention-only")
    ap.add_argument("--n-layers", type=int, default=1)
    ap.add_argument("--act-fn", choices=list(ACTIVATIONS), default="relu",
                    help="the MLP's activation (spec/rules.md §Activations)")
    ap.add_argument("--normalization", choices=list(NORMALIZATIONS[1:]), default=None,
                    help="LayerNorm or RMSNorm before attention, MLP and unembedding")
    ap.add_argument("--gated-mlp", action="store_true",
                    help="TransformerLens's gated MLP (SwiGLU with --act-fn silu)")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stop-margin", type=float, default=0.5)
    args = ap.parse_args(argv)
    name, params = parse_task(args.task)
    if name == "modular_addition":
        from . import modadd

        return modadd.main(["--out", args.out, "--p", str(params["p"])])
    if args.gated_mlp and not args.d_mlp:
        ap.error("--gated-mlp needs an MLP (--d-mlp > 0)")
    family = Family(normalization=args.normalization, n_heads=args.heads, d_mlp=args.d_mlp,
                    act_fn=args.act_fn if args.d_mlp else "relu",
                    ln_eps=1e-5 if args.normalization else 0.0, n_layers=args.n_layers,
                    gated_mlp=args.gated_mlp)
    try:
        family.validate()
    except Malformed as exc:
        ap.error(str(exc))
    dims = Dims(vocab_for(name, params, args.d_vocab), args.n_ctx, args.d_model,
                args.d_head or args.d_model // args.heads, family)
    model, stats = train(name, params, dims, args.steps, args.batch, args.lr,
                         args.weight_decay, args.seed, args.stop_margin, log=sys.stderr)
    meta = {"task": args.task, "train_config": {k: v for k, v in vars(args).items()
                                                if k != "out"}, "train_stats": stats}
    sha = save_model(args.out, model.weights(), meta)
    print(f"saved {args.out} (sha256 {sha}); {stats}", file=sys.stderr)
    m = margins(model.weights(), *domain(name, dims.d_vocab, dims.n_ctx, params))
    print(f"float64: {int((m > 0).sum())} of {len(m)} scored pairs correct", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
