"""A deterministic slice of the config fuzz (benchmarks/fuzz_configs.py): random values and
types for the fields of a TransformerLens config, each verdict of the checker judged by
TransformerLens's own forward pass.  A verified file whose TransformerLens function differs
from the certified model's is a false binding (issue 18)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformer_lens")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import fuzz_configs  # noqa: E402

from checker import tl_config  # noqa: E402


def test_ci_slice_has_no_false_binding():
    s = fuzz_configs.run(cases=40, seed=11)
    assert s.get("false_bindings", 0) == 0, s["findings"]
    assert s.get("accepted_same_function", 0) > 0 and s.get("refused", 0) > 0, s


def test_the_oracle_catches_the_reported_false_binding(tmp_path, monkeypatch):
    """With the soft cap allowed again (the bug of issue 18), the fuzz's judge reports the
    soft-cap file as a false binding: the campaign can fail."""
    import torch

    sd = torch.load(fuzz_configs.MODEL, weights_only=True)["model"]
    base = fuzz_configs.base_config(sd)
    oracle = fuzz_configs.Oracle(__import__("transformer_lens"), sd, base)
    capped = {**base, "attn_scores_soft_cap": 0.001}
    assert fuzz_configs.judge(oracle, sd, capped, tmp_path / "m.pt")[0] == \
        "refused_other_or_invalid"
    monkeypatch.setitem(tl_config.FIXED, "attn_scores_soft_cap", (-1.0, lambda v: True, ""))
    assert fuzz_configs.judge(oracle, sd, capped, tmp_path / "m.pt")[0] == "false_bindings"
