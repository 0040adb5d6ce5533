"""CI audit: every certificate in certs/ verifies against its model file and
implies the policy pinned in certs/POLICY; no certified bound exceeds the
exact count recorded for the shipped model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checker.cli import main as check_cert

ROOT = Path(__file__).resolve().parent.parent
CERTS = ROOT / "certs"


def policy_entries():
    for line in (CERTS / "POLICY").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            cert, model, statement = line.split(None, 2)
            yield cert, model, statement


def exact_counts() -> dict[str, int]:
    data = json.loads((ROOT / "generator" / "models" / "models.json").read_text())
    models = data["models"] if isinstance(data, dict) else data
    return {m["file"]: m["correct"] for m in models}


def test_every_certificate_is_audited():
    audited = {cert for cert, _, _ in policy_entries()}
    assert audited == {p.name for p in CERTS.glob("*.jsonl")}


@pytest.mark.parametrize("cert,model,statement", list(policy_entries()))
def test_certificate_meets_policy(cert, model, statement, capsys):
    code = check_cert([str(CERTS / cert), "--model", str(ROOT / model), "--require", statement,
                       "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 0, verdict
    assert verdict["verdict"] == "verified"
    assert verdict["correct"] <= exact_counts()[Path(model).name]
