"""The arb back-end's accelerator of rule cubic (checker/rules/cubic_fmpz.py): exact
integer vectors in FLINT (fmpz_poly), spec/arithmetic.md §exact integer vectors.

- each bulk operation against the exact rational result, on random and adversarial
  inputs (cancellation, huge and tiny magnitudes, zero-width and zero weights; the
  float -> integer conversion on subnormals, ±0 and the extremes);
- every (q, m) the accelerator confirms is confirmed by the mpmath reference with the
  same count, claim by claim, including forged claims (every token claimed good);
- the exact rule's mutants are refused under --arith arb exactly as under mpmath.
"""

from __future__ import annotations

import copy
import itertools
import random
import struct

import pytest

flint = pytest.importorskip("flint")

from checker import arith  # noqa: E402
from checker.errors import Rejected  # noqa: E402
from checker.rules import cubic, cubic_fmpz, exact  # noqa: E402

fmpz_poly = flint.fmpz_poly


def _fast(v):
    """A _Fast with only what the vector helpers use."""
    fast = cubic_fmpz._Fast.__new__(cubic_fmpz._Fast)
    fast.v, fast.ones = v, fmpz_poly([1] * v)
    return fast


def _entries(p, v):
    c = [int(x) for x in p.coeffs()]
    return c + [0] * (v - len(c))


def _adversarial_int(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return 0
    if kind == 1:
        return rng.choice([-1, 1]) * rng.getrandbits(rng.choice([1, 2, 3]))
    if kind == 2:  # huge
        return rng.choice([-1, 1]) * (rng.getrandbits(600) | 1 << 599)
    if kind == 3:  # a power of two (exact boundaries of height_bits)
        return rng.choice([-1, 1]) * (1 << rng.randrange(200))
    if kind == 4:  # one below a power of two
        return rng.choice([-1, 1]) * ((1 << rng.randrange(1, 200)) - 1)
    return rng.randrange(-10**30, 10**30)


@pytest.mark.parametrize("seed", range(40))
def test_mul_encloses_the_exact_product(seed):
    """x_o·w⁺ + σ' >= max over W in [w⁻, w⁺] of W·(x_o + σ), the exact supremum of W·X
    for X <= x_o + σ (W >= 0): random and adversarial entries, shifts and weights, with
    cancellation (x_o = −σ) and zero-width, zero and huge weights."""
    rng = random.Random(seed)
    v = rng.choice([1, 3, 17, 64])
    fast = _fast(v)
    xs = [_adversarial_int(rng) for _ in range(v)]
    sigma = _adversarial_int(rng)
    if seed % 4 == 0:
        xs[rng.randrange(v)] = -sigma  # cancellation to exactly 0
    lo = abs(_adversarial_int(rng))
    hi = lo + (0 if seed % 3 == 0 else abs(_adversarial_int(rng)))
    vec, sigma_out = fast.times(flint.fmpz(lo), flint.fmpz(hi), fmpz_poly(xs), sigma)
    for x, got in zip(xs, _entries(vec, v)):
        assert got + sigma_out >= max(lo * (x + sigma), hi * (x + sigma))
        if lo == hi:
            assert got + sigma_out == hi * (x + sigma)  # a point weight: exact


@pytest.mark.parametrize("seed", range(40))
def test_negative_test_is_exact(seed):
    """holds(limit(Z, bits, e) − x) exactly when x_o + e < 0 at every o outside Z, once
    |x_o + e| + 1 <= 2^bits; with too few bits it may say no, never a wrong yes."""
    rng = random.Random(1000 + seed)
    v = rng.choice([1, 2, 5, 33])
    fast = _fast(v)
    xs = [-abs(_adversarial_int(rng)) - 1 for _ in range(v)]  # all negative
    flips = rng.sample(range(v), rng.randrange(0, min(v, 3) + 1))
    for o in flips:
        xs[o] = rng.choice([0, 1, abs(_adversarial_int(rng))])
    zero_set = set(rng.sample(range(v), rng.randrange(0, v + 1)))
    zeros = fmpz_poly([int(o in zero_set) for o in range(v)])
    excess = rng.choice([0, 0, 1, -1, _adversarial_int(rng)])
    truth = all(x + excess < 0 for o, x in enumerate(xs) if o not in zero_set)
    enough = max(abs(x + excess) + 1 for x in xs).bit_length()
    for bits in (enough, enough + 5, 1, 3):
        for excluded in (zeros, tuple(sorted(zero_set))):  # a 0/1 polynomial, or positions
            got = fast.holds(fast.limit(excluded, bits, excess) - fmpz_poly(xs))
            if bits >= enough:
                assert got == truth
            else:
                assert truth or not got


def test_raw_float_is_mpmath_from_float():
    """exact._raw_float converts a recorded binary64 endpoint exactly as mpmath does
    (so the integer tables are the same integers under every back-end)."""
    from mpmath.libmp import from_float

    rng = random.Random(7)
    special = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308,
               1.7976931348623157e308, -1.7976931348623157e308, 1.0, -3.0, 2.0 ** 60, 0.1]
    bits = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
            for _ in range(20000)]
    for x in special + [x for x in bits if x == x and abs(x) != float("inf")]:
        assert exact._raw_float(x) == from_float(x), x


