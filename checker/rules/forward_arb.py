"""Rule forward_brute_force in bulk, with Arb balls (python-flint), for `--arith arb`.

The same theorem as forward.py (spec/rules.md §forward_brute_force): every logit of every
sequence is enclosed by evaluating the model's definition from the exact weights, and a
sequence with max m is certified when ℓ_m − ℓ_o > 0 holds for every real of every
enclosure, o ≠ m (a tie is never certified).  Only the evaluation order differs: the
sequences of a chunk are the rows of one matrix, and every product of the forward pass is
ONE `arb_mat_mul` over the chunk (rigorous: FLINT's arb_mat methods other than
`arb_mat_approx_*` "compute rigorous error bounds"); elementwise steps are Arb's rigorous
ball functions (+ − × ÷, sqrt, exp), applied entry by entry.

Soundness (spec/arithmetic.md §Bulk forward pass): every value is a ball containing the
exact real value of the same expression for every choice of reals in its inputs (the
inclusion principle of ball arithmetic, applied step by step: a composition of enclosures
is an enclosure).  The steps:

- tables per (position i, token t), computed once: the residual stream before the block,
  its LayerNorm, and per head the queries, keys (rotated, for RoPE, entry by entry as
  forward._rotate, with the recorded cos/sin enclosures) and values.  In a one-layer
  causal model a key or value at position i depends only on t_i, so this is each input
  prefix's shared work; the attention scores of the last position against position i are
  the table (Q_last · K_iᵀ)·(1/√d_head), v × v per head.
- per sequence: the scores are table entries; softmax as forward.py (shift by an exact
  point, the largest lower end: any real shift leaves softmax unchanged; Arb exp through
  ArbArithmetic.exp with the checker's argument limits; divide by the sum);
  z_head = Σ_i a_i·V_i[t_i].
- per chunk, in bulk: Z·W_O, the MLP's two products and the unembedding.
- LayerNorm / RMSNorm per row: mean, centring, squares intersected with [0, ∞) (every t²
  is >= 0, so x·x ∩ [0, ∞) still contains t² for every t in x), and 1/sqrt(variance + ε)
  as the hull of arb_rsqrt at the variance's two ends (decreasing; inv_scale); a NaN
  anywhere certifies nothing (every Arb comparison with NaN is false): fail closed.
- ReLU: exact on the ends: x itself if x >= 0, 0 if x <= 0, else a ball ⊇ [0, sup x].
  The smooth activations: a narrow ball (radius <= 2^-40) by composing Arb's rigorous
  functions (erfc, exp, ÷; `smooth`); a wider one is converted outward to an mpmath
  interval, enclosed by elementary.activation_interval (the reference's own piecewise
  enclosure) and converted back exactly.

Any task (forward.py; checker/tasks.py): the scored prefixes come in chunks of equal
length L with their labels; the query position is L − 1 and its score tables
(Q_{L−1} · K_iᵀ)·(1/√d_head), i < L, are built on first use (held before they are built);
the count adds, for every label of every prefix whose enclosures prove it, the pairs
that prefix stands for.

Cost and limits: the same work is charged as forward.py (check, the tables, and
PIECE_COST per smooth activation piece, a composition counting as one piece); the tables
and one chunk's working set are charged to the memory limit before they are built (hold);
the clock is checked at every chunk and every table row.
"""

from __future__ import annotations

import itertools

from mpmath import iv
from mpmath.libmp import from_man_exp, round_ceiling, round_floor

from .. import elementary
from ..numbers import WORKING_PRECISION
from .forward import PIECE_COST

CHUNK_ELEMENTS = 1 << 17  # entries of the widest matrix of a chunk (rows × width)
# A smooth activation of a ball of radius at most 2^-NARROW_BITS is enclosed by composing
# Arb's functions (the dependency costs a small multiple of that radius); a wider ball by the
# reference's piecewise-monotone enclosure (elementary.activation_interval).
NARROW_BITS = 40


