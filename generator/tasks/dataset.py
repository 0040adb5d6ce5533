"""make-dataset: a labelled dataset file (spec/format.md §dataset) of random inputs of a
built-in task, one row per scored position: `t_0 ... t_{n_ctx-1} position label`.
For tasks whose domain is too large to enumerate (e.g. flip-flop strings of length 16),
gen-cert --dataset FILE certifies the model's accuracy on exactly these rows.

    python -m generator.tasks.dataset --task flipflop --n-ctx 16 --inputs 200 -o test.txt
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from .train_task import parse_task


def random_inputs(name: str, params: dict, d_vocab: int, n_ctx: int, count: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """count random domain inputs and their labels (-1: unscored), as builtin.domain."""
    from . import flipflop

    if name == "flipflop":
        kind = rng.random((count, n_ctx))
        bits = rng.integers(0, 2, (count, n_ctx))
        tokens = np.where(kind < flipflop.P_WRITE, bits,
                          np.where(kind < flipflop.P_WRITE + flipflop.P_READ, flipflop.R,
                                   flipflop.I0 + bits))
        tokens[:, 0] = bits[:, 0]
        labels = np.full(tokens.shape, -1)
        last = tokens[:, 0].copy()
        for i in range(1, n_ctx):
            last = np.where(tokens[:, i] <= flipflop.W1, tokens[:, i], last)
            labels[:, i] = np.where(tokens[:, i] == flipflop.R, last, -1)
        return tokens, labels
    if name in ("parity", "cyclic"):
        n = 2 if name == "parity" else params["n"]
        tokens = rng.integers(0, n, (count, n_ctx))
        return tokens, np.cumsum(tokens, axis=1) % n
    raise SystemExit(f"make-dataset: no sampler for task {name}")


def dataset_text(tokens: np.ndarray, labels: np.ndarray) -> str:
    rows = []
    for t, lab in zip(tokens, labels):
        for p in np.nonzero(lab >= 0)[0]:
            rows.append(" ".join(str(int(x)) for x in (*t, p, lab[p])))
    return "".join(r + "\n" for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="make-dataset", description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--n-ctx", type=int, required=True)
    ap.add_argument("--inputs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    name, params = parse_task(args.task)
    d_vocab = {"flipflop": 5, "parity": 2}.get(name, params.get("n"))
    tokens, labels = random_inputs(name, params, d_vocab, args.n_ctx, args.inputs,
                                   np.random.default_rng(args.seed))
    text = dataset_text(tokens, labels)
    with open(args.output, "w", newline="\n") as f:
        f.write(text)
    print(f"wrote {args.output}: {text.count(chr(10))} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
