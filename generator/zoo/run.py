"""One zoo run: plan the missing jobs, run them on Dask, assemble the rows.

A (model, strategy) pair whose result is cached is not run again; a model
file that exists is not trained again (training is deterministic per seed and
the file name records the config).  When nothing is missing no cluster is
started at all.
"""

from __future__ import annotations

import hashlib
import os
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from . import jobs
from .cache import FACTS, ResultCache
from .catalog import paper_row, strategy_names
from .cluster import Job, JobLoop, dask_client
from .resources import PeakMemory

MODEL_SUFFIXES = (".pt", ".pth", ".safetensors")


@dataclass
class ZooOptions:
    out: Path
    seeds: list[int] = field(default_factory=list)  # train one model per seed
    models_dir: Path | None = None  # and/or load every model file here
    train: dict = field(default_factory=dict)  # TrainConfig overrides (d_vocab, steps, ...)
    strategies: list[str] | None = None  # default: every registered strategy
    recipes: list[str] = field(default_factory=lambda: ["paper"])  # generator/recipes.py
    families: list[str] = field(default_factory=lambda: ["attn-only"])  # zoo/families.py
    scheduler: str | None = None  # tcp://HOST:PORT, or None for a LocalCluster
    workers: int | None = None  # LocalCluster size (default: all cores)
    check_jobs: int = 1  # check-cert --jobs inside one job
    check_timeout: float | None = None
    check_arith: str | None = None  # check-cert --arith (None: its default)
    check_max_work: int | None = None  # check-cert --max-work (None: its default)
    progress: bool = True
    cache_dir: Path | None = None  # default: OUT/cache


@dataclass
class RunSummary:
    rows: list[dict]
    models: list[str]
    strategies: list[str]
    computed: int = 0  # jobs run in this invocation (retries not counted twice)
    cached: int = 0  # results taken from the cache
    failed: list[dict] = field(default_factory=list)  # {"job", "failures"}
    retried: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    peak_bytes: int = 0
    started_cluster: bool = False


