"""The float32 error of a real certificate's distance-to-float32 note (spec/rules.md
§distance to float32; issue 24), for the attention-only Max-of-K rules (brute_force, cubic,
cubic_mix, exact, subcubic_gap).

Under the float32 semantics these rules prove their sequences from EU widened by Lemma G's
δ (theorem.md §2c): output o's margin ℓ_m − ℓ_o must exceed δ[q][o] + δ[q][m].  For a real
certificate the note prints, at the place of the smallest certified margin (query q, max m),
that number: for one output o, or, where the rule's bound covers every o ≠ m at once, its
largest over o ≠ m.  Every binary32 execution then has ℓ̃_m − ℓ̃_o ≥ margin − it there.

A note decides nothing and charges no work: δ's row q is computed from the certificate's
weight lines (certificate.py hands them as `note_weights`, a function returning them or None;
they are not inputs of the real line), after the rule has decided.  Any failure is named in
the note.
"""

from __future__ import annotations


def delta_text(dims, note_weights, q: int, m: int, o: int | None = None,
               int_matmul=None) -> str:
    """'float32 error Y (…)' with Y = δ[q][o] + δ[q][m] (o None: the largest over o ≠ m), δ
    row q of float32.attention_only_deltas (bit for bit: attention_only_delta_rows at the
    last position); or 'float32 error unavailable (why)'."""
    weights = note_weights() if note_weights is not None else None
    if weights is None:
        return ("float32 error unavailable (a weight line is absent or has width: Lemma G "
                "reads exact weights)")
    try:
        from .. import float32  # Lemma G (a real certificate's note only)

        k = dims.n_ctx
        row = float32.attention_only_delta_rows(dims, weights, q, [k - 1], int_matmul)[k - 1]
    except Exception as exc:  # a note never fails a check (spec/rules.md)
        return f"float32 error unavailable ({type(exc).__name__}: {str(exc)[:120]})"
    if o is None:
        worst = max(x for out, x in enumerate(row) if out != m)
        return (f"float32 error {float(worst + row[m]):.3g} (δ[q][m] + max_(o≠m) δ[q][o], "
                "Lemma G: every float32 execution has ℓ̃_m − ℓ̃_o ≥ the margin minus it there)")
    return (f"float32 error {float(row[o] + row[m]):.3g} (δ[q][o] + δ[q][m] at o = {o}, Lemma G: "
            "the float32 variant needs the margin above it)")
