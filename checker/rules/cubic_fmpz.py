"""Rule cubic's per-(query, max) checks as exact integer vector operations in C
(FLINT's fmpz_poly through python-flint): the `--arith arb` accelerator.

Imported only by the arb back-end's path of rule cubic (never on the mpmath path).
For one (q, m) it decides a *sufficient* condition for every check of
cubic._count_q_m (spec/rules.md §cubic; spec/arithmetic.md §exact integer vectors):
when it holds, the claimed good sets of (q, m) are confirmed and it returns their
count; otherwise it returns None and the caller runs the reference code for that
(q, m) in the back-end's own arithmetic, whose verdict (and message) is then final.
It never rejects anything itself, so its only soundness obligation is: a count is
returned only if every bound the rule checks is < 0.

Numbers.  Every recorded endpoint is a dyadic rational, so with one exponent for the
x-quantities (EU, EVOU, PVOU) and one per row q of exp(EQKE) and of exp(EQKP) it is an
exact integer (exact.IntegerTables: the same integers as the mpmath intervals hold).
All bounds of a query q are then integers in the unit 2^(X + E_q + B_q), computed
without any rounding.  A vector over the outputs o is an fmpz_poly whose coefficient
o is the entry (FLINT's `_fmpz_vec` add, sub and scalar mul: exact).  The only
relaxation is in the product of a weight interval [w⁻, w⁺] (w⁻ >= 0) with a vector of
upper bounds x:
    W·X <= max(w⁻x_o, w⁺x_o) = w⁺x_o − (w⁺ − w⁻)·min(x_o, 0) <= w⁺x_o + (w⁺ − w⁻)·2^h,
where h = height_bits(x): |x_o| < 2^h for every o (fmpz_poly_max_bits).  A test
"x_o < 0 for every o outside a set Z" is, on integers, "−x_o − 1 >= 0", decided by
fmpz_poly_max_bits' sign (negative iff some coefficient is negative) after adding
2^(h+1) > |−x_o − 1| at the positions in Z.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate, compress, repeat
from math import comb
from operator import add, gt, mul, neg, rshift, sub

from ..arith.arb import flint_module
from ..errors import Malformed, Rejected
from . import exact

_BITS = bytes.maketrans(b"01", b"\x00\x01")


def _selector(mask: int) -> bytes:
    """Byte i is bit i of mask >= 0 (0 or 1), up to its highest set bit (one zero byte for
    mask 0; in C: bin, reversal, translate to 0/1 bytes)."""
    return bin(mask)[:1:-1].encode().translate(_BITS)


def _members(mask: int) -> list:
    """The positions of the set bits of mask >= 0, increasing (compress by _selector)."""
    bits = _selector(mask)
    return list(compress(range(len(bits)), bits))


def tables(recorded, v: int, k: int, charge):
    """The integer tables, or None when the accelerator does not apply (a weight whose
    recorded enclosure reaches below 0: the reference code then finds it; d_vocab or
    n_ctx below 3)."""
    if recorded is None or v < 3 or k < 3:
        return None
    # Charged to the memory limit like any table; when both tiers do not fit, the exact tier
    # alone; when that does not fit either, the rule runs without them (the accelerator must
    # not refuse what the back-end alone accepts).
    limit, tiers = getattr(charge, "hold", None), 2
    if limit is not None:
        for tiers in (2, 1, 0):
            if not tiers:
                return None
            count = elements(v, k, tiers)
            try:
                limit(count, "integer vector tables")
                break
            except Malformed:
                limit(-count, "integer vector tables")  # released: not built
    charge(0)
    try:
        it = exact.IntegerTables(recorded, v, k)
        return _Tiered(_Coarse(it, v, k), it) if tiers == 2 else _Fast(it, v, k)
    except Rejected:
        return None


def elements(v: int, k: int, tiers: int = 2) -> int:
    """The integers held, charged to the memory limit: the integer tables
    (exact.IntegerTables) and twelve v × v tables of _Fast; with the coarse tier (tiers = 2)
    also its copy of the x-tables and exp(EQKP) (exp(EQKE) is shared), its grid per (q, m)
    and its own twelve v × v tables."""
    exact_tier = exact.IntegerTables.elements(v, k) + 12 * v * v
    if tiers < 2:
        return exact_tier
    return exact_tier + 2 * (2 * v * v + 2 * k * v) + v * v + 12 * v * v


class _Fast:
    def __init__(self, it: exact.IntegerTables, v: int, k: int):
        flint = flint_module()  # python-flint, through the Arb back-end (its only importer)
        self.fmpz, self.fmpz_poly = flint.fmpz, flint.fmpz_poly
        fmpz_poly = flint.fmpz_poly
        self.v, self.k = v, k
        self.ones = fmpz_poly([1] * v)
        self.unit = [fmpz_poly([0] * o + [1]) for o in range(v)]
        ev_lo, ev_hi, pv_lo, pv_hi = it.evou_lo, it.evou_hi, it.pvou_lo, it.pvou_hi
        self.eu_lo = it.eu_lo  # Python integers: scalars
        self.evou_lo = ev_lo
        self.e_lo, self.e_hi = it.e_lo, it.e_hi  # Python integers (scalar products)
        self.b_lo, self.b_hi = it.b_lo, it.b_hi
        self.eu_hi_int = it.eu_hi
        self.eu_hi = [fmpz_poly(r) for r in it.eu_hi]
        self.euv_hi = [fmpz_poly([a + b for a, b in zip(it.eu_hi[q], ev_hi[q])])
                       for q in range(v)]
        self.evou_hi = [fmpz_poly(r) for r in ev_hi]
        # (per-m rows below: built when a pair with that max first needs them, by _row)
        self._ev_lo_t = [list(column) for column in zip(*ev_lo)]  # [m][t] = EVOU⁻[t, m]
        self._diag = [ev_hi[t][t] for t in range(v)]
        # dv_rest[m][t] = max_{o∉{m,t}} EVOU⁺[t, o] − EVOU⁻[t, m]: the largest EVOU⁺[t, o] over
        # o != t (at o = best[t]), or over o ∉ {t, best[t]} when m = best[t]
        best, first, second = [], [], []
        for t, row in enumerate(ev_hi):
            top3 = sorted(range(v), key=row.__getitem__, reverse=True)[:3]
            o1, o2 = [o for o in top3 if o != t][:2]  # v >= 3
            best.append(o1)
            first.append(row[o1])
            second.append(row[o2])
        best_of = [[] for _ in range(v)]  # best_of[m]: the rows t with best[t] = m
        for t, o in enumerate(best):
            best_of[o].append(t)
        self._best_of, self._first, self._second = best_of, first, second
        self._ev, self._pv = (ev_lo, ev_hi), (pv_lo, pv_hi)
        self._rows = [None] * v

    def _row(self, m: int) -> tuple:
        """The tables of max m, built once (with map: C loops over Python integers):
        (dp_max, dp_max as a vector, xm_tab, dpq, self_tab, dv_rest)."""
        row = self._rows[m]
        if row is not None:
            return row
        v, k, fmpz_poly = self.v, self.k, self.fmpz_poly
        (ev_lo, ev_hi), (pv_lo, pv_hi) = self._ev, self._pv
        # dp_max[m][o] >= max_{i<k−1} (PVOU[i, o] − PVOU[i, m])  (exact: the largest difference)
        dp_max = (list(map(max, *[map(sub, pv_hi[i], repeat(pv_lo[i][m], v))
                                  for i in range(k - 1)])) if k > 2 else
                  list(map(sub, pv_hi[0], repeat(pv_lo[0][m], v))))
        # x_m without EU: dp_max + ΔV_m;  the query's: PVOU[k−1] differences
        xm_tab = fmpz_poly(list(map(sub, map(add, dp_max, ev_hi[m]), repeat(ev_lo[m][m], v))))
        dpq = fmpz_poly(list(map(sub, pv_hi[k - 1], repeat(pv_lo[k - 1][m], v))))
        ev_lo_t = self._ev_lo_t[m]
        # self_tab[m][t] = dp_max[m][t] + EVOU⁺[t, t] − EVOU⁻[t, m]  (D[t] + ΔV_t[t], without EU)
        self_tab = list(map(sub, map(add, dp_max, self._diag), ev_lo_t))
        rest = list(map(sub, self._first, ev_lo_t))
        for t in self._best_of[m]:
            rest[t] = self._second[t] - ev_lo_t[t]
        row = self._rows[m] = (dp_max, fmpz_poly(dp_max), xm_tab, dpq, self_tab, rest)
        return row

    # the v × v tables by name, every row built (tests/test_cubic_fmpz.py)
    dp_max_int = property(lambda self: [self._row(m)[0] for m in range(self.v)])
    dp_max = property(lambda self: [self._row(m)[1] for m in range(self.v)])
    xm_tab = property(lambda self: [self._row(m)[2] for m in range(self.v)])
    dpq = property(lambda self: [self._row(m)[3] for m in range(self.v)])
    self_tab = property(lambda self: [self._row(m)[4] for m in range(self.v)])
    dv_rest = property(lambda self: [self._row(m)[5] for m in range(self.v)])

    # -- the exact vector helpers (tests/test_cubic_fmpz.py) -----------------------------
    @staticmethod
    def times(lo, hi, x, shift):
        """(x·w⁺, σ) with x_o·w⁺ + σ >= W·X for every W in [lo, hi] (0 <= lo) and real
        X <= x_o + shift: σ = w⁺·shift, plus (w⁺ − w⁻)·2^h with |x_o + shift| < 2^h when
        the weight is not a point (then the bound is exact)."""
        sigma = int(hi) * shift
        if hi != lo:
            sigma += int(hi - lo) << (max(x.height_bits(), int(shift).bit_length()) + 1)
        return x * hi, sigma

    def limit(self, zeros, bits, excess):
        """2^bits at the excluded positions (a tuple of them, or where the polynomial
        `zeros` is >= 1), minus (1 + excess) everywhere: holds(limit − y) says
        y_o + excess < 0 (integers: <= −1) at every o not excluded, provided
        |y_o + excess| + 1 <= 2^bits there."""
        out = self.ones * (-1 - excess)
        if type(zeros) is tuple:
            for o in zeros:  # one coefficient each (fmpz_poly_set_coeff_fmpz)
                out[o] += 1 << bits
            return out
        return out + zeros * (1 << bits)

    @staticmethod
    def holds(y) -> bool:
        """Exactly: no coefficient of y is negative (fmpz_poly_max_bits' sign)."""
        return y.height_bits(signed=True) >= 0

    # -- one (q, m) -------------------------------------------------------------------------
    def count_q_m(self, good, q, m, query, e_rows=None):
        """The count of cubic._count_q_m for (q, m), or None (then the reference decides).
        query: (B⁻, B⁺, placements {c: [(s⁻, s⁺)]}, w⁻, w⁺) from query_terms(q); e_rows:
        (lower, upper ends) of exp(EQKE)'s row q, at least up to m, in the unit of w (the
        tables' own row when None).

        Vectors are exact upper bounds, entry by entry, in the unit 2^(X + E_q + B_q); a
        weight interval times a vector is w⁺·x + (w⁺ − w⁻)·2^h (spec/arithmetic.md).
        Each test is "every entry >= 0" of E − (the bound), E = 2^bits at excluded
        positions minus (1 + the test's scalar terms) everywhere."""
        fmpz_poly, times, holds = self.fmpz_poly, self.times, self.holds
        k, ones = self.k, self.ones
        b_lo, b_hi, placements, w_lo, w_hi = query
        e_lo, e_hi = (self.e_lo[q], self.e_hi[q]) if e_rows is None else e_rows
        dp_max, dp_max_poly, xm_tab, dpq, self_tab, dv_rest = self._row(m)
        eu_q = self.eu_hi_int[q]
        eu_m = self.eu_lo[q][m]
        # p_o >= e_m·X_m[o], X_m[o] <= EU[q,o] − EU[q,m] + dp_max[m][o] + ΔV_m[o]
        # (times(e⁻_m, e⁺_m, x, −EU[q,m]), inline: e⁻, e⁺, EU are Python integers)
        x_m, lo, hi = self.eu_hi[q] + xm_tab, e_lo[m], e_hi[m]
        sigma = -hi * eu_m
        if hi != lo:
            sigma += (hi - lo) << (max(x_m.height_bits(), eu_m.bit_length()) + 1)
        p = x_m * hi + ones * sigma
        # qv_o + κ_q >= β_q·e_q·X_q[o] (the query position), κ_q a scalar
        qv, kappa_q = times(w_lo, w_hi, self.euv_hi[q] + dpq, -eu_m - self.evou_lo[q][m])
        hp = p.height_bits()
        # R·p <= (B⁺ − S)·p_o + (B⁺ − B⁻)·2^(hp+1) for R in [B⁻ − S, B⁺ − S]; B·p alike (S = 0)
        kappa = kappa_q + ((b_hi - b_lo) << (hp + 1))
        last = k - 1
        claims = [(c, *good.get((m, q, c), (0, 0))) for c in range(1, last + (q == m))]
        union = 0
        for _, mask, _ in claims:
            union |= mask
        count = 0
        fs = {}
        if union:
            # D[o] + EU[q,m] >= EU[q,o] + dp_max[m][o]; its top two over o != m
            dd = list(map(add, eu_q, dp_max))
            floor = dd[m] = min(dd) - 1  # below every entry: never the largest of the others
            first = max(dd)
            index = dd.index(first)
            dd[index] = floor
            second = max(dd)  # v >= 3: another entry besides m and index
            # (I): h_self[u] >= e_u·X_u[u];  (II), split: h_spread[u] >= e_u·(max_{o∉{m,u}}
            # D[o] + max_{o∉{m,u}} ΔV_u[o])  — exact scalar products, for every u < m (read at
            # the claimed tokens only)
            first, second = first - eu_m, second - eu_m
            h_self = [eh * y if y >= 0 else el * y for eh, el, y in
                      zip(e_hi, e_lo, map(sub, map(add, eu_q, self_tab), repeat(eu_m, m)))]
            h_spread = [eh * y if y >= 0 else el * y for eh, el, y in
                        zip(e_hi, e_lo, map(add, dv_rest, repeat(first, m)))]
            if index < m:  # max_{o∉{m,u}} D[o] at u = index is the second largest
                y = second + dv_rest[index]
                h_spread[index] = e_hi[index] * y if y >= 0 else e_lo[index] * y
            # One test for (I) and (II), split: Ã_S[o] + S·f_o < 0 at every o != m, with
            #   f_o = max(h_self[o], max_{u split, u != o} h_spread[u])   (o claimed),
            #   f_o = max_{u split} h_spread[u]                           (o not claimed);
            # positions with no bound to check are excluded (S·f is nondecreasing in f).
            # Classes c < k−1 with the same claimed and split tokens share f (and their tests,
            # below); c = k−1 has its own.
            groups = {}
            for c, mask, joint in claims:
                if mask:
                    groups.setdefault("last" if c == last else (mask, mask & ~joint),
                                      []).append(c)
            every = (1 << m) - 1  # all the tokens < m
            for key in groups:
                if key == "last":
                    g_mask, g_joint = good[(m, q, last)]
                    g_split = g_mask & ~g_joint
                else:
                    g_mask, g_split = key
                zeros = None  # beyond m
                if g_split:
                    # h1: the largest h_spread over the split tokens, top: the first split token
                    # reaching it, h2: the largest over the other split tokens (None if none)
                    if g_split == every:
                        spread = h_spread
                        h1 = max(spread)
                        top = at = spread.index(h1)
                    else:
                        selector = _selector(g_split)
                        spread = list(compress(h_spread, selector))
                        h1 = max(spread)
                        at = spread.index(h1)
                        top = list(compress(range(m), selector))[at]
                    h2 = max(spread[:at] + spread[at + 1:], default=None)
                    # f_o = max(h_self[o], h1) at the claimed o (h_self[o] where it is larger),
                    # h1 elsewhere; at top, h1 replaced by h2 (no other split token: h_self)
                    # (as a vector: h1 everywhere, then the few other entries set one by one)
                    f = ones * h1
                    for u in compress(range(m), map(gt, h_self, repeat(h1, m))):
                        if g_mask >> u & 1:
                            f[u] = h_self[u]
                    f[top] = h_self[top] if h2 is None or h_self[top] >= h2 else h2
                else:  # only (I): f_o = h_self[o] at the claimed o; the others excluded
                    selector = _selector(g_mask)
                    f = fmpz_poly(list(map(mul, h_self, selector)))
                    zeros = ones - fmpz_poly(list(selector))
                fs[key] = (f, zeros)
        # the joint tokens: u -> the ends of S of the classes c < k−1 where u is joint (the
        # smallest lower and the largest upper placement); and those of c = k − 1
        joints, joints_last = {}, ()
        for c, _, joint in claims:
            if not joint:
                continue
            members = _members(joint)  # joint ⊆ mask (parse_hints)
            if c == last:
                joints_last = members
                continue
            lo, hi = placements[c][0][0], placements[c][-1][0]
            for u in members:
                ends = joints.get(u)
                joints[u] = (lo, hi) if ends is None else (min(ends[0], lo), max(ends[1], hi))
        joint_rows, s_top, h_joint = [], 0, 0
        if joints or joints_last:
            d0 = self.eu_hi[q] + dp_max_poly  # D + EU[q, m]
            evou_hi, evou_lo = self.evou_hi, self.evou_lo
            for u, ends in joints.items():  # times(e⁻_u, e⁺_u, x_u, shift), inline
                x_u, lo, hi, shift = d0 + evou_hi[u], e_lo[u], e_hi[u], -eu_m - evou_lo[u][m]
                sigma = hi * shift
                if hi != lo:
                    sigma += (hi - lo) << (max(x_u.height_bits(), shift.bit_length()) + 1)
                y_u = x_u * hi + ones * sigma
                joint_rows.append((u, y_u, ends))
                s_top = max(s_top, ends[1])
                h_joint = max(h_joint, y_u.height_bits())
        bits = max(b_hi.bit_length() + max([hp] + [f.height_bits() for f, _ in fs.values()]),
                   s_top.bit_length() + h_joint, qv.height_bits(), kappa.bit_length()) + 4
        big = 1 << bits
        # E − B⁺·p − qv (E: the limit of a test whose scalar terms are κ): c = 0, and the
        # part of Ã_S = (B⁺ − S)·p + ... that does not depend on S
        a_full = self.limit((m,), bits, kappa) - qv - p * b_hi
        # base: a_full >= 0 entrywise — the c = 0 test, and the value at S = 0 of every test
        # below for c < k − 1 (a_full + S·w, plus exclusions >= 0)
        base = holds(a_full)
        if good.get((m, q, 0), (0, 0))[0]:  # c = 0: B·p + qv < 0 off m
            if not base:
                return None
            count += 1
        # Each test below is linear in S (R = B − S): it holds for every S in [s⁻, s⁺] once
        # it holds at both ends, so one pair of tests covers the placements of all the
        # classes of a group (the smallest lower and the largest upper placement).  When it
        # holds at S = 0 (base), the upper end suffices: 0 <= s⁻ <= s⁺ (spec/arithmetic.md,
        # third step)
        t_s = {}  # S -> a_full + S·p = E − (B⁺ − S)·p − qv, shared by the tests at S
        for key, cs in (groups.items() if union else ()):
            if key == "last":
                continue
            s_min = min([placements[c][0][0] for c in cs])
            s_max = max([placements[c][1][0] for c in cs])
            if b_lo - s_max < 0:  # R = B − S must be a weight >= 0
                return None
            f, zeros = fs[key]
            # the test at S: a_full + S·p − S·f (+ 2^bits at the excluded positions) >= 0
            for s in ((s_max,) if base else (s_max, s_min)):
                a_s = t_s.get(s)
                if a_s is None:
                    a_s = t_s[s] = a_full + p * s
                test = a_s - f * s
                if not holds(test if zeros is None else test + zeros * big):
                    return None
        if "last" in fs:  # c = k − 1: Ã_S = qv, S = B an interval: S·f <= S⁺·f + (S⁺ − S⁻)·2^(hf+1)
            f, zeros = fs["last"]
            (s_lo, s_hi), = placements[last]
            slack = (s_hi - s_lo) << (f.height_bits() + 1)
            unit_m = self.unit[m]
            e_c = self.limit(unit_m if zeros is None else unit_m + zeros, bits, kappa_q + slack)
            if not holds(e_c - qv - f * s_hi):
                return None
        # (II′), joint: S·e_u·X_u[o] + Ã_S[o] < 0 for o ∉ {m, u}, X_u[o] <= D[o] + ΔV_u[o];
        # for the classes c < k−1 at the two ends of the S of the classes where u is joint
        # (the test is linear in S): with S a point, S·e_u·X_u[o] <= S·y_u[o], where
        # y_u = e⁺_u·x_u + (e⁺_u·shift + (e⁺_u − e⁻_u)·2^h)  (times() with the weight S·e_u)
        for u, y_u, ends in joint_rows:
            for s in (ends[1:] if base else ends):  # (at S = 0: a_full + big·[u] >= 0)
                a_s = t_s.get(s)
                if a_s is None:
                    a_s = t_s[s] = a_full + p * s
                test = a_s - y_u * s  # a new polynomial: its u-th entry excluded
                test[u] += big
                if not holds(test):
                    return None
        for u in joints_last:  # c = k − 1: Ã_S = qv + κ_q, S = B an interval
            (s_lo, s_hi), = placements[last]
            x_u = d0 + self.evou_hi[u]
            row, sigma = times(s_lo * e_lo[u], s_hi * e_hi[u], x_u, -eu_m - self.evou_lo[u][m])
            bits_u = max(row.height_bits(), sigma.bit_length(), bits) + 3
            test = self.limit(self.unit[m] + self.unit[u], bits_u, kappa_q + sigma) - qv - row
            if not holds(test):
                return None
        for c, mask, _ in claims:
            if mask:  # tokens < m (parse_hints): |claimed| = popcount(mask)
                count += comb(k - 1, c) * mask.bit_count() ** c
        return count

    def query_terms(self, q):
        """For query q (Python integers): B = Σ_{i<k−1} β[q][i] as [B⁻, B⁺]; for each
        c < k−1 the two placements [S⁻, S⁻] (the c smallest lower ends) and [S⁺, S⁺]
        (the c largest upper ends), for c = k−1 the interval S = B; and β[q][k−1]·e[q][q]
        as [w⁻, w⁺]."""
        k = self.k
        lo, hi = self.b_lo[q][:k - 1], self.b_hi[q][:k - 1]
        b_lo, b_hi = sum(lo), sum(hi)
        los, his = sorted(lo), sorted(hi, reverse=True)
        placements = {c: [(sum(los[:c]),) * 2, (sum(his[:c]),) * 2] for c in range(1, k - 1)}
        placements[k - 1] = [(b_lo, b_hi)]
        w_lo = self.b_lo[q][k - 1] * int(self.e_lo[q][q])
        w_hi = self.b_hi[q][k - 1] * int(self.e_hi[q][q])
        return b_lo, b_hi, placements, w_lo, w_hi


# -- the coarse tier: the same code on tables rounded outward ----------------------------------

# Bits kept by the coarse tier: EU, EVOU, PVOU (one grid), each row of exp(EQKP), and each row
# of exp(EQKE) up to the pair's max m.  Speed only (their sum keeps the test vectors' entries
# within FLINT's one-word integers for most pairs); any values are sound.
COARSE_BITS_X, COARSE_BITS_B, COARSE_BITS_E = 22, 18, 20


def _floor_shift(row: list, t: int) -> list:
    """[⌊x / 2^t⌋]: lower ends on the grid 2^t, each <= its x (exact integers; >> floors)."""
    return list(map(rshift, row, repeat(t, len(row))))


def _ceil_shift(row: list, t: int) -> list:
    """[⌈x / 2^t⌉] = [−⌊−x / 2^t⌋]: upper ends on the grid 2^t, each >= its x."""
    return list(map(neg, map(rshift, map(neg, row), repeat(t, len(row)))))


def _shift_for(bits: int, keep: int) -> int:
    """The grid step 2^t that leaves numbers of `bits` bits with about `keep` bits."""
    return max(0, bits - keep)


def coarse_tables(it: exact.IntegerTables):
    """A copy of the integer tables with EU, EVOU, PVOU (their common grid) and each row of
    exp(EQKP) rounded outward to a coarser grid: every lower end down, every upper end up
    (spec/arithmetic.md §coarse tier).  exp(EQKE) is left exact (_Coarse rounds it per pair)."""
    out = exact.IntegerTables.__new__(exact.IntegerTables)
    out.v, out.k = it.v, it.k
    names = ("eu", "evou", "pvou")
    bits = max(abs(x).bit_length() for name in names for end in ("_lo", "_hi")
               for row in getattr(it, name + end) for x in row)
    t = _shift_for(bits, COARSE_BITS_X)
    for name in names:
        setattr(out, name + "_lo", [_floor_shift(row, t) for row in getattr(it, name + "_lo")])
        setattr(out, name + "_hi", [_ceil_shift(row, t) for row in getattr(it, name + "_hi")])
    out.b_lo, out.b_hi = [], []
    for lo, hi in zip(it.b_lo, it.b_hi):  # one grid per row q (its own unit)
        t = _shift_for(max(hi).bit_length(), COARSE_BITS_B)
        out.b_lo.append(_floor_shift(lo, t))
        out.b_hi.append(_ceil_shift(hi, t))
    out.e_lo, out.e_hi = it.e_lo, it.e_hi
    return out


class _Coarse(_Fast):
    """_Fast.count_q_m on coarse_tables, with exp(EQKE)'s row q rounded outward for each
    (q, m) on the grid that leaves its largest entry among the tokens <= m about
    COARSE_BITS_E bits (the pair reads only those entries: the tokens < m, m and q <= m).
    Wider enclosures of the same reals (weights still >= 0): every bound _Fast computes from
    them is still an upper bound, so a pair it confirms is confirmed (spec/arithmetic.md
    §coarse tier).  A pair it defers goes to the exact tier (_Tiered)."""

    def __init__(self, it: exact.IntegerTables, v: int, k: int):
        super().__init__(coarse_tables(it), v, k)
        # e_shift[q][m]: the grid of row q for the pairs (q, m), from the prefix maxima
        # (with accumulate: _shift_for(b, keep) = max(0, b − keep) of the prefix maxima)
        self.e_shift = [list(map(_shift_for, accumulate(map(int.bit_length, row), max),
                                 repeat(COARSE_BITS_E, len(row)))) for row in it.e_hi]
        # row q rounded on grid t, built once per (q, t): the grids of a row are nondecreasing
        # in m, so the pairs (q, m) on grid t are consecutive; the row is rounded up to the
        # last of them (a pair reads the entries up to its m)
        self._e_rows = (None, None)  # ((q, t), rows): the pairs of one grid are consecutive

    def query_terms(self, q):
        """_Fast.query_terms with the query position's β[q][k−1] ends in place of w (w is
        formed per pair, on the pair's grid of exp(EQKE))."""
        b_lo, b_hi, placements, _, _ = super().query_terms(q)
        return b_lo, b_hi, placements, self.b_lo[q][self.k - 1], self.b_hi[q][self.k - 1]

    def e_rows(self, q, t):
        """exp(EQKE)'s row q rounded outward on the grid 2^t: (lower ends, upper ends)."""
        key, rows = self._e_rows
        if key != (q, t):
            end = bisect_right(self.e_shift[q], t)  # past the last m on grid t
            rows = ((_floor_shift(self.e_lo[q][:end], t), _ceil_shift(self.e_hi[q][:end], t))
                    if t else (self.e_lo[q], self.e_hi[q]))
            self._e_rows = ((q, t), rows)
        return rows

    def count_q_m(self, good, q, m, query):
        e_lo, e_hi = self.e_rows(q, self.e_shift[q][m])
        b_lo, b_hi, placements, beta_lo, beta_hi = query
        return _Fast.count_q_m(self, good, q, m, (b_lo, b_hi, placements, beta_lo * e_lo[q],
                                                  beta_hi * e_hi[q]), (e_lo, e_hi))


class _Tiered:
    """The accelerator: a (q, m) is tried on the coarse tables first, then on the exact
    ones; None (the reference decides) only if both defer.  Each tier returns a count only
    when its own bounds confirm every claim of the pair, so the first count is sound.
    The exact tier's tables are built when a pair first needs them (most pairs do not)."""

    def __init__(self, coarse: _Coarse, it: exact.IntegerTables):
        self.coarse, self._it, self._fine = coarse, it, None

    @property
    def fine(self) -> _Fast:
        if self._fine is None:
            self._fine = _Fast(self._it, self._it.v, self._it.k)
        return self._fine

    def query_terms(self, q):
        # the exact tier's terms read only the integer tables' b, e rows (as _Fast's own)
        return self.coarse.query_terms(q), _Fast.query_terms(self._it, q)

    def count_q_m(self, good, q, m, terms):
        got = self.coarse.count_q_m(good, q, m, terms[0])
        return got if got is not None else self.fine.count_q_m(good, q, m, terms[1])
