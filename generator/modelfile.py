"""Safe loading and saving of model files (.pt/.pth and .safetensors).

Loading never executes code from the file: torch files go through
`torch.load(..., weights_only=True)` only, whose restricted unpickler refuses
any global outside torch's allowlist; safetensors files contain no code at
all.  The file is read into memory once, hashed, and parsed from those same
bytes, so the recorded sha256 is exactly what was loaded.

Every failure -- unreadable, not a model, refused pickle, wrong dtype,
NaN/inf, wrong keys or shapes -- raises ModelFileError naming the file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from checker.errors import Malformed
from checker.modelfile import SAVE_HINT
from checker.modelspec import IGNORED_BUFFERS, ROTARY_BUFFERS
from checker.tl_config import family_from_tl_config

from .model import FamilyWeights, ModelWeights

MAX_MODEL_BYTES = 256 * 1024 * 1024  # far above any Max-of-K model; guards memory
TORCH_SUFFIXES = (".pt", ".pth")
SAFETENSORS_SUFFIX = ".safetensors"
# Narrower floats widen to float32 exactly; float64 is accepted only when every
# value happens to be a float32 (checked), so the certified weights are the file's.
ACCEPTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class ModelFileError(Malformed):
    """A model file cannot be loaded; the message names the file and the problem."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


@dataclass(frozen=True)
class LoadedModel:
    weights: ModelWeights | FamilyWeights  # FamilyWeights when the file's config says so
    file_sha256: str  # hex sha256 of the file's bytes, exactly as parsed
    path: str


def load_model(path: str | os.PathLike, n_ctx: int | None = None) -> LoadedModel:
    """Load and validate a model file, for sequences of length `n_ctx` (default: the
    model's capacity, the rows of W_pos or the config's n_ctx).

    Pre: none (any path).  Post: returns weights that passed
    checker.modelspec.infer_dims, all float32 and finite, with n_ctx = `n_ctx` (a learned
    position table cut to its first n_ctx rows: spec/theorem.md §1); otherwise raises
    ModelFileError.  Never unpickles anything but tensors and plain containers.
    """
    if os.path.isdir(path):  # a save_pretrained directory
        return _load_hf_directory(path, n_ctx)
    data = _read_bytes(path)
    sha = hashlib.sha256(data).hexdigest()
    kind = _file_kind(path, data)
    raw, config = (_parse_torch(path, data) if kind == "torch"
                   else _parse_safetensors(path, data))
    if config is None:  # a config JSON beside a bare state dict (checker's own convention)
        from checker.modelfile import sidecar_config

        try:
            config = sidecar_config(path)
        except (Malformed, ValueError, OSError) as exc:
            raise ModelFileError(path, f"cannot read the config beside it: {exc}") from None
    tensors = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ModelFileError(path, f"state dict has a non-string key {key!r}")
        if key in IGNORED_BUFFERS + ROTARY_BUFFERS or _LAYER_BUFFER.fullmatch(key):
            continue  # mask / IGNORE / float32 rotary tables: semantics fixed by the spec;
            # of another layer: the family check below names the unsupported depth
        tensors[key] = _to_float32(path, key, value)
    return LoadedModel(weights=_weights(path, tensors, config, n_ctx), file_sha256=sha,
                       path=str(path))


_LAYER_BUFFER = re.compile(r"blocks\.[0-9]+\.attn\.(mask|IGNORE|rotary_sin|rotary_cos)")


def _weights(path, tensors: dict, config: dict | None, n_ctx: int | None):
    """The model's weights for sequences of length n_ctx (None: the capacity)."""
    try:
        shapes = {k: tuple(v.shape) for k, v in tensors.items()}
        family = None if config is None else family_from_tl_config(config, shapes, n_ctx)
        if n_ctx is not None and "pos_embed.W_pos" in tensors:
            capacity = tensors["pos_embed.W_pos"].shape[0]
            if not 2 <= n_ctx <= capacity:
                raise Malformed(f"--n-ctx {n_ctx}: the model's position table has {capacity} "
                                f"rows (certified lengths: 2..{capacity})")
            tensors = {**tensors, "pos_embed.W_pos": tensors["pos_embed.W_pos"][:n_ctx]}
        if family is None or family.is_attn_only:
            return ModelWeights.from_state_dict(tensors)
        return FamilyWeights.from_state_dict(tensors, family)
    except Malformed as exc:
        raise ModelFileError(path, str(exc)) from None