def model_tag(cfg: dict, recipe: str = "paper", family: str = "attn-only") -> str:
    """File stem of a trained model: its whole config in the name (the recipe's and the
    family's when not the paper's attention-only model: their other fields are theirs)."""
    tag = ("" if family == "attn-only" else f"_{family}") + \
        ("" if recipe == "paper" else f"_{recipe}")
    return (f"max{cfg['n_ctx']}_v{cfg['d_vocab']}_d{cfg['d_model']}_h{cfg['d_head']}"
            f"_steps{cfg['steps']}{tag}_seed{cfg['seed']}")


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Zoo:
    """The state of one run (what is known per model) and its job planning."""

    def __init__(self, opts: ZooOptions):
        self.opts = opts
        self.cache = ResultCache(opts.cache_dir or opts.out / "cache")
        self.strategies = opts.strategies or strategy_names()
        self.summary = RunSummary(rows=[], models=[], strategies=self.strategies)
        self.sha: dict[str, str] = {}  # model path -> file sha256
        self.lost: dict[tuple[str, str], str] = {}  # (model, job) -> why it has no result

    def initial_jobs(self) -> list[Job]:
        from generator.recipes import RECIPES
        from generator.train import TrainConfig

        from .families import FAMILIES

        planned: list[Job] = []
        runs = [(f, r, s) for f in self.opts.families for r in self.opts.recipes
                for s in self.opts.seeds]
        for family, recipe, seed in runs:
            overrides = {**RECIPES[recipe].overrides(),
                         **FAMILIES[family].overrides(self.opts.train)}
            cfg = TrainConfig(**{**self.opts.train, **overrides, "seed": seed}).to_json()
            path = self.opts.out / "models" / f"{model_tag(cfg, recipe, family)}.pt"
            self.summary.models.append(str(path))
            if path.exists():
                planned += self.model_jobs(path)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                planned.append(Job(f"train {path.name}", "train", jobs.train_model,
                                   (cfg, str(path)), self._trained(path)))
        if self.opts.models_dir is not None:
            for path in sorted(Path(self.opts.models_dir).iterdir()):
                if path.suffix.lower() in MODEL_SUFFIXES:
                    self.summary.models.append(str(path))
                    planned += self.model_jobs(path)
        return planned

    def _trained(self, path: Path):
        def done(result: dict, job: Job) -> list[Job]:
            return self.model_jobs(path)
        return done

    def model_jobs(self, path: Path) -> list[Job]:
        """The facts job and one job per strategy, minus what is cached."""
        sha = self.sha[str(path)] = file_sha256(path)
        planned = []
        for name in [FACTS, *self.strategies]:
            if self.cache.get(sha, name) is not None:
                self.summary.cached += 1
            elif name == FACTS:
                planned.append(Job(f"facts of {path.name}", "facts", jobs.model_facts,
                                   (str(path),), self._store(sha, name)))
            else:
                cert = self.opts.out / "certs" / (
                    f"{path.stem}.{urllib.parse.quote(name, safe='')}.jsonl")
                planned.append(Job(f"{name} on {path.name}", "certify", jobs.certify_check,
                                   (str(path), name, str(cert), self.opts.check_jobs,
                                    self.opts.check_timeout, self.opts.check_arith,
                                    self.opts.check_max_work),
                                   self._store(sha, name)))
        return planned

    def _store(self, sha: str, name: str):
        def done(result: dict, job: Job) -> None:
            self.summary.computed += 1
            result = {**result, "attempts": job.attempts, "failures": "; ".join(job.failures)}
            if result.get("status") == jobs.FAILED:  # e.g. check-cert timed out: not cached
                self.lost[(sha, name)] = result.get("reason") or "failed"
                return
            self.cache.put(sha, name, {**result, "project_version": self.cache.version})
        return done

    def run(self) -> RunSummary:
        started = time.monotonic()
        with PeakMemory() as mem:
            planned = self.initial_jobs()
            if planned:
                self.summary.started_cluster = True
                with dask_client(self.opts.scheduler, self.opts.workers) as client:
                    loop = JobLoop(client, progress=self.opts.progress)
                    failed = loop.run(planned)
                self._record_failures(failed, loop.retried)
        self.summary.peak_bytes = mem.peak_bytes
        self.summary.rows = self.rows()
        self.summary.seconds = time.monotonic() - started
        return self.summary

    def _record_failures(self, failed: list[Job], retried: list[Job]) -> None:
        for job in failed:
            self.summary.failed.append({"job": job.name, "failures": job.failures})
            if job.stage == "train":  # args: (config, model path)
                self.lost[(job.args[1], "*")] = f"training failed: {job.failures[-1]}"
            else:  # args: (model path, strategy, ...) or (model path,)
                name = job.args[1] if job.stage == "certify" else FACTS
                self.lost[(self.sha[job.args[0]], name)] = "; ".join(job.failures)
        self.summary.retried = [{"job": j.name, "failures": j.failures,
                                 "recovered": j not in failed} for j in retried]

    def rows(self) -> list[dict]:
        """One row per model × strategy, with every field of jobs.RESULT_FIELDS."""
        rows = []
        for path in self.summary.models:
            sha = self.sha.get(path)
            facts = (self.cache.get(sha, FACTS) if sha else None) or {
                "model": Path(path).name, "model_sha256": sha}
            for name in self.strategies:
                result = self.cache.get(sha, name) if sha else None
                if result is None:
                    why = (self.lost.get((path, "*")) or self.lost.get((sha, name))
                           or "no result (interrupted?)")
                    result = {"strategy": name, "status": jobs.FAILED, "reason": why}
                row = {k: None for k in jobs.RESULT_FIELDS}
                row.update(facts)
                row.update(result)
                row["paper_row"] = paper_row(name)
                row["model_sha256"] = sha
                if row.get("cert_path"):  # relative to the report when inside it
                    row["cert_path"] = _relative(row["cert_path"], self.opts.out)
                if row["status"] == jobs.VERIFIED and row.get("exact"):
                    row["normalized_bound"] = row["bound"] / row["exact"]
                rows.append(row)
        return rows


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except ValueError:
        return path


def run_zoo(opts: ZooOptions) -> RunSummary:
    os.makedirs(opts.out, exist_ok=True)
    return Zoo(opts).run()
