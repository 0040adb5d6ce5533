"""check-cert audit POLICY: check every certificate a policy names (spec/policy.md).

Each entry is one ordinary check (checkfile.check_file with --model and --require,
the same limits, the same fail-closed verdicts); the audit adds findings a
single check cannot see: a certificate in the policy's directory that the
policy does not name (unaudited), a model file whose digest is not the pinned
one (stale), a certificate file whose digest is not the pinned one (modified),
a named file that does not exist (missing).

Exit codes:
  0  every named certificate verified against its model and statement, none
     unaudited
  1  a finding: rejected, malformed, stale, modified, missing or unaudited
  2  the audit could not run: the policy is unreadable or malformed, names no
     certificate, a report cannot be written, or the audit was interrupted
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from . import add_version_option, statement, version
from . import arith as arithmetic
from . import policy as policy_file
from .certificate import Limits
from .checkfile import check_file, enforce, summary
from .errors import Malformed, Rejected
from .modelfile import MAX_BYTES as MAX_MODEL_BYTES
from .rules import pool as worker_pool

PASS = "verified"
VERDICTS = (PASS, "rejected", "malformed", "stale", "modified", "missing", "unaudited")
JUNIT_ERRORS = ("malformed",)  # a JUnit <error>; every other finding is a <failure>
HASH_CHUNK = 1 << 20


def model_files(model: Path) -> list[Path] | None:
    """The files whose bytes make a model file's digest, in order; None if there is no
    model.  A save_pretrained directory (read_model_tensors's test: it holds config.json)
    is its weights' bytes followed by its config's (checker/hf.py read_directory), the
    digest `check-cert --model DIR` reports and `gen-cert --pin` pins."""
    if (model / "config.json").is_file():
        from .hf import CONFIG_NAME, WEIGHTS_NAME

        return [model / WEIGHTS_NAME, model / CONFIG_NAME]
    return [model] if model.is_file() else None


def model_sha256(files: list[Path], deadline: float) -> str:
    """SHA-256 of the files' bytes, concatenated.  Each file over the model-file size
    limit is refused before a byte is hashed, and the clock is checked between chunks:
    a pinned symbolic link to a huge (or endless) file costs no more than the check."""
    h = hashlib.sha256()
    for path in files:
        _hash_into(h, path, deadline)
    return h.hexdigest()


def certificate_sha256(cert: Path, limits: Limits, deadline: float) -> str:
    """SHA-256 of a certificate file, bounded like the check that would read it: no more
    bytes than --max-lines lines of --max-line-bytes, and the clock between chunks."""
    h = hashlib.sha256()
    _hash_into(h, cert, deadline, "certificate", limits.max_lines * limits.max_line_bytes)
    return h.hexdigest()


def _hash_into(h, path: Path, deadline: float, what: str = "model file",
               limit: int = MAX_MODEL_BYTES) -> None:
    too_large = Malformed(f"{what} {path} is larger than the limit of {limit} bytes")
    if not path.is_file():  # e.g. a FIFO as model.safetensors: opening it would block
        raise Malformed(f"{what} {path} is not a regular file")
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > limit:
                raise too_large
            read = 0
            while chunk := f.read(HASH_CHUNK):
                read += len(chunk)
                if read > limit:  # it grew, or it is not what stat said
                    raise too_large
                if time.monotonic() > deadline:
                    raise Malformed(f"hashing {what} {path} took longer than the time "
                                    "limit (raise --max-seconds to allow it)")
                h.update(chunk)
    except OSError as err:
        raise Malformed(f"cannot read {what} {path}: {err.strerror}") from None


def _finding(verdict: str, message: str) -> dict:
    return {"verdict": verdict, "message": message}


def _modified(cert: Path, actual: str, pinned: str) -> dict:
    """The finding for a certificate file whose bytes are not the ones the policy pins."""
    return _finding("modified", f"modified certificate: {cert} has sha256:{actual[:12]}..., "
                                f"the policy pins sha256:{pinned[:12]}... (if the change is "
                                "intended, re-pin it: gen-cert --pin, or the policy's "
                                "certificate == sha256:...)")


def check_entry(cert: Path, model: Path, require: str, limits: Limits, jobs: int,
                arith: str = arithmetic.DEFAULT) -> dict:
    """The verdict for one policy entry, as a dict (JSON- and pickle-friendly).

    Order: missing files, then a changed model (stale: the check is not run), then a
    changed certificate file (modified: not run either), then the ordinary check of `cert`
    against `model` and `require`, whose own digest of the bytes it read must still be the
    pinned one.
    Never raises: any error is a non-passing verdict (fail closed).
    """
    started = time.monotonic()
    try:
        result = _check_entry(cert, model, require, limits, jobs, arith)
    except Rejected as err:
        result = _finding("rejected", str(err))
    except (Malformed, arithmetic.Unavailable) as err:  # e.g. an entry's --arith=arb, no flint
        result = _finding("malformed", str(err))
    except Exception as err:  # noqa: BLE001 -- fail closed
        result = _finding("malformed", f"internal error: {type(err).__name__}: {err}")
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


def _check_entry(cert: Path, model: Path, require: str, limits: Limits, jobs: int,
                 arith: str) -> dict:
    started = time.monotonic()
    if not cert.is_file():
        return _finding("missing", f"missing certificate: no file {cert}")
    files = model_files(model)
    if files is None:
        return _finding("missing", f"missing model file: no file or save_pretrained "
                                   f"directory {model}")
    atoms = statement.parse(require, "policy statement")
    pinned = policy_file.pinned_model_sha256(atoms)
    if pinned is not None:
        actual = model_sha256(files, started + limits.max_seconds)
        if actual != pinned:
            return _finding("stale", f"stale certificate: model changed: {model} has sha256:"
                                     f"{actual[:12]}..., the policy pins sha256:{pinned[:12]}... "
                                     "(regenerate the certificate and re-pin it)")
    pinned_cert = policy_file.pinned_certificate_sha256(atoms)
    if pinned_cert is not None:
        actual = certificate_sha256(cert, limits, started + limits.max_seconds)
        if actual != pinned_cert:
            return _modified(cert, actual, pinned_cert)
    # the time spent hashing counts against --max-seconds: the check gets what is left
    left = max(0.0, limits.max_seconds - (time.monotonic() - started))
    report = check_file(str(cert), dataclasses.replace(limits, max_seconds=left), str(model),
                        jobs, arithmetic.get(arith))
    read = report.facts.certificate_sha256
    if pinned_cert is not None and read != pinned_cert:  # it changed after it was hashed above
        return _modified(cert, read, pinned_cert)
    enforce([atoms], report.facts)
    result = summary(report, str(model))
    if result.get("property") == "overwhelm":  # spec/overwhelm.md: no count
        return {**result, "message": f"overwhelm: {result['overwhelm']}; policy holds"}
    return {**result, "message": f"correct >= {result['correct']} of {result['total']}: "
                                 f"accuracy >= {result['accuracy_floor']}; policy holds"}


def unaudited(pol: policy_file.Policy) -> list[str]:
    """Certificates (*.jsonl) in the policy's directory that no entry names."""
    named = {pol.resolve(e.certificate).resolve() for e in pol.entries}
    return sorted(p.name for p in pol.base.glob("*.jsonl") if p.resolve() not in named)


def _shown(path: Path) -> Path:
    """The same file, named relative to the working directory without '..' detours
    where possible (certs/../m.pt -> m.pt); symbolic links in directories are
    resolved first, so the name still denotes the file the policy means."""
    try:
        return Path(os.path.relpath(path.parent.resolve())) / path.name
    except (OSError, ValueError):  # e.g. another drive on Windows
        return path


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def settings(entry: policy_file.Entry, given: dict, arith: str | None) -> tuple[Limits, str]:
    """The limits and back-end one entry is checked with: the command line's where it gives
    them (`given`: the Limits fields it sets; `arith`), else the entry's own options
    (spec/policy.md), else check-cert's defaults."""
    return Limits(**{**entry.limits, **given}), arith or entry.arith or arithmetic.DEFAULT


def run(pol: policy_file.Policy, given: dict, jobs: int, on_result=None,
        arith: str | None = None, entries: tuple | None = None) -> list[dict]:
    """Check every entry of `pol` (or only `entries`, some of them: --only), then list
    unaudited certificates (always against the whole policy).  Each entry's limits and
    back-end: `settings(entry, given, arith)`.

    Parallelism: min(jobs, entries) worker processes each check whole
    certificates with jobs // workers processes of their own, so at most
    `jobs` processes compute at once.  Results come back in policy order;
    `on_result(result)` is called as each becomes available.
    """
    entries = pol.entries if entries is None else entries
    workers = max(1, min(jobs, len(entries)))
    per_check = max(1, jobs // workers)
    args = []
    for e in entries:
        limits, back_end = settings(e, given, arith)
        args.append((_shown(pol.resolve(e.certificate)), _shown(pol.resolve(e.model)), e.require,
                     limits, per_check, back_end))
    results = []

    def collect(entry, result):
        result.update(certificate=entry.certificate, model=entry.model, require=entry.require,
                      options=list(entry.options),
                      file=str(_shown(pol.resolve(entry.certificate))))
        results.append(result)
        if on_result:
            on_result(result)

    if workers == 1:
        for entry, a in zip(entries, args):
            collect(entry, check_entry(*a))
    else:
        with worker_pool.workers(workers) as pool:
            # largest certificates first: the slowest check starts at once (LPT order)
            order = sorted(range(len(args)), key=lambda i: -_size(args[i][0]))
            futures = {i: pool.submit(check_entry, *args[i]) for i in order}
            futures = [futures[i] for i in range(len(args))]
            for entry, future in zip(entries, futures):
                try:
                    result = future.result()
                except Exception as err:  # noqa: BLE001 -- e.g. a worker died: fail closed
                    result = _finding("malformed", f"internal error: {type(err).__name__}: {err}")
                    result["seconds"] = 0.0
                collect(entry, result)
    for name in unaudited(pol):
        collect(policy_file.Entry(name, "", "", 0),
                {**_finding("unaudited", f"unaudited certificate: {name} is in "
                                         f"{pol.base} but not named in {pol.path.name}"),
                 "seconds": 0.0})
    return results


# What a log line or XML 1.0 cannot hold, or should not show raw: control characters (C0,
# DEL, C1), the surrogates by which Python carries a file name's undecodable bytes,
# U+FFFE/U+FFFF, and the bidirectional overrides that make a name read as another.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff"
                         "\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text) -> str:
    """`text` with every unshowable character written as a Python escape (ESC as \\x1b,
    the undecodable byte 0xff of a file name as \\xff): a hostile file name can neither
    break the JUnit report nor write terminal escape sequences into a CI log."""
    return _UNSHOWABLE.sub(_escape, str(text))


def _escape(match: re.Match) -> str:
    c = ord(match.group())
    if 0xDC80 <= c <= 0xDCFF:  # os.fsdecode's surrogateescape of the byte c - 0xDC00
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def counts(results: list[dict]) -> dict:
    return {v: sum(r["verdict"] == v for r in results) for v in VERDICTS}


def verdict_line(r: dict) -> str:
    return printable(f"{r['verdict'].upper():<9} {r['certificate']}: {r['message']}")


def summary_line(path, results: list[dict], selection: str = "") -> str:
    c = counts(results)
    n = len(results) - c["unaudited"]
    found = ", ".join(f"{c[v]} {v}" for v in VERDICTS[1:] if c[v])
    outcome = f"FAILED ({found})" if found else "PASSED"
    return printable(f"audit {path}: {c[PASS]} of {n} certificates verified{selection}: "
                     f"{outcome}")


def selection_note(pol: policy_file.Policy, entries: tuple, files: list[str] | None) -> str:
    """What --only left of the policy, for the summary line ('' without --only)."""
    if files is None:
        return ""
    return (f" (--only: {len(entries)} of {len(pol.entries)} entries concern the "
            f"{len(files)} file{'s' if len(files) != 1 else ''} given)")


def junit(path, results: list[dict], error: str | None = None,
          wall_seconds: float | None = None) -> ET.ElementTree:
    """A JUnit XML report: one testcase per certificate or finding (a malformed
    policy is one erroring testcase).  Every name and message is `printable`, so the
    report is well-formed XML 1.0 whatever the file names.  The suite's time is the
    audit's wall time (`wall_seconds`; entries run in parallel, so their sum overstates it)."""
    cases = results if error is None else [
        {"certificate": str(path), "verdict": "malformed", "message": error, "seconds": 0.0,
         "file": str(path)}]
    c = counts(cases)
    n_err = sum(c[v] for v in JUNIT_ERRORS)
    n_fail = len(cases) - c[PASS] - n_err
    wall = sum(r["seconds"] for r in cases) if wall_seconds is None else wall_seconds
    seconds = f"{wall:.3f}"
    attrs = {"name": printable(f"check-cert audit {path}"), "tests": str(len(cases)),
             "failures": str(n_fail), "errors": str(n_err), "skipped": "0", "time": seconds}
    root = ET.Element("testsuites", attrs)
    suite = ET.SubElement(root, "testsuite", attrs)
    ET.SubElement(ET.SubElement(suite, "properties"), "property",
                  {"name": "version", "value": version()})  # the checker that ran the audit
    for r in cases:
        case = ET.SubElement(suite, "testcase", {
            "classname": "check-cert.audit", "name": printable(r["certificate"]),
            "file": printable(r["file"]), "time": f"{r['seconds']:.3f}"})
        line = verdict_line(r)
        if r["verdict"] != PASS:
            tag = "error" if r["verdict"] in JUNIT_ERRORS else "failure"
            element = ET.SubElement(case, tag, {"type": r["verdict"], "message": line[:1000]})
            element.text = line
        else:
            ET.SubElement(case, "system-out").text = line
    ET.indent(root)
    return ET.ElementTree(root)


def _limit_options(p: argparse.ArgumentParser) -> None:
    """--max-* options for every field of Limits, named as check-cert's.  Unset (None), an
    entry's own option applies, else check-cert's default (`settings`)."""
    for f in dataclasses.fields(Limits):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None,
                       help=f"per certificate, as in check-cert; overrides the policy entries' "
                            f"own (default: the entry's, else {f.default})")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="check-cert audit",
        description="Check every certificate a policy names against its model file and "
                    "statement; flag unaudited, stale and missing certificates.",
        epilog="Exit codes: 0 all verified; 1 a finding (rejected, malformed, stale, modified, "
               "missing, unaudited); 2 the policy is malformed or the audit could not run.")
    p.add_argument("policy", help="policy file (spec/policy.md)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes in all (default: all cores)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report to FILE")
    p.add_argument("--arith", choices=arithmetic.NAMES, default=None,
                   help="arithmetic back-end, as in check-cert; overrides the policy entries' "
                        f"own (default: the entry's, else {arithmetic.DEFAULT})")
    p.add_argument("--only", nargs="+", metavar="FILE",
                   help="check only the entries whose certificate or model file is among FILEs "
                        "(all of them if POLICY is); unaudited certificates are still reported. "
                        "For pre-commit, which appends the changed files")
    _limit_options(p)
    add_version_option(p)
    return p


