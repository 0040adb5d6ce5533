"""The two arithmetic back-ends (checker/arith: mpmath and Arb) against exact
rationals, and against each other on whole certificates.

* every interval op of either back-end encloses the exact real result at points
  of its inputs (endpoints included), on random and adversarial floats
  (subnormal, huge, signed zeros, wide and one-ulp intervals);
* the upper-bound arithmetic of either back-end bounds the exact result, and
  its comparisons (below_zero, greater, top_upper) are exact;
* `contained` decides containment in a recorded [lo, hi] exactly;
* every shipped certificate, and brute-force and cubic certificates of random
  models, get the same verdict and count from both back-ends (a disagreement
  is a bug); the Arb back-end is loaded only when asked for, with a clear
  message when python-flint is missing.
"""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mpmath.libmp import to_rational
from test_interval_props import (  # helpers only (no test functions imported)
    DIM,
    EXP_ELEMS,
    FLOATS,
    SETTINGS,
    encloses_div_sqrt,
    ex_add,
    ex_matmul,
    ex_mean_rows,
    ex_sub,
    exp_bounds,
    imatrix,
    intervals,
    pick_points,
)

from checker import arith, ops
from checker.cli import main as check_cert
from checker.errors import Rejected

ROOT = Path(__file__).resolve().parent.parent
NAMES = list(arith.NAMES)


@pytest.fixture(params=NAMES)
def ar(request):
    if request.param == "arb":
        pytest.importorskip("flint")
    return arith.get(request.param)


def ar_of(name):
    if name == "arb":
        pytest.importorskip("flint")
    return arith.get(name)


def fraction(ar, x) -> tuple[Fraction, Fraction]:
    """Exact rational endpoints of element x (for Arb: its outward-rounded ends)."""
    if ar.name == "mpmath":
        return tuple(Fraction(*to_rational(e)) for e in x._mpi_)
    out = []
    for end in (x.lower(), x.upper()):
        man, exp = (int(n) for n in end.man_exp())
        out.append(Fraction(man) * Fraction(2) ** exp)
    return tuple(out)


def bound(ar, a) -> Fraction:
    """The upper bound an up-value stands for, exactly."""
    if ar.name == "mpmath":
        return Fraction(*to_rational(a))
    return fraction(ar, a)[1]


def rows(ar, lo, hi):
    return [[ar.interval(a, b) for a, b in zip(rl, rh)] for rl, rh in zip(lo, hi)]


def assert_encloses(ar, m, exact, what):
    for i, (mrow, erow) in enumerate(zip(m, exact)):
        for j, (x, e) in enumerate(zip(mrow, erow)):
            lo, hi = fraction(ar, x)
            assert lo <= e <= hi, f"{ar.name} {what}[{i},{j}]: [{lo}, {hi}] misses {e}"


# -- enclosures ------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data(), r=DIM, n=DIM, c=DIM, op=st.sampled_from(["matmul", "add", "sub"]))
def test_binary_ops_enclose(name, data, r, n, c, op):
    ar = ar_of(name)
    if op == "matmul":
        a, b = data.draw(imatrix(r, n)), data.draw(imatrix(n, c))
        exact = ex_matmul
    else:
        a, b = data.draw(imatrix(r, c)), data.draw(imatrix(data.draw(st.sampled_from([1, r])), c))
        exact = ex_add if op == "add" else ex_sub
    pa, pb = pick_points(data.draw, *a), pick_points(data.draw, *b)
    m = getattr(ops, op)(rows(ar, *a), rows(ar, *b), ar=ar)
    assert_encloses(ar, m, exact(pa, pb), op)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data(), r=DIM, c=DIM, n=st.sampled_from([1, 2, 3, 8, 32, 10**6]))
