"""The matrix operations a certificate may record, over intervals.

A matrix is a list of rows of the arithmetic back-end's elements (checker/arith:
mpmath `iv.mpf` by default, or Arb balls).  Each operation returns an enclosure
of the exact real result for all real matrices inside its interval inputs:
add/sub/mean use the back-end's outward-rounded arithmetic, matmul, exp and
1/sqrt its rigorous kernels (arith/mp.py: exact integers rounded once, and the
checker's own exp in numbers.py; arith/arb.py: FLINT's arb_mat_mul, arb_exp).
Each op also has a *term*: the symbolic expression it denotes, so that rules
can demand that an input is exactly, say, EQKE as defined in spec/ (see
definitions.py).
"""

from __future__ import annotations

from . import elementary
from .arith import MPMATH
from .errors import Malformed
from .modelspec import MAX_ROTARY_CTX


def shape(m) -> tuple[int, int]:
    return (len(m), len(m[0]) if m else 0)


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise Malformed(message)


def _no_tick() -> None:
    pass


def matmul(a, b, tick=_no_tick, ar=MPMATH):
    """A·B for A of shape (r, n) and B of shape (n, c).  Cost r·n·c.

    The back-end's enclosure: mpmath computes exact interval arithmetic in
    integers and rounds outward once (arith/mp.py); Arb uses arb_mat_mul.
    """
    _need(shape(a)[1] == shape(b)[0], f"matmul: shapes {shape(a)} and {shape(b)} do not chain")
    return ar.matmul(a, b, tick)


def _broadcast(a, b, name):
    """Rows of b to pair with the rows of a: b has a's shape or is one row."""
    (ra, ca), (rb, cb) = shape(a), shape(b)
    _need(ca == cb and rb in (1, ra), f"{name}: shapes {shape(a)} and {shape(b)} do not match")
    return b if rb == ra else b * ra


def add(a, b, tick=_no_tick, ar=MPMATH):
    """A + B, where B may be a single row added to every row of A."""
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, _broadcast(a, b, "add"))]


def sub(a, b, tick=_no_tick, ar=MPMATH):
    """A − B, where B may be a single row subtracted from every row of A."""
    return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, _broadcast(a, b, "sub"))]


def mean_rows(a, tick=_no_tick, ar=MPMATH):
    """The 1×c matrix of column means of A (the average over positions)."""
    n = len(a)
    return [[ar.fsum(col) / n for col in zip(*a)]]


def row(a, i: int, tick=_no_tick, ar=MPMATH):
    """Row i of A as a 1×c matrix."""
    _need(isinstance(i, int) and 0 <= i < len(a), f"row: index {i!r} out of range")
    return [list(a[i])]


def transpose(a, tick=_no_tick, ar=MPMATH):
    return [list(col) for col in zip(*a)]


def div_sqrt(a, n: int, tick=_no_tick, ar=MPMATH):
    """A / sqrt(n) for a positive integer n (the attention scale)."""
    _need(isinstance(n, int) and n > 0, f"div_sqrt: {n!r} is not a positive integer")
    scale = ar.inv_sqrt(n)
    return [[x * scale for x in r] for r in a]


def exp(a, tick=_no_tick, ar=MPMATH):
    """Elementwise exp (the unnormalised attention weights), rigorously
    (numbers.exp_interval: mpmath's own iv.exp is not a guaranteed enclosure;
    Arb's arb_exp is)."""
    out = []
    for r in a:
        out.append([])
        for x in r:
            tick()
            out[-1].append(ar.exp(x))
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

# Ops that only move entries: the checker compares the recorded floats of
# their argument with the recorded result, exactly, in every back-end.
EXACT = frozenset({"row", "transpose"})

# Ops written against the back-end interface (they take `ar=`); any other op
# is computed in mpmath whatever back-end is selected.
PORTABLE = frozenset({"matmul", "add", "sub", "mean_rows", "row", "transpose", "div_sqrt",
                      "exp"})

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
