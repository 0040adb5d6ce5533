"""Model families the zoo trains (issue 23): `certify-zoo --family ln-mlp,ln-mlp-rope`.

A family is a set of TrainConfig fields laid over the zoo's --d-vocab / --n-ctx /
--d-model, as a recipe is (generator/recipes.py); the two are independent, so a run
trains every seed under every (family, recipe) pair the trainer accepts.

    attn-only     the paper's model: one attention-only layer, learned positions
    ln-mlp        LayerNorm (LN) and a ReLU MLP of width 4·d_model, learned positions
                  (issue 23's architecture: d_model 32, MLP 128)
    ln-mlp-rope   the same with rotary positions instead of learned ones

The decomposition strategies (cubic, subcubic, exact, ...) need the attention-only
model; when every family of a run has LayerNorm or an MLP, the zoo runs the strategies
that apply to them (FAMILY_STRATEGIES) unless --strategies says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import choose_named

ATTN_ONLY = "attn-only"
OTHER = "other"  # a loaded model that matches no preset
# The strategies whose generators accept LayerNorm / MLP / RoPE models.
FAMILY_STRATEGIES = ("family-gap", "forward-brute-force")
# check-cert --max-work for a run with such models when --check-max-work is not given:
# family-gap certificates pass check-cert's default 5·10^7 from d_vocab 16 on (8.1·10^7
# measured at v16, n_ctx 4); the generator keeps its rule within 2·10^8 by default.
FAMILY_CHECK_MAX_WORK = 10 ** 9


@dataclass(frozen=True)
class ModelFamily:
    """TrainConfig fields of one family (None / 0 / False: the attention-only value)."""

    name: str
    layernorm: str | None = None
    mlp_ratio: int = 0  # d_mlp = mlp_ratio · d_model
    rope: bool = False

    @property
    def is_attn_only(self) -> bool:
        return self.layernorm is None and not self.mlp_ratio and not self.rope

    def overrides(self, train: dict) -> dict:
        """The TrainConfig fields this family sets, given the zoo's dimensions."""
        if self.is_attn_only:
            return {}
        return {"layernorm": self.layernorm, "d_mlp": self.mlp_ratio * train["d_model"],
                "act_fn": "relu", "rope": self.rope}

    def matches(self, dims) -> bool:
        """True when a model of `dims` (checker.modelspec.Dims) is of this family."""
        f = dims.family
        if self.is_attn_only:
            return f.is_attn_only
        return (f.normalization == self.layernorm and f.d_mlp == self.mlp_ratio * dims.d_model
                and f.act_fn == "relu" and (f.positional == "rotary") == self.rope
                and f.n_heads == 1 and f.n_layers == 1 and not f.parallel
                and not f.gated_mlp)


FAMILIES = {f.name: f for f in (
    ModelFamily(ATTN_ONLY),
    ModelFamily("ln-mlp", layernorm="LN", mlp_ratio=4),
    ModelFamily("ln-mlp-rope", layernorm="LN", mlp_ratio=4, rope=True),
)}


def parse_families(text: str) -> list[ModelFamily]:
    """'ln-mlp,ln-mlp-rope' -> the families, in order, without repeats ('all': every
    family); ValueError naming an unknown one."""
    return choose_named(text, FAMILIES, "families")


def family_of(dims) -> str:
    """The name of the preset a model of `dims` belongs to, or OTHER."""
    return next((f.name for f in FAMILIES.values() if f.matches(dims)), OTHER)


def default_strategies(families: list[ModelFamily]) -> list[str] | None:
    """The strategies a run of these families uses when --strategies is not given:
    None (every registered strategy) when one of them is attention-only."""
    if any(f.is_attn_only for f in families):
        return None
    return list(FAMILY_STRATEGIES)


def default_check_max_work(families: list[ModelFamily]) -> int | None:
    """check-cert --max-work for a run of these families (None: check-cert's default)."""
    return None if all(f.is_attn_only for f in families) else FAMILY_CHECK_MAX_WORK


def forward_work(dims) -> int:
    """Interval operations of forward brute force on `dims`: the checker's up-front
    charge per sequence (checker.rules.forward) times the d_vocab^n_ctx inputs; the
    scale against which a compact family proof's work is reported (issue 23:
    ≤ 1/100 required)."""
    from checker.rules import forward

    return forward._sequence_cost(dims) * dims.d_vocab ** dims.n_ctx
