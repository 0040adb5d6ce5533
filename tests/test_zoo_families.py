"""The zoo's model families (generator/zoo/families.py; issue 23's `--family`)."""

from __future__ import annotations

import pytest

from generator.train import TrainConfig
from generator.zoo.families import (
    FAMILIES,
    FAMILY_CHECK_MAX_WORK,
    FAMILY_STRATEGIES,
    OTHER,
    default_strategies,
    family_of,
    parse_families,
)
from generator.zoo.report import family_work_table
from generator.zoo.run import model_tag

TRAIN = {"d_vocab": 16, "n_ctx": 4, "d_model": 32, "d_head": 32, "steps": 10}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_round_trips_through_the_trained_dims(name):
    cfg = TrainConfig(**{**TRAIN, **FAMILIES[name].overrides(TRAIN)})
    cfg.validate()
    assert family_of(cfg.dims) == name


def test_ln_mlp_is_the_issue_architecture():
    f = TrainConfig(**{**TRAIN, **FAMILIES["ln-mlp"].overrides(TRAIN)}).dims.family
    assert (f.normalization, f.d_mlp, f.act_fn, f.positional) == ("LN", 128, "relu", "standard")


def test_a_model_of_no_preset_is_other():
    cfg = TrainConfig(**{**TRAIN, "layernorm": "LN", "d_mlp": 64})  # MLP 2·d_model
    assert family_of(cfg.dims) == OTHER
    cfg = TrainConfig(**{**TRAIN, **FAMILIES["ln-mlp"].overrides(TRAIN), "n_heads": 2,
                         "d_head": 16})
    assert family_of(cfg.dims) == OTHER


def test_parse_families():
    assert [f.name for f in parse_families("ln-mlp, ln-mlp,attn-only")] == ["ln-mlp",
                                                                            "attn-only"]
    assert [f.name for f in parse_families("all")] == list(FAMILIES)
    for bad in ("", "ln", "ln-mlp,nope"):
        with pytest.raises(ValueError, match="unknown families"):
            parse_families(bad)


def test_default_strategies():
    assert default_strategies(parse_families("attn-only")) is None  # every strategy
    assert default_strategies(parse_families("ln-mlp,attn-only")) is None
    assert default_strategies(parse_families("ln-mlp-rope")) == list(FAMILY_STRATEGIES)


def test_model_tags_differ_by_family_and_keep_the_old_names():
    cfg = TrainConfig(**TRAIN).to_json()
    assert model_tag(cfg) == "max4_v16_d32_h32_steps10_seed0"  # as before families
    tags = {model_tag(cfg, "paper", f) for f in FAMILIES} | {model_tag(cfg, "wd1", "ln-mlp")}
    assert len(tags) == len(FAMILIES) + 1


def test_cli_refuses_unknown_families_and_impossible_pairs(capsys):
    from generator.zoo.cli import options, parser

    p = parser()
    for argv, why in ((["--seeds", "1", "--family", "nope"], "unknown families"),
                      (["--seeds", "1", "--family", "ln-mlp", "--recipes", "biases"],
                       "attention-only")):
        with pytest.raises(SystemExit):
            options(p.parse_args(argv), p)
        assert why in capsys.readouterr().err
    opts = options(p.parse_args(["--seeds", "1", "--family", "ln-mlp"]), p)
    assert opts.families == ["ln-mlp"] and opts.strategies == list(FAMILY_STRATEGIES)
    assert opts.check_max_work == FAMILY_CHECK_MAX_WORK  # family-gap passes 5·10^7 at v16
    opts = options(p.parse_args(["--seeds", "1", "--family", "ln-mlp", "--check-max-work",
                                 "7"]), p)
    assert opts.check_max_work == 7
    assert options(p.parse_args(["--seeds", "1"]), p).check_max_work is None


def test_family_work_table():
    row = {"strategy": "family-gap", "family": "ln-mlp", "status": "verified",
           "normalized_bound": 0.9, "checker_work": 10, "forward_work": 1230,
           "check_seconds": 2.0}
    table = family_work_table([row, {**row, "status": "rejected", "checker_work": 1}],
                              ["family-gap"])
    assert "| `family-gap` | ln-mlp | 0.9000 | 1/123 | 2 | 1 / 2 |" in table
    assert family_work_table([{**row, "family": "attn-only"}], ["family-gap"]) == ""
