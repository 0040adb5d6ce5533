"""Installing the package without extras gives a working checker with
neither torch nor numpy (a fresh virtual environment, a real pip install)."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_checker_installs_and_runs_without_torch_or_numpy(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    pip = subprocess.run([bin_dir / "python", "-m", "pip", "install", "-q", str(ROOT)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-2000:]
    listed = subprocess.run([bin_dir / "python", "-m", "pip", "list"], capture_output=True,
                            text=True).stdout.lower()
    assert "mpmath" in listed and "lark" in listed
    assert "torch" not in listed and "numpy" not in listed
    cert = ROOT / "certs" / "max3_v8_seed0.cubic.jsonl"
    model = ROOT / "generator" / "models" / "max3_v8_seed0.pt"
    done = subprocess.run([bin_dir / "check-cert", str(cert), "--model", str(model)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("VERIFIED")
    gen = subprocess.run([bin_dir / "gen-cert", str(model)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert gen.returncode != 0 and "pip install" in gen.stderr and "Traceback" not in gen.stderr