# -- the accelerator against the mpmath reference, (q, m) by (q, m) ----------------------------

def _rule_line(path):
    """Replay a cubic certificate up to its rule line: (dims, mpmath rows, recorded
    pairs, hints)."""
    import json

    from checker.certificate import CertificateChecker, Limits

    checker = CertificateChecker(Limits(), None, 1)
    for text in path.read_text().splitlines():
        obj = json.loads(text)
        if obj["kind"] == "rule":
            values = {name: checker.values[line] for name, line in obj["inputs"].items()}
            mats = {name: value.rows(arith.MPMATH) for name, value in values.items()}
            recorded = {name: checker._recorded_rows(value) for name, value in values.items()}
            return checker.dims, mats, recorded, obj["hints"]
        checker.feed(text)
    raise AssertionError("no rule line")


def _reference(dims, mats, entries):
    try:
        return cubic.check(dims, mats, {"good": entries}, lambda work: None, 1)[0]
    except Rejected:
        return None


def _models():
    from checker_fixtures import certificate_file, random_model

    return [certificate_file(random_model(seed), "cubic") for seed in (1, 2, 3, 5)]


def _single_claims_against_the_reference(fast, dims, mats):
    """For every single claim [m, q, c, one token] (and every c = 0 flag), and for the claim
    of every token < m at once (forged: mostly false), each also with its tokens joint (the
    (II′) test, c >= 1): every (q, m) that `fast` confirms, the mpmath reference accepts with
    the same count.  Returns (confirmed, refused: true claims that `fast` deferred)."""
    v, k = dims.d_vocab, dims.n_ctx
    confirmed = refused = 0
    for m, q in itertools.product(range(v), repeat=2):
        if q > m:
            continue
        terms = fast.query_terms(q)
        for c in range(0, (k - 1 if q == m else k - 2) + 1):
            masks = [1] if c == 0 else [1 << u for u in range(m)] + ([(1 << m) - 1] if m else [])
            entries = [[m, q, c, mask] for mask in masks] + [
                [m, q, c, mask, mask] for mask in (masks if c else [])]
            for entry in entries:
                got = fast.count_q_m(cubic.parse_hints({"good": [entry]}, v, k), q, m, terms)
                want = _reference(dims, mats, [entry])
                if got is not None:
                    assert want == got, (entry, got, want)
                    confirmed += 1
                elif want is not None:
                    refused += 1
    return confirmed, refused


def _count_every_pair(fast, good, v):
    """[count_q_m of every (q, m), q <= m], in order."""
    out = []
    for q in range(v):
        terms = fast.query_terms(q)
        out.extend(fast.count_q_m(good, q, m, terms) for m in range(q, v))
    return out


@pytest.mark.parametrize("which", range(4))
def test_confirmed_pairs_are_confirmed_by_the_reference(which):
    """For every single claim [m, q, c, one token] (and every c = 0 flag), and for the
    claim of *every* token < m at once (forged: mostly false), each also with its tokens
    joint (the (II′) test): whenever the accelerator confirms the (q, m), the mpmath
    reference accepts the same claim with the same count.  The accelerator must also
    confirm most true single claims (it is not vacuous)."""
    dims, mats, recorded, _ = _rule_line(_models()[which])
    fast = cubic_fmpz.tables(recorded, dims.d_vocab, dims.n_ctx, lambda work: None)
    assert fast is not None
    confirmed, refused = _single_claims_against_the_reference(fast, dims, mats)
    assert confirmed > 0 and refused <= confirmed // 10 + 2, (confirmed, refused)


