"""Config fuzz (issue 18): random values and types for every field of a TransformerLens
config, against the tensors, each judged by TransformerLens itself.

Base: the shipped Max-of-3 model (generator/models/max3_v8_seed0.pt) and its certificate
(certs/max3_v8_seed0.brute-force.jsonl), saved as users do, {"config": cfg, "model": sd}.
Each case changes 1-3 fields (any field of the allow-list, or a made-up one) to a random
value of a random type (ints, reals including nan/inf/huge, bools, names, None, lists),
writes the file and runs `check-cert CERT --model FILE`.  The oracle is independent of the
checker: TransformerLens 3.x builds `HookedTransformer(HookedTransformerConfig(**cfg))`,
loads the state dict (strict) and runs all 512 sequences in float64.

* FALSE BINDING: the checker VERIFIED, but TransformerLens computes another function
  (max |Δlogit| > 1e-9 against the base model) -- must be 0;
* accepted, TransformerLens refuses the config or the tensors: reported (the checker is
  stricter than needed nowhere it matters, but a file TransformerLens cannot run should
  not be accepted either) -- expected 0;
* refused: the checker said MALFORMED/REJECTED (counted by the field named first).

    python benchmarks/fuzz_configs.py --cases 300 --seed 0
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import math
import os
import random
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a tokenizer_name must not reach the network
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from checker.cli import main as check_cert  # noqa: E402
from checker.tl_config import FIXED, INERT, INTERPRETED, SUBORDINATE  # noqa: E402

CERT = ROOT / "certs" / "max3_v8_seed0.brute-force.jsonl"
MODEL = ROOT / "generator" / "models" / "max3_v8_seed0.pt"
FIELDS = sorted(set(INTERPRETED) | set(INERT) | set(FIXED) | set(SUBORDINATE))
NAMES = ["relu", "gelu", "LN", "LNPre", "RMS", "standard", "rotary", "alibi", "causal",
         "bidirectional", "GPT2LMHeadModel", "Olmo2ForCausalLM", "torch.float32", "", "8"]


def random_value(rng: random.Random, current):
    """A value of a random type; often near the current one (the interesting edge)."""
    kind = rng.randrange(9)
    if kind == 0 and type(current) is int:
        return current + rng.choice([-1, 1, 2, -current])
    if kind == 1:
        return rng.choice([-1, 0, 1, 2, 3, 4, 8, 9, 64, 1 << 40])
    if kind == 2:
        return rng.choice([-1.0, 0.0, 1e-3, 0.5, 1.0, 2.0, 8.0, 30.0, 1e300, math.nan,
                           math.inf, -math.inf, 2.8284271247461903, 10000.0])
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return rng.choice(NAMES)
    if kind == 5:
        return None
    if kind == 6:
        return rng.choice([[1], [], {}, {"a": 1}])
    if kind == 7 and isinstance(current, (int, float)) and not isinstance(current, bool):
        return float(current)
    return current if current is not None else rng.choice([0, None, False])


class Oracle:
    """TransformerLens's forward pass on all inputs, float64."""

    def __init__(self, tl, sd: dict, base_cfg: dict):
        self.tl, self.sd = tl, sd
        tokens = list(itertools.product(range(8), repeat=3))
        self.tokens = torch.tensor(tokens)
        self.base = self.logits(base_cfg)
        assert self.base is not None, "TransformerLens refuses the base config"

    def logits(self, cfg: dict):
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                config = self.tl.HookedTransformerConfig(
                    **{k: (torch.float32 if k == "dtype" else v) for k, v in cfg.items()
                       if k != "n_params"})
                model = self.tl.HookedTransformer(config)
                model.load_state_dict(self.sd, strict=True)
                model = model.to(torch.float64).eval()
                with torch.no_grad():
                    return model(self.tokens)[:, -1].double()
        except Exception:  # noqa: BLE001 -- TransformerLens refuses: no function
            return None


def base_config(sd: dict) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_config_binding import tl_config_of

    return tl_config_of(sd)


def judge(oracle: Oracle, sd: dict, cfg: dict, path: Path) -> tuple[str, str]:
    """(verdict, checker message) for one config: accepted_same_function,
    false_bindings (accepted, TransformerLens computes another function),
    accepted_tl_refuses, refused_same_function or refused_other_or_invalid."""
    torch.save({"config": cfg, "model": sd}, path)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = check_cert([str(CERT), "--model", str(path), "--jobs", "1"])
    theirs = oracle.logits(cfg)
    same = theirs is not None and float((theirs - oracle.base).abs().max()) <= 1e-9
    if code == 0:
        verdict = ("accepted_tl_refuses" if theirs is None else
                   "accepted_same_function" if same else "false_bindings")
    else:
        verdict = "refused_same_function" if same else "refused_other_or_invalid"
    return verdict, err.getvalue()


def run(cases: int, seed: int, progress: bool = False) -> dict:
    tl = __import__("transformer_lens")
    sd = torch.load(MODEL, weights_only=True)["model"]
    base = base_config(sd)
    oracle = Oracle(tl, sd, base)
    rng = random.Random(seed)
    tally = Counter()
    refused_by = Counter()
    findings = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.pt"
        for i in range(cases):
            cfg = dict(base)
            changed = []
            for _ in range(rng.randint(1, 3)):
                field = rng.choice(FIELDS + ["unknown_field_x"])
                cfg[field] = random_value(rng, cfg.get(field))
                changed.append(field)
            verdict, message = judge(oracle, sd, cfg, path)
            tally[verdict] += 1
            tally["accepted" if verdict.startswith("accepted") else "refused"] += 1
            if verdict in ("false_bindings", "accepted_tl_refuses"):
                findings.append((verdict, changed, {f: cfg[f] for f in changed}))
            if verdict.startswith("refused"):
                refused_by[next((f for f in FIELDS + ["unknown_field_x"]
                                 if f" {f} = " in message), "other")] += 1
            if progress and (i + 1) % 25 == 0:
                print(f"  {i + 1}/{cases} cases, {dict(tally)}", file=sys.stderr)
    return {"cases": cases, "seed": seed, "seconds": round(time.monotonic() - started, 1),
            **dict(tally), "refused_by_field": dict(refused_by.most_common()),
            "findings": findings}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    s = run(args.cases, args.seed, progress=True)
    for key, value in s.items():
        if key != "findings":
            print(f"{key}: {value}")
    for finding in s["findings"]:
        print("  ", finding)
    return 1 if s.get("false_bindings", 0) else 0


if __name__ == "__main__":
    sys.exit(main())
