"""Shared, cached artefacts for the checker's tests: small model files and
certificates generated once per test process, and helpers to edit them.

Not a conftest (others own tests/conftest.py): test modules import from here
(`from checker_fixtures import ...`; pytest puts tests/ on sys.path).  Every
artefact is built lazily and cached, so each test module can call
`artifacts()` freely; files live in one temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from checker.modelspec import Dims  # noqa: E402

DIMS = Dims(6, 3, 8, 8)
RANDOM_SEED = 1


@functools.cache
def workdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="maxk-checker-tests-"))
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


def random_model(seed: int = RANDOM_SEED, dims: Dims = DIMS) -> Path:
    """An untrained model (so that many sequences are wrong and cubic tokens fail)."""
    return _random_model(seed, dims)


@functools.cache
def _random_model(seed: int, dims: Dims) -> Path:
    import torch

    from generator.model import MaxOfKTransformer
    from generator.modelfile import save_model

    path = workdir() / f"random_{dims.d_vocab}_{dims.n_ctx}_{seed}.pt"
    model = MaxOfKTransformer(dims, generator=torch.Generator().manual_seed(seed))
    save_model(path, model.weights(), {"seed": seed})
    return path


@functools.cache
def trained_model() -> Path:
    """A briefly trained model (decent accuracy)."""
    from generator.modelfile import save_model
    from generator.train import TrainConfig, train

    cfg = TrainConfig(d_vocab=DIMS.d_vocab, n_ctx=DIMS.n_ctx, d_model=DIMS.d_model,
                      d_head=DIMS.d_head, steps=300, seed=0)
    path = workdir() / "trained.pt"
    save_model(path, train(cfg, progress=False).weights(), {"steps": cfg.steps})
    return path


@functools.cache
def certificate_lines(model: Path, strategy: str) -> tuple[str, ...]:
    """The generator's certificate for `model` (one JSON text per line)."""
    from generator.cli import generate

    lines, _ = generate(str(model), strategy, float_shadow=True, progress=False)
    return tuple(lines)


def certificate_file(model: Path, strategy: str) -> Path:
    return write_lines(certificate_lines(model, strategy),
                       f"{model.stem}_{strategy}.jsonl", cached=True)


_written: set = set()


def write_lines(lines, name: str, cached: bool = False) -> Path:
    """Write certificate lines to a file in the work directory."""
    path = workdir() / name
    if cached and path in _written:
        return path
    path.write_text("".join(line + "\n" for line in lines))
    _written.add(path)
    return path


def write_bytes(data: bytes, name: str) -> Path:
    path = workdir() / name
    path.write_bytes(data)
    return path


@dataclass(frozen=True)
class Artifacts:
    model: Path  # random model
    brute: tuple[str, ...]  # its brute-force certificate lines
    cubic: tuple[str, ...]  # its cubic certificate lines
    other_model: Path  # a different random model of the same dims
    trained: Path
    trained_brute: tuple[str, ...]


@functools.cache
def artifacts() -> Artifacts:
    model = random_model()
    trained = trained_model()
    return Artifacts(model=model, brute=certificate_lines(model, "brute-force"),
                     cubic=certificate_lines(model, "cubic"),
                     other_model=random_model(RANDOM_SEED + 1),
                     trained=trained, trained_brute=certificate_lines(trained, "brute-force"))


# -- editing certificates --------------------------------------------------------

def parse(lines) -> list[dict]:
    return [json.loads(s) for s in lines]


def dump(objs) -> list[str]:
    return [json.dumps(o, separators=(",", ":")) for o in objs]


def find(objs, **match) -> int:
    """Index of the first line whose fields equal `match`."""
    for i, o in enumerate(objs):
        if all(o.get(k) == v for k, v in match.items()):
            return i
    raise KeyError(match)


def rule_index(objs) -> int:
    return find(objs, kind="rule")


def header_claim(objs) -> int:
    theorem = objs[0]["theorem"]
    return int(theorem.rsplit("correct >= ", 1)[1])


def decode(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype).copy()


def encode(arr: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(arr, dtype=dtype).tobytes()).decode("ascii")


# -- running the checker ------------------------------------------------------------

def run_checker_subprocess(args, stdin: bytes | None = None, optimize: bool = False,
                           timeout: float = 120) -> subprocess.CompletedProcess:
    """`python [-O] -m checker ARGS` in a fresh interpreter; text output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable] + (["-O"] if optimize else []) + ["-m", "checker", *map(str, args)]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, cwd=REPO, env=env,
                          timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode,
                                       proc.stdout.decode("utf-8", "replace"),
                                       proc.stderr.decode("utf-8", "replace"))
