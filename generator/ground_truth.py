"""Exact accuracy by enumerating every input sequence, in float64.

A sequence t counts as correct iff the logit of its true maximum is STRICTLY
greater than every other logit (a tie is wrong -- unlike argmax, which breaks
ties towards the lowest index).  This is the number a certificate's lower
bound is compared against; it is untrusted (float64, not interval) but
independent of any proof strategy.

Why it is fast: only the last position's logits matter, and they decompose
(paper eq. 7-8) into per-(position, token) tables for a fixed query token q:

    logits(t) = D[q] + sum_i e_i(t_i) OV[i, t_i] / sum_i e_i(t_i),
    e_i(t) = exp(S[q, i, t] - M_q),

with S the attention scores, OV the value->logit rows, D the direct path and
M_q = max over the table of S[q] (a shift that is common to all sequences with
query q, so the sums over positions separate).  For each q we sum the tables
of the last r free positions once by broadcasting, then every chunk (a fixed
prefix) costs a few passes over a (v^r, v) array.  The common shift is exact
in exact arithmetic; in float64 it only loses precision when all scores of a
sequence lie far below M_q, which is detected (denominator < _TINY) and those
sequences are recomputed with a per-sequence shift.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from checker import HelpFormatter, add_version_option

from .model import FamilyWeights, ModelWeights, family_logits_float64
from .progress import pipe_safe

_TINY = 1e-200  # below this denominator the common shift may have lost precision
NEAR_TOL = 1e-9  # |margin| <= NEAR_TOL * (1 + |logit of true max|) counts as "near"


@dataclass(frozen=True)
class GroundTruth:
    correct: int  # true max's logit strictly above all others
    total: int  # d_vocab ** n_ctx (fewer if restricted to some query tokens)
    ties: int  # true max's logit equals the largest other logit (counted wrong)
    seconds: float
    # |margin| <= NEAR_TOL * (1 + |logit of true max|), exact ties included: sequences
    # whose verdict float64 rounding (rather than the real-number model) may decide.
    near_ties: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.total

    def to_json(self) -> dict:
        return {**asdict(self), "accuracy": self.accuracy}


@dataclass(frozen=True)
class CircuitTables:
    """Float64 tables of the last-position computation (v = d_vocab, k = n_ctx).

    S[q, i, t]  attention score of token t at position i for query token q (v, k, v)
    OV[i, t]    logits contributed by fully attending to t at position i   (k, v, v)
    D[q]        direct path + biases for query token q                      (v, v)
    """

    S: np.ndarray
    OV: np.ndarray
    D: np.ndarray


def circuit_tables(weights: ModelWeights) -> CircuitTables:
    """Cost O(k v d (d + v) + v^2 k h)."""
    w = {n: getattr(weights, n).astype(np.float64) for n in ModelWeights.names()}
    resid_q = w["W_E"] + w["W_pos"][-1]  # (v, d): query residual per token
    resid = w["W_E"][None, :, :] + w["W_pos"][:, None, :]  # (k, v, d)
    query = resid_q @ w["W_Q"] + w["b_Q"]  # (v, h)
    key = resid @ w["W_K"] + w["b_K"]  # (k, v, h)
    S = np.einsum("qh,ith->qit", query, key) / math.sqrt(weights.dims.d_head)
    OV = ((resid @ w["W_V"] + w["b_V"]) @ w["W_O"]) @ w["W_U"]  # (k, v, v)
    # Attention weights sum to 1, so b_O reaches the logits unchanged.
    D = resid_q @ w["W_U"] + w["b_U"] + w["b_O"] @ w["W_U"]  # (v, v)
    return CircuitTables(S=S, OV=OV, D=D)


def enumerate_sequences(d_vocab: int, n_ctx: int, start: int = 0,
                        stop: int | None = None) -> np.ndarray:
    """Sequences number start..stop-1 in lexicographic order (position 0 most
    significant), as an int64 array (stop - start, n_ctx)."""
    total = d_vocab ** n_ctx
    stop = total if stop is None else stop
    if not 0 <= start <= stop <= total:
        raise ValueError(f"need 0 <= start <= stop <= {total}")
    idx = np.arange(start, stop, dtype=np.int64)
    out = np.empty((stop - start, n_ctx), dtype=np.int64)
    for pos in range(n_ctx - 1, -1, -1):
        idx, out[:, pos] = np.divmod(idx, d_vocab)
    return out


def _logits_stable(tab: CircuitTables, tokens: np.ndarray) -> np.ndarray:
    """Logits of a few sequences (n, k) from the tables with a per-sequence shift."""
    k = tokens.shape[1]
    q = tokens[:, -1]
    pos = np.arange(k)
    s = tab.S[q[:, None], pos[None, :], tokens]  # (n, k)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    rows = tab.OV[pos[None, :], tokens]  # (n, k, v)
    return tab.D[q] + np.einsum("nk,nkv->nv", e, rows) / e.sum(axis=1, keepdims=True)


def _tally(logits_t: np.ndarray, tmax: np.ndarray) -> tuple[int, int, int]:
    """(correct, ties, near) for the columns of `logits_t` (v, n) -- destroyed --
    whose true maxima are tmax (n,).  Token-major layout so that the max over
    tokens is an elementwise maximum of contiguous rows (much faster)."""
    cols = np.arange(logits_t.shape[1])
    val = logits_t[tmax, cols]
    logits_t[tmax, cols] = -np.inf
    margin = val - logits_t.max(axis=0)
    if np.isnan(margin).any():  # NaN anywhere in a column propagates to its margin
        raise FloatingPointError("NaN logit in the ground-truth evaluation")
    near = np.abs(margin) <= NEAR_TOL * (1.0 + np.abs(val))
    return int((margin > 0).sum()), int((margin == 0).sum()), int(near.sum())


def count_correct(weights: ModelWeights, chunk_size: int = 1 << 13,
                  progress: bool | None = None, workers: int = 2,
                  query_tokens: list[int] | None = None) -> GroundTruth:
    """Count correct sequences among all d_vocab ** n_ctx.

    query_tokens: restrict to sequences whose last token is in this list
    (for spot checks; total is then len(query_tokens) * v^(k-1)).

    Pre: chunk_size >= 1 (sequences per chunk, rounded down to a power of
    d_vocab, at least d_vocab); workers >= 1 threads (numpy releases the GIL
    in the array passes).  progress: None = a tqdm bar on stderr for more
    than 10^6 sequences when stderr is a terminal.
    Post: exact float64 verdict for every sequence (see module docstring);
    the result does not depend on chunk_size or workers.
    Cost: O(v^k * v) float64 operations, O(workers * chunk * v) memory.
    """
    t0 = time.perf_counter()
    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    if isinstance(weights, FamilyWeights):
        return _count_family(weights, chunk_size, query_tokens, t0)
    tab = circuit_tables(weights)
    r = 1  # number of free (broadcast) non-query positions per chunk
    while r < k - 1 and v ** (r + 1) <= chunk_size:
        r += 1
    free = enumerate_sequences(v, r)  # (v^r, r), same order as the broadcast sums
    queries = list(range(v)) if query_tokens is None else sorted(set(query_tokens))
    if not queries or any(not 0 <= q < v for q in queries):
        raise ValueError(f"query tokens must be a non-empty list of tokens in [0, {v})")
    total = len(queries) * v ** (k - 1)
    bar = _progress_bar(total, progress)

    def one_query(q: int) -> tuple[int, int, int]:
        return _count_query(tab, q, free, bar)

    if workers > 1 and len(queries) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(one_query, queries))
    else:
        results = [one_query(q) for q in queries]
    if bar is not None:
        bar.close()
    correct, ties, near = (sum(col) for col in zip(*results, strict=True))
    return GroundTruth(correct=correct, total=total, ties=ties, near_ties=near,
                       seconds=time.perf_counter() - t0)


def _count_family(weights: FamilyWeights, chunk_size: int, query_tokens, t0) -> GroundTruth:
    """count_correct for any model family: the full float64 forward pass
    (model.family_logits_float64), chunk by chunk."""
    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    queries = set(range(v) if query_tokens is None else query_tokens)
    if not queries or any(not 0 <= q < v for q in queries):
        raise ValueError(f"query tokens must be a non-empty list of tokens in [0, {v})")
    correct = ties = near = total = 0
    step = max(1, chunk_size)
    for start in range(0, v ** k, step):
        seqs = enumerate_sequences(v, k, start, min(start + step, v ** k))
        seqs = seqs[np.isin(seqs[:, -1], list(queries))]
        if not len(seqs):
            continue
        logits = family_logits_float64(weights, seqs)
        c, t, n = _tally(np.ascontiguousarray(logits.T), seqs.max(axis=1))
        correct, ties, near, total = correct + c, ties + t, near + n, total + len(seqs)
    return GroundTruth(correct=correct, total=total, ties=ties, near_ties=near,
                       seconds=time.perf_counter() - t0)


def _count_query(tab: CircuitTables, q: int, free: np.ndarray, bar) -> tuple[int, int, int]:
    """(correct, ties, near) over all sequences whose last token is q."""
    v, k = tab.D.shape[0], tab.OV.shape[0]
    r = free.shape[1]
    j = k - 1 - r  # positions 0..j-1 are a fixed prefix per chunk
    free_max = free.max(axis=1)  # (v^r,)
    s = tab.S[q].copy()  # (k, v)
    own = s[k - 1, q]
    s[k - 1] = -np.inf  # the last position always holds q: other entries never occur
    s[k - 1, q] = own
    e = np.exp(s - s.max())  # (k, v), all <= 1; exactly 1 somewhere
    b = e[:, None, :] * tab.OV.transpose(0, 2, 1)  # (k, v_out, v): token-major
    free_e, free_b = e[j], b[j]
    for i in range(j + 1, k - 1):  # broadcast-sum the free positions' tables
        free_e = (free_e[:, None] + e[i][None, :]).reshape(-1)
        free_b = (free_b[:, :, None] + b[i][:, None, :]).reshape(v, -1)
    correct = ties = near = 0
    logits_t = np.empty_like(free_b)  # (v_out, v^r), reused: saves page faults
    for prefix in itertools.product(range(v), repeat=j):
        const_e = e[k - 1, q] + sum(e[i, p] for i, p in enumerate(prefix))
        const_b = b[k - 1, :, q] + sum((b[i, :, p] for i, p in enumerate(prefix)), np.zeros(v))
        den = free_e + const_e  # (v^r,)
        np.add(free_b, const_b[:, None], out=logits_t)  # (v_out, v^r)
        with np.errstate(divide="ignore", invalid="ignore"):  # den == 0 is redone below
            logits_t /= den
        logits_t += tab.D[q][:, None]
        low = np.flatnonzero(den < _TINY)
        if low.size:  # rare: every score of these sequences is far below the shift
            seqs = np.concatenate([np.broadcast_to(prefix, (low.size, j)).astype(np.int64),
                                   free[low], np.full((low.size, 1), q)], axis=1)
            logits_t[:, low] = _logits_stable(tab, seqs).T
        tmax = np.maximum(free_max, max(prefix + (q,)))
        c, t, n = _tally(logits_t, tmax)
        correct, ties, near = correct + c, ties + t, near + n
        if bar is not None:
            bar.update(den.size)
    return correct, ties, near


def _progress_bar(total: int, progress: bool | None):
    if progress is False or (progress is None and total <= 10 ** 6):
        return None
    from tqdm import tqdm

    # disable=None: tqdm turns itself off when stderr is not a terminal.
    return tqdm(total=total, unit="seq", unit_scale=True, file=sys.stderr,
                disable=None if progress is None else False, desc="sequences")


def _dims_json(dims) -> dict:
    """The dimensions, with the family only when it is not the attention-only one."""
    out = asdict(dims)
    if dims.family.is_attn_only:
        del out["family"]
    return out


MAX_ENUMERATED = 10**10  # ~hours at ~10^6 sequences per second: beyond it, refuse up front


@pipe_safe
def main(argv: list[str] | None = None) -> int:
    """exact-accuracy MODEL [--json]: exit 0, or 2 if the model file is refused."""
    from .modelfile import ModelFileError, load_model

    parser = argparse.ArgumentParser(
        prog="exact-accuracy", formatter_class=HelpFormatter,
        description="Exact accuracy of a Max-of-K model over all d_vocab^n_ctx sequences "
                    "(float64; a tie counts as wrong). An evaluation, not a proof: compare "
                    "it with the bound a certificate proves.",
        epilog="examples:\n"
               "  exact-accuracy generator/models/max4_v64_seed0.pt   # the shipped model\n"
               "  exact-accuracy HF_DIR --json                        # save_pretrained dir")
    add_version_option(parser)
    parser.add_argument("model", help="model file (.pt/.pth or .safetensors, with its config) "
                                      "or Hugging Face save_pretrained directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--chunk-size", type=int, default=1 << 13, help=argparse.SUPPRESS)
    parser.add_argument("--n-ctx", type=int, metavar="K",
                        help="count sequences of length K (default: the model's n_ctx)")
    parser.add_argument("--task", metavar="NAME[:PARAM=VALUE,...]",
                        help="count the scored (input, position) pairs of this task "
                             "(spec/theorem.md §3), e.g. modular_addition:p=113")
    parser.add_argument("--dataset", metavar="FILE", help="count the rows of this labelled "
                        "dataset (spec/format.md §dataset)")
    args = parser.parse_args(argv)
    try:
        loaded = load_model(args.model, args.n_ctx)
    except ModelFileError as exc:
        print(f"exact-accuracy: error: {exc}", file=sys.stderr)
        return 2
    dims = loaded.weights.dims
    if args.task is not None or args.dataset is not None:
        return _task_main(args, loaded)
    if dims.d_vocab ** dims.n_ctx > MAX_ENUMERATED:
        print(f"exact-accuracy: error: {dims.d_vocab}^{dims.n_ctx} sequences are too many to "
              f"enumerate (at most {MAX_ENUMERATED:.0e}); count shorter sequences with "
              "--n-ctx K", file=sys.stderr)
        return 2
    gt = count_correct(loaded.weights, chunk_size=max(1, args.chunk_size),
                       progress=False if args.no_progress else None)
    if args.json:
        print(json.dumps({"model": loaded.path, "sha256": loaded.file_sha256,
                          "dims": _dims_json(dims), **gt.to_json()}))
    else:
        print(f"model:    {loaded.path} (sha256 {loaded.file_sha256})")
        print(f"dims:     d_vocab={dims.d_vocab} n_ctx={dims.n_ctx} "
              f"d_model={dims.d_model} d_head={dims.d_head}")
        if not dims.family.is_attn_only:
            print("family:   " + ", ".join(f"{k}={v}" for k, v in dims.family.to_json().items()))
        print(f"correct:  {gt.correct} / {gt.total}  (accuracy {gt.accuracy:.8f})")
        print(f"ties:     {gt.ties} (counted wrong); near-ties: {gt.near_ties}")
        print(f"time:     {gt.seconds:.2f} s")
    return 0


def task_count(weights, task) -> dict:
    """Exact float64 count of a task's scored pairs (generator/tasks/builtin.py): correct
    (the label's logit strictly above every other), ties and near-ties (|margin| <= NEAR_TOL
    * (1 + |label logit|) is not tracked here: |margin| <= 1e-9)."""
    from .tasks.builtin import domain, margins

    started = time.perf_counter()
    params = {f: v for f, v in task.params if f != "dataset"}
    m = margins(weights, *domain(task.name, task.d_vocab, task.n_ctx, params, task.rows))
    return {"task": task.name, "task_params": dict(task.params), "correct": int((m > 0).sum()),
            "total": len(m), "ties": int((m == 0).sum()),
            "near_ties": int((np.abs(m) <= 1e-9).sum()),
            "seconds": round(time.perf_counter() - started, 3)}


def _task_main(args, loaded) -> int:
    from checker.errors import Malformed

    from .cli import make_task

    try:
        task = make_task(args.task, args.dataset, loaded.weights.dims)
    except Malformed as err:
        print(f"exact-accuracy: error: {err}", file=sys.stderr)
        return 2
    if task.evaluations() > MAX_ENUMERATED:
        print(f"exact-accuracy: error: {task.evaluations()} prefixes are too many",
              file=sys.stderr)
        return 2
    result = task_count(loaded.weights, task)
    if args.json:
        print(json.dumps({"model": loaded.path, "sha256": loaded.file_sha256,
                          "dims": _dims_json(loaded.weights.dims), **result}))
    else:
        print(f"model:    {loaded.path} (sha256 {loaded.file_sha256})")
        print(f"task:     {task.describe()} (n_ctx {task.n_ctx}): {task.inputs()} "
              f"{'rows' if task.rows is not None else 'inputs'}, "
              f"{task.pairs()} scored pairs")
        print(f"correct:  {result['correct']} / {result['total']}  (accuracy "
              f"{result['correct'] / max(result['total'], 1):.8f})")
        print(f"ties:     {result['ties']} (counted wrong); near-ties: {result['near_ties']}")
        print(f"time:     {result['seconds']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
