"""`check-cert audit POLICY` (checker/audit.py, checker/policy.py, spec/policy.md):
exit codes, verdict lines, JUnit XML and --json for passing, failing, corrupted,
truncated, stale, missing, unaudited and malformed cases; `gen-cert --pin`."""

from __future__ import annotations

import hashlib
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from checker import policy
from checker.cli import main as check_cert
from checker.errors import Malformed
from checker.statement import parse

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "generator" / "models" / "max3_v8_seed0.pt"  # 8 tokens, 3 positions: fast
OTHER_MODEL = ROOT / "generator" / "models" / "max3_v32_seed0.pt"
CERT = ROOT / "certs" / "max3_v8_seed0.cubic.jsonl"  # certifies 511 of 512 (0.998046...)
WEIGHTS = "ee57c63c28cdf2e252120d0174b2f6310766ab92749991f7d9109e29ff3f3890"
MODEL_FILE = "fd53dab7d305c7d2de89a50b020c34c71e4d1a6de48cd2f677e776b6d600e030"


def pinned(floor: str = "0.998", model_file: bool = True) -> str:
    s = f"accuracy >= {floor} and weights == sha256:{WEIGHTS}"
    return s + (f" and model_file == sha256:{MODEL_FILE}" if model_file else "")


def corrupted_theorem() -> str:
    """The shipped certificate claiming one correct sequence more than its rule proves."""
    lines = CERT.read_text().splitlines()
    header = json.loads(lines[0])
    header["theorem"] = header["theorem"].replace("correct >= 511", "correct >= 512")
    return "\n".join([json.dumps(header), *lines[1:]]) + "\n"


def truncated() -> str:
    return "\n".join(CERT.read_text().splitlines()[:-1]) + "\n"  # no qed line


def setup(root: Path, entries: list[tuple[str, str, str]], certs: dict[str, str],
          models: dict[str, Path]) -> Path:
    """root/certs/POLICY with `entries`; certificate texts in root/certs; model copies
    in root/models.  Returns the policy path."""
    (root / "certs").mkdir(parents=True)
    (root / "models").mkdir()
    for name, text in certs.items():
        (root / "certs" / name).write_text(text)
    for name, source in models.items():
        shutil.copy(source, root / "models" / name)
    lines = ["# test policy", ""] + [f"{c}  ../models/{m}  {s}" for c, m, s in entries]
    path = root / "certs" / "POLICY"
    path.write_text("\n".join(lines) + "\n")
    return path


def change_model(root: Path, name: str) -> None:
    """Replace a model file after it was pinned (a retrained model)."""
    shutil.copy(OTHER_MODEL, root / "models" / name)


def audit(capsys, policy_path, *extra) -> tuple[int, str, str]:
    code = check_cert(["audit", str(policy_path), "--jobs", "1", *map(str, extra)])
    out, err = capsys.readouterr()
    return code, out, err


