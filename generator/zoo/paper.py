"""The paper's published numbers (Gross et al. 2024), one source of truth.

Table 1 (§3, over 151 Max-of-4 models, d_vocab 64, d_model 32): bound is the
normalized accuracy bound b / s̄ (certified bound over true accuracy) as
mean ± sd; FLOPs and unexplained dimensions are rounded by the paper to the
nearest power of two and stored here as that exponent.  §3.1 gives the EQKE
singular values used for Figure 4's comparison range.
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER = "Gross et al. 2024, Compact Proofs of Model Performance via Mechanistic Interpretability"
PAPER_MODELS = 151  # models behind every mean ± sd of Table 1


@dataclass(frozen=True)
class PaperRow:
    """One row of the paper's Table 1."""

    label: str  # the paper's description of the proof
    complexity: str  # the paper's asymptotic cost (k = n_ctx, d = d_model, v = d_vocab)
    bound_mean: float  # normalized accuracy bound b / s̄
    bound_sd: float
    log2_flops: int  # est. FLOPs ≈ 2 ** log2_flops
    log2_unexplained: int  # unexplained dimensions ≈ 2 ** log2_unexplained
    subcubic: bool  # uses the rank-1 EQKE interpretation (Figure 4's strategies)


TABLE1: tuple[PaperRow, ...] = (
    PaperRow("Brute force", "O(v^(k+1) k d)", 0.9992, 0.0015, 40, 30, False),
    PaperRow("Cubic", "O(v^3 k^2)", 0.9845, 0.0041, 25, 14, False),
    PaperRow("Sub-cubic", "O(v^2 k^2 + v^2 d)", 0.832, 0.011, 21, 13, True),
    PaperRow("Sub-cubic without mean+diff", "O(v^2 k^2 + v^2 d)", 0.758, 0.039, 21, 13, True),
    PaperRow("Low-rank QK", "O(v^2 k^2 + v d^2 + v^2 d) (EU & OV)", 0.797, 0.013, 22, 12,
             True),
    PaperRow("Low-rank QK, SVD only", "O(v^2 k^2 + v d^2 + v^2 d) (EU & OV)", 0.643, 0.044,
             22, 12, True),
    PaperRow("Low-rank EU", "O(v^2 k^2 + v d^2 + v^2 d) (QK & OV)", 0.662, 0.061, 21, 13,
             True),
    PaperRow("Low-rank EU, SVD only", "O(v^2 k^2 + v d^2 + v^2 d) (QK & OV)", 3.38e-6, 0.06e-6,
             21, 13, True),
    PaperRow("Low-rank QK&EU", "O(v^2 k^2 + v d^2 + v^2 d) (OV)", 0.627, 0.060, 22, 13, True),
    PaperRow("Low-rank QK&EU, SVD only", "O(v^2 k^2 + v d^2 + v^2 d) (OV)", 3.38e-6, 0.06e-6,
             22, 13, True),
)

# §3.1: EQKE's largest singular value is 7800 ± 380, "around 620 ± 130 times
# larger" than the second (13 ± 3).  The ratio is scale-free, so it compares
# directly with ours (whose EQKE carries the 1/sqrt(d_head) factor).
EQKE_SIGMA_RATIO_MEAN = 620.0
EQKE_SIGMA_RATIO_SD = 130.0