def _load_hf_directory(path, n_ctx: int | None) -> LoadedModel:
    """A Hugging Face save_pretrained directory (GPT-NeoX, GPT-2), converted to
    TransformerLens layout by the checker's own reader (checker/hf.py), so that the
    certified weights are exactly what `check-cert --model DIR` reads."""
    from checker.modelfile import read_model_tensors

    try:
        mf = read_model_tensors(path)
        tensors = {k: _to_float32(path, k, torch.tensor(t.values, dtype=torch.float64)
                                  .reshape(t.shape)) for k, t in mf.tensors.items()
                   if t.dtype in ("float32", "float16", "bfloat16")}
    except Malformed as exc:
        raise ModelFileError(path, str(exc)) from None
    return LoadedModel(weights=_weights(path, tensors, mf.config, n_ctx),
                       file_sha256=mf.sha256, path=str(path))


def _read_bytes(path: str | os.PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MODEL_BYTES + 1)
    except OSError as exc:
        raise ModelFileError(path, f"cannot read file: {exc.strerror or exc}") from None
    if len(data) > MAX_MODEL_BYTES:
        raise ModelFileError(path, f"file is larger than {MAX_MODEL_BYTES} bytes")
    if not data:
        raise ModelFileError(path, "file is empty")
    return data


def _file_kind(path: str | os.PathLike, data: bytes) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in TORCH_SUFFIXES:
        return "torch"
    if suffix == SAFETENSORS_SUFFIX:
        return "safetensors"
    # Unknown suffix: sniff.  torch.save writes a zip archive ("PK\x03\x04");
    # safetensors starts with an 8-byte header length followed by '{'.
    if data[:4] == b"PK\x03\x04":
        return "torch"
    if len(data) > 8 and data[8:9] == b"{":
        return "safetensors"
    raise ModelFileError(path, f"unrecognised model file type (suffix {suffix!r}; "
                               "expected .pt, .pth or .safetensors)")


def _numpy_scalar_globals() -> list:
    import numpy as np

    multiarray = getattr(np, "_core", None) or np.core
    return [multiarray.multiarray.scalar, np.dtype, type(np.dtype("f8")),
            type(np.dtype("f4")), type(np.dtype("i8"))]


_NUMPY_SCALAR_GLOBALS = _numpy_scalar_globals()


def _parse_torch(path: str | os.PathLike, data: bytes) -> dict:
    # torch.save writes a zip archive; old torch versions a pickle (protocol 2: b"\x80\x02").
    # Anything else is not a torch file at all (torch's own message would blame a global).
    if not (data.startswith(b"PK\x03\x04") or data.startswith(b"\x80")):
        raise ModelFileError(path, f"not a torch file: neither a zip archive (torch.save) nor a "
                                   f"pickle; it starts with {data[:16]!r}")
    try:
        # weights_only=True: the restricted unpickler; never pass False here.
        # A TransformerLens config (cfg.to_dict()) holds numpy float64 scalars: allow
        # exactly the numpy scalar/dtype reconstructors, which run no code of the file.
        with torch.serialization.safe_globals(_NUMPY_SCALAR_GLOBALS):
            obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # any failure of an untrusted file is "malformed"
        raise ModelFileError(path, _describe_torch_error(exc)) from None
    config = None
    if isinstance(obj, dict) and "model" in obj:
        config = obj.get("config")  # a TransformerLens config dict, if saved with one
        obj = obj["model"]  # {"model": state_dict, "config": ..., ...}
    if not isinstance(obj, dict):
        raise ModelFileError(path, f"expected a state dict (or a dict with key 'model'), "
                                   f"got {type(obj).__name__}")
    if config is not None and not isinstance(config, dict):
        raise ModelFileError(path, "the file's 'config' is not a dictionary")
    return obj, None if config is None else {k: _plain_scalar(v) for k, v in config.items()}


def _plain_scalar(value):
    """A config value as the checker's reader sees it: numpy scalars as Python numbers,
    a torch dtype as its name (cfg.to_dict() holds both)."""
    if isinstance(value, torch.dtype):
        return str(value)
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def _describe_torch_error(exc: Exception) -> str:
    text = str(exc)
    if "Weights only load failed" in text:
        # Keep torch's one line naming the refused global; drop its advice to
        # retry with weights_only=False, which is exactly what must not happen.
        detail = [ln.strip() for ln in text.splitlines()
                  if "GLOBAL" in ln or "global" in ln.split(":")[0].lower()]
        why = (detail[0] if detail else text.splitlines()[0]).split(" Please use")[0]
        return ("refused to unpickle: the file would import or call something other than "
                f"tensors and plain containers ({why}); a whole model (torch.save(model)) or "
                f"a config object cannot be read: {SAVE_HINT}")
    if "zip archive" in text or "central directory" in text:
        first = text.split(". ")[0]  # torch appends paragraphs of advice
        return f"not a valid torch zip archive (truncated or not a torch file): {first}"
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"cannot load as a torch file ({type(exc).__name__}: {first})"