def junit_cases(path: Path) -> tuple[ET.Element, dict[str, tuple[str, str | None]]]:
    """The testsuite element and {testcase name: (verdict or 'verified', message)}."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = {}
    for case in suite.findall("testcase"):
        bad = case.findall("failure") + case.findall("error")
        assert len(bad) <= 1
        cases[case.get("name")] = ((bad[0].get("type"), bad[0].get("message")) if bad
                                   else ("verified", None))
    return suite, cases


OK = CERT.read_text()
# name -> (entries, certificate texts, models, changed models, exit code, expected lines)
CASES = {
    "pass": ([("ok.jsonl", "m.pt", pinned())], {"ok.jsonl": OK}, {"m.pt": MODEL}, [], 0,
             ["VERIFIED  ok.jsonl: correct >= 511 of 512: accuracy >= 0.998046; policy holds",
              "1 of 1 certificates verified: PASSED"]),
    "floor above bound": ([("ok.jsonl", "m.pt", pinned("0.999"))], {"ok.jsonl": OK},
                          {"m.pt": MODEL}, [], 1,
                          ["REJECTED  ok.jsonl: required 'accuracy >= 0.999' does not follow",
                           "FAILED (1 rejected)"]),
    "corrupted": ([("bad.jsonl", "m.pt", pinned())], {"bad.jsonl": corrupted_theorem()},
                  {"m.pt": MODEL}, [], 1,
                  ["REJECTED  bad.jsonl: the certificate claims 'correct >= 512', which was "
                   "not verified"]),
    "truncated": ([("cut.jsonl", "m.pt", pinned())], {"cut.jsonl": truncated()},
                  {"m.pt": MODEL}, [], 1,
                  ["MALFORMED cut.jsonl: certificate ends after", "FAILED (1 malformed)"]),
    "stale": ([("ok.jsonl", "m.pt", pinned())], {"ok.jsonl": OK}, {"m.pt": MODEL}, ["m.pt"], 1,
              ["STALE     ok.jsonl: stale certificate: model changed: ", "FAILED (1 stale)"]),
    "changed, not pinned": ([("ok.jsonl", "m.pt", pinned(model_file=False))], {"ok.jsonl": OK},
                            {"m.pt": MODEL}, ["m.pt"], 1,
                            ["REJECTED  ok.jsonl: "]),
    "missing certificate": ([("gone.jsonl", "m.pt", pinned())], {}, {"m.pt": MODEL}, [], 1,
                            ["MISSING   gone.jsonl: missing certificate: "]),
    "missing model": ([("ok.jsonl", "gone.pt", pinned())], {"ok.jsonl": OK}, {}, [], 1,
                      ["MISSING   ok.jsonl: missing model file: "]),
    "unaudited": ([("ok.jsonl", "m.pt", pinned())], {"ok.jsonl": OK, "extra.jsonl": OK},
                  {"m.pt": MODEL}, [], 1,
                  ["VERIFIED  ok.jsonl", "UNAUDITED extra.jsonl: unaudited certificate: ",
                   "1 of 1 certificates verified: FAILED (1 unaudited)"]),
}


@pytest.mark.parametrize("case", CASES)
def test_audit_case(tmp_path, capsys, case):
    entries, certs, models, changed, want_code, want_lines = CASES[case]
    path = setup(tmp_path, entries, certs, models)
    for name in changed:
        change_model(tmp_path, name)
    report = tmp_path / "junit.xml"
    code, out, err = audit(capsys, path, "--junit", report)
    assert code == want_code, out + err
    for want in want_lines:
        assert want in out, (want, out)
    assert len(out.splitlines()) == len(entries) + len(set(certs) - {c for c, _, _ in entries}) + 1
    suite, cases = junit_cases(report)
    verdict = {0: "verified"}.get(want_code)
    if verdict:
        assert all(v == ("verified", None) for v in cases.values())
    else:
        bad = int(suite.get("failures")) + int(suite.get("errors"))
        assert bad >= 1
        types = {t for t, _ in cases.values()}
        word = want_lines[-1].split()[-1]  # e.g. "stale)" from "FAILED (1 stale)"
        if word.endswith(")"):
            assert word[:-1] in types, cases


def test_stale_is_not_rejected(tmp_path, capsys):
    """A changed model file is reported as stale, with both digests, not as a rejection."""
    path = setup(tmp_path, [("ok.jsonl", "m.pt", pinned())], {"ok.jsonl": OK}, {"m.pt": MODEL})
    change_model(tmp_path, "m.pt")
    code, out, _ = audit(capsys, path, "--json")
    (r,) = json.loads(out)["results"]
    assert code == 1 and r["verdict"] == "stale"
    assert f"pins sha256:{MODEL_FILE[:12]}" in r["message"]


def test_every_finding_in_one_audit(tmp_path, capsys):
    """All kinds of results in one policy, checked by two worker processes: one verdict
    line each in policy order, a summary, the JUnit report and --json agree."""
    entries = [("ok.jsonl", "m.pt", pinned()), ("floor.jsonl", "m.pt", pinned("0.999")),
               ("bad.jsonl", "m.pt", pinned()), ("cut.jsonl", "m.pt", pinned()),
               ("stale.jsonl", "s.pt", pinned()), ("gone.jsonl", "m.pt", pinned())]
    certs = {"ok.jsonl": OK, "floor.jsonl": OK, "bad.jsonl": corrupted_theorem(),
             "cut.jsonl": truncated(), "stale.jsonl": OK, "extra.jsonl": OK}
    path = setup(tmp_path, entries, certs, {"m.pt": MODEL, "s.pt": MODEL})
    change_model(tmp_path, "s.pt")
    want = {"ok.jsonl": "verified", "floor.jsonl": "rejected", "bad.jsonl": "rejected",
            "cut.jsonl": "malformed", "stale.jsonl": "stale", "gone.jsonl": "missing",
            "extra.jsonl": "unaudited"}
    report = tmp_path / "junit.xml"
    code, out, _ = audit(capsys, path, "--junit", report, "--jobs", "2")
    lines = out.splitlines()
    assert code == 1
    assert [ln.split()[:2] for ln in lines[:-1]] == [[v.upper(), c + ":"] for c, v in want.items()]
    assert lines[-1] == (f"audit {path}: 1 of 6 certificates verified: FAILED (2 rejected, "
                         "1 malformed, 1 stale, 1 missing, 1 unaudited)")
    suite, cases = junit_cases(report)
    assert {c: v for c, (v, _) in cases.items()} == want
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("7", "5", "1")
    assert cases["stale.jsonl"][1].startswith("STALE     stale.jsonl: stale certificate: model")
    code, out, _ = audit(capsys, path, "--json")
    data = json.loads(out)
    assert code == 1 and data["verdict"] == "failed" and data["exit_code"] == 1
    assert {r["certificate"]: r["verdict"] for r in data["results"]} == want
    assert data["counts"] == {"verified": 1, "rejected": 2, "malformed": 1, "stale": 1,
                              "modified": 0, "missing": 1, "unaudited": 1}


def reformatted() -> str:
    """The shipped certificate with its header re-serialized (other JSON spacing): an edit
    that still verifies, which only the certificate's own digest can show."""
    lines = CERT.read_text().splitlines()
    header = json.dumps(json.loads(lines[0]), separators=(", ", ": "))
    return "\n".join([header, *lines[1:]]) + "\n"


