"""Rule forward_brute_force: every sequence's full forward pass, over intervals.

Theorem (spec/rules.md §forward_brute_force).  For every model of a family in
spec/theorem.md §1 and every sequence t, the rule computes an interval
enclosure of each logit ℓ_o(t) by evaluating the model's definition (§2)
with outward-rounded interval arithmetic from the exact weights: LayerNorm
with the checker's own rigorous sqrt (elementary.py), softmax with its own exp
(numbers.py), RoPE with the enclosed cos/sin tables ROPE_COS/ROPE_SIN (op lines
checked against elementary.rope_table), ReLU exactly.  A sequence with max m is
certified when the lower end of ℓ_m − ℓ_o is > 0 for every o ≠ m; the rule
proves the number of certified sequences.  Every enclosure contains the true
real value, so a certified sequence is correct (a tie is never certified).

Any task (checker/tasks.py, spec/theorem.md §3): a scored pair (input t, position p) with
label y is certified when ℓ_y − ℓ_o > 0 for every o ≠ y at the last position of the prefix
t[:p+1] (the model is causal: those are the logits at position p of t).  The task walks
its prefixes in lexicographic order and each distinct prefix is evaluated once, however
many pairs it stands for (every completion of it in the domain, and every row of a
dataset with that prefix); the per-(position, token) tables are shared by all.

Cost: (distinct scored prefixes, Task.evaluations: d_vocab^n_ctx for max_of_k) ·
(per-sequence work, `_sequence_cost`) interval operations.
Memory: the per-(position, token) tables of `table_elements`, charged to the memory
limit before they are built; the clock is checked at every table row and every
element of a product (as in op matmul) and every sequence.
"""

from __future__ import annotations

import itertools

from mpmath import iv

from .. import elementary, ops
from ..elementary import sqrt_interval, square_interval
from ..errors import Malformed
from ..modelspec import parameter_table
from ..numbers import exp_interval, inv_sqrt_interval

ROPE_INPUTS = ("ROPE_COS", "ROPE_SIN")
# Back-ends (spec/arithmetic.md): mpmath evaluates sequence by sequence (the reference);
# arb evaluates chunks of sequences in bulk (forward_arb.py), with the same theorem.
ARITHMETICS = ("mpmath", "arb")
_ZERO = iv.mpf(0)
_EXP_COST = 50  # as ops.COST["exp"]
ANY_TASK = True  # certifies every task of checker/tasks.py (the decomposition rules: max_of_k)


def inputs(dims, hints=None) -> tuple[str, ...]:
    """Every weight of the family (by short name), and the RoPE tables if rotary."""
    names = tuple(p.short for p in parameter_table(dims.family))
    return names + (ROPE_INPUTS if dims.family.positional == "rotary" else ())


def _sequence_cost(dims) -> int:
    f, k, d, h, v = dims.family, dims.n_ctx, dims.d_model, dims.d_head, dims.d_vocab
    attn = f.n_heads * (2 * k * h + k * _EXP_COST + h * d)
    return attn + (2 * d + activation_cost(f.act_fn)) * f.d_mlp + d * v + 20 * d + v


def activation_cost(act_fn: str) -> int:
    """Interval operations charged up front per activation (1); a smooth activation also
    charges PIECE_COST per piece it examines, as it runs (activate)."""
    return 1


PIECE_COST = 40  # interval operations of one piece of a smooth activation (exp, erf, slope)


def table_cost(dims) -> int:
    """Interval operations charged for the per-(position, token) tables (either back-end)."""
    f, v, k, d, h = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    return f.n_heads * 3 * v * k * d * h + v * k * 20 * d


def table_elements(dims) -> int:
    """The elements of _Model's tables: the residual stream and its LayerNorm (k·v·d
    each) and, per head, queries, keys and values (k·v·h each), plus one more k·v·h
    table while a rotary model's queries or keys are rotated."""
    f, v, k, d, h = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    rotating = k * v * h if f.positional == "rotary" else 0
    return 2 * k * v * d + 3 * f.n_heads * k * v * h + rotating


def check(dims, m, hints, charge, jobs=1, arith=None, task=None):
    if hints is not None:
        raise Malformed("rule forward_brute_force takes no hints")
    v, k = dims.d_vocab, dims.n_ctx
    if task is None or task.name == "max_of_k":  # every sequence, at its last position
        charge(v ** k * _sequence_cost(dims))  # the same work whatever the back-end
        if arith is not None and arith.name == "arb":
            from . import forward_arb

            certified = forward_arb.certified_count(dims, m, charge, arith)
        else:
            certified = sum(1 for _ in certified_sequences(dims, m, charge))
        return certified, f"{certified} of {v ** k} sequences certified correct (full forward pass)"
    charge(task.evaluations() * _sequence_cost(dims))  # every prefix the walk may evaluate
    if arith is not None and arith.name == "arb":
        from . import forward_arb

        certified, evaluated = forward_arb.certified_task_count(dims, m, charge, arith, task)
    else:
        certified, evaluated = certified_task_count(dims, m, charge, task)
    return certified, (f"{certified} of {task.pairs()} (input, position) pairs of task "
                       f"{task.name} certified correct (full forward pass; {evaluated} "
                       "distinct prefixes evaluated)")


