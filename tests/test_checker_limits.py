"""Findings of the adversarial audit, kept as regression tests: limits hold
inside a single line, odd JSON types fail cleanly, and --model compares
weights bit for bit (−0.0 is not +0.0)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from checker import ops
from checker.certificate import weights_digest
from checker.cli import main as check_cert
from checker.modelspec import PARAMETERS, infer_dims
from checker.numbers import point

ROOT = Path(__file__).resolve().parent.parent
CERT = ROOT / "certs" / "max3_v8_seed0.brute-force.jsonl"
MODEL = ROOT / "generator" / "models" / "max3_v8_seed0.pt"


class Stop(Exception):
    pass


def _counting_tick(limit):
    calls = []

    def tick():
        calls.append(1)
        if len(calls) > limit:
            raise Stop

    return tick, calls


@pytest.mark.parametrize("op", ["matmul", "exp"])
def test_long_ops_consult_the_clock_every_element(op):
    a = [[point(0.5)] * 4 for _ in range(6)]
    tick, calls = _counting_tick(limit=2)
    with pytest.raises(Stop):  # the limit fires inside the op, at the 3rd element
        ops.matmul(a, [[point(1.0)] * 3] * 4, tick=tick) if op == "matmul" \
            else ops.exp(a, tick=tick)
    assert len(calls) == 3


def _lines():
    return [json.loads(s) for s in CERT.read_text().splitlines()]


def _run(tmp_path, objs, *extra, capsys):
    path = tmp_path / "cert.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    code = check_cert([str(path), *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("kind,field", [("op", "op"), ("rule", "rule")])
def test_a_list_where_a_name_belongs_is_malformed_not_an_internal_error(tmp_path, capsys,
                                                                        kind, field):
    objs = _lines()
    line = next(o for o in objs if o["kind"] == kind)
    line[field] = ["x"]
    code, err = _run(tmp_path, objs, capsys=capsys)
    assert code == 2 and f"unknown {field}" in err and "internal error" not in err


def test_negative_zero_weight_differs_from_the_model_files_positive_zero(tmp_path, capsys):
    objs = _lines()
    weights = {o["name"]: o for o in objs if o["kind"] == "weight"}
    b_u = weights["unembed.b_U"]
    values = list(struct.unpack(f"<{b_u['shape'][0]}f", base64.b64decode(b_u["data"])))
    assert values[0] == 0.0  # the shipped model's biases are zero
    values[0] = -0.0
    b_u["data"] = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
    # re-bind the theorem to the edited weights, so that only --model can object
    decoded = {}
    for name, _, _ in PARAMETERS:
        w = weights[name]
        n = 1
        for s in w["shape"]:
            n *= s
        decoded[name] = (tuple(w["shape"]),
                         struct.unpack(f"<{n}f", base64.b64decode(w["data"])))
    dims = infer_dims({n: s for n, (s, _) in decoded.items()})
    digest = weights_digest(dims, decoded)
    header = objs[0]
    header["theorem"] = " and ".join(
        f"weights == sha256:{digest}" if part.startswith("weights") else part
        for part in header["theorem"].split(" and "))
    code, _ = _run(tmp_path, objs, capsys=capsys)
    assert code == 0  # the same real-valued model: the theorem itself holds
    code, err = _run(tmp_path, objs, "--model", str(MODEL), capsys=capsys)
    assert code == 1 and "differs from the model file" in err
