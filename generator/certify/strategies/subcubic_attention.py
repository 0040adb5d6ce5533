"""Low-rank EQKE for strategy subcubic: the hints and a float mirror of the
checker's checker/rules/subcubic_attention.py (spec/rules.md §low-rank EQKE).

The SVD is computed here, in float64, from the factors Q = QUERY_TOK and
K = KEY_TOK (EQKE = Q·K^T) without forming EQKE: thin QR of both factors, SVD
of the h × h core R_q R_k^T = W S Z^T.  Rank r:  A = R_q⁺ W_r S_r,
B = R_k⁺ Z_r (so (QA)(KB)^T is EQKE's best rank-r part), and the balanced
factorisation of the rest: G = R_q⁺ W_{>r} S_{>r}^½, H = R_k⁺ Z_{>r} S_{>r}^½,
centre c = the mean row of KH.  None of it is trusted: the checker confirms
the identity's remainder D = I − AB^T − GH^T and bounds it.
"""

from __future__ import annotations

import base64

import numpy as np

INPUTS = ["QUERY_TOK", "KEY_TOK"]
RANKS = {"rank1": 1, "rank2": 2, "rank4": 4}
SAFETY = 1 + 1e-9  # widths enlarged so that the checker's rigorous ones are no larger


def b64(arr) -> str:
    return base64.b64encode(np.ascontiguousarray(arr, dtype="<f8").tobytes()).decode("ascii")


def factor_hints(q_tok, k_tok, rank: int, error: str) -> dict:
    """The float hint matrices {"A", "B"[, "G", "H", "c"]} for EQKE = Q·K^T."""
    h = q_tok.shape[1]
    uq, rq = np.linalg.qr(q_tok)  # Q = U_q R_q  (R_q: min(v, h) × h)
    uk, rk = np.linalg.qr(k_tok)
    w, s, zt = np.linalg.svd(rq @ rk.T)
    rq_inv, rk_inv = np.linalg.pinv(rq), np.linalg.pinv(rk)
    n = len(s)
    r = min(rank, n)
    a = np.zeros((h, rank))
    b = np.zeros((h, rank))
    a[:, :r] = rq_inv @ (w[:, :r] * s[:r])
    b[:, :r] = rk_inv @ zt[:r].T
    mats = {"A": a, "B": b}
    if error != "exact":
        root = np.sqrt(s[r:])
        g = np.zeros((h, h))
        hh = np.zeros((h, h))
        g[:, :n - r] = rq_inv @ (w[:, r:] * root)
        hh[:, :n - r] = rk_inv @ (zt[r:].T * root)
        mats.update(G=g, H=hh)
        if error == "cs":
            mats["c"] = (k_tok @ hh).mean(axis=0)[None, :]
    return mats


def hints(mats: dict, rank: int, error: str) -> dict:
    return {"rank": rank, "error": error, **{n: b64(m) for n, m in mats.items()}}


def enclosure(q_tok, k_tok, mats: dict, error: str):
    """(lo, hi) of the checker's per-query-shifted EQKE enclosure, in float64
    (mirror of subcubic_attention.enclosure; widths enlarged by SAFETY)."""
    low = (q_tok @ mats["A"]) @ (k_tok @ mats["B"]).T
    if error == "exact":
        x = q_tok - (q_tok @ mats["A"]) @ mats["B"].T
        mid = low + x @ k_tok.T
        return mid, mid
    h = q_tok.shape[1]
    d = np.eye(h) - mats["A"] @ mats["B"].T - mats["G"] @ mats["H"].T
    n_norm = np.linalg.norm(q_tok, axis=1) * np.linalg.norm(d)
    k_norm = np.linalg.norm(k_tok, axis=1)
    qg, kh = q_tok @ mats["G"], k_tok @ mats["H"]
    if error == "cs":
        x_norm = np.linalg.norm(qg, axis=1)
        y_norm = np.linalg.norm(kh - mats["c"], axis=1)
        width = (np.outer(x_norm, y_norm) + np.outer(n_norm, k_norm)) * SAFETY
        return low - width, low + width
    ranges = kh.max(axis=0) - kh.min(axis=0)  # range of row j of (KH)^T
    if error == "svd":  # √2·σ₁ through the Gram matrices' ∞-norms, one δ for all rows
        norms = [np.abs(x.T @ x).sum(axis=1).max() for x in (qg, kh)]
        delta = np.full(len(qg), np.sqrt(2 * norms[0] * norms[1]))
    elif error == "mean+rowdiff":  # Thm 24 with the column means of QG
        mean = qg.mean(axis=0)
        delta = np.ptp(mean @ kh.T) + np.abs(qg - mean) @ ranges
    else:  # Thm 21
        delta = np.abs(qg) @ ranges
    width = np.outer(n_norm, k_norm) * SAFETY
    return low - width, low + delta[:, None] * SAFETY + width
