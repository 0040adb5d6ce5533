"""Tasks: what an accuracy theorem scores (spec/theorem.md §3, spec/tasks.md).

A task fixes, for sequences of length n_ctx over d_vocab tokens:
  * its domain, the inputs (token tuples of length n_ctx) it enumerates;
  * in each input, the scored positions, and the label at each.
A pair (input t, scored position p) is correct when the label's logit at position p is
strictly greater than every other logit (a tie is wrong).  The theorem counts correct
pairs; accuracy is correct / pairs.  The model is causal, so the logits at position p of
t are the logits at the last position of the prefix t[:p+1]; every built-in task's label
at p is a function of that prefix too, so a task is a tree of prefixes:

  choices(prefix)  the tokens allowed at position len(prefix) after `prefix` (the domain
                   is every path of length n_ctx); exactly WIDTH[len(prefix)] of them
  label(prefix)    the label at position len(prefix) − 1, or None if it is not scored

and each scored prefix stands for as many pairs as it has completions in the domain (the
product of the widths after it).  `queries` walks the tree in lexicographic order and
yields (prefix, label, pairs); the rule evaluates each distinct prefix once.  A dataset
task (rows of a labelled file) yields its rows' (tokens[:position+1], label) sorted.

Exact integer code only: no floats, no search.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .errors import Malformed

# task -> its parameters (statement fields), in the order the theorem states them
PARAMS = {
    "max_of_k": (), "min_of_k": (), "sort": (),
    "modular_addition": ("p",), "modular_multiplication": ("p",),
    "parity": (), "cyclic": ("n",), "flipflop": (),
    "dataset": ("dataset",),
}
TASK_NAMES = tuple(PARAMS)
PARAM_FIELDS = ("p", "n", "dataset")
# the flip-flop language's tokens (generator/tasks/flipflop.py): write 0, write 1, ignore
# (with a bit), read
W0, W1, I0, I1, R = range(5)
MAX_DATASET_ROWS = 1 << 20
MAX_DATASET_BYTES = 64 << 20


@dataclass(frozen=True)
class Task:
    """A task for sequences of length n_ctx over d_vocab tokens.  params: the task's
    parameters as ((field, value), ...); rows: a dataset's (tokens, position, label)."""

    name: str
    d_vocab: int
    n_ctx: int
    params: tuple = ()
    rows: tuple | None = None

    # -- the tree ----------------------------------------------------------------
    def widths(self) -> tuple[int, ...]:
        """WIDTH[i]: the number of tokens the domain allows at position i (whatever came
        before; `choices` returns exactly that many)."""
        v, k, name = self.d_vocab, self.n_ctx, self.name
        if name in ("max_of_k", "min_of_k", "parity", "cyclic"):
            return (v,) * k
        if name == "sort":
            half = k // 2
            return (v - 1,) * half + (1,) * half
        if name in ("modular_addition", "modular_multiplication"):
            return (v - 1, v - 1, 1)
        if name == "flipflop":
            return (2,) + (5,) * (k - 1)
        raise Malformed(f"task {name} has no prefix tree")

    def choices(self, prefix: tuple) -> range | tuple:
        v, k, name, i = self.d_vocab, self.n_ctx, self.name, len(prefix)
        if name in ("max_of_k", "min_of_k", "parity", "cyclic"):
            return range(v)
        if name == "sort":  # x_0..x_{h-1} in [0, v−1), the separator v−1, sorted(x)[:h−1]
            half = k // 2
            if i < half:
                return range(v - 1)
            return (v - 1,) if i == half else (sorted(prefix[:half])[i - half - 1],)
        if name in ("modular_addition", "modular_multiplication"):  # a, b, then `=` = p
            return range(v - 1) if i < 2 else (v - 1,)
        if name == "flipflop":  # a write first, then any instruction
            return (W0, W1) if i == 0 else range(5)
        raise Malformed(f"task {name} has no prefix tree")

    def label(self, prefix: tuple) -> int | None:
        """The label at position len(prefix) − 1, or None if that position is not scored."""
        k, name, last = self.n_ctx, self.name, len(prefix) - 1
        if name == "max_of_k":
            return max(prefix) if last == k - 1 else None
        if name == "min_of_k":
            return min(prefix) if last == k - 1 else None
        if name == "sort":  # at positions h..2h−1: sorted(x)[position − h]
            half = k // 2
            return sorted(prefix[:half])[last - half] if last >= half else None
        if name == "modular_addition":
            return (prefix[0] + prefix[1]) % self.param("p") if last == 2 else None
        if name == "modular_multiplication":
            return (prefix[0] * prefix[1]) % self.param("p") if last == 2 else None
        if name in ("parity", "cyclic"):  # the state of Z_n after reading the prefix
            return sum(prefix) % (2 if name == "parity" else self.param("n"))
        if name == "flipflop":  # at a read: the bit of the last write (position 0 is one)
            if prefix[-1] != R:
                return None
            return next(t for t in reversed(prefix) if t in (W0, W1))
        raise Malformed(f"task {name} has no prefix tree")

    def param(self, field: str):
        return dict(self.params)[field]

    # -- counts ---------------------------------------------------------------------
    def inputs(self) -> int:
        """The number of inputs in the domain (rows, for a dataset)."""
        if self.rows is not None:
            return len(self.rows)
        out = 1
        for w in self.widths():
            out *= w
        return out

    def pairs(self) -> int:
        """The number of scored (input, position) pairs: the theorem's denominator.
        Closed forms (each checked against the tree walk in tests/test_tasks.py)."""
        k, name = self.n_ctx, self.name
        if self.rows is not None:
            return len(self.rows)
        if name in ("max_of_k", "min_of_k", "modular_addition", "modular_multiplication"):
            return self.inputs()
        if name == "sort":
            return self.inputs() * (k // 2)
        if name in ("parity", "cyclic"):
            return self.inputs() * k
        if name == "flipflop":  # position i >= 1 is a read in 2·5^(k−2) inputs
            return 2 * 5 ** (k - 2) * (k - 1) if k >= 2 else 0
        raise Malformed(f"unknown task {name}")

    def evaluations(self) -> int:
        """An upper bound on the distinct scored prefixes `queries` yields: the forward
        passes the rule evaluates (charged before it starts)."""
        if self.rows is not None:
            return len(self.rows)
        if self.name == "flipflop":  # prefixes of length L >= 2 ending in a read: 2·5^(L−2)
            return sum(2 * 5 ** (length - 2) for length in range(2, self.n_ctx + 1))
        total, count = 0, 1
        for length, w in enumerate(self.widths(), start=1):
            count *= w
            if self._scored_length(length):
                total += count
        return total

    def _scored_length(self, length: int) -> bool:
        """Can a prefix of this length be scored?"""
        k, name = self.n_ctx, self.name
        if name in ("parity", "cyclic"):
            return True
        if name == "sort":
            return length > k // 2
        return length == k

    # -- the walk -------------------------------------------------------------------
    def queries(self, tick=lambda: None):
        """Yield (prefix, label, pairs) for every scored prefix, in lexicographic order of
        the prefix (a dataset: its rows' prefixes sorted, each row one pair; equal prefixes
        consecutive).  tick() at every node of the tree (the clock)."""
        if self.rows is not None:
            for tokens, _, label in sorted((t[:p + 1], p, lab) for t, p, lab in self.rows):
                tick()
                yield tokens, label, 1
            return
        widths = self.widths()
        after = [1] * (self.n_ctx + 1)  # completions of a prefix of length i: after[i]
        for i in range(self.n_ctx - 1, -1, -1):
            after[i] = after[i + 1] * widths[i]
        stack = [()]
        while stack:
            prefix = stack.pop()
            tick()
            if prefix:
                label = self.label(prefix)
                if label is not None:
                    yield prefix, label, after[len(prefix)]
            if len(prefix) < self.n_ctx:
                options = tuple(self.choices(prefix))
                if len(options) != widths[len(prefix)]:
                    raise Malformed(f"task {self.name}: internal error, {len(options)} "
                                    f"choices where {widths[len(prefix)]} are expected")
                stack.extend(prefix + (t,) for t in reversed(options))

    def describe(self) -> str:
        """The task atoms of the theorem: `task == name and param == value ...`."""
        out = f"task == {self.name}"
        for field, value in self.params:
            out += f" and {field} == " + (f"sha256:{value}" if field == "dataset" else str(value))
        return out


def make_task(name: str, params: dict, d_vocab: int, n_ctx: int,
              dataset_text: str | None = None) -> Task:
    """The task a theorem states, validated against the model's d_vocab and the certified
    n_ctx (Malformed, naming the mismatch, otherwise).  params: field -> value of the
    task's parameter atoms (exactly those PARAMS[name] lists)."""
    if name not in PARAMS:
        raise Malformed(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)}")
    want = set(PARAMS[name])
    if set(params) != want:
        extra, missing = sorted(set(params) - want), sorted(want - set(params))
        raise Malformed(f"task {name} takes parameters {sorted(want) or 'none'}"
                        + (f"; missing {missing}" if missing else "")
                        + (f"; {extra} belong to no parameter of it" if extra else ""))
    v, k = d_vocab, n_ctx

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise Malformed(f"task {name}: {what} (d_vocab = {v}, n_ctx = {k})")

    if name == "sort":
        need(k % 2 == 0 and k >= 2, "needs n_ctx = 2k: k tokens, the separator, k − 1 sorted")
        need(v >= 2, "needs d_vocab >= 2 (the separator is d_vocab − 1)")
    elif name in ("modular_addition", "modular_multiplication"):
        p = params["p"]
        need(p >= 1 and v == p + 1, f"needs d_vocab = p + 1 = {p + 1} (the `=` token is p)")
        need(k == 3, "needs n_ctx = 3 (a b =)")
    elif name == "parity":
        need(v == 2, "needs d_vocab = 2")
    elif name == "cyclic":
        need(params["n"] >= 1 and v == params["n"], "needs d_vocab = n")
    elif name == "flipflop":
        need(v == 5, "needs d_vocab = 5 (W0 W1 I0 I1 R)")
    rows = None
    if name == "dataset":
        if dataset_text is None:
            raise Malformed("a dataset theorem needs the certificate's dataset line "
                            "(spec/format.md §dataset)")
        digest = hashlib.sha256(dataset_text.encode("utf-8")).hexdigest()
        if digest != params["dataset"]:
            raise Malformed(f"the dataset line has sha256:{digest}, the theorem names "
                            f"sha256:{params['dataset']}")
        rows = parse_dataset(dataset_text, v, k)
    ordered = tuple((f, params[f]) for f in PARAMS[name])
    return Task(name, v, k, ordered, rows)


