"""The bulk Arb forward pass (checker/rules/forward_arb.py, issue 22).

Property tests for every bulk operation it uses: the enclosure contains the exact
rational result (Fractions), on random and adversarial inputs (cancellation, huge and
tiny magnitudes, subnormals): arb_mat products of interval matrices, the RoPE rotation,
LayerNorm/RMSNorm rows (exact comparisons against the square root), ReLU, the broadcast
bias add, the smooth activations (against a 400-bit oracle).  Then verdict agreement
between the back-ends: every random model family, the shipped LN+MLP+RoPE model's
certificate, the shipped overwhelm_family certificates, and mutants with a raised claim
(rejected by both).
"""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

import pytest

flint = pytest.importorskip("flint")

from checker.arith import MPMATH, get  # noqa: E402
from checker.certificate import CertificateChecker, Limits  # noqa: E402
from checker.cli import check_file  # noqa: E402
from checker.elementary import endpoints  # noqa: E402
from checker.errors import Malformed, Rejected  # noqa: E402
from checker.modelspec import Dims, Family  # noqa: E402
from checker.rules import forward, forward_arb  # noqa: E402

ARB = get("arb")
ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "generator" / "models"

ADVERSARIAL = [0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, -1e-300, 1e300,
               -1e300, 1.0, -1.0, 1 + 2 ** -52, -(1 + 2 ** -52), 3.0, 2 ** 60, -(2 ** 60) + 1,
               0.1, -0.1, 1e-10]


def exact(x) -> Fraction:
    """The exact value of an exact arb point (or a float)."""
    if isinstance(x, float):
        return Fraction(x)
    man, exp = x.man_exp()
    man, exp = int(man), int(exp)
    return Fraction(man) * Fraction(2) ** exp


def ends(ball) -> tuple[Fraction, Fraction]:
    assert ball.is_finite()
    return exact(ball.lower()), exact(ball.upper())


def contains(ball, value: Fraction) -> bool:
    lo, hi = ends(ball)
    return lo <= value <= hi


def interval_ball(lo: float, hi: float):
    return ARB.interval(lo, hi) if lo != hi else ARB.point(lo)


def random_interval(rng, pool) -> tuple[float, float]:
    a, b = rng.choice(pool), rng.choice(pool)
    return (a, b) if a <= b else (b, a)


def sample(lo: float, hi: float, rng) -> Fraction:
    """A rational point of [lo, hi]: an end or a random convex combination."""
    t = rng.choice([Fraction(0), Fraction(1), Fraction(rng.randrange(1, 1000), 1000)])
    return Fraction(lo) + t * (Fraction(hi) - Fraction(lo))


def pools(rng):
    randoms = [rng.gauss(0, 1) * 10 ** rng.randrange(-5, 5) for _ in range(30)]
    return [randoms, ADVERSARIAL, randoms + ADVERSARIAL]


# -- arb_mat products of interval matrices ---------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_matrix_product_encloses_every_exact_product(seed):
    rng = random.Random(seed)
    for pool in pools(rng):
        r, n, c = rng.randrange(1, 5), rng.randrange(1, 6), rng.randrange(1, 5)
        a = [[random_interval(rng, pool) for _ in range(n)] for _ in range(r)]
        b = [[random_interval(rng, pool) for _ in range(c)] for _ in range(n)]
        prod = (ARB.arb_mat([[interval_ball(*e) for e in row] for row in a]) *
                ARB.arb_mat([[interval_ball(*e) for e in row] for row in b]))
        for _ in range(3):  # exact products of points chosen in the intervals
            pa = [[sample(*e, rng) for e in row] for row in a]
            pb = [[sample(*e, rng) for e in row] for row in b]
            for i in range(r):
                for j in range(c):
                    value = sum((pa[i][t] * pb[t][j] for t in range(n)), Fraction(0))
                    assert contains(prod[i, j], value), (seed, i, j)


def test_cancellation_in_a_product_is_enclosed_exactly():
    big, tiny = 2.0 ** 70, 5e-324
    a = ARB.arb_mat([[ARB.point(big), ARB.point(1.0), ARB.point(-big)]])
    b = ARB.arb_mat([[ARB.point(big)], [ARB.point(tiny)], [ARB.point(big)]])
    assert contains((a * b)[0, 0], Fraction(tiny))


# -- the RoPE rotation ------------------------------------------------------

