"""Messages a new user meets in the first hour say what is wrong and what to do (issue 19
item 4): a two-layer model names its depth (not a mask dtype), a pickled model object says
how to save it, a family certificate against a bare state dict says the config is missing,
a misspelt statement field names the nearest field."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

from checker import statement
from checker.cli import main as check_cert
from checker.errors import Malformed
from generator.cli import main as gen_cert
from generator.ground_truth import main as exact_accuracy

ROOT = Path(__file__).resolve().parent.parent
FAMILY_CERT = ROOT / "certs" / "maxany_v6_k6_ln_mlp_rope_seed0.overwhelm-5-free3.jsonl"
FAMILY_MODEL = ROOT / "generator" / "models" / "maxany_v6_k6_ln_mlp_rope_seed0.pt"


def two_layer_model(tmp_path: Path) -> Path:
    tl = pytest.importorskip("transformer_lens")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = tl.HookedTransformerConfig(n_layers=2, d_model=8, n_ctx=3, d_head=4, d_vocab=5,
                                         attn_only=True, normalization_type=None, act_fn="relu")
        model = tl.HookedTransformer(cfg)
    path = tmp_path / "two.pt"
    torch.save({"config": cfg.to_dict(), "model": model.state_dict()}, path)
    return path


def test_two_layer_model_is_certified_and_a_wrong_depth_is_named(tmp_path, capsys):
    """Issue 21: a two-layer TransformerLens model is certified (forward brute force);
    a config whose n_layers is not the tensors' depth is refused, naming n_layers."""
    path = two_layer_model(tmp_path)
    assert gen_cert([str(path), "-o", str(tmp_path / "c.jsonl"), "-q"]) == 0
    assert check_cert([str(tmp_path / "c.jsonl"), "--model", str(path)]) == 0
    assert exact_accuracy([str(path), "--no-progress"]) == 0
    capsys.readouterr()
    obj = torch.load(path, weights_only=False)
    obj["config"]["n_layers"] = 1
    torch.save(obj, path)
    assert gen_cert([str(path), "-o", str(tmp_path / "d.jsonl"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "n_layers = 1" in err and "dtype" not in err, err
    assert exact_accuracy([str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "n_layers = 1" in err and "dtype" not in err, err


def test_pickled_model_object_says_how_to_save(tmp_path, capsys):
    path = tmp_path / "whole.pt"
    torch.save(torch.nn.Linear(2, 2), path)  # torch.save(model), not its state dict
    assert check_cert([str(FAMILY_CERT), "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "model.cfg.to_dict()" in err, err
    assert gen_cert([str(path), "-o", str(tmp_path / "c.jsonl"), "-q"]) == 2
    assert "model.cfg.to_dict()" in capsys.readouterr().err


def test_family_certificate_against_a_bare_state_dict(tmp_path, capsys):
    bare = tmp_path / "bare.pt"
    torch.save(torch.load(FAMILY_MODEL, weights_only=True)["model"], bare)
    assert check_cert([str(FAMILY_CERT), "--model", str(bare)]) in (1, 2)
    err = capsys.readouterr().err
    assert "has no config" in err and "config.json beside" in err, err
    assert err.count("{") <= 1, err  # no two dict dumps


def test_misspelt_statement_field_names_the_nearest():
    with pytest.raises(Malformed, match="unknown field 'acuracy' \\(did you mean 'accuracy'"):
        statement.parse("acuracy >= 0.9")
    with pytest.raises(Malformed, match="did you mean 'd_vocab'"):
        statement.parse("task == max_of_k and dvocab == 64")


def test_field_list_is_the_grammars():
    grammar = (Path(statement.__file__).with_name("statement.lark")).read_text()
    block = grammar[grammar.index("FIELD:"):grammar.index("CMP:")]
    assert tuple(re.findall(r'"([a-z_]+)"', block)) == statement.FIELDS
