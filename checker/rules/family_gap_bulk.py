"""Rule family_gap under `--arith arb`: a class proof in one pass (spec/rules.md §family_gap,
"The class proof in one pass"; spec/arithmetic.md §Lemma R filtered in binary64).

BulkSteps.check is AtQuery.check (overwhelm_family's steps 2–6 on the fast path of
family_gap_arb / overwhelm_family_arb) with the same values and the same verdict, faster:

- every interval step is the reference's mpmath interval operation on raw (lo, hi) pairs
  (mpi_add, mpi_div, mpi_mul, mpi_abs at iv.prec, as overwhelm_family_arb's raw_* helpers;
  a float hint λ as iv.mpf(λ) converts it, exactly), in the reference's order: the same raw
  numbers bit for bit; products are BatchedTables.matmul (mp.matmul's values);
- every Lemma R bound is first offered to the binary64 filter (overwhelm_family_arb.
  filter_below, on the table's columns converted once per lifetime: float_columns), which
  can only confirm a bound whose exact integer sum is < 0, and otherwise decided by that
  exact sum (ArbHead.exact_below): the verdicts of ArbHead.average_below;
- a direction bound is confirmed on the exact product VO_j·e (confirmed_directions).

Any bound not confirmed, or a bound of the logits not below 0, ends the pass (_Fallback) and
the class is proved again by AtQuery.check step by step: its verdict and its message.  So
the pass accepts exactly when AtQuery.check does; it only skips the per-step objects.
"""

from __future__ import annotations

import math

from mpmath import iv
from mpmath.libmp import from_float, fzero, to_float
from mpmath.libmp.libmpi import mpi_abs, mpi_add, mpi_div, mpi_mul, mpi_zero

from ..elementary import sqrt_interval
from ..errors import Rejected
from ..numbers import below_zero, up_add
from . import forward
from .overwhelm_family import _upper_ratio
from .overwhelm_family_arb import (
    FILTER_HIGH,
    IntMatrix,
    column_entries,
    confirmed_directions,
    filter_below,
    form_product,
    raw_dot,
)

ZERO = (fzero, fzero)  # the raw interval [0, 0]


class _Fallback(Exception):
    """A bound the pass did not confirm: AtQuery.check decides the class."""


def raw_float(x: float) -> tuple:
    """mpmath's from_float(x) for a binary64 x (the hints' exact conversion, hot: ~400 per
    class).  A finite x is num/2^k exactly (float.as_integer_ratio, in lowest terms, so num
    is odd when k > 0): the normalised raw mpf (sign, odd man, exp, bitcount), fzero for ±0;
    an integer (den = 1) has its trailing zero bits moved into the exponent.  The same tuple
    as from_float (tests/test_family_gap_arb_forms.py), without its frexp and normalisation.
    O(1)."""
    if not math.isfinite(x):  # (the hints are finite: decode_hint) from_float's own answer
        return from_float(x)
    num, den = x.as_integer_ratio()
    if not num:
        return fzero
    sign = num < 0
    man = -num if sign else num
    exp = 1 - den.bit_length()
    if den == 1:  # an integer: mpmath's mantissa is odd
        zeros = (man & -man).bit_length() - 1
        man, exp = man >> zeros, zeros
    return int(sign), man, exp, man.bit_length()


def _pair(x: float) -> tuple:
    """iv.mpf(x)'s raw interval for a binary64 x (exact: 53 <= iv.prec bits)."""
    r = raw_float(x)
    return r, r


