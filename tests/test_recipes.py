"""Training recipes (generator/recipes.py, issue 25): names round-trip through the recorded
train_config, each recipe changes what it says and nothing else, the zoo names and groups
its models by recipe."""

from __future__ import annotations

import math

import pytest
import torch

from generator.recipes import RECIPES, held_back, parse_recipes, recipe_of
from generator.train import TrainConfig, train_with_stats
from generator.zoo.report import recipe_table
from generator.zoo.run import model_tag

TINY = {"d_vocab": 6, "n_ctx": 3, "d_model": 8, "d_head": 8, "steps": 30}


@pytest.mark.parametrize("name", list(RECIPES))
def test_recipe_name_round_trips_through_the_recorded_config(name):
    cfg = TrainConfig(**{**TINY, **RECIPES[name].overrides()})
    assert recipe_of(cfg.to_json()) == name


def test_paper_recipe_config_is_byte_for_byte_the_old_one():
    old = TrainConfig(**TINY).to_json()
    assert "init" not in old and "train_biases" not in old
    assert TrainConfig(**{**TINY, **RECIPES["paper"].overrides()}).to_json() == old
    assert model_tag({**old, "seed": 1}) == "max3_v6_d8_h8_steps30_seed1"
    assert model_tag({**old, "seed": 1}, "wd1") == "max3_v6_d8_h8_steps30_wd1_seed1"


def test_parse_recipes():
    assert [r.name for r in parse_recipes("randn, paper,randn")] == ["randn", "paper"]
    assert len(parse_recipes("all")) == len(RECIPES)
    with pytest.raises(ValueError, match="unknown recipes"):
        parse_recipes("paper,nope")
    assert recipe_of({"init": "paper", "weight_decay": 0.5}) is None


def test_held_back_split():
    assert [s for s in range(15) if held_back(s)] == [4, 9, 14]
    assert not held_back(None)


def test_recipe_fields_are_validated():
    with pytest.raises(ValueError, match="init must be one of"):
        TrainConfig(**TINY, init="xavier").validate()
    with pytest.raises(ValueError, match="attention-only"):
        TrainConfig(**TINY, init="randn", d_mlp=8).validate()


def weights_of(cfg):
    return {k: v.detach().clone() for k, v in train_with_stats(cfg, progress=False)
            .model.state_dict().items()}


def test_randn_init_scale_and_biases_trained():
    """randn draws the same stream at std 1/sqrt(d) instead of 0.8/sqrt(d); biases stay 0
    unless the recipe trains them."""
    from generator.model import MaxOfKTransformer

    dims = TrainConfig(**TINY).dims
    a = MaxOfKTransformer(dims, torch.Generator().manual_seed(0))
    b = MaxOfKTransformer(dims, torch.Generator().manual_seed(0),
                          init_std=1 / math.sqrt(dims.d_model))
    assert torch.allclose(b.embed.W_E, a.embed.W_E / 0.8)
    paper = weights_of(TrainConfig(**TINY))
    biases = weights_of(TrainConfig(**TINY, train_biases=True))
    for name in ("blocks.0.attn.b_Q", "blocks.0.attn.b_V", "unembed.b_U"):
        assert not paper[name].any()
        assert biases[name].abs().max() > 0, name


def test_recipe_table_groups_by_recipe_and_split():
    rows = [{"strategy": "cubic", "status": "verified", "normalized_bound": b, "recipe": r,
             "split": "held-back" if held_back(s) else "tune"}
            for r, s, b in (("paper", 3, 0.9), ("paper", 4, 1.0), ("randn", 4, 0.8))]
    rows.append({"strategy": "cubic", "status": "rejected", "normalized_bound": None,
                 "recipe": "randn", "split": "tune"})
    table = recipe_table(rows, ["cubic"])
    assert "| `cubic` | 0.9500 (2/2) | 0.8000 (1/2) | 0.9000 (3/4) | 0.9000 (2/2) |" in table
    assert recipe_table(rows[:2], ["cubic"]) == ""
