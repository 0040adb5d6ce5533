"""Regression tests of the hardening audit (issue 7): bounded memory through --model and
through the certificate, --model bit for bit, and a closed stdout on failure.

Each test failed before its fix: the 20 MB `N0` pickle was accepted after ~2 GB and 20 s;
the stored-element budget did not exist; an int64 b_U of 2^62 + 512 matched a float32 2^62;
`check-cert --json` into a closed pipe died with a BrokenPipeError traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import safetensors.torch
import torch

from checker import modelfile
from checker.certificate import CertificateChecker, Limits, check_against_model_file
from checker.cli import main as check_cert
from checker.errors import Malformed, Rejected
from checker.modelfile import ModelFile, ModelFileError, Tensor, read_model_tensors
from checker.modelspec import infer_dims

ROOT = Path(__file__).resolve().parent.parent
CERT = ROOT / "certs" / "max3_v8_seed0.brute-force.jsonl"
MODEL = ROOT / "generator" / "models" / "max3_v8_seed0.pt"


# ---- 1. memory through --model ---------------------------------------------------------------

def _with_pickle_prefix(path: Path, prefix: bytes) -> Path:
    """The shipped model with `prefix` (opcodes that leave the stack as it was) inserted
    after data.pkl's PROTO opcode: the same state dict, a longer pickle."""
    with zipfile.ZipFile(MODEL) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    name = next(n for n in members if n.endswith("/data.pkl"))
    pkl = members[name]
    members[name] = pkl[:2] + prefix + pkl[2:]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    return path


def test_long_trivial_pickle_is_refused_by_size(tmp_path):
    path = _with_pickle_prefix(tmp_path / "n0.pt", b"N0" * (modelfile.MAX_PICKLE_BYTES // 2 + 1))
    with pytest.raises(ModelFileError, match="data.pkl has .* bytes, over the limit"):
        read_model_tensors(path)


def test_many_opcodes_are_refused(tmp_path):
    ops = modelfile.MAX_PICKLE_OPCODES // 2 + 1  # two opcodes per b"N0"
    assert 2 * ops + 2000 < modelfile.MAX_PICKLE_BYTES  # under the byte limit
    path = _with_pickle_prefix(tmp_path / "n0.pt", b"N0" * ops)
    with pytest.raises(ModelFileError, match="opcodes"):
        read_model_tensors(path)


def test_opcode_scan_streams(monkeypatch):
    """The scan's memory does not grow with the pickle (it held ~100 bytes per byte)."""
    monkeypatch.setattr(modelfile, "MAX_PICKLE_OPCODES", 10**7)
    pkl = b"\x80\x02" + b"N0" * 100_000 + b"N."
    tracemalloc.start()
    try:
        modelfile._check_opcodes(pkl)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak  # a list of 200k opcodes alone is ~20 MB


def test_zip_member_count_is_bounded(monkeypatch):
    read_model_tensors(MODEL)
    monkeypatch.setattr(modelfile, "MAX_ZIP_MEMBERS", 5)
    with pytest.raises(ModelFileError, match="members"):
        read_model_tensors(MODEL)


def test_default_model_file_limits_are_small():
    """State-dict files of models the checker can replay are a few MB (spec/format.md)."""
    assert modelfile.MAX_BYTES <= 64 << 20 and modelfile.MAX_ELEMENTS <= 1 << 22
    assert modelfile.MAX_HEADER_BYTES <= 1 << 20 and modelfile.MAX_PICKLE_BYTES <= 1 << 20


# ---- 2. memory through the certificate -------------------------------------------------------

def _objs() -> list[dict]:
    return [json.loads(s) for s in CERT.read_text().splitlines()]


def _stored_elements(objs) -> int:
    total = 0
    for o in objs:
        if o["kind"] in ("weight", "op"):
            n = 1
            for s in o["shape"]:
                n *= s
            total += n
    return total


def test_stored_elements_are_budgeted(tmp_path, capsys):
    need = _stored_elements(_objs())
    assert check_cert([str(CERT), "--max-stored-elements", str(need), "--jobs", "1"]) == 0
    capsys.readouterr()
    assert check_cert([str(CERT), "--max-stored-elements", str(need - 1)]) == 2
    assert "--max-stored-elements" in capsys.readouterr().err


def test_budget_is_charged_before_decoding():
    """A line over the budget is refused before its intervals are decoded (its lo/hi here
    are not even base64)."""
    objs = _objs()
    first_op = next(i for i, o in enumerate(objs) if o["kind"] == "op")
    objs[first_op]["lo"] = objs[first_op]["hi"] = "!"
    checker = CertificateChecker(Limits(max_stored_elements=_stored_elements(objs[:first_op])))
    for o in objs[:first_op]:
        checker.feed(json.dumps(o))
    with pytest.raises(Malformed, match="elements in all"):
        checker.feed(json.dumps(objs[first_op]))


def test_default_limits_bound_memory():
    """The defaults stated in spec/format.md §resource model."""
    d = Limits()
    assert d.max_stored_elements <= 1 << 22 and d.max_elements <= 1 << 20
    assert d.max_line_bytes <= 32 << 20


# ---- 3. --model bit for bit ------------------------------------------------------------------

def _weights_of(model: Path) -> dict:
    mf = read_model_tensors(model)
    from checker.modelspec import PARAMETERS
    return {n: (mf.tensors[n].shape, mf.tensors[n].values) for n, _, _ in PARAMETERS}


def test_int64_bias_is_not_its_float32_rounding():
    """The audit's case: an int64 2^62 + 512 is not the float32 2^62 (float() rounds it)."""
    weights = _weights_of(MODEL)
    shape, values = weights["unembed.b_U"]
    weights["unembed.b_U"] = (shape, (2.0**62,) + values[1:])
    mf = read_model_tensors(MODEL)
    tensors = dict(mf.tensors)
    tensors["unembed.b_U"] = Tensor(shape, (2**62 + 512,) + tuple(int(v) for v in values[1:]),
                                    "int64")
    dims = infer_dims({n: s for n, (s, _) in weights.items()})
    with pytest.raises(Rejected, match="int64, not float32"):
        check_against_model_file(weights, ModelFile(mf.sha256, tensors), dims)
    tensors["unembed.b_U"] = Tensor(shape, (2.0**62,) + values[1:], "float32")
    check_against_model_file(weights, ModelFile(mf.sha256, tensors), dims)  # same bits: fine


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.float16,
                                   torch.bfloat16, torch.float64])
