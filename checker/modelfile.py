"""Read the tensors of a model file without torch and without running code from it.

Trusted.  Two formats are read, chosen by content rather than by file name:

* torch .pt (the zip archive torch.save writes): `<folder>/data.pkl` is a pickle
  that names the tensors and `<folder>/data/<key>` holds their raw bytes.  The
  pickle is run by an Unpickler whose `find_class` hands out only inert
  stand-ins for a short whitelist of globals, so no code from the file runs;
  an opcode allowlist checked beforehand bounds what the unpickler allocates.
  Objects the pickle can create are sealed (pickle's BUILD cannot alter them)
  and Tensors are built only after unpickling has finished.
* safetensors: a JSON header of names, dtypes, shapes and byte offsets, then
  the raw bytes.  Parsed with `json`; nothing in it is executable.

Every problem, including exceeding a resource limit, raises ModelFileError.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import pickletools
import struct
import time
import warnings
import zipfile
from dataclasses import dataclass
from itertools import product

from .errors import Malformed

# Resource limits (spec/format.md §resource model).  A model the checker can replay within its
# default work limit has well under a million parameters (a few MB); these bound the memory and
# time of reading any file, hostile or not, to a few hundred MB and seconds.
MAX_BYTES = 64 << 20  # largest file read
MAX_ELEMENTS = 1 << 22  # most elements decoded, over all storages and over all tensors
MAX_HEADER_BYTES = 1 << 20  # largest safetensors JSON header (the format allows 100 MB)
MAX_PICKLE_BYTES = 1 << 20  # largest data.pkl (a 12-tensor state dict: ~1.7 kB)
MAX_PICKLE_OPCODES = 1 << 18  # most opcodes in data.pkl (~45 per tensor)
MAX_ZIP_MEMBERS = 1 << 16  # most zip entries (one per storage, plus a few)

# dtype name -> (struct code, item size in bytes); bfloat16 is widened to float32.
_DTYPES = {"float64": ("d", 8), "float32": ("f", 4), "float16": ("e", 2), "bfloat16": ("f", 2),
           "bool": ("B", 1), "int64": ("q", 8), "int32": ("i", 4)}
_TORCH_STORAGES = {"torch.DoubleStorage": "float64", "torch.FloatStorage": "float32",
                   "torch.HalfStorage": "float16", "torch.BFloat16Storage": "bfloat16",
                   "torch.BoolStorage": "bool", "torch.LongStorage": "int64",
                   "torch.IntStorage": "int32"}
# The pickle opcodes that build plain values, tensors and torch's wrapper dicts (protocols
# 2-4).  Refused: INST/OBJ/NEWOBJ*/EXT* (other ways to call or import), the text-mode opcodes
# of protocol 0, 8-byte lengths and out-of-band buffers (protocol 5).
_PICKLE_OPCODES = frozenset("""PROTO FRAME STOP MARK POP POP_MARK NONE NEWTRUE NEWFALSE
    BININT BININT1 BININT2 LONG1 BINFLOAT SHORT_BINUNICODE BINUNICODE SHORT_BINBYTES BINBYTES
    EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST APPEND APPENDS LIST EMPTY_DICT DICT
    SETITEM SETITEMS EMPTY_SET ADDITEMS FROZENSET GLOBAL STACK_GLOBAL REDUCE BUILD BINPERSID
    BINGET LONG_BINGET BINPUT LONG_BINPUT MEMOIZE""".split())
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                       "BOOL": "bool", "I64": "int64", "I32": "int32"}


SAVE_HINT = ("save the weights and the config as plain data: torch.save({'model': "
             "model.state_dict(), 'config': model.cfg.to_dict()}, path)")


class ModelFileError(Malformed):
    """The model file cannot be read: unsupported, corrupt, unsafe or too large."""


@dataclass(frozen=True)
class Tensor:
    """Values in row-major order: exact Python floats (ints for bool/integer dtypes)."""
    shape: tuple[int, ...]
    values: tuple[float, ...]
    dtype: str


@dataclass(frozen=True)
class ModelFile:
    sha256: str  # hex SHA-256 of the file's bytes
    tensors: dict[str, Tensor]
    config: dict | None = None  # the model's TransformerLens config, if the file has one


def read_model_tensors(path, *, max_bytes: int = MAX_BYTES,
                       max_elements: int = MAX_ELEMENTS,
                       deadline: float | None = None) -> ModelFile:
    """Read every tensor of the state dict in the .pt or .safetensors file `path`.

    Any exception while decoding the untrusted bytes means the file is
    malformed: it is reported as ModelFileError naming the file (fail closed).
    `deadline` (time.monotonic()) is the time limit of the check the file is read for.
    """
    def tick():
        if deadline is not None and time.monotonic() > deadline:
            raise ModelFileError("reading it took longer than the time limit (--max-seconds)")

    try:
        if os.path.isdir(path):  # a save_pretrained directory
            from . import hf

            sha, tensors, config = hf.read_directory(path, _read_safetensors,
                                                     _Budget(max_elements), max_bytes, tick)
            return ModelFile(sha256=sha, tensors=tensors, config=config)
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise ModelFileError(f"file is larger than the limit of {max_bytes} bytes")
        budget = _Budget(max_elements)
        tick()
        if data[:4] == b"PK\x03\x04":  # zip local file header
            tensors, config = _read_torch_zip(data, budget)
        else:
            tensors, config = _read_safetensors(data, budget)
        tick()
        if config is None:
            config = sidecar_config(path)
        return ModelFile(sha256=hashlib.sha256(data).hexdigest(), tensors=tensors,
                         config=config)
    except Malformed as exc:  # ModelFileError, or hf.py's refusals
        raise ModelFileError(f"model file {path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 -- fail closed on anything the bytes provoke
        raise ModelFileError(f"model file {path}: cannot be read "
                             f"({type(exc).__name__}: {str(exc):.300})") from exc


class _Budget:
    """Counts decoded elements so that no file can make us allocate without bound."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, {"storage": 0, "tensor": 0}

    def take(self, kind: str, n: int) -> None:
        self.used[kind] += n
        if self.used[kind] > self.limit:
            raise ModelFileError(f"more than {self.limit} {kind} elements (resource limit)")