@pytest.mark.parametrize("cert", ["max3_v32_seed0.cubic.jsonl", "max5_v16_seed0.cubic.jsonl",
                                  "max3_v8_seed0.cubic.jsonl"])
def test_whole_certificate_counts_agree_with_the_accelerator(cert):
    """Shipped cubic certificates (n_ctx 3 and 5): every (q, m) is confirmed by the
    accelerator, and the total is the reference's count (the rule-level count and proof
    length are compared by test_arith's agreement tests)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    dims, mats, recorded, hints = _rule_line(root / "certs" / cert)
    v, k = dims.d_vocab, dims.n_ctx
    good = cubic.parse_hints(hints, v, k)
    counts = _count_every_pair(cubic_fmpz.tables(recorded, v, k, lambda work: None), good, v)
    assert None not in counts
    assert sum(counts) == _reference(dims, mats, hints["good"])


def test_accelerator_skipped_when_its_tables_do_not_fit():
    """Over the memory limit the accelerator is not built (the rule runs without it)
    and what it charged is released."""
    from checker.errors import Malformed

    held = []

    class Budget:
        def __call__(self, work):
            pass

        def hold(self, count, what):
            held.append(count)
            if sum(held) > 100:
                raise Malformed("memory")

    dims, _, recorded, _ = _rule_line(_models()[0])
    assert cubic_fmpz.tables(recorded, dims.d_vocab, dims.n_ctx, Budget()) is None
    assert sum(held) == 0


# -- mutants under --arith arb -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["claim+1", "forged-good-token", "forged-all-max-flag",
                                  "negative-attention-weight"])
def test_exact_mutants_refused_under_arb(name, capsys):
    """The exact rule's mutants (tests/test_exact_mutants.py) are refused under
    --arith arb with the same exit code and message as under mpmath."""
    import test_exact_mutants as tem

    mutate, expected, needle = tem.MUTANTS[name]
    lines = tem.dump(mutate(copy.deepcopy(tem._objs())))
    got = {}
    for back in ("mpmath", "arb"):
        code, out, err = tem.run(capsys, lines, "--arith", back)
        got[back] = (code, err.strip())
        assert code == expected and needle.lower() in err.lower(), (back, code, err)
        assert "VERIFIED" not in out
    assert got["mpmath"] == got["arb"], got


def test_exact_base_same_count_under_both():
    import io
    import json
    from contextlib import redirect_stdout

    import test_exact_mutants as tem
    from checker_fixtures import write_lines

    from checker.cli import main

    path = write_lines(tem.base(), "exact_base_both.jsonl")
    results = {}
    for back in ("mpmath", "arb"):
        out = io.StringIO()
        with redirect_stdout(out):
            code = main([str(path), "--json", "--jobs", "1", "--arith", back])
        result = json.loads(out.getvalue())
        results[back] = (code, result.get("correct"), result.get("work"))
    assert results["mpmath"] == results["arb"] and results["arb"][0] == 0, results


def test_mpmath_path_imports_neither_flint_nor_the_accelerator():
    """The default back-end on cubic and exact certificates: python-flint and
    cubic_fmpz are never imported (the accelerator is arb-only)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = ("import sys; from checker.cli import main; "
            "rc = [main([c, '--jobs', '1']) for c in sys.argv[1:]]; "
            "print(rc, sorted(m for m in sys.modules if m in "
            "('flint', 'checker.rules.cubic_fmpz', 'checker.arith.arb')))")
    certs = [str(root / "certs" / n) for n in ("max3_v8_seed0.cubic.jsonl",
                                               "max5_v16_seed0.exact.jsonl")]
    out = subprocess.run([sys.executable, "-c", code, *certs], capture_output=True, text=True,
                         cwd=root)
    assert out.stdout.strip().splitlines()[-1] == "[0, 0] []", out.stdout + out.stderr