class _Shown:
    """Prints each verdict line as it arrives and, on a terminal, a status line on stderr
    ('audit: 3 of 20 certificates checked, 41 s'), erased before each verdict and at the
    end, so that logs and pipes see exactly the verdict lines."""

    def __init__(self, total: int, started: float):
        from .progress import Progress

        self.total, self.started, self.done = total, started, 0
        self.status = Progress(0)  # its terminal test, show() and its eraser are used

    def __call__(self, result: dict) -> None:
        self.status.close()
        _say(verdict_line(result))
        self.done += 1
        if self.done < self.total:
            self.status.show(f"audit: {self.done} of {self.total} certificates checked, "
                               f"{time.monotonic() - self.started:.0f} s")

    def close(self) -> None:
        self.status.close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)
             if getattr(args, f.name) is not None}
    started = time.monotonic()
    try:
        if args.arith:  # an unavailable back-end asked for here stops the audit before it starts
            arithmetic.get(args.arith)
        pol = policy_file.load(args.policy)
        if not pol.entries:
            raise Malformed(f"policy {args.policy} names no certificate")
        entries = pol.entries if args.only is None else pol.entries_for(args.only)
        show = None if args.json else _Shown(len(entries), started)
        results = run(pol, given, max(1, args.jobs), show, args.arith, entries)
        if show:
            show.close()
    except (Malformed, arithmetic.Unavailable) as err:
        return _report_error(args, str(err))
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (cli.Terminated)
        return _report_error(args, str(err) or "interrupted")
    code = 0 if counts(results)[PASS] == len(results) else 1
    wall = time.monotonic() - started
    if args.junit and not _write_junit(args.junit, junit(args.policy, results, wall_seconds=wall)):
        code = 2
    if args.json:
        verdict = {0: "passed", 1: "failed"}.get(code, "malformed")
        _say(json.dumps({"policy": args.policy, "verdict": verdict, "exit_code": code,
                         "only": args.only, "entries_checked": len(entries),
                         "entries": len(pol.entries), "counts": counts(results),
                         "results": results}, indent=1))
    else:
        _say(summary_line(args.policy, results, selection_note(pol, entries, args.only)))
    return code


