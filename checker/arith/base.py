"""The arithmetic back-end interface of the checker kernel (spec/arithmetic.md).

Ops and rules are written once against this interface; a back-end supplies
the numbers.  Its *elements* are closed real intervals (mpmath `iv.mpf`, or
Arb balls) that support `+`, `−`, `*` and division by a positive integer, each
rounded outward: the result encloses the exact real result for every choice
of reals inside the operands.  Matrices are lists of rows of elements.

Besides enclosures, rules use *upper bounds* (spec/rules.md, upper-bound
arithmetic): a value ā meaning "the real X satisfies X <= ā".  Each back-end
picks its own representation of ā (a raw mpmath number, an Arb ball whose
upper endpoint is the bound); rules only pass them to the `up_*` functions
and to the exact comparisons `below_zero` and `greater`.

Every comparison that decides a verdict is exact on endpoints; a back-end may
widen an enclosure (Arb's ball radius is coarser than [lo, hi]) but never
narrows one.  Reserved for later families (not implemented yet): `div`,
`sqrt`, `cos`, `sin`, each a rigorous enclosure.
"""

from __future__ import annotations

import operator


class Arithmetic:
    """The operations the kernel needs.  Subclasses implement all of them."""

    name = "abstract"

    # -- enclosures of recorded numbers -----------------------------------
    def interval(self, lo: float, hi: float):
        """An element containing [lo, hi] (finite binary64, lo <= hi).  O(1)."""
        raise NotImplementedError

    def point(self, x: float):
        """The exact point x (a finite float32 or binary64)."""
        raise NotImplementedError

    def elements(self, lo, hi) -> list:
        """[point(a) if a == b else interval(a, b) for a, b in zip(lo, hi)] (a back-end may
        build them in bulk).  O(len(lo))."""
        point, interval = self.point, self.interval
        return [point(a) if a == b else interval(a, b) for a, b in zip(lo, hi)]

    def contained(self, x, lo: float, hi: float) -> bool:
        """Exactly: every real of element x lies in [lo, hi]."""
        raise NotImplementedError

    def float_bounds(self, x) -> tuple[float, float]:
        """Approximate endpoints as floats, for reports only (never for a verdict)."""
        raise NotImplementedError

    # -- exact endpoint tests and endpoints --------------------------------
    def is_negative(self, x) -> bool:
        """Exactly: every real in x is < 0 (its upper endpoint is < 0)."""
        raise NotImplementedError

    def is_nonnegative(self, x) -> bool:
        """Exactly: every real in x is >= 0 (its lower endpoint is >= 0)."""
        raise NotImplementedError

    def lower_point(self, x):
        """A point element <= every real in x (x's lower endpoint, or below)."""
        raise NotImplementedError

    def upper_point(self, x):
        """A point element >= every real in x (x's upper endpoint, or above)."""
        raise NotImplementedError

    def product(self, x, y):
        """An enclosure of X·Y for X in x, Y in y.  When both enclosures are >= 0 the
        result is >= 0 too (a ball product can reach below 0 where an interval product
        cannot; intersecting with [0, ∞) keeps every product of non-negative reals)."""
        return x * y

    # -- sums and functions -------------------------------------------------
    def fsum(self, xs):
        """An enclosure of the sum of the elements xs (0 for none)."""
        raise NotImplementedError

    def exp(self, x):
        """A rigorous enclosure of exp over x.  Malformed if x reaches 2^13 (exp
        could not be recorded); at or below −2^13 the lower bound may be 0."""
        raise NotImplementedError

    def abs(self, x):
        """An element >= 0 (its lower endpoint is >= 0) containing |X| for every X in x."""
        raise NotImplementedError

    def inv_sqrt(self, n: int):
        """A rigorous enclosure of 1/sqrt(n), for an integer n >= 1."""
        raise NotImplementedError

    # -- matrices -------------------------------------------------------------
    def matmul(self, a, b, tick):
        """An enclosure of A·B (shapes already checked); tick() per result row
        at least, so that the time limit holds inside long products."""
        raise NotImplementedError

    def int_matmul(self, a: list, b: list) -> list:
        """The exact product of integer matrices a (r × n) and b (n × c) given as rows of
        Python integers, as rows of Python integers (float32's Lemma G, spec/arithmetic.md
        §exact integer products).  Every back-end returns the same integers."""
        cols = [list(c) for c in zip(*b)]
        return [[sum(map(operator.mul, row, col)) for col in cols] for row in a]

    # -- upper-bound arithmetic ------------------------------------------------
    def upper(self, x):
        """An upper bound of the reals in element x."""
        raise NotImplementedError

    def bound_point(self, a):
        """The point element equal to the upper bound a, exactly (a bound used as a
        number: subcubic_gap's two-gap entries subtract one bound from another)."""
        raise NotImplementedError

    def bound_exact(self, a) -> tuple[int, int]:
        """The upper bound a as exact integers (man, exp), a = man·2^exp (cubic_mix sums
        bounds exactly); ValueError if a is not a finite number."""
        raise NotImplementedError

    def up_add(self, a, b):
        """An upper bound of X + Y given X <= a, Y <= b."""
        raise NotImplementedError

    def up_minus(self, a, y):
        """An upper bound of X − Y given X <= a and Y in element y."""
        raise NotImplementedError

    def up_diff(self, x, y):
        """An upper bound of X − Y for X in element x and Y in element y."""
        return self.up_minus(self.upper(x), y)

    def up_mul(self, w, a):
        """An upper bound of W·X for W in element w (Rejected unless w >= 0) and X <= a."""
        raise NotImplementedError

    def up_max(self, xs):
        """The largest of the upper bounds xs (non-empty), compared exactly: an upper
        bound of the max of the bounded reals."""
        best = xs[0]
        for x in xs[1:]:
            if self.greater(x, best):
                best = x
        return best

    def below_zero(self, a) -> bool:
        """Exactly: the upper bound a is < 0."""
        raise NotImplementedError

    def greater(self, a, b) -> bool:
        """Exactly: the bound a is greater than the bound b."""
        raise NotImplementedError

    # -- upper-bound arithmetic on vectors (lists; O(n) each) ------------------
    # The cubic rule's O(v³) work; a back-end may run these in C.
    def v_diff(self, xs, y) -> list:
        """[upper bound of X_i − Y] for X_i in element xs[i] and Y in element y."""
        return [self.up_diff(x, y) for x in xs]

    def v_add(self, a, b) -> list:
        """[upper bound of X_i + Y_i] given X_i <= a[i], Y_i <= b[i]."""
        return [self.up_add(x, y) for x, y in zip(a, b)]

    def v_mul(self, w, xs) -> list:
        """[upper bound of W·X_i] for W in element w (Rejected unless w >= 0), X_i <= xs[i]."""
        return [self.up_mul(w, x) for x in xs]

    def v_mul_each(self, ws, xs) -> list:
        """[upper bound of W_i·X_i] for W_i in element ws[i] (each >= 0), X_i <= xs[i]."""
        return [self.up_mul(w, x) for w, x in zip(ws, xs)]

    def v_affine(self, w, xs, ys) -> list:
        """[upper bound of W·X_i + Y_i] (w as in v_mul, X_i <= xs[i], Y_i <= ys[i])."""
        return self.v_add(self.v_mul(w, xs), ys)

    def v_affine_scalar(self, w, xs, y) -> list:
        """[upper bound of W·X_i + Y] (w as in v_mul, X_i <= xs[i], Y <= y)."""
        return self.v_affine(w, xs, [y] * len(xs))

    def all_below_zero(self, xs, skip=()) -> bool:
        """Exactly: every bound xs[i], i not in skip, is < 0."""
        return all(self.below_zero(x) for i, x in enumerate(xs) if i not in skip)

    def top_upper(self, xs, skip: int):
        """(index of the largest, largest, second largest) of the bounds xs[i],
        i != skip, compared exactly; second = largest when only one is left.
        The returned values are upper bounds of the same kind."""
        greater = self.greater
        index = best = second = None
        for i, x in enumerate(xs):
            if i == skip:
                continue
            if best is None or greater(x, best):
                index, best, second = i, x, best
            elif second is None or greater(x, second):
                second = x
        return (index, best, best if second is None else second)
