"""The activations' enclosures (checker/elementary.py, spec/rules.md §Activations) contain
the exact values: checked against 200-bit mpmath evaluations of the defining formulas at
the endpoints, random interior points and the stationary points, on random and adversarial
intervals (around 0, very wide, huge magnitudes, subnormal).  A deliberately broken slope
test (every piece declared increasing) is caught by the same check."""

from __future__ import annotations

import random

import pytest
from mpmath import iv, mp, mpf

from checker import elementary
from checker.elementary import (
    SMOOTH_ACTIVATIONS,
    activation_interval,
    erf_interval,
    pi_bounds,
    sigmoid_interval,
)

REF_BITS = 200


def reference(name: str, x):
    """The activation at the point x, at 200 bits (the spec's formulas, mpmath's own
    non-rigorous functions: an oracle accurate far below the enclosures' widths)."""
    with mp.workprec(REF_BITS):
        x = mpf(x)
        if name == "gelu":
            return x * (1 + mp.erf(x / mp.sqrt(2))) / 2
        if name == "gelu_new":
            return x * (1 + mp.tanh(mp.sqrt(2 / mp.pi) * (x + mpf(44715) / 10**6 * x**3))) / 2
        if name == "gelu_fast":
            return x * (1 + mp.tanh(mpf(7978845608) / 10**10 * x
                                    * (1 + mpf(44715) / 10**6 * x**2))) / 2
        if name == "silu":
            return x / (1 + mp.exp(-x))
        return max(x, 0)


STATIONARY = {"gelu": -0.7517915, "gelu_new": -0.7522, "gelu_fast": -0.7522,
              "silu": -1.2784645}


def contains(enclosure, value) -> bool:
    with mp.workprec(REF_BITS):
        return mpf(enclosure.a) <= value <= mpf(enclosure.b)


def intervals(rng: random.Random, n: int):
    """Random and adversarial [lo, hi] pairs."""
    fixed = [(0.0, 0.0), (-1e-300, 1e-300), (5e-324, 5e-324), (-1e300, 1e300), (-1e6, -1e5),
             (-50.0, -8.0), (-8.5, -7.5), (-3.0, 1.0), (-0.76, -0.74), (-1.3, -1.25),
             (1e10, 1e12), (-2.0, 0.0), (-2.0, -2.0), (-1.0, -1.0), (-0.5, 0.5)]
    out = list(fixed)
    while len(out) < n:
        kind = rng.randrange(4)
        if kind == 0:
            a, b = rng.uniform(-10, 10), rng.uniform(-10, 10)
        elif kind == 1:
            a, b = rng.uniform(-3, 1), rng.uniform(-3, 1)
        elif kind == 2:
            a = rng.choice([-1, 1]) * 10 ** rng.uniform(-300, 300)
            b = rng.choice([-1, 1]) * 10 ** rng.uniform(-300, 300)
        else:
            c = rng.uniform(-2, 0)
            a, b = c - 10 ** rng.uniform(-12, 0), c + 10 ** rng.uniform(-12, 0)
        out.append((min(a, b), max(a, b)))
    return out


def check_enclosures(name: str, cases) -> list:
    """Every (interval, point) whose 200-bit value the enclosure misses."""
    rng = random.Random(1)
    misses = []
    for lo, hi in cases:
        enclosure = activation_interval(name, iv.mpf([lo, hi]))
        points = [lo, hi, *(rng.uniform(lo, hi) for _ in range(6))]
        if name in STATIONARY and lo <= STATIONARY[name] <= hi:
            points.append(STATIONARY[name])
        for p in points:
            if not contains(enclosure, reference(name, p)):
                misses.append(((lo, hi), p))
    return misses


@pytest.mark.parametrize("name", [*SMOOTH_ACTIVATIONS, "relu"])
def test_enclosures_contain_the_exact_values(name):
    assert check_enclosures(name, intervals(random.Random(name), 45)) == []


@pytest.mark.parametrize("name", SMOOTH_ACTIVATIONS)
def test_enclosures_are_tight(name):
    """Not vacuous: a point is enclosed to ~1e-20, and the minimum over [−100, 100] to
    1% (the values the forward pass and its margins depend on)."""
    point = activation_interval(name, iv.mpf(-1.1))
    assert point.b - point.a < 1e-18
    wide = activation_interval(name, iv.mpf([-100, 100]))
    true_min = min(reference(name, STATIONARY[name] + d * 1e-4) for d in range(-5, 6))
    assert wide.a <= true_min and float(wide.a) > 1.01 * float(true_min)
    assert wide.b == 100


def test_a_broken_slope_test_is_caught(monkeypatch):
    """Every piece declared increasing: [f(lo), f(hi)] misses the minimum inside."""
    monkeypatch.setattr(elementary, "_slope_sign", lambda name, x: iv.mpf(1))
    assert check_enclosures("gelu", [(-3.0, 1.0), (-1.0, -0.5)])
    assert check_enclosures("silu", [(-3.0, 1.0)])


def test_building_blocks():
    lo, hi = pi_bounds()
    with mp.workprec(300):
        assert mpf(lo.numerator) / lo.denominator < mp.pi < mpf(hi.numerator) / hi.denominator
    assert float(hi - lo) < 1e-40
    rng = random.Random(3)
    for _ in range(60):
        a = rng.uniform(-8, 8)
        b = a + 10 ** rng.uniform(-10, 1)
        e, s = erf_interval(iv.mpf([a, b])), sigmoid_interval(iv.mpf([a, b]))
        for p in (a, b, (a + b) / 2):
            with mp.workprec(REF_BITS):
                assert contains(e, mp.erf(mpf(p))) and contains(s, 1 / (1 + mp.exp(-mpf(p))))
    huge = sigmoid_interval(iv.mpf([-1e300, 1e300]))  # no exp overflow
    assert huge.a >= 0 and huge.b <= 1


def test_tanh_form_for_exact_gelu_is_caught(monkeypatch):
    """Deliberate break: exact gelu evaluated by the tanh form (up to ~1e-3 off)."""
    naive = elementary._naive
    monkeypatch.setattr(elementary, "_naive", lambda name, x: naive(
        "gelu_new" if name == "gelu" else name, x))
    assert check_enclosures("gelu", [(-2.5, -2.5), (1.5, 1.5), (-3.0, 1.0)])


def test_relu_is_exact_on_the_endpoints():
    """forward._relu (the mpmath path's ReLU, on raw endpoints) is [max(a, 0), max(b, 0)]
    exactly, on intervals of every sign (both ends negative, zero, straddling, infinite,
    signed zeros, tiny and huge magnitudes).  (Breaks tried: the upper end not clamped at 0;
    an interval touching 0 from below left as is: both caught here.)"""
    from checker.rules.forward import _relu

    rng = random.Random(11)
    cases = [(0, 0), (-0.0, 0), (-1, 0), (-1, -0.0), (-2, -1), (-1, 2), (0, 3),
             ("-inf", 1), ("-inf", "inf"), ("-inf", -1), (0, "inf"), (-5e-324, 5e-324)]
    for _ in range(2000):
        a = rng.choice([-1, 1]) * rng.random() * 10.0 ** rng.randint(-300, 300)
        cases.append((a, a + rng.choice([0.0, rng.random() * 10.0 ** rng.randint(-300, 300)])))
    xs = [iv.mpf(c) for c in cases]
    for x, y in zip(xs, _relu(xs)):
        assert y.a == max(x.a, 0) and y.b == max(x.b, 0), (x, y)