class BulkSteps:
    """A mixin before ArbClassQuery (family_gap_arb): `check` in one pass (module docstring)."""

    def check(self) -> None:
        if not all(getattr(h, "fast", None) is not None and not h.perm for h in self.heads):
            return super().check()
        try:
            self.bulk_check()
        except (_Fallback, Rejected):
            super().check()  # the reference's steps, one by one: its verdict and message

    def _bounds(self, j: int, table: list, col: int, lo, hi: float, cols: tuple) -> None:
        """Head j's Lemma R bounds of column col: ≤ hi (and ≥ lo unless lo is None), as
        Head.confirm (the clock at every bound); _Fallback if one is not confirmed."""
        self.t.tick()
        if not self._below(j, table, col, hi, 1, cols[0]):
            raise _Fallback
        if lo is not None and not (lo <= hi and self._below(j, table, col, -lo, -1, cols[1])):
            raise _Fallback

    def _below(self, j: int, table: list, col: int, lam: float, sign: int, cols: list) -> bool:
        """ArbHead.average_below(table, col, lam, sign)'s verdict: the filter on the column's
        binary64 form, else the exact integer sum."""
        head, column = self.heads[j], cols[col]
        if column is not None and abs(lam) <= FILTER_HIGH and \
                filter_below(head.fast, column, lam):
            return True
        return head.exact_below(table, col, lam, sign)

    def _columns(self, tables: list, both: bool = True) -> list:
        """Per head, the float columns of its table (upper ends of y and, if both, of −y)."""
        return [(self.conv.float_columns(y, 1), self.conv.float_columns(y, -1) if both else None)
                for y in tables]

    def bulk_check(self) -> None:
        f, fun, t, prec, n_heads = self.f, self.fun, self.t, iv.prec, self.f.n_heads
        # step 4: the box, coordinate k: base_k + Σ_j [lo, hi] (AtQuery.box)
        box, cols = self.hint["box"], self._columns(t.vo)
        r_box = []
        for k, base_k in enumerate(self.base):
            total = mpi_zero  # iv.fsum: 0 + x_0 + ...
            for j in range(n_heads):
                lo, hi = box[j][k]
                self._bounds(j, t.vo[j], k, lo, hi, cols[j])
                total = mpi_add(total, (raw_float(lo), raw_float(hi)), prec)
            r_box.append(mpi_add(base_k._mpi_, total, prec))
        r_box_iv = [iv.make_mpf(x) for x in r_box]
        # step 5: the hidden layer (AtQuery.hidden)
        hidden = []
        if f.d_mlp and f.parallel:
            hidden = super().hidden(r_box_iv)  # a fixed vector: no Lemma R
        elif f.d_mlp:
            sigma = iv.mpf(1)._mpi_
            if self.centre:
                sigma = raw_ln_scale(r_box, f.ln_eps, *self._direction(0))
            pre, y_a = self.hint["pre"], fun.y_a
            cols = self._columns(y_a)
            charge = t.model.charge
            for k in range(len(fun.a)):
                total = self.base_a[k]._mpi_
                for j in range(n_heads):
                    lo, hi = pre[j][k]
                    self._bounds(j, y_a[j], k, lo, hi, cols[j])
                    total = mpi_add(total, (raw_float(lo), raw_float(hi)), prec)
                x = mpi_add(mpi_div(total, sigma, prec), fun.pre_const[k]._mpi_, prec)
                hidden.append(forward.activate(f.act_fn, [iv.make_mpf(x)], charge)[0])
        # step 6 (AtQuery.check): the final residual and the MLP's logit parts
        final, mlp_g = r_box, [mpi_zero] * t.dims.d_vocab
        if hidden:
            # t.matmul([hidden], ·) twice on one integer form of the row (the same values)
            h_int = IntMatrix([hidden])
            out = form_product(h_int, t.integers(fun.w_out_c), False, t.tick, raw=True)[0]
            final = [mpi_add(mpi_add(a, b, prec), c._mpi_, prec)
                     for a, b, c in zip(r_box, out, fun.b_out_c)]
            out_g = form_product(h_int, t.integers(fun.out_g), False, t.tick, raw=True)[0]
            mlp_g = [mpi_add(a, b._mpi_, prec) for a, b in zip(out_g, fun.b_out_g)]
        sigma = iv.mpf(1)._mpi_
        if self.centre:
            e, low = self._direction(1, hidden)
            sigma = raw_ln_scale(final, f.ln_eps, e, low)
        sigma_iv = iv.make_mpf(sigma)
        self.slack, self.worst, self.sigma = None, None, sigma_iv
        diff, y_g, o = self.hint["diff"], fun.y_g, self.claim.output
        cols = self._columns(y_g, both=False)
        for s in range(t.dims.d_vocab):
            if s == o:
                continue
            total = self.base_g[s]._mpi_
            for j in range(n_heads):
                hi = diff[j][s]
                self._bounds(j, y_g[j], s, None, hi, cols[j])
                total = mpi_add(total, _pair(hi), prec)
            numer = up_add(total[1], mlp_g[s][1])
            bound = up_add(_upper_ratio(numer, sigma_iv), self.logit_const(s)._mpi_[1])
            if not below_zero(bound):
                raise _Fallback
            slack = -to_float(bound)
            if self.slack is None or slack < self.slack:
                self.slack, self.worst = slack, s

    def _direction(self, which: int, hidden: list | None = None):
        """AtQuery.direction(which, mlp_dot) on raw intervals: (e, the raw lower end of
        base·e + Σ_j dir_lo[j][which] (+ hidden·(c(W_out) e) + c(b_out)·e)), or (e, None) for
        a zero e; every head's bound confirmed by confirmed_directions, else _Fallback."""
        e = self.hint["dir"][which]
        if not any(e):
            return e, None
        e_int = IntMatrix.point_column(e)  # once: the filter's VO_j·e and c(W_out)·e read it
        if len(confirmed_directions(self, e, which, e_int)) < self.f.n_heads:
            raise _Fallback
        prec = iv.prec
        e_raw = [_pair(x) for x in e]
        total = raw_dot([b._mpi_ for b in self.base], e_raw, prec)
        for j in range(self.f.n_heads):
            self.t.tick()  # the clock, at every bound
            total = mpi_add(total, _pair(self.hint["dir_lo"][j][which]), prec)
        if hidden is not None:  # the check's mlp_dot(e)
            extra = iv.mpf(0)._mpi_
            if hidden:
                # dot(hidden, t.matmul(c(W_out), [[iv.mpf(x)] for x in e])) on e's integer
                # column, its terms at hidden units of exactly 0 left out: 0·y is the raw 0,
                # and adding it to a sum already rounded at prec changes no bit
                h_raw = [h._mpi_ for h in hidden]
                live = [k for k, h in enumerate(h_raw) if h != ZERO]
                col = column_entries(self.t.integers(self.fun.w_out_c), e_int, live)
                self.t.tick()
                extra = mpi_add(raw_dot([h_raw[k] for k in live], col, prec),
                                raw_dot([b._mpi_ for b in self.fun.b_out_c], e_raw, prec), prec)
            total = mpi_add(total, extra, prec)
        return e, iv.make_mpf((total[0], total[0]))


