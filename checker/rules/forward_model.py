"""The model of rule forward_brute_force (forward.py; spec/rules.md §forward_brute_force):
the family's inputs, the work and memory the rule charges, and the forward pass over
intervals (_Model: the per-(position, token) tables and the logits of a prefix) with its
interval vector helpers (LayerNorm, RMSNorm, RoPE, the activations).

The rule (forward.py) and its parts (forward_arb.py, forward_float32.py, and the rules that
run the model: overwhelm_family, overwhelm_deep, family_gap) import this module; it imports
none of them, so the import graph is a tree.  Every name here stays reachable as forward.X.
Every enclosure below contains the exact real value of its step (spec/rules.md
§forward_brute_force, §Activations; the sqrt, exp and RoPE enclosures of elementary.py and
numbers.py).
"""

from __future__ import annotations

from mpmath import iv
from mpmath.libmp import fzero, mpf_sign

from .. import elementary, ops
from ..elementary import sqrt_interval, square_interval
from ..modelspec import layer_short, parameter_table
from ..numbers import exp_interval, inv_sqrt_interval

ROPE_INPUTS = ("ROPE_COS", "ROPE_SIN")
_EXP_COST = 50  # as ops.COST["exp"]

def inputs(dims, hints=None) -> tuple[str, ...]:
    """Every weight of the family (by short name), and the RoPE tables if rotary."""
    names = tuple(p.short for p in parameter_table(dims.family))
    return names + (ROPE_INPUTS if dims.family.positional == "rotary" else ())


def _sequence_cost(dims) -> int:
    """Interval operations charged up front per sequence.  One layer: the whole forward
    pass at the last position (the tables hold the rest).  Several layers: the final
    norm and unembedding; every position's pass through the layers is charged by
    _Model as it is computed (position_cost), since consecutive sequences share it."""
    f, k, d, h, v = dims.family, dims.n_ctx, dims.d_model, dims.d_head, dims.d_vocab
    if f.n_layers > 1:
        return d * v + 20 * d + v
    attn = f.n_heads * (2 * k * h + k * _EXP_COST + h * d)
    return attn + mlp_cost(f, d) + d * v + 20 * d + v


def mlp_cost(f, d: int) -> int:
    """Interval operations of one MLP (0 without): W_in, W_out (and W_gate with the
    gate's product), the activation (1 up front; a smooth activation also charges
    PIECE_COST per piece it examines, as it runs: activate)."""
    if not f.d_mlp:
        return 0
    return (2 * d + 1 + (d + 1 if f.gated_mlp else 0)) * f.d_mlp


def position_cost(dims) -> int:
    """Interval operations of one position's pass through every layer (several layers):
    layer 0's attention from the tables; each later layer's norm, projections, RoPE and
    attention; every layer's MLP and norms."""
    f, k, d, h = dims.family, dims.n_ctx, dims.d_model, dims.d_head
    attend = f.n_heads * (2 * k * h + k * _EXP_COST + h * d)
    later = 20 * d + f.n_heads * (3 * d * h + 8 * h) + attend
    return f.n_layers * (attend + mlp_cost(f, d) + 20 * d) + (f.n_layers - 1) * later


def total_work(dims) -> int:
    """An upper bound on the rule's charged work for all v^k sequences in lexicographic
    order (the generator's feasibility estimate): the tables, the per-sequence charge
    and, with several layers, the Σ_{n=1..k} v^n positions the path computes (a smooth
    activation's pieces, PIECE_COST each, are charged on top as they run)."""
    v, k = dims.d_vocab, dims.n_ctx
    work = table_cost(dims) + v ** k * _sequence_cost(dims)
    if dims.family.n_layers > 1:
        work += sum(v ** n for n in range(1, k + 1)) * position_cost(dims)
    return work


PIECE_COST = 40  # interval operations of one piece of a smooth activation (exp, erf, slope)


def table_cost(dims) -> int:
    """Interval operations charged for the per-(position, token) tables (either back-end)."""
    f, v, k, d, h = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    return f.n_heads * 3 * v * k * d * h + v * k * 20 * d


def table_elements(dims) -> int:
    """The elements of _Model's tables: the residual stream and its LayerNorm (k·v·d
    each) and, per head, queries, keys and values (k·v·h each), plus one more k·v·h
    table while a rotary model's queries or keys are rotated; with several layers also
    the path (path_elements)."""
    f, v, k, d, h = dims.family, dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    rotating = k * v * h if f.positional == "rotary" else 0
    return 2 * k * v * d + 3 * f.n_heads * k * v * h + rotating + path_elements(dims)