@pytest.mark.parametrize("defer", [False, True])
def test_rule_under_arb_same_count_and_work_as_mpmath(defer, monkeypatch):
    """The whole rule under arb with the recorded pairs (the accelerator on), and with the
    accelerator deferring every (q, m) (the back-end's tables then built lazily): the same
    count and the same proof length as the mpmath reference."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    dims, mats, recorded, hints = _rule_line(root / "certs" / "max5_v16_seed0.cubic.jsonl")
    arb = arith.get("arb")
    import json

    from checker.certificate import CertificateChecker, Limits

    checker = CertificateChecker(Limits(), None, 1)
    for text in (root / "certs" / "max5_v16_seed0.cubic.jsonl").read_text().splitlines():
        obj = json.loads(text)
        if obj["kind"] == "rule":
            arb_mats = {n: checker.values[line].rows(arb) for n, line in obj["inputs"].items()}
            break
        checker.feed(text)
    if defer:
        monkeypatch.setattr(cubic_fmpz._Fast, "count_q_m", lambda *args: None)

    def run(ms, back, rec):
        work = []
        proven, _ = cubic.check(dims, ms, hints, work.append, 1, arith=back, recorded=rec)
        return proven, sum(work)

    assert run(arb_mats, arb, recorded) == run(mats, arith.MPMATH, None)


def test_several_classes_at_once_with_joint_tokens():
    """n_ctx 5 (classes c = 1..3, and 4 when q = m): the same token or token set claimed in
    several classes at once, joint in some, split in others, and the shipped good sets with
    one class's claim widened: whenever the accelerator confirms the (q, m), the mpmath
    reference accepts the same claims with the same count."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    dims, mats, recorded, hints = _rule_line(root / "certs" / "max5_v16_seed0.cubic.jsonl")
    v, k = dims.d_vocab, dims.n_ctx
    fast = cubic_fmpz.tables(recorded, v, k, lambda work: None)
    shipped = {tuple(e[:3]): e for e in hints["good"]}
    rng = random.Random(5)
    confirmed = 0
    for m in range(1, v):
        for q in range(0, m + 1, 3):
            max_c = k - 1 if q == m else k - 2
            u = rng.randrange(m)
            full = (1 << m) - 1
            variants = [
                [[m, q, c, 1 << u, (1 << u) * (c % 2)] for c in range(1, max_c + 1)],
                [[m, q, c, full, full & rng.getrandbits(m)] for c in range(1, max_c + 1)],
                [list(shipped[(m, q, c)]) for c in range(max_c + 1) if (m, q, c) in shipped],
            ]
            widened = [list(e) for e in variants[2]]
            if widened and widened[-1][2] >= 1:
                widened[-1][3] |= 1 << u
                if len(widened[-1]) == 5 and rng.random() < 0.5:
                    widened[-1][4] |= 1 << u
            variants.append(widened)
            for entries in variants:
                if not entries:
                    continue
                good = cubic.parse_hints({"good": entries}, v, k)
                got = fast.count_q_m(good, q, m, fast.query_terms(q))
                if got is not None:
                    assert _reference(dims, mats, entries) == got, entries
                    confirmed += 1
    assert confirmed > 20, confirmed


# -- the coarse tier (cubic_fmpz._Coarse, _Tiered; spec/arithmetic.md §coarse tier) ------------

@pytest.mark.parametrize("seed", range(20))
def test_grid_rounding_is_outward_and_tight(seed):
    """⌊x/2^t⌋·2^t <= x <= ⌈x/2^t⌉·2^t, each within 2^t of x: negative, zero, huge, powers
    of two and their neighbours."""
    rng = random.Random(seed)
    xs = [_adversarial_int(rng) for _ in range(300)]
    for t in (0, 1, 7, 20, 63, 64, 200, rng.randrange(1000)):
        for x, lo, hi in zip(xs, cubic_fmpz._floor_shift(xs, t), cubic_fmpz._ceil_shift(xs, t)):
            assert lo * 2 ** t <= x <= hi * 2 ** t
            assert x - lo * 2 ** t < 2 ** t and hi * 2 ** t - x < 2 ** t


def _random_tables(rng, v, k):
    """Integer tables with adversarial entries (weights >= 0), as exact.IntegerTables."""
    it = exact.IntegerTables.__new__(exact.IntegerTables)
    it.v, it.k = v, k

    def ends(rows, cols, weight=False):
        lo, hi = [], []
        for _ in range(rows):
            a = [abs(_adversarial_int(rng)) if weight else _adversarial_int(rng)
                 for _ in range(cols)]
            b = [x + abs(_adversarial_int(rng)) % 5 for x in a]
            lo.append(a)
            hi.append(b)
        return lo, hi

    it.eu_lo, it.eu_hi = ends(v, v)
    it.evou_lo, it.evou_hi = ends(v, v)
    it.pvou_lo, it.pvou_hi = ends(k, v)
    it.e_lo, it.e_hi = ends(v, v, weight=True)
    it.b_lo, it.b_hi = ends(v, k, weight=True)
    return it