def _decode(dtype: str, raw: bytes) -> tuple:
    """Little-endian bytes -> Python numbers, exactly (every format is exact in a double)."""
    code, size = _DTYPES[dtype]
    count = len(raw) // size
    if dtype == "bfloat16":  # bfloat16 is the upper half of a float32
        wide = bytearray(4 * count)
        wide[2::4], wide[3::4] = raw[0::2], raw[1::2]
        raw = bytes(wide)
    values = struct.unpack(f"<{count}{code}", raw)
    if dtype == "bool" and any(v > 1 for v in values):
        raise ModelFileError("bool tensor holds a byte other than 0 or 1")
    return values


def _check_dims(what: str, dims) -> tuple[int, ...]:
    """A shape, stride or offset pair: a short list of non-negative ints (bool is not int)."""
    if not isinstance(dims, (tuple, list)) or len(dims) > 64 or not all(
            type(d) is int and d >= 0 for d in dims):
        raise ModelFileError(f"{what} {dims!r:.100} is not a list of at most 64 "
                             "non-negative integers")
    return tuple(dims)


# ---- torch .pt: a zip holding a pickle and raw storages -------------------------------------

class _Sealed:
    """Base of the objects the pickle can reach; BUILD (setstate) on them is refused."""
    __slots__ = ()

    def __init__(self, *values):
        for name, value in zip(self.__slots__, values, strict=True):
            setattr(self, name, value)

    def __setstate__(self, state):
        raise ModelFileError(f"pickle tries to modify a {type(self).__name__.lstrip('_')}")


class _Global(_Sealed):
    """A whitelisted global: a stand-in callable the pickle may call, not alter."""
    __slots__ = ("fn",)

    def __call__(self, *args):
        return self.fn(*args)


class _StorageType(_Sealed):
    """What a name like torch.FloatStorage stands for: just a dtype.  Not callable."""
    __slots__ = ("dtype",)


class _Storage(_Sealed):
    """A storage's decoded elements."""
    __slots__ = ("dtype", "values")


