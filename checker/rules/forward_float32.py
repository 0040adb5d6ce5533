"""forward_brute_force under the float32 semantics (spec/theorem.md §2c).

Theorem (spec/rules.md §forward_brute_force, float32).  _Float32Model evaluates the
forward pass of spec/theorem.md §2/§2b step by step as forward._Model does, but every
step returns the enclosure of checker/float32.py's lemma: the real interval result
over the enclosures of its operands' FLOAT values, widened by that step's rounding
bound.  By induction over the steps, each enclosure contains the value of the step in
every binary32 execution of §2c (and the exact real value).  A sequence is certified
when ℓ_top − ℓ_o > 0 over the logit enclosures for every o ≠ top: every float32
execution then has the strict argmax top.  An enclosure reaching 2^126 raises
float32.Overflow (the rule refuses: fail closed).

Cost: as the real rule (the widening is binary64 magnitude sums, one per product
element, not charged); mpmath only (forward_arb refuses float32).
"""

from __future__ import annotations

from mpmath import iv

from .. import float32 as fp
from .. import ops
from ..elementary import sqrt_interval, square_interval
from ..modelspec import layer_short
from ..numbers import exp_interval
from . import forward_model
from .forward_model import _add, _vecmat


def _columns_mag(rows: list) -> list:
    """cols[j][i] ≥ |rows[i][j]| (binary64, rounded up)."""
    return [list(col) for col in zip(*(fp.mags(r) for r in rows))]


class _Terms:
    """An unrounded vector b + Σ products (the real enclosure, the magnitude sums per
    entry, the number of terms n): x + it is one float sum of n + 1 terms in any order."""

    def __init__(self, real: list, sums: list, n: int):
        self.real, self.sums, self.n = real, sums, n

    def add_to(self, x: list) -> list:
        """Enclosures of the float32 x + b + Σ products: γ_{n+1}(|x| + Σ|terms|) + (n+1)η."""
        return [fp.widen(a + r, fp.dot_error(self.n + 1, fp._up(fp.mag(a) + s)))
                for a, r, s in zip(x, self.real, self.sums)]