def test_unary_ops_enclose(name, data, r, c, n):
    ar = ar_of(name)
    a = data.draw(imatrix(r, c))
    pa = pick_points(data.draw, *a)
    assert_encloses(ar, ops.mean_rows(rows(ar, *a), ar=ar), ex_mean_rows(pa), "mean_rows")
    m = ops.div_sqrt(rows(ar, *a), n, ar=ar)
    for i in range(r):
        for j in range(c):
            assert encloses_div_sqrt(*fraction(ar, m[i][j]), pa[i][j], n), "div_sqrt"


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data(), r=DIM, c=DIM)
def test_exp_encloses(name, data, r, c):
    ar = ar_of(name)
    a = data.draw(imatrix(r, c, elems=EXP_ELEMS))
    pa = pick_points(data.draw, *a, endpoints_only=True)  # exp is increasing
    m = ops.exp(rows(ar, *a), ar=ar)
    for i in range(r):
        for j in range(c):
            lo, hi = fraction(ar, m[i][j])
            lo_e, hi_e = exp_bounds(float(pa[i][j]))
            assert lo <= lo_e and hi_e <= hi, f"{ar.name} exp at {pa[i][j]}"


@pytest.mark.parametrize("x", [2.0**-52, -(2.0**-52), 2.0**-79, 1e-300, 13.982646813039523,
                               709.0, -745.0, -8191.0, -8192.0, -1e308])
def test_exp_hard_arguments(ar, x):
    lo, hi = fraction(ar, ar.exp(ar.point(x)))
    if x > -745:
        lo_e, hi_e = exp_bounds(x)
        assert lo <= lo_e and hi_e <= hi
    else:
        assert 0 <= lo and hi > 0


def test_exp_refuses_arguments_at_the_limit(ar):
    from checker.errors import Malformed

    with pytest.raises(Malformed, match="exp of an argument"):
        ar.exp(ar.interval(0.0, 8192.0))


@pytest.mark.parametrize("n", [1, 2, 3, 32, 10**6])
def test_inv_sqrt_encloses(ar, n):
    lo, hi = fraction(ar, ar.inv_sqrt(n))
    assert encloses_div_sqrt(lo, hi, Fraction(1), n)


# -- recorded intervals and exact containment -----------------------------------------

@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(iv=intervals(), other=intervals())
def test_interval_widens_never_narrows_and_containment_is_exact(name, iv, other):
    ar = ar_of(name)
    lo, hi = fraction(ar, ar.interval(*iv))
    assert lo <= Fraction(iv[0]) and Fraction(iv[1]) <= hi
    x = ar.interval(*other)
    x_lo, x_hi = fraction(ar, x)
    inside = Fraction(iv[0]) <= x_lo and x_hi <= Fraction(iv[1])
    assert ar.contained(x, *iv) == inside


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(ivs=st.lists(intervals(), max_size=6), points=st.lists(FLOATS, max_size=6))
def test_bulk_elements_are_the_points_and_intervals(name, ivs, points):
    """elements(lo, hi): entry by entry point(a) (a == b) or interval(a, b), the same reals."""
    ar = ar_of(name)
    pairs = ivs + [(x, x) for x in points]
    got = ar.elements([a for a, _ in pairs], [b for _, b in pairs])
    assert len(got) == len(pairs)
    for x, (a, b) in zip(got, pairs):
        want = ar.point(a) if a == b else ar.interval(a, b)
        assert fraction(ar, x) == fraction(ar, want)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(x=FLOATS)
def test_points_are_exact(name, x):
    ar = ar_of(name)
    assert fraction(ar, ar.point(x)) == (Fraction(x), Fraction(x))
    assert ar.contained(ar.point(x), x, x)
    assert ar.is_negative(ar.point(x)) == (x < 0)
    assert ar.is_nonnegative(ar.point(x)) == (x >= 0)


# -- upper-bound arithmetic ------------------------------------------------------------

