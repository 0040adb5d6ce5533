"""Strategy family-gap: Max-of-K accuracy for the families of rule overwhelm_family
(LayerNorm / LNPre, MLP, RoPE, several heads, parallel residual) by gap classes,
decided by the checker's rule family_gap (checker/rules/family_gap.py,
spec/rules.md §family_gap).

For every query token q, maximum m >= q and set S of non-query positions holding m
(S ≠ ∅ unless q = m), the class with gap g is every sequence with m on S, q at the
query and tokens in [0, m − g] elsewhere.  Per class the generator finds the
smallest g whose float64 mirror of overwhelm_family's bound (strategy
overwhelm_family's `_Query`, with per-position token sets) proves the output m, by
bisection (the bound only improves as the alphabet shrinks), and records that
mirror's λ hints.  Classes proved at no gap are left out.  With `confirm` (the
default) every class is then checked by the checker's own code on the recorded
inputs and only confirmed classes are claimed, so the certificate verifies.

Options (typed, round-trip to names: `gen-cert --strategy family-gap --list`,
`--strategy family-gap:merge=always`):
  merge   "off" (classes per S; the default), "lossless" (a merged class
          M(q, m, i0, g), Lemma G5, replaces its block's classes when it proves and
          holds at least as many sequences) or "always" (whenever it proves).
  boxes   "off" (the default) or "on": box classes (Lemma B) for the sequences a class
          with gap g >= 2 loses: one free position j of the class holds a token of the
          band [m−g+1, m−1] (split in halves until it proves, down to one token), the
          other free positions [0, x] (x <= m−g, the largest that proves, by bisection),
          the class's {m} positions kept; every box is disjoint from the others and from
          the classes (spec/rules.md §box classes).  The boxes that hold the most
          sequences per unit of checker work are claimed within the budget, before the
          residue.
  hints   "f64" (the default: every hint value a binary64) or "f32": every hint value
          rounded to binary32 in the direction that keeps it valid (a lower bound down, an
          upper bound up, a direction to nearest, before the bounds that use it are
          computed), inside the float64 search itself, so every class claimed is proved
          with the hints written; they are written as binary32 (half the bytes; spec/
          format.md §hint encodings).
  jobs    N worker processes for the class and box searches (default 1); how the
          certificate is found, not what it is: the same bytes, and not in the name.
  sample  N (default 1: every class): only the classes and boxes of a seeded random
          1/N of the (q, m) pairs (`sampled_pairs`), and no residue.  A valid certificate
          of a smaller claim, for measuring the proof length at sizes where the whole
          search does not fit (benchmarks/family_growth.py --sampled): every class and box
          belongs to one (q, m) and is found from it alone, so the sampled certificate's
          classes are exactly the full certificate's classes of those pairs (tested).

Speed (benchmarks/RESULTS.md "Tenth session"): every change to the search keeps each
float operation on each element, so the certificate is byte-identical: one Dinkelbach run
for the box, pre and diff functionals (`_ClassQuery.joint_bounds`), arrays shared per
model, output and query (`SharedParts`), min_size applied inside the search
(`block_classes`, `box_leaves`), the merged class first under merge=always
(`merged_first`, `has_class`), freed memory kept in the heap (`keep_heap`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Literal, get_args

import numpy as np

from checker.rules import family_gap as rule
from checker.rules import forward

from ...progress import progress_bar
from . import NotApplicable, option_fields
from .overwhelm import TOL
from .overwhelm_family import (
    F32_SLACKS,
    Tables,
    _ln_scale,
    _Query,
    head_arrays,
    max_ratio,
    slack,
)

NAME = "family-gap"
# Refused beyond this much checker work (the default of the option `budget`), estimated before
# the search (every class at gap 1); the residue is then limited to the work left under it.
# Max-of-4 at d_vocab 16, d_model 32, d_mlp 128: ~6·10^7 (seconds under --arith arb, minutes
# in mpmath); at d_vocab 64 ~2.6·10^9 (minutes under arb, hours in mpmath): refused unless
# `family-gap:budget=3000000000` or so.
MAX_CHECKER_WORK = 2 * 10**8
F32_EXTRA_GAPS = 2  # float32: gaps tried beyond the real smallest one when no slack proves it
RESIDUE_LIMIT = 20_000  # residue sequences (forward passes in the checker) at most

Merge = Literal["off", "lossless", "always"]
Hints = Literal["f64", "f32"]


@dataclass(frozen=True)
class Options:
    """The strategy's options; `name()` and `parse()` round-trip."""

    merge: Merge = "off"
    budget: int = MAX_CHECKER_WORK  # the checker work (proof length) the search may plan for
    # "on": keep only the classes the checker's own (mpmath) code confirms — minutes at
    # d_vocab 16, hours at 64; "off": claim every class the float64 search proves (a class the
    # checker then refuses fails the whole certificate)
    confirm: Literal["on", "off"] = "on"
    boxes: Literal["off", "on"] = "off"  # box classes for the sequences the gaps lose
    # classes and boxes holding fewer sequences are not claimed (each costs the checker a
    # class proof, ~10 ms under arb at d_vocab 64, whatever its size): 0 keeps every one
    min_size: int = 0
    hints: Hints = "f64"  # the hint values' precision (and encoding): binary64 or binary32
    # worker processes for the class and box searches: how the certificate is found, not
    # what it is (the same bytes for every value), so not part of name()
    jobs: int = 1
    # 1/sample of the (q, m) pairs (`sampled_pairs`), no residue: a work-growth measurement
    sample: int = 1

    def name(self) -> str:
        parts = ([f"merge={self.merge}"] if self.merge != "off" else []) + \
            ([f"budget={self.budget}"] if self.budget != MAX_CHECKER_WORK else []) + \
            ([f"confirm={self.confirm}"] if self.confirm != "on" else []) + \
            ([f"boxes={self.boxes}"] if self.boxes != "off" else []) + \
            ([f"min_size={self.min_size}"] if self.min_size else []) + \
            ([f"hints={self.hints}"] if self.hints != "f64" else []) + \
            ([f"sample={self.sample}"] if self.sample != 1 else [])
        return NAME + (":" + ",".join(parts) if parts else "")

    @staticmethod
    def parse(text: str) -> Options:
        """'family-gap' or 'family-gap:merge=MODE,budget=N' -> Options (ValueError if bad;
        N a positive integer, also written like 3e9)."""
        fields = option_fields(text, NAME, ("merge", "budget", "confirm", "boxes", "min_size",
                                                   "hints", "jobs", "sample"),
                               f"merge={'|'.join(get_args(Merge))}, budget=N, confirm=on|off, "
                               f"boxes=off|on, min_size=N, hints={'|'.join(get_args(Hints))}, "
                               "jobs=N, sample=N")
        sample = fields.get("sample", "1")
        if not (sample.isdigit() and 1 <= int(sample) <= 10**6):
            raise ValueError(f"bad option sample={sample!r} in {text!r}: 1 (every (q, m) "
                             "pair) or N, a random 1/N of them")
        jobs = fields.get("jobs", "1")
        if not (jobs.isdigit() and 1 <= int(jobs) <= 256):
            raise ValueError(f"bad option jobs={jobs!r} in {text!r}: 1 to 256 worker processes")
        confirm = fields.get("confirm", "on")
        if confirm not in ("on", "off"):
            raise ValueError(f"bad option confirm={confirm!r} in {text!r}: on or off")
        boxes = fields.get("boxes", "off")
        if boxes not in ("on", "off"):
            raise ValueError(f"bad option boxes={boxes!r} in {text!r}: on or off")
        hints = fields.get("hints", Options.hints)
        if hints not in get_args(Hints):
            raise ValueError(f"bad option hints={hints!r} in {text!r}: "
                             f"{' or '.join(get_args(Hints))}")
        merge = fields.get("merge", Options.merge)
        if merge not in get_args(Merge):
            raise ValueError(f"bad option merge={merge!r} in {text!r}; choose from "
                             f"{[o.name() for o in grid()]}")
        budget = fields.get("budget", str(MAX_CHECKER_WORK))
        try:
            number = float(budget)
        except ValueError:
            number = 0.0
        if not (number.is_integer() and 1 <= number <= 1e15):
            raise ValueError(f"bad option budget={budget!r} in {text!r}: a positive integer "
                             "number of checker operations (e.g. 3e9)")
        min_size = fields.get("min_size", "0")
        if not (min_size.isdigit() and int(min_size) < 10**15):
            raise ValueError(f"bad option min_size={min_size!r} in {text!r}: a number of "
                             "sequences (0: keep every class)")
        return Options(merge=merge, budget=int(number), confirm=confirm, boxes=boxes,
                       min_size=int(min_size), hints=hints, jobs=int(jobs),
                       sample=int(sample))


