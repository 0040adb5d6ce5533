"""exact.IntegerTables from recorded binary64 pairs in bulk (exact._binary64_tables, the
`--arith arb` path of rules cubic and exact; spec/arithmetic.md §Exact integer vectors,
"the tables in bulk"): the same integers as the general path (_raw_endpoints,
_common_exponent, _integer_matrix), each equal to its endpoint times 2^−E exactly, on random
and adversarial endpoints (subnormals, ±0, the extremes, huge and tiny magnitudes in one
row, rows of integers only); non-finite endpoints and negative weights refused as before.
"""

from __future__ import annotations

import random
import struct
from fractions import Fraction

import pytest

from checker.errors import Malformed, Rejected
from checker.rules import cubic, exact

ATTRS = ("eu_lo", "eu_hi", "evou_lo", "evou_hi", "pvou_lo", "pvou_hi", "e_lo", "e_hi",
         "b_lo", "b_hi")
SPECIAL = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308,
           1.7976931348623157e308, -1.7976931348623157e308, 1.0, -3.0, 2.0 ** 60,
           2.0 ** 53 + 2, 0.1, 1e300, 1e-300]


def _random_float(rng, positive=False):
    kind = rng.randrange(5)
    if kind == 0:
        x = rng.choice(SPECIAL)
    elif kind == 1:  # any bit pattern that is finite
        while True:
            x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
            if x == x and abs(x) != float("inf"):
                break
    elif kind == 2:  # an integer-valued float (no fractional bits)
        x = float(rng.randrange(-2 ** 62, 2 ** 62))
    elif kind == 3:  # exp-like: tiny to huge in one row
        x = 2.0 ** rng.randrange(-1074, 1000) * rng.random()
    else:
        x = rng.uniform(-10, 10)
    return abs(x) if positive else x


def _pair(rng, positive=False):
    a, b = _random_float(rng, positive), _random_float(rng, positive)
    return (a, b) if a <= b else (b, a)


def _mats(rng, v, k, integers_only=False):
    def entry(positive=False):
        if integers_only:
            a = float(rng.randrange(0 if positive else -2 ** 40, 2 ** 40))
            return (a, a + float(rng.randrange(4)))
        return _pair(rng, positive)

    return {"EU": [[entry() for _ in range(v)] for _ in range(v)],
            "EVOU": [[entry() for _ in range(v)] for _ in range(v)],
            "PVOU": [[entry() for _ in range(v)] for _ in range(k)],
            "EXP_EQKE": [[entry(True) for _ in range(v)] for _ in range(v)],
            "EXP_EQKP": [[entry(True) for _ in range(k)] for _ in range(v)]}


APPLIED = []  # which seeds took the bulk path


def _general(mats, v, k, monkeypatch):
    """IntegerTables through the general path (the bulk one switched off)."""
    with monkeypatch.context() as patch:
        patch.setattr(exact, "_binary64_tables", lambda *args: False)
        return exact.IntegerTables(mats, v, k)


@pytest.mark.parametrize("seed", range(30))
def test_bulk_tables_are_the_general_paths_integers(seed, monkeypatch):
    rng = random.Random(seed)
    v, k = rng.choice([3, 4, 7]), rng.choice([3, 4])
    mats = _mats(rng, v, k)
    # the bulk path applies iff every group has an endpoint with a fractional part
    groups = [mats["EU"] + mats["EVOU"] + mats["PVOU"]] + [[r] for r in mats["EXP_EQKE"]] \
        + [[r] for r in mats["EXP_EQKP"]]
    applies = all(any(Fraction(x).denominator > 1 for row in g for pair in row for x in pair)
                  for g in groups)
    assert exact._binary64_tables(exact.IntegerTables.__new__(exact.IntegerTables), mats, v,
                                  k) == applies
    APPLIED.append(applies)
    bulk, general = exact.IntegerTables(mats, v, k), _general(mats, v, k, monkeypatch)
    for name in ATTRS:
        assert getattr(bulk, name) == getattr(general, name), name
    # and each integer is its endpoint at the group's exponent, exactly
    x_exp = exact._common_exponent(exact._raw_matrix(mats["EU"] + mats["EVOU"] + mats["PVOU"]))
    unit = Fraction(2) ** x_exp
    for name, attr in (("EU", "eu"), ("EVOU", "evou"), ("PVOU", "pvou")):
        ends = zip(mats[name], getattr(bulk, attr + "_lo"), getattr(bulk, attr + "_hi"))
        for row, lo, hi in ends:
            for (a, b), x, y in zip(row, lo, hi):
                assert Fraction(a) == x * unit and Fraction(b) == y * unit
    for name, attr in (("EXP_EQKE", "e"), ("EXP_EQKP", "b")):
        ends = zip(mats[name], getattr(bulk, attr + "_lo"), getattr(bulk, attr + "_hi"))
        for row, lo, hi in ends:
            unit = Fraction(2) ** exact._common_exponent(exact._raw_matrix([row]))
            for (a, b), x, y in zip(row, lo, hi):
                assert Fraction(a) == x * unit and Fraction(b) == y * unit


def test_bulk_path_taken_by_most_seeds():
    """(after the parametrized test) the random tables exercise the bulk path."""
    assert len(APPLIED) == 30 and sum(APPLIED) >= 20