def certified_sequences(dims, m, charge):
    """Yield every sequence (a tuple of tokens) the enclosures prove correct."""
    model = _Model(dims, m, charge)
    for tokens in itertools.product(range(dims.d_vocab), repeat=dims.n_ctx):
        charge(0)  # the time limit: one sequence may cost ~max-elements operations
        if _certified(model.logits(tokens), max(tokens)):
            yield tokens


def certified_pairs(dims, m, charge, task):
    """Yield (prefix, label, pairs) for every scored prefix of `task` whose label the
    enclosures prove correct (Task.queries's order); each distinct prefix is evaluated
    once (the queries of one prefix are consecutive)."""
    model, budget = _Model(dims, m, charge), _Evaluations(task, dims, charge)
    last, logits = None, None
    for prefix, label, pairs in task.queries(lambda: charge(0)):
        if prefix != last:
            budget.spend()
            last, logits = prefix, model.logits(prefix)
        if _certified(logits, label):
            yield prefix, label, pairs


def certified_task_count(dims, m, charge, task) -> tuple[int, int]:
    """(certified pairs, distinct prefixes evaluated) of `task` (mpmath, prefix by prefix,
    as certified_pairs)."""
    model, budget = _Model(dims, m, charge), _Evaluations(task, dims, charge)
    last, logits, evaluated, total = None, None, 0, 0
    for prefix, label, pairs in task.queries(lambda: charge(0)):
        if prefix != last:
            budget.spend()
            evaluated += 1
            last, logits = prefix, model.logits(prefix)
        if _certified(logits, label):
            total += pairs
    return total, evaluated


class _Evaluations:
    """check charged task.evaluations() forward passes before the walk; a pass beyond
    them (none for a correct Task.evaluations) is charged when it happens."""

    def __init__(self, task, dims, charge):
        self.left, self.cost, self.charge = task.evaluations(), _sequence_cost(dims), charge

    def spend(self) -> None:
        self.left -= 1
        self.charge(self.cost if self.left < 0 else 0)


def _certified(logits: list, top: int) -> bool:
    """ℓ_top − ℓ_o > 0 for every o ≠ top, for every real in the enclosures."""
    return all((logits[top] - x > _ZERO) is True for o, x in enumerate(logits) if o != top)


# --- interval vector helpers (a vector is a list of iv.mpf) -------------------

def _vecmat(x: list, mat: list, tick=lambda: None) -> list:
    """Row vector x (length n) times matrix (n × c), exactly then rounded once; tick()
    at every element (the clock)."""
    return ops.matmul([x], mat, tick)[0]


def _add(x: list, y: list) -> list:
    return [a + b for a, b in zip(x, y)]


def _relu(x: list) -> list:
    """max(t, 0) over each interval: exact on the endpoints."""
    return [iv.mpf((max(a.a, 0), max(a.b, 0))) if a.a < 0 else a for a in x]


def activate(act_fn: str, x: list, charge=lambda work: None) -> list:
    """The family's MLP activation over each interval (spec/rules.md §Activations):
    ReLU exactly on the endpoints, the smooth ones by elementary.activation_interval,
    charging PIECE_COST per piece examined (work and the clock)."""
    if act_fn == "relu":
        return _relu(x)

    def piece():
        charge(PIECE_COST)

    return [elementary.activation_interval(act_fn, a, piece) for a in x]


def layer_norm(x: list, eps: float, w: list | None, b: list | None) -> list:
    """TransformerLens LayerNorm over the vector x (LNPre when w, b are None):
    c = x − mean(x);  y = c / sqrt(mean(c²) + eps) (· w + b).
    Each step encloses its exact real result (sqrt by elementary.sqrt_interval);
    the scale is > 0 since eps > 0."""
    n = len(x)
    mean = iv.fsum(x) / n
    c = [a - mean for a in x]
    var = iv.fsum(square_interval(a) for a in c) / n
    scale = sqrt_interval(var + iv.mpf(eps))
    y = [a / scale for a in c]
    if w is None:
        return y
    return [a * wi + bi for a, wi, bi in zip(y, w, b)]


def rms_norm(x: list, eps: float, w: list | None) -> list:
    """TransformerLens RMSNorm over the vector x (RMSPre when w is None):
    y = x / sqrt(mean(x²) + eps) (· w).  As layer_norm, without the centring and bias."""
    scale = sqrt_interval(iv.fsum(square_interval(a) for a in x) / len(x) + iv.mpf(eps))
    y = [a / scale for a in x]
    return y if w is None else [a * wi for a, wi in zip(y, w)]


