"""Strategy family-gap's faster generation (tenth session, benchmarks/RESULTS.md "Tenth
session: family_gap generation speed") gives the same certificate, bit for bit:

- `max_ratio` (Dinkelbach, direct gathers) equals `max_ratio_reference` (the loop before);
- `_ClassQuery.margins` (one Dinkelbach run per head for the box, pre and diff functionals,
  `joint_bounds`; directions on the lower side only; SharedParts cached per model, output
  and query) equals the generic chain it replaced (`_Query.margins` with `_ClassQuery`'s
  rounding and both-sided directions, on `max_ratio_reference`): the same bound and hints;
- min_size applied during the search (`block_classes`, `box_leaves`) equals the search
  without it followed by the filter `certify` applied;
- jobs=2 (forked workers) equals jobs=1, and the checker accepts the certificate.

Small trained models of tests/family_gap_models.py (d_vocab 5-7) and a d_vocab 12 one
(`_v12`: 6 s to train, 4 s to search; its boxes include one-token bands whose x is
bisected, which the smaller models lack)."""

from __future__ import annotations

import functools
import itertools
import json

import numpy as np
import pytest
from family_gap_models import model, replay

from checker.rules import family_gap as rule
from generator.certify.strategies import family_gap as strategy
from generator.certify.strategies import overwhelm_family as family
from generator.certify.trace import Trace
from generator.train import TrainConfig, train


def max_ratio_reference(w: np.ndarray, y: np.ndarray, iters: int = 100):
    """Dinkelbach: for W (P, A) and Y (P, A, F), the max over strings (one column
    per position) of Σ_i W y / Σ_i W, per functional F; returns (λ (F,), argmax (P, F)).
    The plain loop, every row and functional each round (the generator's before the tenth
    session): `max_ratio` must give the same bits faster."""
    pick = np.zeros((w.shape[0], y.shape[2]), dtype=int)
    rows = np.arange(w.shape[0])[:, None]
    lam = None
    for _ in range(iters):
        wp = w[rows, pick]  # (P, F)
        yp = np.take_along_axis(y, pick[:, None, :], axis=1)[:, 0]  # (P, F)
        new = (wp * yp).sum(0) / wp.sum(0)
        if lam is not None and np.all(new <= lam):
            break
        lam = new if lam is None else np.maximum(lam, new)
        pick = (w[:, :, None] * (y - lam)).argmax(axis=1)
    return lam, pick

NAMES = ["ln_mlp_rope_2heads_k4", "lnpre_parallel_mlp_k3", "mlp_no_norm_k3", "ln_3heads_k2"]


@functools.cache
def _v12():
    return train(TrainConfig(d_vocab=12, n_ctx=4, d_model=16, d_head=8, steps=300,
                             layernorm="LN", d_mlp=16, rope=True, seed=0),
                 progress=False).weights()


def _model(name):
    return _v12() if name == "v12" else model(name)


def _random_problem(rng):
    """W (P, A) > 0 and Y (P, A, F) with the cases Dinkelbach's loop must keep: rows of
    one repeated option, exact ties, a NaN, an infinite weight, one functional."""
    p, a, f = int(rng.integers(1, 5)), int(rng.integers(1, 30)), int(rng.integers(1, 40))
    w = np.exp(rng.normal(size=(p, a)) * rng.uniform(0, 5))
    y = rng.normal(size=(p, a, f))
    for i in range(p):
        if rng.random() < 0.4:
            w[i], y[i] = w[i, 0], y[i, 0]
    if rng.random() < 0.2:
        y = np.round(y)
    if rng.random() < 0.1:
        y[rng.integers(p), rng.integers(a), rng.integers(f)] = np.nan
    if rng.random() < 0.1:
        w[rng.integers(p), rng.integers(a)] = np.inf
    return w, y


def test_max_ratio_is_the_reference_bit_for_bit():
    rng = np.random.default_rng(7)
    with np.errstate(all="ignore"):
        for _ in range(1500):
            w, y = _random_problem(rng)
            lam, pick = family.max_ratio(w, y)
            ref_lam, ref_pick = max_ratio_reference(w, y)
            assert lam.tobytes() == ref_lam.tobytes()
            assert np.array_equal(pick, ref_pick)
            # a joint run of two sets of functionals is each run alone (joint_bounds)
            y2 = rng.normal(size=y.shape[:2] + (3,))
            both, _ = family.max_ratio(w, np.concatenate([y, y2], axis=2))
            assert both[:y.shape[2]].tobytes() == ref_lam.tobytes()
            assert both[y.shape[2]:].tobytes() == max_ratio_reference(w, y2)[0].tobytes()


class _Reference(strategy._ClassQuery):
    """The chain as it was: `_Query.margins` (every Lemma R family in its own run, both
    sides of each direction) with `_ClassQuery`'s binary32 rounding."""

    margins = family._Query.margins

    def direction(self, which, e, extra_lo=0.0):
        if self.f32:
            e = np.asarray(e, dtype=np.float64).astype(np.float32).astype(np.float64)
        return family._Query.direction(self, which, e, extra_lo)


