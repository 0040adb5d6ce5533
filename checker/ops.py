"""The matrix operations a certificate may record, over intervals.

A matrix is a list of rows of `iv.mpf`.  Each operation returns an enclosure
of the exact real result for all real matrices inside its interval inputs
(outward rounding is mpmath's).  Each also has a *term*: the symbolic
expression it denotes, so that rules can demand that an input is exactly,
say, EQKE as defined in spec/ (see definitions.py).
"""

from __future__ import annotations

from mpmath import iv

from .errors import Malformed


def shape(m) -> tuple[int, int]:
    return (len(m), len(m[0]) if m else 0)


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise Malformed(message)


def matmul(a, b):
    """A·B for A of shape (r, n) and B of shape (n, c).  Cost r·n·c."""
    _need(shape(a)[1] == shape(b)[0], f"matmul: shapes {shape(a)} and {shape(b)} do not chain")
    columns = list(zip(*b))
    return [[iv.fdot(zip(row, col)) for col in columns] for row in a]


def _broadcast(a, b, name):
    """Rows of b to pair with the rows of a: b has a's shape or is one row."""
    (ra, ca), (rb, cb) = shape(a), shape(b)
    _need(ca == cb and rb in (1, ra), f"{name}: shapes {shape(a)} and {shape(b)} do not match")
    return b if rb == ra else b * ra


def add(a, b):
    """A + B, where B may be a single row added to every row of A."""
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, _broadcast(a, b, "add"))]


def sub(a, b):
    """A − B, where B may be a single row subtracted from every row of A."""
    return [[x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, _broadcast(a, b, "sub"))]


def mean_rows(a):
    """The 1×c matrix of column means of A (the average over positions)."""
    n = len(a)
    return [[iv.fsum(col) / n for col in zip(*a)]]


def row(a, i: int):
    """Row i of A as a 1×c matrix."""
    _need(isinstance(i, int) and 0 <= i < len(a), f"row: index {i!r} out of range")
    return [list(a[i])]


def transpose(a):
    return [list(col) for col in zip(*a)]


def div_sqrt(a, n: int):
    """A / sqrt(n) for a positive integer n (the attention scale)."""
    _need(isinstance(n, int) and n > 0, f"div_sqrt: {n!r} is not a positive integer")
    scale = 1 / iv.sqrt(n)
    return [[x * scale for x in r] for r in a]


def exp(a):
    """Elementwise exp (the unnormalised attention weights)."""
    return [[iv.exp(x) for x in r] for r in a]


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
    raise Malformed(f"unknown op {op!r}")
