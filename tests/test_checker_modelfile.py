"""checker.modelfile: exact tensor values without torch, and refusal of every bad file."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import pickle
import random
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import safetensors.torch
import torch

from checker.errors import Malformed
from checker.modelfile import ModelFileError, read_model_tensors
from checker.modelspec import PARAMETERS, Dims

DIMS = Dims(d_vocab=8, n_ctx=3, d_model=8, d_head=8)
REPO = Path(__file__).resolve().parent.parent


def state_dict(dims: Dims = DIMS, seed: int = 0) -> dict[str, torch.Tensor]:
    """A TransformerLens-style state dict: random weights, zero biases, mask and IGNORE."""
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for name, _, required in PARAMETERS:
        shape = dims.shape_of(name)
        sd[name] = torch.randn(shape, generator=gen) if required else torch.zeros(shape)
    sd["blocks.0.attn.mask"] = torch.tril(torch.ones(dims.n_ctx, dims.n_ctx)).bool()
    sd["blocks.0.attn.IGNORE"] = torch.tensor(-1e5)
    return sd


def odd_tensors() -> dict[str, torch.Tensor]:
    """Views with general strides and offsets, and the other dtypes."""
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(4, 5, 6, generator=gen)
    return {"transposed": base[0].t(), "permuted": base.permute(2, 0, 1),
            "sliced": base[1:3, ::2, 1::3], "expanded": torch.tensor([2.5]).expand(3, 4),
            "empty": torch.zeros(0, 3), "half": torch.randn(7, generator=gen).half(),
            "bf16": torch.randn(5, generator=gen).bfloat16(),
            "double": torch.randn(2, 2, generator=gen).double(), "long": torch.arange(-3, 3),
            "int": torch.arange(4, dtype=torch.int32), "scalar_half": torch.tensor(0.1).half()}


def bits(values) -> list:
    """Compare floats bit for bit (so -0.0 differs from 0.0); ints as they are."""
    return [v.hex() if isinstance(v, float) else int(v) for v in values]


def assert_same(got, expected: dict[str, torch.Tensor], path: Path) -> None:
    assert got.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert set(got.tensors) == set(expected)
    for name, ref in expected.items():
        t = got.tensors[name]
        assert t.shape == tuple(ref.shape), name
        assert t.dtype == str(ref.dtype).removeprefix("torch."), name
        assert bits(t.values) == bits(ref.flatten().tolist()), name
        assert isinstance(t.values, tuple)


# ---- reading what torch and safetensors write ------------------------------------------------

def test_bare_state_dict(tmp_path):
    sd = state_dict()
    torch.save(sd, tmp_path / "m.pt")
    assert_same(read_model_tensors(tmp_path / "m.pt"), sd, tmp_path / "m.pt")


def test_wrapped_state_dict_reads_known_entries_and_refuses_others(tmp_path):
    """A model file means one model: training metadata is read (inert), an entry the
    checker does not understand is refused by name, never ignored (issue 18)."""
    sd = state_dict()
    path = tmp_path / "m.pth"
    torch.save({"model": sd, "train_metrics": {"acc": 0.9, "xs": [1, (2, 3.5)]}}, path)
    assert_same(read_model_tensors(path), sd, path)
    torch.save({"model": sd, "train_metrics": {"acc": 0.9}, "wandb_id": "abc"}, path)
    with pytest.raises(ModelFileError, match="'wandb_id'"):
        read_model_tensors(path)
    torch.save({"model": sd, "config": {"n_layers": 1}, "model_config": {"n_layers": 1}}, path)
    with pytest.raises(ModelFileError, match="both 'config' and 'model_config'"):
        read_model_tensors(path)


def test_module_state_dict_with_metadata_and_parameters(tmp_path):
    """A real nn.Module state dict is an OrderedDict carrying `_metadata` (pickle BUILD)."""
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    module.register_buffer("mask", torch.tril(torch.ones(3, 3)).bool())
    sd = module.state_dict()
    assert hasattr(sd, "_metadata")
    path = tmp_path / "m.pt"
    torch.save(sd, path)
    assert_same(read_model_tensors(path), sd, path)
    params = {"w": torch.nn.Parameter(torch.randn(2, 3))}
    torch.save(params, path)
    assert_same(read_model_tensors(path), {"w": params["w"].detach()}, path)


def test_strided_views_and_dtypes(tmp_path):
    extra = odd_tensors()
    assert not extra["transposed"].is_contiguous() and not extra["sliced"].is_contiguous()
    path = tmp_path / "odd.bin"  # dispatch is on content, not on the name
    torch.save({"model": extra, "train_metrics": 1}, path)
    assert_same(read_model_tensors(path), extra, path)


def test_shared_storage(tmp_path):
    sd = state_dict()
    sd["unembed.W_U"] = sd["embed.W_E"].t()  # tied weights: one storage, two views
    torch.save(sd, tmp_path / "m.pt")
    assert_same(read_model_tensors(tmp_path / "m.pt"), sd, tmp_path / "m.pt")


def test_safetensors(tmp_path):
    sd = state_dict() | {k: v.contiguous().clone() for k, v in odd_tensors().items()}
    sd["bool"] = torch.tensor([True, False, True])
    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file(sd, str(path), metadata={"format": "pt"})
    assert_same(read_model_tensors(path), sd, path)
    other = tmp_path / "m.pt"  # dispatch on content: a safetensors file named .pt
    other.write_bytes(path.read_bytes())
    assert_same(read_model_tensors(other), sd, other)


def test_generator_save_model_files_are_read(tmp_path):
    """The project's own writer (generator.modelfile.save_model), if present."""
    gen = pytest.importorskip("generator.modelfile")
    model = pytest.importorskip("generator.model")
    if not hasattr(model, "ModelWeights") or not hasattr(model.ModelWeights, "from_state_dict"):
        pytest.skip("generator.model has no ModelWeights.from_state_dict")
    weights = model.ModelWeights.from_state_dict(state_dict())
    for name in ("g.pt", "g.safetensors"):
        sha = gen.save_model(tmp_path / name, weights, {"acc": 0.5})
        got = read_model_tensors(tmp_path / name)
        assert got.sha256 == sha
        for key, ref in weights.to_state_dict().items():
            assert bits(got.tensors[key].values) == bits(ref.flatten().tolist()), key


