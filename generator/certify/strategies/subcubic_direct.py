"""Low-rank direct path for strategy subcubic: the "eu" hints and the tables
U, ĒU, N that checker/rules/subcubic_direct.py will compute from EU's factors
(mirrored function by function in float64 on the enclosures' midpoints).

A handler is (basis, rank, mean):
  basis "std": T = T' = I (the paper's direct-quadratic: Lemma 20 / Thm 24 on
        E_q·W_U in the model's own basis); "svd": T maps Xc onto the left
        singular vectors of Xc·W_U (scaled), T' = T⁻¹, so that the rank-r part
        is EU's best rank-r approximation and the residual's Lemma 20 bound
        runs over the remaining singular directions;
  rank  r: the part multiplied out (v²·r);
  mean  summarise X by its column means (Thm 24) or not.
Any basis is sound (the checker bounds the error of T·T' ≠ I); the choice only
changes tightness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from checker.numbers import encode_floats

INPUTS = ["EU_LEFT", "W_U", "b_U"]
RANK_TOL = 1e-9  # singular values of Xc below this (relative) count as 0


@dataclass(frozen=True)
class Handler:
    basis: str  # "std" | "svd"
    rank: int
    mean: bool


# The direct-path handling axis of the option grid (Options.eu); "full" = EU itself.
HANDLERS = {
    "quad": Handler("std", 0, False),  # paper: direct-quadratic, "max_diff" (Thm 21)
    "quad_mean": Handler("std", 0, True),  # paper: "mean_query+max_diff" (Thm 24)
    "svd_query": Handler("svd", 1, False),  # paper: "svd_query+max_diff" (rank 1)
    "lowrank0": Handler("svd", 0, True),  # Thm 24 in EU's singular basis: O(v·d²)
    "lowrank1": Handler("svd", 1, True),
    "lowrank2": Handler("svd", 2, True),
    "lowrank4": Handler("svd", 4, True),
}


def basis(handler: Handler, xc: np.ndarray, w_u: np.ndarray):
    """(T, T') as float64 arrays (d × d)."""
    d = xc.shape[1]
    if handler.basis == "std":
        return np.eye(d), np.eye(d)
    _, s_x, vt_x = np.linalg.svd(xc, full_matrices=True)  # vt_x: (d, d)
    rank = int((s_x > RANK_TOL * s_x[0]).sum()) if len(s_x) and s_x[0] > 0 else 0
    left, sing, _ = np.linalg.svd(xc @ w_u, full_matrices=False)
    # columns 0..rank−1: Xc·T = U Σ (EU's singular directions, in Xc's row space);
    # the rest: Xc's null space (Xc·T = 0 there), so that T is invertible
    t_range = np.linalg.pinv(xc, rcond=RANK_TOL) @ (left[:, :rank] * sing[:rank])
    t = np.hstack([t_range, vt_x[rank:].T])
    return t, np.linalg.inv(t)


def hints(handler: Handler, x, w_u, b_u):
    """The "eu" hints and the mirrored tables (u, mean, n) in float64.
    x = EU_LEFT (v × d), w_u (d × v), b_u (v,) midpoints."""
    if handler.mean:
        h = x.mean(axis=0)
        xc, s = x - h, h @ w_u + b_u
    else:
        xc, s = x, b_u.copy()
    t, t_inv = basis(handler, xc, w_u)
    t, t_inv = _representable(t), _representable(t_inv)
    f, g = xc @ t, t_inv @ w_u
    e = np.eye(len(t)) - t @ t_inv
    w_range = w_u.max(axis=1) - w_u.min(axis=1)
    rest = np.abs(xc) @ (np.abs(e) @ w_range)  # err: Lemma 22
    r = handler.rank
    g_range = g[r:].max(axis=1) - g[r:].min(axis=1)
    rest = rest + np.abs(f[:, r:]) @ g_range  # res: Lemma 20
    p = f[:, :r] @ g[:r]  # (v, v)
    u = row_gaps(s[None, :] + p) + rest[:, None]
    n = row_gaps(p) + rest[:, None] if r > 0 else np.repeat(rest[:, None], len(s), axis=1)
    spec = {"rank": r, "mean": handler.mean, "basis": encode_floats(t.ravel().tolist(), "f64"),
            "inverse": encode_floats(t_inv.ravel().tolist(), "f64")}
    return spec, (u, s, n)


def row_gaps(mat, lower=None):
    """out[r, m] = max_{o≠m} mat[r, o] − lower[r, m] (rows of length ≥ 2; lower = mat
    unless given): the same one-sided gaps as the checker's (checker/rules/rowdiff.py)."""
    srt = np.sort(mat, axis=1)
    best = np.repeat(srt[:, -1:], mat.shape[1], axis=1)
    best[np.arange(mat.shape[0]), mat.argmax(axis=1)] = srt[:, -2]
    return best - (mat if lower is None else lower)


def _representable(m: np.ndarray) -> np.ndarray:
    """Entries the checker accepts (subcubic_direct.MAX_BASIS_EXPONENT): tiny
    ones become 0 (any basis is sound)."""
    m = np.where(np.abs(m) < 2.0 ** -60, 0.0, m)
    return m.astype(np.float64)
