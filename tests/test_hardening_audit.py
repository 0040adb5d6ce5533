"""Issue 18, the audit's holes (checker/audit.py, checker/policy.py, checker/rules/pool.py,
cli.main's SIGTERM handling): --junit never writes through a symbolic link; hostile file
names give a well-formed report and an escaped log; a pinned model file is size-limited
and timed before it is hashed; SIGTERM ends forked workers and exits 2; one certificate
under two spellings is refused; a Hugging Face directory is a model file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hf_fixtures import randomized, save_dir, tiny_model

from checker import audit, policy
from checker.cli import main as check_cert

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "generator" / "models"
MODEL = MODELS / "max3_v8_seed0.pt"  # 8 tokens, 3 positions: checked in well under a second
CERT = ROOT / "certs" / "max3_v8_seed0.cubic.jsonl"
MODEL_FILE = "fd53dab7d305c7d2de89a50b020c34c71e4d1a6de48cd2f677e776b6d600e030"
SLOW_MODEL = MODELS / "max4_v64_seed0.pt"  # its cubic certificate takes seconds, in 2 workers
SLOW_CERT = ROOT / "certs" / "max4_v64_seed0.cubic.jsonl"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}


def write_policy(certs: Path, lines: list[str]) -> Path:
    certs.mkdir(parents=True, exist_ok=True)
    path = certs / "POLICY"
    path.write_text("\n".join(["# test policy", *lines]) + "\n", encoding="utf-8")
    return path


def one_entry(tmp_path: Path, statement: str = "accuracy >= 0.998") -> Path:
    """tmp_path/certs/POLICY naming one passing certificate, ok.jsonl."""
    path = write_policy(tmp_path / "certs", [f"ok.jsonl  {MODEL}  {statement}"])
    shutil.copy(CERT, tmp_path / "certs" / "ok.jsonl")
    return path


def run_audit(capsys, *args) -> tuple[int, str, str]:
    code = check_cert(["audit", *map(str, args), "--jobs", "1"])
    out, err = capsys.readouterr()
    return code, out, err


# --- 1. --junit: a new file renamed over the target; a symbolic link is refused ----------

@pytest.mark.parametrize("policy_ok", [True, False], ids=["audit ran", "malformed policy"])
def test_junit_refuses_a_symbolic_link(tmp_path, capsys, policy_ok):
    pol = one_entry(tmp_path)
    if not policy_ok:
        pol.write_text("not a policy line\n")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "check-cert.xml"
    link.symlink_to(victim)
    code, out, err = run_audit(capsys, pol, "--junit", link)
    assert code == 2
    assert victim.read_text() == "precious\n"
    assert link.is_symlink()
    (line,) = [x for x in err.splitlines() if "JUnit" in x]
    assert "symbolic link" in line


def test_junit_is_renamed_over_the_target(tmp_path, capsys):
    pol = one_entry(tmp_path)
    report = tmp_path / "check-cert.xml"
    report.write_text("old report\n")
    other = tmp_path / "hard-link"
    os.link(report, other)  # a write through the old file would show here
    code, _, _ = run_audit(capsys, pol, "--junit", report)
    assert code == 0
    assert ET.parse(report).getroot().tag == "testsuites"
    assert other.read_text() == "old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["certs", "check-cert.xml", "hard-link"]


# --- 2. hostile file names: well-formed XML, nothing raw in the log ------------------------

def test_printable_escapes_what_xml_and_terminals_cannot_hold():
    assert audit.printable("a\x1b[31m\x01\udcff\u202eb\tc\n") == \
        "a\\x1b[31m\\x01\\xff\\u202eb\\x09c\\x0a"
    assert audit.printable("plain/ü.jsonl") == "plain/ü.jsonl"


def test_control_characters_and_invalid_utf8_in_names(tmp_path):
    base = tmp_path / "ctl\x01dir"
    certs = base / "certs"
    pol = write_policy(certs, [f"ok\x01\x1b[2J.jsonl  {MODEL}  accuracy >= 0.998"])
    shutil.copy(CERT, certs / "ok\x01\x1b[2J.jsonl")
    (certs / "esc\x1b]0;owned\x07.jsonl").write_text("{}\n")  # unaudited
    os.close(os.open(os.fsencode(certs) + b"/bad\xff\xfe.jsonl", os.O_CREAT | os.O_WRONLY))
    report = tmp_path / "r.xml"
    out = subprocess.run([sys.executable, "-m", "checker", "audit", str(pol), "--jobs", "1",
                          "--junit", str(report)], capture_output=True, env=ENV, timeout=120)
    log = out.stdout + out.stderr
    assert out.returncode == 1, log  # two unaudited certificates
    assert b"Traceback" not in log
    assert not [c for c in log if c < 0x20 and c != 0x0A], log  # nothing raw but newlines
    text = log.decode("utf-8")
    assert "VERIFIED  ok\\x01\\x1b[2J.jsonl" in text
    assert "bad\\xff\\xfe.jsonl" in text and "esc\\x1b]0;owned\\x07.jsonl" in text
    root = ET.parse(report).getroot()  # expat refuses any character XML 1.0 cannot hold
    names = {c.get("name") for c in root.iter("testcase")}
    assert names == {"ok\\x01\\x1b[2J.jsonl", "bad\\xff\\xfe.jsonl", "esc\\x1b]0;owned\\x07.jsonl"}
    assert "ctl\\x01dir" in root.get("name")


# --- 5. a pinned model file: the size limit before hashing, hashing on the clock -----------

def test_pinned_huge_sparse_model_is_refused_before_hashing(tmp_path, capsys):
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(4 << 30)  # 4 GiB of holes: hashing it all takes seconds
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.pt").symlink_to(huge)
    pol = write_policy(tmp_path / "certs", [f"ok.jsonl  ../models/m.pt  accuracy >= 0.998 and "
                                            f"model_file == sha256:{MODEL_FILE}"])
    shutil.copy(CERT, tmp_path / "certs" / "ok.jsonl")
    started = time.monotonic()
    code, out, _ = run_audit(capsys, pol, "--max-seconds", "2")
    assert time.monotonic() - started < 1.5
    assert code == 1
    assert out.startswith("MALFORMED ok.jsonl: model file") and "larger than the limit" in out


def test_hashing_a_pinned_model_counts_against_max_seconds(tmp_path, capsys):
    pol = write_policy(tmp_path / "certs", [f"ok.jsonl  {MODEL}  accuracy >= 0.998 and "
                                            f"model_file == sha256:{MODEL_FILE}"])
    shutil.copy(CERT, tmp_path / "certs" / "ok.jsonl")
    code, out, _ = run_audit(capsys, pol, "--max-seconds", "0")
    assert code == 1
    assert "hashing model file" in out and "--max-seconds" in out
    code, out, _ = run_audit(capsys, pol)  # within the limit: the same entry passes
    assert code == 0, out


# --- 6. SIGTERM ends every forked worker and exits 2 with one line -------------------------

def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _descendants(pid: int) -> list[int]:
    todo, found = [pid], []
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _terminate_with_workers(tmp_path: Path, argv: list[str], workers: int):
    """Start `argv`, wait until it has `workers` descendants, SIGTERM it; returns (exit
    code, stderr, descendants still running 5 s later).  Output goes to files: orphaned
    workers would hold a pipe open."""
    out, err = open(tmp_path / "out", "wb"), open(tmp_path / "err", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "checker", *argv], stdout=out, stderr=err,
                            env=ENV)
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(seen) < workers and time.monotonic() < deadline and proc.poll() is None:
            seen = _descendants(proc.pid)
            time.sleep(0.05)
        assert len(seen) >= workers, f"only {seen} worker processes appeared"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        deadline = time.monotonic() + 5
        while any(map(_running, seen)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return code, (tmp_path / "err").read_text(), [p for p in seen if _running(p)]
    finally:
        for pid in [proc.pid, *seen]:  # whatever the verdict, leave nothing of ours running
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
        out.close()
        err.close()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigterm_ends_check_cert_workers(tmp_path):
    code, err, survivors = _terminate_with_workers(
        tmp_path, [str(SLOW_CERT), "--model", str(SLOW_MODEL), "--jobs", "2"], workers=2)
    assert (code, err, survivors) == (2, "MALFORMED: terminated (SIGTERM)\n", [])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("jobs, workers", [(2, 2), (4, 6)], ids=["2 checks", "nested pools"])
def test_sigterm_ends_audit_workers(tmp_path, jobs, workers):
    """--jobs 2: two audit workers; --jobs 4: two audit workers, each with a pool of two."""
    for name in ("a.jsonl", "b.jsonl"):
        shutil.copy(SLOW_CERT, tmp_path / name)
    pol = write_policy(tmp_path, [f"{n}  {SLOW_MODEL}  accuracy >= 0.99"
                                  for n in ("a.jsonl", "b.jsonl")])
    code, err, survivors = _terminate_with_workers(
        tmp_path, ["audit", str(pol), "--jobs", str(jobs), "--junit", str(tmp_path / "r.xml")],
        workers)
    assert (code, err, survivors) == (2, "MALFORMED: terminated (SIGTERM)\n", [])
    (case,) = ET.parse(tmp_path / "r.xml").getroot().iter("testcase")
    assert "terminated (SIGTERM)" in case.find("error").get("message")


# --- 8. one certificate under two spellings; a Hugging Face directory as the model ---------

@pytest.mark.parametrize("spelling", ["../certs/ok.jsonl", "absolute", "link.jsonl"])
def test_same_certificate_under_two_spellings_is_refused(tmp_path, capsys, spelling):
    certs = tmp_path / "certs"
    certs.mkdir()
    shutil.copy(CERT, certs / "ok.jsonl")
    if spelling == "absolute":
        spelling = str(certs / "ok.jsonl")
    elif spelling == "link.jsonl":
        (certs / "link.jsonl").symlink_to("ok.jsonl")
    pol = write_policy(certs, [f"ok.jsonl  {MODEL}  accuracy >= 0.998",
                               f"{spelling}  {MODEL}  accuracy >= 0.5"])
    code, _, err = run_audit(capsys, pol)
    assert code == 2
    assert err.count("\n") == 1
    assert f"POLICY:3: certificate {spelling} is the same file as ok.jsonl" in err
    assert "line 2" in err


def test_pin_updates_the_entry_spelled_otherwise(tmp_path):
    certs = tmp_path / "certs"
    pol = write_policy(certs, [f"../certs/ok.jsonl  {MODEL}  accuracy >= 0.5"])
    shutil.copy(CERT, certs / "ok.jsonl")
    assert policy.pin(pol, certs / "ok.jsonl", MODEL, "accuracy >= 0.998") == "updated"
    (entry,) = policy.load(pol).entries
    assert entry.require == "accuracy >= 0.998"


def _tiny_gpt2(path: Path) -> None:
    pytest.importorskip("torch")
    save_dir(randomized(tiny_model("gpt2"), 3), path)


def test_hugging_face_directory_pinned_by_gen_cert_audits_green(tmp_path, capsys):
    from generator.cli import main as gen_cert

    _tiny_gpt2(tmp_path / "hf")
    pol = tmp_path / "certs" / "POLICY"
    (tmp_path / "certs").mkdir()
    assert gen_cert([str(tmp_path / "hf"), "--strategy", "forward-brute-force", "-q",
                     "-o", str(tmp_path / "certs" / "c.jsonl"), "--pin", str(pol),
                     "--floor", "0"]) == 0
    (entry,) = policy.load(pol).entries
    assert entry.model == "../hf" and "model_file == sha256:" in entry.require
    capsys.readouterr()
    code, out, err = run_audit(capsys, pol)
    assert code == 0, out + err
    assert out.startswith("VERIFIED  c.jsonl: correct >= ")
    config = tmp_path / "hf" / "config.json"
    config.write_text(config.read_text().replace('"n_head": 2', '"n_head": 2 '))
    code, out, _ = run_audit(capsys, pol)  # the config's bytes are part of the digest
    assert code == 1 and out.startswith("STALE     c.jsonl: stale certificate: model changed")


def test_hugging_face_directory_is_not_missing(tmp_path, capsys):
    """Without a pin: the directory is checked (a certificate of another model is
    rejected), not reported MISSING."""
    _tiny_gpt2(tmp_path / "hf")
    pol = write_policy(tmp_path / "certs", ["ok.jsonl  ../hf  accuracy >= 0.998"])
    shutil.copy(CERT, tmp_path / "certs" / "ok.jsonl")
    code, out, _ = run_audit(capsys, pol)
    assert code == 1
    assert out.startswith("REJECTED  ok.jsonl: the certificate's model family"), out
