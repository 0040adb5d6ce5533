"""Exact decoding of recorded numbers, and the mpmath arithmetic of the checker.

Every number in a certificate is an IEEE-754 binary32 or binary64 value stored
as base64 of its little-endian bytes: decoding is exact, there is no decimal
rounding anywhere.  Intervals are mpmath `iv.mpf` at the working precision;
all arithmetic on them rounds outward, so each computed interval encloses the
exact real result of the same operations on any reals inside the inputs.
Also here: upper-bound arithmetic (for the cubic rule's hot loops) and the
checker's own rigorous exp and 1/sqrt (mpmath's iv.exp is not rigorous).
These are the kernels of the reference back-end (arith/mp.py); rules reach
them through the back-end interface (checker/arith).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

from mpmath import iv
from mpmath.libmp import (
    from_man_exp,
    fzero,
    mpf_add,
    mpf_le,
    mpf_lt,
    mpf_mul,
    mpf_sub,
    round_ceiling,
    round_floor,
)

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
    if base64.b64encode(raw).decode("ascii") != text:  # one encoding per value
        raise Malformed(f"{what}: base64 is not in canonical (RFC 4648, padded) form")
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


def decode_bounds(lo_text: object, hi_text: object, count: int,
                  what: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Decode recorded intervals [lo_i, hi_i] (binary64 endpoints) as two
    tuples of floats, validating lo <= hi explicitly (mpmath checks this only
    with `assert`, which `python -O` removes)."""
    lo = decode_floats(lo_text, count, "f64", f"{what} (lo)")
    hi = decode_floats(hi_text, count, "f64", f"{what} (hi)")
    for a, b in zip(lo, hi):
        if not a <= b:
            raise Malformed(f"{what}: reversed interval [{a!r}, {b!r}]")
    return lo, hi


def decode_intervals(lo_text: object, hi_text: object, count: int, what: str) -> list:
    """Decode recorded intervals [lo_i, hi_i] (binary64 endpoints) into iv.mpf."""
    lo, hi = decode_bounds(lo_text, hi_text, count, what)
    return [iv.mpf((a, b)) for a, b in zip(lo, hi)]


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


def up_minus(a, y):
    """An upper bound of X − Y given X <= a and Y in interval y."""
    return mpf_sub(a, y._mpi_[0], WORKING_PRECISION, round_ceiling)


def up_diff(x, y):
    """An upper bound of X − Y for X in interval x and Y in interval y."""
    return up_minus(x._mpi_[1], y)


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


# --- Rigorous exp and 1/sqrt ------------------------------------------------
# mpmath's elementary functions are accurate but not rigorous: iv.exp rounds an
# approximation outward, and its upper end can lie below exp(x) (e.g. at
# x = 2^-52).  The checker therefore computes these two itself with integers:
# every step is a floor or a ceiling of an exact integer operation, so the
# results are bounds by construction.  Only the last step, rounding an exact
# dyadic n·2^e to the working precision (from_man_exp), uses mpmath.

_GUARD_BITS = 64
_EXP_TERMS = 14  # Taylor terms at |y| <= 2^-8: remainder < 2^-120


def _fixed_exp_small(p: int, q: int, bits: int) -> tuple[int, int]:
    """For y = p / 2^q with 0 <= y <= 2^-8: integers (L, H) with
    L·2^-bits <= exp(y) <= H·2^-bits.

    exp(y) = Σ_j y^j/j!; every term is >= 0, so a sum of rounded-down terms is a
    lower bound.  Upper: rounded-up terms plus the Lagrange remainder
    y^N/N!·e^y <= 2·y^N/N! (e^y < 2)."""
    lo = hi = term_lo = term_hi = 1 << bits
    for j in range(1, _EXP_TERMS):
        term_lo = (term_lo * p) // (j << q)
        term_hi = -((-term_hi * p) // (j << q))
        lo += term_lo
        hi += term_hi
    hi += 2 * -((-term_hi * p) // (_EXP_TERMS << q))
    return lo, hi


# exp is evaluated only for |x| < 2^13; the cost of the squarings grows with
# |x|.  At or below −2^13 the bounds [0, exp(−2^12)] are used (exp is increasing
# and positive); at or above 2^13, exp(x) could never be recorded as binary64.
EXP_ARGUMENT_LIMIT = 1 << 13
_EXP_FLOOR = (1, 1, 12, 1)  # the raw mpf −2^12


def _exp_bounds(x):
    """Raw mpf bounds (lower, upper) of exp(x) for a finite raw mpf x."""
    sign, man, exp, _ = x
    if man == 0:
        return from_man_exp(1, 0), from_man_exp(1, 0)
    if man.bit_length() + exp > 13:  # |x| >= 2^13
        if not sign:
            raise Malformed(f"exp of an argument above {EXP_ARGUMENT_LIMIT} (its value could "
                            "not be recorded)")
        return fzero, _exp_bounds(_EXP_FLOOR)[1]
    p, q = (man << exp, 0) if exp >= 0 else (man, -exp)  # |x| = p / 2^q
    halvings = max(0, man.bit_length() + exp + 8)  # |x| / 2^halvings <= 2^-8
    bits = WORKING_PRECISION + _GUARD_BITS + halvings
    lo, hi = _fixed_exp_small(p, q + halvings, bits)
    for _ in range(halvings):  # exp(|x|) = exp(|x| / 2^h)^(2^h); bounds stay >= 1
        lo = (lo * lo) >> bits
        hi = -((-(hi * hi)) >> bits)
    if not sign:  # exp(x) ∈ [lo, hi]·2^-bits
        return (from_man_exp(lo, -bits, WORKING_PRECISION, round_floor),
                from_man_exp(hi, -bits, WORKING_PRECISION, round_ceiling))
    # exp(−|x|) = 1 / exp(|x|) ∈ [2^bits / hi, 2^bits / lo]; computed at scale
    # 2^-(bits + shift), shift >= log2(hi), so the quotients keep `bits` bits.
    shift = hi.bit_length()
    one = 1 << (2 * bits + shift)
    return (from_man_exp(one // hi, -(bits + shift), WORKING_PRECISION, round_floor),
            from_man_exp(-(-one // lo), -(bits + shift), WORKING_PRECISION, round_ceiling))


def exp_interval(x):
    """A rigorous enclosure of exp over the interval x (exp is increasing)."""
    _need_finite(x)
    lo_end, hi_end = x._mpi_
    return iv.make_mpf((_exp_bounds(lo_end)[0], _exp_bounds(hi_end)[1]))


def inv_sqrt_interval(n: int):
    """A rigorous enclosure of 1/sqrt(n) for an integer n >= 1, via math.isqrt."""
    bits = WORKING_PRECISION + _GUARD_BITS
    root_lo = math.isqrt(n << (2 * bits))  # floor(sqrt(n)·2^bits)
    root_hi = root_lo if root_lo * root_lo == n << (2 * bits) else root_lo + 1
    return iv.make_mpf((from_man_exp((1 << 2 * bits) // root_hi, -bits, WORKING_PRECISION,
                                     round_floor),
                        from_man_exp(-((-(1 << 2 * bits)) // root_lo), -bits,
                                     WORKING_PRECISION, round_ceiling)))


def _need_finite(x) -> None:
    for _, man, exp, _ in x._mpi_:
        if man == 0 and exp != 0:
            raise Malformed("exp of a non-finite interval")