class _TensorRef(_Sealed):
    """A tensor as a view (offset, shape, stride) of a storage; made into a Tensor later."""
    __slots__ = ("storage", "offset", "shape", "stride")


class _StateDict(dict):
    """Stand-in for collections.OrderedDict.  Its pickled state (a state dict's
    `_metadata` of module versions) is dropped."""
    __slots__ = ()

    def __setstate__(self, state):
        pass


# --- inert stand-ins for what a TransformerLens config (cfg.to_dict()) pickles -------------
# numpy float64 scalars are pickled as scalar(dtype('f8'), raw bytes) with the bytes built by
# _codecs.encode(text, 'latin1'); cfg.dtype is a torch dtype, pickled by name.  Each stand-in
# only decodes values; nothing is imported or called.
_CONFIG_DTYPES = {"torch.float32", "torch.float64", "torch.float16", "torch.bfloat16"}
_SCALAR_CODES = {"f8": "<d", "f4": "<f", "i8": "<q", "i4": "<i"}


class _NumpyDtype(_Sealed):
    """numpy.dtype(name, align, copy): just its name.  Its pickled state is accepted only
    when it describes a little-endian (or byte-order-free) plain dtype."""
    __slots__ = ("name",)

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) >= 2 and state[1] in ("<", "|")):
            raise ModelFileError("pickle describes an unsupported numpy dtype")


def _numpy_dtype(name, align=False, copy=True):
    if name not in _SCALAR_CODES or align not in (0, False) or copy not in (1, True):
        raise ModelFileError(f"numpy dtype {name!r:.20} is not supported in a config")
    return _NumpyDtype(name)


def _numpy_scalar(dtype, data=None):
    """numpy.core.multiarray.scalar(dtype, bytes) -> the Python number it holds."""
    code = _SCALAR_CODES.get(getattr(dtype, "name", None)) if isinstance(dtype, _NumpyDtype) \
        else None
    if code is None or not isinstance(data, bytes) or len(data) != struct.calcsize(code):
        raise ModelFileError("unsupported numpy scalar in the pickle")
    return struct.unpack(code, data)[0]


def _codecs_encode(text, encoding="utf-8"):
    """_codecs.encode(str, 'latin1'): how pickle protocol 2 writes bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise ModelFileError("unsupported _codecs.encode call in the pickle")
    return text.encode("latin-1")


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None):
    """torch._utils._rebuild_parameter: a Parameter is its tensor."""
    if not isinstance(data, _TensorRef):
        raise ModelFileError("_rebuild_parameter applied to something other than a tensor")
    return data


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only whitelisted globals, each to an inert stand-in; reads storages
    from the zip through persistent_load."""

    def __init__(self, pkl: bytes, zf: zipfile.ZipFile, folder: str, budget: _Budget):
        super().__init__(io.BytesIO(pkl))
        self.zf, self.folder, self.budget, self.storages = zf, folder, budget, {}

    def find_class(self, module, name):
        """The only globals torch.save writes for a state dict (checked with pickletools):
        storage type names (-> dtype markers), OrderedDict (-> a dict), and the two
        rebuild functions (-> our checked versions).  None of the stand-ins touches
        anything outside the objects the pickle itself built."""
        full = f"{module}.{name}"
        if full in _CONFIG_DTYPES:
            return full  # a dtype in a config: its name is all we keep
        if full in _TORCH_STORAGES:
            return _StorageType(_TORCH_STORAGES[full])
        stand_ins = {"collections.OrderedDict": _StateDict,
                     "numpy.dtype": _numpy_dtype,
                     "numpy.core.multiarray.scalar": _numpy_scalar,
                     "numpy._core.multiarray.scalar": _numpy_scalar,
                     "_codecs.encode": _codecs_encode,
                     "torch._utils._rebuild_tensor_v2": self.rebuild_tensor,
                     "torch._utils._rebuild_parameter": _rebuild_parameter}
        if full not in stand_ins:
            raise ModelFileError(f"data.pkl refers to the global {full!r}, which is refused "
                                 "(only tensor storages and rebuild functions are allowed; "
                                 f"a whole model or config object cannot be read: {SAVE_HINT})")
        return _Global(stand_ins[full])

    def persistent_load(self, pid):
        """('storage', storage type, key, location, numel) -> the decoded storage."""
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)
                and type(pid[4]) is int and pid[4] >= 0):
            raise ModelFileError(f"unsupported persistent id in data.pkl: {pid!r:.200}")
        _, stype, key, _, numel = pid
        if key not in self.storages:
            self.budget.take("storage", numel)
            raw = _read_entry(self.zf, f"{self.folder}data/{key}")
            if len(raw) != numel * _DTYPES[stype.dtype][1]:
                raise ModelFileError(f"storage {key} has {len(raw)} bytes, expected "
                                     f"{numel} {stype.dtype} elements")
            self.storages[key] = _Storage(stype.dtype, _decode(stype.dtype, raw))
        storage = self.storages[key]
        if storage.dtype != stype.dtype or len(storage.values) != numel:
            raise ModelFileError(f"storage {key} is used with two different types or sizes")
        return storage

    def rebuild_tensor(self, storage, offset, size, stride, requires_grad, hooks, metadata=None):
        """torch._utils._rebuild_tensor_v2, checked: the view must lie inside its storage."""
        size, stride = _check_dims("tensor size", size), _check_dims("tensor stride", stride)
        if not isinstance(storage, _Storage) or type(offset) is not int or offset < 0 \
                or len(size) != len(stride) or hooks or metadata:
            raise ModelFileError("unsupported arguments to _rebuild_tensor_v2")
        numel = math.prod(size)
        self.budget.take("tensor", numel)
        if numel and offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) \
                >= len(storage.values):
            raise ModelFileError("tensor view reaches outside its storage")
        return _TensorRef(storage, offset, size, stride)