UP_ELEMS = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 5e-324]))


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(xs=st.lists(intervals(UP_ELEMS), min_size=2, max_size=6), data=st.data())
def test_upper_bounds_bound_the_exact_result(name, xs, data):
    ar = ar_of(name)
    els = [ar.interval(*x) for x in xs]
    pts = [data.draw(st.sampled_from([Fraction(a), Fraction(b), (Fraction(a) + Fraction(b)) / 2]))
           for a, b in xs]
    y, py = els[0], pts[0]
    diffs = ar.v_diff(els, y)
    for d, p in zip(diffs, pts):
        assert p - py <= bound(ar, d)
    sums = ar.v_add(diffs, diffs[::-1])
    for s, p, q in zip(sums, pts, pts[::-1]):
        assert (p - py) + (q - py) <= bound(ar, s)
    w_lo, w_hi = sorted(abs(Fraction(v)) for v in xs[1])
    w = ar.interval(float(w_lo), float(w_hi))
    pw = data.draw(st.sampled_from([w_lo, w_hi]))
    for prod, p in zip(ar.v_mul(w, diffs), pts):
        assert pw * (p - py) <= bound(ar, prod)
    for prod, p in zip(ar.v_mul_each([w] * len(diffs), diffs), pts):
        assert pw * (p - py) <= bound(ar, prod)
    for aff, p in zip(ar.v_affine(w, diffs, diffs), pts):
        assert pw * (p - py) + (p - py) <= bound(ar, aff)
    ups = [ar.upper(e) for e in els]
    index, best, second = ar.top_upper(ups, skip=0)
    exact = sorted((bound(ar, u) for i, u in enumerate(ups) if i != 0), reverse=True)
    assert bound(ar, best) == exact[0] == bound(ar, ups[index]) and index != 0
    assert bound(ar, second) == (exact[1] if len(exact) > 1 else exact[0])
    assert ar.all_below_zero(ups) == all(b < 0 for b in (bound(ar, u) for u in ups))
    assert ar.greater(ups[0], ups[1]) == (bound(ar, ups[0]) > bound(ar, ups[1]))


def test_negative_weight_rejected(ar):
    with pytest.raises(Rejected, match="positive"):
        ar.up_mul(ar.interval(-1e-300, 1.0), ar.upper(ar.point(1.0)))
    with pytest.raises(Rejected, match="positive"):
        ar.v_mul(ar.interval(-1e-300, 1.0), [ar.upper(ar.point(1.0))])


# -- whole certificates: the same verdicts ---------------------------------------------

def verdict(path, name, *extra):
    import io
    import json
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        code = check_cert([str(path), "--json", "--jobs", "2", "--arith", name, *map(str, extra)])
    result = json.loads(out.getvalue())
    return code, result.get("correct"), result.get("arithmetic")


def needs_arb() -> set[str]:
    """Shipped certificates whose certs/POLICY entry sets --arith=arb (spec/policy.md §entry
    options): under mpmath their checks take minutes (modadd) to 38 minutes (family_gap), so
    they are checked under Arb by the audit (tests/test_certs_audit.py) and their rules'
    back-end agreement on small models (tests/test_family_gap*.py, tests/test_tasks.py)."""
    from checker import policy

    return {e.certificate for e in policy.load(ROOT / "certs" / "POLICY").entries if e.arith}


@pytest.mark.parametrize("cert", sorted(p.name for p in (ROOT / "certs").glob("*.jsonl")))
def test_shipped_certificates_same_verdict(cert):
    pytest.importorskip("flint")
    if cert in needs_arb():
        pytest.skip("checked under Arb with its policy entry's limits by the audit")
    path = ROOT / "certs" / cert
    got = {name: verdict(path, name) for name in NAMES}
    assert got["mpmath"][:2] == got["arb"][:2] and got["mpmath"][0] == 0, got
    assert got["arb"][2] == "arb" and got["mpmath"][2] == "mpmath"


@pytest.mark.parametrize("seed", [1, 2, 3, 5])
@pytest.mark.parametrize("strategy", ["brute-force", "cubic"])
def test_random_models_same_counts(seed, strategy):
    pytest.importorskip("flint")
    from checker_fixtures import certificate_file, random_model

    path = certificate_file(random_model(seed), strategy)
    got = {name: verdict(path, name) for name in NAMES}
    assert got["mpmath"][:2] == got["arb"][:2], got


