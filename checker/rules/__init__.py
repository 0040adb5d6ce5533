"""Proof rules (spec/rules.md).  Each module has INPUTS, the canonical model
quantities it reads, and check(dims, matrices, hints, charge) -> (proven, note),
where `proven` is a number of sequences the rule proves correct.  A rule whose
inputs depend on the model family or on its hints has inputs(dims, hints) instead
of INPUTS (forward; subcubic_gap: low-rank EQKE and EU); dimensionality(dims,
hints), where defined, is its unexplained dimensionality (spec/rules.md).

Rules with PROPERTY = "overwhelm" prove an overwhelm claim instead
(spec/overwhelm.md): parse_claim(obj, dims, FORM), inputs(dims, claim) -> the
terms they read, check(dims, matrices, claim, hints, charge) -> note."""

# the attention-only model's 12 weights: what a rule proving float32 by Lemma G reads for δ
# (spec/theorem.md §2c; brute_force, cubic, exact, subcubic_gap: FLOAT32_INPUTS)
ATTN_ONLY_WEIGHTS = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O",
                     "W_U", "b_U")

from collections.abc import Mapping  # noqa: E402

_MODULES = {  # rule name -> its module in this package
    "brute_force": "brute_force",
    "cubic": "cubic",
    "cubic_mix": "cubic_mix",
    "exact": "exact",
    "family_gap": "family_gap",
    "forward_brute_force": "forward",
    "overwhelm_family": "overwhelm_family",
    "overwhelm_free": "overwhelm",
    "overwhelm_perm": "overwhelm_perm",
    "subcubic_gap": "subcubic_gap",
}


class _Rules(Mapping):
    """The rules by name.  A rule's module is imported when it is first looked up: a check
    imports the rules its certificate uses, not all of them (start-up time)."""

    def __getitem__(self, name):
        return _load(_MODULES[name])  # KeyError for a name outside the table

    def __contains__(self, name):
        return name in _MODULES

    def __iter__(self):
        return iter(_MODULES)

    def __len__(self):
        return len(_MODULES)


RULES = _Rules()


def _load(module: str):
    """The rule module called `module` (a value of _MODULES), imported now.  Static import
    statements, one per module: no text from a certificate reaches an import (the checker
    imports no module by a computed name; tests/test_checker_boundary.py)."""
    if module == "brute_force":
        from . import brute_force as rule
    elif module == "cubic":
        from . import cubic as rule
    elif module == "cubic_mix":
        from . import cubic_mix as rule
    elif module == "exact":
        from . import exact as rule
    elif module == "family_gap":
        from . import family_gap as rule
    elif module == "forward":
        from . import forward as rule
    elif module == "overwhelm_family":
        from . import overwhelm_family as rule
    elif module == "overwhelm":
        from . import overwhelm as rule
    elif module == "overwhelm_perm":
        from . import overwhelm_perm as rule
    elif module == "subcubic_gap":
        from . import subcubic_gap as rule
    else:
        raise KeyError(module)
    return rule