@pytest.mark.parametrize("seed", range(10))
def test_coarse_tables_enclose_the_exact_ones(seed):
    """Every coarse end, times its grid, lies outside the exact end it replaces (lower ends
    down, upper ends up) — so the coarse intervals enclose the recorded ones, hence the
    reals — and weights stay >= 0; exp(EQKE), rounded per (q, m) by _Coarse, likewise."""
    rng = random.Random(seed)
    v, k = 4, 3
    it = _random_tables(rng, v, k)
    c = cubic_fmpz.coarse_tables(it)
    bits = max(abs(x).bit_length() for n in ("eu", "evou", "pvou") for e in ("_lo", "_hi")
               for row in getattr(it, n + e) for x in row)
    grid = 2 ** max(0, bits - cubic_fmpz.COARSE_BITS_X)  # the common grid of the x-tables
    for n in ("eu", "evou", "pvou"):
        for rl, rh, cl, ch in zip(getattr(it, n + "_lo"), getattr(it, n + "_hi"),
                                  getattr(c, n + "_lo"), getattr(c, n + "_hi")):
            assert all(a * grid <= x for a, x in zip(cl, rl))
            assert all(b * grid >= x for b, x in zip(ch, rh))
            assert all(max(abs(a), abs(b)).bit_length() <= cubic_fmpz.COARSE_BITS_X + 1
                       for a, b in zip(cl, ch))
    for rl, rh, cl, ch in zip(it.b_lo, it.b_hi, c.b_lo, c.b_hi):
        grid = 2 ** max(0, max(rh).bit_length() - cubic_fmpz.COARSE_BITS_B)
        assert all(0 <= a and a * grid <= x for a, x in zip(cl, rl))
        assert all(b * grid >= x for b, x in zip(ch, rh))
    fast = cubic_fmpz._Coarse(it, v, k)
    seen = []
    shifts = []  # the grid of row q for (q, m): from the largest entry among tokens <= m
    for row in it.e_hi:
        top, out = 0, []
        for x in row:
            top = max(top, x.bit_length())
            out.append(max(0, top - cubic_fmpz.COARSE_BITS_E))
        shifts.append(out)
    assert fast.e_shift == shifts

    def spy(self, good, q, m, query, e_rows=None):
        seen.append((q, m, query, e_rows))

    original = cubic_fmpz._Fast.count_q_m
    cubic_fmpz._Fast.count_q_m = spy
    try:
        for q in range(v):
            for m in range(q, v):
                fast.count_q_m({}, q, m, (0, 0, {}, c.b_lo[q][k - 1], c.b_hi[q][k - 1]))
    finally:
        cubic_fmpz._Fast.count_q_m = original
    for q, m, query, (e_lo, e_hi) in seen:
        grid = 2 ** shifts[q][m]
        assert len(e_lo) >= m + 1 and len(e_hi) >= m + 1  # the pair reads entries <= m
        e_lo, e_hi = e_lo[:m + 1], e_hi[:m + 1]
        assert all(0 <= a and a * grid <= x for a, x in zip(e_lo, it.e_lo[q]))
        assert all(b * grid >= x for b, x in zip(e_hi, it.e_hi[q]))
        # w = β[q][k−1]·e[q][q] on the pair's grid: its ends enclose the exact product
        assert query[3] == c.b_lo[q][k - 1] * e_lo[q] and query[4] == c.b_hi[q][k - 1] * e_hi[q]


@pytest.mark.parametrize("which", range(4))
def test_coarse_tier_alone_confirms_only_what_the_reference_accepts(which):
    """The coarse tier on its own (no exact tier behind it): single claims and forged
    all-token claims, each also joint; every pair it confirms, the mpmath reference accepts
    with the same count; and it confirms most true single claims (it is not vacuous)."""
    dims, mats, recorded, _ = _rule_line(_models()[which])
    fast = cubic_fmpz.tables(recorded, dims.d_vocab, dims.n_ctx, lambda work: None).coarse
    confirmed, refused = _single_claims_against_the_reference(fast, dims, mats)
    assert confirmed > 0 and refused <= confirmed // 5 + 2, (confirmed, refused)