def _bulk_model_stub(h, rotary_dim, cos_row, sin_row):
    model = forward_arb._BulkModel.__new__(forward_arb._BulkModel)
    model.dims = Dims(2, 1, 4, h)
    model.f = Family(positional="rotary", n_ctx=1, rotary_dim=rotary_dim, rotary_base=10000)
    model.m = {"ROPE_COS": [cos_row], "ROPE_SIN": [sin_row]}
    model.arb, model.mat, model.zero = ARB.arb, ARB.arb_mat, ARB.zero
    return model


@pytest.mark.parametrize("seed", range(6))
def test_rotation_encloses_rotate_half(seed):
    rng = random.Random(seed)
    h, rotary_dim = rng.choice([(4, 4), (6, 4), (8, 2)])
    half = rotary_dim // 2
    cos_i = [random_interval(rng, [rng.uniform(-1, 1) for _ in range(4)]) for _ in range(half)]
    sin_i = [random_interval(rng, [rng.uniform(-1, 1) for _ in range(4)]) for _ in range(half)]
    model = _bulk_model_stub(h, rotary_dim, [interval_ball(*e) for e in cos_i],
                             [interval_ball(*e) for e in sin_i])
    xs = [random_interval(rng, pools(rng)[2]) for _ in range(h)]
    model.tick = lambda: None
    out = model.rotate(ARB.arb_mat([[interval_ball(*e) for e in xs]]), 0).entries()
    for _ in range(4):
        x = [sample(*e, rng) for e in xs]
        cs, sn = [sample(*e, rng) for e in cos_i], [sample(*e, rng) for e in sin_i]
        want = list(x)
        for j in range(half):
            want[j] = x[j] * cs[j] - x[j + half] * sn[j]
            want[j + half] = x[j + half] * cs[j] + x[j] * sn[j]
        assert all(contains(o, w) for o, w in zip(out, want))


# -- LayerNorm / RMSNorm rows -------------------------------------------------------------

def _ge(c: Fraction, q: Fraction, bound: Fraction) -> bool:
    """Exactly: c / sqrt(q) >= bound (q > 0)."""
    if c >= 0:
        return bound <= 0 or c * c >= bound * bound * q
    return bound < 0 and c * c <= bound * bound * q


def _le(c: Fraction, q: Fraction, bound: Fraction) -> bool:
    """Exactly: c / sqrt(q) <= bound."""
    return _ge(-c, q, -bound)


NORM_POOL = [0.0, 1.0, -1.0, 1e-30, -1e-30, 5e-324, 1e30, -1e30, 0.5, 3.25, -7.0, 1 + 2 ** -52]


