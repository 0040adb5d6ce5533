"""A policy entry's own options (spec/policy.md §entry options): `--arith=NAME` and check-cert's
`--max-*` limits between the model file and the statement, for that entry alone; the command
line overrides them; anything the audit does not understand is refused; an entry that raises a
limit pins its certificate; `gen-cert --pin` keeps them."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
from test_audit import CERT, MODEL, audit, pinned

import checker.arith
from checker import policy
from checker.arith import Unavailable
from checker.cli import main as check_cert
from checker.errors import Malformed

CERT_PIN = f"certificate == sha256:{policy.file_sha256(CERT)}"
STATEMENT = f"{pinned()} and {CERT_PIN}"


def write_policy(root: Path, *lines: str) -> Path:
    """root/POLICY with `lines` (each 'CERT MODEL [OPTIONS] STATEMENT'); the shipped
    max3_v8 cubic certificate as root/ok.jsonl and its model as root/m.pt."""
    shutil.copy(CERT, root / "ok.jsonl")
    shutil.copy(MODEL, root / "m.pt")
    path = root / "POLICY"
    path.write_text("\n".join(lines) + "\n")
    return path


def results(capsys, path: Path, *extra) -> tuple[int, dict]:
    code, out, _ = audit(capsys, path, "--json", *extra)
    (result,) = json.loads(out)["results"]
    return code, result


@pytest.fixture(scope="module")
def work() -> int:
    """The charged work of the shipped certificate's check (what --max-work bounds)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert check_cert([str(CERT), "--model", str(MODEL), "--json"]) == 0
    return json.loads(out.getvalue())["work"]


def test_entry_limit_applies_to_its_entry_exactly(tmp_path, capsys, work):
    """--max-work=W passes, W - 1 is refused (exit 1, malformed, naming the limit): the
    entry's own limit is the one in force, not check-cert's default (50,000,000)."""
    assert work < 50_000_000
    at = write_policy(tmp_path, f"ok.jsonl  m.pt  --max-work={work}  {STATEMENT}")
    code, r = results(capsys, at)
    assert code == 0 and r["verdict"] == "verified" and r["options"] == [f"--max-work={work}"]
    below = write_policy(tmp_path, f"ok.jsonl  m.pt  --max-work={work - 1}  {STATEMENT}")
    code, r = results(capsys, below)
    assert code == 1 and r["verdict"] == "malformed" and "max-work" in r["message"], r


def test_command_line_overrides_the_entry(tmp_path, capsys, work):
    path = write_policy(tmp_path, f"ok.jsonl  m.pt  --max-work=1  {STATEMENT}")
    assert results(capsys, path)[1]["verdict"] == "malformed"
    code, r = results(capsys, path, "--max-work", work)
    assert code == 0 and r["verdict"] == "verified", r


def test_entry_arith_and_its_override(tmp_path, capsys):
    pytest.importorskip("flint")
    path = write_policy(tmp_path, f"ok.jsonl  m.pt  --arith=arb  {pinned()}")
    code, r = results(capsys, path)
    assert code == 0 and r["arithmetic"] == "arb", r
    code, r = results(capsys, path, "--arith", "mpmath")
    assert code == 0 and r["arithmetic"] == "mpmath", r
    plain = write_policy(tmp_path, f"ok.jsonl  m.pt  {pinned()}")
    assert results(capsys, plain)[1]["arithmetic"] == "mpmath"  # the default


def test_unavailable_entry_back_end_is_that_entrys_finding(tmp_path, capsys, monkeypatch):
    """Without python-flint an entry asking for --arith=arb is malformed, with the reason;
    the other entries are still checked (exit 1, not 2)."""
    real = checker.arith.get

    def no_flint(name="mpmath"):
        if name == "arb":
            raise Unavailable("--arith arb needs python-flint >= 0.9 (test)")
        return real(name)

    monkeypatch.setattr(checker.arith, "get", no_flint)
    shutil.copy(CERT, tmp_path / "two.jsonl")
    path = write_policy(tmp_path, f"ok.jsonl  m.pt  --arith=arb  {pinned()}",
                        f"two.jsonl  m.pt  {pinned()}")
    code, out, _ = audit(capsys, path, "--json")
    report = json.loads(out)
    assert code == 1
    first, second = report["results"]
    assert first["verdict"] == "malformed" and "python-flint" in first["message"]
    assert "internal error" not in first["message"]  # a finding with its reason, not a crash
    assert second["verdict"] == "verified"


