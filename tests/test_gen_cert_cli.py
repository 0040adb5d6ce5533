"""gen-cert's command line: clear messages, no tracebacks, on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from generator.cli import main as gen_cert

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "generator" / "models" / "max3_v8_seed0.pt"
BIG = ROOT / "generator" / "models" / "max4_v64_seed0.pt"


def test_not_a_model_file(tmp_path, capsys):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"this is not a model")
    assert gen_cert([str(junk), "-q"]) == 2
    err = capsys.readouterr().err
    assert "junk.pt" in err and "Traceback" not in err


def test_missing_file(tmp_path, capsys):
    assert gen_cert([str(tmp_path / "absent.pt"), "-q"]) == 2
    assert "absent.pt" in capsys.readouterr().err


def test_brute_force_refuses_a_model_too_big_to_enumerate(capsys):
    assert gen_cert([str(BIG), "--strategy", "brute-force", "-q"]) == 2
    err = capsys.readouterr().err
    assert "does not apply" in err and "cubic" in err


def test_writes_a_certificate_that_checks(tmp_path):
    out = tmp_path / "cert.jsonl"
    assert gen_cert([str(TINY), "--strategy", "brute-force", "-o", str(out), "-q"]) == 0
    done = subprocess.run([sys.executable, "-m", "checker", str(out), "--model", str(TINY)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "VERIFIED" in done.stdout and "correct >= 511" in done.stdout
