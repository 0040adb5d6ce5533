"""check-cert: verify a Max-of-K accuracy certificate.

Exit codes (spec/format.md §exit codes):
  0  verified: every line checked, the theorem holds, every --require holds
  1  rejected: the certificate is wrong, or proves less than required
  2  malformed, unsupported, over a resource limit, or an internal error
Nothing but full acceptance exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import signal
import sys
import threading
from fractions import Fraction

from . import HelpFormatter, add_version_option, checkfile, statement
from . import arith as arithmetic

# check_file, float32_distance and floor_decimal are also read as cli.* by tests and benchmarks
from .checkfile import check_file, enforce, float32_distance, floor_decimal  # noqa: F401
from .errors import Malformed, Rejected
from .limits import Limits


def _print_human(s: dict, requires: list[str]) -> None:
    print(f"VERIFIED  {s['theorem']}")
    if s.get("property") == "overwhelm":
        print(f"  overwhelm: {s['overwhelm']} (every admissible free string; spec/overwhelm.md)")
    else:
        what = ("sequences" if s["task"] == "max_of_k" else
                "scored (input, position) pairs" if s["task"] != "dataset" else "dataset rows")
        print(f"  correct >= {s['correct']} of {s['total']} {what}: accuracy >= "
              f"{s['accuracy']} >= {s['accuracy_floor']}")
        params = "".join(f" and {f} == {v}" for f, v in s["task_params"].items()
                         if f != "dataset")
        print(f"  task {s['task']}{params}: domain of {s['domain_inputs']} "
              f"{'rows' if s['task'] == 'dataset' else 'inputs'}, {s['total']} scored pairs "
              "(spec/theorem.md §3)")
    print("  semantics: " + ("float32: every IEEE-754 binary32 evaluation of the forward pass "
                             "(spec/theorem.md §2c)" if s["semantics"] == "float32" else
                             "real: the exact real-valued model (spec/theorem.md §2; not its "
                             "float32 evaluation, §2c; how far from it: --float32-distance)"))
    print(f"  weights sha256:{s['weights_sha256']}")
    print(f"  certificate file sha256:{s['certificate_sha256']} (a policy may pin it: "
          "certificate == sha256:...)")
    if s.get("family"):  # bound by the weights digest (spec/theorem.md §1b)
        print("  model family: " + ", ".join(f"{k}={v}" for k, v in s["family"].items()))
    if s["model_file"]:
        print(f"  weights are exactly those of {s['model_file']} "
              f"(file sha256:{s['model_file_sha256']})")
    else:
        print("  weights NOT compared with any model file (no --model): the theorem holds for "
              "the weights written in the certificate")
    for r in requires:
        print(f"  required and holds: {r}")
    print(f"  strategy {s['strategy']}: {s['lines']} lines checked in {s['seconds']:.2f} s "
          f"(arithmetic: {s['arithmetic']})")
    print(f"  proof length: {s['work']} scalar operations, {s['bytes']} bytes, "
          f"unexplained dimensionality {s['unexplained_dimensionality'] or 'not defined'}")
    for note in s["rules"]:
        print(f"  {note}")
    if s["float_gap"]:
        gaps = ", ".join(f"{k} {v['abs']:.1e} ({v['abs'] / max(v['max_abs_value'], 1e-300):.0e} "
                         "of max |x|)" for k, v in s["float_gap"].items())
        print(f"  float32-vs-real gap of the generator's own values (max |float − real|): {gaps}")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main process where Ctrl-C raises KeyboardInterrupt."""

    def __str__(self) -> str:
        return "terminated (SIGTERM)"


def _raise_terminated(signum, frame):
    raise Terminated


