"""check-cert's resource limits (spec/format.md §limits), in a module of their own so that
the command line can show their defaults without importing the checker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Resource limits; exceeding one is exit 2 (Malformed), never a pass."""

    max_line_bytes: int = 32 << 20  # a 2^20-element op line takes ~27 MB
    max_lines: int = 100_000
    max_elements: int = 1 << 20  # per matrix
    max_work: int = 50_000_000  # scalar interval operations, over all lines
    max_seconds: float = 3600.0
    # recorded elements kept in memory (weights and op results; ~64 bytes each, plus ~420 per
    # back-end that computes with them), over all lines
    max_stored_elements: int = 1 << 22
