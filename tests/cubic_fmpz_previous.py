"""The accelerator's per-(q, m) decision as it was on main before branch cubic-speed3
(checker/rules/cubic_fmpz.py, commit 2be5e82: `_Fast.count_q_m`), kept verbatim as a reference
for tests: the current code must return exactly the same result (the same count, or None) on
every pair and claim (spec/arithmetic.md §cubic at native speed, third step: the same
predicate).  Not used by the checker."""

from __future__ import annotations

from itertools import compress, repeat
from math import comb
from operator import add, gt

from checker.rules import cubic_fmpz
from checker.rules.cubic_fmpz import _members


class Previous:
    """main's code for one (q, m), on the tables of a current _Fast or _Coarse, materialised
    as the lists main kept (dp_max_int, xm_tab, ... indexed by m)."""

    def __init__(self, fast):
        self.fast = fast
        for name in ("fmpz", "fmpz_poly", "v", "k", "ones", "unit", "eu_lo", "evou_lo", "e_lo",
                     "e_hi", "eu_hi_int", "eu_hi", "euv_hi", "evou_hi", "dp_max_int", "dp_max",
                     "xm_tab", "dpq", "self_tab", "dv_rest"):
            setattr(self, name, getattr(fast, name))
        self.times, self.limit, self.holds = fast.times, fast.limit, fast.holds

    def pair(self, good, q, m, terms):
        """As the tier's own count_q_m: _Coarse rounds exp(EQKE)'s row q on the pair's grid."""
        if isinstance(self.fast, cubic_fmpz._Coarse):
            e_lo, e_hi = self.fast.e_rows(q, self.fast.e_shift[q][m])
            b_lo, b_hi, placements, beta_lo, beta_hi = terms
            return self.count_q_m(good, q, m, (b_lo, b_hi, placements, beta_lo * e_lo[q],
                                               beta_hi * e_hi[q]), (e_lo, e_hi))
        return self.count_q_m(good, q, m, terms)

    def count_q_m(self, good, q, m, query, e_rows=None):
        """main's _Fast.count_q_m (2be5e82), verbatim but for this docstring."""
        fmpz, fmpz_poly = self.fmpz, self.fmpz_poly
        v, k, ones = self.v, self.k, self.ones
        b_lo, b_hi, placements, w_lo, w_hi = query
        e_lo, e_hi = (self.e_lo[q], self.e_hi[q]) if e_rows is None else e_rows
        eu_m = self.eu_lo[q][m]
        unit_m = self.unit[m]
        # p_o >= e_m·X_m[o], X_m[o] <= EU[q,o] − EU[q,m] + dp_max[m][o] + ΔV_m[o]
        x_m, sigma = self.times(e_lo[m], e_hi[m], self.eu_hi[q] + self.xm_tab[m], -eu_m)
        p = x_m + ones * sigma
        # qv_o + κ_q >= β_q·e_q·X_q[o] (the query position), κ_q a scalar
        qv, kappa_q = self.times(w_lo, w_hi, self.euv_hi[q] + self.dpq[m],
                                 -eu_m - self.evou_lo[q][m])
        hp = p.height_bits()
        # R·p <= (B⁺ − S)·p_o + (B⁺ − B⁻)·2^(hp+1) for R in [B⁻ − S, B⁺ − S]; B·p alike (S = 0)
        kappa = kappa_q + ((b_hi - b_lo) << (hp + 1))
        max_c = k - 1 if q == m else k - 2
        claims = [(c, *good.get((m, q, c), (0, 0))) for c in range(1, max_c + 1)]
        union = 0
        for _, mask, _ in claims:
            union |= mask
        flag = good.get((m, q, 0), (0, 0))[0]
        count = 0
        fs = {}
        if union:
            tokens = _members(union)
            # D[o] + EU[q,m] >= EU[q,o] + dp_max[m][o]; its top two over o != m
            dd = list(map(add, self.eu_hi_int[q], self.dp_max_int[m]))
            floor = dd[m] = min(dd) - 1  # below every entry: never the largest of the others
            first = max(dd)
            index = dd.index(first)
            dd[index] = floor
            second = max(dd)  # v >= 3: another entry besides m and index
            # (I): h_self[u] >= e_u·X_u[u];  (II), split: h_spread[u] >= e_u·(max_{o∉{m,u}}
            # D[o] + max_{o∉{m,u}} ΔV_u[o])  — exact scalar products
            ys = list(map(add, self.eu_hi_int[q], self.self_tab[m]))  # minus EU[q,m] below
            dv_rest = self.dv_rest[m]
            first, second = first - eu_m, second - eu_m
            h_self, h_spread = [0] * m, [0] * m  # read at the tokens only (all < m)
            for u in tokens:
                y = ys[u] - eu_m
                h_self[u] = e_hi[u] * y if y >= 0 else e_lo[u] * y
                y = (second if u == index else first) + dv_rest[u]
                h_spread[u] = e_hi[u] * y if y >= 0 else e_lo[u] * y
            # One test for (I) and (II), split: Ã_S[o] + S·f_o < 0 at every o != m, with
            #   f_o = max(h_self[o], max_{u split, u != o} h_spread[u])   (o claimed),
            #   f_o = max_{u split} h_spread[u]                           (o not claimed);
            # positions with no bound to check are excluded (S·f is nondecreasing in f).
            # Classes c < k−1 with the same claimed and split tokens share f (and their tests,
            # below); c = k−1 has its own.
            groups = {}
            for c, mask, joint in claims:
                if mask:
                    groups.setdefault("last" if c == k - 1 else (mask, mask & ~joint),
                                      []).append(c)
            for key, _ in groups.items():
                g_mask, g_split = ((good[(m, q, k - 1)][0], good[(m, q, k - 1)][0]
                                    & ~good[(m, q, k - 1)][1]) if key == "last" else key)
                # ⊆ tokens (the union), increasing; the same lists when the sets are equal
                claimed = tokens if g_mask == union else _members(g_mask)
                split = claimed if g_split == g_mask else _members(g_split)
                zeros = None  # beyond m
                if split:
                    spread = list(map(h_spread.__getitem__, split))
                    h1 = max(spread)
                    at = spread.index(h1)  # the first split token reaching h1
                    top = split[at]
                    del spread[at]
                    f = [fmpz(h1)] * v
                    hs = list(map(h_self.__getitem__, claimed))
                    above = list(map(gt, hs, repeat(h1, len(hs))))  # f_u = h_self[u] there
                    for u, h in zip(compress(claimed, above), compress(hs, above)):
                        f[u] = h
                    h2 = max(spread, default=None)  # over the split tokens other than top
                    if h2 is None:
                        f[top] = h_self[top]
                    elif h_self[top] < h2:
                        f[top] = h2
                    else:
                        f[top] = h_self[top]
                else:
                    f = [0] * v
                    for u in claimed:
                        f[u] = h_self[u]
                    zeros = ones - fmpz_poly([g_mask >> u & 1 for u in range(m)])
                fs[key] = (fmpz_poly(f), zeros)
        joints = {}  # (u, "last" or "rest") -> the ends of S where u is joint
        for c, _, joint in claims:
            for u in (_members(joint) if joint else ()):  # joint ⊆ mask (parse_hints)
                ends = [placements[c][0], placements[c][-1]]
                if c == k - 1:
                    joints[(u, "last")] = ends[:1]
                else:
                    old = joints.get((u, "rest"))
                    joints[(u, "rest")] = ends if old is None else [min(old[0], ends[0]),
                                                                   max(old[1], ends[1])]
        joint_rows, t_s, s_top = {}, {}, 0
        d0 = self.eu_hi[q] + self.dp_max[m] if joints else None  # D + EU[q, m]
        for (u, key), ends in joints.items():
            if key == "rest":
                x_u, sigma = self.times(e_lo[u], e_hi[u], d0 + self.evou_hi[u],
                                        -eu_m - self.evou_lo[u][m])
                joint_rows[u] = x_u + ones * sigma
                s_top = max(s_top, ends[-1][1])
        bits = max([b_hi.bit_length() + max([hp] + [f.height_bits() for f, _ in fs.values()]),
                    s_top.bit_length() + max([0] + [y.height_bits()
                                                    for y in joint_rows.values()]),
                    qv.height_bits(), kappa.bit_length()]) + 4
        big = 1 << bits
        # E − B⁺·p − qv (E: the limit of a test whose scalar terms are κ): c = 0, and the
        # part of Ã_S = (B⁺ − S)·p + ... that does not depend on S
        a_full = self.limit((m,), bits, kappa) - qv - p * b_hi
        if flag:  # c = 0: B·p + qv < 0 off m
            if not self.holds(a_full):
                return None
            count += 1
        # Each test below is linear in S (R = B − S): it holds for every S in [s⁻, s⁺] once
        # it holds at both ends, so one pair of tests covers the placements of all the
        # classes of a group (the smallest lower and the largest upper placement)
        for key, cs in (groups.items() if union else ()):
            if key == "last":
                continue
            s_min = min(placements[c][0][0] for c in cs)
            s_max = max(placements[c][1][0] for c in cs)
            if b_lo - s_max < 0:  # R = B − S must be a weight >= 0
                return None
            f, zeros = fs[key]
            a_c = a_full if zeros is None else a_full + zeros * big
            w = p - f  # the test at S: a_c + S·(p − f) >= 0
            if not (self.holds(a_c + w * s_min) and self.holds(a_c + w * s_max)):
                return None
        if "last" in fs:  # c = k − 1: Ã_S = qv, S = B an interval: S·f <= S⁺·f + (S⁺ − S⁻)·2^(hf+1)
            f, zeros = fs["last"]
            (s_lo, s_hi), = placements[k - 1]
            slack = (s_hi - s_lo) << (f.height_bits() + 1)
            e_c = self.limit(unit_m if zeros is None else unit_m + zeros, bits, kappa_q + slack)
            if not self.holds(e_c - qv - f * s_hi):
                return None
        # (II′), joint: S·e_u·X_u[o] + Ã_S[o] < 0 for o ∉ {m, u}, X_u[o] <= D[o] + ΔV_u[o];
        # for the classes c < k−1 at the two ends of the S of the classes where u is joint
        # (the test is linear in S): with S a point, S·e_u·X_u[o] <= S·y_u[o], where
        # y_u = e⁺_u·x_u + (e⁺_u·shift + (e⁺_u − e⁻_u)·2^h)  (times() with the weight S·e_u)
        for (u, key), ends in joints.items():
            if key == "rest":
                y_u = joint_rows[u]
                for s_lo, _ in ends:
                    if s_lo not in t_s:  # E − (B⁺ − S)·p − qv, shared by the joint tokens
                        t_s[s_lo] = a_full + p * s_lo
                    test = t_s[s_lo] - y_u * s_lo  # a new polynomial: its u-th entry excluded
                    test[u] += big
                    if not self.holds(test):
                        return None
            else:  # c = k − 1: Ã_S = qv + κ_q, S = B an interval
                (s_lo, s_hi), = ends
                x_u = d0 + self.evou_hi[u]
                row, sigma = self.times(s_lo * e_lo[u], s_hi * e_hi[u], x_u,
                                        -eu_m - self.evou_lo[u][m])
                bits_u = max(row.height_bits(), sigma.bit_length(), bits) + 3
                test = self.limit(unit_m + self.unit[u], bits_u, kappa_q + sigma) - qv - row
                if not self.holds(test):
                    return None
        for c, mask, _ in claims:
            if mask:  # tokens < m (parse_hints): |claimed| = popcount(mask)
                count += comb(k - 1, c) * mask.bit_count() ** c
        return count