def _sample_slots(dims, rng, n):
    """n random (q, m, token sets): classes, merged classes and boxes."""
    v, k = dims.d_vocab, dims.n_ctx
    keys = [key for key in strategy.class_keys(v, k) if key[1] >= 1]
    for _ in range(n):
        q, m, fixed = keys[rng.integers(len(keys))]
        g = int(rng.integers(1, m + 1))
        kind = rng.integers(3)
        if kind == 1 and fixed:
            fixed = fixed[0]  # the merged class M(q, m, i0, g)
        elif kind == 2 and g >= 2 and len(fixed) < k - 1:
            sets = rule.position_sets(dims, m, fixed, g)
            j = next(i for i, (a, b, _) in enumerate(sets) if a <= b)
            lo = int(rng.integers(m - g + 1, m))
            yield q, m, rule.slots(dims, q, m, strategy.make_box(sets, j, lo, m - 1, m - g), 0)
            continue
        yield q, m, rule.slots(dims, q, m, fixed, g)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("hints", ["f64", "f32"])
def test_class_query_is_the_generic_chain_bit_for_bit(name, hints, monkeypatch):
    tab = strategy.Tables(model(name))
    rng = np.random.default_rng(11)
    for q, m, slots in _sample_slots(tab.dims, rng, 40):
        with np.errstate(all="ignore"):
            fast = strategy._ClassQuery(tab, q, m, slots, hints)
            bound = fast.margins()
            with monkeypatch.context() as patch:
                patch.setattr(family, "max_ratio", max_ratio_reference)
                ref = _Reference(tab, q, m, slots, hints)
                ref_bound = ref.margins()
        assert bound.tobytes() == ref_bound.tobytes(), (q, m, slots)
        assert fast.hint.keys() == ref.hint.keys()
        for key in fast.hint:
            assert fast.hint[key].tobytes() == ref.hint[key].tobytes(), (key, q, m, slots)


def _same(a: list, b: list):
    """Two lists of (q, m, fixed, g, hint arrays) equal, hints bit for bit."""
    assert [c[:4] for c in a] == [c[:4] for c in b]
    for x, y in zip(a, b):
        assert all(x[4][k].tobytes() == y[4][k].tobytes() for k in rule.HINT_FIELDS)


@pytest.mark.parametrize("name", NAMES[:3] + ["v12"])
@pytest.mark.parametrize("merge", ["off", "lossless", "always"])
def test_min_size_in_the_search_is_the_filter_after_it(name, merge):
    w = _model(name)
    d = w.dims
    every = strategy.find_classes(w, merge=merge, hints="f32")
    tab = strategy.Tables(w)
    boxes = strategy.find_boxes(tab, every, hints="f32")
    sizes = sorted({rule.class_size(d, c[1], c[2], c[3]) for c in every + boxes})
    assert len(sizes) >= 3  # the thresholds below split the classes
    for min_size in sorted({sizes[1], sizes[len(sizes) // 2], sizes[-3], sizes[-1],
                            sizes[-1] + 1}):
        kept = [c for c in every if rule.class_size(d, c[1], c[2], c[3]) >= min_size]
        _same(strategy.find_classes(w, merge=merge, hints="f32", min_size=min_size), kept)
        _same(strategy.find_boxes(tab, kept, hints="f32", min_size=min_size),
              [b for b in strategy.find_boxes(tab, kept, hints="f32")
               if rule.class_size(d, b[1], b[2], 0) >= min_size])


def _lines(w, text: str) -> list:
    trace = Trace(w, float_shadow=False)
    options = strategy.Options.parse(text)
    by, claim, _ = strategy.certify(trace, options=options)
    return trace.lines(options.name(), by, claim, {}, {})


@pytest.mark.parametrize("name", NAMES[:2])
def test_jobs_give_the_same_certificate_and_the_checker_accepts_it(name):
    text = "family-gap:merge=always,confirm=off,boxes=on,min_size=4,hints=f32"
    one = _lines(model(name), text)
    two = _lines(model(name), text + ",jobs=2")
    assert one == two
    assert json.loads(one[0])["strategy"] == text  # jobs is not part of the name
    claim = int(json.loads(one[0])["theorem"].rsplit("correct >= ", 1)[1])
    assert claim > 0 and replay(one, "arb").facts.correct == claim


def test_jobs_option_round_trips_and_refuses_bad_values():
    o = strategy.Options.parse("family-gap:merge=always,jobs=3")
    assert o.jobs == 3 and o.name() == "family-gap:merge=always"
    for bad in ("jobs=0", "jobs=-1", "jobs=x", "jobs=", "jobs=1.5", "jobs=1000"):
        with pytest.raises(ValueError):
            strategy.Options.parse("family-gap:" + bad)


def test_in_order_keeps_the_order_with_workers():
    tasks = list(itertools.product(range(5), range(7)))
    assert list(strategy.in_order(None, _square, tasks, 2)) == list(map(_square, tasks))


def _square(task):
    return task[0] * task[1] ** 2


@pytest.mark.parametrize("name", ["ln_mlp_rope_2heads_k4", "mlp_no_norm_k3", "v12"])
def test_has_class_is_whether_the_bisection_finds_a_gap(name):
    tab = strategy.Tables(_model(name))
    d = tab.dims
    answers = []
    for q, m, fixed in strategy.class_keys(d.d_vocab, d.n_ctx):
        for f in [fixed] + ([rule.first(fixed)] if fixed else []):
            found = strategy.smallest_gap(tab, q, m, f, "f32") is not None
            assert strategy.has_class(tab, q, m, f, "f32") == found, (q, m, f)
            answers.append(found)
    assert any(answers) and not all(answers)  # both answers occur: the test can fail