def test_rows_of_integers_defer_to_the_general_path(monkeypatch):
    """A group whose endpoints are all integers has its least exponent >= 0, which the bulk
    lemma does not cover: the general path builds the tables (the same result)."""
    rng = random.Random(5)
    mats = _mats(rng, 4, 3, integers_only=True)
    assert not exact._binary64_tables(exact.IntegerTables.__new__(exact.IntegerTables),
                                      mats, 4, 3)
    bulk, general = exact.IntegerTables(mats, 4, 3), _general(mats, 4, 3, monkeypatch)
    for name in ATTRS:
        assert getattr(bulk, name) == getattr(general, name), name


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_endpoint_refused(bad, monkeypatch):
    rng = random.Random(1)
    mats = _mats(rng, 3, 3)
    mats["EVOU"][1][2] = (mats["EVOU"][1][2][0], bad)
    with pytest.raises(Malformed):
        exact.IntegerTables(mats, 3, 3)
    with pytest.raises(Malformed):
        _general(mats, 3, 3, monkeypatch)


def test_negative_weight_refused_in_bulk():
    rng = random.Random(2)
    mats = _mats(rng, 3, 3)
    mats["EXP_EQKP"][2][1] = (-1e-300, 1.0)
    with pytest.raises(Rejected):
        exact.IntegerTables(mats, 3, 3)


def test_mpmath_intervals_take_the_general_path():
    """Rows of mpmath intervals (rule exact under mpmath) are not recorded pairs."""
    from mpmath import iv

    rng = random.Random(3)
    mats = _mats(rng, 3, 3)
    ivs = {name: [[iv.mpf([a, b]) for a, b in row] for row in rows]
           for name, rows in mats.items()}
    assert not exact._binary64_tables(exact.IntegerTables.__new__(exact.IntegerTables),
                                      ivs, 3, 3)
    bulk, general = exact.IntegerTables(mats, 3, 3), exact.IntegerTables(ivs, 3, 3)
    for name in ATTRS:
        assert getattr(bulk, name) == getattr(general, name), name


def test_inputs_are_the_cubic_inputs():
    assert set(cubic.INPUTS) == {"EU", "EVOU", "PVOU", "EXP_EQKE", "EXP_EQKP"}


# -- the accelerator's v × v tables from these integers (cubic_fmpz._Fast, built with map) ------

def _exact_upper_tables(mats, v, k):
    """dp_max, xm_tab, dpq, self_tab, dv_rest (cubic_fmpz._Fast) as exact rationals of the
    recorded binary64 endpoints (Fraction): upper ends minus lower ends."""
    lo = {n: [[Fraction(a) for a, _ in row] for row in mats[n]] for n in ("EVOU", "PVOU")}
    hi = {n: [[Fraction(b) for _, b in row] for row in mats[n]] for n in ("EVOU", "PVOU")}
    ev_lo, ev_hi, pv_lo, pv_hi = lo["EVOU"], hi["EVOU"], lo["PVOU"], hi["PVOU"]
    dp_max = [[max(pv_hi[i][o] - pv_lo[i][m] for i in range(k - 1)) for o in range(v)]
              for m in range(v)]
    return {"dp_max_int": dp_max,
            "xm_tab": [[dp_max[m][o] + ev_hi[m][o] - ev_lo[m][m] for o in range(v)]
                       for m in range(v)],
            "dpq": [[pv_hi[k - 1][o] - pv_lo[k - 1][m] for o in range(v)] for m in range(v)],
            "self_tab": [[dp_max[m][t] + ev_hi[t][t] - ev_lo[t][m] for t in range(v)]
                         for m in range(v)],
            "dv_rest": [[max(ev_hi[t][o] for o in range(v) if o not in (m, t)) - ev_lo[t][m]
                         for t in range(v)] for m in range(v)]}


@pytest.mark.parametrize("seed", range(30))
def test_accelerator_tables_are_the_exact_rationals(seed):
    """From random and adversarial binary64 endpoints (subnormals, ±0, the extremes, huge and
    tiny in one matrix: cancellation in every difference): the exact tier's map-built tables,
    times the x-unit 2^E, are exactly the rational differences of the recorded endpoints, and
    the coarse tier's, times its grid, are upper bounds of them (outward)."""
    from flint import fmpz_poly

    from checker.rules import cubic_fmpz

    rng = random.Random(1000 + seed)
    v, k = rng.choice([3, 4, 6]), rng.choice([3, 4, 5])
    mats = _mats(rng, v, k)
    it = exact.IntegerTables(mats, v, k)
    unit = Fraction(2) ** exact._common_exponent(
        exact._raw_matrix(mats["EU"] + mats["EVOU"] + mats["PVOU"]))
    bits = max(abs(x).bit_length() for n in ("eu", "evou", "pvou") for e in ("_lo", "_hi")
               for row in getattr(it, n + e) for x in row)
    grid = 2 ** max(0, bits - cubic_fmpz.COARSE_BITS_X)
    want = _exact_upper_tables(mats, v, k)

    def ints(rows):
        return [[int(x) for x in r.coeffs()] + [0] * (v - r.length()) if isinstance(r, fmpz_poly)
                else list(r) for r in rows]

    fine, rough = cubic_fmpz._Fast(it, v, k), cubic_fmpz._Coarse(it, v, k)
    for name, rows in want.items():
        got = ints(getattr(fine, name))
        assert [[x * unit for x in r] for r in got] == rows, name
        got = ints(getattr(rough, name))
        assert all(x * grid * unit >= y for r, s in zip(got, rows) for x, y in zip(r, s)), name
