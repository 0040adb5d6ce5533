"""Installing the package without extras gives a working checker with
neither torch nor numpy (a fresh virtual environment, a real pip install), and
the package builds as a wheel and an sdist that install and check a certificate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CERT = ROOT / "certs" / "max3_v8_seed0.cubic.jsonl"
MODEL_NAME = "max3_v8_seed0.pt"
# what a build may write into a source tree, and what no build needs
NOT_SOURCES = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                     ".pytest_cache", ".ruff_cache", ".hypothesis", ".venv",
                                     ".benchmarks")


def clean_env() -> dict:
    """The environment without PYTHONPATH: the venv must import its own install, not the
    working tree the tests were started from."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def fresh_venv(path: Path) -> Path:
    venv.create(path, with_pip=True)
    return path / "bin"


def pip_install(bin_dir: Path, target) -> None:
    pip = subprocess.run([bin_dir / "python", "-m", "pip", "install", "-q", str(target)],
                         capture_output=True, text=True, env=clean_env())
    assert pip.returncode == 0, pip.stderr[-2000:]


def test_checker_installs_and_runs_without_torch_or_numpy(tmp_path):
    bin_dir = fresh_venv(tmp_path / "venv")
    pip_install(bin_dir, ROOT)
    listed = subprocess.run([bin_dir / "python", "-m", "pip", "list"], capture_output=True,
                            text=True).stdout.lower()
    assert "mpmath" in listed and "lark" in listed
    assert "torch" not in listed and "numpy" not in listed
    model = ROOT / "generator" / "models" / MODEL_NAME
    done = subprocess.run([bin_dir / "check-cert", str(CERT), "--model", str(model)],
                          capture_output=True, text=True, cwd=tmp_path, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("VERIFIED")
    gen = subprocess.run([bin_dir / "gen-cert", str(model)], capture_output=True, text=True,
                         cwd=tmp_path, env=clean_env())
    assert gen.returncode != 0 and "pip install" in gen.stderr and "Traceback" not in gen.stderr


def build(src: Path, outdir: Path) -> float:
    """`python -m build --sdist --wheel` of `src`; seconds taken.  Build isolation fetches
    setuptools from the package index; where it cannot, the installed setuptools is used
    (--no-isolation) and the first attempt's error is kept for the failure message."""
    started = time.monotonic()
    cmd = [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(outdir), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=clean_env())
    if done.returncode != 0:
        pytest.importorskip("setuptools")
        first = done.stdout[-1000:] + done.stderr[-1000:]
        done = subprocess.run([*cmd, "--no-isolation"], capture_output=True, text=True,
                              env=clean_env())
        assert done.returncode == 0, first + done.stdout[-1000:] + done.stderr[-1000:]
    return time.monotonic() - started


@pytest.mark.slow
def test_wheel_and_sdist_build_install_and_check(tmp_path):
    """`python -m build` makes a wheel and an sdist (of a copy of the tree, so the checkout
    is not written to); the sdist holds the statement grammar; the wheel, installed in a
    fresh venv, checks a shipped certificate against the model file the wheel itself
    installed (package data)."""
    pytest.importorskip("build")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCES, symlinks=True)
    dist = tmp_path / "dist"
    seconds = build(src, dist)
    (sdist,) = dist.glob("maxk_certify-*.tar.gz")
    (wheel,) = dist.glob("maxk_certify-*-py3-none-any.whl")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"pyproject.toml", "checker/statement.lark", "checker/cli.py",
            f"generator/models/{MODEL_NAME}"} <= names, sorted(names)
    with zipfile.ZipFile(wheel) as whl:
        assert {"checker/statement.lark", f"generator/models/{MODEL_NAME}"} <= set(whl.namelist())
    bin_dir = fresh_venv(tmp_path / "venv")
    pip_install(bin_dir, wheel)
    where = subprocess.run([bin_dir / "python", "-c",
                            "import checker, generator; print(checker.__file__); "
                            "print(generator.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=clean_env())
    installed = [Path(p) for p in where.stdout.split()]
    assert len(installed) == 2 and all(tmp_path / "venv" in p.parents for p in installed), where
    model = installed[1].parent / "models" / MODEL_NAME
    done = subprocess.run([bin_dir / "check-cert", str(CERT), "--model", str(model),
                           "--require", "accuracy >= 0.998"],
                          capture_output=True, text=True, cwd=tmp_path, env=clean_env())
    assert done.returncode == 0 and done.stdout.startswith("VERIFIED"), done.stderr
    print(f"wheel and sdist built in {seconds:.1f} s")
