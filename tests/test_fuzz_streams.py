"""The hostile-stream cases of issue 18 (benchmarks/fuzz_streams.py): blank and whitespace
lines past --max-lines, an endless stream under --max-seconds, NUL bytes, invalid UTF-8, an
over-long line, truncation, a repeated header, trailing garbage, a JSON nesting bomb; each
must end with exit 2 within its budget."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import fuzz_streams  # noqa: E402


def test_every_hostile_stream_ends_malformed_in_time():
    summary = fuzz_streams.run()
    assert summary["failed"] == 0, [r for r in summary["results"] if not r["ok"]]
