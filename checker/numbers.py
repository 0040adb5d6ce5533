"""Exact decoding of recorded numbers, and the interval type the checker uses.

Every number in a certificate is an IEEE-754 binary32 or binary64 value stored
as base64 of its little-endian bytes: decoding is exact, there is no decimal
rounding anywhere.  Intervals are mpmath `iv.mpf` at the working precision;
all arithmetic on them rounds outward, so each computed interval encloses the
exact real result of the same operations on any reals inside the inputs.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

from mpmath import iv
from mpmath.libmp import fzero, mpf_add, mpf_le, mpf_lt, mpf_mul, mpf_sub, round_ceiling

from .errors import Malformed, Rejected

# Working precision of the checker's interval arithmetic, in bits.  Higher than
# binary64 so that the checker's enclosures are (almost always) narrower than
# the generator's float64 ones; correctness does not depend on the value.
WORKING_PRECISION = 80
iv.prec = WORKING_PRECISION

_ITEM = {"f32": ("f", 4), "f64": ("d", 8)}


def decode_floats(text: object, count: int, dtype: str, what: str) -> tuple[float, ...]:
    """Decode `count` finite little-endian floats of `dtype` from base64 `text`.

    Raises Malformed on bad base64, a wrong byte length, NaN or infinity.
    """
    if dtype not in _ITEM:
        raise Malformed(f"{what}: unknown dtype {dtype!r} (expected 'f32' or 'f64')")
    if not isinstance(text, str):
        raise Malformed(f"{what}: expected a base64 string")
    code, size = _ITEM[dtype]
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise Malformed(f"{what}: invalid base64 ({err})") from None
    if len(raw) != count * size:
        raise Malformed(f"{what}: {len(raw)} bytes, expected {count} {dtype} values "
                        f"({count * size} bytes)")
    values = struct.unpack(f"<{count}{code}", raw)
    for x in values:
        if not math.isfinite(x):
            raise Malformed(f"{what}: contains NaN or infinity")
    return values


def encode_floats(values, dtype: str) -> str:
    """Inverse of decode_floats (used by tests and by the generator)."""
    code, _ = _ITEM[dtype]
    return base64.b64encode(struct.pack(f"<{len(values)}{code}", *values)).decode("ascii")


def decode_intervals(lo_text: object, hi_text: object, count: int, what: str) -> list:
    """Decode recorded intervals [lo_i, hi_i] (binary64 endpoints) into iv.mpf.

    Validates lo <= hi explicitly: mpmath checks this only with `assert`,
    which `python -O` removes.
    """
    lo = decode_floats(lo_text, count, "f64", f"{what} (lo)")
    hi = decode_floats(hi_text, count, "f64", f"{what} (hi)")
    out = []
    for a, b in zip(lo, hi):
        if not a <= b:
            raise Malformed(f"{what}: reversed interval [{a!r}, {b!r}]")
        out.append(iv.mpf((a, b)))
    return out


def point(x: float):
    """The exact point interval [x, x] of a finite float."""
    return iv.mpf((x, x))


def contains(outer, inner) -> bool:
    """True iff interval `inner` lies inside interval `outer` (closed)."""
    (outer_lo, outer_hi), (inner_lo, inner_hi) = outer._mpi_, inner._mpi_
    return mpf_le(outer_lo, inner_lo) and mpf_le(inner_hi, outer_hi)


_ZERO = iv.mpf(0)


def is_negative(x) -> bool:
    """True iff every real in interval x is < 0 (its upper endpoint is < 0).
    mpmath's interval `<` is True only when it holds for all members."""
    return (x < _ZERO) is True


# --- Upper-bound arithmetic -------------------------------------------------
# Where a rule only needs an upper bound of an expression that is monotone in
# its parts (sums, and products with non-negative weights), it carries raw
# mpmath numbers x̄ meaning "the real X satisfies X <= x̄", and rounds every
# operation upward (mpmath.libmp, round_ceiling).  Soundness: if X <= x̄,
# Y <= ȳ then X + Y <= x̄ + ȳ; if moreover W ∈ [w, w̄] with w >= 0 then
# W·X <= w̄·x̄ when x̄ >= 0 and W·X <= w·x̄ when x̄ < 0.  This is 3-4× faster
# than full intervals, which matters in the cubic rule's O(v³) loops.


def upper(x):
    """The upper endpoint of interval x (a raw mpmath number)."""
    return x._mpi_[1]


def up_add(a, b):
    """An upper bound of X + Y given X <= a, Y <= b."""
    return mpf_add(a, b, WORKING_PRECISION, round_ceiling)


def up_diff(x, y):
    """An upper bound of X − Y for X in interval x and Y in interval y."""
    return mpf_sub(x._mpi_[1], y._mpi_[0], WORKING_PRECISION, round_ceiling)


def up_mul(w, a):
    """An upper bound of W·X for W in interval w (which must be >= 0) and X <= a."""
    w_lo, w_hi = w._mpi_
    if mpf_lt(w_lo, fzero):
        raise Rejected("a weight that must be positive (an attention weight) has a recorded "
                       "enclosure reaching below 0")
    return mpf_mul(w_lo if mpf_lt(a, fzero) else w_hi, a, WORKING_PRECISION, round_ceiling)


def below_zero(a) -> bool:
    """True iff the upper bound a is < 0 (so the bounded real is < 0)."""
    return mpf_lt(a, fzero)


def greater(a, b) -> bool:
    """Exact comparison a > b of raw mpmath numbers."""
    return mpf_lt(b, a)
