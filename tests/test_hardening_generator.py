"""Regression tests of the hardening audit (issue 7), generator side: no certificate is lost
to an overflow, to the informational float32 shadow, or to a cubic class that claims nothing.

Each failed before its fix: huge attention scores raised FloatingPointError; an `inf` float32
shadow made check-cert refuse the whole certificate (exit 2); the cubic rule rejected a whole
certificate because B − S of an unclaimed placement could not be shown positive, and the
generator claimed tokens at such placements.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from checker.cli import main as check_cert
from checker.modelspec import Dims
from generator.certify import intervals as ia
from generator.certify.strategies import NotApplicable
from generator.certify.strategies import cubic as cubic_strategy
from generator.cli import generate
from generator.cli import main as gen_cert
from generator.model import MaxOfKTransformer
from generator.modelfile import save_model


def _model(seed, v, k, d, pos_scale=1.0, e_scale=1.0):
    w = MaxOfKTransformer(Dims(v, k, d, d), generator=torch.Generator().manual_seed(seed)).weights()
    return w.replace(W_pos=(w.W_pos * pos_scale).astype(np.float32),
                     W_E=(w.W_E * e_scale).astype(np.float32))


def _certify(tmp_path, weights, shadow=True, strategy="cubic"):
    path = tmp_path / "m.pt"
    save_model(path, weights, None)
    lines, _ = generate(str(path), strategy, float_shadow=shadow)
    cert = tmp_path / "c.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    return path, cert, lines


def _check(cert, capsys, *extra):
    code = check_cert([str(cert), "--jobs", "1", *extra])
    return code, capsys.readouterr().err


# ---- 5a: exp overflow -----------------------------------------------------------------------

def test_huge_attention_scores_are_a_clear_refusal(tmp_path, capsys):
    path = tmp_path / "m.pt"
    save_model(path, _model(4, 4, 4, 4, pos_scale=200), None)
    with pytest.raises(NotApplicable, match="overflows binary64"):
        generate(str(path), "cubic")
    assert gen_cert([str(path), "-q", "-o", str(tmp_path / "c.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "does not apply" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_underflowed_exp_keeps_a_non_negative_lower_end():
    out = ia.exp(ia.IMat.point(np.array([[-800.0, -2000.0, 0.0]])))
    assert (out.lo >= 0).all() and out.lo[0, 2] < 1 < out.hi[0, 2]


# ---- 5b: the float32 shadow ------------------------------------------------------------------

def test_overflowing_float_shadow_is_left_out(tmp_path, capsys):
    _, cert, lines = _certify(tmp_path, _model(2, 5, 4, 4, pos_scale=40), shadow=True)
    ops = [json.loads(s) for s in lines if '"kind":"op"' in s]
    assert any("float" not in o for o in ops) and any("float" in o for o in ops)
    code, err = _check(cert, capsys)
    assert code == 0, err


# ---- 5c: a cubic class that claims nothing ---------------------------------------------------

def test_unclaimed_class_does_not_sink_the_certificate(tmp_path, capsys):
    """B − S of some placement cannot be shown positive, but nothing is claimed there."""
    _, cert, _ = _certify(tmp_path, _model(1, 5, 4, 4, e_scale=30), shadow=False)
    code, err = _check(cert, capsys)
    assert code == 0, err


def test_generator_claims_nothing_where_b_minus_s_is_not_positive(tmp_path, capsys,
                                                                   monkeypatch):
    """The generator knows the rule's condition; a certificate that claims at such a
    placement anyway is still rejected (the check bites where it is used)."""
    weights = _model(6, 4, 4, 4, pos_scale=40, e_scale=1.4)
    _, cert, _ = _certify(tmp_path, weights, shadow=False)
    code, err = _check(cert, capsys)
    assert code == 0, err
    monkeypatch.setattr(cubic_strategy, "REST_TOL", -np.inf)  # the generator before the fix
    _, cert, _ = _certify(tmp_path, weights, shadow=False)
    code, err = _check(cert, capsys)
    assert code == 1 and "cannot be shown positive" in err


def test_cancelling_output_differences_are_not_overclaimed(tmp_path, capsys):
    """Found by benchmarks/fuzz_audit.py (seed 2026, model 88): two unembedding columns 1e-7
    apart; the generator claimed a sequence whose bound the checker's enclosures could not
    show negative, and the checker rejected the whole certificate."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import fuzz_audit

    weights = fuzz_audit.make_model(np.random.default_rng([2026, 88]), "near_tie")
    _, cert, _ = _certify(tmp_path, weights)
    code, err = _check(cert, capsys)
    assert code == 0, err
