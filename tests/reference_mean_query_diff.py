"""The reference implementation's subcubic bound with `mean_query+diff`
attention handling, re-implemented from its description (a test helper, not
part of the checker), and a crafted model on which its claimed bound is false.

The reference (Gross et al. 2024's code; ../shared/notes/reference-implementation.md,
"Subcubic variants") bounds, for each query q, max m and number c of non-max
tokens, the largest wrong-logit margin max_{o≠m} (ℓ_o − ℓ_m) of every sequence
of that class by

    result[q, m, c] = max_{o≠m} (L[o] + ā·R[o]) + (1 − ā)·W + G[q]
                      + (a_q − ā)·r* − (a_q − ā)·W,

where a_q is an extreme (the minimum when r* < W) of the attention paid to the
max token, ā = mean_q a_q, R[o] = EVOU[m, o] − EVOU[m, m], r* = max_{o≠m} R[o],
W = the largest row spread of EVOU over the non-max tokens, L the query-averaged
direct path plus the positional term, G[q] the direct path's per-query spread.
It counts a class correct when result < 0.

The step from the average query to query q is sound only when a_q ≥ ā:
(a_q − ā)·R[o] ≤ (a_q − ā)·r* needs a_q − ā ≥ 0.  When the query attends to the
max *less* than the average, (a_q − ā)·R[o] ≤ (a_q − ā)·min_{o≠m} R[o] is the
bound, and r* (the wrong extreme) underestimates the margin of an output o with a
very negative R[o] — exactly an output the direct path favours and the max
token's value suppresses.  `crafted_weights` builds such a model (d_vocab 3,
n_ctx 2); `python tests/reference_mean_query_diff.py` prints the claimed bound
beside the exact logits.

Everything here is float64 numpy on the float32 weights; the gap between the
claimed bound and the exact margin (≈ 3) dwarfs any rounding.
"""

from __future__ import annotations

import math

import numpy as np

from checker.modelspec import Dims
from generator.model import ModelWeights

FAVOURED = 4.0  # the direct path's preference for output 0 over the max token 2
SUPPRESSED = 10.0  # how strongly the max token's value suppresses output 0
WEAK, STRONG = 0.10, 0.85  # attention paid to the max by query 0, and by queries 1 and 2