def grid() -> list[Options]:
    """Every named option combination (`--list`)."""
    return [Options(merge) for merge in get_args(Merge)]


def round_f32(x: np.ndarray, up: bool) -> np.ndarray:
    """x (float64) rounded to binary32 upward (up) or downward: the nearest binary32, moved
    one step when it lies on the wrong side of x (overflow gives ±inf, NaN stays NaN: the
    caller's finiteness test then refuses the class)."""
    with np.errstate(all="ignore"):
        f = np.asarray(x, dtype=np.float64).astype(np.float32)
        back = f.astype(np.float64)
        step = np.nextafter(f, np.float32(np.inf if up else -np.inf))
        return np.where(back < x if up else back > x, step, f).astype(np.float64)


class SharedParts:
    """The arrays of `_ClassQuery.margins` that depend on the model only, on the output m
    only or on the query q only, computed once per Tables (cached on it) instead of once
    per class attempt: the same expressions on the same inputs, so the same bits (a
    generator-side cache; nothing here is claimed).

    Pre: tab a Tables of a one-layer family model.  Memory: O(d·d_mlp) plus O(d·v) per
    output m and O(d) per query q seen."""

    def __init__(self, tab: Tables):
        f, w, d = tab.f, tab.w, tab.dims.d_model
        self.tab = tab
        self.eye = np.eye(d)
        self.serial_mlp = bool(f.d_mlp) and not f.parallel
        if f.d_mlp:
            w_in = w["blocks.0.mlp.W_in"]
            self.w_in = w_in
            self.pre = w_in * w["blocks.0.ln2.w"][:, None] if f.normalization == "LN" else w_in
            self.const = w["blocks.0.mlp.b_in"] + (w["blocks.0.ln2.b"] @ w_in
                                                   if f.normalization == "LN" else 0)
            self.w_out_c = tab.centred(w["blocks.0.mlp.W_out"])
            self.b_out_c = tab.centred(w["blocks.0.mlp.b_out"])
        self.w_f = w["ln_final.w"] if f.normalization == "LN" else np.ones(d)
        self.b_f = w["ln_final.b"] if f.normalization == "LN" else np.zeros(d)
        self._outputs, self._queries = {}, {}

    def output(self, o: int) -> SimpleNamespace:
        """d_u = W_U − W_U[:, o], g = w_f·d_u and the products of g the chain uses."""
        if o not in self._outputs:
            w = self.tab.w
            u = w["unembed.W_U"]
            d_u = u - u[:, o:o + 1]  # (d, v)
            g = self.w_f[:, None] * d_u
            parts = SimpleNamespace(d_u=d_u, g=g, b_f_d_u=self.b_f @ d_u)
            if self.tab.f.d_mlp:
                parts.w_out_g, parts.b_out_g = self.w_out_c @ g, self.b_out_c @ g
            self._outputs[o] = parts
        return self._outputs[o]

    def query(self, q: int):
        """(x_p, base): the query's residual at the last position and its centred sum with
        b_O (_Query's x_p and base)."""
        if q not in self._queries:
            tab = self.tab
            x_p = tab.resid0[tab.dims.n_ctx - 1, q]
            self._queries[q] = (x_p, tab.centred(x_p + tab.w["blocks.0.attn.b_O"]))
        return self._queries[q]