def test_arb_loaded_only_when_asked_and_missing_flint_is_a_clear_error(tmp_path):
    cert = ROOT / "certs" / "max3_v8_seed0.cubic.jsonl"
    code = ("import sys\n"
            "sys.modules['flint'] = None\n"  # python-flint unavailable
            "from checker.cli import main\n"
            f"assert main([{str(cert)!r}, '--jobs', '1']) == 0\n"
            "assert 'flint' not in sys.modules or sys.modules['flint'] is None\n"
            f"sys.exit(main([{str(cert)!r}, '--arith', 'arb']))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 2, done.stderr
    assert "python-flint" in done.stderr and "pip install" in done.stderr
    assert "Traceback" not in done.stderr


def test_human_output_names_the_arithmetic(capsys):
    cert = ROOT / "certs" / "max3_v8_seed0.brute-force.jsonl"
    assert check_cert([str(cert), "--jobs", "1"]) == 0
    assert "(arithmetic: mpmath)" in capsys.readouterr().out


# -- the cubic rule claim by claim, in both back-ends -------------------------------------

def _rule_inputs(lines):
    """Replay a certificate up to its rule line; the rule's input matrices (lines)."""
    import json

    from checker.certificate import CertificateChecker, Limits

    checker = CertificateChecker(Limits(), None, 1)
    for text in lines:
        obj = json.loads(text)
        if obj["kind"] == "rule":
            return checker, obj["inputs"]
        checker.feed(text)
    raise AssertionError("no rule line")


SINGLE_CLAIM_MODELS = [("random", v, k, seed) for v, k in [(2, 3), (3, 3), (4, 4)]
                       for seed in range(6)] + [("scaled", 0, 0, s) for s in (90, 91, 109)]


@pytest.mark.parametrize("kind, v, k, seed", SINGLE_CLAIM_MODELS)
def test_cubic_single_claims_sound(kind, v, k, seed):
    """Every single claim (one token t' < m for one (m, q, c), or the c = 0 flag)
    that the rule accepts covers only correct sequences (float64 forward pass,
    decisive margin), in both back-ends, which must accept the same claims.
    At d_vocab 2 check (II) is vacuous, so a broken (I) is caught; the scaled
    models (strong positional attention) need both placement bounds.  Breaking
    (I), the split (II) or the lower placement makes this test fail."""
    import itertools

    import numpy as np
    import torch
    from checker_fixtures import certificate_lines, workdir
    from soundness_helpers import cubic_covered, random_scaled
    undecided = 1e-9  # a float64 margin this small cannot decide the real verdict

    from checker.modelspec import Dims
    from checker.rules import cubic
    from generator.model import MaxOfKTransformer, logits_float64
    from generator.modelfile import save_model

    if kind == "scaled":
        weights = random_scaled(seed)
        v, k = weights.dims.d_vocab, weights.dims.n_ctx
    else:
        weights = MaxOfKTransformer(Dims(v, k, 4, 4),
                                    generator=torch.Generator().manual_seed(100 + seed)).weights()
        weights = weights.replace(W_pos=weights.W_pos * 3.0)  # placements matter
    path = workdir() / f"single_claims_{kind}_{v}_{k}_{seed}.pt"
    save_model(path, weights, None)
    checker, inputs = _rule_inputs(certificate_lines(path, "cubic"))
    names = [n for n in NAMES if n == "mpmath" or importlib_flint()]
    accepted = {}
    for name in names:
        back = arith.get(name)
        mats = {key: checker.values[line].rows(back) for key, line in inputs.items()}
        accepted[name] = set()
        for m, q in itertools.product(range(v), repeat=2):
            for c in range(0, (k - 1 if q == m else k - 2) + 1):
                if q > m or (c and not m):
                    continue
                for mask in [1] if c == 0 else [1 << u for u in range(m)]:
                    entry = [m, q, c, mask]
                    try:
                        proven, _ = cubic.check(checker.dims, mats, {"good": [entry]},
                                                lambda work: None, 1, arith=back)
                    except Rejected:
                        continue
                    accepted[name].add(tuple(entry))
                    covered = np.array(sorted(cubic_covered([entry], v, k)),
                                       dtype=np.int64).reshape(-1, k)
                    assert len(covered) == proven
                    logits = logits_float64(weights, covered)
                    rows = np.arange(len(covered))
                    top = covered.max(axis=1)
                    others = logits.copy()
                    others[rows, top] = -np.inf
                    margin = logits[rows, top] - others.max(axis=1)
                    assert (margin > undecided).all(), \
                        f"{name}: claim {entry} covers a wrong or undecidable sequence"
    assert len({frozenset(a) for a in accepted.values()}) == 1, accepted


def importlib_flint() -> bool:
    import importlib.util

    return importlib.util.find_spec("flint") is not None
