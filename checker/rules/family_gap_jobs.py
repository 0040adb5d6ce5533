"""Rule family_gap's class proofs, in one process or in `--jobs` forked workers.

Each class proof is independent of the others (spec/rules.md §family_gap: a class's verdict
reads only the model's tables, its query token's attention weights, its output's functionals
and its own hint), so splitting them between processes changes neither a verdict nor the
count: the theorem is the sum of the proven classes' sizes and the certified residue, each
computed by the same code whichever process runs it.  What the split must also keep:

- the work charged: all of it is charged from the class list before any proof (`cost`);
  anything a proof charges besides is metered (`Meter`) and returned by its worker, and the
  parent charges it, so the proof length is the same for every `--jobs`;
- the memory limit: each worker builds its own query weights, output functionals and caches,
  held by the caller for every worker beyond the first before the workers start;
- failing closed: a worker's Rejected or Malformed ends the check (pool.map_in_order), a
  worker that dies fails it (BrokenProcessPool); the error named is that of the first class
  not proved in (m, q, S) order, as in one process;
- the note: the smallest slack over the classes, the first in the order (m, q, n) on ties,
  as the one-process loop finds it (`combine`).
"""

from __future__ import annotations

from mpmath import iv

from . import pool
from .family_gap_classes import class_size, slots

# Below this many maxima the workers' start (~0.3 s) and their duplicated per-query weights
# cost more than they save (speed only: the verdict and the count are the same)
FORK_MIN_OUTPUTS = 8


class Meter:
    """A rule's `charge` that also sums the work it passes on (`spent`), so a worker can
    return what its proofs charged; `hold` passes on to the budget's memory limit."""

    def __init__(self, charge):
        self.charge, self.spent = charge, 0

    def __call__(self, work: int) -> None:
        self.spent += work
        self.charge(work)

    def tick(self) -> None:
        """The clock alone."""
        self.charge(0)

    def hold(self, count: int, what: str) -> None:
        limit = getattr(self.charge, "hold", None)
        if limit is not None:
            limit(count, what)


class Prover:
    """The class proofs of one process: the functionals once per maximum m, every query
    token's weights kept (at most v: charged in table_elements), the (q, m)-dependent cache
    entries released at the next m."""

    def __init__(self, dims, tables, shared, classes, make_weights, make_query, tick):
        self.dims, self.tables, self.shared, self.classes = dims, tables, shared, classes
        self.make_weights, self.make_query, self.tick = make_weights, make_query, tick
        self.weights, self.fun, self.fun_m = {}, None, None

    def blocks(self) -> list[list[int]]:
        """The class indices in the order (m, q, n), one list per maximum m."""
        c = self.classes
        out, last = [], None
        for n in sorted(range(len(c)), key=lambda n: (c[n][1], c[n][0], n)):
            if c[n][1] != last:
                out.append([])
                last = c[n][1]
            out[-1].append(n)
        return out

    def prove(self, block: list[int]) -> tuple:
        """(the summed sizes of the classes `block`, (slack, n, logit, raw σ) of the smallest
        slack, the first on ties, or None); any class not proved raises Rejected."""
        proven, worst = 0, None
        for n in block:
            q, m, fixed, g, hint = self.classes[n]
            self.tick()  # the clock
            if m != self.fun_m:
                for w in self.weights.values():
                    w.cache.pop(("base_g", self.fun_m), None)
                self.fun, self.fun_m = self.shared.for_output(m), m
            if q not in self.weights:
                self.weights[q] = self.make_weights(self.tables, q)
            query = self.make_query(self.tables, self.fun, self.weights[q], q, m,
                                    slots(self.dims, q, m, fixed, g), hint)
            query.check()
            proven += class_size(self.dims, m, fixed, g)
            if query.slack is not None and (worst is None or query.slack < worst[0]):
                worst = (query.slack, n, query.worst, query.sigma._mpi_)  # raw: it pickles
        return proven, worst


def workers(jobs: int, n_blocks: int) -> int:
    """How many processes prove the classes: 1 unless forking pays (FORK_MIN_OUTPUTS)."""
    if jobs <= 1 or n_blocks < FORK_MIN_OUTPUTS or not pool.can_fork():
        return 1
    return min(jobs, n_blocks)


_SHARED: dict = {}  # the parent's prover and residue count, inherited by forked workers


def run_in_workers(n: int, prover: Prover, blocks: list, count_residue, meter: Meter) -> tuple:
    """([prover.prove(b) for b in blocks], count_residue()), computed in n forked workers,
    the residue first, then the blocks in order of m; the work they charged is charged here.
    The results are read in that order, so the first class not proved in (m, q, S) order
    names the error, as in one process."""
    items = ["residue"] + list(range(len(blocks)))
    _SHARED.update(prover=prover, blocks=blocks, residue=count_residue, meter=meter)
    try:
        done = pool.map_in_order(n, _run_shared, items, tick=meter.tick)
    finally:
        _SHARED.clear()
    results = [None] * len(blocks)
    certified = 0
    for item, (value, spent) in zip(items, done):
        meter(spent)  # what the worker's proofs charged (0 when all of it came first)
        if item == "residue":
            certified = value
        else:
            results[item] = value
    return results, certified


def _run_shared(item) -> tuple:
    """In a worker: (the item's value, the work it charged)."""
    meter = _SHARED["meter"]
    before = meter.spent
    if item == "residue":
        value = _SHARED["residue"]()
    else:
        value = _SHARED["prover"].prove(_SHARED["blocks"][item])
    return value, meter.spent - before


def combine(results: list) -> tuple:
    """(Σ proven, the first smallest slack in block order with σ as an interval, or None)."""
    proven, worst = 0, None
    for count, w in results:
        proven += count
        if w is not None and (worst is None or w[0] < worst[0]):
            worst = w
    if worst is not None:
        worst = worst[:3] + (iv.make_mpf(worst[3]),)
    return proven, worst
