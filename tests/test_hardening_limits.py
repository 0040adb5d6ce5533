"""Issue 18, holes 3 and 4: no certificate can make the checker build a table its memory
limit does not allow, or run past --max-seconds while it builds one; no stream of blank
lines escapes --max-lines or the clock (spec/format.md §Resource model).

The hostile certificates are written by hand (header, weights, one rule line, qed): the
rules build their tables before they read a claim or a hint, so nothing else is needed."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from checker.certificate import CertificateChecker, Limits, weights_digest
from checker.errors import Malformed
from checker.modelspec import Dims, parameter_table

ROOT = Path(__file__).resolve().parent.parent
CERTS = ROOT / "certs"
FAMILY_CERT = CERTS / "maxany_v6_k6_ln_mlp_rope_seed0.overwhelm-5-free3.jsonl"


# -- hand-written certificates ---------------------------------------------------------------

def _f32(values) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def weight_lines(dims: Dims, fill: float = 0.0) -> tuple[list[dict], str]:
    """The weight lines of a model whose every weight is `fill`, and its digest."""
    lines, decoded = [], {}
    for n, param in enumerate(parameter_table(dims.family), start=1):
        shape = dims.shape_of(param.key)
        count = 1
        for s in shape:
            count *= s
        values = (fill,) * count
        decoded[param.key] = (shape, values)
        lines.append({"id": n, "kind": "weight", "name": param.key, "shape": list(shape),
                      "dtype": "f32", "data": _f32(values)})
    return lines, weights_digest(dims, decoded)


def forward_certificate(dims: Dims) -> str:
    """A forward_brute_force certificate claiming 0 correct sequences (true of any model)."""
    weights, digest = weight_lines(dims)
    theorem = (f"task == max_of_k and d_vocab == {dims.d_vocab} and n_ctx == {dims.n_ctx} and "
               f"d_model == {dims.d_model} and d_head == {dims.d_head} and "
               f"weights == sha256:{digest} and correct >= 0")
    header = {"id": 0, "kind": "header", "format": "maxk-cert", "version": 1,
              "arithmetic": "real-intervals", "theorem": theorem,
              "strategy": "forward-brute-force", "model": {}}
    if not dims.family.is_attn_only:
        header["family"] = dims.family.to_json()
    n = len(weights) + 1
    inputs = {p.short: i for i, p in enumerate(parameter_table(dims.family), start=1)}
    rule = {"id": n, "kind": "rule", "rule": "forward_brute_force", "inputs": inputs,
            "claim": 0}
    objs = [header, *weights, rule, {"id": n + 1, "kind": "qed", "by": n}]
    return "".join(json.dumps(o) + "\n" for o in objs)


def stored_elements(text: str) -> int:
    """The elements of the weight and op lines (what --max-stored-elements bounded before)."""
    total = 0
    for line in text.splitlines():
        o = json.loads(line)
        if o["kind"] in ("weight", "op"):
            count = 1
            for s in o["shape"]:
                count *= s
            total += count
    return total


def check_cert(args, stdin=None, timeout: float = 60) -> tuple[int, str, float]:
    """`python -m checker ARGS` in a fresh interpreter (the PYTHONPATH of the test run):
    (exit code, stderr, seconds)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "checker", *map(str, args)], input=stdin,
                          capture_output=True, cwd=ROOT, timeout=timeout, env=dict(os.environ))
    return proc.returncode, proc.stderr.decode("utf-8", "replace"), time.monotonic() - started


# -- hole 3: rule tables are charged to the memory limit before they are built --------------

SMALL = Dims(4, 3, 2, 64)  # 736 weight elements; forward tables 2·3·4·2 + 3·3·4·64 = 2352


def test_forward_tables_count_against_the_memory_limit(tmp_path):
    path = tmp_path / "forward.jsonl"
    path.write_text(forward_certificate(SMALL))
    stored = stored_elements(path.read_text())
    code, err, _ = check_cert([path, "--jobs", "1"])
    assert code == 0, err  # within the default limits it verifies
    code, err, _ = check_cert([path, "--max-stored-elements", stored + 2000, "--jobs", "1"])
    assert code == 2, err
    assert "forward tables" in err and "--max-stored-elements" in err
    assert "internal error" not in err