def shared_parts(tab: Tables) -> SharedParts:
    """The SharedParts of tab (made on first use, then kept on it)."""
    if getattr(tab, "_family_gap_shared", None) is None:
        tab._family_gap_shared = SharedParts(tab)
    return tab._family_gap_shared


class _ClassQuery(_Query):
    """strategy overwhelm_family's mirror at p = k−1 with the class's token sets; with
    hints == "f32" every Lemma R bound rounded outward to binary32 (lower bounds down,
    upper bounds up) and every direction e to the nearest binary32, before the rest of the
    chain uses them, so the float bound is the one the written hints give."""

    def __init__(self, tab: Tables, q: int, m: int, slot_sets: list, hints: str = "f64"):
        self.f32 = hints == "f32"
        p = tab.dims.n_ctx - 1
        self.tab, self.p, self.f, self.w = tab, p, tab.f, tab.w
        self.claim = SimpleNamespace(prefix=(), query=q, output=m, free_perm=None, over=None)
        self.slots = slot_sets
        self.shared = shared_parts(tab)
        self.x_p, self.base = self.shared.query(q)
        self.heads = [head_arrays(tab, j, p, slot_sets) for j in range(tab.f.n_heads)]
        self.hint = {name: np.zeros(shape) for name, shape in rule.family.hint_shapes(
            tab.dims).items()}
        self.candidates, self.free_rows = [], []

    def bounds(self, a: np.ndarray, upper_only: bool = False, keep=None, keys=(None, None)):
        lo, hi, per = super().bounds(a, upper_only, keep, keys)
        if not self.f32:
            return lo, hi, per
        per = np.stack([round_f32(per[..., 0], up=False), round_f32(per[..., 1], up=True)],
                       axis=-1)
        lo, hi = self.base @ a, self.base @ a  # the sums again, from the rounded bounds
        for j in range(len(self.heads)):
            lo, hi = lo + per[j, :, 0], hi + per[j, :, 1]
        return lo, hi, per

    def direction(self, which: int, e: np.ndarray, extra_lo: float = 0.0):
        """The lower bound of r_c·e + extra_lo (hints dir[which], dir_lo[:, which]), as
        _Query.direction gives it, computing only the lower side of Lemma R (the upper one
        is never used: neither written nor summed into the value returned)."""
        if self.f32:  # any direction is valid: dir_lo is then bounded for the rounded one
            with np.errstate(all="ignore"):
                e = np.asarray(e, dtype=np.float64).astype(np.float32).astype(np.float64)
        (lo, _, per), = self.joint_bounds([(e[:, None], "lower")])
        self.hint["dir"][which] = e
        self.hint["dir_lo"][:, which] = per[:, 0, 0]
        return float(lo[0]) + extra_lo

    def joint_bounds(self, sets: list) -> list:
        """[(lo, hi, per)] per (a (d, F), sides) of sets, as `bounds(a, upper_only)` gives
        them (sides "both", "upper": upper_only; "lower": the lower side only, the upper
        left 0 and hi meaningless), bit for bit, with one Dinkelbach run per head for all
        the functionals of all sets: Dinkelbach's functionals are independent (each
        column's rounds are the same alone or with others, a settled column stays
        settled, tests/test_family_gap_gen_speed.py), and its cost is mostly per run.
        y = vo @ a is still computed per set (the same BLAS call as `bounds`, whose last
        bits depend on the shapes)."""
        n_heads = len(self.heads)
        pers = [np.zeros((n_heads, a.shape[1], 2)) for a, _ in sets]
        for j, (wt, vo, _) in enumerate(self.heads):
            parts, scales = [], []
            for a, sides in sets:
                y = vo @ a  # (P, A, F)
                scales.append(float(np.abs(y).max()) + 1e-12)
                parts += {"both": [y, -y], "upper": [y], "lower": [-y]}[sides]
            lam, _ = max_ratio(wt, np.concatenate(parts, axis=2) if len(parts) > 1 else parts[0])
            at = 0
            for n, (a, sides) in enumerate(sets):
                width = a.shape[1]
                if sides != "lower":
                    pers[n][j, :, 1] = slack(lam[at:at + width], scales[n], self.rel)
                    at += width
                if sides != "upper":
                    pers[n][j, :, 0] = -slack(lam[at:at + width], scales[n], self.rel)
                    at += width
        out = []
        for (a, _), per in zip(sets, pers):
            if self.f32:
                per = np.stack([round_f32(per[..., 0], up=False),
                                round_f32(per[..., 1], up=True)], axis=-1)
            lo, hi = self.base @ a, self.base @ a
            for j in range(n_heads):
                lo, hi = lo + per[j, :, 0], hi + per[j, :, 1]
            out.append((lo, hi, per))
        return out

    def margins(self) -> np.ndarray:
        """_Query.margins for this class (no permutation claim), the same float bound and
        hints bit for bit: the three Lemma R families that do not depend on the chain
        (box: the identity, pre: LayerNorm-scaled W_in, diff: the unembedding
        differences) in one `joint_bounds`, the two directions after them."""
        tab, f, w, sh = self.tab, self.f, self.w, self.shared
        out = sh.output(self.claim.output)
        g = out.g
        sets = [(sh.eye, "both")] + ([(sh.pre, "both")] if sh.serial_mlp else []) + \
            [(g, "upper")]
        found = self.joint_bounds(sets)
        lo, hi, self.hint["box"] = found[0]
        h_lo = h_hi = None
        if f.d_mlp and f.parallel:
            h_lo = h_hi = np.maximum(tab.norm(self.x_p, "blocks.0.ln2") @ sh.w_in
                                     + w["blocks.0.mlp.b_in"], 0)
        elif f.d_mlp:
            s_lo, s_hi = 1.0, 1.0
            if f.normalization is not None:
                e = (lo + hi) / 2
                s_lo, s_hi = _ln_scale(lo, hi, f.ln_eps, e, self.direction(0, e))
            n_lo, n_hi, self.hint["pre"] = found[1]
            cands = np.stack([n_lo / s_lo, n_lo / s_hi, n_hi / s_lo, n_hi / s_hi])
            h_lo = np.maximum(cands.min(0) + sh.const, 0)
            h_hi = np.maximum(cands.max(0) + sh.const, 0)
        _, numer, per = found[-1]
        self.hint["diff"] = per[:, :, 1]
        mlp = None if h_lo is None else (h_lo, h_hi, sh.w_out_c, sh.b_out_c, out.w_out_g,
                                         out.b_out_g)
        return self.logit_bound(lo, hi, numer, mlp, out.b_f_d_u)