def cert_pin(text: str = OK) -> str:
    return f" and certificate == sha256:{hashlib.sha256(text.encode()).hexdigest()}"


def test_modified_certificate_is_a_finding(tmp_path, capsys):
    """A pinned certificate digest catches an edit that still verifies: verdict `modified`
    (not checked), a JUnit <failure> of that type and the same count in --json; the
    unedited file with the same pin passes."""
    assert reformatted() != OK
    entries = [("ok.jsonl", "m.pt", pinned() + cert_pin()),
               ("edited.jsonl", "m.pt", pinned() + cert_pin())]
    path = setup(tmp_path, entries, {"ok.jsonl": OK, "edited.jsonl": reformatted()},
                 {"m.pt": MODEL})
    edited = path.parent / "edited.jsonl"
    assert check_cert([str(edited), "--model", str(tmp_path / "models" / "m.pt"),
                       "--require", pinned(), "--jobs", "1"]) == 0  # it still verifies
    capsys.readouterr()
    report = tmp_path / "junit.xml"
    code, out, _ = audit(capsys, path, "--junit", report)
    lines = out.splitlines()
    assert code == 1 and lines[0].startswith("VERIFIED  ok.jsonl: ")
    assert lines[1].startswith("MODIFIED  edited.jsonl: modified certificate: ")
    assert f"pins sha256:{hashlib.sha256(OK.encode()).hexdigest()[:12]}" in lines[1]
    assert lines[-1].endswith("1 of 2 certificates verified: FAILED (1 modified)")
    suite, cases = junit_cases(report)
    assert cases["edited.jsonl"][0] == "modified" and cases["ok.jsonl"][0] == "verified"
    assert (suite.get("failures"), suite.get("errors")) == ("1", "0")
    code, out, _ = audit(capsys, path, "--json")
    data = json.loads(out)
    assert code == 1 and data["counts"]["modified"] == 1 and data["counts"]["verified"] == 1
    assert data["results"][0]["certificate_sha256"] == hashlib.sha256(OK.encode()).hexdigest()


