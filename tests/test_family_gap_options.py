"""Strategy family-gap's options (`--strategy family-gap:merge=off|lossless|always`): typed,
enumerable, round-trip to names, unknown values refused with a message; gen-cert passes the
option through (the merged classes appear only when asked) and no environment variable is
read."""

from __future__ import annotations

import json

import pytest
from family_gap_models import model, replay, rule_line
from soundness_helpers import certify

from generator.certify.strategies import family_gap, listing, resolve
from generator.cli import main as gen_cert


def test_every_option_round_trips():
    grid = family_gap.grid()
    assert [o.merge for o in grid] == ["off", "lossless", "always"]
    for options in grid:
        assert family_gap.Options.parse(options.name()) == options
        module, kwargs = resolve(options.name())
        assert module is family_gap and kwargs == {"options": options}
    assert listing("family-gap") == [o.name() for o in grid]
    assert family_gap.Options().name() == "family-gap"  # the default keeps the plain name


def test_default_and_explicit_names():
    assert family_gap.Options.parse("family-gap") == family_gap.Options()
    assert family_gap.Options.parse("family-gap:merge=off") == family_gap.Options()
    assert family_gap.Options.parse("family-gap:merge=always").merge == "always"


@pytest.mark.parametrize("name", ["family-gap:merge=sometimes", "family-gap:merge=",
                                  "family-gap:merge", "family-gap:bogus=1",
                                  "family-gap:merge=off,merge=always", "family-gaps:merge=off"])
def test_bad_names_are_refused(name, capsys):
    with pytest.raises(ValueError):
        resolve(name)
    assert gen_cert(["--strategy", name, "--list"]) == 2
    err = capsys.readouterr().err
    assert "gen-cert:" in err and ("merge" in err or "unknown strategy" in err)


def test_list_prints_the_modes(capsys):
    assert gen_cert(["--strategy", "family-gap", "--list"]) == 0
    assert capsys.readouterr().out.split() == [o.name() for o in family_gap.grid()]


def test_no_environment_variable_is_read(monkeypatch):
    import inspect

    assert "environ" not in inspect.getsource(family_gap)
    monkeypatch.setenv("FAMILY_GAP_MERGE", "always")
    assert family_gap.Options.parse("family-gap").merge == "off"


@pytest.mark.parametrize("merge", ["off", "always"])
def test_gen_cert_passes_the_option(merge, tmp_path):
    """gen-cert --strategy family-gap:merge=MODE: merged classes exactly when asked, the
    strategy's name recorded, and the certificate verifies."""
    name = family_gap.Options(merge=merge).name()
    _, _, lines = certify(model("ln_mlp_k4_well_trained"), tmp_path, name)
    header = json.loads(lines[0])
    assert name in json.dumps(header)
    merged = [c for c in rule_line(lines)["hints"]["classes"] if isinstance(c[2], dict)]
    assert bool(merged) == (merge == "always")
    assert replay(lines).facts.correct == rule_line(lines)["claim"]


@pytest.mark.parametrize("name", ["family-gap:budget=3e9", "family-gap:budget=5000",
                                  "family-gap:confirm=off",
                                  "family-gap:merge=always,budget=3000000000,confirm=off"])
def test_budget_and_confirm_round_trip(name):
    options = family_gap.Options.parse(name)
    assert family_gap.Options.parse(options.name()) == options
    assert resolve(options.name())[1] == {"options": options}
    assert family_gap.Options.parse("family-gap:budget=3e9").budget == 3 * 10**9
    assert family_gap.Options.parse(f"family-gap:budget={family_gap.MAX_CHECKER_WORK}").name() \
        == "family-gap"  # the default keeps the plain name


@pytest.mark.parametrize("name", ["family-gap:budget=0", "family-gap:budget=-5",
                                  "family-gap:budget=1.5", "family-gap:budget=x",
                                  "family-gap:budget=1e20", "family-gap:confirm=maybe",
                                  "family-gap:confirm=on,confirm=off"])
def test_bad_budget_or_confirm_refused(name):
    with pytest.raises(ValueError):
        resolve(name)


def test_budget_below_the_estimate_is_not_applicable_and_says_how_to_raise_it(tmp_path):
    """The budget caps the checker work planned for: below the classes' estimate the
    strategy does not apply, and its message names the option that would let it."""
    from generator.certify.strategies import NotApplicable
    from generator.certify.trace import Trace

    trace = Trace(model("ln_mlp_k4_well_trained"), float_shadow=False)
    with pytest.raises(NotApplicable, match=r"budget=\d+"):
        family_gap.certify(trace, options=family_gap.Options(budget=1000))


def test_confirm_off_claims_what_the_checker_verifies(tmp_path):
    """confirm=off skips the checker-code pass over the classes; on a well-trained model every
    float64-proved class is still confirmed, so the certificate verifies at the same claim."""
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on = certify(model("ln_mlp_k4_well_trained"), tmp_path / "on", "family-gap")[2]
    off = certify(model("ln_mlp_k4_well_trained"), tmp_path / "off",
                  "family-gap:confirm=off")[2]
    assert rule_line(off)["claim"] >= rule_line(on)["claim"]
    assert replay(off).facts.correct == rule_line(off)["claim"]