def attempt(tab: Tables, q: int, m: int, fixed: tuple, g: int, rel: float | None = None,
            hints: str = "f64"):
    """The hint arrays if the float64 bound proves the class (q, m, S, g), else None (rel:
    the relative slack of every λ, float32: F32_SLACKS; default the real rule's; hints:
    "f32" rounds every hint to binary32 outward first, `_ClassQuery`)."""
    return attempt_slots(tab, q, m, rule.slots(tab.dims, q, m, fixed, g), rel, hints)


def attempt_slots(tab: Tables, q: int, m: int, slot_sets: list, rel: float | None = None,
                  hints: str = "f64"):
    """The hint arrays if the float64 bound proves output m over the token sets, else None."""
    query = _ClassQuery(tab, q, m, slot_sets, hints)
    if rel is not None:
        query.rel = rel
    with np.errstate(all="ignore"):
        bound = query.margins()
    others = np.delete(bound, m)
    if not (np.isfinite(others).all() and all(np.isfinite(a).all() for a in query.hint.values())):
        return None  # float64 overflow (a scaled model): not proved, and no hint to write
    scale = 1.0 + float(np.abs(others).max())
    return query.hint if float(others.max()) < -TOL * scale else None


def smallest_gap(tab: Tables, q: int, m: int, fixed, hints: str = "f64"):
    """(g, hints) for the smallest gap that proves the class, or None (fixed: S, or the
    first position i0 of a merged class)."""
    k = tab.dims.n_ctx
    if type(fixed) is not int and len(fixed) == k - 1:  # one sequence: the gap is immaterial
        hint = attempt(tab, q, m, fixed, 1, hints=hints)
        return None if hint is None else (1, hint)
    lo, hi, best = 1, m, None
    while lo <= hi:  # the smallest proving g in [lo, hi]; monotone in g
        g = (lo + hi) // 2
        hint = attempt(tab, q, m, fixed, g, hints=hints)
        if hint is not None:
            best, hi = (g, hint), g - 1
        else:
            lo = g + 1
    return best


def class_keys(v: int, k: int):
    """Every (q, m, S) in the checker's order."""
    for q in range(v):
        for m in range(q, v):
            for size in range(0 if q == m else 1, k):
                for fixed in itertools.combinations(range(k - 1), size):
                    yield q, m, fixed
    return


