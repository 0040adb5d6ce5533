"""Training recipes: the ways people actually train a Max-of-K model (issue 25).

The compact strategies were tuned on models of one recipe (the paper's, App. B.1:
generator/train.py).  Models trained elsewhere differ in their initialisation, weight
decay, length of training and biases, and the compact proofs are weaker on them.  A
recipe is a named set of TrainConfig fields; `certify-zoo --recipes a,b,...` trains every
seed under every recipe and reports Table 1 per recipe and pooled.

    paper       N(0, (0.8/√d_model)²) weights from the run's own generator, biases frozen
                at 0, AdamW weight decay 0.01, 3000 steps (TransformerLens's 'gpt2' scale)
    randn       weights randn/√d_model (std 1/√d_model, as in hand-written training
                scripts), no biases
    tl          TransformerLens HookedTransformer's own initialisation, seeded by cfg.seed
                (needs the interop extra)
    biases      the paper's, with every bias trained (they start at 0)
    wd0.1, wd1  weight decay 0.1 / 1.0
    steps2000, steps6000   shorter / longer training

Held-back split: models whose seed ≡ 4 (mod 5) are never used to choose options or
defaults (`held_back`); the report gives their table separately.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from . import choose_named

INITS = ("paper", "randn", "tl")


@dataclass(frozen=True)
class Recipe:
    """TrainConfig fields a recipe sets (the rest: the zoo's --d-vocab etc.)."""

    name: str
    init: str = "paper"
    train_biases: bool = False
    weight_decay: float = 0.01
    steps: int | None = None  # None: the zoo's --steps (default 3000)

    def overrides(self) -> dict:
        """The TrainConfig fields this recipe sets."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "name" and getattr(self, f.name) is not None}


RECIPES = {r.name: r for r in (
    Recipe("paper"),
    Recipe("randn", init="randn"),
    Recipe("tl", init="tl"),
    Recipe("biases", train_biases=True),
    Recipe("wd0.1", weight_decay=0.1),
    Recipe("wd1", weight_decay=1.0),
    Recipe("steps2000", steps=2000),
    Recipe("steps6000", steps=6000),
)}


def parse_recipes(text: str) -> list[Recipe]:
    """'paper,randn' -> the recipes, in order, without repeats; ValueError naming an
    unknown one ('all': every recipe)."""
    return choose_named(text, RECIPES, "recipes")


def recipe_of(train_config: dict) -> str | None:
    """The name of the recipe a recorded train_config was trained with, or None (a
    foreign model, or fields no recipe sets together)."""
    defaults = {"init": "paper", "train_biases": False}  # TrainConfig.to_json omits them
    # the recipes that fix the number of steps first: they are the more specific
    for recipe in sorted(RECIPES.values(), key=lambda r: r.steps is None):
        if all(train_config.get(k, defaults.get(k)) == v
               for k, v in recipe.overrides().items()):
            return recipe.name
    return None


def held_back(seed: int | None) -> bool:
    """True for the held-back split (seed ≡ 4 mod 5): never tuned on."""
    return seed is not None and seed % 5 == 4