def test_forward_tables_are_charged_before_they_are_built(monkeypatch):
    """The refusal comes before the rule computes a single table entry."""
    from checker.rules import forward_model  # where _Model looks these up

    text = forward_certificate(SMALL)
    built = []
    monkeypatch.setattr(forward_model, "layer_norm", lambda *a: built.append(a))
    real_add = forward_model._add
    monkeypatch.setattr(forward_model, "_add", lambda x, y: built.append(1) or real_add(x, y))
    checker = CertificateChecker(Limits(max_stored_elements=stored_elements(text) + 2000))
    with pytest.raises(Malformed, match="forward tables .* elements in all"):
        for line in text.splitlines():
            checker.feed(line)
    assert built == []


def test_overwhelm_family_tables_count_against_the_memory_limit(capsys):
    """The shipped overwhelm_family certificate: its weights and op lines fit the limit,
    its rule's tables do not."""
    from checker.cli import main

    stored = stored_elements(FAMILY_CERT.read_text())
    assert main([str(FAMILY_CERT), "--max-stored-elements", str(stored + 100),
                 "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "rule overwhelm_family's" in err and "--max-stored-elements" in err
    assert main([str(FAMILY_CERT), "--jobs", "1"]) == 0  # the default limits admit it


def test_the_memory_of_a_rules_tables_is_released_after_its_line():
    """A rule's tables count while it runs, not against the lines after it."""
    checker = CertificateChecker()
    for line in FAMILY_CERT.read_text().splitlines():
        checker.feed(line)
    assert checker.stored == stored_elements(FAMILY_CERT.read_text())


@pytest.mark.parametrize("cert, rule", [("max3_v8_seed0.cubic.jsonl", "cubic"),
                                        ("max5_v16_seed0.exact.jsonl", "exact"),
                                        ("max3_v8_seed0.subcubic.jsonl", "subcubic_gap")])
def test_the_other_rules_tables_count_against_the_memory_limit(capsys, cert, rule):
    """The audit of the other rules: their tables are charged too (shipped certificates,
    verified at the default limits by tests/test_certs_audit.py)."""
    from checker.cli import main

    stored = stored_elements((CERTS / cert).read_text())
    assert main([str(CERTS / cert), "--max-stored-elements", str(stored + 10),
                 "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert f"rule {rule}'s" in err and "--max-stored-elements" in err


# -- hole 3: the clock runs while tables are built -------------------------------------------

# d_model 1, d_head 2^18: 1.8·10^6 weight elements to convert to intervals, then forward
# tables of 3·k·v·h = 1.6·10^6 intervals; with the clock unchecked while they were built this
# took ~9 s (and 0.43 GB) under --max-seconds 1.
SLOW = Dims(2, 2, 1, 1 << 18)


class Stop(Exception):
    pass


def _clock(limit: int):
    """A charge function that stops the rule at its (limit + 1)-th look at the clock."""
    looks = []

    def charge(work):
        if work == 0:
            looks.append(1)
            if len(looks) > limit:
                raise Stop

    return charge


def _matrices(text: str) -> tuple:
    """(dims, the rule's input matrices by short name) after the weight lines of `text`."""
    checker = CertificateChecker()
    lines = text.splitlines()
    for line in lines[:-2]:
        checker.feed(line)
    rule = json.loads(lines[-2])
    return checker.dims, {name: checker.values[i].matrix for name, i in rule["inputs"].items()}


def test_forward_tables_consult_the_clock_while_they_are_built():
    from checker.rules import forward

    dims, mats = _matrices(forward_certificate(SMALL))
    with pytest.raises(Stop):
        forward._Model(dims, mats, _clock(limit=10))


def test_cubic_tables_consult_the_clock_while_they_are_built():
    from checker.arith import MPMATH
    from checker.rules import cubic

    text = (CERTS / "max3_v8_seed0.cubic.jsonl").read_text()
    lines = text.splitlines()
    rule_at = next(i for i, s in enumerate(lines) if '"kind":"rule"' in s.replace(" ", ""))
    checker = CertificateChecker()
    for line in lines[:rule_at]:
        checker.feed(line)
    inputs = json.loads(lines[rule_at])["inputs"]
    mats = {name: checker.values[i].matrix for name, i in inputs.items()}
    with pytest.raises(Stop):
        cubic._Tables(cubic._Counted(MPMATH), mats, 8, 3, _clock(limit=3))


def test_building_forward_tables_stops_at_the_time_limit(tmp_path):
    path = tmp_path / "slow.jsonl"
    path.write_text(forward_certificate(SLOW))
    code, err, seconds = check_cert([path, "--max-seconds", "1", "--jobs", "1"])
    assert code == 2 and "--max-seconds" in err, err
    assert seconds < 5, f"the time limit of 1 s was noticed after {seconds:.1f} s"


def overwhelm_family_certificate(dims: Dims) -> str:
    """An overwhelm_family certificate for the empty prefix and no free token (query 0,
    output 0), with all-zero hints of the right shapes."""
    from checker.rules.overwhelm_family import hint_shapes

    weights, digest = weight_lines(dims)
    theorem = (f"property == overwhelm and d_vocab == {dims.d_vocab} and n_ctx == "
               f"{dims.n_ctx} and d_model == {dims.d_model} and d_head == {dims.d_head} and "
               f"weights == sha256:{digest} and prefix == [] and query == 0 and free <= 0 "
               "and output == 0")
    header = {"id": 0, "kind": "header", "format": "maxk-cert", "version": 1,
              "arithmetic": "real-intervals", "theorem": theorem, "strategy": "overwhelm",
              "model": {}}
    shapes = hint_shapes(dims)
    zeros = [base64.b64encode(bytes(8 * _product(shapes[name]))).decode("ascii")
             for name in ("box", "pre", "diff", "dir", "dir_lo")]
    n = len(weights) + 1
    inputs = {p.short: i for i, p in enumerate(parameter_table(dims.family), start=1)}
    claim = {"prefix": [], "query": 0, "output": 0, "free": 0, "free_cmp": "<=", "over": None}
    rule = {"id": n, "kind": "rule", "rule": "overwhelm_family", "inputs": inputs,
            "claim": claim, "hints": {"bounds": [[0, *zeros]]}}
    objs = [header, *weights, rule, {"id": n + 1, "kind": "qed", "by": n}]
    return "".join(json.dumps(o) + "\n" for o in objs)


def _product(shape) -> int:
    count = 1
    for s in shape:
        count *= s
    return count


def test_building_overwhelm_family_tables_stops_at_the_time_limit(tmp_path):
    path = tmp_path / "slow_overwhelm.jsonl"
    path.write_text(overwhelm_family_certificate(SLOW))
    code, err, seconds = check_cert([path, "--max-seconds", "1", "--jobs", "1"])
    assert code == 2 and "--max-seconds" in err, err
    assert seconds < 5, f"the time limit of 1 s was noticed after {seconds:.1f} s"


# -- hole 4: blank lines count against --max-lines and the clock -----------------------------

def _feed(proc: subprocess.Popen, chunk: bytes, total: int) -> None:
    """Write `total` bytes of `chunk`s to the process's stdin, until it stops reading."""
    try:
        for _ in range(total // len(chunk)):
            proc.stdin.write(chunk)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def _stream(args, chunk: bytes, total: int, timeout: float = 30) -> tuple[int, str, float]:
    """check-cert - ARGS, fed `total` bytes of `chunk` through a pipe."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "checker", "-", *map(str, args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ))
    writer = threading.Thread(target=_feed, args=(proc, chunk, total), daemon=True)
    writer.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"check-cert still reading blank lines after {timeout} s")
    err = proc.stderr.read().decode("utf-8", "replace")
    proc.stdout.close()
    proc.stderr.close()
    return proc.returncode, err, time.monotonic() - started


@pytest.mark.parametrize("line", [b"\n", b"  \t \r\n"], ids=["empty", "whitespace"])
def test_blank_lines_count_against_max_lines(line):
    """50 MB of blank lines with --max-lines 1000: refused at line 1001."""
    code, err, seconds = _stream(["--max-lines", "1000"], line * (1 << 16), 50 << 20)
    assert code == 2 and "more than 1000 lines" in err, err
    assert seconds < 10


def test_blank_lines_count_against_the_clock():
    """200 MB of newlines (~10^8 lines, minutes to read) under --max-seconds 1."""
    code, err, seconds = _stream(["--max-lines", str(10 ** 9), "--max-seconds", "1"],
                                 b"\n" * (1 << 16), 200 << 20)
    assert code == 2 and "--max-seconds" in err, err
    assert seconds < 6


def test_blank_lines_around_a_certificate_are_still_accepted(tmp_path):
    """Blank lines are read and counted, not refused: a certificate with blank lines
    between and after its lines verifies as before."""
    text = forward_certificate(Dims(2, 2, 1, 1))
    padded = "\n  \n".join(text.splitlines()) + "\n\n \n"
    path = tmp_path / "padded.jsonl"
    path.write_text(padded)
    lines = padded.count("\n")
    code, err, _ = check_cert([path, "--jobs", "1", "--max-lines", lines])
    assert code == 0, err
    code, err, _ = check_cert([path, "--jobs", "1", "--max-lines", lines - 1])
    assert code == 2 and f"more than {lines - 1} lines" in err