def test_modified_after_hashing_is_caught_by_the_check(tmp_path, capsys, monkeypatch):
    """The check's own digest of the bytes it read decides, not the audit's earlier
    hash: a file that changes between the two is `modified`, never verified."""
    from checker import audit as audit_module

    path = setup(tmp_path, [("ok.jsonl", "m.pt", pinned() + cert_pin())],
                 {"ok.jsonl": reformatted()}, {"m.pt": MODEL})
    monkeypatch.setattr(audit_module, "certificate_sha256",
                        lambda *a: hashlib.sha256(OK.encode()).hexdigest())
    code, out, _ = audit(capsys, path)
    assert code == 1 and out.startswith("MODIFIED  ok.jsonl: modified certificate: "), out


MALFORMED_POLICIES = {
    "two fields": "ok.jsonl  ../models/m.pt\n",
    "bad statement": f"ok.jsonl  ../models/m.pt  accuracy == 0.9 and weights == sha256:{WEIGHTS}\n",
    "unparsable statement": "ok.jsonl  ../models/m.pt  accuracy >= 0.9 or correct >= 3\n",
    "named twice": f"ok.jsonl ../models/m.pt {pinned()}\n./ok.jsonl ../models/m.pt {pinned()}\n",
    "names nothing": "# only a comment\n\n",
}


@pytest.mark.parametrize("case", MALFORMED_POLICIES)
def test_malformed_policy_exits_2(tmp_path, capsys, case):
    path = setup(tmp_path, [], {"ok.jsonl": OK}, {"m.pt": MODEL})
    path.write_text(MALFORMED_POLICIES[case])
    report = tmp_path / "junit.xml"
    code, out, err = audit(capsys, path, "--junit", report)
    assert code == 2 and out == "" and err.startswith("MALFORMED: ") and "\n" == err[-1]
    assert len(err.splitlines()) == 1  # one line, no traceback
    suite, cases = junit_cases(report)
    assert list(cases.values())[0][0] == "malformed" and suite.get("errors") == "1"
    code, out, _ = audit(capsys, path, "--json")
    assert code == 2 and json.loads(out)["verdict"] == "malformed"


def test_unreadable_policies_exit_2(tmp_path, capsys):
    code, _, err = audit(capsys, tmp_path / "no-such-POLICY")
    assert code == 2 and "cannot read policy" in err
    (tmp_path / "POLICY").write_bytes(b"\xff\xfe ok.jsonl m.pt accuracy >= 0.9\n")
    code, _, err = audit(capsys, tmp_path / "POLICY")
    assert code == 2 and "not UTF-8" in err
    path = setup(tmp_path / "t", [("ok.jsonl", "m.pt", pinned())], {"ok.jsonl": OK},
                 {"m.pt": MODEL})
    code, _, err = audit(capsys, path, "--junit", tmp_path / "no-such-dir" / "j.xml")
    assert code == 2 and "cannot write JUnit report" in err  # every certificate verified, but
    # the report CI would read is missing: not a pass