def _rotate(x: list, cos_row: list, sin_row: list, rotary_dim: int) -> list:
    """TransformerLens rotate-half RoPE of one query/key vector at one position:
    for j < r/2, (x_j, x_{j+r/2}) -> (x_j cos − x_{j+r/2} sin, x_{j+r/2} cos + x_j sin);
    coordinates from rotary_dim on pass through."""
    half = rotary_dim // 2
    out = list(x)
    for j in range(half):
        a, b = x[j], x[j + half]
        out[j] = a * cos_row[j] - b * sin_row[j]
        out[j + half] = b * cos_row[j] + a * sin_row[j]
    return out


class _Model:
    """The family's forward pass, with the per-(position, token) tables of the
    attention inputs computed once."""

    def __init__(self, dims, m, charge):
        from ..certificate import hold

        f = dims.family
        self.dims, self.f, self.m = dims, f, m
        v, k, h = dims.d_vocab, dims.n_ctx, dims.d_head
        charge(table_cost(dims))
        hold(charge, table_elements(dims), "forward tables")
        self.tick = lambda: charge(0)  # the clock, at every row and product element
        self.charge = charge
        self.scale = inv_sqrt_interval(h)
        # residual stream before the block, at position i with token t: row [i][t]
        self.resid0 = [[_add(m["W_E"][t], m["W_pos"][i]) if f.positional == "standard"
                        else list(m["W_E"][t]) for t in self.ticking(range(v))]
                       for i in range(k)]
        normed = [[self.norm("ln1", x) for x in self.ticking(row)] for row in self.resid0]
        self.q, self.key, self.val = [], [], []  # per head: [i][t] -> vector
        for j in range(f.n_heads):
            q, key, val = ([[self.project(x, name, j) for x in row] for row in normed]
                           for name in "QKV")
            if f.positional == "rotary":
                q = [[self.rotate(x, i) for x in self.ticking(row)] for i, row in enumerate(q)]
                key = [[self.rotate(x, i) for x in self.ticking(row)]
                       for i, row in enumerate(key)]
            self.q.append(q)
            self.key.append(key)
            self.val.append(val)
        w_o = m["W_O"]
        self.w_o = [w_o[j * h:(j + 1) * h] for j in range(f.n_heads)]

    def ticking(self, row: list):
        """The vectors of a table row, checking the clock before each."""
        for x in row:
            self.tick()
            yield x

    def norm(self, which: str, x: list) -> list:
        if self.f.normalization is None:
            return x
        if self.f.normalization == "LNPre":
            return layer_norm(x, self.f.ln_eps, None, None)
        if self.f.normalization == "RMSPre":
            return rms_norm(x, self.f.ln_eps, None)
        if self.f.normalization == "RMS":
            return rms_norm(x, self.f.ln_eps, self.m[which + ".w"][0])
        return layer_norm(x, self.f.ln_eps, self.m[which + ".w"][0], self.m[which + ".b"][0])

    def project(self, x: list, name: str, head: int) -> list:
        """x W_name[head] + b_name[head]."""
        d = self.dims.d_model
        w = self.m["W_" + name][head * d:(head + 1) * d]
        return _add(_vecmat(x, w, self.tick), self.m["b_" + name][head])

    def rotate(self, x: list, i: int) -> list:
        return _rotate(x, self.m["ROPE_COS"][i], self.m["ROPE_SIN"][i], self.f.rotary_dim)

    def attention(self, tokens) -> list:
        """Σ_heads z_head W_O[head] + b_O at the last position."""
        last = len(tokens) - 1
        out = list(self.m["b_O"][0])
        for j in range(self.f.n_heads):
            query = self.q[j][last][tokens[last]]
            keys = [self.key[j][i][t] for i, t in enumerate(tokens)]
            scores = [s * self.scale for s in _vecmat(query, ops.transpose(keys), self.tick)]
            shift = max(s.a for s in scores)  # any real shift leaves softmax unchanged
            weights = [exp_interval(s - shift) for s in scores]
            total = iv.fsum(weights)
            attn = [w / total for w in weights]
            z = _vecmat(attn, [self.val[j][i][t] for i, t in enumerate(tokens)], self.tick)
            out = _add(out, _vecmat(z, self.w_o[j], self.tick))
        return out

    def mlp(self, x: list) -> list:
        m = self.m
        hidden = activate(self.f.act_fn, _add(_vecmat(self.norm("ln2", x), m["W_in"],
                                                       self.tick), m["b_in"][0]), self.charge)
        return _add(_vecmat(hidden, m["W_out"], self.tick), m["b_out"][0])

    def logits(self, tokens) -> list:
        x = self.resid0[len(tokens) - 1][tokens[-1]]
        resid = _add(x, self.attention(tokens))
        if self.f.d_mlp:
            resid = _add(resid, self.mlp(x if self.f.parallel else resid))
        return _add(_vecmat(self.norm("ln_final", resid), self.m["W_U"], self.tick),
                    self.m["b_U"][0])
