"""check-cert's command line: --json output, stdin, exit codes, messages."""

from __future__ import annotations

import io
import json
import sys
from fractions import Fraction

import pytest
from checker_fixtures import (
    artifacts,
    dump,
    header_claim,
    parse,
    run_checker_subprocess,
    workdir,
    write_bytes,
    write_lines,
)

from checker.cli import floor_decimal, main


@pytest.fixture(scope="module")
def art():
    return artifacts()


@pytest.fixture(scope="module")
def files(art):
    brute = write_lines(art.brute, "cli_brute.jsonl")
    cubic = write_lines(art.cubic, "cli_cubic.jsonl")
    objs = parse(art.brute)
    objs[0]["theorem"] = objs[0]["theorem"].replace("correct >= 31", "correct >= 32")
    rejected = write_lines(dump(objs), "cli_rejected.jsonl")
    malformed = write_lines(art.brute[:-1], "cli_malformed.jsonl")
    return {"brute": brute, "cubic": cubic, "rejected": rejected, "malformed": malformed}


def run(capsys, *argv):
    code = main([*map(str, argv), "--jobs", "1"])
    out, err = capsys.readouterr()
    return code, out, err


# -- --json ---------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["brute", "cubic"])
def test_json_success(art, files, capsys, which):
    code, out, err = run(capsys, files[which], "--json", "--model", art.model)
    assert code == 0 and err == ""
    s = json.loads(out)
    n = header_claim(parse(getattr(art, which)))
    assert s["verdict"] == "verified"
    assert s["correct"] == n and type(s["correct"]) is int
    assert s["total"] == 216
    num, den = map(int, s["accuracy"].split("/"))
    assert num * 216 == n * den  # a reduced fraction equal to n/216
    assert s["accuracy_floor"] == floor_decimal(Fraction(n, 216))
    assert s["strategy"] == {"brute": "brute-force", "cubic": "cubic"}[which]
    assert s["theorem"] == parse(getattr(art, which))[0]["theorem"]
    assert len(s["weights_sha256"]) == 64
    assert s["model_file"] == str(art.model) and len(s["model_file_sha256"]) == 64
    assert s["lines"] == len(getattr(art, which))
    assert isinstance(s["rules"], list) and s["rules"]


def test_json_success_without_model(files, capsys):
    code, out, err = run(capsys, files["brute"], "--json")
    s = json.loads(out)
    assert code == 0 and s["model_file"] is None and s["model_file_sha256"] is None


@pytest.mark.parametrize("which, verdict, exit_code, needle", [
    ("rejected", "rejected", 1, "was not verified"),
    ("malformed", "malformed", 2, "without a qed"),
])
def test_json_failure(files, capsys, which, verdict, exit_code, needle):
    code, out, err = run(capsys, files[which], "--json")
    assert code == exit_code
    s = json.loads(out)
    assert s["verdict"] == verdict and s["exit_code"] == exit_code
    assert isinstance(s["message"], str) and needle in s["message"]
    assert set(s) == {"verdict", "exit_code", "message"}
    assert out.count("\n") == 1  # one JSON object on one line


def test_json_failure_require(files, capsys):
    code, out, err = run(capsys, files["brute"], "--json", "--require", "accuracy >= 0.99")
    s = json.loads(out)
    assert code == 1 and s == {"verdict": "rejected", "exit_code": 1, "message": s["message"]}
    assert "accuracy >= 0.99" in s["message"]
    code, out, err = run(capsys, files["brute"], "--json", "--require", "accuracy > 0.99")
    assert code == 2 and json.loads(out)["verdict"] == "malformed"


def test_json_nonexistent_file(capsys):
    code, out, err = run(capsys, workdir() / "no-such-certificate.jsonl", "--json")
    s = json.loads(out)
    assert code == 2 and s["verdict"] == "malformed" and s["exit_code"] == 2
    assert "cannot open" in s["message"] and "no-such-certificate" in s["message"]


# -- human output and exit codes ---------------------------------------------------------------

def test_human_success(art, files, capsys):
    code, out, err = run(capsys, files["brute"], "--model", art.model,
                         "--require", "accuracy >= 0.1")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("VERIFIED  task == max_of_k")
    assert "correct >= 31 of 216 sequences: accuracy >= 31/216 >= 0.143518" in out
    assert "weights are exactly those of" in out
    assert "required and holds: accuracy >= 0.1" in out


def test_nonexistent_file_exit_2(capsys):
    missing = workdir() / "missing.jsonl"
    code, out, err = run(capsys, missing)
    assert code == 2 and out == ""
    assert err == f"MALFORMED: cannot open {missing}: No such file or directory\n"


def test_directory_instead_of_file_exit_2(capsys):
    code, out, err = run(capsys, workdir())
    assert code == 2 and err.startswith("MALFORMED: ") and "Traceback" not in err