# -- the reference computation ------------------------------------------------------
def reference_bound(w: ModelWeights, min_gap: int = 1, fixed: bool = False) -> np.ndarray:
    """result[q, m, c] of the reference's quadratic bound (tricks: EUPU
    `mean_query+max_diff`, attention `mean_query+diff`), NaN where undefined.
    fixed=True: the correction for a query below the average uses the other
    extreme, min_{o≠m} R[o] (sound).  Precondition: no biases."""
    for name in ("b_Q", "b_K", "b_V", "b_O", "b_U"):
        assert not np.any(getattr(w, name)), f"the reference formula assumes {name} = 0"
    f = {n: np.asarray(getattr(w, n), dtype=np.float64)
         for n in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U")}
    w_ep = f["W_E"] + f["W_pos"][-1]  # the query's embedding
    qk = w_ep @ f["W_Q"] @ f["W_K"].T
    eqke = qk @ (f["W_E"] + f["W_pos"].mean(0)).T  # (v, v), unscaled
    pos_err = qk @ (f["W_pos"] - f["W_pos"].mean(0)).T  # (v, k)
    ov = f["W_V"] @ f["W_O"] @ f["W_U"]
    extreme = extreme_right_attention(eqke, min_gap)
    attention = softmaxed_right_attention(extreme, pos_err, min_gap,
                                          math.sqrt(w.dims.d_head))
    return largest_wrong_logit(attention, w_ep, f["W_U"], f["W_E"] @ ov, f["W_pos"] @ ov,
                               min_gap, fixed)


def extreme_right_attention(eqke: np.ndarray, g: int) -> np.ndarray:
    """[0|1, q, m]: the min / max over key tokens t ≤ m − g of EQKE[q, m] − EQKE[q, t]
    (pre-softmax advantage of the max token); NaN if q < m but m − q < g, 0 if m < g."""
    v = eqke.shape[0]
    out = np.zeros((2, v, v))
    for q in range(v):
        for m in range(v):
            if m != q and m - q < g:
                out[:, q, m] = np.nan
            elif m >= g:
                keys = eqke[q, :m - g + 1]
                out[:, q, m] = eqke[q, m] - keys.max(), eqke[q, m] - keys.min()
    return out


def softmaxed_right_attention(extreme, pos_err, g: int, attn_scale: float) -> np.ndarray:
    """[0|1, q, m, c]: bounds of the post-softmax attention paid to the max token's
    copies (n_ctx − c of them, the query among them when q = m), the max's copies put
    in the positions of lowest (0) / highest (1) positional score."""
    _, v, _ = extreme.shape
    k = pos_err.shape[1]
    rel = pos_err - pos_err[:, -1:]  # relative to the query position
    rel = np.sort(rel[:, :-1], axis=1)
    out = np.full((2, v, v, k), np.nan)
    for q in range(v):
        for m in range(q, v):
            for c in range(k):
                if (c == 0 and m != q) or (m < g and c != 0) or (m != q and m - q < g):
                    continue
                tmp = np.zeros((2, k))
                tmp[0, :-1], tmp[1, :-1] = rel[q], rel[q][::-1]
                n_max = k - c
                at = list(range(n_max)) if m != q else list(range(n_max - 1)) + [k - 1]
                tmp[:, at] += extreme[:, q, m][:, None]
                tmp = np.exp(tmp / attn_scale - (tmp / attn_scale).max(1, keepdims=True))
                tmp /= tmp.sum(1, keepdims=True)
                out[:, q, m, c] = tmp[:, at].sum(1)
    return out


def largest_wrong_logit(attention, w_ep, w_u, evou, pvou, g: int,
                        fixed: bool = False) -> np.ndarray:
    """result[q, m, c]: the reference's claimed upper bound of max_{o≠m} ℓ_o − ℓ_m over
    every sequence with query q, max m, c tokens ≠ m (the query counted when q ≠ m)
    and every other token ≤ m − g."""
    _, v, _, k = attention.shape
    results = np.full((v, v, k), np.nan)
    spread = evou.max(1) - evou.min(1)  # per token t: max_o − min_o EVOU[t, o]
    mean_ep = w_ep.mean(0)  # EUPU `mean_query+max_diff`: the mean query, exactly ...
    eu_mean = mean_ep @ w_u
    eu_gap = np.abs(w_ep - mean_ep) @ (w_u.max(1) - w_u.min(1))  # ... and a per-query spread
    evou_c = evou - np.diag(evou)[:, None]
    for m in range(v):
        pvou_m = (pvou - pvou[:, m:m + 1]).max(0)  # any position may take all attention
        only_max = w_ep[m] @ w_u + evou_c[m] + pvou_m
        only_max = only_max - only_max[m]
        only_max[m] = -np.inf
        results[m, m, 0] = only_max.max()
        logits = eu_mean - eu_mean[m] + pvou_m
        right = evou_c[m]
        right_max = np.delete(right, m).max()  # r*
        right_min = np.delete(right, m).min()  # the extreme a query below ā needs
        for c in range(1, k):
            if m < g:
                continue
            wrong = spread[:m - g + 1].max()  # W
            extreme = 0 if right_max < wrong else 1
            column = attention[extreme, :, m, c]
            average = np.nanmean(column)  # `mean_query+diff`: ā
            cur = logits + average * right
            cur[m] = -np.inf
            average_wrong = cur.max() + (1 - average) * wrong
            for q in range(m + 1):
                if m != q and m - q < g:
                    continue
                extra = column[q] - average  # a_q − ā, of either sign
                right_extreme = right_min if fixed and extra < 0 else right_max
                results[q, m, c] = (average_wrong + eu_gap[q] + extra * right_extreme
                                    - extra * wrong)
    return results


# -- the counterexample -------------------------------------------------------------
def crafted_weights() -> ModelWeights:
    """d_vocab 3, n_ctx 2, d_model = d_head = 4, no positional embedding, no biases.
    Residual coordinates: 0 "is the max token 2" (the key; the value), 1 the query's
    attention strength s_q, 2 a constant (the direct path), 3 the head's output.
      EQKE[q, t] = s_q·[t = 2]          (so query q attends σ(s_q) to a 2 beside a 0/1)
      EU[q, :]   = (FAVOURED, 0, 0)     (the direct path prefers output 0 over 2)
      EVOU[2, :] = (−SUPPRESSED, −1, 0) (the max's value suppresses 0 strongly),
      EVOU[t, :] = 0 for t < 2.
    Query 0 attends WEAK to the max; queries 1 and 2 STRONG."""
    v, k, d = 3, 2, 4
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    strength = [logit(WEAK), logit(STRONG), logit(STRONG)]
    w_e = np.zeros((v, d))
    w_e[2, 0] = 1.0
    w_e[:, 1] = strength
    w_e[:, 2] = 1.0
    w_q, w_k, w_v, w_o, w_u = (np.zeros(s) for s in ((d, d), (d, d), (d, d), (d, d), (d, v)))
    w_q[1, 0] = math.sqrt(d)  # cancels the 1/sqrt(d_head) of the attention scores
    w_k[0, 0] = 1.0
    w_v[0, 0] = 1.0
    w_o[0, 3] = 1.0
    w_u[2] = (FAVOURED, 0.0, 0.0)
    w_u[3] = (-SUPPRESSED, -1.0, 0.0)
    zeros = np.zeros
    return ModelWeights(Dims(v, k, d, d), W_E=w_e, W_pos=zeros((k, d)), W_Q=w_q, W_K=w_k,
                        W_V=w_v, W_O=w_o, b_Q=zeros(d), b_K=zeros(d), b_V=zeros(d),
                        b_O=zeros(d), W_U=w_u, b_U=zeros(v))


def forward_logits(w: ModelWeights, tokens) -> np.ndarray:
    """The model's logits at the last position, straight from the weights (float64):
    embeddings, one attention head (scores / sqrt(d_head), softmax), unembedding —
    independent of the EQKE/EVOU decomposition."""
    f = {n: np.asarray(getattr(w, n), dtype=np.float64) for n in ModelWeights.names()}
    x = f["W_E"][list(tokens)] + f["W_pos"][:len(tokens)]
    query = x[-1] @ f["W_Q"] + f["b_Q"]
    keys = x @ f["W_K"] + f["b_K"]
    scores = keys @ query / math.sqrt(w.dims.d_head)
    attn = np.exp(scores - scores.max())
    attn /= attn.sum()
    out = (attn @ (x @ f["W_V"] + f["b_V"])) @ f["W_O"] + f["b_O"]
    return (x[-1] + out) @ f["W_U"] + f["b_U"]


def sequence_class(tokens) -> tuple[int, int, int]:
    """(q, m, c): query, max, number of tokens ≠ m (the reference's class)."""
    m = max(tokens)
    return tokens[-1], m, sum(1 for t in tokens if t != m)


def main() -> None:
    w = crafted_weights()
    result = reference_bound(w)
    tokens = (2, 0)
    q, m, c = sequence_class(tokens)
    logits = forward_logits(w, tokens)
    margin = max(logits[o] - logits[m] for o in range(w.dims.d_vocab) if o != m)
    print(f"sequence {tokens}: query {q}, max {m}, {c} non-max token(s)")
    print(f"  reference mean_query+diff bound: max_o ℓ_o − ℓ_m <= {result[q, m, c]:+.4f} "
          f"(< 0: the reference counts the class correct)")
    print(f"  exact forward pass: logits {np.round(logits, 4)}, max_o ℓ_o − ℓ_m = {margin:+.4f}"
          f" (the model outputs {int(np.argmax(logits))}, not {m})")


if __name__ == "__main__":
    main()
