"""The induction demo (issue 21: a two-layer model on a task that needs two layers):
the sampler's labels, the shipped test set, and a short training run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from generator.tasks.induction import check_batch, dims_for, induction_batch, main

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "certs" / "datasets" / "induction_v16_n8_test.txt"
MODEL = ROOT / "generator" / "models" / "induction_v16_n8_2layers_seed0.pt"


@pytest.mark.parametrize("d_vocab, n_ctx", [(2, 3), (3, 5), (16, 8), (50, 12)])
def test_sampler_labels(d_vocab, n_ctx):
    tokens, answers = induction_batch(np.random.default_rng(d_vocab), 500, d_vocab, n_ctx)
    assert tokens.shape == (500, n_ctx) and tokens.min() >= 0 and tokens.max() < d_vocab
    check_batch(tokens, answers)
    # every admissible position of the earlier occurrence is drawn
    first = [list(t[:-1]).index(t[-1]) for t in tokens.tolist()]
    assert set(first) == set(range(n_ctx - 2))


def test_check_batch_catches_a_wrong_label():
    tokens, answers = induction_batch(np.random.default_rng(0), 20)
    with pytest.raises(AssertionError):
        check_batch(tokens, (answers + 1) % 16)


def test_shipped_test_set_is_the_induction_task():
    rows = [list(map(int, line.split())) for line in DATASET.read_text().splitlines()]
    assert len(rows) == 400
    tokens = np.array([r[:8] for r in rows])
    assert all(r[8] == 7 for r in rows)  # scored at the last position
    check_batch(tokens, np.array([r[9] for r in rows]))


def test_shipped_model_has_two_attention_only_layers():
    from generator.modelfile import load_model

    family = load_model(MODEL).weights.dims.family
    assert (family.n_layers, family.d_mlp, family.normalization) == (2, 0, None)


def test_short_training_run_writes_a_model_and_test_set(tmp_path, capsys):
    out, data = tmp_path / "ind.pt", tmp_path / "test.txt"
    assert main(["--n-layers", "2", "--steps", "20", "--batch", "16", "--test-inputs", "30",
                 "--d-model", "8", "--out", str(out), "--dataset-out", str(data)]) == 0
    saved = json.loads(capsys.readouterr().err.split("); ", 1)[1].splitlines()[0])
    assert saved["step"] == 20 and 0 <= saved["test_accuracy"] <= 1
    assert len(data.read_text().splitlines()) == 30
    assert dims_for(2).family.n_layers == 2
