"""A corpus of certificates the checker must refuse.

Starting from valid brute-force and cubic certificates of a small random
model (both verified first), each mutant changes one thing.  Every mutant must
exit 1 (rejected: well-formed but wrong) or 2 (malformed / unsupported / over a
limit), with exactly one clear line on stderr naming the problem, and never a
traceback or an "internal error".
"""

from __future__ import annotations

import importlib.util
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from checker_fixtures import (
    artifacts,
    certificate_file,
    decode,
    dump,
    encode,
    find,
    header_claim,
    parse,
    random_model,
    rule_index,
    run_checker_subprocess,
    write_bytes,
    write_lines,
)

from checker.certificate import CertificateChecker, Limits, weights_digest
from checker.cli import main
from checker.errors import Malformed, Rejected

PREFIX = {1: "REJECTED: ", 2: "MALFORMED: "}
# Both arithmetic back-ends must refuse every mutant and verify every original.
ARITH = [pytest.param("mpmath"),
         pytest.param("arb", marks=pytest.mark.skipif(
             importlib.util.find_spec("flint") is None, reason="python-flint not installed"))]


@pytest.fixture(scope="module")
def art():
    return artifacts()


def run(capsys, path, *extra, jobs: int = 1):
    code = main([str(path), "--jobs", str(jobs), *map(str, extra)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_refused(code: int, out: str, err: str, expected: int, needle: str = "") -> None:
    assert code == expected, f"exit {code}, expected {expected}; stderr: {err!r}"
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    assert lines[0].startswith(PREFIX[expected]), lines[0]
    assert needle.lower() in lines[0].lower(), f"{needle!r} not in {lines[0]!r}"
    assert "VERIFIED" not in out


# -- the unmutated certificates verify ---------------------------------------------

@pytest.mark.parametrize("arith", ARITH)
@pytest.mark.parametrize("which", ["brute", "cubic", "trained_brute"])
@pytest.mark.parametrize("with_model", [False, True])
def test_originals_verify(art, capsys, which, with_model, arith):
    lines = getattr(art, which)
    model = art.trained if which.startswith("trained") else art.model
    path = write_lines(lines, f"orig_{which}.jsonl")
    extra = ["--model", model] if with_model else []
    extra += ["--arith", arith]
    code, out, err = run(capsys, path, *extra)
    assert code == 0, err
    assert out.startswith("VERIFIED") and err == ""
    assert f"correct >= {header_claim(parse(lines))} of 216" in out


def test_claims_are_sound_and_nontrivial(art):
    """Sanity of the corpus: some sequences are certified, some are not, and
    cubic proves no more than brute force."""
    brute, cubic = header_claim(parse(art.brute)), header_claim(parse(art.cubic))
    assert 0 < cubic <= brute < 216
    assert header_claim(parse(art.trained_brute)) > brute


# -- the mutants ----------------------------------------------------------------------

@dataclass(frozen=True)
class Mutant:
    name: str
    base: str  # "brute" or "cubic"
    mutate: Callable  # list[dict] -> list[dict] | list[str] | bytes
    code: int
    needle: str = ""
    args: tuple = ()  # extra CLI arguments; "MODEL" / "OTHER" / "NOTMODEL" are substituted


def _set_claim(objs, delta, header=True, rule=True):
    n = header_claim(objs)
    if header:
        objs[0]["theorem"] = objs[0]["theorem"].replace(f"correct >= {n}",
                                                        f"correct >= {n + delta}")
    if rule:
        objs[rule_index(objs)]["claim"] += delta
    return objs


def _bump_weight(objs, name="embed.W_E", index=0, fix_digest=False):
    i = find(objs, kind="weight", name=name)
    data = decode(objs[i]["data"], "<f4")
    assert data[index] != 0
    data[index] = np.nextafter(data[index], np.float32(np.inf))
    objs[i]["data"] = encode(data, "<f4")
    if fix_digest:  # a forger who also re-hashes the weights
        from checker.modelspec import infer_dims

        weights = {o["name"]: (tuple(o["shape"]), tuple(float(x) for x in decode(o["data"], "<f4")))
                   for o in objs if o["kind"] == "weight"}
        dims = infer_dims({n: s for n, (s, _) in weights.items()})
        digest = weights_digest(dims, weights)
        old = objs[0]["theorem"].split("sha256:")[1].split()[0]
        objs[0]["theorem"] = objs[0]["theorem"].replace(old, digest)
    return objs


def _drop(kind, pick=0):
    def f(objs):
        idx = [i for i, o in enumerate(objs) if o["kind"] == kind][pick]
        return objs[:idx] + objs[idx + 1:]
    return f


def _swap_ops(objs):
    a, b = [i for i, o in enumerate(objs) if o["kind"] == "op"][2:4]
    objs[a], objs[b] = objs[b], objs[a]
    return objs


def _swap_ops_renumbered(objs):
    """Swap two independent op lines of the same shape (row P[k-1] and the mean
    of P) and fix their ids: later references now get the wrong matrices."""
    a, b = _op_line(objs, "row"), _op_line(objs, "mean_rows")
    objs[a], objs[b] = objs[b], objs[a]
    objs[a]["id"], objs[b]["id"] = a, b
    return objs


def _forge_digest(objs):
    old = objs[0]["theorem"].split("sha256:")[1].split()[0]
    other = "0" * 63 + ("1" if old != "0" * 63 + "1" else "2")
    objs[0]["theorem"] = objs[0]["theorem"].replace(old, other)
    return objs


def _repoint_input(name, *targets):
    """Point input `name` at the line of the first of `targets` the rule also reads."""
    def f(objs):
        r = rule_index(objs)
        target = next(t for t in targets if t in objs[r]["inputs"])
        objs[r]["inputs"][name] = objs[r]["inputs"][target]
        return objs
    return f


def _repoint_to_noncanonical(name):
    """Point an input at a line of the same shape that is not a model quantity
    (the transpose of itself is v x v as well, for EVOU)."""
    def f(objs):
        r = rule_index(objs)
        target = objs[r]["inputs"][name]
        new = {"id": r, "kind": "op", "op": "transpose", "args": [target],
               "shape": objs[target]["shape"][::-1]}
        lo, hi = (decode(objs[target][k], "<f8").reshape(objs[target]["shape"])
                  for k in ("lo", "hi"))
        new["lo"], new["hi"] = encode(lo.T, "<f8"), encode(hi.T, "<f8")
        rest = objs[r:]
        for o in rest:
            o["id"] += 1
        rest[0]["inputs"][name] = r
        rest[-1]["by"] += 1
        return objs[:r] + [new] + rest
    return f


def _op_line(objs, op="matmul", pick=0):
    return [i for i, o in enumerate(objs) if o.get("op") == op][pick]


def _edit_interval(op="matmul", how="tighten_hi", entry=1, pick=0):
    def f(objs):
        i = _op_line(objs, op, pick)
        lo, hi = decode(objs[i]["lo"], "<f8"), decode(objs[i]["hi"], "<f8")
        if how == "tighten_hi":  # shrink [lo, hi] to [lo, lo]
            hi[entry] = lo[entry]
        elif how == "tighten_lo":  # shrink to [hi, hi]
            lo[entry] = hi[entry]
        elif how == "shift":  # same width, moved wholly above the value
            w = hi[entry] - lo[entry]
            lo[entry], hi[entry] = hi[entry] + w, hi[entry] + 2 * w
        elif how == "reverse":
            lo[entry], hi[entry] = hi[entry], lo[entry]
        elif how == "nan_lo":
            lo[entry] = np.nan
        elif how == "inf_hi":
            hi[entry] = np.inf
        elif how == "ninf_lo":
            lo[entry] = -np.inf
        elif how == "huge_both":
            lo[entry], hi[entry] = -1e308, 1e308
        objs[i]["lo"], objs[i]["hi"] = encode(lo, "<f8"), encode(hi, "<f8")
        return objs
    return f


def _set(index_fn, key, value):
    def f(objs):
        i = index_fn(objs)
        if value is _DELETE:
            del objs[i][key]
        else:
            objs[i][key] = value(objs[i]) if callable(value) else value
        return objs
    return f


_DELETE = object()


def _first_op(objs):
    return find(objs, kind="op")


def _first_weight(objs):
    return 1


def _last(objs):
    return len(objs) - 1


def _raw_line(index_fn, edit):
    """Edit one line's JSON text (for things json.dumps cannot produce)."""
    def f(objs):
        i = index_fn(objs)
        lines = dump(objs)
        lines[i] = edit(lines[i])
        return lines
    return f


def _truncate_mid_line(objs):
    text = "\n".join(dump(objs)) + "\n"
    cut = text.index("\n", len(text) // 2) - 7  # in the middle of some line
    return text[:cut].encode()


def _append_after_qed(objs):
    qed = dict(objs[-1])
    qed["id"] += 1
    return objs + [qed]


def _huge_weight_shape(objs):
    objs[1]["shape"] = [1 << 20, 1 << 20]
    return objs


def _huge_op_shape(objs):
    objs[_first_op(objs)]["shape"] = [1 << 20, 1 << 20]
    return objs


def _weight_shape_product_over_limit(objs):
    objs[1]["shape"] = [1 << 11, 1 << 10]  # each factor allowed, 2^21 elements not
    return objs


def _hint(edit):
    def f(objs):
        r = rule_index(objs)
        edit(objs[r]["hints"]["good"])
        return objs
    return f


def _token_ge_max(good):
    m, q, c, mask = next(e for e in good if e[2] >= 1)
    good.remove([m, q, c, mask])
    good.append([m, q, c, mask | (1 << m)])


def _duplicate_hint(good):
    good.append(list(good[-1]))


def _hint_c_out_of_range(good):
    m, q = next((e[0], e[1]) for e in good if e[0] > e[1])
    good.append([m, q, 2, 1])  # n_ctx = 3, q < m: at most 1 non-max copy


def _hint_q_above_m(good):
    good.append([1, 2, 1, 1])


def _hint_bool(good):
    good.append([5, 5, 1, True])


def _header_without_correct(objs):
    t = objs[0]["theorem"]
    objs[0]["theorem"] = t[:t.index(" and correct >= ")]
    return objs


def _header_with(extra_atom):
    def f(objs):
        objs[0]["theorem"] += f" and {extra_atom}"
        return objs
    return f


def _swap_weight_names(objs):
    objs[3]["name"], objs[4]["name"] = objs[4]["name"], objs[3]["name"]
    return objs


def _weights_swapped_with_data(objs):
    """W_Q and W_K exchanged with their names fixed: shapes fit, the model is another."""
    objs[3]["data"], objs[4]["data"] = objs[4]["data"], objs[3]["data"]
    return objs


def _deep_json(objs):
    lines = dump(objs)
    lines[-1] = lines[-1][:-1] + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}"
    return lines


def _big_int_json(objs):
    lines = dump(objs)
    r = rule_index(objs)
    lines[r] = lines[r].replace(f'"claim":{objs[r]["claim"]}', '"claim":' + "9" * 5000)
    return lines


def _as_bytes(data: bytes):
    return lambda objs: data


_RNG = random.Random(1234)
RANDOM_BYTES = bytes(_RNG.randrange(256) for _ in range(4096))


def _non_utf8(objs):
    lines = dump(objs)
    text = "\n".join(lines) + "\n"
    i = text.index('"strategy":"') + len('"strategy":"')
    return text[:i].encode() + b"\xff\xfe" + text[i:].encode()


def _bom(objs):
    return b"\xef\xbb\xbf" + ("\n".join(dump(objs)) + "\n").encode()


MUTANTS: list[Mutant] = []


def _add(name, mutate, code, needle="", bases=("brute", "cubic"), args=()):
    for base in bases:
        MUTANTS.append(Mutant(f"{base}-{name}", base, mutate, code, needle, tuple(args)))


# claimed bound raised by one
_add("header-claim+1", lambda o: _set_claim(o, 1, rule=False), 1, "was not verified")
_add("rule-claim+1", lambda o: _set_claim(o, 1, header=False), 1, "but the line claims")
_add("both-claims+1", lambda o: _set_claim(o, 1), 1, "but the line claims")
_add("header-accuracy-1", _header_with("accuracy >= 1"), 1, "was not verified")
_add("claim-over-total", lambda o: _set_claim(o, 216 - header_claim(o) + 1), 2, "claim")
_add("claim-negative", lambda o: _set_claim(o, -header_claim(o) - 1, header=False), 2, "claim")
_add("claim-float", _set(rule_index, "claim", lambda o: o["claim"] + 0.0), 2, "claim")
# weights
_add("weight-ulp", _bump_weight, 1, bases=("brute", "cubic"))
_add("weight-ulp+model", _bump_weight, 1, "differs from the model file", args=("--model", "MODEL"))
_add("weight-ulp+rehashed", lambda o: _bump_weight(o, fix_digest=True), 1, "does not enclose")
_add("weight-ulp-W_U+rehashed",
     lambda o: _bump_weight(o, "unembed.W_U", 3, fix_digest=True), 1, "does not enclose",
     bases=("brute",))
_add("weights-W_Q-W_K-exchanged", _weights_swapped_with_data, 1, bases=("brute",))
_add("weight-names-swapped", _swap_weight_names, 2, "expected")
_add("weight-dtype-f64", _set(_first_weight, "dtype", "f64"), 2, "f32")
_add("weight-data-garbage", _set(_first_weight, "data", "!!not base64!!"), 2, "base64")
_add("weight-data-short", _set(_first_weight, "data", lambda o: o["data"][:-8]), 2, "bytes")
_add("weight-shape-3d", _set(_first_weight, "shape", lambda o: [1, *o["shape"]]), 2, "",
     bases=("brute",))
# dropped and reordered lines
_add("drop-weight", _drop("weight", 4), 2, "ids must be")
_add("drop-op", _drop("op", 5), 2, "ids must be")
_add("drop-rule", _drop("rule"), 2, "ids must be")
_add("drop-qed", _drop("qed"), 2, "without a qed")
_add("drop-header", _drop("header"), 2, "ids must be")
_add("swap-two-ops", _swap_ops, 2, "ids must be")
_add("swap-two-ops-renumbered", _swap_ops_renumbered, 1, "does not enclose")
_add("swap-header-weight", lambda o: [o[1], o[0], *o[2:]], 2, "ids must be")
# header
_add("forged-digest", _forge_digest, 1, "was not verified")
_add("header-without-correct", _header_without_correct, 2, "must state")
_add("header-version-2", _set(lambda o: 0, "version", 2), 2, "unsupported format")
_add("header-version-true", _set(lambda o: 0, "version", True), 2, "unsupported format")
_add("header-version-float", _set(lambda o: 0, "version", 1.0), 2, "unsupported format")
_add("header-version-string", _set(lambda o: 0, "version", "1"), 2, "unsupported format")
_add("header-format-other", _set(lambda o: 0, "format", "other-cert"), 2, "unsupported format")
_add("header-arithmetic-float", _set(lambda o: 0, "arithmetic", "float32"), 2, "arithmetic")
_add("header-theorem-garbage", _set(lambda o: 0, "theorem", "correct >>= 3"), 2, "theorem")
_add("header-theorem-not-string", _set(lambda o: 0, "theorem", 5), 2, "theorem")
_add("header-model-file-claim", _header_with("model_file == sha256:" + "ab" * 32), 1,
     "was not verified")
_add("header-wrong-d_model", _set(lambda o: 0, "theorem",
                                  lambda h: h["theorem"].replace("d_model == 8", "d_model == 9")),
     1, "was not verified")
_add("header-unknown-field", _set(lambda o: 0, "extra", 1), 2, "unknown field")
_add("header-missing-model", _set(lambda o: 0, "model", _DELETE), 2, "missing field")
# rule inputs pointed at another line of the same shape
_add("EVOU-is-EU", _repoint_input("EVOU", "EU"), 1, "is not EVOU")
_add("EVOU-is-EQKE", _repoint_input("EVOU", "EQKE", "EXP_EQKE"), 1, "is not EVOU")
_add("EXP_EQKE-is-EVOU", _repoint_input("EXP_EQKE", "EVOU"), 1, "is not EXP_EQKE",
     bases=("cubic",))
_add("EVOU-is-transpose-of-EVOU", _repoint_to_noncanonical("EVOU"), 1, "is not EVOU")
_add("rule-input-weight-line", _set(rule_index, "inputs",
                                    lambda o: {**o["inputs"], "EU": 1}), 1, "is not EU")
_add("rule-input-forward", _set(rule_index, "inputs",
                                lambda o: {**o["inputs"], "EU": o["id"] + 1}), 2, "argument")
_add("rule-input-header", _set(rule_index, "inputs",
                               lambda o: {**o["inputs"], "EU": 0}), 2, "not a matrix line")
_add("rule-input-missing", _set(rule_index, "inputs",
                                lambda o: {k: v for k, v in o["inputs"].items() if k != "EU"}),
     2, "takes inputs")
# recorded intervals
_add("op-tightened-hi", _edit_interval("matmul", "tighten_hi"), 1, "does not enclose")
_add("op-tightened-lo", _edit_interval("matmul", "tighten_lo", entry=0, pick=2), 1,
     "does not enclose")
_add("op-shifted", _edit_interval("div_sqrt", "shift", entry=3), 1, "does not enclose")
_add("exp-tightened", _edit_interval("exp", "tighten_hi", entry=2), 1, "does not enclose",
     bases=("cubic",))
_add("op-reversed", _edit_interval("matmul", "reverse"), 2, "reversed interval")
_add("op-nan", _edit_interval("matmul", "nan_lo"), 2, "NaN or infinity")
_add("op-inf", _edit_interval("matmul", "inf_hi"), 2, "NaN or infinity")
_add("op-neg-inf", _edit_interval("mean_rows", "ninf_lo"), 2, "NaN or infinity")
_add("op-lo-garbage", _set(_first_op, "lo", "@@@@"), 2, "base64")
_add("op-lo-not-string", _set(_first_op, "lo", [0.0, 1.0]), 2, "base64")
_add("op-hi-wrong-length", _set(_first_op, "hi", lambda o: o["hi"][:-12]), 2, "bytes")
_add("op-hi-one-more", _set(_first_op, "hi", lambda o: encode(
    np.append(decode(o["hi"], "<f8"), 1.0), "<f8")), 2, "bytes")
_add("op-float-shadow-garbage",
     _set(lambda o: find(o, kind="op", op="div_sqrt"), "float", "xx"), 2, "base64")
# JSON-level mutants
_add("duplicate-key", _raw_line(_first_op, lambda s: s.replace('"kind":"op"',
                                                               '"kind":"op","kind":"op"')),
     2, "duplicate key")
_add("duplicate-key-claim", _raw_line(rule_index, lambda s: s.replace(
    '"claim":', '"claim":0,"claim":')), 2, "duplicate key")
_add("nan-literal", _raw_line(rule_index, lambda s: s[:s.index('"claim":') + 8] + "NaN}"),
     2, "non-finite")
_add("infinity-literal", _raw_line(_last, lambda s: s.replace('"by":', '"by":Infinity,"x":')),
     2, "non-finite")
_add("json-array-line", _raw_line(_last, lambda s: "[" + s + "]"), 2, "JSON object")
_add("json-trailing-data", _raw_line(_first_op, lambda s: s + " {}"), 2, "not valid JSON")
_add("json-deep-nesting", _deep_json, 2, "", bases=("brute",))
_add("json-huge-int", _big_int_json, 2, "", bases=("brute",))
_add("id-skips", _set(_first_op, "id", lambda o: o["id"] + 1), 2, "ids must be")
_add("id-string", _set(_first_op, "id", lambda o: str(o["id"])), 2, "ids must be")
_add("id-bool", _set(_first_weight, "id", True), 2, "ids must be")
_add("id-missing", _set(_first_op, "id", _DELETE), 2, "ids must be")
_add("kind-unknown", _set(_first_op, "kind", "lemma"), 2, "kind")
_add("kind-rule-too-early", _set(_first_weight, "kind", "rule"), 2, "kind")
# ops
_add("unknown-op", _set(_first_op, "op", "softmax"), 2, "unknown op")
_add("op-unknown-field", _set(_first_op, "comment", "hi"), 2, "unknown field")
_add("op-missing-field", _set(_first_op, "shape", _DELETE), 2, "missing field")
_add("op-shape-mismatch", _set(_first_op, "shape", lambda o: [o["shape"][0], o["shape"][1] + 1]),
     2, "recorded shape")
_add("op-shape-transposed",
     _set(lambda o: _op_line(o, "matmul"), "shape", lambda o: o["shape"][::-1]), 2,
     "recorded shape")
_add("op-arity", _set(_first_op, "args", lambda o: o["args"] + [1]), 2, "argument")
_add("op-arg-self", _set(_first_op, "args", lambda o: [o["id"]] * len(o["args"])), 2,
     "argument")
_add("op-arg-header", _set(_first_op, "args", lambda o: [0] * len(o["args"])), 2,
     "not a matrix line")
_add("op-matmul-not-chaining",
     _set(lambda o: _op_line(o, "matmul"), "args", lambda o: o["args"][::-1]), 2, "")
_add("op-row-out-of-range", _set(lambda o: _op_line(o, "row"), "params", {"index": 3}), 2,
     "out of range")
_add("op-row-negative", _set(lambda o: _op_line(o, "row"), "params", {"index": -1}), 2,
     "param index")
_add("op-row-no-params", _set(lambda o: _op_line(o, "row"), "params", _DELETE), 2, "params")
_add("op-div-sqrt-zero", _set(lambda o: _op_line(o, "div_sqrt"), "params", {"n": 0}), 2,
     "positive")
_add("op-div-sqrt-other-n", _set(lambda o: _op_line(o, "div_sqrt"), "params", {"n": 2}), 1,
     "does not enclose")
_add("op-extra-param", _set(_first_op, "params", {"index": 2, "n": 1}), 2, "params")
# rules and qed
_add("unknown-rule", _set(rule_index, "rule", "trust_me"), 2, "unknown rule")
_add("rule-unknown-field", _set(rule_index, "note", "x"), 2, "unknown field")
_add("brute-force-with-hints", _set(rule_index, "hints", {"good": []}), 2, "no hints",
     bases=("brute",))
_add("cubic-without-hints", _set(rule_index, "hints", _DELETE), 2, "hints", bases=("cubic",))
_add("cubic-line-as-brute_force", _set(rule_index, "rule", "brute_force"), 2, "",
     bases=("cubic",))
_add("brute-line-as-cubic", _set(rule_index, "rule", "cubic"), 2, "hints", bases=("brute",))
_add("qed-names-op", _set(_last, "by", lambda o: o["id"] - 2), 2, "not a rule line")
_add("qed-names-itself", _set(_last, "by", lambda o: o["id"]), 2, "by")
_add("qed-names-weight", _set(_last, "by", 1), 2, "not a rule line")
_add("qed-extra-field", _set(_last, "claim", 5), 2, "unknown field")
_add("data-after-qed", _append_after_qed, 2, "after the qed")
_add("blank-then-data-after-qed", lambda o: dump(o) + ["", "   ", json.dumps({"id": len(o)})],
     2, "after the qed")
# damaged files
_add("truncated-mid-line", _truncate_mid_line, 2, "not valid JSON")
_add("empty-file", _as_bytes(b""), 2, "without a qed", bases=("brute",))
_add("blank-file", _as_bytes(b"\n\n  \n"), 2, "without a qed", bases=("brute",))
_add("random-bytes", _as_bytes(RANDOM_BYTES), 2, "", bases=("brute",))
_add("non-utf8", _non_utf8, 2, "UTF-8")
_add("utf8-bom", _bom, 2, "JSON", bases=("brute",))
_add("nul-bytes", _as_bytes(b"\x00" * 100 + b"\n"), 2, "JSON", bases=("brute",))
# limits
_add("huge-weight-shape", _huge_weight_shape, 2, "limit")
_add("weight-shape-product-over-limit", _weight_shape_product_over_limit, 2, "over the limit",
     bases=("brute",))
_add("huge-op-shape", _huge_op_shape, 2, "exceeds the limit")
_add("line-over-max-line-bytes", lambda o: o, 2, "--max-line-bytes",
     args=("--max-line-bytes", "1000"))
_add("max-work-tiny", lambda o: o, 2, "--max-work", args=("--max-work", "10"))
_add("max-lines", lambda o: o, 2, "more than 20 lines", args=("--max-lines", "20"))
_add("max-elements", lambda o: o, 2, "limit", args=("--max-elements", "10"))
_add("max-seconds", lambda o: o, 2, "--max-seconds", args=("--max-seconds", "0"),
     bases=("brute",))
# cubic hints
_add("hint-token-ge-max", _hint(_token_ge_max), 2, "tokens >= max", bases=("cubic",))
_add("hint-duplicate", _hint(_duplicate_hint), 2, "duplicate hint", bases=("cubic",))
_add("hint-c-out-of-range", _hint(_hint_c_out_of_range), 2, "out of range", bases=("cubic",))
_add("hint-q-above-m", _hint(_hint_q_above_m), 2, "out of range", bases=("cubic",))
_add("hint-bool-mask", _hint(_hint_bool), 2, "bad hint entry", bases=("cubic",))
_add("hint-short-entry", _hint(lambda g: g.append([5, 5, 1])), 2, "bad hint entry",
     bases=("cubic",))
_add("hint-negative-mask", _hint(lambda g: g.append([5, 5, 1, -1])), 2, "names tokens",
     bases=("cubic",))
_add("hints-extra-key", _set(rule_index, "hints", lambda o: {**o["hints"], "bad": []}), 2,
     "hints must be", bases=("cubic",))
# model files
_add("model-other", lambda o: o, 1, "differs from the model file", args=("--model", "OTHER"))
_add("model-not-a-model", lambda o: o, 2, "model file", args=("--model", "NOTMODEL"))
_add("model-missing", lambda o: o, 2, "model file", args=("--model", "MISSING"))


def _materialise(art, mutant: Mutant):
    base = getattr(art, mutant.base)
    result = mutant.mutate(parse(base))
    name = f"mutant_{mutant.name}.jsonl"
    if isinstance(result, bytes):
        path = write_bytes(result, name)
    elif result and isinstance(result[0], dict):
        path = write_lines(dump(result), name)
    else:
        path = write_lines(result, name)
    subst = {"MODEL": art.model, "OTHER": art.other_model,
             "NOTMODEL": certificate_file(art.model, "brute-force"),
             "MISSING": path.with_suffix(".does-not-exist.pt")}
    args = [subst.get(a, a) for a in mutant.args]
    return path, args


def test_mutant_names_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("arith", ARITH)
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_refused(art, capsys, mutant, arith):
    path, args = _materialise(art, mutant)
    started = time.monotonic()
    code, out, err = run(capsys, path, *args, "--arith", arith)
    assert_refused(code, out, err, mutant.code, mutant.needle)
    assert time.monotonic() - started < 10


SUBPROCESS_MUTANTS = ["brute-header-claim+1", "cubic-rule-claim+1", "brute-op-reversed",
                      "brute-op-nan", "brute-random-bytes", "brute-huge-weight-shape",
                      "cubic-weight-ulp+model", "brute-forged-digest", "cubic-non-utf8",
                      "brute-truncated-mid-line", "brute-json-deep-nesting"]


@pytest.mark.parametrize("name", SUBPROCESS_MUTANTS)
def test_mutant_refused_subprocess(art, name):
    (mutant,) = [m for m in MUTANTS if m.name == name]
    path, args = _materialise(art, mutant)
    proc = run_checker_subprocess([path, *args])
    assert_refused(proc.returncode, proc.stdout, proc.stderr, mutant.code, mutant.needle)


@pytest.mark.parametrize("optimize", [False, True], ids=["plain", "python-O"])
@pytest.mark.parametrize("op", ["matmul", "exp"])
def test_reversed_interval_refused_under_python_O(art, optimize, op):
    """mpmath validates lo <= hi only with assert; -O must not make a reversed
    interval acceptable."""
    objs = _edit_interval(op, "reverse", entry=0)(parse(art.cubic))
    path = write_lines(dump(objs), f"reversed_{op}_{optimize}.jsonl")
    proc = run_checker_subprocess([path, "--jobs", "1"], optimize=optimize)
    assert_refused(proc.returncode, proc.stdout, proc.stderr, 2, "reversed interval")


@pytest.mark.parametrize("field", ["data", "lo"])
def test_excess_base64_padding_refused(art, capsys, field):
    objs = parse(art.brute)
    i = 1 if field == "data" else _op_line(objs, "matmul")  # 384 bytes: no padding
    objs[i][field] += "=="
    path = write_lines(dump(objs), f"padding_{field}.jsonl")
    code, out, err = run(capsys, path)
    assert code == 2, "excess base64 padding accepted"


def test_huge_shape_refused_quickly(art, capsys):
    for mutate in (_huge_weight_shape, _huge_op_shape):
        path = write_lines(dump(mutate(parse(art.brute))), "huge.jsonl")
        started = time.monotonic()
        code, out, err = run(capsys, path)
        assert time.monotonic() - started < 2
        assert_refused(code, out, err, 2, "limit")


@pytest.mark.parametrize("base", ["brute", "cubic"])
def test_truncated_at_every_line_boundary(art, capsys, base):
    lines = getattr(art, base)
    for n in range(len(lines)):
        path = write_lines(lines[:n], f"truncated_{base}.jsonl")
        code, out, err = run(capsys, path)
        assert_refused(code, out, err, 2, "without a qed")
        assert f"after {n} lines" in err


@pytest.mark.parametrize("base", ["brute", "cubic"])
def test_truncated_inside_every_line(art, capsys, base):
    """Cut each line in two places (keeping the earlier lines intact)."""
    lines = getattr(art, base)
    text = "".join(s + "\n" for s in lines)
    starts = [0]
    for s in lines:
        starts.append(starts[-1] + len(s) + 1)
    for i, s in enumerate(lines):
        for cut in (1, len(s) // 2):
            path = write_bytes(text[:starts[i] + cut].encode(), f"cut_{base}.jsonl")
            code, out, err = run(capsys, path)
            assert_refused(code, out, err, 2, f"line {i}")


# -- cubic hints claiming a token that is not good -----------------------------------

def _hint_candidates(objs):
    """Every way to claim one more token (or c = 0 flag) than the generator did."""
    r = rule_index(objs)
    good = {(m, q, c): mask for m, q, c, mask, *_ in objs[r]["hints"]["good"]}
    k, v = 3, 6
    for m in range(v):
        for q in range(m + 1):
            for c in range(0, (k - 1 if q == m else k - 2) + 1):
                mask = good.get((m, q, c), 0)
                bits = [0] if c == 0 else range(m)
                for u in bits:
                    if not mask >> u & 1:
                        yield (m, q, c), mask | (1 << u)


def _with_hint(objs, key, mask):
    objs = parse(dump(objs))
    r = rule_index(objs)
    old = [e for e in objs[r]["hints"]["good"] if tuple(e[:3]) == key]
    joint = old[0][4:] if old else []  # keep the generator's joint-bound tokens
    good = [e for e in objs[r]["hints"]["good"] if tuple(e[:3]) != key]
    objs[r]["hints"]["good"] = good + [[*key, mask, *joint]]
    return objs


def _replay(lines, jobs=1):
    checker = CertificateChecker(Limits(), None, jobs)
    for s in lines:
        checker.feed(s)
    return checker.finish()


@pytest.fixture(scope="module")
def bad_cubic_hint(art):
    """A cubic certificate of the random model with one token claimed good that
    the checker finds not good."""
    objs = parse(art.cubic)
    tried = 0
    for key, mask in _hint_candidates(objs):
        tried += 1
        mutant = _with_hint(objs, key, mask)
        try:
            _replay(dump(mutant))
        except Rejected as err:
            assert "claimed" in str(err)
            return key, mask, mutant
        assert tried < 80, "no failing cubic token found among the first 80 candidates"
    pytest.fail("every cubic token of the random model is good")


@pytest.mark.parametrize("arith", ARITH)
def test_cubic_flipped_hint_rejected(bad_cubic_hint, capsys, arith):
    key, mask, objs = bad_cubic_hint
    path = write_lines(dump(objs), "cubic_flipped.jsonl")
    code, out, err = run(capsys, path, "--arith", arith)
    assert_refused(code, out, err, 1, "is claimed")


def test_cubic_flipped_hint_rejected_subprocess_with_workers(bad_cubic_hint):
    """The same, with forked workers (a worker's Rejected must become exit 1)."""
    key, mask, objs = bad_cubic_hint
    path = write_lines(dump(objs), "cubic_flipped_jobs.jsonl")
    proc = run_checker_subprocess([path, "--jobs", "2"])
    assert_refused(proc.returncode, proc.stdout, proc.stderr, 1, "is claimed")


def test_cubic_all_tokens_claimed_rejected(art):
    """Claiming every token good everywhere (with the claim raised to match)."""
    objs = parse(art.cubic)
    r = rule_index(objs)
    good = []
    for m in range(6):
        for q in range(m + 1):
            for c in range(0, (2 if q == m else 1) + 1):
                good.append([m, q, c, 1 if c == 0 else (1 << m) - 1])
    objs[r]["hints"]["good"] = good
    with pytest.raises(Rejected, match="claimed"):
        _replay(dump(objs))


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_verified_counts_never_exceed_ground_truth(seed):
    """Soundness on a few more random models: brute force and cubic certify no
    more sequences than the exact float64 ground truth counts correct."""
    from checker_fixtures import certificate_lines

    from generator.ground_truth import count_correct
    from generator.modelfile import load_model

    model = random_model(seed)
    truth = count_correct(load_model(model).weights)
    counts = {}
    for strategy in ("brute-force", "cubic"):
        report = _replay(certificate_lines(model, strategy))
        counts[strategy] = report.facts.correct
    assert counts["cubic"] <= counts["brute-force"] <= truth.correct, (counts, truth)


def test_mutants_do_not_verify_with_checker_api(art):
    """The library entry point raises (never returns a report) for a sample."""
    for name in ("brute-header-claim+1", "cubic-op-tightened-hi", "brute-id-skips"):
        (mutant,) = [m for m in MUTANTS if m.name == name]
        path, _ = _materialise(art, mutant)
        with pytest.raises((Malformed, Rejected)):
            _replay(path.read_text().splitlines())


# -- a false theorem through a non-rigorous exp (regression) ------------------------
# mpmath's iv.exp is not a guaranteed enclosure (iv.exp(2**-52) == [1+2**-52, 1+2**-52]).
# Until commit 4cf1e68 the checker used it, and the crafted model below got a
# certificate of "correct >= 5" verified while only 3 sequences are correct over the
# reals.  The checker now computes exp rigorously (numbers.exp_interval).


def _exp_exploit_weights():
    """d_vocab 3, n_ctx 3, d_head 1 (so 1/sqrt(d_head) is exact), all values dyadic.

    For the sequence (2, 1, 0): scores (2^-52, 0, 0), values (1, -(1+2^-52), -2^-120)
    feeding logit 1; logit 2 is 0.  Over the reals logit_1 − logit_2 has the sign of
    e^(2^-52) − 1 − 2^-52 − 2^-120 ≈ 2^-105 > 0: the model is wrong.  With
    exp(2^-52) taken as 1+2^-52 the checker's sum is exactly −2^-120 < 0."""
    from checker.modelspec import Dims
    from generator.model import ModelWeights

    dims = Dims(3, 3, 4, 1)
    e = np.zeros((3, 4), np.float32)
    e[0, 1] = -(2.0**-120)
    e[1, 1], e[1, 2] = -1.0, -(2.0**-52)
    e[2, 0], e[2, 1] = 2.0**-26, 1.0
    w_k, w_v, w_o, w_u = (np.zeros(s, np.float32) for s in ((4, 1), (4, 1), (1, 4), (4, 3)))
    w_k[0, 0] = 1.0  # key = coordinate 0 of the token embedding
    w_v[1, 0] = w_v[2, 0] = 1.0  # value = coordinates 1 + 2
    w_o[0, 3] = 1.0  # attention output to coordinate 3
    w_u[3, 1] = 1.0  # ... which is logit 1
    return ModelWeights.zeros(dims).replace(
        W_E=e, W_K=w_k, W_V=w_v, W_O=w_o, W_U=w_u, b_Q=np.array([2.0**-26], np.float32),
        b_U=np.array([-8.0, 0.0, 0.0], np.float32))


def _exact_correct(weights, tokens, prec=400) -> bool:
    """Is the model right on `tokens`, over the reals (mpmath at `prec` bits, straight
    from the forward pass; ties are wrong)?"""
    from mpmath import mp, mpf

    def mat(name):
        return [[mpf(float(x)) for x in row]
                for row in np.atleast_2d(np.asarray(getattr(weights, name), np.float64))]

    def vecmat(x, m):
        return [mp.fsum(x[i] * m[i][j] for i in range(len(x))) for j in range(len(m[0]))]

    def add(a, b):
        return [x + y for x, y in zip(a, b)]

    with mp.workprec(prec):
        w_e, w_pos, w_q, w_k, w_v, w_o, w_u = map(mat, ("W_E", "W_pos", "W_Q", "W_K", "W_V",
                                                        "W_O", "W_U"))
        b_q, b_k, b_v, b_o, b_u = (mat(n)[0] for n in ("b_Q", "b_K", "b_V", "b_O", "b_U"))
        h0 = [add(w_e[t], w_pos[i]) for i, t in enumerate(tokens)]
        query = add(vecmat(h0[-1], w_q), b_q)
        keys = [add(vecmat(h, w_k), b_k) for h in h0]
        values = [add(vecmat(h, w_v), b_v) for h in h0]
        scores = [mp.fsum(a * b for a, b in zip(query, k)) / mp.sqrt(len(query)) for k in keys]
        e = [mp.exp(s) for s in scores]
        z = [mp.fsum(e[i] * values[i][j] for i in range(len(e))) / mp.fsum(e)
             for j in range(len(query))]
        logits = add(vecmat(add(h0[-1], vecmat(z, w_o)), w_u), b_u)
        top = max(tokens)
        return all(logits[top] > logits[o] for o in range(len(logits)) if o != top)


def _float_down(x) -> float:
    """The largest float64 <= the mpmath interval endpoint x (exactly)."""
    from fractions import Fraction

    from mpmath.libmp import to_rational

    exact = Fraction(*to_rational(x))
    f = float(exact)
    return f if Fraction(f) <= exact else float(np.nextafter(f, -np.inf))


def _float_up(x) -> float:
    from fractions import Fraction

    from mpmath.libmp import to_rational

    exact = Fraction(*to_rational(x))
    f = float(exact)
    return f if Fraction(f) >= exact else float(np.nextafter(f, np.inf))


def _tight_certificate(model_path, claim=None):
    """The generator's brute-force certificate with every op line's interval
    replaced by the checker's own enclosure rounded outward to float64 (points
    where the checker's result is an exact point): allowed, since a recorded
    interval need only contain the checker's."""
    from checker import ops as checker_ops
    from generator.cli import generate

    lines, _ = generate(str(model_path), "brute-force", progress=False)
    objs = parse(lines)
    replay = CertificateChecker(Limits(), None, 1)
    for o in objs:
        if o["kind"] == "op":
            function, _, names = checker_ops.OPS[o["op"]]
            m = function(*[replay.values[a].matrix for a in o["args"]],
                         *[o["params"][p] for p in names])
            flat = [x for row in m for x in row]
            o["lo"] = encode(np.array([_float_down(x._mpi_[0]) for x in flat]), "<f8")
            o["hi"] = encode(np.array([_float_up(x._mpi_[1]) for x in flat]), "<f8")
            o.pop("float", None)
        if o["kind"] == "rule":
            break
        replay.feed(json.dumps(o))
    if claim is not None:
        _set_claim(objs, claim - header_claim(objs))
    return objs


@pytest.fixture(scope="module")
def exp_exploit():
    import itertools

    from checker_fixtures import workdir

    from generator.modelfile import save_model

    weights = _exp_exploit_weights()
    path = workdir() / "exp_exploit.pt"
    save_model(path, weights, {})
    truth = sum(_exact_correct(weights, t) for t in itertools.product(range(3), repeat=3))
    # the count the checker's brute_force rule certifies, from its own note
    objs = _tight_certificate(path)
    report = _replay(dump(objs))
    certified = int(report.rule_notes[0].split()[1])
    return path, weights, truth, certified


def test_exp_exploit_model_is_as_designed(exp_exploit):
    path, weights, truth, certified = exp_exploit
    assert truth == 3
    assert not _exact_correct(weights, (2, 1, 0))  # wrong over the reals ...
    from generator.ground_truth import count_correct
    # ... and float64 cannot see it (e^(2^-52) rounds to 1 + 2^-52)
    assert count_correct(weights).correct > truth


def test_exp_exploit_certifies_no_more_than_the_truth(exp_exploit):
    path, weights, truth, certified = exp_exploit
    assert certified <= truth, f"brute_force certifies {certified} sequences, {truth} are correct"


@pytest.mark.parametrize("arith", ARITH)
def test_exp_exploit_false_theorem_refused(exp_exploit, capsys, arith):
    """A tight certificate claiming one more correct sequence than exist (over the
    reals), with --model: the checker must not say VERIFIED."""
    path, weights, truth, certified = exp_exploit
    cert = write_lines(dump(_tight_certificate(path, claim=truth + 1)), "exp_exploit.jsonl")
    code, out, err = run(capsys, cert, "--model", path, "--arith", arith)
    assert_refused(code, out, err, 1, "proves")
    # ... while the truth itself verifies
    cert = write_lines(dump(_tight_certificate(path, claim=truth)), "exp_exploit_ok.jsonl")
    code, out, err = run(capsys, cert, "--model", path, "--arith", arith)
    assert code == 0, err


# -- resource limits hold inside the checker's own arithmetic ----------------------------

def test_exp_of_huge_recorded_argument_refused_quickly(art):
    """EQKE recorded as [-1e308, 1e308] at one entry is a valid (loose) enclosure; exp of
    it cannot be recorded as a finite interval anyway (it overflows binary64)
    and must be refused within the limits, not computed for hours."""
    import subprocess

    objs = _edit_interval("div_sqrt", "huge_both", entry=0)(parse(art.cubic))  # ±1e308
    path = write_lines(dump(objs), "huge_exp_arg.jsonl")
    try:
        proc = run_checker_subprocess([path, "--jobs", "1", "--max-seconds", "2"], timeout=8)
    except subprocess.TimeoutExpired:
        raise AssertionError("checker still running after 8 s (--max-seconds 2)") from None
    assert proc.returncode in (1, 2), proc.stderr
    assert "Traceback" not in proc.stderr