BAD_OPTIONS = {
    "unknown option": ("--max-speed=3", "unknown option '--max-speed'"),
    "no value": ("--arith", "expected --OPTION=VALUE"),
    "empty value": ("--arith=", "expected --OPTION=VALUE"),
    "unknown back-end": ("--arith=float", "unknown arithmetic 'float'"),
    "twice": ("--arith=arb --arith=mpmath", "--arith is given twice"),
    "limit twice": ("--max-work=5 --max-work=6", "--max-work is given twice"),
    "not an integer": ("--max-work=5e9", "is not an integer"),
    "zero": ("--max-lines=0", "must be positive"),
    "negative": ("--max-seconds=-1", "must be positive"),
    "not finite": ("--max-seconds=inf", "must be positive"),
    "nan": ("--max-seconds=nan", "must be positive"),
}


@pytest.mark.parametrize("case", BAD_OPTIONS)
def test_bad_option_makes_the_policy_malformed(tmp_path, capsys, case):
    """Refused, never ignored: exit 2 naming the line, and nothing is checked."""
    option, message = BAD_OPTIONS[case]
    path = write_policy(tmp_path, "# header", f"ok.jsonl  m.pt  {option}  {STATEMENT}")
    code, _, err = audit(capsys, path)
    assert code == 2 and "POLICY:2: " in err and message in err, err


def test_raised_limit_needs_a_certificate_pin(tmp_path, capsys):
    path = write_policy(tmp_path, f"ok.jsonl  m.pt  --max-work=9000000000  {pinned()}")
    code, _, err = audit(capsys, path)
    assert code == 2 and "must pin its certificate" in err, err
    # --arith alone raises nothing: no pin needed
    assert policy.parse_line(f"a  m  --arith=arb  {pinned()}", 1, "P").arith == "arb"


def test_options_need_a_statement_after_them():
    with pytest.raises(Malformed, match="expected a statement after the options"):
        policy.parse_line("a.jsonl  m.pt  --arith=arb", 7, "P")


def test_options_are_parsed_whatever_the_whitespace():
    entry = policy.parse_line(f"a.jsonl\tm.pt \t--arith=arb\t --max-stored-elements=7   "
                              f"{STATEMENT}", 1, "P")
    assert entry.options == ("--arith=arb", "--max-stored-elements=7")
    assert entry.arith == "arb" and entry.limits == {"max_stored_elements": 7}
    assert entry.require == STATEMENT


def test_pin_keeps_an_entrys_options(tmp_path):
    """Re-pinning a regenerated certificate (gen-cert --pin) keeps the auditor's options;
    a new entry has none."""
    path = write_policy(tmp_path, f"ok.jsonl  m.pt  --arith=arb --max-work=77  {STATEMENT}")
    new_statement = STATEMENT.replace("0.998", "0.99")
    assert policy.pin(path, tmp_path / "ok.jsonl", tmp_path / "m.pt", new_statement) == "updated"
    (entry,) = policy.load(path).entries
    assert entry.options == ("--arith=arb", "--max-work=77") and entry.require == new_statement
    shutil.copy(CERT, tmp_path / "new.jsonl")
    assert policy.pin(path, tmp_path / "new.jsonl", tmp_path / "m.pt", pinned()) == "added"
    assert policy.load(path).entries[1].options == ()


def test_pin_refuses_to_drop_the_certificate_pin_of_a_raised_limit(tmp_path):
    path = write_policy(tmp_path, f"ok.jsonl  m.pt  --max-work=77  {STATEMENT}")
    before = path.read_text()
    with pytest.raises(Malformed, match="must pin its certificate"):
        policy.pin(path, tmp_path / "ok.jsonl", tmp_path / "m.pt", pinned())
    assert path.read_text() == before


def test_shipped_policy_options_are_the_ones_documented():
    """certs/POLICY: exactly the two certificates whose checks need Arb and more work carry
    options, and each of those pins its certificate."""
    root = Path(__file__).resolve().parent.parent
    with_options = {e.certificate: e for e in policy.load(root / "certs" / "POLICY").entries
                    if e.options}
    assert set(with_options) == {"modadd_p113_seed0.forward.jsonl",
                                 "max4_v64_ln_mlp_seed0.family-gap.jsonl"}
    for entry in with_options.values():
        assert entry.arith == "arb" and entry.limits["max_work"] > 50_000_000
        assert "certificate == sha256:" in entry.require
