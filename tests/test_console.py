"""check-cert's process entry (checker.cli.console, issue 22): it freezes the imported
objects out of the cyclic collector and ends with os._exit once both streams are flushed.
What a user sees must not change: the whole output reaches a file or a pipe, the exit code
is main()'s (0 verified, 1 rejected, 2 malformed), and a profiler or tracer still gets the
interpreter's usual exit (cProfile prints its table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CERT = ROOT / "certs" / "max3_v8_seed0.cubic.jsonl"
MODEL = ROOT / "generator" / "models" / "max3_v8_seed0.pt"
# without PYTHONUNBUFFERED (set on some machines): the streams are block-buffered, as for most users
ENV = {k: x for k, x in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"PYTHONPATH": str(ROOT)}


def _truncated(tmp_path) -> Path:
    cut = tmp_path / "cut.jsonl"
    cut.write_text(CERT.read_text()[:500])
    return cut


@pytest.mark.parametrize("entry", [["-m", "checker"], ["-m", "checker.cli"]])
@pytest.mark.parametrize("case,code", [("good", 0), ("over", 1), ("cut", 2)])
def test_the_whole_json_report_reaches_a_file_with_mains_exit_code(tmp_path, entry, case, code):
    """over: a true certificate asked for more than it proves (--require)."""
    cert = _truncated(tmp_path) if case == "cut" else CERT
    more = ["--require", "accuracy >= 1"] if case == "over" else []
    out = tmp_path / "out.json"
    with out.open("w") as sink:  # a file: block-buffered, flushed only by the entry itself
        done = subprocess.run([sys.executable, *entry, str(cert), "--model", str(MODEL),
                               "--json", "--jobs", "1", *more], stdout=sink,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == code, done.stderr
    report = json.loads(out.read_text())
    assert report["verdict"] == {0: "verified", 1: "rejected", 2: "malformed"}[code]
    assert report.get("exit_code", 0) == code
    if code == 0:
        assert report["correct"] == 511 and report["weights_bound_to_model_file"] is True


def test_the_human_report_is_whole_through_a_pipe():
    done = subprocess.run([sys.executable, "-m", "checker", str(CERT), "--model", str(MODEL),
                           "--jobs", "1"], capture_output=True, text=True, cwd=ROOT, env=ENV,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first.startswith("VERIFIED") and any("proof length" in s for s in rest)
    assert done.stdout.endswith("\n")


def test_a_profiled_check_still_prints_the_profile():
    done = subprocess.run([sys.executable, "-m", "cProfile", "-s", "tottime", "-m",
                           "checker.cli", str(CERT), "--jobs", "1"], capture_output=True,
                          text=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "VERIFIED" in done.stdout and "ncalls" in done.stdout  # cProfile's table