def _say(text: str) -> None:
    """Print a line; a reader that stopped early (`| head -1`) does not change the verdict."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _write_junit(path: str, tree: ET.ElementTree) -> bool:
    """Write the report to a new file beside `path`, then rename it over `path`: nothing
    is ever written through whatever `path` is.  A symbolic link at `path` is refused, not
    followed: a pull request could commit `check-cert.xml -> ~/.bashrc` for the documented
    CI step to overwrite.  (Renaming over a link would replace the link, but a report
    that silently replaces a committed link hides the attempt.)"""
    if os.path.islink(path):
        _say_error(f"cannot write JUnit report {path}: it is a symbolic link (not followed)")
        return False
    try:
        fd, tmp = tempfile.mkstemp(prefix=".check-cert-junit-", suffix=".tmp",
                                   dir=os.path.dirname(path) or ".")
    except OSError as err:
        _say_error(f"cannot write JUnit report {path}: {err.strerror}")
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):  # POSIX: the mode open() would have given it
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            tree.write(f, encoding="utf-8", xml_declaration=True)
        os.replace(tmp, path)
        return True
    except (OSError, ValueError) as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _say_error(f"cannot write JUnit report {path}: {getattr(err, 'strerror', None) or err}")
        return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _say_error(message: str) -> None:
    print(printable(f"MALFORMED: {message}"), file=sys.stderr)


def _report_error(args, message: str) -> int:
    """The audit could not run (exit 2): say so on every channel asked for."""
    if args.junit:
        _write_junit(args.junit, junit(args.policy, [], error=message))
    if args.json:
        print(json.dumps({"policy": args.policy, "verdict": "malformed", "exit_code": 2,
                          "message": message}))
    else:
        _say_error(message)
    return 2