def _parse_safetensors(path: str | os.PathLike, data: bytes) -> dict:
    import safetensors.torch  # optional dependency (dev extra); imported only when needed

    try:
        tensors = safetensors.torch.load(data)
        n = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8:8 + n]).get("__metadata__") or {}
        config = json.loads(meta["config"]) if "config" in meta else None
    except Exception as exc:
        raise ModelFileError(path, f"cannot load as safetensors ({type(exc).__name__}: "
                                   f"{exc})") from None
    return tensors, config


def _to_float32(path: str | os.PathLike, key: str, value: object) -> torch.Tensor:
    """Validate one tensor and convert it to float32, refusing any lossy change."""
    if not isinstance(value, torch.Tensor):
        raise ModelFileError(path, f"{key} is a {type(value).__name__}, not a tensor")
    if value.is_meta or value.layout != torch.strided or value.is_quantized:
        raise ModelFileError(path, f"{key} is not a dense tensor with data")
    if value.dtype not in ACCEPTED_DTYPES:
        raise ModelFileError(path, f"{key} has dtype {value.dtype}; expected float32 "
                                   "(float16/bfloat16/float64 accepted if exactly float32)")
    t = value.detach()
    if not bool(torch.isfinite(t).all()):
        raise ModelFileError(path, f"{key} contains NaN or infinite values")
    t32 = t.to(torch.float32)
    if t.dtype == torch.float64 and not bool((t32.to(torch.float64) == t).all()):
        raise ModelFileError(path, f"{key} is float64 with values that are not exactly "
                                   "representable in float32 (refusing to round)")
    return t32.contiguous()


def _plain(value: object, where: str) -> None:
    """Metadata must be plain Python data so weights_only loading accepts it."""
    # Exact types: a str/int subclass (e.g. torch.__version__) would be pickled
    # as a global that weights_only loading refuses.
    if value is None or type(value) in (bool, int, float, str):
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            _plain(item, f"{where}[{i}]")
        return
    if type(value) is dict:
        for k, item in value.items():
            if type(k) is not str:
                raise TypeError(f"metadata key {where}.{k!r} is not a string")
            _plain(item, f"{where}.{k}")
        return
    raise TypeError(f"metadata {where} has type {type(value).__name__}; use plain types")


def model_config(weights: ModelWeights) -> dict:
    """TransformerLens-style config describing the architecture (informational)."""
    d = weights.dims
    return {"n_layers": 1, "n_heads": 1, "d_vocab": d.d_vocab, "d_vocab_out": d.d_vocab,
            "n_ctx": d.n_ctx, "d_model": d.d_model, "d_head": d.d_head, "attn_only": True,
            "normalization_type": None, "positional_embedding_type": "standard"}


def save_model(path: str | os.PathLike, weights: ModelWeights,
               metadata: dict | None = None) -> str:
    """Write `weights` to `path` (.pt/.pth or .safetensors) atomically.

    .pt: torch.save({"model": TL state dict, "model_config": {...},
    "train_metrics": metadata}) -- plain types only, loadable with
    weights_only=True.  .safetensors: the state dict, with metadata flattened
    to str -> str (non-strings JSON-encoded).  Returns the file's sha256.
    The bytes depend only on the arguments (no timestamps, no file names).
    """
    metadata = dict(metadata or {})
    _plain(metadata, "metadata")
    suffix = Path(path).suffix.lower()
    sd = weights.to_state_dict()
    family = isinstance(weights, FamilyWeights)
    if suffix in TORCH_SUFFIXES:
        buf = io.BytesIO()  # saving to a buffer keeps the archive's inner name fixed
        if family:  # TransformerLens layout: {"config": cfg, "model": state_dict}
            torch.save({"model": sd, "config": weights.tl_config(),
                        "train_metrics": metadata}, buf)
        else:
            torch.save({"model": sd, "model_config": model_config(weights),
                        "train_metrics": metadata}, buf)
        data = buf.getvalue()
    elif suffix == SAFETENSORS_SUFFIX:
        import safetensors.torch

        # One key for the training metadata: the checker refuses metadata keys it does not
        # know (a model file means exactly one model; spec/configs.md).
        meta = {"train_metrics": json.dumps(metadata, sort_keys=True)} if metadata else {}
        if family:
            meta["config"] = json.dumps(weights.tl_config(), sort_keys=True)
        else:
            meta["model_config"] = json.dumps(model_config(weights), sort_keys=True)
        data = safetensors.torch.save(sd, metadata=meta)
    else:
        raise ValueError(f"{path}: unsupported suffix {suffix!r}; use .pt, .pth or .safetensors")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a model file is not a secret
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return hashlib.sha256(data).hexdigest()
