"""Rigorous interval matrices in numpy float64 with outward rounding.

Untrusted, but written to be sound so that certificates pass: every result
encloses the exact real result of the operation on any reals inside the
inputs.  Rounding: numpy computes in round-to-nearest; a result r = fl(x)
satisfies pred(r) <= x <= succ(r), so one nextafter step outward encloses a
single operation, and sums of n terms get the classical error bound
|fl(Σ) − Σ| <= γ_n Σ|terms| (Higham, Thm 3.1 / 4.2), taken generously.

Each result is finally widened by a relative 2^-40, so that the checker's
own (tighter, higher-precision) enclosure of the same operation lies inside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_U = 2.0**-53
_PAD = 2.0**-40
_TINY = 2.0**-1000  # absorbs underflow in products and sums


def down(x):
    return np.nextafter(x, -np.inf)


def up(x):
    return np.nextafter(x, np.inf)


@dataclass(frozen=True)
class IMat:
    """An interval matrix: lo <= hi elementwise, both float64 arrays (2-D)."""

    lo: np.ndarray
    hi: np.ndarray

    @staticmethod
    def point(x) -> IMat:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        return IMat(x.copy(), x.copy())

    @property
    def shape(self):
        return self.lo.shape

    @property
    def mid(self):
        return 0.5 * self.lo + 0.5 * self.hi


def _widen(lo, hi) -> IMat:
    """The final outward pad (see module docstring)."""
    scale = np.maximum(np.abs(lo), np.abs(hi))
    lo = down(lo - _PAD * scale - _TINY)
    hi = up(hi + _PAD * scale + _TINY)
    return IMat(lo, hi)


def add(a: IMat, b: IMat) -> IMat:
    return _widen(down(a.lo + b.lo), up(a.hi + b.hi))


def sub(a: IMat, b: IMat) -> IMat:
    return _widen(down(a.lo - b.hi), up(a.hi - b.lo))


def _sum_bounds(lo_terms, hi_terms, axis):
    """Enclose Σ over `axis` of terms known to lie in [lo_terms, hi_terms]."""
    n = lo_terms.shape[axis]
    gamma = (n + 2) * _U * 2  # generous γ_n, also covering each product's rounding
    s_lo = lo_terms.sum(axis=axis)
    s_hi = hi_terms.sum(axis=axis)
    e_lo = gamma * np.abs(lo_terms).sum(axis=axis) + n * _TINY
    e_hi = gamma * np.abs(hi_terms).sum(axis=axis) + n * _TINY
    return down(s_lo - e_lo), up(s_hi + e_hi)


def matmul(a: IMat, b: IMat) -> IMat:
    """Enclosure of A·B.  Products of intervals via the four endpoint products."""
    # (r, n, 1) * (1, n, c) -> (r, n, c)
    al, ah = a.lo[:, :, None], a.hi[:, :, None]
    bl, bh = b.lo[None, :, :], b.hi[None, :, :]
    if np.array_equal(a.lo, a.hi) and np.array_equal(b.lo, b.hi):
        p = al * bl
        lo, hi = _sum_bounds(p, p, axis=1)
    else:
        prods = np.stack([al * bl, al * bh, ah * bl, ah * bh])
        lo, hi = _sum_bounds(prods.min(axis=0), prods.max(axis=0), axis=1)
    return _widen(lo, hi)


def mean_rows(a: IMat) -> IMat:
    n = a.shape[0]
    lo, hi = _sum_bounds(a.lo, a.hi, axis=0)
    return _widen(down(lo / n)[None, :], up(hi / n)[None, :])


def row(a: IMat, i: int) -> IMat:
    return IMat(a.lo[i:i + 1].copy(), a.hi[i:i + 1].copy())


def transpose(a: IMat) -> IMat:
    return IMat(a.lo.T.copy(), a.hi.T.copy())


def div_sqrt(a: IMat, n: int) -> IMat:
    """A / sqrt(n): multiply by an enclosure of 1/sqrt(n) (a positive scalar)."""
    s = 1.0 / np.sqrt(float(n))
    s_lo, s_hi = s * (1 - 8 * _U), s * (1 + 8 * _U)  # sqrt and / each err <= 1 ulp
    cand = np.stack([a.lo * s_lo, a.lo * s_hi, a.hi * s_lo, a.hi * s_hi])
    return _widen(down(cand.min(axis=0)), up(cand.max(axis=0)))


def exp(a: IMat) -> IMat:
    """Elementwise exp.  numpy's exp is not correctly rounded but is accurate to
    a few ulp; the relative allowance 2^-44 covers that many times over."""
    with np.errstate(over="raise", under="ignore"):
        lo, hi = np.exp(a.lo), np.exp(a.hi)
    out = _widen(lo * (1 - 2.0**-44), hi * (1 + 2.0**-44))
    # exp > 0: an underflowed lower end stays at 0 (rules need attention weights >= 0)
    return IMat(np.maximum(out.lo, 0.0), out.hi)


def rope_table_float(n_ctx: int, rotary_dim: int, base: int, odd: bool) -> np.ndarray:
    """cos (or sin) of i·base^(−2j/rotary_dim), float64 (n_ctx, rotary_dim/2)."""
    j = np.arange(rotary_dim // 2, dtype=np.float64)
    angles = np.arange(n_ctx, dtype=np.float64)[:, None] * float(base) ** (-2.0 * j / rotary_dim)
    return np.sin(angles) if odd else np.cos(angles)


def _rope(n_ctx: int, rotary_dim: int, base: int, odd: bool) -> IMat:
    """Enclosure of the RoPE table: mpmath at 120 bits, then ±2^-60 absolute
    (far more than mpmath's error; untrusted anyway, the checker re-derives it)."""
    import mpmath

    with mpmath.workprec(120):
        rows = []
        for i in range(n_ctx):
            row = []
            for j in range(rotary_dim // 2):
                angle = i * mpmath.power(base, mpmath.mpf(-2 * j) / rotary_dim)
                row.append(float(mpmath.sin(angle) if odd else mpmath.cos(angle)))
            rows.append(row)
    mid = np.array(rows, dtype=np.float64)
    return IMat(down(mid - 2.0**-60), up(mid + 2.0**-60))


OPS = {
    "rope_cos": lambda k, r, base: _rope(k, r, base, odd=False),
    "rope_sin": lambda k, r, base: _rope(k, r, base, odd=True),
    "exp": exp,
    "matmul": matmul,
    "add": lambda a, b: add(a, _bcast(b, a)),
    "sub": lambda a, b: sub(a, _bcast(b, a)),
    "mean_rows": mean_rows,
    "row": row,
    "transpose": transpose,
    "div_sqrt": div_sqrt,
}


def _bcast(b: IMat, a: IMat) -> IMat:
    if b.shape == a.shape:
        return b
    return IMat(np.broadcast_to(b.lo, a.shape), np.broadcast_to(b.hi, a.shape))