def path_elements(dims) -> int:
    """Several layers: the memoised positions of the current sequence, each holding the
    keys and values of every later layer's heads, its residual streams and its scratch
    (queries, scores, MLP hidden); 0 with one layer."""
    f, k, d, h = dims.family, dims.n_ctx, dims.d_model, dims.d_head
    if f.n_layers == 1:
        return 0
    per_position = f.n_layers * (2 * f.n_heads * h + 3 * d + 2 * f.d_mlp + f.n_heads * k)
    return k * per_position


class _Evaluations:
    """check charged task.evaluations() forward passes before the walk; a pass beyond
    them (none for a correct Task.evaluations) is charged when it happens."""

    def __init__(self, task, dims, charge):
        self.left, self.cost, self.charge = task.evaluations(), _sequence_cost(dims), charge

    def spend(self) -> None:
        self.left -= 1
        self.charge(self.cost if self.left < 0 else 0)


# --- interval vector helpers (a vector is a list of iv.mpf) -------------------

def _vecmat(x: list, mat: list, tick=lambda: None) -> list:
    """Row vector x (length n) times matrix (n × c), exactly then rounded once; tick()
    at every element (the clock)."""
    return ops.matmul([x], mat, tick)[0]


def _add(x: list, y: list) -> list:
    return [a + b for a, b in zip(x, y)]