def parse_dataset(text: str, d_vocab: int, n_ctx: int) -> tuple:
    """The rows of a dataset file (spec/format.md §dataset): one row per line, decimal
    integers separated by single spaces, `t_0 … t_{L−1} position label`, every line
    ending in LF; 1 <= L <= n_ctx, 0 <= position < L, tokens and label in [0, d_vocab).
    Anything else is Malformed (with the line number)."""
    if len(text) > MAX_DATASET_BYTES:
        raise Malformed(f"dataset: more than {MAX_DATASET_BYTES} bytes")
    if not text or not text.endswith("\n"):
        raise Malformed("dataset: empty, or the last line does not end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) > MAX_DATASET_ROWS:
        raise Malformed(f"dataset: more than {MAX_DATASET_ROWS} rows")
    rows = []
    for n, line in enumerate(lines, start=1):
        words = line.split(" ")
        if len(words) < 3 or not all(_decimal(w) for w in words):
            raise Malformed(f"dataset line {n}: expected 'tokens... position label' as "
                            "decimal integers separated by single spaces")
        *tokens, position, label = (int(w) for w in words)
        if len(tokens) > n_ctx:
            raise Malformed(f"dataset line {n}: {len(tokens)} tokens, more than n_ctx = {n_ctx}")
        if not position < len(tokens):
            raise Malformed(f"dataset line {n}: position {position} outside the row's "
                            f"{len(tokens)} tokens")
        if max(*tokens, label) >= d_vocab:
            raise Malformed(f"dataset line {n}: a token or label >= d_vocab = {d_vocab}")
        rows.append((tuple(tokens), position, label))
    return tuple(rows)


def _decimal(word: str) -> bool:
    """A decimal integer without sign or leading zeros (ASCII digits only)."""
    return (0 < len(word) <= 12 and all("0" <= c <= "9" for c in word)
            and (word == "0" or word[0] != "0"))


def max_of_k(d_vocab: int, n_ctx: int) -> Task:
    """Today's task (every certificate before tasks existed)."""
    return Task("max_of_k", d_vocab, n_ctx)
