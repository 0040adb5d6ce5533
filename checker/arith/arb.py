"""The fast back-end: Arb ball arithmetic (FLINT) through python-flint >= 0.9.

Imported only for `check-cert --arith arb`.  Elements are `flint.arb` balls
[m ± r] at ARB_PRECISION bits; every Arb function returns a ball containing
the exact result for all reals in its input balls (spec/arithmetic.md cites
the FLINT documentation for each one used).  An upper bound ā is carried as a
ball whose *upper endpoint* is the bound: if X <= upper(A) and Y <= upper(B)
then X + Y <= upper(A + B), because upper(A) + upper(B) is a point of the ball
A + B; likewise for A − y and, with w >= 0, for w·A.  The scalar operations
return the exact point at that upper end, so that long chains of bounds do not
carry a growing radius (the vector ones, one step deep in the cubic rule, keep
the ball).

Exactness of verdicts: comparisons of balls with 0 (`<`, `>=`) and of exact
endpoints are exact in Arb; `lower()`/`upper()` round outward.  Recorded
intervals [lo, hi] become the ball arb(lo) ∪ arb(hi) (arb_union rounds
outward: widening); an op's result is accepted only if its ball's endpoints,
rounded outward, lie inside the recorded binary64 [lo, hi] (exactly).
"""

from __future__ import annotations

from ..errors import Malformed, Rejected
from .base import Arithmetic

# Midpoint precision in bits.  Above mpmath's 80 so that Arb's enclosures are
# at least as tight as the reference back-end's (the verdicts must agree);
# correctness does not depend on the value.
ARB_PRECISION = 128
MIN_VERSION = (0, 9)
EXP_ARGUMENT_LIMIT = 1 << 13  # as numbers.EXP_ARGUMENT_LIMIT (spec/format.md, op exp)


def load() -> Arithmetic:
    """The Arb back-end; Unavailable if python-flint (>= 0.9) is missing."""
    return ArbArithmetic(flint_module())


