"""The certified sequence length is not the model's position capacity (issue 19 item 2).

Users train on short sequences in models with long position tables (GPT-2's 1024, GPT-NeoX's
2048).  `gen-cert --n-ctx K` certifies sequences of length K; the certificate holds rows
0..K-1 of a learned table (the only rows such a sequence reads) and `check-cert --model`
binds them to the file's first K rows; without --n-ctx every command says what to do
instead of crashing or running for hours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_fixtures import randomized, save_dir, tiny_model

from checker.cli import main as check_cert
from checker.errors import Malformed
from checker.tl_config import family_from_tl_config
from generator.cli import main as gen_cert
from generator.ground_truth import main as exact_accuracy

ROOT = Path(__file__).resolve().parent.parent
MAX3 = ROOT / "generator" / "models" / "max3_v8_seed0.pt"


def hf_model(tmp_path: Path, kind: str) -> Path:
    """A model whose position capacity (2048 or 1024) is far above the certified length."""
    model = (tiny_model("neox", vocab=4, positions=2048, rotary_pct=0.5) if kind == "neox"
             else tiny_model("gpt2", vocab=4, positions=1024))
    return save_dir(randomized(model, 5), tmp_path / kind)


@pytest.mark.parametrize("kind", ["neox", "gpt2"])
def test_long_position_capacity_certified_at_a_short_length(tmp_path, capsys, kind):
    model = hf_model(tmp_path, kind)
    cert = tmp_path / "c.jsonl"
    assert gen_cert([str(model), "--n-ctx", "3", "-o", str(cert), "-q"]) == 0
    header = json.loads(cert.read_text().splitlines()[0])
    assert "n_ctx == 3" in header["theorem"]
    capsys.readouterr()
    assert check_cert([str(cert), "--model", str(model), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    capacity = 2048 if kind == "neox" else 1024
    assert f"position capacity is {capacity}" in out, out


@pytest.mark.parametrize("kind", ["neox", "gpt2"])
def test_without_n_ctx_every_command_says_what_to_do(tmp_path, capsys, kind):
    """Before: GPT-NeoX refused with no way out; GPT-2 crashed with OverflowError and
    exact-accuracy ran for 10+ minutes."""
    model = hf_model(tmp_path, kind)
    assert gen_cert([str(model), "-o", str(tmp_path / "c.jsonl"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "--n-ctx" in err and "Traceback" not in err, err
    assert exact_accuracy([str(model), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--n-ctx" in err, err
    assert exact_accuracy([str(model), "--no-progress", "--n-ctx", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 4 ** 3


def test_learned_table_binds_by_its_first_rows(tmp_path, capsys):
    """A certificate for length 2 of the shipped Max-of-3 model verifies against the file;
    changing row 0 of W_pos (read by length-2 sequences) is refused, changing row 2 (never
    read) is not."""
    import torch

    cert = tmp_path / "c.jsonl"
    assert gen_cert([str(MAX3), "--n-ctx", "2", "--strategy", "brute-force", "-o", str(cert),
                     "-q"]) == 0
    assert check_cert([str(cert), "--model", str(MAX3), "--jobs", "1"]) == 0
    assert "position capacity is 3" in capsys.readouterr().out
    for row, verdict in ((2, 0), (0, 1)):
        obj = torch.load(MAX3, weights_only=True)
        obj["model"]["pos_embed.W_pos"][row, 0] += 1.0
        changed = tmp_path / f"row{row}.pt"
        torch.save(obj, changed)
        assert check_cert([str(cert), "--model", str(changed), "--jobs", "1"]) == verdict


def test_length_above_the_capacity_is_refused():
    cfg = {"n_layers": 1, "d_model": 8, "d_head": 4, "n_heads": 2, "n_ctx": 4, "d_vocab": 5,
           "normalization_type": "LN", "d_mlp": 16, "act_fn": "relu",
           "positional_embedding_type": "rotary"}
    assert family_from_tl_config(cfg, n_ctx=3).n_ctx == 3
    with pytest.raises(Malformed, match="model's n_ctx is 4"):
        family_from_tl_config(cfg, n_ctx=5)
    with pytest.raises(Malformed, match="model's n_ctx is 4"):
        family_from_tl_config(cfg, n_ctx=1)


def test_gen_cert_n_ctx_above_the_table(tmp_path, capsys):
    assert gen_cert([str(MAX3), "--n-ctx", "4", "-o", str(tmp_path / "c.jsonl"), "-q"]) == 2
    assert "position table has 3 rows" in capsys.readouterr().err
