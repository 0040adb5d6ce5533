"""CI audit of this repository's own certificates, through the command users run:
`check-cert audit certs/POLICY` must pass (every certificate in certs/ is named,
verifies against its model file and implies its pinned statement), and no
certified bound may exceed the exact count recorded for the shipped model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from checker import policy
from checker.cli import main as check_cert

ROOT = Path(__file__).resolve().parent.parent
CERTS = ROOT / "certs"


def exact_counts() -> dict[str, int]:
    data = json.loads((ROOT / "generator" / "models" / "models.json").read_text())
    models = data["models"] if isinstance(data, dict) else data
    return {m["file"]: m["correct"] for m in models}


def exact_task_counts() -> dict[str, int]:
    """Certificate name -> the exact float64 count of its task (models.json accuracy_tasks)."""
    data = json.loads((ROOT / "generator" / "models" / "models.json").read_text())
    return {e["certificate"]: e["correct"] for e in data["accuracy_tasks"]["certificates"]}


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
        if "correct" in r and r["task"] != "max_of_k":  # spec/theorem.md §3
            assert r["correct"] == exact_task_counts()[r["certificate"]], r
        elif "correct" in r:  # accuracy; overwhelm certificates state no count
            assert r["correct"] <= exact[Path(r["model"]).name], r
        else:
            assert r["overwhelm"], r


def pre_commit_hooks() -> dict[str, dict]:
    yaml = pytest.importorskip("yaml")  # pre-commit's own reader of the file
    return {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}


def test_pre_commit_hooks_audit_this_policy():
    """.pre-commit-hooks.yaml: `check-cert-audit` checks the entries of the changed files
    (pre-commit appends them after --only), once per commit; `check-cert-audit-all` every
    entry.  Both run from the checker-only install whenever a certificate, model file,
    Hugging Face config or the policy changes."""
    hooks = pre_commit_hooks()
    changed, every = hooks["check-cert-audit"], hooks["check-cert-audit-all"]
    assert changed["entry"] == every["entry"] == "check-cert audit"
    assert changed["args"] == ["certs/POLICY", "--only"] and changed["pass_filenames"] is True
    assert changed["require_serial"] is True
    assert every["args"] == ["certs/POLICY"] and every["pass_filenames"] is False
    for hook in (changed, every):
        assert hook["language"] == "python"
        # the policy's --arith=arb entries need python-flint in the hook's environment
        assert hook["additional_dependencies"] == ["python-flint>=0.9"]
        for path in ("certs/a.jsonl", "generator/models/m.pt", "m.safetensors", "certs/POLICY",
                     "models/hf/config.json"):
            assert re.search(hook["files"], path), path
        assert not re.search(hook["files"], "README.md")
    local = re.search(r"repo: local.*?files: (\S+)\n", (ROOT / "spec" / "policy.md").read_text(),
                      re.S)
    assert local and local.group(1) == changed["files"]  # the documented local hook agrees
    assert (ROOT / "certs" / "POLICY").is_file()


def test_pre_commit_hook_command_checks_only_the_changed_entry(capsys, monkeypatch):
    """The command the hook runs for a commit that changes one certificate, as pre-commit
    builds it (entry, args, then the changed files, from the repository root): that one
    entry is checked, and the audit passes."""
    hook = pre_commit_hooks()["check-cert-audit"]
    monkeypatch.chdir(ROOT)
    argv = [*hook["entry"].split()[1:], *hook["args"], "certs/max3_v8_seed0.cubic.jsonl",
            "README.md"]
    code = check_cert([*argv, "--json", "--jobs", "1"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert [r["certificate"] for r in report["results"]] == ["max3_v8_seed0.cubic.jsonl"]


def _workflow(doc: Path) -> str:
    """The GitHub Actions workflow shown in `doc` (the yaml block naming actions/checkout)."""
    blocks = re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S)
    (workflow,) = [b for b in blocks if "actions/checkout" in b]
    return workflow


def test_github_actions_workflow_works_as_written():
    """README's workflow (the same in spec/policy.md) is complete and has no placeholder: it
    checks out, sets up Python, installs the checker from the checkout and runs the audit
    this repository's own test runs, with options the audit accepts."""
    yaml = pytest.importorskip("yaml")
    from checker.audit import parser

    text = _workflow(ROOT / "README.md")
    assert text == _workflow(ROOT / "spec" / "policy.md")
    assert "<" not in text and "owner" not in text
    (job,) = yaml.safe_load(text)["jobs"].values()
    steps = job["steps"]
    assert [s.get("uses", "").split("@")[0] for s in steps[:2]] == ["actions/checkout",
                                                                   "actions/setup-python"]
    runs = [s["run"] for s in steps if "run" in s]
    # the package of the checked-out repository, with python-flint for the --arith=arb entries
    assert runs[0] == "pip install '.[fast]'"
    assert any(e.arith == "arb" for e in policy.load(ROOT / "certs" / "POLICY").entries)
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(d.startswith("python-flint")
               for d in pyproject["project"]["optional-dependencies"]["fast"])
    command = runs[1].split()
    assert command[:2] == ["check-cert", "audit"]
    args = parser().parse_args(command[2:])
    assert (ROOT / args.policy).is_file() and args.junit == "check-cert.xml"
    assert steps[-1]["with"]["report_paths"] == args.junit
