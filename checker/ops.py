"""The matrix operations a certificate may record, over intervals.

A matrix is a list of rows of `iv.mpf`.  Each operation returns an enclosure
of the exact real result for all real matrices inside its interval inputs:
add/sub/mean use mpmath's outward-rounded interval arithmetic, matmul is exact
integer arithmetic rounded outward once, exp and 1/sqrt are the checker's own
rigorous bounds (numbers.py).  Each op also has a *term*: the symbolic
expression it denotes, so that rules can demand that an input is exactly,
say, EQKE as defined in spec/ (see definitions.py).
"""

from __future__ import annotations

from mpmath import iv
from mpmath.libmp import from_man_exp, round_ceiling, round_floor

from . import elementary
from .errors import Malformed
from .modelspec import MAX_ROTARY_CTX
from .numbers import WORKING_PRECISION, exp_interval, inv_sqrt_interval


def shape(m) -> tuple[int, int]:
    return (len(m), len(m[0]) if m else 0)


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise Malformed(message)


def _no_tick() -> None:
    pass


def matmul(a, b, tick=_no_tick):
    """A·B for A of shape (r, n) and B of shape (n, c).  Cost r·n·c.

    Computed exactly, then rounded outward once: every endpoint is a dyadic
    rational n·2^e (mpmath's own representation), so with all endpoints of a
    matrix scaled to a common exponent, each entry's interval-arithmetic
    bounds  Σ_j min(products of endpoints), Σ_j max(...)  are exact Python
    integers.  This is the exact real result of interval arithmetic (tighter
    than per-operation rounding) and ~20× faster than mpmath's iv.fdot.
    """
    _need(shape(a)[1] == shape(b)[0], f"matmul: shapes {shape(a)} and {shape(b)} do not chain")
    a_lo, a_hi, a_exp = _to_integers(a)
    b_lo, b_hi, b_exp = _to_integers(b)
    b_lo_cols, b_hi_cols = list(zip(*b_lo)), list(zip(*b_hi))
    out = []
    for x_lo, x_hi in zip(a_lo, a_hi):
        row = []
        for y_lo, y_hi in zip(b_lo_cols, b_hi_cols):
            tick()
            lo = hi = 0
            for x0, x1, y0, y1 in zip(x_lo, x_hi, y_lo, y_hi):
                if x0 == x1 and y0 == y1:
                    p = x0 * y0
                    lo += p
                    hi += p
                else:
                    p = (x0 * y0, x0 * y1, x1 * y0, x1 * y1)
                    lo += min(p)
                    hi += max(p)
            row.append(_from_integers(lo, hi, a_exp + b_exp))
        out.append(row)
    return out


def _to_integers(m):
    """Matrices of integer endpoints (lo, hi) and an exponent E such that
    entry [i][j] is the interval [lo[i][j]·2^E, hi[i][j]·2^E], exactly."""
    pairs = [[_dyadic(x) for x in r] for r in m]
    exponent = min((e for r in pairs for (_, e_lo), (_, e_hi) in r for e in (e_lo, e_hi)),
                   default=0)
    lo = [[n << (e - exponent) for (n, e), _ in r] for r in pairs]
    hi = [[n << (e - exponent) for _, (n, e) in r] for r in pairs]
    return lo, hi, exponent


def _dyadic(x):
    """Interval x's endpoints as exact ((n_lo, e_lo), (n_hi, e_hi)), value n·2^e.
    mpmath stores a finite number as (sign, mantissa, exponent, bitcount);
    infinities and NaN have mantissa 0 and a non-zero exponent code."""
    out = []
    for sign, man, exp, _ in x._mpi_:
        _need(man != 0 or exp == 0, "matmul: an operand is not finite")
        out.append((-man if sign else man, exp))
    return tuple(out)


def _from_integers(lo: int, hi: int, exponent: int):
    """The interval [lo·2^E, hi·2^E] rounded outward to the working precision."""
    prec = WORKING_PRECISION
    return iv.make_mpf((from_man_exp(lo, exponent, prec, round_floor),
                        from_man_exp(hi, exponent, prec, round_ceiling)))


def _broadcast(a, b, name):
    """Rows of b to pair with the rows of a: b has a's shape or is one row."""
    (ra, ca), (rb, cb) = shape(a), shape(b)
    _need(ca == cb and rb in (1, ra), f"{name}: shapes {shape(a)} and {shape(b)} do not match")
    return b if rb == ra else b * ra


def add(a, b, tick=_no_tick):
    """A + B, where B may be a single row added to every row of A."""
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, _broadcast(a, b, "add"))]


