"""Lemma E2 of spec/rules.md §exact, tested directly: every entry of the rule's integer
table bounds w_i·x_i(o) from above for every choice of reals inside the recorded
enclosures.  Wide weight enclosures make the sign-dependent choice of the weight's end
matter (a random trained model never exposes it: the red team's undetected break)."""

from __future__ import annotations

import random
from fractions import Fraction

from mpmath import iv

from checker.rules.exact import IntegerTables, _common_exponent


def _interval(rng, low, high, positive=False):
    a, b = sorted(rng.uniform(low, high) for _ in range(2))
    if positive:
        a, b = abs(a) + 0.5, abs(b) + 1.0
        a, b = min(a, b), max(a, b)
    return iv.mpf((a, b))


def _ends(x):
    return Fraction(float(x.a)), Fraction(float(x.b))


def _matrix(rng, rows, cols, **kw):
    return [[_interval(rng, -3.0, 3.0, **kw) for _ in range(cols)] for _ in range(rows)]


def test_integer_terms_bound_every_real_choice():
    rng = random.Random(20261126)
    for _ in range(40):
        v, k = rng.randint(2, 4), rng.randint(2, 4)
        mats = {"EU": _matrix(rng, v, v), "EVOU": _matrix(rng, v, v),
                "PVOU": _matrix(rng, k, v), "EXP_EQKE": _matrix(rng, v, v, positive=True),
                "EXP_EQKP": _matrix(rng, v, k, positive=True)}
        tables = IntegerTables(mats, v, k)
        x_exp = _common_exponent(mats["EU"] + mats["EVOU"] + mats["PVOU"])
        for q in range(v):
            unit = Fraction(2) ** (x_exp + _common_exponent([mats["EXP_EQKE"][q]])
                                   + _common_exponent([mats["EXP_EQKP"][q]]))
            for m in range(v):
                outputs = [o for o in range(v) if o != m]
                table, query_row, _ = tables.rows(q, m, list(range(v)))
                cases = [(i, t, table[i][t]) for i in range(k - 1) for t in range(v)]
                cases.append((k - 1, q, query_row))
                for i, t, bounds in cases:
                    for o, bound in zip(outputs, bounds):
                        x_hi = (_ends(mats["EU"][q][o])[1] - _ends(mats["EU"][q][m])[0]
                                + _ends(mats["PVOU"][i][o])[1] - _ends(mats["PVOU"][i][m])[0]
                                + _ends(mats["EVOU"][t][o])[1] - _ends(mats["EVOU"][t][m])[0])
                        for e in _ends(mats["EXP_EQKE"][q][t]):
                            for b in _ends(mats["EXP_EQKP"][q][i]):
                                # w·x is largest at x's upper end for w > 0
                                assert e * b * x_hi <= bound * unit, (q, m, i, t, o)