def test_shipped_v64_certificate_coarse_tier_confirms_almost_every_pair():
    """The shipped Max-of-4 d_vocab 64 certificate: the tiered accelerator confirms every
    (q, m) with the count of the exact tier, and the coarse tier alone nearly all of them."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    dims, mats, recorded, hints = _rule_line(root / "certs" / "max4_v64_seed0.cubic.jsonl")
    v, k = dims.d_vocab, dims.n_ctx
    good = cubic.parse_hints(hints, v, k)
    tiered = cubic_fmpz.tables(recorded, v, k, lambda work: None)
    coarse_only = 0
    for q in range(v):
        terms = tiered.query_terms(q)
        for m in range(q, v):
            both = tiered.count_q_m(good, q, m, terms)
            assert both is not None and both == tiered.fine.count_q_m(good, q, m, terms[1])
            coarse_only += tiered.coarse.count_q_m(good, q, m, terms[0]) is not None
    assert coarse_only >= 0.95 * v * (v + 1) // 2


def test_exact_tier_alone_when_both_tiers_do_not_fit():
    """Between the two sizes the exact tier alone is built (the accelerator of before the
    coarse tier), and the charge held is exactly its size."""
    held = []
    dims, _, recorded, _ = _rule_line(_models()[0])
    v, k = dims.d_vocab, dims.n_ctx
    room = cubic_fmpz.elements(v, k, 1)
    assert room < cubic_fmpz.elements(v, k, 2)

    class Budget:
        def __call__(self, work):
            pass

        def hold(self, count, what):
            held.append(count)
            if sum(held) > room:
                raise Malformed("memory")

    from checker.errors import Malformed

    fast = cubic_fmpz.tables(recorded, v, k, Budget())
    assert type(fast) is cubic_fmpz._Fast and sum(held) == room
    held.clear()
    room = cubic_fmpz.elements(v, k, 2)
    assert type(cubic_fmpz.tables(recorded, v, k, Budget())) is cubic_fmpz._Tiered


# -- issue 22, cubic at native speed: the tables built with map, the exp rows per grid, the lazy
# exact tier, pair_work from entry_work's sums (spec/arithmetic.md §cubic at native speed) ------

def _elementwise_tables(it, v, k):
    """_Fast's integer tables by their defining formulas, entry by entry (the reference for
    the map-built ones)."""
    ev_lo, ev_hi, pv_lo, pv_hi = it.evou_lo, it.evou_hi, it.pvou_lo, it.pvou_hi
    dp_max = [[max(pv_hi[i][o] - pv_lo[i][m] for i in range(k - 1)) for o in range(v)]
              for m in range(v)]
    return {
        "dp_max_int": dp_max,
        "xm_tab": [[dp_max[m][o] + ev_hi[m][o] - ev_lo[m][m] for o in range(v)]
                   for m in range(v)],
        "dpq": [[pv_hi[k - 1][o] - pv_lo[k - 1][m] for o in range(v)] for m in range(v)],
        "self_tab": [[dp_max[m][t] + ev_hi[t][t] - ev_lo[t][m] for t in range(v)]
                     for m in range(v)],
        "dv_rest": [[max(ev_hi[t][o] for o in range(v) if o not in (m, t)) - ev_lo[t][m]
                     for t in range(v)] for m in range(v)],
    }


def _assert_tables_are_elementwise(it, v, k):
    for cls in (cubic_fmpz._Fast, cubic_fmpz._Coarse):
        fast = cls(it, v, k)
        src = it if cls is cubic_fmpz._Fast else cubic_fmpz.coarse_tables(it)
        want = _elementwise_tables(src, v, k)
        for name, rows in want.items():
            got = getattr(fast, name)
            got = [_entries(r, v) if isinstance(r, fmpz_poly) else list(r) for r in got]
            assert got == rows, (cls.__name__, name)
        assert fast.dp_max == [fmpz_poly(r) for r in want["dp_max_int"]]


@pytest.mark.parametrize("seed", range(30))
def test_map_built_tables_are_the_elementwise_ones(seed):
    """The v × v tables of _Fast (and of _Coarse, on its rounded tables), built row by row
    with map, are exactly the integers of their defining formulas: adversarial entries
    (zero, tiny, huge, powers of two and their neighbours: cancellation in every
    difference), and rows of EVOU with ties among their largest entries (dv_rest's
    choice of the largest EVOU⁺[t, o] over o ∉ {m, t})."""
    rng = random.Random(seed)
    v, k = rng.choice([(3, 3), (4, 3), (5, 4), (7, 5), (9, 3)])
    it = _random_tables(rng, v, k)
    if seed % 3 == 0:  # ties: a row's top entries equal, at the diagonal or elsewhere
        for t, row in enumerate(it.evou_hi):
            top = max(row)
            for o in rng.sample(range(v), rng.randrange(1, v)):
                row[o] = top
            if seed % 2:
                row[t] = top + rng.randrange(2)
    _assert_tables_are_elementwise(it, v, k)


@pytest.mark.parametrize("seed", range(20))
def test_coarse_exp_rows_per_grid_are_the_per_pair_roundings(seed):
    """_Coarse.e_rows(q, t), built once per grid: for every pair (q, m) on grid t its entries
    up to m are exactly ⌊e/2^t⌋, ⌈e/2^t⌉ of the exact row (what rounding the row per pair
    gives), hence enclose it outward; rows with growing, flat and huge entries."""
    rng = random.Random(seed)
    v, k = rng.choice([(4, 3), (6, 4), (9, 3)])
    it = _random_tables(rng, v, k)
    for q in range(v):
        kind = rng.randrange(3)
        if kind == 0:  # increasing magnitudes: a new grid at almost every m
            it.e_lo[q] = [rng.getrandbits(8 * (t + 1)) for t in range(v)]
        elif kind == 1:  # flat: one grid
            it.e_lo[q] = [1 << 70] * v
        it.e_hi[q] = [x + rng.randrange(3) for x in it.e_lo[q]]
    fast = cubic_fmpz._Coarse(it, v, k)
    for q in rng.sample(range(v), v):  # any order of the queries (forked workers)
        for m in rng.sample(range(v), v):
            t = fast.e_shift[q][m]
            e_lo, e_hi = fast.e_rows(q, t)
            assert len(e_lo) > m and len(e_hi) > m
            assert e_lo[:m + 1] == cubic_fmpz._floor_shift(it.e_lo[q][:m + 1], t)
            assert e_hi[:m + 1] == cubic_fmpz._ceil_shift(it.e_hi[q][:m + 1], t)
            assert all(a << t <= x <= y <= b << t for a, x, y, b in
                       zip(e_lo, it.e_lo[q], it.e_hi[q], e_hi))


def test_exact_tier_built_only_when_a_pair_falls_back():
    """The tiered accelerator builds the exact tier's tables on the first pair the coarse tier
    defers; its per-query terms, read from the integer tables, are the exact tier's own."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    dims, _, recorded, hints = _rule_line(root / "certs" / "max3_v8_seed0.cubic.jsonl")
    v, k = dims.d_vocab, dims.n_ctx
    good = cubic.parse_hints(hints, v, k)
    tiered = cubic_fmpz.tables(recorded, v, k, lambda work: None)
    assert type(tiered) is cubic_fmpz._Tiered and tiered._fine is None
    assert all(tiered.query_terms(q)[1] == cubic_fmpz._Fast(tiered._it, v, k).query_terms(q)
               for q in range(v))
    counts = _count_every_pair(tiered, good, v)
    assert tiered._fine is None  # every pair confirmed by the coarse tier
    tiered.coarse.count_q_m = lambda *args: None  # now every pair falls back
    assert _count_every_pair(tiered, good, v) == counts
    assert isinstance(tiered._fine, cubic_fmpz._Fast)


