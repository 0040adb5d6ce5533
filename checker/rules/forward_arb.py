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
- per chunk, in bulk: Z·W_O, the MLP's two products (three with a gated MLP:
  (φ(y·W_gate) ⊙ (y·W_in) + b_in)·W_out + b_out, as forward._Model.mlp) and the unembedding.
- several layers (deep_rows): a later layer's keys and values depend on the whole prefix, so
  the rows of a chunk are its tuples' distinct prefixes (causality); per layer the norm,
  Q/K/V (products; RoPE per row at its position), each row's causal attention over its own
  chain of prefixes, W_O, the MLP and the residual; then ln_final and W_U at the tuples'
  last positions.  The work charged replays the reference's memoised path (_Path).
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
import math

from mpmath import iv
from mpmath.libmp import from_man_exp, round_ceiling, round_floor

from .. import elementary
from ..modelspec import layer_short
from ..numbers import WORKING_PRECISION
from .forward_model import PIECE_COST

CHUNK_ELEMENTS = 1 << 17  # entries of the widest matrix of a chunk (rows × width)
# A smooth activation of a ball of radius at most 2^-NARROW_BITS is enclosed by composing
# Arb's functions (the dependency costs a small multiple of that radius); a wider ball by the
# reference's piecewise-monotone enclosure (elementary.activation_interval).
NARROW_BITS = 40


