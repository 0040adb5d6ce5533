"""The LN+MLP Max-of-4 v64 model's family_gap certificate (issue 23; binary32 hints), in
certs/family_gap/ with its own policy because its check needs more interval operations
(1.75e9) and stored values than check-cert's defaults and over 8 minutes under mpmath: it
passes the audit under --arith arb with the limits it needs, certifies at most the float64
count recorded in models.json, and is refused (fail closed) under the default limits.  Slow
tier (about two minutes in Arb)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.cli import main as check_cert

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "certs" / "family_gap" / "POLICY"
LIMITS = ["--max-work", "5000000000", "--max-stored-elements", "10000000"]


def test_family_gap_policy_audit_passes(capsys):
    pytest.importorskip("flint")
    code = check_cert(["audit", str(POLICY), "--json", "--jobs", "1", "--arith", "arb",
                       *LIMITS])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["verdict"] == "passed"
    data = json.loads((ROOT / "generator" / "models" / "models.json").read_text())
    exact = {m["file"]: m["correct"] for m in data["models"]}
    (r,) = report["results"]
    assert r["verdict"] == "verified" and r["model_file_sha256"] is not None
    assert r["certificate"] == "max4_v64_ln_mlp_seed0.family-gap.jsonl"
    assert r["total"] == 64 ** 4
    assert 0.916 * 64 ** 4 <= r["correct"] <= exact[Path(r["model"]).name], r
    assert {p.name for p in POLICY.parent.glob("*.jsonl")} == {r["certificate"]}


def test_family_gap_certificate_is_refused_under_the_default_limits(capsys):
    code = check_cert(["audit", str(POLICY), "--json", "--jobs", "1"])
    assert code == 1
    out = capsys.readouterr().out
    assert "max-work" in out or "max-stored-elements" in out, out