def sampled_pairs(v: int, sample: int) -> set | None:
    """The (q, m) pairs (q <= m < v) of option sample=N: a random ceil(P/N) of the P pairs,
    drawn by Python's random seeded with a string naming v and N (the same set on every
    machine and run); None (every pair) when N = 1."""
    if sample == 1:
        return None
    import random

    pairs = [(q, m) for q in range(v) for m in range(q, v)]
    n = -(-len(pairs) // sample)
    return set(random.Random(f"family-gap sample v={v} N={sample}").sample(pairs, n))


def find_classes(weights, progress=False, merge="off", hints="f64", min_size: int = 0,
                 jobs: int = 1, pairs: set | None = None) -> list:
    """[(q, m, S, g, hint arrays)] sorted by (q, m, S), each proved in float64.  merge:
    "off" (classes per S), "lossless" (a merged class M(q, m, i0, g), Lemma G5, replaces the
    block's classes (q, m, S) with min S = i0 when it proves and holds at least as many
    sequences), "always" (whenever it proves).  min_size: only the classes holding at least
    min_size sequences are returned — exactly the classes of min_size = 0 that hold as many
    (`block_classes`), without searching the ones that cannot (the filter is applied after
    the merge, as `certify` did).  pairs: only the blocks of these (q, m) (None: all)."""
    keep_heap()
    tab = Tables(weights)
    d = tab.dims
    blocks = {}
    for q, m, fixed in sorted(class_keys(d.d_vocab, d.n_ctx)):
        if pairs is not None and (q, m) not in pairs:
            continue
        blocks.setdefault((q, m, rule.first(fixed)), []).append(fixed)
    order = sorted(blocks, key=lambda b: (b[0], b[1], -1 if b[2] is None else b[2]))
    tasks = [(q, m, i0, blocks[(q, m, i0)], merge, hints, min_size) for q, m, i0 in order]
    out = []
    for found in progress_bar(in_order(tab, _block_task, tasks, jobs), "family-gap classes",
                              progress):
        out.extend(found)
    return out


_WORKER_TABLES = None  # the Tables a forked worker of `in_order` computes with


def keep_heap() -> None:
    """Ask glibc's malloc to keep freed memory (trim threshold 1 GiB, mmap threshold 32 MiB,
    fixed): each class attempt allocates and frees arrays of ~1 MB, which by default go
    back to the system and come back as fresh zeroed pages — at d_vocab 64, 1.75·10^7 page
    faults and a quarter of the CPU time in the kernel.  Only the memory policy changes,
    never a value computed.  A no-op where glibc's mallopt is missing (not Linux)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    mallopt(m_trim_threshold, 1 << 30)
    mallopt(m_mmap_threshold, 32 << 20)


def _block_task(task):
    return block_classes(_WORKER_TABLES, *task)


def _box_task(task):
    return class_boxes(_WORKER_TABLES, *task)


def in_order(tab: Tables, fn, tasks: list, jobs: int = 1):
    """fn(task) for every task, in the tasks' order: here (jobs = 1) or in `jobs` forked
    worker processes sharing tab (copy on write).  The same results either way: each task
    is a pure function of tab and the task (the same float operations in any process),
    and imap returns them in order.  Pre: fn a module-level function reading
    _WORKER_TABLES.  Yields the results one by one (for the progress bar)."""
    global _WORKER_TABLES
    _WORKER_TABLES = tab
    try:
        if jobs <= 1 or len(tasks) < 2:
            yield from map(fn, tasks)
            return
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            yield from pool.imap(fn, tasks, chunksize=max(1, min(16, len(tasks) // (8 * jobs))))
    finally:
        _WORKER_TABLES = None


def block_classes(tab: Tables, q: int, m: int, i0, keys: list, merge: str, hints: str,
                  min_size: int) -> list:
    """The classes one block (q, m, i0) contributes (keys: its sets S in order): its classes
    found, or the merged class M(q, m, i0, g) in their place (`find_classes`' merge), then
    those holding >= min_size sequences.

    A class's size only falls as its gap grows, so a class with fewer than min_size
    sequences at g = 1 ("small") is never returned: with merge "off" or "always" it is not
    searched, except to learn whether the block has any class at all (the merged class is
    tried only then) when no other class of the block proves.  The merged class is not
    searched when neither it nor any class of the block can be returned.  "lossless"
    compares the merged class with the sum of all the block's classes: every one is
    searched.  Same output as searching everything and filtering (the searches are pure
    functions of their arguments)."""
    d = tab.dims
    big = [f for f in keys if rule.class_size(d, m, f, 1) >= min_size]
    if merge == "always" and i0 is not None and m >= 1:
        return merged_first(tab, q, m, i0, keys, big, hints, min_size)
    lazy = merge != "lossless" and len(big) < len(keys)
    group = [(q, m, f) + found for f in (big if lazy else keys)
             if (found := smallest_gap(tab, q, m, f, hints)) is not None]
    can_merge = merge != "off" and i0 is not None and m >= 1
    if lazy and not group and can_merge and (rule.class_size(d, m, i0, 1) >= min_size):
        for f in keys:  # does the block have a class? (then the merged class is tried)
            if f not in big and smallest_gap(tab, q, m, f, hints) is not None:
                group = [None]  # a small class: never returned, but the block exists
                break
    if group and can_merge and (group != [None] or rule.class_size(d, m, i0, 1) >= min_size):
        found = smallest_gap(tab, q, m, i0, hints)
        if found is not None:
            size = rule.class_size(d, m, i0, found[0])
            if merge == "always" or size >= sum(rule.class_size(d, m, f, g)
                                                for _, _, f, g, _ in group):
                group = [(q, m, i0, found[0], found[1])]
    return [c for c in group if c is not None and rule.class_size(d, m, c[2], c[3]) >= min_size]


def merged_first(tab: Tables, q: int, m: int, i0: int, keys: list, big: list, hints: str,
                 min_size: int) -> list:
    """`block_classes` for merge "always" (m >= 1): the block's classes only matter through
    "is there one?" when the merged class proves (it then replaces them all), so that is
    asked first (`has_class`, usually one attempt), then the merged class is searched, and
    the classes (the big ones) only when it does not prove.  The same output as searching
    every class first."""
    d = tab.dims
    if not any(has_class(tab, q, m, f, hints) for f in big + [f for f in keys if f not in big]):
        return []  # no class: the block does not exist, the merged class is not tried
    found = smallest_gap(tab, q, m, i0, hints)
    if found is not None:
        return [(q, m, i0) + found] if rule.class_size(d, m, i0, found[0]) >= min_size else []
    group = [(q, m, f) + found for f in big
             if (found := smallest_gap(tab, q, m, f, hints)) is not None]
    return [c for c in group if rule.class_size(d, m, c[2], c[3]) >= min_size]


def has_class(tab: Tables, q: int, m: int, fixed, hints: str) -> bool:
    """smallest_gap(tab, q, m, fixed, hints) is not None, in one attempt when the class
    proves at g = m: the bisection over [1, m] (m >= 1) tests g = m last whenever every g it
    tests fails, so a proof at m means it finds some g (attempts are pure functions)."""
    k = tab.dims.n_ctx
    if m >= 1 and (type(fixed) is int or len(fixed) < k - 1) and \
            attempt(tab, q, m, fixed, m, hints=hints) is not None:
        return True
    return smallest_gap(tab, q, m, fixed, hints) is not None


def make_box(sets: list, j: int, lo: int, hi: int, x: int):
    """The box of a class's position sets with position j in the band [lo, hi] (without m)
    and every other free position in [0, x] (with m where the class allows it)."""
    return rule.Box((lo, hi, 0) if i == j else (a, b, e) if a > b else (0, x, e)
                    for i, (a, b, e) in enumerate(sets))


def box_leaves(tab: Tables, q: int, m: int, sets: list, j: int, lo: int, hi: int, x: int,
               hints: str = "f64", min_size: int = 0):
    """[(box, hint)] covering the band [lo, hi] at position j: the whole band at x if it
    proves, else its halves in turn; one token's band at the largest x' <= x that proves
    (bisection; the bound only improves as x shrinks); a token proved at no x is left out.
    min_size: only the boxes holding >= min_size sequences — the same as filtering the
    boxes of min_size = 0, since every box below this one (a part of its band, x' <= x)
    holds at most as many sequences as it: a box smaller than min_size ends the search."""
    box = make_box(sets, j, lo, hi, x)
    if min_size and rule.class_size(tab.dims, m, box, 0) < min_size:
        return []
    hint = attempt_slots(tab, q, m, rule.slots(tab.dims, q, m, box, 0), hints=hints)
    if hint is not None:
        return [(box, hint)]
    if lo < hi:
        mid = (lo + hi) // 2
        return (box_leaves(tab, q, m, sets, j, lo, mid, x, hints, min_size)
                + box_leaves(tab, q, m, sets, j, mid + 1, hi, x, hints, min_size))
    a, b, best = 0, x - 1, None
    while a <= b:
        if min_size and rule.class_size(tab.dims, m, make_box(sets, j, lo, hi, b), 0) < min_size:
            return []  # best <= b whenever b moves: what is left is dropped
        y = (a + b + 1) // 2
        box = make_box(sets, j, lo, hi, y)
        hint = attempt_slots(tab, q, m, rule.slots(tab.dims, q, m, box, 0), hints=hints)
        if hint is not None:
            best, a = (box, hint), y + 1
        else:
            b = y - 1
    if best is None or rule.class_size(tab.dims, m, best[0], 0) < min_size:
        return []
    return [best]


def find_boxes(tab: Tables, classes: list, progress=False, hints: str = "f64",
               min_size: int = 0, jobs: int = 1) -> list:
    """[(q, m, Box, 0, hint)]: for every class with gap g >= 2 and each free position j,
    box classes for its sequences with a token of [m−g+1, m−1] at j and the other free
    positions' tokens <= m−g (`box_leaves`).  Disjoint (Lemma B2): from the class (position
    j's band lies above A and holds no m), from the boxes of the class's other free
    positions (their position j is in [0, x], x <= m−g), from the other bands at j, and
    from every other class of the same (q, m) and its boxes (the class's {m} positions and
    its positions without m are kept)."""
    keep_heap()
    todo = [(q, m, fixed, g, hints, min_size) for q, m, fixed, g, _ in classes
            if not isinstance(fixed, rule.Box) and g >= 2]
    out = []
    for found in progress_bar(in_order(tab, _box_task, todo, jobs), "family-gap boxes",
                              progress):
        out.extend(found)
    return out


def class_boxes(tab: Tables, q: int, m: int, fixed, g: int, hints: str = "f64",
                min_size: int = 0) -> list:
    """[(q, m, Box, 0, hint)]: the boxes of one class (q, m, fixed, g) with g >= 2, every
    free position j in turn (`find_boxes`)."""
    out = []
    sets = rule.position_sets(tab.dims, m, fixed, g)
    for j, (a, b, _) in enumerate(sets):
        if a <= b:  # a free position
            for box, hint in box_leaves(tab, q, m, sets, j, m - g + 1, m - 1, m - g, hints,
                                        min_size):
                out.append((q, m, box, 0, hint))
    return out


def choose_boxes(dims, boxes: list, room: int) -> list:
    """The boxes with the most sequences per unit of checker work (rule.cost's per-class
    charge) whose summed charge fits in room, in (q, m, box) order."""
    def charge(b):  # every box's (q, m) has a class: its query and output work is paid
        return rule.class_charge(dims, b[1], b[2], 0)

    ranked = sorted(boxes, key=lambda b: -rule.class_size(dims, b[1], b[2], 0) / charge(b))
    kept, used = [], 0
    for b in ranked:
        c = charge(b)
        if used + c <= room:
            kept.append(b)
            used += c
    return sorted(kept, key=lambda b: (b[0], b[1], tuple(b[2])))


def covered_keys(dims, classes: list) -> dict:
    """{(q, m, S): g}: every class, and for a merged class M(q, m, i0, g) every key (q, m, S)
    with min S = i0 at its gap (M ∩ C(q, m, S, 1) = C(q, m, S, g), Lemma G5)."""
    keyed = {}
    for q, m, fixed, g, _ in classes:
        if isinstance(fixed, rule.Box):
            continue
        if type(fixed) is int:
            for size in range(0, dims.n_ctx - 2 - fixed + 1):
                for rest in itertools.combinations(range(fixed + 1, dims.n_ctx - 1), size):
                    keyed[(q, m, (fixed,) + rest)] = g
        else:
            keyed[(q, m, fixed)] = g
    return keyed


def encode(classes: list, residue=(), hints: str = "f64") -> dict:
    """The rule's hints; hints == "f32": every array as binary32 (its values already are:
    `_ClassQuery` rounded them, so the conversion is exact)."""
    from ..trace import b64

    dtype = {"f64": "<f8", "f32": "<f4"}[hints]
    out = {"classes": [[q, m, {"first": fixed} if type(fixed) is int else list(fixed), g]
                       + [b64(h[name], dtype) for name in rule.HINT_FIELDS]
                       for q, m, fixed, g, h in classes if not isinstance(fixed, rule.Box)]}
    boxes = [[q, m, [list(x) for x in fixed]] + [b64(h[name], dtype)
                                                  for name in rule.HINT_FIELDS]
             for q, m, fixed, g, h in classes if isinstance(fixed, rule.Box)]
    if boxes:
        out["boxes"] = boxes
    if len(residue):
        out["residue"] = [list(map(int, t)) for t in residue]
    return out


def residue_candidates(dims, classes: list, limit: int) -> np.ndarray:
    """Sequences outside every class that the classes at gap 1 would hold: for each
    class with g >= 2 its sequences with some free token in (m − g, m − 1], and every
    sequence of a valid key with no class; at most `limit` (the smallest gaps first)."""
    k = dims.n_ctx
    keyed = covered_keys(dims, classes)
    boxes = rule.class_index(classes)[2]
    parts, size = [], 0
    order = sorted(class_keys(dims.d_vocab, k), key=lambda key: keyed.get(key, 10**9))
    for q, m, fixed in order:
        g = keyed.get((q, m, fixed))
        if (g is not None and g == 1) or rule.signature(dims, q, m, fixed, 1) is not None:
            continue
        seqs = np.array(list(itertools.product(*rule.slots(dims, q, m, fixed, 1))),
                        dtype=np.int64)
        if g is not None:
            free = [i for i in range(k - 1) if i not in fixed]
            seqs = seqs[(seqs[:, free] > m - g).any(axis=1)]
        for sets in boxes.get((q, m), ()):  # the box classes' members are not residue
            inside = np.ones(len(seqs), dtype=bool)
            for i, (lo, hi, e) in enumerate(sets):
                inside &= ((seqs[:, i] >= lo) & (seqs[:, i] <= hi)) | ((seqs[:, i] == m) & bool(e))
            seqs = seqs[~inside]
        if size + len(seqs) > limit:
            break
        parts.append(seqs)
        size += len(seqs)
    return np.concatenate(parts) if parts else np.zeros((0, k), dtype=np.int64)


def residue(weights, classes: list, limit: int) -> np.ndarray:
    """The residue candidates whose float64 margin is clearly positive, sorted."""
    from ...model import family_logits_float64, family_weights
    from .forward_brute_force import NEAR_TIE

    fw = family_weights(weights)
    seqs = residue_candidates(fw.dims, classes, limit)
    if not len(seqs):
        return seqs
    logits = family_logits_float64(fw, seqs)
    rows, top = np.arange(len(seqs)), seqs.max(axis=1)
    best = logits[rows, top].copy()
    logits[rows, top] = -np.inf
    keep = seqs[best - logits.max(axis=1) > NEAR_TIE]
    return keep[np.lexsort(keep.T[::-1])]


def checker_inputs(trace) -> dict:
    """The rule's inputs as the checker reads them: every weight of forward.inputs as a
    matrix of mpmath intervals [lo, hi] of the recorded enclosures."""
    from mpmath import iv

    mats = {}
    for name in forward.inputs(trace.dims):
        value = trace.values[trace.quantity(name)]
        mats[name] = [[iv.mpf((float(a), float(b))) for a, b in zip(lo, hi)]
                      for lo, hi in zip(value.lo, value.hi)]
    return mats


def checker_confirmed(trace, classes: list, hints: str = "f64") -> list:
    """The classes the checker's own code confirms on the recorded inputs."""
    from checker.errors import Malformed, Rejected
    from checker.rules import overwhelm_family as family

    d = trace.dims
    mats = checker_inputs(trace)
    # the classes, then the boxes (certify keeps them in that order)
    encoded = encode(classes, hints=hints)
    parsed = rule.parse_hints(encoded, d, lambda work: None)
    parsed = parsed + rule.parse_boxes(encoded, d, lambda work: None, parsed)
    tables = family.Tables(d, mats, lambda work: None)
    shared = rule.SharedFunctionals(tables)
    kept, weights, fun = [], {}, {}
    for cls, (q, m, fixed, g, hint) in zip(classes, parsed):
        if q not in weights:
            weights = {q: rule.QueryWeights(tables, q)}
        if m not in fun:
            fun = {m: shared.for_output(m)}
        try:
            rule.ClassQuery(tables, fun[m], weights[q], q, m, rule.slots(d, q, m, fixed, g),
                            hint).check()
        except (Rejected, Malformed, ArithmeticError):  # e.g. exp beyond the checker's range
            continue
        kept.append(cls)
    return kept


def float32_confirmed(trace, classes: list, progress=False, hints: str = "f64") -> list:
    """semantics == float32: per class (from the real search), the hints with the larger
    slacks F32_SLACKS in turn, at the real gap and up to F32_EXTRA_GAPS larger ones, each
    checked by the checker's float32 class proof (family_gap_float32.ClassQuery) on the
    recorded inputs (untrusted use); the first that passes is kept, a class none proves is
    dropped."""
    from checker.errors import Malformed, Rejected
    from checker.rules import family_gap_float32 as f32_rule
    from checker.rules import overwhelm_family_float32 as f32_family

    d = trace.dims
    mats = checker_inputs(trace)
    tab = Tables(trace.weights)
    tables = f32_family.Tables(d, mats, lambda work: None)
    shared = rule.SharedFunctionals(tables)
    kept, fun, cache = [], {}, {}
    for q, m, fixed, g0, _ in progress_bar(classes, "family-gap float32 classes", progress):
        if m not in fun:
            fun, cache = {m: shared.for_output(m)}, {}
        last = m if type(fixed) is int or len(fixed) < d.n_ctx - 1 else g0
        found = None
        for g in range(g0, min(last, g0 + F32_EXTRA_GAPS) + 1):
            for rel in F32_SLACKS:
                hint = attempt(tab, q, m, fixed, g, rel, hints)
                if hint is None:
                    continue
                entry = (q, m, fixed, g, hint)
                (_, _, _, _, parsed), = rule.parse_hints(encode([entry], hints=hints), d,
                                                         lambda work: None)
                try:
                    f32_rule.ClassQuery(tables, fun[m], cache, q, m,
                                        rule.slots(d, q, m, fixed, g), parsed).check()
                except (Rejected, Malformed, ArithmeticError):
                    continue
                found = entry
                break
            if found is not None:
                break
        if found is not None:
            kept.append(found)
    return kept


def float32_residue(trace, candidates) -> list:
    """The residue candidates the checker's float32 forward pass certifies (untrusted use);
    a pass that may overflow (float32.Overflow, a Rejected) certifies nothing."""
    from checker.rules.forward_float32 import Float32Model

    return certified_by(lambda: Float32Model(trace.dims, checker_inputs(trace),
                                             lambda work: None), candidates)


def certified_by(make_model, candidates) -> list:
    """The candidates (token tuples) the checker's forward model certifies correct, as
    lists of ints (forward._certified); none if the model cannot be built, and not those
    whose pass the checker refuses (a Rejected: a float32 overflow), since the checker would
    then refuse the certificate."""
    from checker.errors import Rejected

    try:
        model = make_model()
    except Rejected:
        return []
    out = []
    for t in candidates:
        t = tuple(map(int, t))
        try:
            if forward._certified(model.logits(t), max(t)):
                out.append(list(t))
        except Rejected:
            continue
    return out


def certify(trace, progress=False, options: Options = Options(), confirm=True,
            residue_limit=RESIDUE_LIMIT, semantics="real"):
    d = trace.dims
    f = d.family
    if f.n_layers > 1 and f.normalization not in ("RMS", "RMSPre") and \
            semantics in ("real", "float32"):
        from . import family_gap_deep  # overwhelm_deep's boxes per class

        return family_gap_deep.certify(
            trace, options, list(class_keys(d.d_vocab, d.n_ctx)),
            sampled_pairs(d.d_vocab, options.sample), lambda: checker_inputs(trace),
            lambda classes, limit: residue(trace.weights, classes, limit), residue_limit,
            certified_by, progress, semantics)
    if not f.is_one_layer_dense or f.normalization in ("RMS", "RMSPre"):
        raise NotApplicable("rule family_gap supports one layer without a gated MLP, or "
                            "several layers, and no RMS "
                            "normalization (use --strategy forward-brute-force)")
    if semantics == "float32":
        from checker.errors import Rejected
        from checker.rules import family_gap_float32 as f32_rule

        try:
            f32_rule.refuse(d)
        except Rejected as err:
            raise NotApplicable(f"{err} (use --strategy forward-brute-force)") from None
        cost = f32_rule.cost
    elif semantics != "real":
        raise NotApplicable(f"semantics {semantics} is not supported")
    else:
        cost = rule.cost
    if d.d_vocab < 2:
        raise NotApplicable("d_vocab = 1: there is no wrong output to compare against")
    every = [(q, m, fixed, 1, None) for q, m, fixed in class_keys(d.d_vocab, d.n_ctx)
             if rule.signature(d, q, m, fixed, 1) is None]
    estimate = cost(d, every)
    # with boxes the budget is what the classes found, the boxes and the residue may use:
    # refused after the class search if the classes alone exceed it (below)
    if estimate > options.budget and options.boxes == "off":
        raise NotApplicable(f"the {len(every)} gap classes would need up to ~{estimate:.1e} "
                            f"interval operations in the checker (over the budget "
                            f"{options.budget:.0e}; raise it with "
                            f"--strategy {NAME}:budget={int(10 ** math.ceil(math.log10(estimate)))}"
                            ", and check with --arith arb --max-work of as much)")
    pairs = sampled_pairs(d.d_vocab, options.sample)
    classes = find_classes(trace.weights, progress, options.merge, options.hints,
                           options.min_size, options.jobs, pairs)
    if options.min_size:  # their keys' sequences may still be residue
        classes = [c for c in classes if rule.class_size(d, c[1], c[2], c[3]) >= options.min_size]
    n_boxes = 0
    if options.boxes == "on" and semantics == "real":
        parsed = [(q, m, fixed, g, None) for q, m, fixed, g, _ in classes]
        room = options.budget - cost(d, parsed)
        if room < 0:
            raise NotApplicable(f"the {len(classes)} gap classes found need "
                                f"~{cost(d, parsed):.1e} interval operations in the checker "
                                f"(over the budget {options.budget:.0e})")
        found = [b for b in find_boxes(Tables(trace.weights), classes, progress, options.hints,
                                       options.min_size, options.jobs)
                 if rule.class_size(d, b[1], b[2], 0) >= options.min_size]
        classes, n_boxes = classes + choose_boxes(d, found, room), len(found)
    floats = len(classes)
    if semantics == "float32":  # always confirmed: the float64 mirror is the real bound
        classes = float32_confirmed(trace, classes, progress, options.hints)
    elif confirm and options.confirm == "on":
        classes = checker_confirmed(trace, classes, options.hints)
    parsed = [(q, m, fixed, g, None) for q, m, fixed, g, _ in classes]
    left = (options.budget - cost(d, parsed)) // forward._sequence_cost(d)
    limit = max(0, min(residue_limit, left)) if pairs is None else 0
    rest = residue(trace.weights, classes, limit) if limit else []
    if semantics == "float32" and len(rest):
        rest = np.array(float32_residue(trace, rest), dtype=np.int64).reshape(-1, d.n_ctx)
    work = cost(d, parsed, len(rest))
    claim = sum(rule.class_size(d, m, fixed, g) for q, m, fixed, g, _ in classes) + len(rest)
    line = trace.rule("family_gap", list(forward.inputs(d)), claim,
                      encode(classes, rest, options.hints))
    gaps = [g for _, _, fixed, g, _ in classes if not isinstance(fixed, rule.Box)]
    return line, claim, {"classes": len(classes), "classes_float64": floats,
                         "residue": len(rest),
                         "checker_work": work,
                         "merged": sum(type(c[2]) is int for c in classes),
                         "boxes": sum(isinstance(c[2], rule.Box) for c in classes),
                         "boxes_float64": n_boxes,  # proved in float64, before the budget
                         "mean_gap": float(np.mean(gaps)) if gaps else None}