def chunk_rows(dims) -> int:
    """Sequences per chunk: the widest per-sequence row fits CHUNK_ELEMENTS (with several
    layers a sequence is n_ctx rows, one per position)."""
    f = dims.family
    width = max(dims.d_model, f.d_mlp, dims.d_vocab, f.n_heads * dims.d_head)
    positions = dims.n_ctx if f.n_layers > 1 else 1
    return max(1, CHUNK_ELEMENTS // (width * positions))


def working_elements(dims, rows: int | None = None) -> int:
    """Elements alive at once beyond forward.table_elements: the score tables (n·k·v²), the
    matrix copies of the weights (per layer W_O, W_in, W_out, W_gate, and with several
    layers W_Q, W_K, W_V; W_U), and one chunk's matrices (residual, normed, products, MLP,
    logits, z; each row-wide; with several layers every position of a sequence is a row,
    also holding its queries, keys, values and attention scores); rows: sequences per chunk
    (default chunk_rows)."""
    f, v, k, d, h = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    deep = f.n_layers > 1
    mlp = (3 if f.gated_mlp else 2) * d * f.d_mlp
    per_layer = f.n_heads * h * d + mlp + (3 * f.n_heads * d * h if deep else 0)
    weights = f.n_layers * per_layer + d * v
    rows = min(rows or chunk_rows(dims), v ** k) * (k if deep else 1)
    per_row = 6 * d + 4 * f.d_mlp + 2 * v + 2 * f.n_heads * h
    if deep:
        per_row += 3 * f.n_heads * h + 2 * f.n_heads * k
    tables = 0 if deep else f.n_heads * k * v * v
    return tables + weights + rows * per_row


class _Path:
    """The positions forward._Model would compute and charge (position_cost each) for a
    several-layer family: its memoised path, replayed on the token tuples alone, in the
    order the reference evaluates them, so that the work charged is the reference's."""

    def __init__(self, dims, charge):
        from .forward_model import position_cost

        self.tokens, self.charge, self.work = [], charge, position_cost(dims)

    def visit(self, tokens) -> int:
        """forward._Model.state's path update for `tokens`; charges the positions it
        computes and returns the first of them (len(tokens) if none)."""
        n, path = len(tokens), self.tokens
        common = 0
        while common < min(n, len(path)) and path[common] == tokens[common]:
            common += 1
        if common < min(n, len(path)) or common < n:
            del path[common:]
        first = len(path) if len(path) < n else n
        self.charge(self.work * (n - first))
        path.extend(tokens[first:n])
        return first


def certified_task_count(dims, m, charge, ar, task) -> tuple[int, int]:
    """(certified pairs, distinct prefixes evaluated) of `task`, as forward.certified_task_count:
    the prefixes of each length are gathered into chunks (with the labels and pair counts
    of each) and evaluated in bulk."""
    from ..certificate import hold
    from .forward_model import _Evaluations, table_cost, table_elements

    charge(table_cost(dims))
    hold(charge, table_elements(dims) + working_elements(dims), "forward tables (bulk)")
    model, budget = _BulkModel(dims, m, ar, charge), _Evaluations(task, dims, charge)
    path = _Path(dims, charge) if dims.family.n_layers > 1 else None
    rows = chunk_rows(dims)
    # prefix length -> [(prefix, [(label, pairs), ...], first position charged), ...]
    buffers: dict[int, list] = {}
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
        first = path.visit(prefix) if path else 0  # the reference's path work, in its order
        buffer.append((prefix, [(label, pairs)], first))
    for buffer in buffers.values():
        if buffer:
            total += model.certified_pairs_in(buffer)
    return total, evaluated


def certified_count(dims, m, charge, ar) -> int:
    """The number of sequences whose enclosures prove them correct (as forward.check)."""
    from ..certificate import hold
    from .forward_model import table_cost, table_elements

    charge(table_cost(dims))  # as forward._Model: the same proof length in every back-end
    hold(charge, table_elements(dims) + working_elements(dims), "forward tables (bulk)")
    model = _BulkModel(dims, m, ar, charge)
    path = _Path(dims, charge) if dims.family.n_layers > 1 else None
    v, k = dims.d_vocab, dims.n_ctx
    sequences = itertools.product(range(v), repeat=k)
    rows, total = chunk_rows(dims), 0
    while True:
        charge(0)  # the clock, at every chunk
        chunk = list(itertools.islice(sequences, rows))
        if not chunk:
            return total
        firsts = [path.visit(tokens) for tokens in chunk] if path else None
        total += model.certified_in(chunk, firsts)


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
        self.w_u = self.mat(m["W_U"])
        self.w_o, self.w_in, self.w_out, self.w_gate, self.w_qkv = [], [], [], [], []
        for layer in range(f.n_layers):
            self.w_o.append(self.mat(m[layer_short(layer, "W_O")]))
            if f.d_mlp:
                self.w_in.append(self.mat(m[layer_short(layer, "W_in")]))
                self.w_out.append(self.mat(m[layer_short(layer, "W_out")]))
                self.w_gate.append(self.mat(m[layer_short(layer, "W_gate")]) if f.gated_mlp
                                   else None)
            if f.n_layers > 1:  # per head, W_Q, W_K, W_V (d × h each)
                self.w_qkv.append([[self.mat(m[layer_short(layer, "W_" + name)][j * d:(j + 1) * d])
                                    for name in "QKV"] for j in range(f.n_heads)])
        if f.n_layers > 1:
            return  # several layers: every position is computed per chunk (deep_rows)
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
    def certified_in(self, chunk: list, firsts: list | None = None) -> int:
        """How many sequences of the chunk the enclosures prove correct (firsts: with
        several layers, each sequence's first position the reference computes, _Path)."""
        return self.count(self.logit_rows(chunk, firsts), chunk)

    def certified_pairs_in(self, entries: list) -> int:
        """entries: [(prefix, [(label, pairs), ...], first)], prefixes of one length (first:
        as certified_in's firsts).  The pairs of every label whose ℓ_label − ℓ_o > 0 is
        proven for every o ≠ label."""
        zero, total = self.zero, 0
        rows = self.logit_rows([e[0] for e in entries], [e[2] for e in entries])
        for row, (_, labels, _) in zip(rows, entries):
            for label, pairs in labels:
                best = row[label]
                if all((best - x) > zero for o, x in enumerate(row) if o != label):
                    total += pairs
        return total

    def logit_rows(self, chunk: list, firsts: list | None = None) -> list:
        """The logit enclosures (rows of d_vocab balls) at the last position of each token
        tuple of the chunk (all of one length)."""
        f, d, n = self.f, self.dims.d_model, len(chunk)
        if f.n_layers > 1:
            return self.unembed(self.deep_rows(chunk, firsts), n)
        last = len(chunk[0]) - 1
        x = [e for tokens in chunk for e in self.resid0[last][tokens[-1] * d:(tokens[-1] + 1) * d]]
        z = self.attention_z(chunk)
        self.tick()
        attn = (self.mat(n, len(z) // n, z) * self.w_o[0]).entries()
        return self.unembed(self.block_out(x, attn, n, 0), n)

    def block_out(self, x: list, attn: list, n: int, layer: int, charged=None) -> list:
        """forward._Model.block_out on n rows: x + attn + b_O, plus the MLP of x (parallel)
        or of that sum."""
        resid = _add_row([a + b for a, b in zip(x, attn)], self.m[layer_short(layer, "b_O")][0])
        if self.f.d_mlp:
            mlp = self.mlp(x if self.f.parallel else resid, n, layer, charged)
            resid = [a + b for a, b in zip(resid, mlp)]
        return resid

    def unembed(self, resid: list, n: int) -> list:
        """The logits of n residual rows: ln_final, W_U, b_U."""
        d = self.dims.d_model
        self.tick()
        logits = (self.mat(n, d, self.norm_rows("ln_final", resid, d)) * self.w_u).entries()
        return _rows(_add_row(logits, self.m["b_U"][0]), self.dims.d_vocab)

    def deep_rows(self, chunk: list, firsts: list | None) -> list:
        """Several layers: the residual stream after the last layer at the last position of
        each token tuple (all of one length L), flat n × d.  Each distinct prefix of the
        chunk's tuples is one row: the position len(prefix) − 1 of every tuple starting
        with it, which depends only on that prefix (the model is causal).  Per layer, over
        all rows: the norm, Q, K, V by products (RoPE on each row at its position); per row
        and head the causal attention of forward._Model.attend over the row's own prefixes
        (positions 0..i); W_O, the MLP and the residual by products.  The activations'
        PIECE_COST is charged per row as many times as the reference computes that position
        for the chunk's tuples (those from firsts[s] on, _Path): the reference's work."""
        f, d, h, L = self.f, self.dims.d_model, self.dims.d_head, len(chunk[0])
        m, ar = self.m, self.ar
        index: dict = {}  # prefix -> row
        positions, chains, times, x = [], [], [], []
        for s, tokens in enumerate(chunk):
            first = firsts[s] if firsts else 0
            for i in range(L):
                prefix = tuple(tokens[:i + 1])
                row = index.get(prefix)
                if row is None:
                    row = index[prefix] = len(positions)
                    positions.append(i)
                    chains.append((chains[index[prefix[:i]]] if i else []) + [row])
                    times.append(0)
                    t = tokens[i]
                    x.extend(self.resid0[i][t * d:(t + 1) * d])
                times[row] += i >= first
        rows = len(positions)
        for layer in range(f.n_layers):
            self.tick()
            u = self.mat(rows, d, self.norm_rows("ln1", x, d, layer))
            heads = []  # per head: z, rows of h
            for j in range(f.n_heads):
                q, key, val = (
                    _rows(_add_row((u * w).entries(), m[layer_short(layer, "b_" + name)][j]), h)
                    for w, name in zip(self.w_qkv[layer][j], "QKV"))
                if f.positional == "rotary":
                    q, key = self.rotate_rows(q, positions), self.rotate_rows(key, positions)
                z = []
                for r in range(rows):
                    self.tick()
                    chain = chains[r]
                    keys = self.mat([key[c] for c in chain])
                    scores = (self.mat([q[r]]) * keys.transpose() * self.scale).entries()
                    shift = max(a.lower() for a in scores)  # an exact point
                    exps = [ar.exp(a - shift) for a in scores]
                    total = sum(exps[1:], exps[0])
                    weights = self.mat([[e / total for e in exps]])
                    z.append((weights * self.mat([val[c] for c in chain])).entries())
                heads.append(z)
            flat = [e for r in range(rows) for z in heads for e in z[r]]
            self.tick()
            attn = (self.mat(rows, f.n_heads * h, flat) * self.w_o[layer]).entries()
            x = self.block_out(x, attn, rows, layer, times)
        ends = [index[tuple(tokens)] for tokens in chunk]
        return [e for r in ends for e in x[r * d:(r + 1) * d]]

    def rotate_rows(self, rows: list, positions: list) -> list:
        """forward._rotate on every row (length d_head), row r at positions[r] (the same
        expressions as rotate); the rows are changed in place and returned."""
        half = self.f.rotary_dim // 2
        for row, i in zip(rows, positions):
            cos_row, sin_row = self.m["ROPE_COS"][i], self.m["ROPE_SIN"][i]
            for j in range(half):
                a, b = row[j], row[j + half]
                row[j] = a * cos_row[j] - b * sin_row[j]
                row[j + half] = b * cos_row[j] + a * sin_row[j]
        return rows

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

    def mlp(self, x: list, n: int, layer: int = 0, charged=None) -> list:
        """forward._Model.mlp on n rows: φ(LN2(x) W_in + b_in) W_out + b_out, or gated
        (φ(LN2(x) W_gate) ⊙ (LN2(x) W_in) + b_in) W_out + b_out.  charged: per row, how many
        times its activations' pieces are charged (None: once each)."""
        f, m, d = self.f, self.m, self.dims.d_model
        b_in, b_out = (m[layer_short(layer, name)][0] for name in ("b_in", "b_out"))
        self.tick()
        y = self.mat(n, d, self.norm_rows("ln2", x, d, layer))
        pre = (y * self.w_in[layer]).entries()
        if f.gated_mlp:
            self.tick()
            gate = self.activate((y * self.w_gate[layer]).entries(), charged)
            hidden = _add_row([a * b for a, b in zip(gate, pre)], b_in)
        else:
            hidden = self.activate(_add_row(pre, b_in), charged)
        self.tick()
        out = (self.mat(n, f.d_mlp, hidden) * self.w_out[layer]).entries()
        return _add_row(out, b_out)

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
    def norm_rows(self, which: str, flat: list, d: int, layer: int = 0) -> list:
        """The family's normalization `which` (ln1, ln2 of `layer`, or ln_final) of every
        row (length d) of the flat list."""
        kind = self.f.normalization
        if kind is None:
            return flat
        name = layer_short(layer, which)
        w = self.m[name + ".w"][0] if kind in ("LN", "RMS") else None
        b = self.m[name + ".b"][0] if kind == "LN" else None
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

    def activate(self, xs: list, charged=None) -> list:
        """The activation of every entry of xs (flat rows of d_mlp); charged: per row, how
        many times its pieces are charged (None: once each)."""
        act = self.f.act_fn
        if act == "relu":
            zero = self.zero
            return [x if x >= zero else zero if x <= zero else
                    zero.union(x.upper()).nonnegative_part() for x in xs]
        smooth, narrow, out, composed = self.smooth(act), self.arb((1, -NARROW_BITS)), [], 0
        width, times = self.f.d_mlp, 1

        def piece():
            self.charge(PIECE_COST * times)

        for index, x in enumerate(xs):
            times = 1 if charged is None else charged[index // width]
            if x.is_finite() and x.rad() <= narrow:
                out.append(smooth(x))
                composed += times
            elif not x.is_finite():  # NaN or infinite: Arb's indeterminate ball, any real (a
                # softmax of huge scores can give one where mpmath's intervals stay finite)
                out.append(self.arb(0, math.inf))  # the whole line: it contains f(t)
                composed += times
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