@pytest.mark.parametrize("seed", range(10))
def test_pair_work_is_entry_works_share(seed):
    """The operations the accelerator counts for a confirmed pair (10v plus entry_work's
    share for its claims, recorded by entry_work) are pair_work's, for random hints with
    joint tokens, and pairs without claims."""
    rng = random.Random(seed)
    v, k = rng.choice([(5, 3), (8, 4), (6, 5)])
    entries = []
    for m in range(v):
        for q in range(m + 1):
            for c in range((k - 1 if q == m else k - 2) + 1):
                if rng.random() < 0.6:
                    mask = rng.randrange(2) if c == 0 else rng.getrandbits(m) if m else 0
                    joint = 0 if c == 0 else mask & rng.getrandbits(max(m, 1))
                    entries.append([m, q, c, mask, joint])
    good = cubic.parse_hints({"good": entries}, v, k)

    class Tables:  # what entry_work reads: dv_rest's existence (all, d_vocab >= 3)
        dv_rest = [[0] * v for _ in range(v)]

    tables = Tables()
    cubic.entry_work(v, k, good, tables)
    spreadable = cubic._spreadable(tables)
    for m in range(v):
        for q in range(m + 1):
            assert (10 * v + tables.claims_work.get((m, q), 0)
                    == cubic.pair_work(v, k, good, q, m, spreadable[m])), (q, m)


