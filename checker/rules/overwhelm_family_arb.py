"""Rule overwhelm_family under `--arith arb`: Lemma R's upper-bound arithmetic with Arb
(python-flint) on the one-layer path (spec/rules.md §overwhelm_family,
spec/arithmetic.md §Lemma R with Arb).

The theorem, the tables, the hints and every other step are overwhelm_family.py's (the
inputs are its mpmath intervals: certificate.py builds them in mpmath, INPUT_ARITHMETIC).
Only Lemma R's hot loop changes back-end: for a functional y (a column of a table, as
mpmath intervals) and a hinted λ, the bound

    Σ_{i} max_{u ∈ slots(i)} up_mul(w(i, u), up_diff(sign·y(i, u), λ))

is the reference's expression term by term, on the same exact endpoints (the mpmath
intervals' endpoints are dyadic rationals, converted to Arb points exactly), with each
operation's result replaced by the upper end of Arb's ball at ARB_PRECISION = 128 bits
(arb.upper(): arb_get_ubound_arf, rounded up) instead of mpmath's ceiling at 80 bits:

- up_diff: sign·y's upper end minus λ's lower end (λ a binary64 hint: exact), rounded up;
- up_mul: the weight's lower end if the bound a < 0, else its upper end, times a, rounded
  up (w >= 0 is checked, as the reference does: a weight enclosure reaching below 0 is
  Rejected);
- the maximum over a free position's tokens: exact comparison of exact points;
- the sum over positions: rounded up; the verdict: the total < 0, exact.

Each result is >= the exact value of its operation on its inputs, and each operation is
monotone in the bounded input (w >= 0), so the total bounds the left side of Lemma R
from above (spec/overwhelm.md §1): the same quantity bounded as the reference bounds it,
at a higher precision.  A non-finite endpoint (an infinite or NaN enclosure) is not
converted: that bound is computed by the reference (mpmath) path itself.  Permutation
claims (Lemma R-perm, dual potentials) stay on the reference path.

The conversions are done once per table (a column's upper ends and negated lower ends, on
first use) and once per query position (the weights' ends), so the per-term work is four
Arb operations on exact points.
"""

from __future__ import annotations

import math

from mpmath.libmp import fzero

from ..arith.arb import flint_module
from .overwhelm_family import AtQuery, Head


class _Converter:
    """Exact conversion of mpmath raw numbers to Arb points, and per-table column caches."""

    def __init__(self):
        flint = flint_module()
        self.arb, self.arf = flint.arb, flint.arf
        self.zero = flint.arb(0)
        self.columns = {}  # (id(table), col, sign) -> (table, [arb points]) or None

    def point(self, raw):
        """The mpmath raw number `raw` as an exact Arb point; None if not finite."""
        sign, man, exp, _ = raw
        if not man:
            return self.zero if raw == fzero else None  # inf, -inf, nan: not converted
        return self.arb(self.arf((-man if sign else man, exp)))

    def column(self, table: list, col: int, sign: int):
        """Upper ends of sign·table[r][col] for every row r (exact points), or None if one is
        not finite.  Cached per table object (kept alive with its entry)."""
        key = (id(table), col, sign)
        hit = self.columns.get(key)
        if hit is not None and hit[0] is table:
            return hit[1]
        out = []
        for row in table:
            lo, hi = row[col]._mpi_
            x = self.point(hi) if sign > 0 else self.point(lo)
            if x is None:
                out = None
                break
            out.append(x if sign > 0 else -x)  # negation of a point: exact
        self.columns[key] = (table, out)
        return out


class ArbHead(Head):
    """overwhelm_family.Head with Lemma R's sum computed with Arb points (module docstring)."""

    def __init__(self, head: Head, conv: _Converter):  # the reference head's fields
        self.slots, self.tables, self.w, self.perm = head.slots, head.tables, head.w, head.perm
        self.conv = conv
        self.w_ends = {}  # (i, u) -> (w_lo, w_hi) as Arb points
        # usable: every weight's ends finite and w_lo >= 0 (else the reference path, which
        # rejects a weight reaching below 0 as numbers.up_mul does)
        self.usable = True
        for slot, w in head.w.items():
            lo, hi = (conv.point(x) for x in w._mpi_)
            if lo is None or hi is None or not lo >= conv.zero:
                self.usable = False
            self.w_ends[slot] = (lo, hi)

    def average_below(self, y: list, col: int, lam: float, sign: int = 1,
                      key: int | None = None) -> bool:
        if self.perm:  # Lemma R-perm: the reference path
            return super().average_below(y, col, lam, sign, key)
        values = self.conv.column(y, col, sign)
        finite = isinstance(lam, float) and math.isfinite(lam)
        lam_point = self.conv.arb(lam) if finite else None  # arf_set_d: exact
        if values is None or lam_point is None or not self.usable:
            return super().average_below(y, col, lam, sign, key)
        zero, row, ends = self.conv.zero, self.tables.row, self.w_ends
        total = None
        for i, toks in enumerate(self.slots):
            best = None
            for u in toks:
                a = (values[row(i, u)] - lam_point).upper()  # up_diff
                w_lo, w_hi = ends[(i, u)]
                b = ((w_lo if a < zero else w_hi) * a).upper()  # up_mul
                if best is None or b > best:
                    best = b
            total = best if total is None else (total + best).upper()  # up_add
        return total < zero  # below_zero


class ArbAtQuery(AtQuery):
    """overwhelm_family.AtQuery whose heads compute Lemma R with Arb."""

    def __init__(self, tables, fun, claim, p: int, hint: dict, conv: _Converter):
        super().__init__(tables, fun, claim, p, hint)
        self.heads = [ArbHead(head, conv) for head in self.heads]


def query_checker(claim):
    """A constructor (tables, fun, claim, p, hint) -> AtQuery for `--arith arb`: the Arb
    heads for a free claim, the reference AtQuery for a permutation claim."""
    if claim.free_perm is not None:
        return AtQuery
    conv = _Converter()
    return lambda tables, fun, claim, p, hint: ArbAtQuery(tables, fun, claim, p, hint, conv)
