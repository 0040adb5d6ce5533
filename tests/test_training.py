"""generator.train and generator.model: determinism and forward-pass agreement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from checker.modelspec import Dims
from generator.ground_truth import enumerate_sequences
from generator.model import MaxOfKTransformer, ModelWeights, logits_float64
from generator.modelfile import load_model
from generator.train import TrainConfig, main, train, train_with_stats

TINY = TrainConfig(d_vocab=6, n_ctx=3, d_model=8, d_head=4, steps=40, batch=32, seed=7)


def test_same_seed_same_weights_bitwise():
    a, b = train(TINY, progress=False).weights(), train(TINY, progress=False).weights()
    assert a.equals(b)


def test_different_seed_different_weights():
    a = train(TINY, progress=False).weights()
    c = train(TrainConfig(**{**TINY.__dict__, "seed": 8}), progress=False).weights()
    assert not np.array_equal(a.W_E, c.W_E)


def test_training_changes_weights_keeps_biases_zero_and_restores_torch_state():
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    init = MaxOfKTransformer(TINY.dims, torch.Generator().manual_seed(TINY.seed)).weights()
    trained = train(TINY, progress=False).weights()
    assert not np.array_equal(init.W_Q, trained.W_Q)
    for b in ("b_Q", "b_K", "b_V", "b_O", "b_U"):
        assert not getattr(trained, b).any(), b
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == det


def test_training_learns_a_small_task():
    cfg = TrainConfig(d_vocab=5, n_ctx=2, d_model=8, d_head=8, steps=1000, batch=64)
    result = train_with_stats(cfg, progress=False)
    assert result.final_batch_accuracy > 0.9
    assert result.final_loss < 0.5


def random_weights(dims: Dims, seed: int) -> ModelWeights:
    """Random weights including non-zero biases (the trained models have zero biases)."""
    rng = np.random.default_rng(seed)
    w = MaxOfKTransformer(dims, torch.Generator().manual_seed(seed)).weights()
    return w.replace(**{b: rng.normal(size=getattr(w, b).shape)
                        for b in ("b_Q", "b_K", "b_V", "b_O", "b_U")})


@pytest.mark.parametrize("dims", [Dims(6, 3, 8, 4), Dims(5, 4, 3, 7), Dims(64, 4, 32, 32)])
def test_torch_forward_matches_float64_reference(dims):
    w = random_weights(dims, seed=dims.d_vocab)
    rng = np.random.default_rng(0)
    tokens = np.concatenate([enumerate_sequences(dims.d_vocab, dims.n_ctx, 0, 50),
                             rng.integers(0, dims.d_vocab, size=(1000, dims.n_ctx))])
    ref = logits_float64(w, tokens)
    model = MaxOfKTransformer.from_weights(w)
    with torch.no_grad():
        got32 = model(torch.from_numpy(tokens)).numpy()
        got64 = model.double()(torch.from_numpy(tokens)).numpy()
    scale = np.abs(ref).max()
    assert np.abs(got32 - ref).max() <= 1e-5 * scale  # float32 rounding only
    assert np.abs(got64 - ref).max() <= 1e-12 * scale  # same maths, different order


def test_forward_is_causal_last_position_of_full_attention():
    # The last position attends to every position: permuting earlier positions'
    # *tokens* changes the output only through positional embeddings.  With zero
    # W_pos the output is invariant under permutations of the sequence.
    w = random_weights(Dims(7, 4, 6, 5), seed=1).replace(W_pos=np.zeros((4, 6)))
    t = np.array([[1, 5, 2, 3]])
    assert np.allclose(logits_float64(w, t), logits_float64(w, np.array([[5, 2, 1, 3]])))


def test_weights_roundtrip_through_module():
    w = random_weights(Dims(6, 3, 8, 4), seed=2)
    assert MaxOfKTransformer.from_weights(w).weights().equals(w)


def test_logits_float64_rejects_bad_tokens():
    w = ModelWeights.zeros(Dims(4, 3, 2, 2))
    with pytest.raises(ValueError):
        logits_float64(w, np.array([[0, 1, 4]]))
    with pytest.raises(ValueError):
        logits_float64(w, np.array([[0, 1]]))


def test_cli_trains_saves_and_reports(tmp_path, capsys):
    out = tmp_path / "tiny.pt"
    argv = ["--out", str(out), "--d-vocab", "5", "--n-ctx", "3", "--d-model", "4",
            "--d-head", "4", "--steps", "20", "--batch", "16", "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "exact accuracy:" in text and "/ 125" in text
    first = out.read_bytes()
    assert load_model(out).weights.dims == Dims(5, 3, 4, 4)
    assert main(argv) == 0  # re-running gives the identical file
    assert out.read_bytes() == first


@pytest.mark.parametrize("argv", [["--out", "x.txt"], ["--out", "x.pt", "--n-ctx", "1"],
                                  ["--out", "x.pt", "--steps", "0"], ["--d-vocab", "8"]])
def test_cli_rejects_bad_arguments(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert not (tmp_path / "x.pt").exists()
