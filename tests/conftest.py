"""Test-suite configuration.

Under CI (the CI environment variable is set), Hypothesis runs derandomized:
the same examples every run, so a landing never depends on luck.  Locally it
explores new examples each run; INTERVAL_PROPS_EXAMPLES raises the count.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# The fast tier: `make test-fast` runs `pytest -m "not slow"`; `make test` (CI)
# runs everything.  The long runs are marked here, in one place, by file or
# test; a single slow test elsewhere carries @pytest.mark.slow itself.
SLOW_FILES = (
    "test_redteam_",  # red teams: thousands of adversarial certificates
    "test_interop_",  # TransformerLens / Hugging Face round trips
    "test_fuzz_audit.py",
    "test_zoo.py",  # a Dask cluster
    "test_training.py",
    "test_certs_audit.py",  # every shipped certificate
    "test_tasks_demos.py",  # the modular-addition certificate (~1 min in Arb)
    "test_install.py",  # a fresh venv
    "test_proof_length.py",  # proof length counts, not soundness
)
SLOW_TESTS = (
    # the two arithmetic back-ends agree (each is tested on its own in the fast tier)
    "test_arith.py::test_shipped_certificates_same_verdict",
    "test_arith.py::test_random_models_same_counts",
    "test_subcubic_lowrank.py::test_arb_back_end_agrees",
    "test_subcubic_direct.py::test_both_back_ends_agree",
    "test_bulk_arith.py::test_shipped_forward_certificates_agree",
    "test_bulk_arith.py::test_shipped_overwhelm_family_certificates_agree",
    "test_depth.py::test_arb_checks_deep_and_gated_families_in_bulk",
    # a third deliberate break of the deep families (two stay in the fast tier)
    "test_depth.py::test_later_layer_with_layer_0_parameters_is_caught",
    # tightness and size of the proofs (not soundness)
    "test_cubic_soundness.py::test_tightness_on_shipped_small_models",
    "test_subcubic_soundness.py::test_trained_models_are_certified_nontrivially",
    "test_subcubic_lowrank.py::test_low_rank_is_nontrivial",
    "test_subcubic_direct.py::test_no_line_computes_eu",
    "test_overwhelm_family.py::test_demo_model_certifies_a_long_free_string",
    # family_gap: the back-ends (mpmath path in both) and half of its enumeration sweeps
    "test_family_gap.py::test_both_backends_agree",
    "test_family_gap.py::test_forced_classes_are_confirmed_only_when_true[negative_ln_gains]",
    "test_family_gap.py::test_forced_classes_are_confirmed_only_when_true[attends_to_smallest]",
    "test_family_gap.py::test_forced_classes_are_confirmed_only_when_true[mlp_no_norm_k3]",
    "test_family_gap.py::test_every_sequence_of_every_accepted_class_is_correct[rare_mlp_unit]",
    "test_family_gap.py::test_every_sequence_of_every_accepted_class_is_correct[near_zero_",
    "test_family_gap.py::test_every_sequence_of_every_accepted_class_is_correct[ln_3heads_k2]",
    # the largest model of a soundness sweep whose other models stay in the fast tier
    "test_overwhelm_family.py::test_every_accepted_claim_holds_on_every_completion[small_trained]",
    # the several-layer overwhelm sweep: the 3-layer and the trained demo (the others stay fast)
    "test_overwhelm_deep.py::test_every_accepted_claim_holds_on_every_completion[attn3]",
    "test_overwhelm_deep.py::test_every_accepted_claim_holds_on_every_completion[demo]",
)
# Soundness sweeps (every strategy variant x every model, checked against
# enumeration): the fast tier keeps every variant on these models only.
SWEEPS = (
    "test_subcubic_lowrank.py::test_every_covered_sequence_is_correct[",
    "test_subcubic_direct.py::test_every_covered_sequence_is_correct[",
    "test_subcubic_soundness.py::test_every_covered_sequence_is_correct[",
)
SWEEP_FAST_MODELS = ("v8k3-good-", "v8k4-rank2-trap-4-", "random-scaled-270-")


def _slow(item) -> bool:
    name = item.path.name
    test = f"{name}::{item.name}"
    if name.startswith(SLOW_FILES) or test.startswith(SLOW_TESTS):
        return True
    for sweep in SWEEPS:
        if test.startswith(sweep):
            return not test[len(sweep):].startswith(SWEEP_FAST_MODELS)
    return False


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:
        if _slow(item):
            item.add_marker(pytest.mark.slow)