class Float32Model(forward_model._Model):
    """forward._Model with every step replaced by its float32 enclosure."""

    def __init__(self, dims, m, charge):
        self._cols = {}  # weight key -> column magnitudes (weights are fixed)
        self._vec = {}  # weight key -> entry magnitudes of a bias / norm vector
        self.tau = fp.rope_tolerance(dims.n_ctx)
        super().__init__(dims, m, charge)

    # -- magnitudes of the fixed weights ---------------------------------------------
    def cols(self, key: str, rows: list) -> list:
        if key not in self._cols:
            self._cols[key] = _columns_mag(rows)
        return self._cols[key]

    def vec(self, key: str, row: list) -> list:
        if key not in self._vec:
            self._vec[key] = fp.mags(row)
        return self._vec[key]

    def affine(self, x: list, key: str, rows: list, bias_key: str | None = None,
               bias: list | None = None) -> list:
        """float32 x·W (+ b): the real product widened (float32.affine)."""
        real = _vecmat(x, rows, self.tick)
        if bias is not None:
            real = _add(real, bias)
        bias_mag = None if bias is None else self.vec(bias_key, bias)
        return fp.affine(x, real, self.cols(key, rows), bias_mag)

    # -- the steps -----------------------------------------------------------------------
    def embed(self, t: int, i: int) -> list:
        if self.f.positional == "standard":
            return fp.add(self.m["W_E"][t], self.m["W_pos"][i])
        return list(self.m["W_E"][t])  # a weight: a float, exactly

    def norm(self, which: str, x: list, layer: int = 0) -> list:
        """TransformerLens LayerNorm / RMSNorm in float32 (spec/theorem.md §2c)."""
        f = self.f
        if f.normalization is None:
            return x
        n = len(x)
        if f.normalization in ("LN", "LNPre"):
            mean = iv.fsum(x) / n
            mean = fp.widen(mean, fp.mean_error(n, fp.abs_sum(fp.mags(x))))
            c = fp.add(x, [-mean] * n)
        else:
            c = x
        cm = fp.mags(c)
        real_ms = iv.fsum(square_interval(a) for a in c) / n
        mean_square = fp.widen(real_ms, fp.mean_error(n, fp._abs_dot(cm, cm)))
        y = fp.normalize(c, mean_square, f.ln_eps, sqrt_interval)
        if f.normalization in ("LNPre", "RMSPre"):
            return y
        name = layer_short(layer, which)
        w = self.m[name + ".w"][0]
        wm = self.vec(name + ".w", w)
        if f.normalization == "RMS":
            return fp.scale_shift(y, ((wi, None, wmi, 0.0) for wi, wmi in zip(w, wm)))
        b = self.m[name + ".b"][0]
        bm = self.vec(name + ".b", b)
        return fp.scale_shift(y, zip(w, b, wm, bm))

    def project(self, x: list, name: str, head: int, layer: int = 0) -> list:
        d = self.dims.d_model
        key = layer_short(layer, "W_" + name)
        rows = self.m[key][head * d:(head + 1) * d]
        bkey = layer_short(layer, "b_" + name)
        return self.affine(x, f"{key}[{head}]", rows, f"{bkey}[{head}]", self.m[bkey][head])

    def rotate(self, x: list, i: int) -> list:
        """Rotate-half RoPE with float32 tables within τ of the exact cos/sin: each
        output is a dot product of 2 terms."""
        half, tau = self.f.rotary_dim // 2, iv.mpf((-self.tau, self.tau))
        cos_row, sin_row = self.m["ROPE_COS"][i], self.m["ROPE_SIN"][i]
        out = list(x)
        for j in range(half):
            a, b = x[j], x[j + half]
            c, s = cos_row[j] + tau, sin_row[j] + tau
            am, bm, cm, sm = fp.mag(a), fp.mag(b), fp.mag(c), fp.mag(s)
            err = fp.dot_error(2, fp._up(fp._up(am * cm) + fp._up(bm * sm)))
            other = fp._up(fp._up(bm * cm) + fp._up(am * sm))
            out[j] = fp.widen(a * c - b * s, err)
            out[j + half] = fp.widen(b * c + a * s, fp.dot_error(2, other))
        return out

    def attend(self, query: list, keys: list, vals: list, w_o: list):
        """(real z·W_O over the float z, Σ|z||W_O| per output): combine_heads widens the
        sum over heads and b_O as one dot product."""
        h = len(query)
        real = [s * self.scale for s in _vecmat(query, ops.transpose(keys), self.tick)]
        qm, scale_mag = fp.mags(query), fp.mag(self.scale)
        scores = [fp.widen(s, fp.score_error(h, scale_mag, qm, fp.mags(key)))
                  for s, key in zip(real, keys)]
        attn = fp.softmax(scores, exp_interval)
        z = fp.affine(attn, _vecmat(attn, vals, self.tick), _columns_mag(vals))
        zm = fp.mags(z)
        cols = self.cols(f"W_O@{id(w_o)}", w_o)  # w_o: a slice kept by the model
        return _vecmat(z, w_o, self.tick), [fp._abs_dot(zm, col) for col in cols]

    def combine_heads(self, bias: list, parts: list) -> _Terms:
        """b_O + Σ_j z_j W_O[j], not yet rounded: block_out adds it to the residual
        stream as one sum of n·h + 2 terms (x, b_O and every head's products, in any
        tree: per-head sums, one contraction over (head, d_head), b_O added before or
        after the residual, all covered)."""
        real, sums = list(bias), fp.mags(bias)
        for part, abs_sums in parts:
            real = _add(real, part)
            sums = [fp._up(a + b) for a, b in zip(sums, abs_sums)]
        return _Terms(real, sums, len(parts) * self.dims.d_head + 1)

    def mlp(self, x: list, layer: int = 0) -> list:
        m, s = self.m, lambda name: layer_short(layer, name)
        y = self.norm("ln2", x, layer)
        if self.f.gated_mlp:
            gate = self.act(self.affine(y, s("W_gate"), m[s("W_gate")]))
            pre = self.affine(y, s("W_in"), m[s("W_in")])
            b = m[s("b_in")][0]
            hidden = fp.scale_shift(gate, zip(pre, b, fp.mags(pre), self.vec(s("b_in"), b)))
        else:
            hidden = self.act(self.affine(y, s("W_in"), m[s("W_in")], s("b_in"),
                                          m[s("b_in")][0]))
        rows, b = m[s("W_out")], m[s("b_out")][0]
        hm, cols = fp.mags(hidden), self.cols(s("W_out"), rows)
        sums = [fp._up(fp._abs_dot(hm, col) + bm)
                for col, bm in zip(cols, self.vec(s("b_out"), b))]
        return _Terms(_add(_vecmat(hidden, rows, self.tick), b), sums, len(hidden) + 1)

    def act(self, x: list) -> list:
        real = forward_model.activate(self.f.act_fn, x, self.charge)
        return real if self.f.act_fn == "relu" else fp.activation(real, x)  # max is exact

    def block_out(self, x: list, attn: _Terms, layer: int) -> list:
        """r = x + attn and r' = r + mlp, each one float sum (_Terms.add_to)."""
        resid = attn.add_to(x)
        if self.f.d_mlp:
            resid = self.mlp(x if self.f.parallel else resid, layer).add_to(resid)
        return resid

    def unembed(self, resid: list) -> list:
        return self.affine(self.norm("ln_final", resid), "W_U", self.m["W_U"], "b_U",
                           self.m["b_U"][0])
