"""Per-job result files: the zoo's memory between runs.

A result is cached under (model file sha256, job name, project version) as one
JSON file -- the version being the package version plus a digest of the
checker's and generator's source (the zoo's own reporting code excluded), so
a result is never reused by a different checker or strategy -- written
atomically (temporary file + rename) the moment the job's result reaches the
client, so an interrupted run loses at most the jobs in
flight, and a rerun does only what has no file.  Only results are cached,
never failures (a job that failed is tried again next run).

Layout: CACHE/<version>/<model sha256>/<quoted job name>.json
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

from .jobs import _write_atomic

FACTS = "_model-facts"  # the job name of generator.zoo.jobs.model_facts


ROOT = Path(__file__).resolve().parents[2]  # the directory holding checker/ and generator/
SOURCE_DIGEST_CHARS = 12


def package_version() -> str:
    """The installed maxk-certify version (pyproject's when not installed)."""
    try:
        from importlib.metadata import version

        return version("maxk-certify")
    except Exception:  # running from a source tree that is not installed
        import re

        text = (ROOT / "pyproject.toml").read_text()
        return re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)


def source_digest() -> str:
    """sha256 over the checker's and the generator's source files (paths and
    bytes), except generator/zoo: what decides a certificate and its verdict."""
    import hashlib

    h = hashlib.sha256()
    files = [*ROOT.glob("checker/**/*.py"), *ROOT.glob("checker/**/*.lark"),
             *ROOT.glob("generator/**/*.py")]
    for path in sorted(files):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("generator/zoo/"):
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:SOURCE_DIGEST_CHARS]


def project_version() -> str:
    """The cache's version key: package version + source digest."""
    return f"{package_version()}+src.{source_digest()}"


class ResultCache:
    """Results of finished jobs, one file each."""

    def __init__(self, root: str | Path, version: str | None = None):
        self.version = version or project_version()
        self.root = Path(root) / self.version

    def path(self, model_sha256: str, job: str) -> Path:
        return self.root / model_sha256 / (urllib.parse.quote(job, safe="") + ".json")

    def get(self, model_sha256: str, job: str) -> dict | None:
        """The cached result, or None if absent or not for exactly this key."""
        try:
            entry = json.loads(self.path(model_sha256, job).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        key = entry.get("key", {})
        if key != self._key(model_sha256, job):
            return None
        return entry.get("result")

    def put(self, model_sha256: str, job: str, result: dict) -> None:
        entry = {"key": self._key(model_sha256, job), "result": result}
        _write_atomic(str(self.path(model_sha256, job)),
                      (json.dumps(entry, indent=1, sort_keys=True) + "\n").encode())

    def _key(self, model_sha256: str, job: str) -> dict:
        return {"model_sha256": model_sha256, "job": job, "project_version": self.version}