def _relu(x: list) -> list:
    """max(t, 0) over each interval: exact on the endpoints, which are compared and
    copied as raw mpmath values (mpf_sign; no conversion, no rounding)."""
    out = []
    for a in x:
        lo, hi = a._mpi_
        if mpf_sign(lo) < 0:  # [lo, hi] ∋ a negative point: [0, max(hi, 0)]
            a = iv.make_mpf((fzero, hi if mpf_sign(hi) > 0 else fzero))
        out.append(a)
    return out


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
    """The family's forward pass, with the per-(position, token) tables of layer 0's
    attention inputs computed once.

    `logits(prefix)` is the logit vector at the LAST position of the token list
    `prefix` (any length 1..n_ctx).  With several layers, a position's later-layer keys
    and values depend on the whole prefix up to it: they are memoised along the current
    path (the positions of the most recent prefix), so consecutive prefixes in
    lexicographic order share them; each position computed is charged position_cost."""

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
        self.resid0 = [[self.embed(t, i) for t in self.ticking(range(v))] for i in range(k)]
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
        self.w_o = [[m[layer_short(layer, "W_O")][j * h:(j + 1) * h] for j in range(f.n_heads)]
                    for layer in range(f.n_layers)]
        self.path = []  # several layers: [(token, _Position)] of the most recent prefix
        self.position_work = position_cost(dims)

    def embed(self, t: int, i: int) -> list:
        """The residual stream before the block at position i with token t."""
        if self.f.positional == "standard":
            return _add(self.m["W_E"][t], self.m["W_pos"][i])
        return list(self.m["W_E"][t])

    def combine_heads(self, bias: list, parts: list) -> list:
        """b_O + Σ_heads (z_head W_O[head]), from the heads' attend results."""
        out = list(bias)
        for part in parts:
            out = _add(out, part)
        return out

    def ticking(self, row: list):
        """The vectors of a table row, checking the clock before each."""
        for x in row:
            self.tick()
            yield x

    def norm(self, which: str, x: list, layer: int = 0) -> list:
        """The family's normalisation `which` (ln1, ln2 of `layer`, or ln_final)."""
        if self.f.normalization is None:
            return x
        if self.f.normalization == "LNPre":
            return layer_norm(x, self.f.ln_eps, None, None)
        if self.f.normalization == "RMSPre":
            return rms_norm(x, self.f.ln_eps, None)
        name = layer_short(layer, which)
        if self.f.normalization == "RMS":
            return rms_norm(x, self.f.ln_eps, self.m[name + ".w"][0])
        return layer_norm(x, self.f.ln_eps, self.m[name + ".w"][0], self.m[name + ".b"][0])

    def project(self, x: list, name: str, head: int, layer: int = 0) -> list:
        """x W_name[head] + b_name[head] (of `layer`)."""
        d = self.dims.d_model
        w = self.m[layer_short(layer, "W_" + name)][head * d:(head + 1) * d]
        return _add(_vecmat(x, w, self.tick), self.m[layer_short(layer, "b_" + name)][head])

    def rotate(self, x: list, i: int) -> list:
        return _rotate(x, self.m["ROPE_COS"][i], self.m["ROPE_SIN"][i], self.f.rotary_dim)

    def attend(self, query: list, keys: list, vals: list, w_o: list) -> list:
        """softmax(query · keys / sqrt(h)) · vals · W_O[head], over the given positions."""
        scores = [s * self.scale for s in _vecmat(query, ops.transpose(keys), self.tick)]
        shift = max(s.a for s in scores)  # any real shift leaves softmax unchanged
        weights = [exp_interval(s - shift) for s in scores]
        total = iv.fsum(weights)
        attn = [w / total for w in weights]
        z = _vecmat(attn, vals, self.tick)
        return _vecmat(z, w_o, self.tick)

    def attention(self, tokens) -> list:
        """Layer 0: Σ_heads z_head W_O[head] + b_O at the last position of `tokens`."""
        last = len(tokens) - 1
        parts = []
        for j in range(self.f.n_heads):
            query = self.q[j][last][tokens[last]]
            keys = [self.key[j][i][t] for i, t in enumerate(tokens)]
            vals = [self.val[j][i][t] for i, t in enumerate(tokens)]
            parts.append(self.attend(query, keys, vals, self.w_o[0][j]))
        return self.combine_heads(self.m["b_O"][0], parts)

    def mlp(self, x: list, layer: int = 0) -> list:
        """φ(LN2(x) W_in + b_in) W_out + b_out, or with a gated MLP (TransformerLens
        GatedMLP) (φ(LN2(x) W_gate) ⊙ (LN2(x) W_in) + b_in) W_out + b_out."""
        m, s = self.m, lambda name: layer_short(layer, name)
        y = self.norm("ln2", x, layer)
        pre = _vecmat(y, m[s("W_in")], self.tick)
        if self.f.gated_mlp:
            gate = activate(self.f.act_fn, _vecmat(y, m[s("W_gate")], self.tick), self.charge)
            hidden = _add([a * b for a, b in zip(gate, pre)], m[s("b_in")][0])
        else:
            hidden = activate(self.f.act_fn, _add(pre, m[s("b_in")][0]), self.charge)
        return _add(_vecmat(hidden, m[s("W_out")], self.tick), m[s("b_out")][0])

    def block_out(self, x: list, attn: list, layer: int) -> list:
        """The residual stream after a block whose input is x and attention output attn."""
        resid = _add(x, attn)
        if self.f.d_mlp:
            resid = _add(resid, self.mlp(x if self.f.parallel else resid, layer))
        return resid

    def logits(self, tokens) -> list:
        """The logits at the last position of `tokens` (length 1..n_ctx)."""
        if self.f.n_layers > 1:
            resid = self.state(tokens).resid
        else:
            x = self.resid0[len(tokens) - 1][tokens[-1]]
            resid = self.block_out(x, self.attention(tokens), 0)
        return self.unembed(resid)

    def unembed(self, resid: list) -> list:
        """LNf(resid) U + b_U."""
        return _add(_vecmat(self.norm("ln_final", resid), self.m["W_U"], self.tick),
                    self.m["b_U"][0])

    # -- several layers ---------------------------------------------------------------
    def state(self, tokens) -> _Position:
        """The last position of `tokens` after every layer, from the path: positions
        shared with the previous prefix are reused, the others computed (and charged)."""
        n, path = len(tokens), self.path
        common = 0
        while common < min(n, len(path)) and path[common][0] == tokens[common]:
            common += 1
        if common < min(n, len(path)) or common < n:
            del path[common:]  # the path diverges (or ends) here
        for i in range(len(path), n):
            self.charge(self.position_work)
            path.append((tokens[i], self.position(tokens[:i + 1])))
        return path[n - 1][1]

    def position(self, tokens) -> _Position:
        """Position i = len(tokens) − 1 through every layer, causally: each layer's
        attention reads that layer's keys and values at positions 0..i (layer 0's from
        the tables, later layers' from the path)."""
        f, i, t = self.f, len(tokens) - 1, tokens[-1]
        out = _Position()
        x = self.resid0[i][t]
        x = self.block_out(x, self.attention(tokens), 0)
        for layer in range(1, f.n_layers):
            self.tick()
            u = self.norm("ln1", x, layer)
            parts = []
            for j in range(f.n_heads):
                query, key = (self.project(u, name, j, layer) for name in "QK")
                if f.positional == "rotary":
                    query, key = self.rotate(query, i), self.rotate(key, i)
                val = self.project(u, "V", j, layer)
                out.kv[layer, j] = (key, val)
                earlier = [self.path[p][1].kv[layer, j] for p in range(i)]
                keys = [kv[0] for kv in earlier] + [key]
                vals = [kv[1] for kv in earlier] + [val]
                parts.append(self.attend(query, keys, vals, self.w_o[layer][j]))
            attn = self.combine_heads(self.m[layer_short(layer, "b_O")][0], parts)
            x = self.block_out(x, attn, layer)
        out.resid = x
        return out


class _Position:
    """One position of the current prefix after every layer: its final residual stream
    and, per (layer >= 1, head), its key and value (read by later positions)."""

    __slots__ = ("kv", "resid")

    def __init__(self):
        self.kv, self.resid = {}, None