def test_exit_code_zero_only_on_success(art, files, capsys):
    """Every way of running the checker returns 0 exactly when it prints VERIFIED."""
    cases = [
        ([files["brute"]], 0), ([files["cubic"]], 0),
        ([files["brute"], "--model", art.model], 0),
        ([files["brute"], "--model", art.other_model], 1),
        ([files["rejected"]], 1), ([files["malformed"]], 2),
        ([files["brute"], "--require", "correct >= 32"], 1),
        ([files["brute"], "--max-work", "1"], 2),
        ([files["brute"], "--max-lines", "3"], 2),
        ([files["brute"], "--max-line-bytes", "100"], 2),
        ([files["brute"], "--max-elements", "1"], 2),
    ]
    for argv, expected in cases:
        code, out, err = run(capsys, *argv)
        assert code == expected, (argv, err)
        assert (code == 0) == out.startswith("VERIFIED"), (argv, out)
        assert (code == 0) == (err == ""), (argv, err)
        assert "Traceback" not in err


def test_argument_errors_exit_2(files, capsys):
    for argv in ([], ["--max-work", "lots", str(files["brute"])], ["--bogus", "x"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        capsys.readouterr()


def test_jobs_zero_or_negative_still_checks(files, capsys):
    for jobs in ("0", "-3"):
        assert main([str(files["cubic"]), "--jobs", jobs]) == 0
        capsys.readouterr()


def test_module_and_subprocess(files):
    proc = run_checker_subprocess([files["brute"], "--jobs", "1"])
    assert proc.returncode == 0 and proc.stdout.startswith("VERIFIED")
    proc = run_checker_subprocess([files["cubic"], "--json"])  # default jobs: forked workers
    assert proc.returncode == 0 and json.loads(proc.stdout)["verdict"] == "verified"
    proc = run_checker_subprocess([workdir() / "nope.jsonl"])
    assert proc.returncode == 2 and "cannot open" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_checker_subprocess(["--help"])
    assert proc.returncode == 0 and "check-cert" in proc.stdout


# -- stdin -------------------------------------------------------------------------------------

def _stdin(monkeypatch, data: bytes):
    """Replace stdin by a text stream whose .buffer holds `data`."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_stdin_dash_in_process(art, capsys, monkeypatch):
    _stdin(monkeypatch, "".join(s + "\n" for s in art.brute).encode())
    code, out, err = run(capsys, "-", "--json")
    assert code == 0 and json.loads(out)["correct"] == 31


def test_stdin_dash_in_process_failures(art, capsys, monkeypatch):
    _stdin(monkeypatch, "".join(s + "\n" for s in art.brute[:5]).encode())
    code, out, err = run(capsys, "-")
    assert code == 2 and "without a qed" in err
    _stdin(monkeypatch, b"")
    assert run(capsys, "-")[0] == 2
    _stdin(monkeypatch, b"\xff\xfe\x00garbage\n")
    code, out, err = run(capsys, "-")
    assert code == 2 and "UTF-8" in err


def test_stdin_dash_subprocess(art, files):
    data = files["cubic"].read_bytes()
    proc = run_checker_subprocess(["-", "--json", "--model", art.model], stdin=data)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["verdict"] == "verified" and s["total"] == 216
    proc = run_checker_subprocess(["-"], stdin=files["rejected"].read_bytes())
    assert proc.returncode == 1 and proc.stderr.startswith("REJECTED: ")
    proc = run_checker_subprocess(["-"], stdin=b"{not json\n")
    assert proc.returncode == 2 and proc.stderr.startswith("MALFORMED: ")
    assert "Traceback" not in proc.stderr


def test_crlf_and_blank_lines_are_accepted(art, capsys):
    """Line endings and blank lines between lines do not change the verdict."""
    data = "\r\n\r\n".join(art.brute).encode() + b"\r\n"
    path = write_bytes(data, "cli_crlf.jsonl")
    code, out, err = run(capsys, path)
    assert code == 0, err


def test_floor_decimal():
    assert floor_decimal(Fraction(31, 216)) == "0.143518"
    assert floor_decimal(Fraction(1, 1)) == "1.000000"
    assert floor_decimal(Fraction(0, 5)) == "0.000000"
    assert floor_decimal(Fraction(999999999, 1000000000)) == "0.999999"
    assert floor_decimal(Fraction(2, 3), 2) == "0.66"


def test_same_verdicts_under_python_O(files):
    """No validation may rely on assert (spec/format.md)."""
    for which, code in (("brute", 0), ("rejected", 1), ("malformed", 2)):
        proc = run_checker_subprocess([files[which], "--jobs", "1"], optimize=True)
        assert proc.returncode == code, (which, proc.stderr)
        assert "Traceback" not in proc.stderr
