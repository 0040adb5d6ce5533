"""The modular-addition demonstration (issue 20): its certificate, in certs/modadd/ with its
own policy because its check needs more interval operations (~2.2e9) than check-cert's default
--max-work, passes the audit under --arith arb with the work it needs, and certifies exactly
the float64 count recorded in models.json (slow tier: about a minute in Arb)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.cli import main as check_cert

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "certs" / "modadd" / "POLICY"
MAX_WORK = "3000000000"


def test_modadd_policy_audit_passes(capsys):
    pytest.importorskip("flint")
    code = check_cert(["audit", str(POLICY), "--json", "--arith", "arb", "--max-work", MAX_WORK])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    data = json.loads((ROOT / "generator" / "models" / "models.json").read_text())
    exact = {Path(e["certificate"]).name: e["correct"]
             for e in data["accuracy_tasks"]["certificates"]}
    for r in report["results"]:
        assert r["task"] == "modular_addition" and r["task_params"] == {"p": 113}
        assert r["total"] == 113 ** 2
        assert r["correct"] == exact[r["certificate"]], r


def test_modadd_is_refused_under_the_default_work_limit(capsys):
    code = check_cert(["audit", str(POLICY), "--json"])
    assert code == 1
    assert "max-work" in capsys.readouterr().out