def _check_opcodes(pkl: bytes) -> None:
    """Scan the pickle (pickletools parses, never executes) before it is unpickled: at most
    MAX_PICKLE_BYTES and MAX_PICKLE_OPCODES, only allowed opcodes, and no memo index or frame
    length beyond the pickle's size (the C unpickler sizes its memo array by the largest index
    it is given).  Streams: memory does not grow with the number of opcodes."""
    if len(pkl) > MAX_PICKLE_BYTES:
        raise ModelFileError(f"data.pkl has {len(pkl)} bytes, over the limit of "
                             f"{MAX_PICKLE_BYTES} (resource limit)")
    with warnings.catch_warnings():  # genops warns on odd escapes in (refused) text opcodes
        warnings.simplefilter("ignore")
        for count, (op, arg, pos) in enumerate(pickletools.genops(pkl)):
            if count >= MAX_PICKLE_OPCODES:
                raise ModelFileError(f"data.pkl has more than {MAX_PICKLE_OPCODES} opcodes "
                                     "(resource limit)")
            if op.name not in _PICKLE_OPCODES:
                raise ModelFileError(f"data.pkl uses the pickle opcode {op.name} (byte {pos}), "
                                     "which is refused (a whole model or config object "
                                     f"cannot be read: {SAVE_HINT})")
            if op.name in ("FRAME", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT") \
                    and arg > len(pkl):
                raise ModelFileError(f"data.pkl has {op.name} {arg} (byte {pos}): out of range")


def _read_entry(zf: zipfile.ZipFile, name: str) -> bytes:
    """One zip member; torch stores members uncompressed, so anything else is refused."""
    info = zf.getinfo(name)
    if info.compress_type != zipfile.ZIP_STORED:
        raise ModelFileError(f"zip member {name} is compressed; torch.save never does that")
    return zf.read(info)  # checks the CRC


def _materialize(ref: _TensorRef) -> Tensor:
    """The row-major values of a strided view."""
    values, offset, shape, stride = ref.storage.values, ref.offset, ref.shape, ref.stride
    numel = math.prod(shape)
    contiguous = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    if numel == 0:
        out = ()
    elif all(s == c for n, s, c in zip(shape, stride, contiguous, strict=True) if n > 1):
        out = values[offset:offset + numel]
    else:  # one slice along the last axis per index of the other axes
        *outer, last = shape
        *outer_stride, step = stride
        out = []
        for index in product(*(range(n) for n in outer)):
            start = offset + sum(i * s for i, s in zip(index, outer_stride, strict=True))
            out.extend(values[start:start + last * step:step] if step else (values[start],) * last)
    return Tensor(shape=shape, values=tuple(out), dtype=ref.storage.dtype)


def _read_torch_zip(data: bytes, budget: _Budget) -> tuple[dict[str, Tensor], dict | None]:
    # Every central-directory entry starts with this signature, so its count bounds the number
    # of entries zipfile would parse (each costs ~10 bytes of memory per byte of file).
    if data.count(b"PK\x01\x02") > MAX_ZIP_MEMBERS:
        raise ModelFileError(f"zip archive has more than {MAX_ZIP_MEMBERS} members "
                             "(resource limit)")
    zf = zipfile.ZipFile(io.BytesIO(data))
    names = zf.namelist()
    if len(set(names)) != len(names):
        raise ModelFileError("zip archive has duplicate member names")
    pkls = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
    if len(pkls) != 1:
        raise ModelFileError("expected one <folder>/data.pkl in the zip archive, "
                             f"found {pkls!r:.200}")
    folder = pkls[0][:-len("data.pkl")]
    if folder + "byteorder" in names and _read_entry(zf, folder + "byteorder") != b"little":
        raise ModelFileError("tensors are not stored little-endian")
    pkl = _read_entry(zf, pkls[0])
    _check_opcodes(pkl)
    top = _RestrictedUnpickler(pkl, zf, folder, budget).load()
    if _is_state_dict(top):  # torch.save(model.state_dict()): no config
        return {name: _materialize(ref) for name, ref in top.items()}, None
    if not (isinstance(top, dict) and _is_state_dict(top.get("model"))):
        raise ModelFileError("data.pkl holds neither a state dict nor a dict whose 'model' "
                             "entry is a state dict (name -> tensor); save "
                             "{'model': model.state_dict(), 'config': model.cfg.to_dict()}")
    return ({name: _materialize(ref) for name, ref in top["model"].items()},
            _file_config(top, "entry"))


def _is_state_dict(obj) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(
        isinstance(k, str) and isinstance(v, _TensorRef) for k, v in obj.items())


# What a model file may hold beside its tensors (spec/configs.md §model files): the
# TransformerLens config ("config"; "model_config" is the generator's name for the
# attention-only description), training metadata, and the format tag safetensors writes.
# Anything else is refused: a field the checker does not understand is never ignored.
_FILE_ENTRIES = {"model": "the state dict", "config": "a TransformerLens config",
                 "model_config": "a TransformerLens config (the generator's name)",
                 "train_metrics": "training metadata (inert: not part of the model)",
                 "format": "the safetensors framework tag (inert)"}


def _file_config(entries: dict, what: str) -> dict | None:
    """The config among a file's top-level entries (a .pt dict, or safetensors metadata
    with JSON strings decoded); refuses unknown entries and two configs."""
    allowed = ("model", "config", "model_config", "train_metrics") if what == "entry" \
        else ("config", "model_config", "train_metrics", "format")
    for key in entries:
        if key not in allowed:
            raise ModelFileError(f"the file has the {what} {key!r:.80}, which the checker does "
                                 f"not understand (allowed: {', '.join(allowed)}); "
                                 "spec/configs.md")
    if "config" in entries and "model_config" in entries:
        raise ModelFileError("the file has both 'config' and 'model_config': one model, "
                             "one config")
    return _config(entries.get("config", entries.get("model_config")))


def sidecar_config(path) -> dict | None:
    """A TransformerLens config saved as JSON beside a bare state dict: `<stem>.config.json`,
    or `config.json` if it uses TransformerLens names (has d_model and n_heads; a Hugging
    Face config.json does not).  None if there is neither."""
    base = os.path.splitext(os.fspath(path))[0]
    for candidate, needs_tl_names in ((base + ".config.json", False),
                                      (os.path.join(os.path.dirname(os.fspath(path)),
                                                    "config.json"), True)):
        if os.path.isfile(candidate):
            with open(candidate, "rb") as f:
                config = json.loads(f.read(1 << 20).decode("utf-8"))
            if needs_tl_names and not (isinstance(config, dict) and "d_model" in config
                                       and "n_heads" in config):
                if isinstance(config, dict) and "model_type" in config:
                    raise ModelFileError("is the weights file of a Hugging Face directory: "
                                         "pass the directory "
                                         f"({os.path.dirname(os.fspath(path)) or '.'}), "
                                         "not the file")
                continue
            return _config(config)
    return None


def _config(config) -> dict | None:
    """The model config stored beside the state dict: plain values only."""
    if config is None:
        return None
    if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
        raise ModelFileError("the file's 'config' is not a dictionary with string keys")
    for key, value in config.items():
        if not _plain_value(value):
            raise ModelFileError(f"the file's config entry {key!r:.80} is not a plain value")
    return dict(config)


def _plain_value(value, depth: int = 0) -> bool:
    """None, bool, int, float, str, or (nested, shallowly) lists and dicts of them."""
    if value is None or type(value) in (bool, int, float, str):
        return True
    if depth < 4 and type(value) in (list, tuple):
        return all(_plain_value(v, depth + 1) for v in value)
    if depth < 4 and type(value) in (dict, _StateDict):
        return all(type(k) is str and _plain_value(v, depth + 1) for k, v in value.items())
    return False


# ---- safetensors: u64 header length, JSON header, raw bytes ----------------------------------

def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ModelFileError("safetensors header has a duplicate key")
    return dict(pairs)


def _read_safetensors(data: bytes, budget: _Budget) -> tuple[dict[str, Tensor], dict | None]:
    n = int.from_bytes(data[:8], "little")
    if len(data) < 8 or n > min(len(data) - 8, MAX_HEADER_BYTES) or data[8:9] != b"{":
        raise ModelFileError("is neither a torch .pt zip archive nor a safetensors file")
    header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=_unique_keys)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict):
        raise ModelFileError("safetensors __metadata__ is not an object")
    buffer = data[8 + n:]
    entries = sorted((_safetensors_entry(name, spec) for name, spec in header.items()),
                     key=lambda e: e[3])
    tensors, pos = {}, 0
    for name, dtype, shape, (begin, end) in entries:
        numel = math.prod(shape)
        budget.take("tensor", numel)
        if begin != pos or end - begin != numel * _DTYPES[dtype][1]:
            raise ModelFileError(f"tensor {name}: data_offsets [{begin}, {end}] overlap, leave "
                                 f"a gap or do not match {numel} {dtype} elements")
        if end > len(buffer):
            raise ModelFileError(f"tensor {name}: data_offsets reach past the end of the file")
        tensors[name], pos = Tensor(shape, _decode(dtype, buffer[begin:end]), dtype), end
    if pos != len(buffer):
        raise ModelFileError("safetensors data has bytes that belong to no tensor")
    if not all(isinstance(v, str) for v in metadata.values()):
        raise ModelFileError("safetensors __metadata__ values must be strings")
    config = {k: json.loads(v) for k, v in metadata.items() if k in ("config", "model_config")}
    return tensors, _file_config({**metadata, **config}, "metadata key")


def _safetensors_entry(name: str, spec) -> tuple:
    if not (isinstance(spec, dict) and set(spec) == {"dtype", "shape", "data_offsets"}):
        raise ModelFileError(f"tensor {name}: header entry must have exactly dtype, shape "
                             "and data_offsets")
    if spec["dtype"] not in _SAFETENSORS_DTYPES:
        raise ModelFileError(f"tensor {name}: unsupported dtype {spec['dtype']!r}")
    offsets = _check_dims(f"tensor {name}: data_offsets", spec["data_offsets"])
    if len(offsets) != 2 or offsets[0] > offsets[1]:
        raise ModelFileError(f"tensor {name}: data_offsets {list(offsets)} are not [begin, end]")
    return (name, _SAFETENSORS_DTYPES[spec["dtype"]],
            _check_dims(f"tensor {name}: shape", spec["shape"]), offsets)