def test_64x32_model(tmp_path):
    sd = state_dict(Dims(d_vocab=64, n_ctx=4, d_model=32, d_head=32))
    torch.save({"model": sd, "model_config": {}}, tmp_path / "m.pt")
    assert_same(read_model_tensors(tmp_path / "m.pt"), sd, tmp_path / "m.pt")


# ---- files crafted by an attacker ------------------------------------------------------------

class _Evil:
    def __init__(self, call, args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


class _FakeStorage:
    def __init__(self, cls, key, numel):
        self.cls, self.key, self.numel = cls, key, numel


class _FakeTensor:
    """Pickles as torch does (real torch globals), with arguments of our choice."""

    def __init__(self, storage, offset, size, stride, hooks=None, rebuild=None):
        self.args = (storage, offset, size, stride, False, hooks or collections.OrderedDict())
        self.rebuild = rebuild or torch._utils._rebuild_tensor_v2

    def __reduce__(self):
        return self.rebuild, self.args


class _TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _FakeStorage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def torch_pickle(obj) -> bytes:
    import io
    buf = io.BytesIO()
    _TorchPickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def write_zip(path: Path, members: dict[str, bytes], compress=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data, compress_type=compress)
    return path


def torch_zip(path: Path, pkl: bytes, storages=None, byteorder=b"little") -> Path:
    members = {"archive/data.pkl": pkl, "archive/byteorder": byteorder}
    members |= {f"archive/data/{k}": v for k, v in (storages or {}).items()}
    return write_zip(path, members)


def refused(path: Path, *words: str, **limits) -> str:
    with pytest.raises(ModelFileError) as info:
        read_model_tensors(path, **limits)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message
    assert isinstance(info.value, Malformed) and info.value.exit_code == 2
    return message


EVIL_CALLS = {"posix.system": (os.system, "touch {m}"),
              "builtins.eval": (eval, "open({m!r}, 'w')"),
              "builtins.exec": (exec, "open({m!r}, 'w')"),
              "subprocess.call": (subprocess.call, ["touch", "{m}"]),
              "torch.serialization.load": (torch.load, "{m}"),
              "torch._utils._rebuild_tensor": (torch._utils._rebuild_tensor, "{m}")}


@pytest.mark.parametrize("name", sorted(EVIL_CALLS))
def test_code_execution_refused(tmp_path, name):
    marker = tmp_path / "pwned"
    call, arg = EVIL_CALLS[name]
    arg = [a.format(m=str(marker)) for a in arg] if isinstance(arg, list) \
        else arg.format(m=str(marker))
    evil = _Evil(call, (arg,))
    bare = tmp_path / "bare.pt"
    bare.write_bytes(pickle.dumps({"model": evil}, protocol=2))
    refused(bare)
    pkl = pickle.dumps({"model": evil}, protocol=2, fix_imports=False)
    refused(torch_zip(tmp_path / "zip.pt", pkl), f"global {name!r}", "refused")
    # torch.save itself writes protocol 2 with Python 2 names (__builtin__.eval, ...).
    torch.save({"model": state_dict(), "train_metrics": evil}, tmp_path / "saved.pt")
    refused(tmp_path / "saved.pt", name.rsplit(".", 1)[1], "refused")
    assert not marker.exists()


def test_pickle_cannot_modify_stand_ins(tmp_path):
    """BUILD (setstate) on a whitelisted global, a storage type or a tensor is refused."""
    for target in (b"ctorch\nFloatStorage\n", b"ctorch._utils\n_rebuild_tensor_v2\n"):
        pkl = b"\x80\x02" + target + b"}X\x05\x00\x00\x00dtypeK\x01sb."
        refused(torch_zip(tmp_path / "b.pt", pkl), "modify")
    storage = _FakeStorage(torch.FloatStorage, "0", 2)
    pkl = torch_pickle(collections.OrderedDict(w=_FakeTensor(storage, 0, (2,), (1,))))
    # BUILD on the OrderedDict stand-in (as state_dict()'s `_metadata` does) is ignored.
    build = pkl[:-1] + b"}X\x05\x00\x00\x00shapeK\x01sb."
    got = read_model_tensors(torch_zip(tmp_path / "ok.pt", build, {"0": bytes(8)}))
    assert got.tensors["w"].values == (0.0, 0.0)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocols(tmp_path, protocol):
    sd = {"a": torch.randn(3, 2).t(), "m": torch.ones(2).bool()}
    path = tmp_path / "p.pt"
    cfg = {"b": [2**70, -1.5, (None, True)]}
    torch.save({"model": sd, "train_metrics": cfg}, path, pickle_protocol=protocol)
    assert_same(read_model_tensors(path), sd, path)


@pytest.mark.parametrize("pkl,why", [
    (b"\x80\x02}r\xff\xff\xff\x7f.", "LONG_BINPUT 2147483647"),  # memo array of 2**31
    (b"\x80\x02(X\x04\x00\x00\x00trueiposix\nsystem\n.", "INST"),
    (b"\x80\x02(ctorch\nFloatStorage\no.", "OBJ"),
    (b"\x80\x02ctorch\nFloatStorage\n)\x81.", "NEWOBJ"),
    (b"\x80\x02\x82\x01.", "EXT1"),
    (b"\x80\x02Pabc\n.", "PERSID"),
    (b"\x80\x02S'a\\q'\n.", "STRING"),
    (b"\x80\x05\x96\xff\xff\xff\xff\xff\xff\xff\x00.", "ValueError"),  # BYTEARRAY8
    (b"\x80\x05\x97.", "NEXT_BUFFER"),
    (b"\x80\x02}", "ValueError"),  # no STOP
])
def test_refused_opcodes(tmp_path, pkl, why):
    refused(torch_zip(tmp_path / "o.pt", pkl), why)


@pytest.mark.parametrize("offset,size,stride,why", [
    (1, (2,), (1,), "outside its storage"),
    (0, (2, 2), (1, 1), "outside its storage"),
    (0, (2,), (1, 1), "unsupported arguments"),
    (-1, (1,), (1,), "unsupported arguments"),
    (0, (3,), (-1,), "non-negative"),
    (0, (True,), (1,), "non-negative"),
    (0, [2.0], (1,), "non-negative"),
])
def test_bad_views(tmp_path, offset, size, stride, why):
    storage = _FakeStorage(torch.FloatStorage, "0", 2)
    pkl = torch_pickle({"w": _FakeTensor(storage, offset, size, stride)})
    refused(torch_zip(tmp_path / "v.pt", pkl, {"0": bytes(8)}), why)


def test_bad_storages(tmp_path):
    def one(storage, data, *words, **kw):
        pkl = torch_pickle({"w": _FakeTensor(storage, 0, (2,), (1,), **kw)})
        refused(torch_zip(tmp_path / "s.pt", pkl, data), *words)

    one(_FakeStorage(torch.FloatStorage, "0", 2), {"0": bytes(7)}, "7 bytes")
    one(_FakeStorage(torch.FloatStorage, "0", 2), {}, "KeyError")
    one(_FakeStorage(torch.ByteStorage, "0", 2), {"0": bytes(2)}, "torch.ByteStorage")
    one(_FakeStorage(torch.BoolStorage, "0", 2), {"0": b"\x00\x02"}, "0 or 1")
    one(_FakeStorage(torch.FloatStorage, "0", 2), {"0": bytes(8)}, "unsupported",
        hooks=collections.OrderedDict(a=1))
    two = torch_pickle({"a": _FakeTensor(_FakeStorage(torch.FloatStorage, "0", 2), 0, (2,), (1,)),
                        "b": _FakeTensor(_FakeStorage(torch.IntStorage, "0", 2), 0, (2,), (1,))})
    refused(torch_zip(tmp_path / "t.pt", two, {"0": bytes(8)}), "two different")


def test_not_a_state_dict(tmp_path):
    for obj in ([1, 2], {"model": {"w": 1}}, {"w": 1.5}, {1: 2}):
        refused(torch_zip(tmp_path / "n.pt", torch_pickle(obj)), "state dict")


def test_broken_zips(tmp_path):
    good = tmp_path / "good.pt"
    torch.save(state_dict(), good)
    data = good.read_bytes()
    with zipfile.ZipFile(good) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    pkl = members["good/data.pkl"]
    refused(write_zip(tmp_path / "nopkl.pt", {"good/version": b"3\n"}), "data.pkl")
    refused(write_zip(tmp_path / "two.pt", {"a/data.pkl": pkl, "b/data.pkl": pkl}), "data.pkl")
    refused(write_zip(tmp_path / "deep.pt", {"a/b/data.pkl": pkl}), "data.pkl")
    refused(write_zip(tmp_path / "z.pt", members, zipfile.ZIP_DEFLATED), "compressed")
    refused(torch_zip(tmp_path / "be.pt", pkl, byteorder=b"big"), "little-endian")
    dup = tmp_path / "dup.pt"
    with pytest.warns(UserWarning), zipfile.ZipFile(dup, "w") as zf:
        for name, member in members.items():
            zf.writestr(name, member)
        zf.writestr("good/data.pkl", pkl)
    refused(dup, "duplicate")
    start = data.index(b"\x80\x02")  # the first stored byte of data.pkl
    crc = bytearray(data)
    crc[start + 10] ^= 1
    (tmp_path / "crc.pt").write_bytes(bytes(crc))
    refused(tmp_path / "crc.pt")
    for cut in (10, len(data) // 2, len(data) - 30):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        refused(tmp_path / "cut.pt")


def test_not_model_files(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    refused(tmp_path / "empty.pt", "neither")
    (tmp_path / "rand.pt").write_bytes(random.Random(0).randbytes(5000))
    refused(tmp_path / "rand.pt", "neither")
    (tmp_path / "short").write_bytes(b"PK")
    refused(tmp_path / "short")
    refused(tmp_path / "missing.pt", "FileNotFoundError")
    refused(tmp_path, "a directory without config.json")
    torch.save(state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    refused(tmp_path / "legacy.pt", "neither")


def safetensors_file(path: Path, header: dict, data: bytes, n: int | None = None) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if n is None else n) + raw + data)
    return path


@pytest.mark.parametrize("header,data,why", [
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(4), "past the end"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(4), "do not match"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), "gap"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8), "overlap"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(8), "belong to no"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}}, bytes(8), "begin, end"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, bytes(8), "begin, end"),
    ({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8), "dtype"),
    ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4), "shape"),
    ({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}, bytes(4), "shape"),
    ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}, bytes(4), "exactly"),
    ({"w": [1, 2]}, b"", "exactly"),
    ({"w": {"dtype": "F32", "shape": [10**12, 10**12], "data_offsets": [0, 4]}}, bytes(4),
     "resource limit"),
    ({"__metadata__": [1]}, b"", "__metadata__"),
])
def test_lying_safetensors_headers(tmp_path, header, data, why):
    refused(safetensors_file(tmp_path / "s.safetensors", header, data), why)


