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


@pytest.mark.parametrize("flags", [
    ["--n-layers", "2", "--normalization", "RMS", "--gated-mlp", "--act-fn", "silu"],
    ["--normalization", "LN", "--act-fn", "gelu", "--heads", "2"],
])
def test_train_task_trains_any_family_and_gen_cert_certifies_it(tmp_path, flags):
    """train-task (issue 21: --n-layers, --act-fn, --normalization, --gated-mlp): the model
    file records the family, and gen-cert's certificate of the task checks with its claim."""
    from checker.cli import main as check_cert
    from generator.cli import main as gen_cert
    from generator.modelfile import load_model
    from generator.tasks.train_task import main as train_task

    out, cert = tmp_path / "m.pt", tmp_path / "c.jsonl"
    assert train_task(["--task", "cyclic:n=3", "--n-ctx", "4", "--d-model", "8", "--d-mlp", "8",
                       "--steps", "30", "--out", str(out), *flags]) == 0
    family = load_model(out).weights.dims.family
    assert family.n_layers == int(flags[flags.index("--n-layers") + 1]
                                  if "--n-layers" in flags else 1)
    assert family.normalization == flags[flags.index("--normalization") + 1]
    assert gen_cert([str(out), "--task", "cyclic:n=3", "-o", str(cert), "-q"]) == 0
    assert check_cert([str(cert), "--model", str(out)]) == 0


def test_train_task_refuses_a_gate_without_an_mlp(capsys):
    from generator.tasks.train_task import main as train_task

    with pytest.raises(SystemExit):
        train_task(["--task", "parity", "--n-ctx", "4", "--d-mlp", "0", "--gated-mlp",
                    "--out", "x.pt"])
    assert "needs an MLP" in capsys.readouterr().err