def test_rules_registry_imports_a_rule_when_looked_up():
    """checker.rules.RULES: every rule name is known without importing any rule module; a
    check imports the rules its certificate uses (not family_gap, forward, ...), and no
    multiprocessing with --jobs 1."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = ("import sys; from checker import rules; "
            "names = sorted(rules.RULES); "
            "before = sorted(m for m in sys.modules if m.startswith('checker.rules.')); "
            "assert 'cubic' in rules.RULES and 'nope' not in rules.RULES; "
            "assert len(rules.RULES) == 10; from checker.cli import main; "
            "rc = main([sys.argv[1], '--jobs', '1', '--arith', 'arb']); "
            "after = sorted(m for m in sys.modules if m.startswith('checker.rules.')); "
            "print(rc, names, before, after, 'multiprocessing' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code,
                          str(root / "certs" / "max3_v8_seed0.cubic.jsonl")],
                         capture_output=True, text=True, cwd=root)
    last = out.stdout.strip().splitlines()[-1]
    assert last == ("0 ['brute_force', 'cubic', 'cubic_mix', 'exact', 'family_gap', "
                    "'forward_brute_force', "
                    "'overwhelm_family', 'overwhelm_free', 'overwhelm_perm', 'subcubic_gap'] [] "
                    "['checker.rules.cubic', 'checker.rules.cubic_fmpz', 'checker.rules.exact', "
                    "'checker.rules.pool'] False"), out.stdout + out.stderr
    from checker import rules

    assert rules.RULES["cubic"] is cubic and dict(rules.RULES)["exact"] is exact
    with pytest.raises(KeyError):
        rules.RULES["nope"]


@pytest.mark.parametrize("back", ["mpmath", "arb"])
def test_lazy_rows_are_value_rows(back):
    """certificate.LazyRows (rule cubic's inputs, LAZY_INPUTS): each row, built when first
    read, has the elements Value.rows builds (points and intervals, ±0, subnormals, huge and
    tiny ends, an interval from a negative to a positive end); rows Value.rows already built
    are reused; negative indices, iteration and len as a list's; no slicing of the matrix."""
    from checker.certificate import LazyRows, Value

    ar = arith.get(back)
    rng = random.Random(7)
    ends = [(0.0, 0.0), (-0.0, 0.0), (5e-324, 1e-323), (-1e300, 1e300), (1.0, 1.0),
            (-3.5, -3.25), (2.0 ** -1074, 2.0 ** 1000), (0.1, 0.2)]
    pairs = [rng.choice(ends) for _ in range(5 * 7)]
    value = Value(("t",), tuple(a for a, _ in pairs), tuple(b for _, b in pairs), (5, 7))
    lazy = LazyRows(value, ar)
    want = Value(value.term, value.lo, value.hi, value.shape).rows(ar)

    def same(x, y):  # the same element: equal endpoints (mpmath), equal midpoint and radius
        if back == "arb":
            return x.mid() == y.mid() and x.rad() == y.rad()
        return x.a == y.a and x.b == y.b

    assert len(lazy) == 5 and lazy._rows == [None] * 5
    assert all(same(x, y) for x, y in zip(lazy[-1], want[-1])) and lazy._rows[4] is not None
    assert [len(r) for r in lazy] == [7] * 5
    assert all(same(x, y) for r, s in zip(lazy, want) for x, y in zip(r, s))
    built = value.rows(ar)
    assert LazyRows(value, ar)[2] is built[2]  # reused, not rebuilt
    with pytest.raises(TypeError):
        lazy[1:3]
    with pytest.raises(IndexError):
        lazy[5]
