"""A planted near-tie: a tiny attention-only Max-of-2 model whose real-valued and float32
evaluations disagree on a known sequence (spec/theorem.md §2c; issue 24).

d_vocab 2, n_ctx 2, d_model 3, d_head 1; attention is null (W_Q = W_K = W_V = W_O = 0,
so the logits are those of the last token q), W_pos = 0, W_U's column 0 is (1, 1, 1), its
column 1 zero, b_U = (0, 1/2):

  q = 1: E[1] = 0, so ℓ = (0, 1/2): output 1, correct for (0, 1) and (1, 1), robustly.
  q = 0: E[0] = (2^24, 1, −2^24), so over the reals ℓ_0 = 2^24 + 1 − 2^24 = 1 > ℓ_1 = 1/2:
         output 0, correct for (0, 0) (and wrong for (1, 0), whose max is 1).

In float32 the sum 2^24 + 1 + (−2^24) depends on the order: left to right
fl(fl(2^24 + 1) − 2^24) = 0 (2^24 + 1 rounds to 2^24), right to left 1.  So a float32
evaluation in the natural order outputs 1 on (0, 0): wrong.  The real theorem counts 3
sequences, the float32 theorem 2.

    python -m generator.planted OUT.pt     # write the model file
"""

from __future__ import annotations

import sys

import numpy as np

from checker.modelspec import Dims

from .model import ModelWeights

NEAR_TIE = (0, 0)  # real-correct, float32-wrong in the natural summation order
BIG = np.float32(2.0 ** 24)


def near_tie_weights() -> ModelWeights:
    dims = Dims(2, 2, 3, 1)
    z = np.zeros
    w_e = np.array([[BIG, 1.0, -BIG], [0.0, 0.0, 0.0]], dtype=np.float32)
    w_u = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], dtype=np.float32)
    return ModelWeights(dims=dims, W_E=w_e, W_pos=z((2, 3)), W_Q=z((3, 1)), W_K=z((3, 1)),
                        W_V=z((3, 1)), W_O=z((1, 3)), b_Q=z(1), b_K=z(1), b_V=z(1), b_O=z(3),
                        W_U=w_u, b_U=np.array([0.0, 0.5], dtype=np.float32))


def main(argv: list[str] | None = None) -> int:
    from .modelfile import save_model

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m generator.planted OUT.pt", file=sys.stderr)
        return 2
    save_model(argv[0], near_tie_weights(), {"planted": "near-tie, spec/theorem.md §2c"})
    print(f"wrote {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
