"""Mutants of an exact certificate that the checker must refuse.

The base is the exact certificate of a briefly trained model whose cover and
residue are both non-empty (checked first).  Each mutant changes one thing
and must exit 1 (rejected) or 2 (malformed), with one clear line on stderr.
"""

from __future__ import annotations

import copy
import functools
import json

import numpy as np
import pytest
from checker_fixtures import decode, dump, encode, write_lines

from checker.cli import main

PREFIX = {1: "REJECTED: ", 2: "MALFORMED: "}


@functools.cache
def base() -> tuple[str, ...]:
    from checker_fixtures import workdir

    from generator.cli import generate
    from generator.modelfile import save_model
    from generator.train import TrainConfig, train

    path = workdir() / "exact_base.pt"
    weights = train(TrainConfig(d_vocab=7, n_ctx=3, d_model=8, d_head=8, steps=100, seed=2),
                    progress=False).weights()
    save_model(path, weights, None)
    lines, _ = generate(str(path), "exact", progress=False)
    return tuple(lines)


def run(capsys, lines, *extra):
    path = write_lines(lines, "exact_mutant.jsonl")
    code = main([str(path), "--jobs", "1", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_base_verifies_with_cover_and_residue(capsys):
    code, out, err = run(capsys, base())
    assert code == 0, err
    note = next(line for line in out.splitlines() if line.strip().startswith("exact:"))
    cover = int(note.split("certified: ")[1].split(" in closed form")[0])
    residue_ok = int(note.split("), ")[1].split(" of the")[0])
    assert cover > 0 and residue_ok > 0, note


def _objs():
    return [json.loads(s) for s in base()]


def _claim(objs, delta, header=True, rule=True):
    n = objs[-2]["claim"]
    if header:
        theorem = objs[0]["theorem"]
        objs[0]["theorem"] = theorem.replace(f"correct >= {n}", f"correct >= {n + delta}")
    if rule:
        objs[-2]["claim"] = n + delta
    return objs


def _forge_good_token(objs):
    """Claim good a token the generator found not good (its sets are maximal)."""
    good = objs[-2]["hints"]["good"]
    for entry in good:
        m, q, c, mask = entry[:4]
        missing = [u for u in range(m) if c >= 1 and not mask >> u & 1]
        if missing:
            entry[3] = mask | 1 << missing[0]
            return objs
    raise AssertionError("no class with a non-good token")


def _forge_c0_flag(objs):
    """Claim a failing all-max sequence (m, ..., m, q) good."""
    good = objs[-2]["hints"]["good"]
    claimed = {(e[0], e[1]) for e in good if e[2] == 0}
    v = json.loads(base()[1])["shape"][0]
    m, q = next((m, q) for m in range(v) for q in range(m + 1) if (m, q) not in claimed)
    good.append([m, q, 0, 1])
    return objs


def _hint(edit):
    def f(objs):
        edit(objs[-2]["hints"]["good"])
        return objs
    return f


def _token_ge_max(good):
    entry = next(e for e in good if e[2] >= 1)
    entry[3] |= 1 << entry[0]


def _negative_weight(objs):
    """exp(EQKE) recorded as [-1, hi] at one entry: the op is still an enclosure,
    but an attention weight must not be allowed to be negative."""
    i = objs[-2]["inputs"]["EXP_EQKE"]
    lo = decode(objs[i]["lo"], "<f8")
    lo[0] = -1.0
    objs[i]["lo"] = encode(lo, "<f8")
    return objs


def _repoint(objs):
    objs[-2]["inputs"]["EVOU"] = objs[-2]["inputs"]["EU"]
    return objs


def _set_hints(value):
    def f(objs):
        objs[-2]["hints"] = value
        return objs
    return f


MUTANTS = {
    "claim+1": (lambda o: _claim(o, 1), 1, "but the line claims"),
    "header-claim+1": (lambda o: _claim(o, 1, rule=False), 1, "was not verified"),
    "forged-good-token": (_forge_good_token, 1, "claimed good"),
    "forged-all-max-flag": (_forge_c0_flag, 1, "claimed correct"),
    "token-ge-max": (_hint(_token_ge_max), 2, "tokens >= max"),
    "duplicate-hint": (_hint(lambda g: g.append(list(g[-1]))), 2, "duplicate"),
    "hint-q-above-m": (_hint(lambda g: g.append([1, 2, 1, 1])), 2, "out of range"),
    "hints-missing": (_set_hints(None), 2, "hints must be"),
    "hints-not-list": (_set_hints({"good": 5}), 2, "hints must be"),
    "negative-attention-weight": (_negative_weight, 1, "below 0"),
    "input-not-EVOU": (_repoint, 1, "is not EVOU"),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_refused(name, capsys):
    mutate, expected, needle = MUTANTS[name]
    objs = mutate(copy.deepcopy(_objs()))
    code, out, err = run(capsys, dump(objs))
    assert code == expected, f"exit {code}, expected {expected}; stderr: {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX[expected]), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert needle.lower() in lines[0].lower(), f"{needle!r} not in {lines[0]!r}"
    assert "VERIFIED" not in out


def test_work_limit_is_enforced(capsys):
    code, out, err = run(capsys, base(), "--max-work", "2000")
    assert code == 2 and "max-work" in err, err


def test_claim_of_the_rule_is_tight(capsys):
    """The rule proves exactly the claim (the generator predicts the checker's
    count), so one more is refused: the residue is not over-counted."""
    objs = _claim(_objs(), 1)
    code, _, err = run(capsys, dump(objs))
    assert code == 1 and f"proves {objs[-2]['claim'] - 1} correct" in err, err
    assert np.isfinite(objs[-2]["claim"])
