"""Shared helpers of the overwhelm tests: small models, brute-force truth by an
independent float64 forward pass, and in-process checking of certificates."""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from checker.certificate import CertificateChecker
from checker.modelspec import Dims
from checker.statement import Overwhelm
from generator.model import MaxOfKTransformer, ModelWeights
from generator.modelfile import load_model
from generator.overwhelm import certify
from generator.tasks.causal import logits_at

MODELS = Path(__file__).resolve().parent.parent / "generator" / "models"
SMALL_MAXANY = MODELS / "maxany_v8_k6_seed0.pt"
SMALL_FLIPFLOP = MODELS / "flipflop_k16_seed0.pt"
# A float64 margin this close to 0 cannot decide the real model's verdict.
UNDECIDED = 1e-9


@dataclass
class Loaded:
    """What generator.overwhelm.certify needs of a loaded model."""

    weights: ModelWeights
    file_sha256: str = "0" * 64


@functools.cache
def shipped(path: Path) -> Loaded:
    return load_model(path)


@functools.cache
def sharp_random(seed: int = 0, v: int = 5, k: int = 6, d: int = 8, sharpness: float = 4.0):
    """An untrained model whose attention is peaky (W_Q scaled up): some prompts
    overwhelm it, many do not."""
    model = MaxOfKTransformer(Dims(v, k, d, d), generator=torch.Generator().manual_seed(seed))
    w = model.weights()
    return Loaded(w.replace(W_Q=w.W_Q * np.float32(sharpness)))


def completions(claim: Overwhelm, v: int):
    """Every admissible free string of the claim."""
    if claim.free_perm is not None:
        yield from sorted(set(itertools.permutations(claim.free_perm)))
        return
    alphabet = claim.over if claim.over is not None else range(v)
    for n in claim.lengths():
        yield from itertools.product(alphabet, repeat=n)


def truth(weights: ModelWeights, claim: Overwhelm):
    """(is every completion's output the claimed one, strictly; a counterexample or
    None; the smallest margin).  Float64, straight from spec/theorem.md §2 at the
    query position (generator.tasks.causal.logits_at), batched per length."""
    v = weights.dims.d_vocab
    by_length: dict[int, list] = {}
    for t in completions(claim, v):
        by_length.setdefault(len(t), []).append(claim.prefix + tuple(t) + (claim.query,))
    worst, counter = np.inf, None
    for seqs in by_length.values():
        logits = logits_at(weights, np.array(seqs))
        others = np.delete(logits, claim.output, axis=1).max(axis=1)
        margin = logits[:, claim.output] - others
        i = int(np.argmin(margin))
        if margin[i] < worst:
            worst = float(margin[i])
            counter = seqs[i][len(claim.prefix):-1]
    return worst > 0, (None if worst > 0 else counter), worst


def check_lines(lines, jobs: int = 1):
    """Run the checker in-process; returns the report (raises Rejected/Malformed)."""
    checker = CertificateChecker(jobs=jobs)
    for line in lines:
        checker.feed(line if isinstance(line, str) else json.dumps(line))
    return checker.finish()


def decoded(lines):
    return [json.loads(s) for s in lines]


def forged(loaded, claim: Overwhelm):
    """Certificate lines for `claim` whether or not it holds (generator `force`)."""
    return certify(loaded, claim, float_shadow=False, force=True)
