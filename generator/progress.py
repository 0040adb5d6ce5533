"""Terminal output of the generator commands: progress bars (stderr; silent when
not a terminal), readers that stop early, output files checked before the work."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

BROKEN_PIPE = 141  # what a shell reports for a command ended by SIGPIPE (128 + 13)


def progress_bar(iterable, desc: str, enabled: bool = True):
    """Wrap `iterable` in a tqdm bar on stderr when enabled and stderr is a tty."""
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, file=sys.stderr, disable=None, leave=False)


def stdout_closed() -> None:
    """After a BrokenPipeError on stdout: point stdout at /dev/null, so that the
    interpreter's final flush at exit does not fail again with a traceback."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout already closed or not a real file
        pass


def pipe_safe(main):
    """Wrap a command's main(argv): a reader that stops early (`... | head`) ends
    the command quietly with the shell's SIGPIPE code, instead of a traceback."""

    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except BrokenPipeError:
            stdout_closed()
            return BROKEN_PIPE

    return wrapped


def unwritable(path: str) -> str | None:
    """Why the file `path` cannot be written, or None.  Checked before the work,
    so that minutes of proof search or training do not end in an OSError."""
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        return f"{path} is a directory"
    if not parent.is_dir():
        return f"directory {parent} does not exist"
    if target.exists() and not os.access(target, os.W_OK):
        return f"{path} is not writable"
    if not target.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None
