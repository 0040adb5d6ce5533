"""generator.modelfile: loading real TL-format files, refusing everything else."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch

from checker.errors import Malformed
from checker.modelspec import ATTN_ONLY, Dims, Family, infer_dims
from generator.ground_truth import main as exact_accuracy_main
from generator.model import MaxOfKTransformer, ModelWeights
from generator.modelfile import ModelFileError, load_model, save_model

MODELS = Path(__file__).resolve().parent.parent / "generator" / "models"
DIMS = Dims(d_vocab=6, n_ctx=3, d_model=4, d_head=5)


def tl_state_dict(dims: Dims = DIMS, seed: int = 0) -> dict[str, torch.Tensor]:
    """What a TransformerLens HookedTransformer (1 layer, 1 head, attn-only, no LN)
    state dict looks like: zero biases and the mask/IGNORE buffers included."""
    g = torch.Generator().manual_seed(seed)
    v, k, d, h = dims.d_vocab, dims.n_ctx, dims.d_model, dims.d_head
    return {
        "embed.W_E": torch.randn(v, d, generator=g),
        "pos_embed.W_pos": torch.randn(k, d, generator=g),
        "blocks.0.attn.W_Q": torch.randn(1, d, h, generator=g),
        "blocks.0.attn.W_O": torch.randn(1, h, d, generator=g),
        "blocks.0.attn.b_Q": torch.zeros(1, h),
        "blocks.0.attn.b_O": torch.zeros(d),
        "blocks.0.attn.W_K": torch.randn(1, d, h, generator=g),
        "blocks.0.attn.W_V": torch.randn(1, d, h, generator=g),
        "blocks.0.attn.b_K": torch.zeros(1, h),
        "blocks.0.attn.b_V": torch.zeros(1, h),
        "blocks.0.attn.mask": torch.tril(torch.ones(k, k)).bool(),
        "blocks.0.attn.IGNORE": torch.tensor(-1e5),
        "unembed.W_U": torch.randn(d, v, generator=g),
        "unembed.b_U": torch.zeros(v),
    }


def write_pt(path: Path, obj) -> Path:
    torch.save(obj, path)
    return path


def assert_same_as(weights: ModelWeights, sd: dict[str, torch.Tensor]) -> None:
    assert weights.dims == DIMS
    assert np.array_equal(weights.W_E, sd["embed.W_E"].numpy())
    assert np.array_equal(weights.W_Q, sd["blocks.0.attn.W_Q"][0].numpy())
    assert np.array_equal(weights.W_O, sd["blocks.0.attn.W_O"][0].numpy())
    assert np.array_equal(weights.W_U, sd["unembed.W_U"].numpy())
    assert not weights.b_Q.any() and not weights.b_U.any()


def refused(path: Path, *fragments: str) -> ModelFileError:
    with pytest.raises(ModelFileError) as info:
        load_model(path)
    message = str(info.value)
    assert str(path) in message, message  # names the file
    for fragment in fragments:
        assert fragment.lower() in message.lower(), message
    assert isinstance(info.value, Malformed)  # exit code 2 in the CLIs
    return info.value


# --- accepted -------------------------------------------------------------------------------

def test_bare_tl_state_dict(tmp_path):
    sd = tl_state_dict()
    path = write_pt(tmp_path / "bare.pt", sd)
    loaded = load_model(path)
    assert_same_as(loaded.weights, sd)
    assert loaded.file_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_wrapped_tl_checkpoint_like_the_reference_code(tmp_path):
    sd = tl_state_dict()
    obj = {"model": sd, "model_config": {"d_model": 4, "act_fn": None, "n_layers": 1},
           "run_config": {"seed": 123, "batch_size": 128}, "train_metrics": [0.1, 0.01],
           "test_metrics": None, "wandb_id": "abc123"}
    assert_same_as(load_model(write_pt(tmp_path / "wrapped.pth", obj)).weights, sd)


def test_missing_biases_become_zero(tmp_path):
    sd = {k: v for k, v in tl_state_dict().items() if ".b_" not in k and "mask" not in k}
    w = load_model(write_pt(tmp_path / "nobias.pt", sd)).weights
    assert all(not getattr(w, b).any() for b in ("b_Q", "b_K", "b_V", "b_O", "b_U"))


def test_safetensors_file(tmp_path):
    sd = tl_state_dict()
    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    assert_same_as(load_model(path).weights, sd)


def test_exact_narrow_and_wide_dtypes_accepted(tmp_path):
    sd = tl_state_dict()
    sd["embed.W_E"] = sd["embed.W_E"].to(torch.float64)  # float32 values stored as float64
    sd["unembed.W_U"] = sd["unembed.W_U"].to(torch.float16)
    sd["pos_embed.W_pos"] = sd["pos_embed.W_pos"].to(torch.bfloat16)
    w = load_model(write_pt(tmp_path / "dtypes.pt", sd)).weights
    assert w.W_E.dtype == np.float32
    assert np.array_equal(w.W_U, sd["unembed.W_U"].float().numpy())
    assert np.array_equal(w.W_pos, sd["pos_embed.W_pos"].float().numpy())


def test_roundtrip_pt_and_safetensors(tmp_path):
    model = MaxOfKTransformer(DIMS, torch.Generator().manual_seed(3))
    # Non-zero biases too, so every parameter is exercised.
    w = model.weights().replace(b_Q=np.arange(5), b_O=np.ones(4), b_U=-np.arange(6))
    for name in ("m.pt", "m.safetensors"):
        sha = save_model(tmp_path / name, w, {"final_loss": 0.5, "cfg": {"seed": 3}})
        loaded = load_model(tmp_path / name)
        assert loaded.weights.equals(w)
        on_disk = hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        assert loaded.file_sha256 == sha == on_disk
    # The .pt file is plain data: weights_only loading sees the metadata and config.
    obj = torch.load(tmp_path / "m.pt", weights_only=True)
    assert obj["train_metrics"] == {"final_loss": 0.5, "cfg": {"seed": 3}}
    assert obj["model_config"]["d_head"] == 5
    meta = safetensors.safe_open(str(tmp_path / "m.safetensors"), "pt").metadata()
    assert json.loads(meta["train_metrics"])["cfg"] == {"seed": 3}
    # Same arguments -> same bytes (no timestamps or file names inside).
    save_model(tmp_path / "again.pt", w, {"final_loss": 0.5, "cfg": {"seed": 3}})
    assert (tmp_path / "again.pt").read_bytes() == (tmp_path / "m.pt").read_bytes()


def test_state_dict_layout_matches_modelspec():
    w = MaxOfKTransformer(DIMS, torch.Generator().manual_seed(0)).weights()
    sd = w.to_state_dict()
    assert infer_dims({k: tuple(t.shape) for k, t in sd.items()}) == DIMS
    assert sd["blocks.0.attn.mask"].dtype == torch.bool
    assert torch.equal(sd["blocks.0.attn.mask"], torch.tril(torch.ones(3, 3, dtype=torch.bool)))
    assert float(sd["blocks.0.attn.IGNORE"]) == -1e5
    assert set(MaxOfKTransformer(DIMS).state_dict()) == set(sd)


def test_metadata_must_be_plain(tmp_path):
    w = ModelWeights.zeros(DIMS)
    with pytest.raises(TypeError):
        save_model(tmp_path / "m.pt", w, {"version": torch.__version__})  # a str subclass
    with pytest.raises(TypeError):
        save_model(tmp_path / "m.pt", w, {"array": np.zeros(2)})
    assert not (tmp_path / "m.pt").exists()


def test_shipped_models_load():
    manifest = json.loads((MODELS / "models.json").read_text())
    for entry in manifest["models"]:
        loaded = load_model(MODELS / entry["file"])
        assert loaded.file_sha256 == entry["sha256"]
        family = Family.from_json(entry["family"]) if "family" in entry else ATTN_ONLY
        assert loaded.weights.dims == Dims(**entry["dims"], family=family)


# --- refused --------------------------------------------------------------------------------

class _RunsShell:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _WritesFile:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


@pytest.mark.parametrize("payload", [_RunsShell, _WritesFile])
def test_malicious_torch_zip_is_refused_and_not_run(tmp_path, payload):
    marker = tmp_path / "marker"
    path = write_pt(tmp_path / "evil.pt", {"model": tl_state_dict(), "extra": payload(marker)})
    refused(path, "refused to unpickle")
    assert not marker.exists()


def test_malicious_plain_pickle_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "evil_legacy.pt"
    path.write_bytes(pickle.dumps(_RunsShell(marker), protocol=2))
    refused(path)
    assert not marker.exists()


def test_malicious_pickle_inside_the_state_dict(tmp_path):
    marker = tmp_path / "marker"
    sd = tl_state_dict()
    sd["embed.W_E"] = _WritesFile(marker)
    refused(write_pt(tmp_path / "evil2.pt", sd), "refused to unpickle")
    assert not marker.exists()


def test_cli_refuses_malicious_file_without_traceback(tmp_path, capsys):
    marker = tmp_path / "marker"
    path = write_pt(tmp_path / "evil.pt", _RunsShell(marker))
    assert exact_accuracy_main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "refused to unpickle" in err and "Traceback" not in err
    assert "weights_only` set to `False`" not in err  # torch's dangerous advice is dropped
    assert not marker.exists()


def test_non_model_files(tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("hello, I am not a model\n")
    refused(text, "not a torch file: neither a zip archive (torch.save) nor a pickle")
    other_zip = tmp_path / "other.pt"
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("readme.txt", "just a zip")
    refused(other_zip)
    refused(write_pt(tmp_path / "list.pt", [torch.zeros(2)]), "expected a state dict")
    refused(write_pt(tmp_path / "tensor.pt", torch.zeros(3)), "expected a state dict")
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    refused(empty, "empty")
    refused(tmp_path / "does_not_exist.pt", "cannot read")
    refused(tmp_path, "a directory without config.json")  # not a model directory
    refused(Path(__file__), "unrecognised")  # a .py file
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    refused(junk, "safetensors")


def test_truncated_files(tmp_path):
    full = write_pt(tmp_path / "full.pt", tl_state_dict())
    data = full.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 30):
        p = tmp_path / f"cut{cut}.pt"
        p.write_bytes(data[:cut])
        refused(p)
    st = tmp_path / "full.safetensors"
    safetensors.torch.save_file(tl_state_dict(), str(st))
    cut_st = tmp_path / "cut.safetensors"
    cut_st.write_bytes(st.read_bytes()[:-20])
    refused(cut_st, "safetensors")


def test_wrong_architectures(tmp_path):
    sd = tl_state_dict()
    extra_layer = dict(sd, **{"blocks.1.attn.W_Q": torch.zeros(1, 4, 5)})
    refused(write_pt(tmp_path / "2layers.pt", extra_layer), "more than one layer")
    two_heads = dict(sd, **{f"blocks.0.attn.W_{n}": torch.zeros(2, 4, 5) for n in "QKV"})
    two_heads["blocks.0.attn.W_O"] = torch.zeros(2, 5, 4)
    refused(write_pt(tmp_path / "2heads.pt", two_heads), "2 attention heads")
    mlp = dict(sd, **{"blocks.0.mlp.W_in": torch.zeros(4, 16),
                      "blocks.0.mlp.b_in": torch.zeros(16)})
    refused(write_pt(tmp_path / "mlp.pt", mlp), "MLP")
    ln = dict(sd, **{"ln_final.w": torch.ones(4), "ln_final.b": torch.zeros(4)})
    refused(write_pt(tmp_path / "ln.pt", ln), "LayerNorm")
    missing = {k: v for k, v in sd.items() if k != "unembed.W_U"}
    refused(write_pt(tmp_path / "missing.pt", missing), "missing", "unembed.W_U")
    bad_shape = dict(sd, **{"unembed.W_U": torch.zeros(4, 7)})  # d_vocab_out != d_vocab
    refused(write_pt(tmp_path / "shape.pt", bad_shape), "unembed.W_U")


def test_bad_values(tmp_path):
    sd = tl_state_dict()
    for bad, fragment in ((float("nan"), "NaN"), (float("inf"), "infinite")):
        w_e = sd["embed.W_E"].clone()
        w_e[1, 2] = bad
        refused(write_pt(tmp_path / f"v{fragment}.pt", dict(sd, **{"embed.W_E": w_e})), fragment)
    inexact = sd["embed.W_E"].to(torch.float64) + 1e-12
    refused(write_pt(tmp_path / "f64.pt", dict(sd, **{"embed.W_E": inexact})),
            "not exactly representable")
    as_int = dict(sd, **{"embed.W_E": torch.ones(6, 4, dtype=torch.int64)})
    refused(write_pt(tmp_path / "int.pt", as_int), "dtype")
    as_list = dict(sd, **{"embed.W_E": [[0.0] * 4] * 6})
    refused(write_pt(tmp_path / "list.pt", as_list), "not a tensor")
    non_str_key = {**sd, 7: torch.zeros(1)}
    refused(write_pt(tmp_path / "key.pt", non_str_key), "non-string key")
    nan_st = tmp_path / "nan.safetensors"
    w_e = sd["embed.W_E"].clone()
    w_e[0, 0] = float("nan")
    safetensors.torch.save_file(dict(sd, **{"embed.W_E": w_e}), str(nan_st))
    refused(nan_st, "NaN")


def test_size_limit(tmp_path, monkeypatch):
    import generator.modelfile as mf

    path = write_pt(tmp_path / "m.pt", tl_state_dict())
    monkeypatch.setattr(mf, "MAX_MODEL_BYTES", 100)
    refused(path, "larger than")


def test_bytes_hashed_are_bytes_parsed(tmp_path):
    # The hash is of the exact bytes given to the parser: loading from memory once.
    path = write_pt(tmp_path / "m.pt", tl_state_dict())
    buf = io.BytesIO(path.read_bytes())
    assert load_model(path).file_sha256 == hashlib.sha256(buf.getvalue()).hexdigest()
