"""Progress bars for long generator work (stderr; silent when not a terminal)."""

from __future__ import annotations

import sys


def progress_bar(iterable, desc: str, enabled: bool = True):
    """Wrap `iterable` in a tqdm bar on stderr when enabled and stderr is a tty."""
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, file=sys.stderr, disable=None, leave=False)
