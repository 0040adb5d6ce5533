"""Red-team helpers: random and crafted small models and an independent
256-bit forward pass (mpmath, written from spec/theorem.md §2 and
spec/overwhelm.md §1; it shares no code with the checker or the generator)."""

from __future__ import annotations

import itertools

import mpmath
import numpy as np
from mpmath import mp

from checker.modelspec import Dims
from checker.statement import Overwhelm
from generator.model import ModelWeights

PRECISION = 256  # bits of the reference forward pass
SCALES = (1e-30, 1e-3, 0.1, 1.0, 3.0, 10.0)  # per-matrix scales of random models
NAMES = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_U", "b_U")


def random_model(rng, v: int, k: int, d: int) -> ModelWeights:
    """Random weights, each matrix at a random scale; sometimes zero biases,
    strong positional embeddings or two equal token rows (exact key ties)."""
    shapes = dict(W_E=(v, d), W_pos=(k, d), W_Q=(d, d), W_K=(d, d), W_V=(d, d), W_O=(d, d),
                  b_Q=(d,), b_K=(d,), b_V=(d,), b_O=(d,), W_U=(d, v), b_U=(v,))
    arrs = {}
    for name, shape in shapes.items():
        if name.startswith("b") and rng.random() < 0.4:
            arrs[name] = np.zeros(shape, np.float32)
        else:
            arrs[name] = (rng.standard_normal(shape) * rng.choice(SCALES)).astype(np.float32)
    if rng.random() < 0.3:
        arrs["W_pos"] = (arrs["W_pos"] * 30).astype(np.float32)
    if rng.random() < 0.2:
        arrs["W_E"][v - 1] = arrs["W_E"][0]
    return ModelWeights(Dims(v, k, d, d), **arrs)


def with_arrays(w: ModelWeights, **changes) -> ModelWeights:
    arrs = {n: np.array(getattr(w, n)) for n in NAMES}
    arrs.update(changes)
    return ModelWeights(w.dims, **arrs)


def _m(a):
    a = np.asarray(a, dtype=np.float64)
    return mpmath.matrix(a.tolist()) if a.ndim == 2 else mpmath.matrix([a.tolist()])


def logits(w: ModelWeights, seq) -> list:
    """The logits at the LAST position of seq (causal: it attends to all of seq)."""
    with mp.workprec(PRECISION):
        p = len(seq) - 1
        E, P = _m(w.W_E), _m(w.W_pos)
        WQ, WK, WV, WO, WU = (_m(getattr(w, n)) for n in ("W_Q", "W_K", "W_V", "W_O", "W_U"))
        bQ, bK, bV, bO, bU = (_m(getattr(w, n)) for n in ("b_Q", "b_K", "b_V", "b_O", "b_U"))
        xs = [E[seq[i], :] + P[i, :] for i in range(p + 1)]
        query = xs[p] * WQ + bQ
        scores = [(query * (x * WK + bK).T)[0, 0] / mp.sqrt(w.dims.d_head) for x in xs]
        top = max(scores)
        ex = [mp.exp(s - top) for s in scores]
        total = mp.fsum(ex)
        mixed = mpmath.matrix(1, WV.cols)
        for e, x in zip(ex, xs):
            mixed += (e / total) * (x * WV + bV)
        out = (xs[p] + mixed * WO + bO) * WU + bU
        return [out[0, j] for j in range(out.cols)]


def margin(w: ModelWeights, seq, o: int):
    """ℓ_o − max_{m≠o} ℓ_m at the last position of seq (256 bits)."""
    L = logits(w, seq)
    return L[o] - max(L[j] for j in range(len(L)) if j != o)


def free_strings(c: Overwhelm, v: int):
    if c.free_perm is not None:
        yield from sorted(set(itertools.permutations(c.free_perm)))
        return
    alphabet = c.over if c.over is not None else range(v)
    for n in c.lengths():
        yield from itertools.product(alphabet, repeat=n)


def overwhelm_margin(w: ModelWeights, c: Overwhelm):
    """(smallest margin of c.output over every admissible free string, that string)."""
    worst = None
    for t in free_strings(c, w.dims.d_vocab):
        mg = margin(w, c.prefix + tuple(t) + (c.query,), c.output)
        if worst is None or mg < worst[0]:
            worst = (mg, t)
    return worst


def random_claim(rng, v: int, k: int) -> Overwhelm:
    """A random overwhelm claim that fits n_ctx (output −1: the generator picks it)."""
    s = int(rng.integers(0, k))
    prefix = tuple(int(x) for x in rng.integers(0, v, s))
    q, n = int(rng.integers(0, v)), int(rng.integers(0, k - s))
    if rng.random() < 0.3:
        return Overwhelm(prefix, q, -1,
                         free_perm=tuple(sorted(int(x) for x in rng.integers(0, v, n))))
    over = None
    if rng.random() < 0.5:
        over = tuple(sorted(int(x) for x in rng.choice(v, int(rng.integers(1, v + 1)),
                                                       replace=False)))
    return Overwhelm(prefix, q, -1, free_cmp=rng.choice(["<=", "=="]), free=n, over=over)