@pytest.mark.parametrize("centre", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_norm_row_encloses_the_exact_normalisation(centre, seed):
    rng = random.Random(seed)
    d = rng.randrange(2, 7)
    pool = NORM_POOL if seed % 2 else [rng.gauss(0, 3) for _ in range(10)]
    xs = [random_interval(rng, pool) for _ in range(d)]
    eps = rng.choice([1e-5, 1e-12, 0.25])
    w = [rng.choice([0.5, -2.0, 1.0, 3e-3]) for _ in range(d)]
    b = [rng.choice([0.0, 1.0, -0.25]) for _ in range(d)]
    model = forward_arb._BulkModel.__new__(forward_arb._BulkModel)
    model.zero = ARB.zero
    balls = [interval_ball(*e) for e in xs]
    plain = model.norm_row(balls, centre, ARB.arb(eps), None, None)
    affine = model.norm_row(balls, centre, ARB.arb(eps), [ARB.point(v) for v in w],
                            [ARB.point(v) for v in b])
    for _ in range(4):
        x = [sample(*e, rng) for e in xs]
        c = [t - sum(x) / d for t in x] if centre else x
        q = sum(t * t for t in c) / d + Fraction(eps)
        for i in range(d):
            lo, hi = ends(plain[i])
            assert _ge(c[i], q, lo) and _le(c[i], q, hi)
            lo, hi = ends(affine[i])  # y·w + b in [lo, hi]  <=>  y in a rational interval
            wi, bi = Fraction(w[i]), Fraction(b[i])
            y_lo, y_hi = sorted(((lo - bi) / wi, (hi - bi) / wi))
            assert _ge(c[i], q, y_lo) and _le(c[i], q, y_hi)


# -- ReLU and the broadcast add -------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_relu_and_bias_add_enclose_exactly(seed):
    rng = random.Random(seed)
    pool = pools(rng)[2]
    xs = [random_interval(rng, pool) for _ in range(12)]
    model = forward_arb._BulkModel.__new__(forward_arb._BulkModel)
    model.zero, model.f = ARB.zero, Family(d_mlp=1)
    out = model.activate([interval_ball(*e) for e in xs])
    bias = [random_interval(rng, pool) for _ in range(3)]
    added = forward_arb._add_row([interval_ball(*e) for e in xs],
                                 [interval_ball(*e) for e in bias])
    for _ in range(4):
        x = [sample(*e, rng) for e in xs]
        bb = [sample(*e, rng) for e in bias]
        assert all(contains(o, max(t, Fraction(0))) for o, t in zip(out, x))
        assert all(o >= ARB.zero for o in out)
        assert all(contains(o, t + bb[i % 3]) for i, (o, t) in enumerate(zip(added, x)))


# -- verdict agreement ------------------------------------------------------------------------

def _rule_inputs(lines, ar):
    checker = CertificateChecker(arith=ar)
    for line in lines:
        checker.feed(line)
    checker.finish()
    rule = next(json.loads(x) for x in lines if '"kind":"rule"' in x)
    mats = {n: checker.values[i].rows(ar) for n, i in rule["inputs"].items()}
    return checker.dims, mats, rule


@pytest.mark.parametrize("name", sorted(__import__("test_families").FAMILIES))
def test_back_ends_certify_the_same_sequences_on_every_family(name):
    from test_families import certificate, random_family_weights

    lines = certificate(random_family_weights(name))
    dims, mats, rule = _rule_inputs(lines, MPMATH)
    reference = forward.check(dims, mats, None, lambda w: None, arith=MPMATH)[0]
    dims, mats, _ = _rule_inputs(lines, ARB)
    bulk = forward.check(dims, mats, None, lambda w: None, arith=ARB)[0]
    assert bulk == reference == rule["claim"]
    mutant = _raised_lines(lines)  # claim + 1 (< d_vocab^n_ctx here): rejected by both
    for ar in (MPMATH, ARB):
        with pytest.raises(Rejected, match=f"proves {reference} correct"):
            _rule_inputs(mutant, ar)


def _raised_lines(lines: list[str]) -> list[str]:
    """The certificate with its rule's claim and the header theorem's count raised by one."""
    out = []
    for line in lines:
        obj = json.loads(line)
        if obj["kind"] == "rule":
            obj["claim"] += 1
        if obj["kind"] == "header":
            head, count = obj["theorem"].rsplit("correct >= ", 1)
            number, *rest = count.split(" ", 1)
            obj["theorem"] = head + f"correct >= {int(number) + 1}" + (" " + rest[0] if rest
                                                                       else "")
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


def test_bulk_logits_overlap_the_reference_logits():
    """Both enclose the same real logits, so each pair of enclosures intersects; and the
    bulk chunking (here forced to 7 sequences) does not change the count."""
    from test_families import certificate, random_family_weights

    lines = certificate(random_family_weights("ln_mlp_rope_2heads"))
    dims, mats_mp, rule = _rule_inputs(lines, MPMATH)
    _, mats_arb, _ = _rule_inputs(lines, ARB)
    model = forward._Model(dims, mats_mp, lambda w: None)
    bulk = forward_arb._BulkModel(dims, mats_arb, ARB, lambda work: None)
    seqs = [(0, 1, 2), (4, 4, 4), (3, 0, 1), (2, 2, 0)]
    logits = bulk.mat(len(seqs), dims.d_model, bulk.norm_rows("ln_final", _resid(bulk, seqs),
                                                             dims.d_model))
    got = forward_arb._rows(forward_arb._add_row((logits * bulk.mat(mats_arb["W_U"])).entries(),
                                                 mats_arb["b_U"][0]), dims.d_vocab)
    for tokens, row in zip(seqs, got):
        for ref, ball in zip(model.logits(tokens), row):
            lo, hi = ends(ball)
            ref_lo, ref_hi = endpoints(ref)
            assert lo <= ref_hi and ref_lo <= hi
    original = forward_arb.CHUNK_ELEMENTS
    try:
        forward_arb.CHUNK_ELEMENTS = 7 * dims.d_vocab
        assert forward_arb.certified_count(dims, mats_arb, lambda w: None, ARB) == rule["claim"]
    finally:
        forward_arb.CHUNK_ELEMENTS = original


def _resid(bulk, seqs):
    """The residual stream after attention and MLP of certified_in, for the given sequences."""
    d, m, n = bulk.dims.d_model, bulk.m, len(seqs)
    x = [e for t in seqs for e in bulk.resid0[-1][t[-1] * d:(t[-1] + 1) * d]]
    z = bulk.attention_z(seqs)
    attn = (bulk.mat(n, len(z) // n, z) * bulk.w_o[0]).entries()
    resid = forward_arb._add_row([a + b for a, b in zip(x, attn)], m["b_O"][0])
    mlp = bulk.mlp(x if bulk.f.parallel else resid, n)
    return [a + b for a, b in zip(resid, mlp)]


@pytest.fixture(scope="module")
def shipped_forward_cert(tmp_path_factory):
    """gen-cert's forward-brute-force certificate of the shipped LN+MLP+RoPE model."""
    from generator.cli import main as gen_cert

    out = tmp_path_factory.mktemp("fw") / "max3_v8_ln_mlp_rope.jsonl"
    assert gen_cert([str(MODELS / "max3_v8_ln_mlp_rope_seed0.pt"), "--strategy",
                     "forward-brute-force", "-o", str(out), "-q"]) == 0
    return out


SHIPPED_FORWARD = [  # (certificate in certs/, or None: gen-cert's, made by the fixture; model)
    (None, "max3_v8_ln_mlp_rope_seed0.pt"),
    ("max3_v8_gelu_ln_seed0.forward.jsonl", "max3_v8_gelu_ln_seed0.pt"),
    ("max3_v8_rms_silu_rope_seed0.forward.jsonl", "max3_v8_rms_silu_rope_seed0.pt"),
]


@pytest.mark.parametrize("cert, model", SHIPPED_FORWARD)
def test_shipped_forward_certificates_agree_and_a_raised_claim_fails_in_both(
        cert, model, shipped_forward_cert, tmp_path):
    path = shipped_forward_cert if cert is None else ROOT / "certs" / cert
    model = str(MODELS / model)
    reports = {name: check_file(str(path), Limits(), model, arith=get(name))
               for name in ("mpmath", "arb")}
    assert reports["mpmath"].facts == reports["arb"].facts
    assert reports["mpmath"].facts.correct == 512
    assert reports["mpmath"].work == reports["arb"].work  # the same proof length
    # 512 of 512: a raised claim is out of range (exit 2) in both; a mutant whose rule
    # proves less than its claim is the random families' test above
    mutant = tmp_path / "raised.jsonl"
    mutant.write_text("\n".join(_raised_lines(path.read_text().splitlines())) + "\n")
    for name in ("mpmath", "arb"):
        with pytest.raises((Malformed, Rejected)):
            check_file(str(mutant), Limits(), model, arith=get(name))


OVERWHELM_FAMILY = [
    ("maxany_v6_k6_ln_mlp_rope_seed0.overwhelm-5-free3.jsonl",
     "maxany_v6_k6_ln_mlp_rope_seed0.pt"),
    ("flipflop_k32_ln_mlp_rope_seed0.overwhelm-w0-free22.jsonl",
     "flipflop_k32_ln_mlp_rope_seed0.pt"),
    ("maxany_v16_k16_ln_mlp_rope_seed0.overwhelm-15x3-free10.jsonl",
     "maxany_v16_k16_ln_mlp_rope_seed0.pt"),
]


@pytest.mark.parametrize("cert, model", OVERWHELM_FAMILY)
def test_shipped_overwhelm_family_certificates_agree(cert, model):
    facts = [check_file(str(ROOT / "certs" / cert), Limits(), str(MODELS / model),
                        arith=get(name)).facts for name in ("mpmath", "arb")]
    assert facts[0] == facts[1]


# -- smooth activations on narrow balls (composition of Arb functions) ---------------------

def _reference_activation(name: str, t: Fraction):
    """f(t) at 400 bits with mpmath's point functions (not interval: an oracle whose error,
    ~2^-390 relative, is far below the 128-bit balls tested against it)."""
    import mpmath

    with mpmath.workprec(400):
        x = mpmath.mpf(t.numerator) / t.denominator
        if name == "gelu":
            return x * mpmath.erfc(-x / mpmath.sqrt(2)) / 2
        if name == "silu":
            return x / (1 + mpmath.exp(-x))
        k = mpmath.sqrt(2 / mpmath.pi) if name == "gelu_new" else \
            mpmath.mpf(7978845608) / 10 ** 10
        u = 2 * k * (x + mpmath.mpf(44715) / 10 ** 6 * x ** 3)
        return x / (1 + mpmath.exp(-u))


def _mpf_fraction(value) -> Fraction:
    sign, man, exp, _ = value._mpf_  # mpf.man_exp drops the sign
    return (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)


SMOOTH_POINTS = [0.0, 5e-324, -5e-324, 1e-300, -1e-300, 1e-8, -1e-8, 0.5, -0.5, -1.0, -2.0,
                 -7.99, -8.0, -8.01, 3.0, -40.0, 40.0, 1e3, -1e3, 12345.678, -0.75]


@pytest.mark.parametrize("name", ["gelu", "gelu_new", "gelu_fast", "silu"])
def test_smooth_activation_of_a_narrow_ball_contains_the_value(name):
    model = forward_arb._BulkModel.__new__(forward_arb._BulkModel)
    model.zero, model.arb, model.f = ARB.zero, ARB.arb, Family(d_mlp=1, act_fn=name)
    model.tick, model.charge = (lambda: None), (lambda work: None)
    rng = random.Random(name)
    points = SMOOTH_POINTS + [rng.gauss(0, 4) for _ in range(30)]
    balls = [ARB.point(p) for p in points]
    narrow = [ARB.interval(p, p + abs(p) * 2 ** -50 + 2 ** -60) for p in points]
    for p, got, wide in zip(points, model.activate(balls), model.activate(narrow)):
        value = _mpf_fraction(_reference_activation(name, Fraction(p)))
        lo, hi = ends(got)
        assert lo <= value <= hi, (name, p)
        assert hi - lo <= abs(value) * Fraction(1, 2 ** 100) + Fraction(1, 2 ** 200), (name, p)
        assert contains(wide, value), (name, p)
    # a wide ball goes to the reference's piecewise enclosure, and contains every sample
    wide_in = [(-3.0, 2.0), (-9.0, -7.0), (0.25, 0.5)]
    for (a, b), got in zip(wide_in, model.activate([ARB.interval(a, b) for a, b in wide_in])):
        for t in (a, b, (a + b) / 2):
            assert contains(got, _mpf_fraction(_reference_activation(name, Fraction(t))))


# --- several layers and gated MLPs in bulk (issues 21/22) ---------------------------------------

def _charged(run):
    """The work a run charges (sum of every charge) and its result."""
    work = []
    result = run(work.append)
    return sum(work), result


@pytest.mark.parametrize("name", sorted(__import__("test_depth").FAMILIES))
@pytest.mark.parametrize("rows", [1, 5, None])  # sequences per chunk (None: the default)
def test_bulk_deep_and_gated_families_same_count_same_work_and_sound(name, rows):
    """Several-layer and gated families run in bulk: the count and the charged work equal
    the mpmath path's (also with chunks of 1 and 5 sequences: prefixes shared across chunk
    boundaries), and every sequence the bulk pass certifies is correct by test_depth's
    independent 200-bit multi-layer reference."""
    import itertools

    import mpmath
    from test_depth import certificate, random_weights, reference_logits_all

    fw = random_weights(name)
    lines = certificate(fw)
    dims, mats_mp, rule = _rule_inputs(lines, MPMATH)
    _, mats_arb, _ = _rule_inputs(lines, ARB)
    mp_work, mp_count = _charged(lambda c: forward.check(dims, mats_mp, None, c)[0])
    original = forward_arb.CHUNK_ELEMENTS
    try:
        if rows is not None:
            f = dims.family
            width = max(dims.d_model, f.d_mlp, dims.d_vocab, f.n_heads * dims.d_head)
            forward_arb.CHUNK_ELEMENTS = rows * width * (dims.n_ctx if f.n_layers > 1 else 1)
            assert forward_arb.chunk_rows(dims) == rows
        arb_work, arb_count = _charged(
            lambda c: forward.check(dims, mats_arb, None, c, arith=ARB)[0])
    finally:
        forward_arb.CHUNK_ELEMENTS = original
    assert arb_count == mp_count == rule["claim"]
    assert arb_work == mp_work
    if rows is not None:
        return
    seqs = list(itertools.product(range(dims.d_vocab), repeat=dims.n_ctx))
    model = forward_arb._BulkModel(dims, mats_arb, ARB, lambda work: None)
    certified = [t for t, row in zip(seqs, model.logit_rows(seqs))
                 if all(row[max(t)] - x > ARB.zero for o, x in enumerate(row) if o != max(t))]
    assert len(certified) == mp_count
    with mpmath.workprec(200):
        for t in certified:
            logits = reference_logits_all(fw, t)[-1]
            assert all(logits[max(t)] > x for o, x in enumerate(logits) if o != max(t)), t
            # the enclosures contain the reference logits
            for ball, ref in zip(model.logit_rows([t])[0], logits):
                lo, hi = ends(ball)
                sign, man, exp, _ = ref._mpf_
                value = Fraction(-int(man) if sign else int(man)) * Fraction(2) ** int(exp)
                assert lo <= value <= hi, (name, t)


@pytest.mark.parametrize("family_name", ["two_layers_ln_gelu_rotary_2heads",
                                         "two_layers_gated_gelu_new_parallel_lnpre",
                                         "gated_silu_rms_rotary"])
def test_bulk_task_on_deep_and_gated_families_same_count_same_work(family_name):
    """A scored-every-position task (prefixes of every length, in the walk's order) in bulk:
    the same (certified pairs, prefixes evaluated) and the same charged work as the mpmath
    path, with small chunks (prefixes of one length split over several chunks)."""
    from test_depth import certificate, random_weights

    from checker.tasks import make_task

    fw = random_weights(family_name)
    lines = certificate(fw)
    dims, mats_mp, _ = _rule_inputs(lines, MPMATH)
    _, mats_arb, _ = _rule_inputs(lines, ARB)
    task = make_task("cyclic", {"n": dims.d_vocab}, dims.d_vocab, dims.n_ctx)
    mp = _charged(lambda c: forward.check(dims, mats_mp, None, c, task=task))
    original = forward_arb.CHUNK_ELEMENTS
    try:
        forward_arb.CHUNK_ELEMENTS = 3 * dims.n_ctx * max(
            dims.d_model, dims.family.d_mlp, dims.d_vocab, dims.family.n_heads * dims.d_head)
        arb = _charged(lambda c: forward.check(dims, mats_arb, None, c, arith=ARB, task=task))
    finally:
        forward_arb.CHUNK_ELEMENTS = original
    assert arb == mp
    assert 0 < mp[1][0] < task.pairs()


# -- an indeterminate ball at a smooth activation (fuzz_deep s2026_16_L3_tie) ----------------

@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_new", "gelu_fast"])
def test_an_indeterminate_ball_activates_to_the_whole_line(act):
    """A NaN or infinite ball (Arb: any real) gives the whole line, which contains f(t) for
    every t and certifies nothing; before, the check stopped with an internal error."""
    model = forward_arb._BulkModel.__new__(forward_arb._BulkModel)
    model.zero, model.arb, model.f = ARB.zero, ARB.arb, Family(d_mlp=3, act_fn=act)
    model.charge = lambda work: None
    nan, wide = ARB.arb("nan"), ARB.arb(0, float("inf"))
    out = model.activate([nan, wide, ARB.point(0.5)])
    for y in out[:2]:
        assert not y.is_finite() and not (y > 0) and not (y < 0)
        assert y.contains(ARB.arb(10.0 ** 30)) and y.contains(ARB.arb(-0.25))
    assert out[2].is_finite()


def test_the_fuzz_model_with_huge_scores_gets_one_verdict_from_both_backends(tmp_path):
    """The three-layer SiLU model of benchmarks/fuzz_deep.py (seed 2026, model 16): its
    softmax of huge scores made an Arb ball NaN, which stopped the Arb check with an internal
    error while mpmath verified; now both give the same count."""
    import sys

    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import fuzz_deep

    from generator.cli import generate
    from generator.modelfile import save_model

    fw, _ = fuzz_deep.make_model(np.random.default_rng([2026, 16, 21]))
    path = tmp_path / "m.pt"
    save_model(path, fw, None)
    lines, _ = generate(str(path), "forward-brute-force", float_shadow=False)
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    counts = [check_file(str(cert), Limits(), str(path), 1, arith).facts.correct
              for arith in (MPMATH, ARB)]
    assert counts[0] == counts[1]
