"""Shared helpers of the overwhelm tests: small models, brute-force truth by an
independent float64 forward pass, and in-process checking of certificates."""

from __future__ import annotations

import functools
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
from generator.overwhelm import brute_force, certify

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


def truth(weights: ModelWeights, claim: Overwhelm):
    """(is every completion's output the claimed one, strictly; a counterexample or
    None; the smallest margin): enumeration with the float64 forward pass straight
    from spec/theorem.md §2 at the query position (generator.tasks.causal.logits_at),
    which shares no code with the rules or their generator strategy."""
    ok, counter, worst = brute_force(weights, claim)
    return ok, (None if ok else counter), worst


def check_lines(lines, jobs: int = 1, arith: str = "mpmath", distance: bool = False):
    """Run the checker in-process; returns the report (raises Rejected/Malformed).
    distance: the costlier distance-to-float32 notes too (check-cert --float32-distance)."""
    from checker import arith as backends

    checker = CertificateChecker(jobs=jobs, arith=backends.get(arith), distance=distance)
    for line in lines:
        checker.feed(line if isinstance(line, str) else json.dumps(line))
    return checker.finish()


def decoded(lines):
    return [json.loads(s) for s in lines]


def forged(loaded, claim: Overwhelm):
    """Certificate lines for `claim` whether or not it holds (generator `force`)."""
    return certify(loaded, claim, float_shadow=False, force=True)


# -- model families (rule overwhelm_family) -----------------------------------------------

FAMILIES = {
    # LayerNorm, 2 heads, a ReLU MLP and RoPE (the shipped demo's family)
    "ln_mlp_rope": dict(normalization="LN", n_heads=2, d_mlp=8, positional="rotary",
                        rotary_dim=4, rotary_base=10000, ln_eps=1e-5),
    # LNPre, learned positions, parallel MLP
    "lnpre_parallel": dict(normalization="LNPre", n_heads=1, d_mlp=8, ln_eps=1e-5,
                           parallel=True),
    # no normalization, a sequential MLP, 2 heads
    "plain_mlp": dict(n_heads=2, d_mlp=8),
    # LayerNorm, attention only, RoPE
    "ln_rope": dict(normalization="LN", positional="rotary", rotary_dim=4, rotary_base=10000,
                    ln_eps=1e-5),
}


@functools.cache
def family_random(name: str, seed: int = 0, v: int = 5, k: int = 5, d: int = 8, h: int = 4,
                  sharpness: float = 4.0):
    """An untrained model of a family with peaky attention (W_Q scaled up) and a
    LayerNorm gain/bias that is not the identity."""
    from checker.modelspec import Family
    from generator.model import FamilyTransformer, FamilyWeights

    spec = dict(FAMILIES[name])
    if spec.get("positional") == "rotary":
        spec["n_ctx"] = k
    dims = Dims(v, k, d, h, family=Family(**spec))
    gen = torch.Generator().manual_seed(seed)
    w = FamilyTransformer(dims, generator=gen).weights()
    rng = np.random.default_rng(seed)
    params = dict(w.params)
    params["blocks.0.attn.W_Q"] = params["blocks.0.attn.W_Q"] * np.float32(sharpness)
    for key in params:
        if key.endswith(".b") or key.endswith("b_in") or key.endswith("b_U"):
            params[key] = (rng.normal(size=params[key].shape) * 0.1).astype(np.float32)
        elif key.endswith(".w"):
            params[key] = (1 + rng.normal(size=params[key].shape) * 0.2).astype(np.float32)
    return Loaded(FamilyWeights(dims=dims, params=params))
