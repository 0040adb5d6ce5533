"""One certificate file checked, and the verified result as data.

`check_file` feeds a certificate to the kernel (certificate.CertificateChecker), hashing the
bytes it checks; `enforce` holds a verified theorem to the required statements; `summary` is
the result as JSON-ready fields.  Shared by `check-cert` (cli.py) and `check-cert audit`
(audit.py), which import this module and not each other.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
import time
from fractions import Fraction
from typing import TYPE_CHECKING

from . import arith as arithmetic
from . import statement, version
from .errors import Malformed, Rejected
from .limits import Limits
from .progress import Progress, file_size

if TYPE_CHECKING:
    from .certificate import CertificateChecker, Report


def _lines(stream, limit: int):
    """Yield every line of a binary stream as text, refusing over-long lines.  Blank and
    whitespace-only lines are yielded too: each counts against --max-lines and the clock
    (CertificateChecker.feed), so a stream of newlines cannot run forever."""
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        if len(raw) > limit:
            raise Malformed(f"a line is longer than {limit} bytes (--max-line-bytes)")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Malformed("certificate is not UTF-8 text") from None
        yield text


class _Sha256Reader:
    """A binary stream that hashes every byte read through it and, at its end, records the
    digest in the checker's verified facts.  A policy's `certificate == sha256:...` is then
    compared with exactly the bytes that were checked, not with a second read of a file that
    may have changed in between.  (Facts exist only after the qed line: at the end of a file
    without one there is nothing to record, and the check fails anyway.)"""

    def __init__(self, stream, checker: CertificateChecker):
        self._stream, self._checker, self._sha256 = stream, checker, hashlib.sha256()

    def readline(self, limit: int = -1) -> bytes:
        raw = self._stream.readline(limit)
        self._sha256.update(raw)
        facts = self._checker.report.facts
        if not raw and facts is not None:  # end of file: every byte has been hashed
            self._checker.report.facts = dataclasses.replace(
                facts, certificate_sha256=self._sha256.hexdigest())
        return raw

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._stream.close()


def check_file(path: str, limits: Limits, model_path: str | None, jobs: int = 1,
               arith: arithmetic.Arithmetic | None = None, progress: bool = False,
               distance: bool = False) -> Report:
    """Check the certificate at `path` ('-' for stdin).  Raises Malformed/Rejected.
    `progress`: a progress line on stderr if it is a terminal (checker/progress.py);
    `distance`: a real certificate's costlier distance-to-float32 notes too."""
    from .certificate import CertificateChecker  # imported here: --help need not load it

    arith = arithmetic.MPMATH if arith is None else arith  # default: the reference back-end
    model_file, started = None, time.monotonic()
    if model_path is not None:
        from .modelfile import read_model_tensors

        model_file = read_model_tensors(model_path, deadline=started + limits.max_seconds)
    checker = CertificateChecker(limits, model_file, jobs, arith, distance)
    checker.started = started  # reading the model file counts against --max-seconds
    try:
        stream = _Sha256Reader(sys.stdin.buffer if path == "-" else open(path, "rb"), checker)
    except OSError as err:
        raise Malformed(f"cannot open {path}: {err.strerror}") from None
    with stream, Progress(file_size(path), enabled=progress) as bar:
        if bar.enabled:  # the seconds keep counting inside a long rule line
            checker.heartbeat = bar.heartbeat
        for text in _lines(stream, limits.max_line_bytes):
            checker.feed(text)
            bar.advance(len(text))
    return checker.finish()


def enforce(policies: list[list[statement.Atom]], facts: statement.Facts) -> None:
    """Every atom of every required statement must follow from the verified facts."""
    for atoms in policies:
        for atom in atoms:
            if not statement.holds(atom, facts):
                raise Rejected(f"required '{atom}' does not follow from the verified "
                               f"theorem ({statement.theorem_text(facts)})")


