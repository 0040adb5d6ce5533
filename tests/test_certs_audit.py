"""CI audit of this repository's own certificates, through the command users run:
`check-cert audit certs/POLICY` must pass (every certificate in certs/ is named,
verifies against its model file and implies its pinned statement), and no
certified bound may exceed the exact count recorded for the shipped model."""

from __future__ import annotations

import json
from pathlib import Path

from checker.cli import main as check_cert

ROOT = Path(__file__).resolve().parent.parent
CERTS = ROOT / "certs"


def exact_counts() -> dict[str, int]:
    data = json.loads((ROOT / "generator" / "models" / "models.json").read_text())
    models = data["models"] if isinstance(data, dict) else data
    return {m["file"]: m["correct"] for m in models}


def test_certs_policy_audit_passes(capsys):
    code = check_cert(["audit", str(CERTS / "POLICY"), "--json", "--jobs", "2"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["verdict"] == "passed" and report["exit_code"] == 0
    results = report["results"]
    assert {r["certificate"] for r in results} == {p.name for p in CERTS.glob("*.jsonl")}
    exact = exact_counts()
    for r in results:
        assert r["verdict"] == "verified", r
        assert r["model_file_sha256"] is not None  # checked against the model file
        if "correct" in r:  # accuracy; overwhelm certificates state no count
            assert r["correct"] <= exact[Path(r["model"]).name], r
        else:
            assert r["overwhelm"], r


def test_pre_commit_hook_runs_this_audit():
    """.pre-commit-hooks.yaml runs `check-cert audit` on this repository's policy, once per
    commit (not once per file), from the checker-only install."""
    hook = (ROOT / ".pre-commit-hooks.yaml").read_text()
    for line in ("- id: check-cert-audit", "entry: check-cert audit", "args: [certs/POLICY]",
                 "language: python", "pass_filenames: false"):
        assert f"\n{line}\n" in hook or f"\n  {line}\n" in hook, line
    assert (ROOT / "certs" / "POLICY").is_file()