def test_malformed_safetensors(tmp_path):
    path = tmp_path / "s.safetensors"
    refused(safetensors_file(path, {}, b"", n=2**62), "neither")
    refused(safetensors_file(path, {}, b"", n=100), "neither")
    path.write_bytes(struct.pack("<Q", 5) + b"{abc}")
    refused(path, "JSONDecodeError")
    path.write_bytes(struct.pack("<Q", 2) + b"[]")
    refused(path, "neither")
    path.write_bytes(struct.pack("<Q", 2) + b"\xff\xfe")
    refused(path)
    dup = b'{"__metadata__": {}, "__metadata__": {}}'
    path.write_bytes(struct.pack("<Q", len(dup)) + dup)
    refused(path, "duplicate")
    deep = b"{" + b'"a":' * 1 + b"[" * 100000 + b"]" * 100000 + b"}"
    path.write_bytes(struct.pack("<Q", len(deep)) + deep)
    refused(path)


def test_resource_limits(tmp_path):
    sd = state_dict()
    torch.save(sd, tmp_path / "m.pt")
    safetensors.torch.save_file(sd, str(tmp_path / "m.safetensors"))
    size = (tmp_path / "m.pt").stat().st_size
    refused(tmp_path / "m.pt", "larger than", max_bytes=size - 1)
    read_model_tensors(tmp_path / "m.pt", max_bytes=size)
    total = sum(v.numel() for v in sd.values())
    for name in ("m.pt", "m.safetensors"):
        refused(tmp_path / name, "resource limit", max_elements=total - 1)
        read_model_tensors(tmp_path / name, max_elements=total)
    # A tiny storage cannot be expanded into a huge tensor (stride 0).
    storage = _FakeStorage(torch.FloatStorage, "0", 1)
    pkl = torch_pickle({"w": _FakeTensor(storage, 0, (10**6, 10**6), (0, 0))})
    refused(torch_zip(tmp_path / "x.pt", pkl, {"0": bytes(4)}), "resource limit")


