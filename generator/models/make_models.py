"""Re-make the shipped models and models.json:  python -m generator.models.make_models

Each model is trained with generator.train (deterministic for its config on a
given machine and torch build), saved next to this file, and its exact
accuracy counted with generator.ground_truth.  `--check` retrains into a
temporary directory and compares the sha256s with models.json instead of
overwriting anything.  `--only NAME` restricts to one model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from generator.ground_truth import count_correct
from generator.modelfile import save_model
from generator.train import TrainConfig, train_with_stats, training_metadata

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "models.json"

# file name -> training config.  Max-of-4 is the paper's size and recipe.
SHIPPED: dict[str, TrainConfig] = {
    "max4_v64_seed0.pt": TrainConfig(d_vocab=64, n_ctx=4, d_model=32, d_head=32, seed=0,
                                     steps=3000),
    "max3_v8_seed0.pt": TrainConfig(d_vocab=8, n_ctx=3, d_model=8, d_head=8, seed=0,
                                    steps=1500),
    "max5_v16_seed0.pt": TrainConfig(d_vocab=16, n_ctx=5, d_model=16, d_head=16, seed=0,
                                     steps=3000),
    "max3_v32_seed0.pt": TrainConfig(d_vocab=32, n_ctx=3, d_model=16, d_head=16, seed=0,
                                     steps=3000),
    # LayerNorm + ReLU MLP + RoPE + two heads, TransformerLens layout with its config.
    "max3_v8_ln_mlp_rope_seed0.pt": TrainConfig(
        d_vocab=8, n_ctx=3, d_model=16, d_head=8, seed=0, steps=3000, layernorm="LN",
        n_heads=2, d_mlp=32, rope=True),
    # TransformerLens's default activation (exact GELU) with LayerNorm (issue 21).
    "max3_v8_gelu_ln_seed0.pt": TrainConfig(
        d_vocab=8, n_ctx=3, d_model=16, d_head=8, seed=0, steps=1500, layernorm="LN",
        n_heads=2, d_mlp=32, act_fn="gelu"),
    # Llama-style normalisation and activation: RMSNorm, SiLU MLP, RoPE (no gate).
    "max3_v8_rms_silu_rope_seed0.pt": TrainConfig(
        d_vocab=8, n_ctx=3, d_model=16, d_head=8, seed=0, steps=1500, layernorm="RMS",
        n_heads=2, d_mlp=32, act_fn="silu", rope=True, ln_eps=1e-6),
    # Two layers, attention only (issue 21: depth; certified by forward brute force).
    "max3_v8_2layers_attn_only_seed0.pt": TrainConfig(
        d_vocab=8, n_ctx=3, d_model=8, d_head=8, seed=0, steps=1500, n_layers=2),
    # Llama-style: RMSNorm, SiLU-gated MLP (SwiGLU), RoPE, two layers (issue 21).
    "max3_v8_llama_seed0.pt": TrainConfig(
        d_vocab=8, n_ctx=3, d_model=16, d_head=8, seed=0, steps=1500, layernorm="RMS",
        n_heads=2, d_mlp=8, act_fn="silu", rope=True, ln_eps=1e-6, n_layers=2,
        gated_mlp=True),
    # Max-of-4 at the paper's size with LayerNorm and a ReLU MLP (issue 23: rule family_gap's
    # shipped certificate in certs/).  Its float64 count takes ~4–9 minutes.
    "max4_v64_ln_mlp_seed0.pt": TrainConfig(
        d_vocab=64, n_ctx=4, d_model=32, d_head=32, seed=0, steps=3000, layernorm="LN",
        d_mlp=128),
}


def make_one(name: str, cfg: TrainConfig, directory: Path) -> dict:
    """Train, save and count one model; returns its manifest entry."""
    result = train_with_stats(cfg, progress=False)
    weights = result.model.weights()
    sha = save_model(directory / name, weights, training_metadata(cfg, result))
    gt = count_correct(weights, progress=False)
    dims = {k: v for k, v in asdict(cfg.dims).items() if k != "family"}
    family = {} if cfg.family.is_attn_only else {"family": cfg.family.to_json()}
    return {
        "file": name,
        "dims": dims,
        **family,
        "train_config": cfg.to_json(),
        "correct": gt.correct,
        "total": gt.total,
        "accuracy": gt.accuracy,
        "ties": gt.ties,
        "near_ties": gt.near_ties,
        "sha256": sha,
        "final_loss": result.final_loss,
        "train_seconds": round(result.seconds, 2),
        "count_seconds": round(gt.seconds, 2),
        "remake": (f"python -m generator.train --out generator/models/{name} "
                   f"--d-vocab {cfg.d_vocab} --n-ctx {cfg.n_ctx} --d-model {cfg.d_model} "
                   f"--d-head {cfg.d_head} --seed {cfg.seed} --steps {cfg.steps}"
                   + family_flags(cfg)),
    }


def family_flags(cfg: TrainConfig) -> str:
    """The train-max-of-k flags selecting cfg's family ("" for attention-only)."""
    flags = [f"--layernorm {cfg.layernorm}"] if cfg.layernorm else []
    flags += [f"--n-heads {cfg.n_heads}"] if cfg.n_heads != 1 else []
    flags += [f"--mlp {cfg.d_mlp}"] if cfg.d_mlp else []
    flags += [f"--act-fn {cfg.act_fn}"] if cfg.d_mlp and cfg.act_fn != "relu" else []
    flags += [f"--ln-eps {cfg.ln_eps}"] if cfg.layernorm and cfg.ln_eps != 1e-5 else []
    flags += ["--rope"] if cfg.rope else []
    flags += ["--parallel"] if cfg.parallel else []
    flags += [f"--n-layers {cfg.n_layers}"] if cfg.n_layers != 1 else []
    flags += ["--gated-mlp"] if cfg.gated_mlp else []
    return "".join(" " + f for f in flags)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="retrain in a temp dir and compare sha256s with models.json")
    parser.add_argument("--only", choices=sorted(SHIPPED), help="just this model")
    args = parser.parse_args(argv)
    names = [args.only] if args.only else list(SHIPPED)
    old = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"models": []}
    entries = {e["file"]: e for e in old["models"]}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) if args.check else HERE
        for name in names:
            entry = make_one(name, SHIPPED[name], directory)
            print(f"{name}: {entry['correct']}/{entry['total']} ({entry['accuracy']:.6f}), "
                  f"ties {entry['ties']}, trained in {entry['train_seconds']} s, "
                  f"counted in {entry['count_seconds']} s, sha256 {entry['sha256'][:16]}...")
            if args.check:
                want = entries.get(name, {})
                same = all(want.get(f) == entry[f] for f in ("sha256", "correct", "ties"))
                print(f"  {'reproduced' if same else 'DIFFERS from models.json'}")
                failures += not same
            else:
                entries[name] = entry
    if not args.check:
        manifest = {
            "about": "Shipped Max-of-K models; counts from generator.ground_truth (float64, "
                     "a tie counts as wrong). Re-make: python -m generator.models.make_models",
            "torch_version": str(torch.__version__),
            "models": [entries[n] for n in SHIPPED if n in entries],
        }
        if "task_models" in old:  # overwhelm demo models (generator/tasks), made separately
            manifest["task_models"] = old["task_models"]
        if "accuracy_tasks" in old:  # models certified on other tasks (issue 20)
            manifest["accuracy_tasks"] = old["accuracy_tasks"]
        MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n")
        print(f"wrote {MANIFEST}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