def test_audit_subcommand_only_as_first_word(tmp_path, capsys, monkeypatch):
    """A certificate file literally named 'audit' is still checkable as ./audit, or
    anywhere but first; `check-cert audit` without a policy is a usage error (2)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(CERT, tmp_path / "audit")
    assert check_cert(["./audit", "--model", str(MODEL), "--jobs", "1"]) == 0
    assert check_cert(["--jobs", "1", "audit"]) == 0
    assert "VERIFIED" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        check_cert(["audit"])
    assert exc.value.code == 2


def test_policy_parse_and_pin_keep_other_lines(tmp_path):
    text = (f"# header\n\n  # indented comment\nb.jsonl  ../m.pt  {pinned()}\n"
            f"a.jsonl\t../m.pt\t{pinned('0.9')}\n")
    path = tmp_path / "certs" / "POLICY"
    path.parent.mkdir()
    path.write_text(text)
    pol = policy.load(path)
    assert [(e.certificate, e.model, e.lineno) for e in pol.entries] == [
        ("b.jsonl", "../m.pt", 4), ("a.jsonl", "../m.pt", 5)]
    assert pol.resolve("../m.pt") == tmp_path / "certs" / "../m.pt"
    assert policy.pinned_model_sha256(parse(pol.entries[0].require)) == MODEL_FILE
    assert policy.pinned_model_sha256(parse(pinned(model_file=False))) is None
    cert, model = path.parent / "a.jsonl", tmp_path / "m.pt"
    assert policy.pin(path, cert, model, pinned("0.95")) == "updated"
    after = path.read_text().splitlines()
    assert after[:4] == text.splitlines()[:4]  # comments and the other entry untouched
    assert after[4] == f"a.jsonl  ../m.pt  {pinned('0.95')}" and len(after) == 5
    assert policy.pin(path, path.parent / "c.jsonl", model, pinned()) == "added"
    assert [e.certificate for e in policy.load(path).entries] == ["b.jsonl", "a.jsonl", "c.jsonl"]
    with pytest.raises(Malformed):
        policy.pin(path, cert, model, "accuracy > 0.9")
    with pytest.raises(Malformed):
        policy.pin(path, tmp_path / "with space.jsonl", model, pinned())
    assert len(policy.load(path).entries) == 3  # refused pins changed nothing


def test_gen_cert_pin_round_trip(tmp_path, capsys, monkeypatch):
    """gen-cert --pin creates the policy, the audit passes; re-pinning updates the entry in
    place; a floor above the claimed accuracy is refused and leaves the policy as it was."""
    pytest.importorskip("torch")
    from generator.cli import main as gen_cert

    monkeypatch.chdir(tmp_path)
    shutil.copy(MODEL, tmp_path / "m.pt")
    args = ["m.pt", "--strategy", "brute-force", "-q", "-o", "certs/m.jsonl",
            "--pin", "certs/POLICY"]
    Path("certs").mkdir()
    assert gen_cert([*args, "--floor", "0.99"]) == 0
    (entry,) = policy.load("certs/POLICY").entries
    assert (entry.certificate, entry.model) == ("m.jsonl", "../m.pt")
    assert entry.require == pinned("0.99") + cert_pin(Path("certs/m.jsonl").read_text())
    assert audit(capsys, "certs/POLICY")[0] == 0
    assert gen_cert([*args, "--floor", "511/512"]) == 0
    (entry,) = policy.load("certs/POLICY").entries
    assert entry.require.startswith(pinned("511/512") + " and certificate == sha256:")
    before = Path("certs/POLICY").read_text()
    written = Path("certs/m.jsonl").read_bytes()
    assert gen_cert([*args, "--floor", "0.999"]) == 1
    assert "above the claimed accuracy" in capsys.readouterr().err
    assert Path("certs/POLICY").read_text() == before
    assert Path("certs/m.jsonl").read_bytes() == written  # not rewritten either
    code, out, _ = audit(capsys, "certs/POLICY")
    assert code == 0 and out.startswith("VERIFIED  m.jsonl: correct >= 511 of 512")
    for bad in (["--floor", "0.9"],  # no -o
                ["-o", "x.jsonl", "--floor", "0.9 and correct >= 1"],
                ["-o", "x.jsonl", "--floor", "x"]):
        with pytest.raises(SystemExit) as exc:
            gen_cert(["m.pt", "-q", "--pin", "certs/POLICY", *bad])
        assert exc.value.code == 2
    assert Path("certs/POLICY").read_text() == before and not Path("x.jsonl").exists()


def test_gen_cert_refused_floor_leaves_no_certificate(tmp_path, capsys, monkeypatch):
    """`gen-cert -o X --pin POLICY --floor F` with F above the claim writes neither X nor
    the policy (the floor is checked before -o is written): no unaudited file is left."""
    pytest.importorskip("torch")
    from generator.cli import main as gen_cert

    monkeypatch.chdir(tmp_path)
    shutil.copy(MODEL, tmp_path / "m.pt")
    Path("certs").mkdir()
    code = gen_cert(["m.pt", "--strategy", "brute-force", "-q", "-o", "certs/new.jsonl",
                     "--pin", "certs/POLICY", "--floor", "0.999"])
    err = capsys.readouterr().err
    assert code == 1 and "above the claimed accuracy 511/512" in err and "not written" in err
    assert list(Path("certs").iterdir()) == []


def test_arith_backend_is_passed_to_each_check(tmp_path, capsys):
    """--arith as in check-cert: every check runs on the chosen back-end (spec/arithmetic.md)."""
    pytest.importorskip("flint")
    path = setup(tmp_path, [("ok.jsonl", "m.pt", pinned()), ("bf.jsonl", "m.pt", pinned())],
                 {"ok.jsonl": OK, "bf.jsonl": (ROOT / "certs" /
                                               "max3_v8_seed0.brute-force.jsonl").read_text()},
                 {"m.pt": MODEL})
    code, out, _ = audit(capsys, path, "--json", "--arith", "arb", "--jobs", "2")
    data = json.loads(out)
    assert code == 0 and [r["arithmetic"] for r in data["results"]] == ["arb", "arb"], data


def test_only_checks_the_entries_of_the_files_given(tmp_path, capsys, monkeypatch):
    """--only FILE...: the entries whose certificate or model file is among the files
    (compared after resolving: other spellings and symbolic links too), all of them for the
    policy itself, none for an unrelated file; unaudited certificates are reported
    whatever the selection; no --only checks everything."""
    entries = [("a.jsonl", "m.pt", pinned()), ("b.jsonl", "s.pt", pinned())]
    setup(tmp_path, entries, {"a.jsonl": OK, "b.jsonl": OK}, {"m.pt": MODEL, "s.pt": MODEL})
    change_model(tmp_path, "s.pt")  # b is stale
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "certs" / "a.jsonl")

    def verdicts(*files):
        code, out, _ = audit(capsys, "certs/POLICY", "--json", *(("--only", *files) if files
                                                                 else ()))
        data = json.loads(out)
        return code, {r["certificate"]: r["verdict"] for r in data["results"]}, data

    for spelling in ("certs/a.jsonl", "models/../certs/a.jsonl", "link.jsonl",
                     str(tmp_path / "certs" / "a.jsonl")):
        code, got, data = verdicts(spelling)
        assert (code, got) == (0, {"a.jsonl": "verified"}), spelling
        assert (data["only"], data["entries_checked"], data["entries"]) == ([spelling], 1, 2)
    assert verdicts("models/s.pt", "README.md")[:2] == (1, {"b.jsonl": "stale"})
    assert verdicts("certs/POLICY")[:2] == (1, {"a.jsonl": "verified", "b.jsonl": "stale"})
    assert verdicts()[:2] == (1, {"a.jsonl": "verified", "b.jsonl": "stale"})
    assert verdicts("README.md")[:2] == (0, {})
    (tmp_path / "certs" / "new.jsonl").write_text(OK)  # a new certificate nobody named
    assert verdicts("certs/new.jsonl")[:2] == (1, {"new.jsonl": "unaudited"})
    code, out, _ = audit(capsys, "certs/POLICY", "--only", "certs/a.jsonl")
    assert out.splitlines()[-1] == ("audit certs/POLICY: 1 of 1 certificates verified (--only: "
                                    "1 of 2 entries concern the 1 file given): FAILED "
                                    "(1 unaudited)")
    with pytest.raises(SystemExit) as exc:
        check_cert(["audit", "certs/POLICY", "--only"])
    assert exc.value.code == 2


def test_only_selects_a_save_pretrained_directory_by_any_of_its_files(tmp_path):
    """A changed config.json or model.safetensors of a Hugging Face directory selects
    the entries that name the directory."""
    (tmp_path / "hf").mkdir()
    path = tmp_path / "POLICY"
    path.write_text(f"a.jsonl  hf  {pinned()}\nb.jsonl  m.pt  {pinned()}\n")
    pol = policy.load(path)
    assert [e.certificate for e in pol.entries_for([str(tmp_path / "hf" / "config.json")])] \
        == ["a.jsonl"]
    assert [e.certificate for e in pol.entries_for([str(tmp_path / "hf")])] == ["a.jsonl"]
    assert pol.entries_for([str(tmp_path / "hfx" / "config.json")]) == ()
    assert len(pol.entries_for([str(path)])) == 2
