"""The certificate as a trace: header, weights, interval ops, rules, qed.

The model quantities are emitted by walking the *checker's own* term
definitions (checker/definitions.py), so the generator cannot drift from
what a rule demands: each term node becomes one op line whose recorded
interval is computed here from the recorded intervals of its arguments,
exactly as the checker will recompute it.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from checker import certificate
from checker.definitions import model_terms
from checker.modelspec import Dims, matrix_shape, parameter_table
from checker.ops import OPS as CHECKER_OPS

from . import intervals as ia


def b64(arr: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(arr, dtype=dtype).tobytes()).decode("ascii")


def tl_parameters(weights) -> dict[str, np.ndarray]:
    """The model's parameters in TransformerLens layout, float32 (zeros for
    absent biases), in the order of checker.modelspec.parameter_table."""
    return weights.tl_parameters()


def weight_matrix(name: str, arr: np.ndarray) -> np.ndarray:
    """The 2-D matrix the checker reads a TL parameter as (modelspec.matrix_shape)."""
    return arr.reshape(matrix_shape(arr.shape))


class Trace:
    """Accumulates certificate lines; `lines()` returns them in order."""

    def __init__(self, weights, float_shadow: bool = True):
        self.dims: Dims = weights.dims
        self.weights = weights  # ModelWeights or FamilyWeights
        self.body: list[dict] = []  # lines 1.. (the header is made last)
        self.values: dict[int, ia.IMat] = {}
        self.shadow: dict[int, np.ndarray] = {}  # generator's plain float32 values
        self.by_term: dict[tuple, int] = {}
        self.float_shadow = float_shadow
        params = tl_parameters(weights)
        shorts = {p.key: p.short for p in parameter_table(self.dims.family)}
        flat = {n: (a.shape, tuple(float(x) for x in a.ravel())) for n, a in params.items()}
        self.weights_sha256 = certificate.weights_digest(self.dims, flat)
        for name, arr in params.items():
            i = self._append({"kind": "weight", "name": name, "shape": list(arr.shape),
                              "dtype": "f32", "data": b64(arr, "<f4")})
            m = weight_matrix(name, arr)
            self.values[i] = ia.IMat.point(m)
            self.shadow[i] = m.astype(np.float32)
            self.by_term[("param", shorts[name])] = i
        self.definitions = model_terms(self.dims)

    def _append(self, line: dict) -> int:
        i = len(self.body) + 1
        self.body.append({"id": i, **line})
        return i

    def emit(self, term: tuple) -> int:
        """The id of the line computing `term`, emitting it (and its arguments)
        if needed."""
        if term in self.by_term:
            return self.by_term[term]
        op, rest = term[0], term[1:]
        args = [self.emit(t) for t in rest if isinstance(t, tuple)]
        ints = [t for t in rest if not isinstance(t, tuple)]
        params = CHECKER_OPS[op][2]  # the checker's own names for the op's parameters
        value = self._enclose(op, args, ints)
        line = {"kind": "op", "op": op, "args": args, "shape": list(value.shape),
                "lo": b64(value.lo, "<f8"), "hi": b64(value.hi, "<f8")}
        if params:
            line["params"] = dict(zip(params, ints))
        with np.errstate(all="ignore"):  # float32 overflow shows as inf, handled below
            shadow = _float32_op(op, [self.shadow[a] for a in args], ints)
        # the shadow is informational: where float32 overflows (inf/NaN, which the format
        # refuses) it is left out for that line rather than costing the certificate
        if self.float_shadow and np.isfinite(shadow).all():
            line["float"] = b64(shadow, "<f4")
        i = self._append(line)
        self.values[i], self.shadow[i], self.by_term[term] = value, shadow, i
        return i

    def _enclose(self, op: str, args: list[int], ints: list[int]) -> ia.IMat:
        """The recorded enclosure of `op`; NotApplicable if it cannot be recorded in binary64
        (e.g. exp of attention scores above ~709)."""
        from .strategies import NotApplicable

        inputs = [self.values[a] for a in args]
        try:
            value = ia.OPS[op](*inputs, *ints)
        except FloatingPointError:
            value = None
        if value is None or not (np.isfinite(value.lo).all() and np.isfinite(value.hi).all()):
            largest = max(float(np.max(np.abs(np.concatenate([m.lo.ravel(), m.hi.ravel()]))))
                          for m in inputs)
            raise NotApplicable(f"{op} of values up to {largest:.3g} in magnitude overflows "
                                "binary64, so it cannot be recorded in a certificate (attention "
                                "scores this large make exp(EQKE) or exp(EQKP) infinite)")
        return value

    def matrix(self, name: str) -> ia.IMat:
        """The recorded enclosure of a model quantity (EQKE, EVOU, ...)."""
        return self.values[self.quantity(name)]

    def quantity(self, name: str) -> int:
        """The line id of a model quantity, emitting its derivation if needed."""
        if name not in self.definitions:
            from .strategies import NotApplicable

            raise NotApplicable(f"{name} is not defined for this model family (the "
                                "decomposition rules need the attention-only model; use "
                                "--strategy forward-brute-force)")
        return self.emit(self.definitions[name])

    def rule(self, rule: str, inputs: list[str], claim: int, hints=None) -> int:
        line = {"kind": "rule", "rule": rule,
                "inputs": {n: self.quantity(n) for n in inputs}, "claim": int(claim)}
        if hints is not None:
            line["hints"] = hints
        return self._append(line)

    def lines(self, strategy: str, by: int, claim: int, model_binding: dict,
              generator_info: dict, theorem: str | None = None) -> list[str]:
        """All lines; `theorem` overrides the accuracy theorem (e.g. overwhelm)."""
        d = self.dims
        theorem = theorem or (f"task == max_of_k and d_vocab == {d.d_vocab} and n_ctx == {d.n_ctx} "
                   f"and d_model == {d.d_model} and d_head == {d.d_head} "
                   f"and weights == sha256:{self.weights_sha256} and correct >= {claim}")
        header = {"id": 0, "kind": "header", "format": certificate.FORMAT,
                  "version": certificate.VERSION, "arithmetic": certificate.ARITHMETIC,
                  "theorem": theorem, "strategy": strategy, "model": model_binding,
                  "generator": generator_info}
        if not d.family.is_attn_only:
            header["family"] = d.family.to_json()
        qed = {"id": len(self.body) + 1, "kind": "qed", "by": by}
        return [json.dumps(x, separators=(",", ":")) for x in [header, *self.body, qed]]


def _float32_op(op: str, args: list[np.ndarray], ints: list[int]) -> np.ndarray:
    """What a plain float32 computation (as in the paper) gives for `op`."""
    f = np.float32
    if op == "matmul":
        return (args[0] @ args[1]).astype(f)
    if op == "add":
        return (args[0] + args[1]).astype(f)
    if op == "sub":
        return (args[0] - args[1]).astype(f)
    if op == "mean_rows":
        return args[0].mean(axis=0, keepdims=True, dtype=f)
    if op == "row":
        return args[0][ints[0]:ints[0] + 1].copy()
    if op == "transpose":
        return args[0].T.copy()
    if op == "div_sqrt":
        return (args[0] / np.sqrt(f(ints[0]))).astype(f)
    if op == "exp":
        return np.exp(args[0]).astype(f)
    if op in ("rope_cos", "rope_sin"):
        return ia.rope_table_float(*ints, odd=op == "rope_sin").astype(f)
    raise ValueError(op)
