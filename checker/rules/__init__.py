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
from importlib import import_module  # noqa: E402

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
        return import_module(f"{__name__}.{_MODULES[name]}")

    def __contains__(self, name):
        return name in _MODULES

    def __iter__(self):
        return iter(_MODULES)

    def __len__(self):
        return len(_MODULES)


RULES = _Rules()
