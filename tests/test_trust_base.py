"""The trust base table (spec/trust.md) names every checker file, and its
conditions hold: the optional groups are not imported by a plain check."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import trust_base  # noqa: E402


def test_every_checker_file_is_in_exactly_one_group():
    assert trust_base.ungrouped(trust_base.grouped()) == []
    assert trust_base.main([]) == 0


def test_a_file_outside_every_group_is_reported(monkeypatch):
    groups = dict(trust_base.GROUPS)
    groups["kernel"] = (groups["kernel"][0], [f for f in groups["kernel"][1] if f != "ops.py"])
    monkeypatch.setattr(trust_base, "GROUPS", groups)
    assert trust_base.ungrouped(trust_base.grouped()) == ["ops.py"]
    assert trust_base.main([]) == 1


def test_exact_is_counted_with_cubic():
    # pool: forked workers; cubic_fmpz: the arb accelerator (exact's integer tables); notes:
    # the distance notes' attempt (since branch f32-lowrank)
    assert trust_base.rule_dependencies("exact") == ["cubic", "cubic_fmpz", "notes", "pool"]
    assert trust_base.rule_dependencies("brute_force") == []


def test_a_plain_check_imports_no_optional_group():
    """check-cert on a shipped certificate, default back-end, a .pt model: arb, hf and
    audit are never imported (spec/trust.md's conditions)."""
    code = ("import sys; from checker.cli import main; "
            "rc = main(['certs/max4_v64_seed0.subcubic.jsonl', '--model', "
            "'generator/models/max4_v64_seed0.pt']); "
            "print(rc, sorted(m for m in sys.modules if m in "
            "('checker.arith.arb', 'checker.hf', 'checker.audit', 'checker.policy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stdout + out.stderr


def test_every_registered_rule_is_a_rule_group():
    """The table's rules are the registry's (a lazy registry once hid them all as parts)."""
    from checker import rules

    registered = trust_base.registered_rules()
    assert registered == sorted(set(rules._MODULES.values()))
    groups = trust_base.grouped()
    assert all(f"rule {name}" in groups for name in registered)
    assert {"cubic", "cubic_mix", "subcubic_gap"} <= set(registered)


def test_every_registry_entry_loads_its_own_module():
    """The registry's static import chain (rules._load) covers every entry of its table."""
    from checker import rules

    for name in rules.RULES:
        assert rules.RULES[name].__name__ == f"checker.rules.{rules._MODULES[name]}"
