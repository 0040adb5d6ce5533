"""Rule family_gap under `--arith arb`: the class proofs on overwhelm_family's fast path
(overwhelm_family_arb.py; spec/rules.md §family_gap, spec/arithmetic.md §Rule family_gap
under `--arith arb`).

Everything family_gap.py states and checks (the classes, their signatures and sizes, the
hints, the residue, the cost) is unchanged; only the arithmetic of a class proof changes,
as overwhelm_family_arb changes it for one query position:

- the tables: overwhelm_family_arb.BatchedTables (exact products, RoPE on the exact integers,
  queries and keys kept exact; each enclosure inside the reference's);
- the attention weights per query token (ArbQueryWeights): each score q·key_j(i, u) the
  exact interval dot product of the exact integers rounded outward once (as exact_scores),
  then the reference's ·scale, shift (the mid of the score at (k−1, q)) and exp_interval,
  each when first read;
- Lemma R (ArbHead): decided exactly on integers;
- the per-query products of a class (BatchedTables.matmul): mp.matmul's values.

The residue's forward passes read the batched tables (forward._Model.logits on them).
"""

from __future__ import annotations

from mpmath import iv
from mpmath.libmp.libmpi import mpi_mul, mpi_sub

from ..errors import Malformed
from ..numbers import exp_interval
from . import family_gap as gap
from .overwhelm_family_arb import (
    ArbHead,
    BatchedTables,
    IntMatrix,
    _Converter,
    _dyadic_or_none,
    _raws,
    int_matmul,
    raw_dot,
)

__all__ = ["BatchedTables", "ArbQueryWeights", "ClassQueries"]


class ArbQueryWeights:
    """family_gap.QueryWeights (w_j(i, u) = exp(score_j(i, u) − c_j), the query token q at
    p = k−1, each computed when first read) with the exact scores of `score_function`."""

    def __init__(self, tables, q: int):
        p = tables.dims.n_ctx - 1
        self.w, self.cache = [], {}
        for j in range(tables.f.n_heads):
            score = score_function(tables, j, p, q)
            shift = iv.mpf(iv.make_mpf(score(p, q)).mid)._mpi_
            self.w.append(_ArbWeights(score, shift))


class _ArbWeights(dict):
    """(i, u) -> exp_interval(score(i, u) − shift) on first access; `dyadic(key)`: its ends as
    exact (n, e) pairs (None if one is not finite), kept (ArbHead reads them per class)."""

    def __init__(self, score, shift):
        super().__init__()
        self.score, self.shift, self.ends = score, shift, {}

    def __missing__(self, key):
        raw = mpi_sub(self.score(*key), self.shift, iv.prec)
        value = self[key] = exp_interval(iv.make_mpf(raw))
        return value

    def dyadic(self, key):
        hit = self.ends.get(key)
        if hit is None and key not in self.ends:
            hit = self.ends[key] = _dyadic_or_none(self[key])
        return hit


def score_function(tables, j: int, p: int, q: int):
    """(i, u) -> the raw enclosure of q·key_j(i, u)·(1/√h) with q the query token at p: the
    exact interval dot product of the model's exact query and key integers (mp.int_matmul),
    rounded outward once, times the scale by one mpi_mul (the reference: family.dot, rounded
    at every step, then ·scale).  A non-finite entry: the reference's dot (raw_dot)."""
    model, prec = tables.model, iv.prec
    scale = model.scale._mpi_
    q_form = model.q_ints[j][p]
    try:
        q_int = (([q_form[0][q]], [q_form[1][q]], q_form[2]) if isinstance(q_form, tuple)
                 else IntMatrix([q_form[q]]).rows())
    except Malformed:
        q_int = None
    forms = {}

    def key_form(i):
        if i not in forms:
            k_form = model.key_ints[j][i]
            forms[i] = k_form if isinstance(k_form, tuple) else tables.integers(k_form).rows()
        return forms[i]

    def score(i: int, u: int):
        tables.tick()
        try:
            if q_int is None:
                raise Malformed("not finite")
            lo, hi, exponent = key_form(i)
            dot = int_matmul(q_int, ([lo[u]], [hi[u]], exponent), lambda: None)[0][0]._mpi_
        except Malformed:  # a non-finite entry (mp._dyadic): the reference's operations
            forms.pop(i, None)
            dot = raw_dot(_raws(model.q[j][p][q]), _raws(model.key[j][i][u]), prec)
        return mpi_mul(dot, scale, prec)

    return score


class ArbClassQuery(gap.ClassQuery):
    """family_gap.ClassQuery with overwhelm_family_arb's heads (Lemma R on integers) and the
    logit constants once per output."""

    def __init__(self, tables, fun, weights, q, m, slot_sets, hint, conv: _Converter):
        super().__init__(tables, fun, weights, q, m, slot_sets, hint)
        conv.charge = tables.model.charge
        self.conv = conv
        self.heads = [ArbHead(head, conv) for head in self.heads]

    def logit_const(self, t: int):
        """AtQuery.logit_const(t), once per (output, t) (it depends on nothing else)."""
        key = ("logit", self.claim.output, t)
        if key not in self.conv.consts:
            from ..certificate import hold

            hold(self.conv.charge, 1, "logit constants")
            self.conv.consts[key] = super().logit_const(t)
        return self.conv.consts[key]


class ClassQueries:
    """A constructor (tables, fun, weights, q, m, slot_sets, hint) -> ArbClassQuery, with one
    converter (Lemma R's integer column caches, the logit constants) per output's
    functionals: a new `fun` (family_gap.check builds one per maximum m) starts a new one,
    so the caches of the previous output are released."""

    def __init__(self):
        self.fun, self.conv = None, None

    def __call__(self, tables, fun, weights, q, m, slot_sets, hint):
        if fun is not self.fun:
            self.fun, self.conv = fun, _Converter()
        return ArbClassQuery(tables, fun, weights, q, m, slot_sets, hint, self.conv)
