"""The work of one Dask task.  Each function is idempotent: run twice on the
same arguments it writes the same files and returns the same facts (times
aside), so a job lost with its worker can simply be run again.

  train_model     one model from a TrainConfig (paper recipe, deterministic per seed)
  model_facts     exact count (generator.ground_truth), family, forward brute force's
                  work, and EQKE's singular values (attention-only models)
  certify_check   gen-cert (in-process) then check-cert (a separate process)

Results are plain dicts of the columns below; a field a tool did not report is
None (a blank in results.csv), never a guess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Columns of results.csv, one row per model × strategy.
MODEL_FIELDS = ("model", "model_sha256", "seed", "recipe", "family", "split", "d_vocab",
                "n_ctx", "d_model", "d_head", "exact", "total", "ties", "forward_work",
                "eqke_sigma1", "eqke_sigma2", "eqke_sigma_ratio")
STRATEGY_FIELDS = ("strategy", "paper_row", "status", "reason", "bound", "accuracy_bound",
                   "normalized_bound", "checker_work", "unexplained_dims", "gen_seconds",
                   "check_seconds", "check_arithmetic", "cert_bytes", "cert_lines",
                   "cert_sha256", "cert_path", "project_version", "attempts", "failures")
RESULT_FIELDS = MODEL_FIELDS + STRATEGY_FIELDS

REPORT_FILE_MODE = 0o644

# Statuses of a strategy job.  Only VERIFIED rows carry a bound.
VERIFIED, REJECTED, MALFORMED = "verified", "rejected", "malformed"
NOT_APPLICABLE, FAILED = "not-applicable", "failed"
CHECK_VERDICTS = {0: VERIFIED, 1: REJECTED, 2: MALFORMED}  # check-cert exit codes
WORK_LIMIT = "raise --max-work"  # check-cert's refusal of a certificate over --max-work

# Names under which check-cert --json may report proof-length metrics
# (issue 8 adds them); the first present wins, absent means blank.
WORK_KEYS = ("checker_work", "work")
UNEXPLAINED_KEYS = ("unexplained_dimensionality", "unexplained_dims", "unexplained_dimensions")


def train_model(config: dict, path: str) -> dict:
    """Train TrainConfig(**config) and save it to `path` (atomically).

    Post: the file's bytes depend only on `config` (train.training_metadata
    records no times), so rerunning after a lost worker rewrites the same file.
    """
    from generator.modelfile import save_model
    from generator.train import TrainConfig, train_with_stats, training_metadata

    cfg = TrainConfig(**{**config, "betas": tuple(config.get("betas", (0.9, 0.999)))})
    result = train_with_stats(cfg, progress=False)
    sha = save_model(path, result.model.weights(), training_metadata(cfg, result))
    return {"path": path, "sha256": sha, "seconds": result.seconds,
            "final_loss": result.final_loss}


def model_facts(path: str) -> dict:
    """Dims, seed, family, exact count, forward brute force's work and (attention-only
    models) EQKE's top two singular values of one model.

    The exact count is generator.ground_truth's float64 enumeration (an
    evaluation, not a proof).  EQKE is the project's definition
    (checker.definitions: E_q W_Q (Ē W_K)ᵀ / sqrt(d_head), biases included),
    in float64; σ1/σ2 is scale-free, so it compares with the paper's §3.1.  It is
    not defined with LayerNorm or an MLP: those models get None (a blank).
    Cost: O(v^k · forward pass) for the count, O(v^3) for the SVD.
    """
    import numpy as np

    from generator.ground_truth import count_correct
    from generator.modelfile import load_model

    from .families import family_of, forward_work

    loaded = load_model(path)
    w, d = loaded.weights, loaded.weights.dims
    truth = count_correct(w, progress=False, workers=1)
    s1 = s2 = None
    if d.family.is_attn_only:
        sigma = np.linalg.svd(eqke_float64(w), compute_uv=False)
        s1 = float(sigma[0])
        s2 = float(sigma[1]) if len(sigma) > 1 else 0.0
    from generator.recipes import held_back, recipe_of

    config = _train_config(path)
    seed = config.get("seed") if config else None
    return {"model": Path(path).name, "model_sha256": loaded.file_sha256,
            "seed": seed, "recipe": recipe_of(config) if config else None,
            "family": family_of(d),
            "split": "held-back" if held_back(seed) else "tune", "d_vocab": d.d_vocab,
            "n_ctx": d.n_ctx,
            "d_model": d.d_model, "d_head": d.d_head, "exact": truth.correct,
            "total": truth.total, "ties": truth.ties, "forward_work": forward_work(d),
            "eqke_sigma1": s1, "eqke_sigma2": s2,
            "eqke_sigma_ratio": s1 / s2 if s2 else None}


def eqke_float64(w):
    """EQKE (v, v) in float64, as checker.definitions.model_terms defines it."""
    import numpy as np

    f = {n: np.asarray(getattr(w, n), dtype=np.float64)
         for n in ("W_E", "W_pos", "W_Q", "W_K", "b_Q", "b_K")}
    e_q = f["W_E"] + f["W_pos"][-1]  # (v, d)
    e_bar = f["W_E"] + f["W_pos"].mean(axis=0)  # (v, d)
    query = e_q @ f["W_Q"] + f["b_Q"]  # (v, h)
    key = e_bar @ f["W_K"] + f["b_K"]  # (v, h)
    return query @ key.T / np.sqrt(w.dims.d_head)


def _train_config(path: str) -> dict | None:
    """The training config recorded in a model file by train-max-of-k, if any."""
    try:
        import torch

        obj = torch.load(path, map_location="cpu", weights_only=True)
        config = dict(obj["train_metrics"]["train_config"])
        config["seed"] = int(config["seed"])
        return config
    except Exception:  # a foreign model file: no recorded config
        return None


def certify_check(model_path: str, strategy: str, cert_path: str, check_jobs: int = 1,
                  check_timeout: float | None = None, check_arith: str | None = None,
                  check_max_work: int | None = None) -> dict:
    """Run `strategy` on the model, write the certificate, check it with
    check-cert in a separate process, and return the strategy columns.

    Post: status VERIFIED iff check-cert exited 0; then `bound` is the count
    check-cert printed (never the generator's claim).  NOT_APPLICABLE when the
    strategy refuses the model (its feasibility rule, reason recorded).
    """
    from generator.certify.strategies import NotApplicable
    from generator.cli import generate

    row: dict = {"strategy": strategy}
    started = time.monotonic()
    try:
        lines, _summary = generate(model_path, strategy, progress=False)
    except NotApplicable as err:
        return {**row, "status": NOT_APPLICABLE, "reason": str(err)}
    row["gen_seconds"] = time.monotonic() - started
    text = "\n".join(lines) + "\n"
    _write_atomic(cert_path, text.encode())
    row.update(cert_path=cert_path, cert_bytes=len(text.encode()), cert_lines=len(lines),
               cert_sha256=_sha256(text.encode()))
    return {**row, **check_certificate(cert_path, model_path, check_jobs, check_timeout,
                                       check_arith, check_max_work)}


def check_certificate(cert_path: str, model_path: str, jobs: int = 1,
                      timeout: float | None = None, arith: str | None = None,
                      max_work: int | None = None) -> dict:
    """`python -m checker CERT --json --model MODEL [--arith A] [--max-work W]` as a
    separate process (None: check-cert's defaults)."""
    cmd = [sys.executable, "-m", "checker", cert_path, "--json", "--model", model_path,
           "--jobs", str(jobs)] + (["--arith", arith] if arith else []) \
        + (["--max-work", str(max_work)] if max_work else [])
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=_env_with_project(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"status": FAILED, "reason": f"check-cert timed out after {timeout} s",
                "check_seconds": time.monotonic() - started}
    seconds = time.monotonic() - started
    try:
        out = json.loads(done.stdout)
    except json.JSONDecodeError:
        out = {}
    status = CHECK_VERDICTS.get(done.returncode, FAILED)
    row = {"status": status, "check_seconds": seconds,
           "check_arithmetic": out.get("arithmetic"),
           "checker_work": _first(out, WORK_KEYS),
           "unexplained_dims": _first(out, UNEXPLAINED_KEYS)}
    if status == VERIFIED and out.get("verdict") == VERIFIED:
        row.update(bound=int(out["correct"]), total=int(out["total"]),
                   accuracy_bound=int(out["correct"]) / int(out["total"]))
    elif status == VERIFIED:  # exit 0 without a readable verdict: never count it
        row.update(status=FAILED, reason="check-cert exited 0 without a JSON verdict")
    else:
        row["reason"] = str(out.get("message") or (done.stderr.strip().splitlines() or
                                                     [f"exit {done.returncode}"])[-1])
        if status == MALFORMED and WORK_LIMIT in row["reason"]:  # a limit, as a timeout:
            row.update(status=FAILED,  # not a verdict on the certificate, so not cached
                       reason=row["reason"] + " (certify-zoo --check-max-work)")
    return row


def _first(out: dict, keys: tuple[str, ...]):
    for where in (out, out.get("metrics") or {}):
        for key in keys:
            if isinstance(where, dict) and where.get(key) is not None:
                return where[key]
    return None


def _env_with_project() -> dict:
    """The environment with this package's root first on PYTHONPATH, so the
    checker process is the checker of the same source tree as the zoo."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` via a temporary file and rename: a reader sees
    the old file or the whole new one, never a part."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, REPORT_FILE_MODE)  # mkstemp creates 0600; reports are not secrets
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
