"""Hostile certificate streams (issue 18): inputs that must end quickly with exit 2, never
hang, never blow up and never verify.

Each case is fed to `check-cert -` on standard input (a pipe, as `yes "" | check-cert -`)
under small limits; the case passes if the checker exits 2 within its time budget.  Cases:
blank and whitespace-only lines past --max-lines, a stream that never ends, NUL bytes,
invalid UTF-8, one over-long line, a truncated shipped certificate, a header repeated,
a certificate followed by garbage, a JSON bomb of nested arrays.

    python benchmarks/fuzz_streams.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CERT = ROOT / "certs" / "max3_v8_seed0.brute-force.jsonl"


def _endless(chunk: bytes):
    def gen():
        while True:
            yield chunk
    return gen


def cases() -> list[tuple[str, object, list[str], float]]:
    """(name, bytes or a generator factory of chunks, extra arguments, seconds allowed)."""
    text = CERT.read_bytes()
    lines = text.splitlines(keepends=True)
    return [
        ("blank lines past --max-lines", b"\n" * 5_000_000, ["--max-lines", "1000"], 10),
        ("whitespace-only lines", b" \t \r\n" * 1_000_000, ["--max-lines", "1000"], 10),
        ("endless blank stream, --max-seconds 1", _endless(b"\n" * 65536),
         ["--max-seconds", "1", "--max-lines", str(10 ** 12)], 15),
        ("NUL bytes", b"\x00" * 1_000_000, [], 10),
        ("invalid UTF-8", b"\xff\xfe" * 1000 + b"\n", [], 10),
        ("one over-long line", b"[" + b"1," * 3_000_000 + b"1]\n", ["--max-line-bytes",
                                                                   "1000000"], 10),
        ("truncated certificate", b"".join(lines[: len(lines) // 2]), [], 20),
        ("header twice", lines[0] + b"".join(lines), [], 20),
        ("certificate then garbage", text + b"{not json\n", [], 20),
        ("nested-array bomb", b'{"kind": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n", [], 10),
    ]


def run_case(data, extra: list[str], budget: float) -> tuple[int | None, float, str]:
    """(exit code or None if it had to be killed, seconds, last stderr line)."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "checker", "-", "--jobs", "1", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, cwd=ROOT)
    try:
        chunks = data() if callable(data) else [data]
        for chunk in chunks:
            if time.monotonic() - started > budget:
                break
            proc.stdin.write(chunk)
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the checker stopped reading: it has decided
    try:
        proc.wait(timeout=max(1.0, budget - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, time.monotonic() - started, "killed: over the budget"
    err = proc.stderr.read()
    last = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1]
    return proc.returncode, time.monotonic() - started, last


def run() -> dict:
    results = []
    for name, data, extra, budget in cases():
        code, seconds, message = run_case(data, extra, budget)
        results.append({"case": name, "exit": code, "seconds": round(seconds, 2),
                         "ok": code == 2 and seconds <= budget, "message": message[:160]})
    return {"cases": len(results), "failed": sum(not r["ok"] for r in results),
            "results": results}


def main() -> int:
    summary = run()
    for r in summary["results"]:
        print(f"{'ok ' if r['ok'] else 'BAD'} {r['case']:40} exit {r['exit']} "
              f"{r['seconds']:6.2f} s  {r['message']}")
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