def floor_decimal(x: Fraction, digits: int = 6) -> str:
    """x rounded down to `digits` decimals, as text."""
    scaled = x.numerator * 10 ** digits // x.denominator
    return f"{scaled // 10 ** digits}.{scaled % 10 ** digits:0{digits}d}"


def summary(report: Report, model_path: str | None, with_version: bool = True) -> dict:
    """The verified result as JSON-ready fields (--json, the audit).  It names the
    version that checked it (unless with_version is false: the text report does not
    print it, and looking it up costs tens of milliseconds) and says whether the weights
    were compared with a model file: without --model the theorem is about the
    certificate's own weights."""
    return {**({"version": version()} if with_version else {}), **_result(report, model_path),
            "weights_bound_to_model_file": model_path is not None}


def _result(report: Report, model_path: str | None) -> dict:
    facts = report.facts
    if facts.overwhelm is not None:  # spec/overwhelm.md: no count, a claim about all completions
        return {"verdict": "verified", "property": "overwhelm", "theorem": report.theorem,
                "semantics": facts.semantics,
                "overwhelm": statement.overwhelm_text(facts.overwhelm),
                "weights_sha256": facts.weights_sha256, "model_file": model_path,
                "model_file_sha256": facts.model_file_sha256, "strategy": report.strategy,
                "certificate_sha256": facts.certificate_sha256,
                "lines": report.lines, "arithmetic": report.arithmetic,
                "seconds": round(report.seconds, 3), "work": report.work, "bytes": report.bytes,
                "unexplained_dimensionality": None,  # not defined for overwhelm rules
                "rules": report.rule_notes,
                "float32_distance": float32_distance(report.rule_notes), "float_gap": {}}
    acc = Fraction(facts.correct, facts.total)
    task = facts.scored
    return {
        "verdict": "verified",
        "theorem": report.theorem,
        "task": task.name,
        "semantics": facts.semantics,
        "task_params": {f: v for f, v in task.params},
        "domain_inputs": task.inputs(),
        "correct": facts.correct,
        "total": facts.total,
        "accuracy": f"{acc.numerator}/{acc.denominator}",
        "accuracy_floor": floor_decimal(acc),
        "weights_sha256": facts.weights_sha256,
        "model_file": model_path,
        "model_file_sha256": facts.model_file_sha256,
        "certificate_sha256": facts.certificate_sha256,
        "strategy": report.strategy,
        "lines": report.lines,
        "arithmetic": report.arithmetic,
        "seconds": round(report.seconds, 3),
        "work": report.work,
        "bytes": report.bytes,
        "unexplained_dimensionality": report.dimensionality,
        "rules": report.rule_notes,
        "float32_distance": float32_distance(report.rule_notes),
        "float_gap": {k: {"abs": g, "max_abs_value": s} for k, (g, s) in report.float_gap.items()},
        **({"family": report.family} if report.family else {}),
    }


_NUMBER = r"([-+]?\d[\d.]*(?:e[-+]?\d+)?)"
_DISTANCE = re.compile(r"smallest certified (?:margin|slack) " + _NUMBER
                       + r"(?: at (?:class )?(\[[^\]]*\]|\([^)]*\)))?"
                       + r"(?:[^;]*?(?:float32 error (?:bound )?|float32 evaluation may lose )"
                       + _NUMBER + ")?")


def float32_distance(notes: list) -> list:
    """--json's float32_distance (spec/rules.md §distance to float32): per rule note of a real
    certificate that names its smallest certified margin, {rule, smallest_margin, at,
    float32_error} (the note's own numbers, as printed; float32_error None when the rule
    names no number)."""
    out = []
    for note in notes:
        rule, _, text = note.partition(": ")
        found = _DISTANCE.search(text)
        if found:
            out.append({"rule": rule, "smallest_margin": float(found.group(1)),
                        "at": found.group(2),
                        "float32_error": float(found.group(3)) if found.group(3) else None})
    return out