def _whole(text: str) -> int:
    """A limit: a whole number >= 0, written out or in scientific notation (5e9)."""
    # at most two exponent digits: Fraction("1e999999999") would build a huge integer
    value = Fraction(text) if re.fullmatch(r"\d+(\.\d+)?([eE]\d{1,2})?", text) else None
    if value is None or value.denominator != 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (e.g. 5000000000 or "
                                         f"5e9), got {text!r}")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    """check-cert (or check-cert audit).  SIGTERM -- what `timeout`, CI cancellation and
    `docker stop` send -- is handled like Ctrl-C: the check stops, its forked workers
    are killed (rules/pool.py), and the exit code is 2 with one line, never 143."""
    if threading.current_thread() is not threading.main_thread():  # signals: main thread only
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    if previous is None:  # installed from outside Python: the default is the closest
        previous = signal.SIG_DFL
    try:
        return _main(argv)
    except KeyboardInterrupt as err:  # outside the check itself, e.g. while printing
        print(f"MALFORMED: {err or 'interrupted'}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["audit"]:  # the subcommand only as the first word; a file named audit: ./audit
        from .audit import main as audit_main

        return audit_main(argv[1:])
    p = argparse.ArgumentParser(
        prog="check-cert", formatter_class=HelpFormatter,
        description="Verify a proof certificate over the reals: an accuracy certificate (a "
                    "lower bound on the number of correct inputs) or an overwhelm certificate "
                    "(spec/overwhelm.md), for the supported one-layer model families "
                    "(spec/theorem.md). Exit 0 verified, 1 rejected, 2 malformed or unsupported.",
        epilog="examples:\n"
               "  check-cert cert.jsonl --model model.pt --require 'accuracy >= 0.98'\n"
               "  check-cert cert.jsonl --model HF_DIR --json   (a save_pretrained directory)\n"
               "  check-cert audit certs/POLICY --junit check-cert.xml\n\n"
               "check-cert audit POLICY [...]: audit every certificate a policy names\n"
               "(spec/policy.md; check-cert audit --help).")
    add_version_option(p)
    p.add_argument("certificate", help="certificate file (JSON lines), or - for stdin")
    p.add_argument("--model", help="model file (.pt or .safetensors) or Hugging Face directory "
                   "the weights must equal; read without torch and without unpickling code "
                   "(without it, the weights are not compared with any file)")
    p.add_argument("--require", action="append", default=[], metavar="STATEMENT",
                   help="a policy the verified theorem must imply, e.g. "
                        "'accuracy >= 0.95 and weights == sha256:...' (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--float32-distance", action="store_true",
                   help="for a real certificate, also how far it is from a float32 theorem: "
                        "the compact rules' smallest certified margin and Lemma G's float32 "
                        "error there (spec/rules.md §distance to float32; up to ~1.5x the "
                        "check's time)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes for rules that split their work (default: all cores, "
                        "%(default)s here)")
    p.add_argument("--arith", choices=arithmetic.NAMES, default=arithmetic.DEFAULT,
                   help="arithmetic back-end: mpmath (reference) or arb (python-flint, "
                        "faster; pip install 'maxk-certify[fast]')")
    d = Limits()
    p.add_argument("--max-seconds", type=float, default=d.max_seconds,
                   help="maximum seconds of checking")
    p.add_argument("--max-work", type=_whole, default=d.max_work,
                   help="maximum number of scalar interval operations")
    p.add_argument("--max-line-bytes", type=_whole, default=d.max_line_bytes,
                   help="maximum bytes of one certificate line")
    p.add_argument("--max-lines", type=_whole, default=d.max_lines,
                   help="maximum certificate lines")
    p.add_argument("--max-elements", type=_whole, default=d.max_elements,
                   help="maximum elements of one matrix")
    p.add_argument("--max-stored-elements", type=_whole, default=d.max_stored_elements,
                   help="maximum elements of all recorded matrices together (memory: up to "
                        "~500 bytes each; spec/format.md §resource model)")
    args = p.parse_args(argv)
    limits = Limits(max_line_bytes=args.max_line_bytes, max_lines=args.max_lines,
                    max_elements=args.max_elements, max_work=args.max_work,
                    max_seconds=args.max_seconds,
                    max_stored_elements=args.max_stored_elements)
    try:
        backend = arithmetic.get(args.arith)
    except arithmetic.Unavailable as err:
        return _fail(args.json, "malformed", str(err), 2)
    try:
        policies = [statement.parse(r, "--require") for r in args.require]
        report = check_file(args.certificate, limits, args.model, max(1, args.jobs), backend,
                            progress=not args.json, distance=args.float32_distance)
        enforce(policies, report.facts)
        summary = checkfile.summary(report, args.model, with_version=args.json)
    except (Malformed, Rejected) as err:
        verdict = "rejected" if isinstance(err, Rejected) else "malformed"
        return _fail(args.json, verdict, str(err), err.exit_code)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (Terminated)
        return _fail(args.json, "malformed", str(err) or "interrupted", 2)
    except Exception as err:  # fail closed: an internal error is never acceptance
        return _fail(args.json, "malformed", f"internal error: {type(err).__name__}: {err}", 2)
    try:
        if args.json:
            print(json.dumps(summary, indent=1))
        else:
            _print_human(summary, args.require)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `check-cert c.jsonl | head -1`: the verdict stands
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _fail(as_json: bool, verdict: str, message: str, code: int) -> int:
    """Report a failure; if stdout is closed, say it in one line on stderr (the code stands)."""
    try:
        if as_json:
            print(json.dumps({"verdict": verdict, "exit_code": code, "message": message}))
            sys.stdout.flush()
        else:
            print(f"{verdict.upper()}: {message}", file=sys.stderr)
    except BrokenPipeError:  # e.g. the reader of `check-cert --json ... |` has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"{verdict.upper()} (stdout is closed): {message}", file=sys.stderr)
    return code


def console() -> None:
    """The check-cert command (pyproject's entry point; python -m checker): main() in a
    process that ends with it.  Two things only a whole process may do, both for speed
    (issue 22: a check makes ~10⁶ short-lived objects) and neither changing what is checked
    or printed: the cyclic collector stops rescanning the imported modules' objects
    (gc.freeze), and the process ends without tearing its heap down (os._exit, once both
    streams are flushed).  The usual exit instead when a flush fails (Python reports it) or
    a profiler or tracer runs (cProfile, coverage and debuggers report at exit)."""
    gc.freeze()
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stream
        sys.exit(code)
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    console()