def raw_ln_scale(box: list, eps: float, e: list, lower_dot):
    """overwhelm_family.ln_scale(box, eps, e, lower_dot) on raw intervals, the same operations
    (square_interval = |c|·|c|; iv.fsum = 0 + x_0 + ...; iv.mpf(x)·iv.mpf(x)), returning the
    raw enclosure of σ; _Fallback where ln_scale raises Rejected."""
    prec, d = iv.prec, len(box)
    total = mpi_zero
    for c in box:
        a = mpi_abs(c, prec)
        total = mpi_add(total, mpi_mul(a, a, prec), prec)
    lo_sum, hi_sum = iv.make_mpf((total[0], total[0])), iv.make_mpf((total[1], total[1]))
    norm = mpi_zero
    for x in e:
        norm = mpi_add(norm, mpi_mul(_pair(x), _pair(x), prec), prec)
    e_norm = iv.make_mpf(norm)
    if lower_dot is not None and lower_dot > 0 and e_norm.a > 0:
        cs = (iv.mpf(lower_dot) ** 2 / e_norm).a  # Cauchy–Schwarz: |c|² >= (c·e)²/|e|²
        lo_sum = max(lo_sum, cs)
    if lo_sum > hi_sum:  # the box and the bound admit no c: ln_scale's Rejected, by the reference
        raise _Fallback
    return sqrt_interval(iv.mpf((lo_sum, hi_sum)) / d + iv.mpf(eps))._mpi_