def test_fuzzed_files_only_ever_raise_model_file_error(tmp_path):
    """Random corruption either still reads or raises ModelFileError, never anything else."""
    torch.save({"model": state_dict() | odd_tensors()}, tmp_path / "m.pt")
    safetensors.torch.save_file(state_dict(), str(tmp_path / "m.safetensors"))
    rng = random.Random(1234)
    for name in ("m.pt", "m.safetensors"):
        good = (tmp_path / name).read_bytes()
        for _ in range(300):
            data = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.3:
                data = data[:rng.randrange(len(data))]
            (tmp_path / "f").write_bytes(bytes(data))
            try:
                read_model_tensors(tmp_path / "f")
            except ModelFileError:
                pass


def fuzz_pickles(tmp_path: Path, count: int, seed: int = 99) -> None:
    """Corrupt data.pkl itself (the zip's CRCs stay right, so the unpickler sees it)."""
    torch.save({"model": state_dict() | odd_tensors(), "train_metrics": {"a": [1, 2.5, None]}},
               tmp_path / "m.pt")
    with zipfile.ZipFile(tmp_path / "m.pt") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    pkl = members["m/data.pkl"]
    rng = random.Random(seed)
    for _ in range(count):
        data = bytearray(pkl)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        write_zip(tmp_path / "f.pt", members | {"m/data.pkl": bytes(data)})
        try:
            read_model_tensors(tmp_path / "f.pt")
        except ModelFileError:
            pass


def test_fuzzed_pickles_only_ever_raise_model_file_error(tmp_path):
    fuzz_pickles(tmp_path, 300)


def test_same_under_python_O(tmp_path):
    """Validation does not rely on assert statements."""
    path = safetensors_file(tmp_path / "s.safetensors",
                            {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}},
                            bytes(4))
    code = ("import sys; from checker.modelfile import read_model_tensors, ModelFileError\n"
            "try:\n    read_model_tensors(sys.argv[1])\nexcept ModelFileError:\n"
            "    print('refused')\n")
    out = subprocess.run([sys.executable, "-O", "-c", code, str(path)], cwd=REPO,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "refused"
