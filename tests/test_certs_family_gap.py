"""The LN+MLP Max-of-4 v64 model's family_gap certificate (issue 23; binary32 hints): its check
needs more interval operations (1.75e9) and stored values than check-cert's defaults, and 38
minutes under mpmath (about 100 s under Arb), so its certs/POLICY entry sets `--arith=arb
--max-work=5000000000 --max-stored-elements=10000000` (spec/policy.md §entry options).  The
audit of the whole policy (tests/test_certs_audit.py) checks it and bounds its count by
models.json's; here: the entry is the documented one, its floor is the shipped bound, and under
the default limits, given explicitly on the command line, it is refused (fail closed)."""

from __future__ import annotations

import json
from pathlib import Path

from checker import policy
from checker.cli import main as check_cert

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "certs" / "POLICY"
CERT = "max4_v64_ln_mlp_seed0.family-gap.jsonl"


def test_family_gap_entry_pins_the_shipped_bound():
    (e,) = [e for e in policy.load(POLICY).entries if e.certificate == CERT]
    assert e.options == ("--arith=arb", "--max-work=5000000000",
                         "--max-stored-elements=10000000")
    assert e.model == "../generator/models/max4_v64_ln_mlp_seed0.pt"
    assert e.require.startswith("accuracy >= 0.916 and ")
    assert f"certificate == sha256:{policy.file_sha256(ROOT / 'certs' / CERT)}" in e.require


def test_family_gap_certificate_is_refused_under_the_default_limits(capsys):
    code = check_cert(["audit", str(POLICY), "--json", "--jobs", "1", "--only",
                       str(ROOT / "certs" / CERT), "--arith", "mpmath", "--max-work", "50000000",
                       "--max-stored-elements", str(1 << 22)])
    assert code == 1
    (r,) = json.loads(capsys.readouterr().out)["results"]
    assert r["verdict"] == "malformed", r
    assert "max-work" in r["message"] or "max-stored-elements" in r["message"], r
