"""A new user's first hour (issue 19, items 5, 6, 8): no tracebacks, no
certificate dumped on a terminal, --version and --help on every command, a
word when the weights were not compared with a model file, progress lines that
leave nothing behind."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import checker
from checker import audit
from checker import cli as check_cli
from checker import progress as check_progress
from generator import progress as gen_progress
from generator.cli import main as gen_cert

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "generator" / "models" / "max3_v8_seed0.pt"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(*args, **kw) -> subprocess.CompletedProcess:
    """`python -m ...` of this tree's code, output as text."""
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=120, **kw)


@pytest.fixture(scope="module")
def tiny_cert(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("first_hour") / "tiny.jsonl"
    assert gen_cert([str(TINY), "--strategy", "brute-force", "-o", str(out), "-q"]) == 0
    return out


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def screen(text: str) -> list[str]:
    """What a terminal shows after `text`: \\r, \\n and cursor-up (ESC[A) honoured."""
    rows, row, col = [[]], 0, 0
    i = 0
    while i < len(text):
        if text.startswith("\x1b[A", i):
            row, i = max(0, row - 1), i + 3
            continue
        ch = text[i]
        i += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
        else:
            line = rows[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = ch
            col += 1
    return ["".join(r).rstrip() for r in rows]


# --- item 5: tracebacks --------------------------------------------------------------------


def test_gen_cert_checks_the_output_path_before_the_work(monkeypatch, capsys):
    def no_work(*a, **k):
        raise AssertionError("generate() ran although -o cannot be written")

    monkeypatch.setattr("generator.cli.generate", no_work)
    assert gen_cert([str(TINY), "-o", "/nonexistent_dir/x.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/nonexistent_dir" in err and "does not exist" in err


def test_gen_cert_output_path_that_is_a_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("generator.cli.generate", None)  # never reached
    assert gen_cert([str(TINY), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_train_checks_the_output_path_before_training(monkeypatch, capsys):
    from generator import train

    monkeypatch.setattr(train, "train_with_stats", None)  # never reached
    with pytest.raises(SystemExit) as exit_:
        train.main(["--out", "/nonexistent_dir/m.pt", "--steps", "1"])
    assert exit_.value.code == 2
    assert "/nonexistent_dir does not exist" in capsys.readouterr().err


def test_gen_cert_list_into_a_closed_pipe_is_quiet():
    """`gen-cert --strategy subcubic --list | head`: the reader has gone before the write."""
    proc = subprocess.Popen([sys.executable, "-m", "generator.cli", "--strategy", "subcubic",
                             "--list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT, env=ENV)
    proc.stdout.close()  # like `head` having exited
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_pipe_safe_turns_a_broken_pipe_into_the_sigpipe_code(monkeypatch):
    closed = []  # the real stdout_closed would point pytest's own fd 1 at /dev/null
    monkeypatch.setattr(gen_progress, "stdout_closed", lambda: closed.append(True))

    @gen_progress.pipe_safe
    def main(argv=None):
        raise BrokenPipeError

    assert main([]) == gen_progress.BROKEN_PIPE and closed == [True]


def test_exact_accuracy_into_a_closed_pipe_is_quiet():
    proc = subprocess.Popen([sys.executable, "-m", "generator.ground_truth", str(TINY)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=ENV)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == gen_progress.BROKEN_PIPE
    assert "Traceback" not in err, err


def test_every_generator_command_is_pipe_safe():
    from generator import ground_truth, train
    from generator.zoo import cli as zoo

    for main in (gen_cert, train.main, ground_truth.main, zoo.main):
        assert main.__wrapped__, main  # functools.wraps of pipe_safe


def test_unwritable_reasons(tmp_path):
    assert gen_progress.unwritable(str(tmp_path / "new.jsonl")) is None
    assert "does not exist" in gen_progress.unwritable(str(tmp_path / "no" / "x.jsonl"))
    assert "is a directory" in gen_progress.unwritable(str(tmp_path))


# --- item 6: output --------------------------------------------------------------------------


def test_gen_cert_refuses_to_write_a_certificate_to_a_terminal():
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "generator.cli", str(TINY), "-q"],
                              stdout=follower, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=ENV, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    assert "use -o FILE or redirect" in done.stderr and "Traceback" not in done.stderr


def test_gen_cert_without_a_model_prints_usage_not_a_certificate(capsys):
    with pytest.raises(SystemExit) as exit_:
        gen_cert([])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.startswith("usage: gen-cert") and "model" in err


def test_check_cert_says_when_weights_were_not_compared(tiny_cert):
    done = run("-m", "checker", tiny_cert)
    assert done.returncode == 0, done.stderr
    lines = [s for s in done.stdout.splitlines() if "NOT compared with any model file" in s]
    assert len(lines) == 1
    assert done.stderr == ""  # no progress line when stderr is not a terminal

    with_model = run("-m", "checker", tiny_cert, "--model", TINY)
    assert with_model.returncode == 0 and "NOT compared" not in with_model.stdout


def test_check_cert_json_says_whether_weights_are_bound(tiny_cert):
    alone = json.loads(run("-m", "checker", tiny_cert, "--json").stdout)
    assert alone["model_file"] is None and alone["weights_bound_to_model_file"] is False
    assert alone["version"] == checker.version()
    bound = json.loads(run("-m", "checker", tiny_cert, "--json", "--model", TINY).stdout)
    assert bound["weights_bound_to_model_file"] is True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_line_appears_after_a_second_and_is_erased():
    term, clock = FakeTerminal(), Clock()
    with check_progress.Progress(1000, stream=term, clock=clock) as bar:
        bar.advance(100)
        assert term.getvalue() == ""  # quick checks stay silent
        clock.now = 1.5
        bar.advance(400)
        assert "50%" in term.getvalue() and "2 lines" in term.getvalue()
    assert screen(term.getvalue()) == [""]  # nothing left on the terminal


def test_progress_line_is_off_when_not_a_terminal():
    stream, clock = io.StringIO(), Clock()
    with check_progress.Progress(1000, stream=stream, clock=clock) as bar:
        clock.now = 5.0
        bar.advance(1000)
    assert stream.getvalue() == ""


def test_check_cert_draws_progress_on_a_terminal_but_never_with_json(tiny_cert, monkeypatch,
                                                                     capsys):
    monkeypatch.setattr(check_progress, "DELAY", 0.0)
    for argv, drawn in (([str(tiny_cert)], True), ([str(tiny_cert), "--json"], False)):
        term = FakeTerminal()
        monkeypatch.setattr(sys, "stderr", term)
        assert check_cli.main([*argv, "--jobs", "1"]) == 0
        assert ("check-cert [" in term.getvalue()) is drawn, term.getvalue()
        assert screen(term.getvalue()) == [""]
        out = capsys.readouterr().out
        assert "check-cert [" not in out
    json.loads(out)  # --json: stdout is one JSON object


def test_zoo_bars_leave_no_residue_before_the_summary(monkeypatch):
    from generator.zoo.cluster import JobLoop

    term = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", term)
    loop = JobLoop(client=None, progress=True)
    for stage in ("train", "all", "facts", "certify"):
        bar = loop._bar(stage)
        bar.total = 3
        bar.update(2)
        bar.refresh()
    assert len([r for r in screen(term.getvalue()) if r]) == 4  # the bars were drawn
    loop.close_bars()
    term.write("certify-zoo: 1 models × 2 strategies: 2 verified\n")
    assert [r for r in screen(term.getvalue()) if r] == [
        "certify-zoo: 1 models × 2 strategies: 2 verified"]


# --- item 8: conventions -------------------------------------------------------------------


GEN_COMMANDS = {"gen-cert": "generator.cli", "train-max-of-k": "generator.train",
                "train-task": "generator.tasks.train_task",
                "exact-accuracy": "generator.ground_truth", "certify-zoo": "generator.zoo.cli"}


def _main_output(module: str, argv: list[str], capsys) -> str:
    import importlib

    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("prog", sorted(GEN_COMMANDS))
def test_generator_commands_have_version_and_help(prog, capsys):
    assert _main_output(GEN_COMMANDS[prog], ["--version"], capsys) == \
        f"{prog} {checker.version()}\n"
    text = _main_output(GEN_COMMANDS[prog], ["--help"], capsys)
    assert "examples:" in text
    assert "(default: " in text or prog == "exact-accuracy"  # its options have no default


def test_check_cert_and_audit_have_version():
    assert run("-m", "checker", "--version").stdout == f"check-cert {checker.version()}\n"
    assert run("-m", "checker", "audit", "--version").stdout == \
        f"check-cert audit {checker.version()}\n"


def test_version_falls_back_to_the_constant(monkeypatch):
    from importlib import metadata

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", absent)
    assert checker.version() == checker.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", checker.__version__)


def test_help_texts_describe_what_the_commands_do(capsys):
    check = run("-m", "checker", "--help").stdout
    assert "overwhelm" in check and "accuracy" in check and "(default: " in check
    assert "examples:" in check
    train = _main_output("generator.train", ["--help"], capsys)
    assert "attention-only Max-of-K" not in train and "LayerNorm" in train
    gen = " ".join(_main_output("generator.cli", ["--help"], capsys).split())
    assert "Hugging Face save_pretrained directory" in gen


def test_junit_report_names_the_version_and_the_wall_time():
    results = [{"certificate": f"c{i}.jsonl", "file": f"c{i}.jsonl", "verdict": "verified",
                "message": "ok", "seconds": 2.0} for i in range(3)]
    suite = audit.junit("POLICY", results, wall_seconds=2.5).getroot().find("testsuite")
    assert suite.get("time") == "2.500"  # not the 6.000 the entries add up to
    prop = suite.find("properties/property")
    assert prop.get("name") == "version" and prop.get("value") == checker.version()


def test_audit_junit_end_to_end(tiny_cert, tmp_path):
    (tmp_path / "c.jsonl").write_bytes(tiny_cert.read_bytes())
    (tmp_path / "POLICY").write_text(f"c.jsonl {TINY} accuracy >= 0.9\n")
    report = tmp_path / "junit.xml"
    done = run("-m", "checker", "audit", tmp_path / "POLICY", "--junit", report, "--jobs", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite.find("properties/property").get("value") == checker.version()
    assert float(suite.get("time")) > 0


def test_demo_script_runs_the_commands_of_py():
    """`make demo PY=...` must not run whichever gen-cert is first on PATH."""
    text = (ROOT / "scripts" / "demo.sh").read_text()
    commands = [s.strip() for s in text.splitlines()
                if s.strip() and not s.strip().startswith(("#", "echo", "set ", "cd ", "mkdir"))
                and "=" not in s.split()[0]]
    assert commands and all(c.startswith('"$PY" -m ') for c in commands), commands
    assert "PY=" in (ROOT / "Makefile").read_text().split("demo:")[1].splitlines()[1]


# --- a truncated certificate and the limits' spelling (eighth session) --------------------


def test_a_certificate_cut_inside_a_line_says_truncated(tiny_cert, tmp_path, capsys):
    data = tiny_cert.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[:len(data) // 2])  # inside a line, its newline lost
    assert check_cli.main([str(cut)]) == 2
    out = "".join(capsys.readouterr())
    assert "not valid JSON" in out and "the file ends inside this line (truncated?)" in out
    # a bad line that is not the last one is not called truncated
    lines = data.decode().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "{oops\n" + "".join(lines[2:]))
    assert check_cli.main([str(bad)]) == 2
    out = "".join(capsys.readouterr())
    assert "not valid JSON" in out and "truncated" not in out


@pytest.mark.parametrize("spelling, value", [("5000000000", 5_000_000_000), ("5e9", 5 * 10**9),
                                             ("2.5e3", 2500), ("0", 0)])
def test_limits_take_whole_numbers_in_scientific_notation(spelling, value):
    assert check_cli._whole(spelling) == value


@pytest.mark.parametrize("spelling", ["-5", "1.5", "abc", "1e999999999", "", "5e-1", "nan"])
def test_limits_refuse_what_is_not_a_whole_number(spelling, tiny_cert, capsys):
    with pytest.raises(SystemExit) as exit_:
        check_cli.main([str(tiny_cert), "--max-work", spelling])
    assert exit_.value.code == 2
    assert "expected a whole number >= 0" in capsys.readouterr().err


def test_progress_keeps_counting_inside_a_long_line():
    """A rule that runs for minutes on one line: charge()'s heartbeat redraws the seconds."""
    term, clock = FakeTerminal(), Clock()
    with check_progress.Progress(1000, stream=term, clock=clock) as bar:
        bar.advance(100)
        bar.heartbeat()
        assert term.getvalue() == ""  # before DELAY: silent
        clock.now = 7.0
        bar.heartbeat()
        assert screen(term.getvalue())[-1].endswith("1 lines, 0.0/0.0 MB, checking line 1, 7 s")
        clock.now = 7.05
        drawn = term.getvalue()
        bar.heartbeat()
        assert term.getvalue() == drawn  # at most every INTERVAL
        clock.now = 19.0
        bar.heartbeat()
        assert "checking line 1, 19 s" in screen(term.getvalue())[-1]
    assert screen(term.getvalue()) == [""]


def test_check_cert_heartbeat_is_called_from_the_rules_clock(tiny_cert, monkeypatch):
    from checker import certificate
    from checker.limits import Limits

    beats = []
    monkeypatch.setattr(certificate.time, "monotonic", iter(range(0, 10**9, 1)).__next__)
    checker_ = certificate.CertificateChecker(Limits(max_seconds=10**12))
    checker_.heartbeat = lambda: beats.append(checker_.next_id)
    for line in tiny_cert.read_text().splitlines():
        checker_.feed(line)
    checker_.finish()
    assert beats and max(beats) > 0  # drawn during the check, the rule line included
