"""What the benchmark scripts share: running a command as a user would, the
machine's load beside each timing, the cached trained models, and one
verified `check-cert --json` verdict.  Not a test: benchmarks print figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from generator.modelfile import save_model  # noqa: E402
from generator.train import TrainConfig, train  # noqa: E402


def run(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """Run `cmd` from the repository root; (wall seconds, completed process)."""
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return time.monotonic() - started, done


def load() -> str:
    """The 1/5/15-minute load averages, to print beside a timing."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def model_tag(cfg: TrainConfig) -> str:
    return f"v{cfg.d_vocab}_k{cfg.n_ctx}_d{cfg.d_model}_h{cfg.d_head}_seed{cfg.seed}"


def trained_model(cfg: TrainConfig, cache: Path) -> tuple[Path, float]:
    """The model `cfg` trains, from `cache` or trained now; (path, training seconds)."""
    path = cache / f"{model_tag(cfg)}.pt"
    if path.exists():
        return path, 0.0
    started = time.monotonic()
    save_model(path, train(cfg, progress=False).weights(), {"seed": cfg.seed})
    return path, time.monotonic() - started


def generate(model_path: Path, strategy: str, cert: Path) -> float:
    """`gen-cert MODEL --strategy S -o CERT`; its wall seconds (exits if it fails)."""
    seconds, gen = run([sys.executable, "-m", "generator.cli", str(model_path), "--strategy",
                        strategy, "-o", str(cert), "-q"])
    if gen.returncode != 0:
        raise SystemExit(f"gen-cert failed on {model_path.name}: {gen.stderr}")
    return seconds


def check_verified(cert: Path, model_path: Path, jobs: int, *extra: str) -> tuple[float, dict]:
    """`check-cert CERT --model MODEL --json`; (wall seconds, verdict); exits unless verified."""
    seconds, chk = run([sys.executable, "-m", "checker", str(cert), "--model", str(model_path),
                        "--json", "--jobs", str(jobs), *extra])
    verdict = json.loads(chk.stdout)
    if verdict["verdict"] != "verified":
        raise SystemExit(f"check-cert refused {cert.name}: {verdict}")
    return seconds, verdict
