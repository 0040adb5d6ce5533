"""generator.ground_truth: exact counts, ties, and agreement with a plain per-sequence loop."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from checker.modelspec import Dims
from generator.ground_truth import count_correct, enumerate_sequences, main
from generator.model import MaxOfKTransformer, ModelWeights, logits_float64
from generator.modelfile import load_model

MODELS = Path(__file__).resolve().parent.parent / "generator" / "models"
MANIFEST = json.loads((MODELS / "models.json").read_text())


def loop_count(w: ModelWeights) -> tuple[int, int]:
    """(correct, ties) by the definition, one sequence at a time."""
    v, k = w.dims.d_vocab, w.dims.n_ctx
    correct = ties = 0
    for seq in itertools.product(range(v), repeat=k):
        logits = logits_float64(w, np.array([seq]))[0]
        m = max(seq)
        best_other = max(logits[j] for j in range(v) if j != m)
        correct += bool(logits[m] > best_other)
        ties += bool(logits[m] == best_other)
    return correct, ties


def vector_count(w: ModelWeights, tokens: np.ndarray) -> tuple[int, int]:
    """(correct, ties) over `tokens` with the straightforward float64 forward pass."""
    logits = logits_float64(w, tokens)
    rows = np.arange(len(tokens))
    tmax = tokens.max(axis=1)
    val = logits[rows, tmax].copy()
    logits[rows, tmax] = -np.inf
    other = logits.max(axis=1)
    return int((val > other).sum()), int((val == other).sum())


def random_weights(dims: Dims, seed: int, qk_scale: float = 1.0) -> ModelWeights:
    rng = np.random.default_rng(seed)
    w = MaxOfKTransformer(dims, torch.Generator().manual_seed(seed)).weights()
    biases = {b: rng.normal(size=getattr(w, b).shape) for b in ("b_Q", "b_K", "b_V", "b_O", "b_U")}
    return w.replace(W_Q=w.W_Q * qk_scale, W_K=w.W_K * qk_scale, **biases)


def attend_to_max(v: int, k: int, step: float) -> ModelWeights:
    """Hand-built: attention score step*t/sqrt(v) for key token t, the head copies the
    attended token into a subspace only the unembedding reads; no direct path.  The
    logit of token j is the attention mass on j."""
    d, h = 2 * v, v
    eye = np.eye(v)
    w_k = np.zeros((d, h))
    w_k[:v, 0] = step * np.arange(v)
    b_q = np.zeros(h)
    b_q[0] = 1.0  # constant query vector e_0
    return ModelWeights(
        dims=Dims(v, k, d, h), W_E=np.hstack([eye, np.zeros((v, v))]), W_pos=np.zeros((k, d)),
        W_Q=np.zeros((d, h)), W_K=w_k, W_V=np.vstack([eye, np.zeros((v, v))]),
        W_O=np.hstack([np.zeros((v, v)), eye]), b_Q=b_q, b_K=np.zeros(h), b_V=np.zeros(h),
        b_O=np.zeros(d), W_U=np.vstack([np.zeros((v, v)), eye]), b_U=np.zeros(v))


def direct_path(v: int, k: int, unembed: np.ndarray, seed: int = 0) -> ModelWeights:
    """Hand-built: token embedding = identity, W_V = 0, so logits = row q of `unembed`
    (the attention pattern, random here, cannot matter)."""
    w = random_weights(Dims(v, k, v, 3), seed)
    zero = {b: np.zeros_like(getattr(w, b)) for b in ("b_V", "b_O", "b_U")}
    return w.replace(W_E=np.eye(v), W_pos=np.zeros((k, v)), W_V=np.zeros((v, 3)),
                     W_U=unembed, **zero)


# --- hand-built models with known counts ------------------------------------------------------

def test_all_zero_model_is_all_ties():
    dims = Dims(5, 3, 4, 2)
    gt = count_correct(ModelWeights.zeros(dims))
    assert (gt.correct, gt.ties, gt.total) == (0, 125, 125)
    assert loop_count(ModelWeights.zeros(dims)) == (0, 125)


@pytest.mark.parametrize("v,k", [(5, 3), (8, 4), (3, 2)])
def test_attention_to_max_is_exactly_correct(v, k):
    w = attend_to_max(v, k, step=4.0 * np.sqrt(v))  # e^4 > k - 1 copies of anything smaller
    gt = count_correct(w)
    assert (gt.correct, gt.ties) == (v ** k, 0)


def test_huge_scores_take_the_per_sequence_path():
    # Scores 500 apart per token: with the common shift, every sequence of small
    # tokens underflows (exp(-3500) = 0) and must be recomputed per sequence.
    w = attend_to_max(8, 3, step=500.0 * np.sqrt(8))
    gt = count_correct(w)
    assert (gt.correct, gt.ties) == (512, 0)
    assert loop_count(w) == (512, 0)


def test_weak_attention_gets_some_wrong_as_the_loop_says():
    w = attend_to_max(5, 4, step=0.5 * np.sqrt(5))  # e^0.5 < 3: three 0s outvote one 1
    gt = count_correct(w)
    assert 0 < gt.correct < 625
    assert (gt.correct, gt.ties) == loop_count(w)


@pytest.mark.parametrize("v,k", [(6, 3), (4, 4)])
def test_copy_the_last_token(v, k):
    # Correct exactly when the last token is a maximum of the sequence.
    gt = count_correct(direct_path(v, k, 3.0 * np.eye(v)))
    assert gt.correct == sum((q + 1) ** (k - 1) for q in range(v))
    assert gt.ties == 0


@pytest.mark.parametrize("v,k", [(6, 3), (4, 4)])
def test_exact_ties_count_as_wrong(v, k):
    # Logits 1 on the last token q and on q+1 (mod v), 0 elsewhere: the true max ties
    # when it is q, or when it is q+1 (q < v-1); the latter telescopes to v^(k-1) - 1.
    unembed = np.eye(v) + np.roll(np.eye(v), 1, axis=1)
    gt = count_correct(direct_path(v, k, unembed))
    assert gt.correct == 0
    assert gt.ties == sum((q + 1) ** (k - 1) for q in range(v)) + v ** (k - 1) - 1
    assert gt.near_ties == gt.ties  # near_ties includes the exact ties
    assert (gt.correct, gt.ties) == loop_count(direct_path(v, k, unembed))


def test_bias_only_models():
    v, k = 5, 3
    zeros = ModelWeights.zeros(Dims(v, k, 2, 2))
    top_two = zeros.replace(b_U=np.r_[np.zeros(v - 2), 1.0, 1.0])
    gt = count_correct(top_two)
    assert (gt.correct, gt.ties) == (0, v ** k - (v - 2) ** k)
    top_one = zeros.replace(b_U=np.r_[np.zeros(v - 1), 1.0])
    gt = count_correct(top_one)
    assert (gt.correct, gt.ties) == (v ** k - (v - 1) ** k, 0)


# --- agreement with the plain loop ----------------------------------------------------------

def test_shipped_tiny_model_matches_loop():
    w = load_model(MODELS / "max3_v8_seed0.pt").weights
    gt = count_correct(w)
    assert gt.near_ties == 0
    assert (gt.correct, gt.ties) == loop_count(w)


def test_random_model_with_biases_matches_loop():
    w = random_weights(Dims(6, 4, 5, 3), seed=11)
    gt = count_correct(w, chunk_size=7)
    assert gt.near_ties == 0
    assert (gt.correct, gt.ties) == loop_count(w)


@settings(max_examples=30, deadline=None)
@given(v=st.integers(2, 7), k=st.integers(2, 4), d=st.integers(1, 5), h=st.integers(1, 5),
       seed=st.integers(0, 2 ** 16), qk_scale=st.sampled_from([0.0, 1.0, 30.0, 300.0]),
       chunk=st.sampled_from([1, 10, 100, 1 << 13]), workers=st.sampled_from([1, 2]))
def test_random_models_match_forward_pass(v, k, d, h, seed, qk_scale, chunk, workers):
    w = random_weights(Dims(v, k, d, h), seed, qk_scale)
    gt = count_correct(w, chunk_size=chunk, workers=workers)
    want = vector_count(w, enumerate_sequences(v, k))
    assert gt.total == v ** k
    if gt.near_ties == 0:  # otherwise the two evaluation orders may round differently
        assert (gt.correct, gt.ties) == want
    else:
        assert abs(gt.correct - want[0]) <= gt.near_ties


@pytest.mark.slow
def test_max_of_4_spot_check_against_forward_pass():
    w = load_model(MODELS / "max4_v64_seed0.pt").weights
    queries = [17, 63]
    gt = count_correct(w, query_tokens=queries)
    rest = enumerate_sequences(64, 3)
    tokens = np.concatenate([np.column_stack([rest, np.full(len(rest), q)]) for q in queries])
    assert gt.total == len(tokens) == 2 * 64 ** 3
    assert (gt.correct, gt.ties) == vector_count(w, tokens)


def test_chunking_and_threads_do_not_change_the_count():
    w = load_model(MODELS / "max5_v16_seed0.pt").weights
    counts = {(g.correct, g.ties, g.near_ties) for g in (
        count_correct(w, chunk_size=256, workers=1), count_correct(w, chunk_size=1 << 12),
        count_correct(w, chunk_size=1 << 20, workers=2))}
    assert len(counts) == 1


# --- shipped models: recorded counts reproduce ------------------------------------------------

def _entries(slow: bool):
    return [e for e in MANIFEST["models"] if (e["total"] > 10 ** 7) == slow]


@pytest.mark.parametrize("entry", _entries(slow=False), ids=lambda e: e["file"])
def test_recorded_counts_reproduce(entry):
    _check_entry(entry)


@pytest.mark.slow
@pytest.mark.parametrize("entry", _entries(slow=True), ids=lambda e: e["file"])
def test_recorded_counts_reproduce_large(entry):
    _check_entry(entry)


def _check_entry(entry):
    loaded = load_model(MODELS / entry["file"])
    assert loaded.file_sha256 == entry["sha256"]
    gt = count_correct(loaded.weights, progress=False)
    assert (gt.correct, gt.total, gt.ties) == (entry["correct"], entry["total"], entry["ties"])


# --- helpers and CLI ----------------------------------------------------------------------

def test_enumerate_sequences_is_lexicographic():
    allseq = enumerate_sequences(3, 4)
    assert allseq.tolist() == [list(s) for s in itertools.product(range(3), repeat=4)]
    assert enumerate_sequences(3, 4, 10, 20).tolist() == allseq[10:20].tolist()
    with pytest.raises(ValueError):
        enumerate_sequences(3, 4, 5, 100)


def test_query_tokens_validation():
    w = ModelWeights.zeros(Dims(4, 3, 2, 2))
    assert count_correct(w, query_tokens=[1, 1, 2]).total == 2 * 16
    for bad in ([], [4], [-1]):
        with pytest.raises(ValueError):
            count_correct(w, query_tokens=bad)


def test_cli_json(capsys):
    path = MODELS / "max3_v8_seed0.pt"
    assert main([str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    entry = next(e for e in MANIFEST["models"] if e["file"] == path.name)
    assert (out["correct"], out["total"], out["ties"]) == (entry["correct"], 512, entry["ties"])
    assert out["sha256"] == entry["sha256"]
    assert main([str(path)]) == 0
    assert f"{entry['correct']} / 512" in capsys.readouterr().out