def sub(a, b, tick=_no_tick):
    """A − B, where B may be a single row subtracted from every row of A."""
    return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, _broadcast(a, b, "sub"))]


def mean_rows(a, tick=_no_tick):
    """The 1×c matrix of column means of A (the average over positions)."""
    n = len(a)
    return [[iv.fsum(col) / n for col in zip(*a)]]


def row(a, i: int, tick=_no_tick):
    """Row i of A as a 1×c matrix."""
    _need(isinstance(i, int) and 0 <= i < len(a), f"row: index {i!r} out of range")
    return [list(a[i])]


def transpose(a, tick=_no_tick):
    return [list(col) for col in zip(*a)]


def div_sqrt(a, n: int, tick=_no_tick):
    """A / sqrt(n) for a positive integer n (the attention scale)."""
    _need(isinstance(n, int) and n > 0, f"div_sqrt: {n!r} is not a positive integer")
    scale = inv_sqrt_interval(n)
    return [[x * scale for x in r] for r in a]


def exp(a, tick=_no_tick):
    """Elementwise exp (the unnormalised attention weights), rigorously
    (numbers.exp_interval: mpmath's own iv.exp is not a guaranteed enclosure)."""
    out = []
    for r in a:
        out.append([])
        for x in r:
            tick()
            out[-1].append(exp_interval(x))
    return out


def rope_cos(n_ctx: int, rotary_dim: int, base: int, tick=_no_tick):
    """The (n_ctx × rotary_dim/2) table cos(i·base^(−2j/rotary_dim)), rigorously
    (elementary.rope_table: integer roots and Taylor bounds, not mpmath's trig)."""
    return elementary.rope_table(n_ctx, rotary_dim, base, odd=False, tick=tick)


def rope_sin(n_ctx: int, rotary_dim: int, base: int, tick=_no_tick):
    """The (n_ctx × rotary_dim/2) table sin(i·base^(−2j/rotary_dim)), rigorously."""
    return elementary.rope_table(n_ctx, rotary_dim, base, odd=True, tick=tick)


# Work charged per result element (times the inner dimension for matmul), in
# units of one interval operation: an exp costs ~50 of them (numbers.py).
COST = {"exp": 50, "rope_cos": 2000, "rope_sin": 2000}

# name -> (function, number of matrix arguments, names of integer parameters)
OPS = {
    "matmul": (matmul, 2, ()),
    "add": (add, 2, ()),
    "sub": (sub, 2, ()),
    "mean_rows": (mean_rows, 1, ()),
    "row": (row, 1, ("index",)),
    "transpose": (transpose, 1, ()),
    "div_sqrt": (div_sqrt, 1, ("n",)),
    "exp": (exp, 1, ()),
    "rope_cos": (rope_cos, 0, ("n_ctx", "rotary_dim", "base")),
    "rope_sin": (rope_sin, 0, ("n_ctx", "rotary_dim", "base")),
}


def result_shape(op: str, shapes: list[tuple[int, int]], params: dict) -> tuple[int, int]:
    """The shape `op` produces, or Malformed if the operands do not fit.

    Checked before any arithmetic so that a hostile certificate cannot make
    the checker build huge or ragged matrices.
    """
    if op == "matmul":
        (r, n), (n2, c) = shapes
        _need(n == n2, f"matmul: shapes {shapes[0]} and {shapes[1]} do not chain")
        return (r, c)
    if op in ("add", "sub"):
        (ra, ca), (rb, cb) = shapes
        _need(ca == cb and rb in (1, ra), f"{op}: shapes {shapes[0]} and {shapes[1]} do not match")
        return (ra, ca)
    if op == "mean_rows":
        _need(shapes[0][0] >= 1, "mean_rows of an empty matrix")
        return (1, shapes[0][1])
    if op == "row":
        i = params["index"]
        _need(0 <= i < shapes[0][0], f"row: index {i} out of range for shape {shapes[0]}")
        return (1, shapes[0][1])
    if op == "exp":
        return shapes[0]
    if op == "transpose":
        return (shapes[0][1], shapes[0][0])
    if op == "div_sqrt":
        _need(params["n"] > 0, "div_sqrt: n must be positive")
        return shapes[0]
    if op in ("rope_cos", "rope_sin"):
        k, r, base = params["n_ctx"], params["rotary_dim"], params["base"]
        _need(2 <= k <= MAX_ROTARY_CTX and r >= 2 and r % 2 == 0 and base >= 2,
              f"{op}: needs 2 <= n_ctx <= {MAX_ROTARY_CTX}, even rotary_dim >= 2, base >= 2")
        return (k, r // 2)
    raise Malformed(f"unknown op {op!r}")