def chunk_rows(dims) -> int:
    """Sequences per chunk: the widest per-sequence row fits CHUNK_ELEMENTS."""
    f = dims.family
    width = max(dims.d_model, f.d_mlp, dims.d_vocab, f.n_heads * dims.d_head)
    return max(1, CHUNK_ELEMENTS // width)


def working_elements(dims) -> int:
    """Elements alive at once beyond forward.table_elements: the score tables (n·k·v²), the
    matrix copies of W_O, W_U, W_in, W_out, and one chunk's matrices (residual, normed,
    products, MLP, logits, z; each row-wide)."""
    f, v, k, d = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model
    rows = min(chunk_rows(dims), v ** k)
    per_row = 6 * d + 3 * f.d_mlp + 2 * v + 2 * f.n_heads * dims.d_head
    weights = f.n_heads * dims.d_head * d + d * v + 2 * d * f.d_mlp
    return f.n_heads * k * v * v + weights + rows * per_row


def certified_task_count(dims, m, charge, ar, task) -> tuple[int, int]:
    """(certified pairs, distinct prefixes evaluated) of `task`, as forward.certified_task_count:
    the prefixes of each length are gathered into chunks (with the labels and pair counts
    of each) and evaluated in bulk."""
    from ..certificate import hold
    from .forward import _Evaluations, table_cost, table_elements

    charge(table_cost(dims))
    hold(charge, table_elements(dims) + working_elements(dims), "forward tables (bulk)")
    model, budget = _BulkModel(dims, m, ar, charge), _Evaluations(task, dims, charge)
    rows = chunk_rows(dims)
    buffers: dict[int, list] = {}  # prefix length -> [(prefix, [(label, pairs), ...]), ...]
    last, evaluated, total = None, 0, 0
    for prefix, label, pairs in task.queries(lambda: charge(0)):
        if prefix == last:  # the queries of one prefix are consecutive: evaluated once
            buffers[len(prefix)][-1][1].append((label, pairs))
            continue
        budget.spend()
        evaluated += 1
        last = prefix
        buffer = buffers.setdefault(len(prefix), [])
        if len(buffer) == rows:  # every entry is complete: the new prefix differs from them
            total += model.certified_pairs_in(buffer)
            buffer.clear()
        buffer.append((prefix, [(label, pairs)]))
    for buffer in buffers.values():
        if buffer:
            total += model.certified_pairs_in(buffer)
    return total, evaluated


def certified_count(dims, m, charge, ar) -> int:
    """The number of sequences whose enclosures prove them correct (as forward.check)."""
    from ..certificate import hold
    from .forward import table_cost, table_elements

    charge(table_cost(dims))  # as forward._Model: the same proof length in every back-end
    hold(charge, table_elements(dims) + working_elements(dims), "forward tables (bulk)")
    model = _BulkModel(dims, m, ar, charge)
    v, k = dims.d_vocab, dims.n_ctx
    sequences = itertools.product(range(v), repeat=k)
    rows, total = chunk_rows(dims), 0
    while True:
        charge(0)  # the clock, at every chunk
        chunk = list(itertools.islice(sequences, rows))
        if not chunk:
            return total
        total += model.certified_in(chunk)


class _BulkModel:
    """The forward pass of forward._Model, over a chunk of sequences at once."""

    def __init__(self, dims, m, ar, charge):
        self.dims, self.f, self.m, self.ar, self.charge = dims, dims.family, m, ar, charge
        self.tick = tick = lambda: charge(0)  # the clock
        self.arb, self.mat, self.zero = ar.arb, ar.arb_mat, ar.zero
        f, v, k, d, h = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
        self.scale = ar.inv_sqrt(h)
        # residual stream before the block at position i, token t: resid0[i] (v × d, flat)
        self.resid0 = []
        for i in range(k):
            tick()
            rows = [[a + b for a, b in zip(m["W_E"][t], m["W_pos"][i])]
                    if f.positional == "standard" else list(m["W_E"][t]) for t in range(v)]
            self.resid0.append([x for row in rows for x in row])
        normed = [self.mat(v, d, self.norm_rows("ln1", flat, d)) for flat in self.resid0]
        self.keys_last = []  # per head: the score tables, [i] -> v × v (t_last, t_i) flat
        self.values = []  # per head: [i] -> v rows of h values
        self.q, self.key = [], []  # per head: [i] -> v × h (for the other query positions)
        for j in range(f.n_heads):
            q, key, val = ([self.project(x, name, j) for x in normed] for name in "QKV")
            if f.positional == "rotary":
                q = [self.rotate(x, i) for i, x in enumerate(q)]
                key = [self.rotate(x, i) for i, x in enumerate(key)]
            tick()
            self.keys_last.append([(q[k - 1] * key[i].transpose() * self.scale).entries()
                                   for i in range(k)])
            self.values.append([_rows(x.entries(), h) for x in val])
            self.q.append(q)
            self.key.append(key)
        self.tables = {k - 1: self.keys_last}  # query position -> per head score tables
        self.w_o, self.w_u = self.mat(m["W_O"]), self.mat(m["W_U"])
        if f.d_mlp:
            self.w_in, self.w_out = self.mat(m["W_in"]), self.mat(m["W_out"])

    # -- tables -----------------------------------------------------------------------
    def project(self, x, name: str, head: int):
        """x · W_name[head] + b_name[head] for the v × d table x."""
        d = self.dims.d_model
        self.tick()
        w = self.mat(self.m["W_" + name][head * d:(head + 1) * d])
        bias = self.m["b_" + name][head]
        out = (x * w).entries()
        return self.mat(x.nrows(), len(bias), _add_row(out, bias))

    def rotate(self, x, i: int):
        """forward._rotate (rotate-half RoPE at position i) on every row of the table x,
        entry by entry with the recorded cos/sin enclosures: the same expressions,
        a·cos − b·sin and b·cos + a·sin, in ball arithmetic (4 operations per pair)."""
        h, half = self.dims.d_head, self.f.rotary_dim // 2
        cos_row, sin_row = self.m["ROPE_COS"][i], self.m["ROPE_SIN"][i]
        rows = _rows(x.entries(), h)
        for row in rows:
            for j in range(half):
                a, b = row[j], row[j + half]
                row[j] = a * cos_row[j] - b * sin_row[j]
                row[j + half] = b * cos_row[j] + a * sin_row[j]
        self.tick()
        return self.mat(rows)

    def scores_at(self, position: int) -> list:
        """Per head, the score tables of the query at `position`: [i] -> v × v (t_position,
        t_i) flat, i <= position; built on first use, held before they are built."""
        if position not in self.tables:
            from ..certificate import hold

            v = self.dims.d_vocab
            hold(self.charge, self.f.n_heads * (position + 1) * v * v,
                 f"score tables at position {position}")
            self.tables[position] = [
                [(q[position] * key[i].transpose() * self.scale).entries()
                 for i in range(position + 1)] for q, key in zip(self.q, self.key)]
        return self.tables[position]

    # -- per chunk ----------------------------------------------------------------------
    def certified_in(self, chunk: list) -> int:
        """How many sequences of the chunk the enclosures prove correct."""
        return self.count(self.logit_rows(chunk), chunk)

    def certified_pairs_in(self, entries: list) -> int:
        """entries: [(prefix, [(label, pairs), ...])], prefixes of one length.  The pairs of
        every label whose ℓ_label − ℓ_o > 0 is proven for every o ≠ label."""
        zero, total = self.zero, 0
        for row, (_, labels) in zip(self.logit_rows([p for p, _ in entries]), entries):
            for label, pairs in labels:
                best = row[label]
                if all((best - x) > zero for o, x in enumerate(row) if o != label):
                    total += pairs
        return total

    def logit_rows(self, chunk: list) -> list:
        """The logit enclosures (rows of d_vocab balls) at the last position of each token
        tuple of the chunk (all of one length)."""
        f, d, n, m = self.f, self.dims.d_model, len(chunk), self.m
        last = len(chunk[0]) - 1
        x = [e for tokens in chunk for e in self.resid0[last][tokens[-1] * d:(tokens[-1] + 1) * d]]
        z = self.attention_z(chunk)
        self.tick()
        attn = (self.mat(n, len(z) // n, z) * self.w_o).entries()
        resid = _add_row([a + b for a, b in zip(x, attn)], m["b_O"][0])
        if f.d_mlp:
            mlp = self.mlp(x if f.parallel else resid, n)
            resid = [a + b for a, b in zip(resid, mlp)]
        self.tick()
        logits = (self.mat(n, d, self.norm_rows("ln_final", resid, d)) * self.w_u).entries()
        return _rows(_add_row(logits, m["b_U"][0]), self.dims.d_vocab)

    def attention_z(self, chunk: list) -> list:
        """Per token tuple (all of one length L), per head: z = Σ_i softmax(scores)_i ·
        V_i[t_i] with the query at position L − 1 (flat, n × (H·h))."""
        ar, v, k = self.ar, self.dims.d_vocab, len(chunk[0])
        tables = self.scores_at(k - 1)
        out = []
        for tokens in chunk:
            last = tokens[-1] * v
            for table, values in zip(tables, self.values):
                scores = [table[i][last + t] for i, t in enumerate(tokens)]
                shift = max(s.lower() for s in scores)  # an exact point
                weights = [ar.exp(s - shift) for s in scores]
                total = sum(weights[1:], weights[0])
                z = None
                for i, t in enumerate(tokens):
                    a = weights[i] / total
                    terms = [a * e for e in values[i][t]]
                    z = terms if z is None else [p + q for p, q in zip(z, terms)]
                out.extend(z)
            if k > 1:
                self.tick()
        return out

    def mlp(self, x: list, n: int) -> list:
        f, m, d = self.f, self.m, self.dims.d_model
        self.tick()
        pre = (self.mat(n, d, self.norm_rows("ln2", x, d)) * self.w_in).entries()
        hidden = self.activate(_add_row(pre, m["b_in"][0]))
        self.tick()
        out = (self.mat(n, f.d_mlp, hidden) * self.w_out).entries()
        return _add_row(out, m["b_out"][0])

    def count(self, logits: list, chunk: list) -> int:
        """Sequences whose every ℓ_top − ℓ_o (o ≠ top) is > 0 for every real (arb_gt)."""
        zero, total = self.zero, 0
        for row, tokens in zip(logits, chunk):
            top = max(tokens)
            best = row[top]
            if all((best - x) > zero for o, x in enumerate(row) if o != top):
                total += 1
        return total

    # -- elementwise --------------------------------------------------------------------
    def norm_rows(self, which: str, flat: list, d: int) -> list:
        """The family's normalization of every row (length d) of the flat list."""
        kind = self.f.normalization
        if kind is None:
            return flat
        w = self.m[which + ".w"][0] if kind in ("LN", "RMS") else None
        b = self.m[which + ".b"][0] if kind == "LN" else None
        eps, out = self.arb(self.f.ln_eps), []  # ε: a binary64, exact
        for start in range(0, len(flat), d):
            out.extend(self.norm_row(flat[start:start + d], kind in ("LN", "LNPre"), eps, w, b))
        return out

    def norm_row(self, x: list, centre: bool, eps, w, b) -> list:
        """As forward.layer_norm / rms_norm: c = x − mean(x) (LN), y = c · (mean(c²) + ε)^(-1/2),
        then · w (+ b)."""
        zero, n = self.zero, len(x)
        if centre:
            mean = sum(x, zero) / n
            x = [a - mean for a in x]
        var = sum(((a * a).nonnegative_part() for a in x), zero) / n
        inv = self.inv_scale(var, eps)
        y = [a * inv for a in x]
        if w is None:
            return y
        if b is None:
            return [a * c for a, c in zip(y, w)]
        return [a * c + e for a, c, e in zip(y, w, b)]

    def inv_scale(self, var, eps):
        """A ball containing 1/sqrt(V + ε) for every V >= 0 in the ball var: t ↦ (t + ε)^(-1/2)
        is decreasing, so its range over [max(inf var, 0), sup var] is the hull of its values
        at the two (exact) ends, each enclosed by arb_rsqrt (argument >= ε > 0).  Taking the
        ends one by one keeps the lower end of a wide var (an exact point) from dropping
        below 0 by the ball's radius rounding (which would make sqrt NaN)."""
        low = max(var.lower(), self.zero)
        small, large = (var.upper() + eps).rsqrt(), (low + eps).rsqrt()
        return small.union(large)

    def activate(self, xs: list) -> list:
        act = self.f.act_fn
        if act == "relu":
            zero = self.zero
            return [x if x >= zero else zero if x <= zero else
                    zero.union(x.upper()).nonnegative_part() for x in xs]
        smooth, narrow, out, composed = self.smooth(act), self.arb((1, -NARROW_BITS)), [], 0

        def piece():
            self.charge(PIECE_COST)

        for x in xs:
            if x.is_finite() and x.rad() <= narrow:
                out.append(smooth(x))
                composed += 1
            else:
                out.append(self._from_iv(elementary.activation_interval(act, self._to_iv(x),
                                                                           piece)))
        # as forward.activate, PIECE_COST per piece examined; a composition counts as one
        # piece (the reference's count for a narrow interval inside one monotone piece)
        self.charge(PIECE_COST * composed)
        return out

    def smooth(self, act: str):
        """The smooth activation f(x) = x·g(x) as a composition of Arb ball functions
        (spec/rules.md §Activations for the definitions): gelu x·erfc(−x/√2)/2 (= x(1 +
        erf(x/√2))/2), silu x/(1 + e^(−x)), the tanh forms x/(1 + e^(−u)) with
        u = 2k(x + c x³) (= x(1 + tanh(u/2))/2), k = √(2/π) (gelu_new) or the rational
        0.7978845608 (gelu_fast), c the rational 0.044715.  Every step is a rigorous ball
        operation, so the result contains f(t) for every t in x; for a narrow ball the
        dependency on x (which appears twice) costs only a small multiple of its radius."""
        arb = self.arb
        if act == "gelu":
            inv_sqrt2 = arb(2).rsqrt()
            return lambda x: x * (-x * inv_sqrt2).erfc() / 2
        if act == "silu":
            return lambda x: x / (1 + (-x).exp())
        # arb(p) / q: a ball containing the exact rational p/q (arb_div is rigorous)
        k = (2 / arb.pi()).sqrt() if act == "gelu_new" else arb(7978845608) / 10 ** 10
        c, two_k = arb(44715) / 10 ** 6, 2 * k
        return lambda x: x / (1 + (-(two_k * (x + c * x * x * x))).exp())

    def _to_iv(self, x):
        """An mpmath interval containing the ball x (its exact ends, rounded outward)."""
        lo, hi = (_mpf(e, r) for e, r in ((x.lower(), round_floor), (x.upper(), round_ceiling)))
        return iv.make_mpf((lo, hi))

    def _from_iv(self, x):
        """The ball of the interval x (its ends are exact dyadics: arb((man, exp)) is exact)."""
        lo, hi = (self.arb(_man_exp(e)) for e in x._mpi_)
        return lo if lo == hi else lo.union(hi)


def _mpf(point, rounding):
    """The exact arb point as a raw mpf at the working precision, rounded as asked."""
    if not point.is_finite():
        raise ArithmeticError("a non-finite value reached an activation")
    man, exp = point.man_exp()
    return from_man_exp(int(man), int(exp), WORKING_PRECISION, rounding)


def _man_exp(value) -> tuple[int, int]:
    sign, man, exp, _ = value
    if man == 0 and exp != 0:
        raise ArithmeticError("a non-finite value from an activation")
    return (-man if sign else man, exp)


def _rows(flat: list, width: int) -> list:
    return [flat[i:i + width] for i in range(0, len(flat), width)]


def _add_row(flat: list, row: list) -> list:
    """Add the vector `row` to every row of the flat matrix (rows of len(row))."""
    width = len(row)
    return [x + row[i % width] for i, x in enumerate(flat)]
