"""The modular-addition demonstration (issue 20): its certificate's check needs more interval
operations (~2.2e9) than check-cert's default --max-work, so its certs/POLICY entry sets
`--arith=arb --max-work=3000000000` (spec/policy.md §entry options).  The audit of the whole
policy (tests/test_certs_audit.py) checks it under those options and compares the count with
models.json; here: the entry is the one documented, and the command line's default limit,
given explicitly, overrides the entry's and is refused (fail closed)."""

from __future__ import annotations

import json
from pathlib import Path

from checker import policy
from checker.cli import main as check_cert

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "certs" / "POLICY"
CERT = "modadd_p113_seed0.forward.jsonl"


def entry() -> policy.Entry:
    (e,) = [e for e in policy.load(POLICY).entries if e.certificate == CERT]
    return e


def test_modadd_entry_needs_arb_and_its_work():
    e = entry()
    assert e.options == ("--arith=arb", "--max-work=3000000000")
    assert "task == modular_addition and p == 113 and accuracy >= 1" in e.require
    data = json.loads((ROOT / "generator" / "models" / "models.json").read_text())
    (recorded,) = [t for t in data["accuracy_tasks"]["certificates"] if t["certificate"] == CERT]
    assert recorded["correct"] == recorded["total"] == 113 ** 2


def test_modadd_is_refused_under_the_default_work_limit(capsys):
    code = check_cert(["audit", str(POLICY), "--json", "--jobs", "1", "--only",
                       str(ROOT / "certs" / CERT), "--arith", "mpmath", "--max-work", "50000000"])
    assert code == 1
    (r,) = json.loads(capsys.readouterr().out)["results"]
    assert r["verdict"] == "malformed" and "max-work" in r["message"], r