def flint_module():
    """python-flint (>= 0.9) at ARB_PRECISION; Unavailable if missing.  This module is the
    checker's only importer of flint: the arb-path accelerators (rules/cubic_fmpz.py) take
    their types from here."""
    from . import Unavailable

    try:
        import flint
    except ImportError:
        raise Unavailable("--arith arb needs python-flint >= 0.9 (pip install "
                          "'maxk-certify[fast]', or pip install python-flint)") from None
    version = tuple(int(p) for p in flint.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_VERSION:
        raise Unavailable(f"--arith arb needs python-flint >= 0.9, found {flint.__version__}")
    flint.ctx.prec = ARB_PRECISION
    return flint


class ArbArithmetic(Arithmetic):
    name = "arb"

    def __init__(self, flint):
        self.arb, self.arb_mat, self.fmpz_mat = flint.arb, flint.arb_mat, flint.fmpz_mat
        self.zero = flint.arb(0)
        self.neg_inf = flint.arb("-inf")  # below every finite bound (top_upper)
        self.exp_limit = flint.arb(EXP_ARGUMENT_LIMIT)
        self.exp_floor = flint.arb(-EXP_ARGUMENT_LIMIT // 2)  # −2^12, as numbers._EXP_FLOOR

    # -- enclosures of recorded numbers -----------------------------------
    def interval(self, lo, hi):
        arb = self.arb
        if lo == hi:
            return arb(lo)
        ball = arb(lo).union(arb(hi))  # arb_union: contains [lo, hi]
        # A recorded lower end 0 (an exp that underflowed, say) must stay >= 0, as
        # in mpmath: arb_nonnegative_part encloses ball ∩ [0, ∞) ⊇ [lo, hi].
        return ball.nonnegative_part() if lo >= 0 else ball

    def point(self, x):
        return self.arb(x)  # arf_set_d: exact for a finite binary64

    def elements(self, lo, hi):
        arb, interval = self.arb, self.interval  # as base.elements, one call fewer each
        return [arb(a) if a == b else interval(a, b) for a, b in zip(lo, hi)]

    def contained(self, x, lo, hi):
        # a float operand is converted exactly (arb_set_d) inside python-flint's comparison
        return lo <= x.lower() and x.upper() <= hi

    def float_bounds(self, x):
        return float(x.lower()), float(x.upper())

    # -- exact endpoint tests -------------------------------------------------
    def is_negative(self, x):
        return x < self.zero  # arb_lt: every point of x is < 0

    def is_nonnegative(self, x):
        return x >= self.zero  # arb_ge: every point of x is >= 0

    def lower_point(self, x):
        return x.lower()

    def upper_point(self, x):
        return x.upper()

    # -- sums and functions -------------------------------------------------
    def fsum(self, xs):
        total = self.zero
        for x in xs:
            total = total + x
        return total

    def product(self, x, y):
        out = x * y  # arb_mul
        if x >= self.zero and y >= self.zero:  # both enclosures entirely >= 0
            return out.nonnegative_part()
        return out

    def exp(self, x):
        top = x.upper()
        if top >= self.exp_limit:
            raise Malformed(f"exp of an argument above {EXP_ARGUMENT_LIMIT} (its value could "
                            "not be recorded)")
        bottom = x.lower()
        if bottom <= -self.exp_limit:  # as numbers.py: lower bound 0 below −2^13
            low = self.zero
            if top <= -self.exp_limit:
                top = self.exp_floor
        else:
            low = bottom.exp()  # arb_exp at the exact lower end (exp is increasing)
        # arb_nonnegative_part keeps the lower end >= 0 (exp > 0), where the union
        # could reach below 0 by rounding: a ball containing [exp(bottom), exp(top)]
        return low.union(top.exp()).nonnegative_part()

    def abs(self, x):
        return abs(x).nonnegative_part()  # arb_abs, then ∩ [0, ∞): a ball >= 0

    def inv_sqrt(self, n):
        return self.arb(n).rsqrt()  # arb_rsqrt

    # -- matrices -------------------------------------------------------------
    def matmul(self, a, b, tick):
        product = self.arb_mat(a) * self.arb_mat(b)  # arb_mat_mul
        out = []
        for i in range(product.nrows()):
            tick()
            out.append([product[i, j] for j in range(product.ncols())])
        return out

    def int_matmul(self, a, b):
        """The exact integer product (base.Arithmetic.int_matmul) by FLINT's fmpz_mat_mul:
        exact integers in C, converted back to Python integers — the same integers."""
        product = self.fmpz_mat(a) * self.fmpz_mat(b)
        return [[int(x) for x in row] for row in product.tolist()]

    # -- upper-bound arithmetic (balls; the bound is the upper endpoint) ------
    # Each scalar result is the exact point at its ball's upper end (arb.upper():
    # arb_get_ubound_arf, rounded up).  A bound kept as a ball whose lower end has
    # drifted far below would have a radius, stored with 30 bits, that loses about
    # 2^-30 of its width at every step (spec/arithmetic.md).
    def upper(self, x):
        return x.upper()

    def bound_point(self, a):
        return a.upper()  # bounds are already radius-0 balls (every up_* ends in upper())

    def bound_exact(self, a):
        man, exp = a.upper().man_exp()  # radius 0 after upper(); ValueError if not finite
        return int(man), int(exp)  # FLINT integers (fmpz) as Python's

    def up_add(self, a, b):
        return (a + b).upper()

    def up_minus(self, a, y):
        return (a - y).upper()

    def up_diff(self, x, y):
        return (x - y).upper()

    def up_mul(self, w, a):
        if not w >= self.zero:
            raise Rejected("a weight that must be positive (an attention weight) has a "
                           "recorded enclosure reaching below 0")
        return (w * a).upper()

    def below_zero(self, a):
        return a < self.zero

    def greater(self, a, b):
        return not a.upper() <= b.upper()  # NaN (never produced) counts as greater

    # -- vectors: the same bounds with fewer Python calls ----------------------
    def v_diff(self, xs, y):
        return [x - y for x in xs]

    def v_add(self, a, b):
        return [x + y for x, y in zip(a, b)]

    def v_mul(self, w, xs):
        self.up_mul(w, self.zero)  # the sign check, once
        return [w * x for x in xs]

    def v_affine(self, w, xs, ys):
        self.up_mul(w, self.zero)
        return [w * x + y for x, y in zip(xs, ys)]

    def v_affine_scalar(self, w, xs, y):
        self.up_mul(w, self.zero)
        return [w * x + y for x in xs]

    def all_below_zero(self, xs, skip=()):
        below = self.zero.__gt__  # arb_gt(0, x): every point of x is < 0
        start = 0
        for i in sorted(skip):  # the entries between the skipped ones
            if not all(map(below, xs[start:i])):
                return False
            start = i + 1
        return all(map(below, xs[start:]))

    def top_upper(self, xs, skip):
        # exact points compare exactly (arb_gt, arb_eq); each upper end taken once
        ups = list(map(self.arb.upper, xs))
        ups[skip] = self.neg_inf
        best = max(ups)
        index = ups.index(best)
        ups[index] = self.neg_inf
        second = max(ups)
        return (index, best, best if second is self.neg_inf else second)

    def v_mul_each(self, ws, xs):
        zero = self.zero
        if not all(w >= zero for w in ws):
            self.up_mul(self.zero - 1, zero)  # raises the weight's Rejected
        return [w * x for w, x in zip(ws, xs)]