def test_non_float32_parameters_are_refused(tmp_path, capsys, dtype):
    """A safetensors file whose (zero) b_U is stored in another dtype: the values are equal
    as reals, but the file is not the certificate's float32 weights bit for bit."""
    sd = torch.load(MODEL, weights_only=True)["model"]
    sd = {k: v.contiguous() for k, v in sd.items()}
    assert not sd["unembed.b_U"].any()
    sd["unembed.b_U"] = sd["unembed.b_U"].to(dtype)
    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file(sd, str(path))
    assert check_cert([str(CERT), "--model", str(path), "--jobs", "1"]) == 1
    assert "not float32" in capsys.readouterr().err


# ---- 4. a closed stdout ----------------------------------------------------------------------

@pytest.mark.parametrize("damage,code", [("truncate", 2), ("overclaim", 1)])
def test_closed_stdout_on_failure_is_one_line_not_a_traceback(tmp_path, damage, code):
    lines = CERT.read_text().splitlines()
    if damage == "truncate":
        text = lines[0][:300]
    else:
        objs = [json.loads(s) for s in lines]
        rule = next(o for o in objs if o["kind"] == "rule")
        rule["claim"] += 1
        text = "\n".join(json.dumps(o) for o in objs)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text + "\n")
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: every write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "checker", str(bad), "--json", "--jobs", "1"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=os.environ | {"PYTHONPATH": str(ROOT)}, timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "stdout is closed" in proc.stderr


def test_reading_the_model_file_counts_against_the_time_limit(tmp_path, monkeypatch):
    import time

    from checker import cli

    def slow_read(path, **_):
        time.sleep(1.0)
        return read_model_tensors(path)

    monkeypatch.setattr(modelfile, "read_model_tensors", slow_read)
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(CERT.read_text().splitlines()[:2]) + "\n")
    with pytest.raises(Malformed, match="longer than"):
        cli.check_file(str(short), Limits(max_seconds=0.9), str(MODEL))
