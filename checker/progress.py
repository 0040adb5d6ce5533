"""A progress line for check-cert on a terminal (standard library only).

Why: checking a 1.5 MB cubic certificate takes 5-20 s, and a silent terminal
looks like a hang.  The line goes to stderr only, only when stderr is a
terminal, only after DELAY seconds, and is erased when the check ends, so
stdout, --json and every non-interactive use (tests, CI logs, pipes) see
exactly the same bytes as without it.  It never affects a verdict: it is
told how far the reading got and draws; it reads nothing and decides nothing.
"""

from __future__ import annotations

import os
import sys
import time

DELAY = 1.0  # seconds before the line first appears: quick checks stay silent
INTERVAL = 0.2  # seconds between redraws
WIDTH = 24  # characters of the bar itself


class Progress:
    """Lines processed and bytes read of `total_bytes` (0: unknown, e.g. stdin).

    Use as a context manager; `advance(n_bytes)` after each line.
    """

    def __init__(self, total_bytes: int, enabled: bool = True, stream=None,
                 clock=time.monotonic):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and _is_terminal(self.stream)
        self.total = max(0, total_bytes)
        self.clock = clock
        self.started = clock()
        self.next_draw = self.started + DELAY
        self.lines = self.done = self.drawn = 0
        self.pid = os.getpid()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, n_bytes: int) -> None:
        """One more line of `n_bytes` was processed; redraw if it is time."""
        self.lines += 1
        self.done += n_bytes
        if self.enabled and self.clock() >= self.next_draw:
            self.next_draw = self.clock() + INTERVAL
            self._write("\r" + self.text().ljust(self.drawn))

    def heartbeat(self) -> None:
        """The check is inside a line (a rule that runs for minutes): redraw if it is time,
        so that the seconds keep counting ('… 44 lines …, checking line 44, 37 s').  Only in
        the process that drew the line: a rule's worker processes (forks) stay silent."""
        if self.enabled and os.getpid() == self.pid and self.clock() >= self.next_draw:
            self.next_draw = self.clock() + INTERVAL
            self._write("\r" + self.text(inside=True).ljust(self.drawn))

    def text(self, inside: bool = False) -> str:
        """The line as drawn, e.g. 'check-cert [#####-----] 52% 812 lines, 0.8/1.5 MB, 6 s'."""
        seconds = f"{self.clock() - self.started:.0f} s"
        if inside:
            seconds = f"checking line {self.lines}, {seconds}"  # numbered from 0, as ids are
        if not self.total:
            return f"check-cert: {self.lines} lines, {self.done / 1e6:.1f} MB, {seconds}"
        frac = min(1.0, self.done / self.total)
        bar = "#" * round(frac * WIDTH) + "-" * (WIDTH - round(frac * WIDTH))
        return (f"check-cert [{bar}] {frac:4.0%} {self.lines} lines, "
                f"{self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB, {seconds}")

    def show(self, text: str) -> None:
        """Draw `text` as the status line now (a caller with its own notion of progress,
        e.g. the audit's certificates checked); nothing when disabled."""
        if self.enabled:
            self._write("\r" + text.ljust(self.drawn))

    def close(self) -> None:
        """Erase the line (nothing stays on the terminal)."""
        if self.drawn:
            self._write("\r" + " " * self.drawn + "\r")
            self.drawn = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed: progress is optional, stop drawing
            self.enabled = False
            return
        self.drawn = max(self.drawn, len(text.strip("\r")))


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def file_size(path: str) -> int:
    """The size of the file at `path` in bytes, 0 if unknown (stdin, a pipe)."""
    try:
        return os.stat(path).st_size if path != "-" else 0
    except OSError:
        return 0
