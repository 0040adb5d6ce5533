"""Rule brute_force: decide every sequence with interval arithmetic.

Theorem (spec/rules.md §brute_force).  For a sequence t with query token
q = t[k-1] and max m, and any output o != m, the real-valued model has

    ℓ_o − ℓ_m = Σ_i w_i x_i(o) / Σ_i w_i,   w_i = exp(EQKE[q, t_i])·exp(EQKP[q, i]) > 0,
    x_i(o) = (EU[q,o] − EU[q,m]) + (EVOU[t_i,o] − EVOU[t_i,m]) + (PVOU[i,o] − PVOU[i,m]),

so ℓ_o < ℓ_m iff Σ_i w_i x_i(o) < 0.  A sequence is certified correct when the
interval enclosure of Σ_i w_i x_i(o) lies below 0 for every o != m; the rule
proves the number of certified sequences.  A tie (or an enclosure straddling
0) is never counted.  Cost: v^k·(k + (v−1)(6k+1)) interval operations (v = d_vocab,
k = n_ctx), counted exactly (`work`).  Inputs EXP_EQKE and EXP_EQKP are
exp(EQKE), exp(EQKP) (op `exp`, rigorous), so w_i is one product.
"""

from __future__ import annotations

import itertools

from ..arith import MPMATH
from ..rules import ATTN_ONLY_WEIGHTS

INPUTS = ("EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU")
ARITHMETICS = ("mpmath", "arb")  # back-ends this rule is written against (checker/arith)
SEMANTICS = ("real", "float32")  # float32: margins beyond δ_o + δ_m (Lemma G, theorem.md §2c)
# under float32 the rule also reads the weights, for δ
FLOAT32_INPUTS = ATTN_ONLY_WEIGHTS
NOTE_WEIGHTS = True  # a real check's note gets them too, for δ (certificate.py: note_weights)


def check(dims, m, hints, charge, jobs=1, arith=MPMATH, semantics="real", note_weights=None):
    if hints is not None:
        from ..errors import Malformed

        raise Malformed("rule brute_force takes no hints")
    v, k = dims.d_vocab, dims.n_ctx
    exp_eqke, exp_eqkp, evou, pvou, eu = (m[name] for name in INPUTS)
    eu_o, eu_m, note = eu, eu, ""
    if semantics == "float32":
        eu_o, eu_m, note = _float32_eu(dims, m, eu, charge, arith)
    expected = work(v, k)
    charge(expected)
    certified = performed = 0
    smallest = None  # (the binary64 selection estimate, the sequence): the note's
    tables = _float_tables(arith, m, eu) if semantics == "real" else None
    for tokens in itertools.product(range(v), repeat=k):
        charge(0)  # the time limit: one sequence costs up to ~7v² operations (k = 1)
        q, top = tokens[-1], max(tokens)
        w = [exp_eqke[q][t] * exp_eqkp[q][i] for i, t in enumerate(tokens)]
        # every margin is computed (no early exit), so the work is the same for every sequence
        margins = [_margin(arith, w, tokens, q, top, o, evou, pvou, eu_m, eu_o)
                   for o in range(v) if o != top]
        performed += k + len(margins) * margin_cost(k)
        if all(arith.is_negative(x) for x in margins):
            certified += 1
            if tables is not None:
                estimate = _float_margin(tables, tokens, top)
                if smallest is None or estimate < smallest[0]:
                    smallest = (estimate, tokens)
    if performed != expected:  # fail closed: the reported proof length must be exact
        from ..errors import Malformed

        raise Malformed(f"internal error: brute_force counted {performed} operations, "
                        f"charged {expected}")
    if smallest is not None:  # the selected sequence's margin from its interval margins
        tokens = smallest[1]
        q, top = tokens[-1], max(tokens)
        w = [exp_eqke[q][t] * exp_eqkp[q][i] for i, t in enumerate(tokens)]
        margins = [_margin(arith, w, tokens, q, top, o, evou, pvou, eu_m, eu_o)
                   for o in range(v) if o != top]
        from .. import float32  # Lemma G's δ for the note (a real certificate's)

        outs = [o for o in range(v) if o != top]
        worst = max(range(len(outs)), key=lambda j: arith.float_bounds(margins[j])[1])
        note += (f"; smallest certified margin {margin_estimate(arith, w, margins):.3g} at "
                 f"{list(tokens)} (ℓ_m − ℓ_o ≥ it there, smallest at o = {outs[worst]}), "
                 + float32.distance_note(dims, note_weights, q, top, outs[worst],
                                         arith.int_matmul, charge))
    return certified, f"{certified} of {v ** k} sequences certified correct{note}"


def _float_tables(ar, m, eu) -> tuple:
    """Binary64 copies (upper ends) of the rule's tables, to select the note's sequence."""
    def f(rows):
        return [[ar.float_bounds(x)[1] for x in row] for row in rows]
    return f(m["EXP_EQKE"]), f(m["EXP_EQKP"]), f(m["EVOU"]), f(m["PVOU"]), f(eu)


def _float_margin(tables, tokens, top) -> float:
    """A binary64 estimate of min_o (ℓ_top − ℓ_o) at `tokens` (selection only)."""
    e, p, evou, pvou, eu = tables
    q = tokens[-1]
    w = [e[q][t] * p[q][i] for i, t in enumerate(tokens)]
    worst = max(sum(w_i * (eu[q][o] - eu[q][top] + evou[t][o] - evou[t][top] + pvou[i][o]
                           - pvou[i][top]) for i, (w_i, t) in enumerate(zip(w, tokens)))
                for o in range(len(eu[q])) if o != top)
    return -worst / sum(w)


def margin_estimate(ar, w, margins) -> float:
    """The note's margin of a certified sequence, in binary64 (reports only, never a
    verdict): −max_o upper(Σ_i w_i x_i(o)) / upper(Σ_i w_i), which is ≤ min_o (ℓ_m − ℓ_o) up
    to binary64 rounding (Σ_i w_i x_i(o) = (ℓ_o − ℓ_m)·Σ_i w_i, Σ_i w_i > 0)."""
    worst = max(ar.float_bounds(x)[1] for x in margins)
    return -worst / sum(ar.float_bounds(x)[1] for x in w)


def _float32_eu(dims, m, eu, charge, arith):
    """Under float32: (EU[q, o] + δ[q][o]↑, EU[q, o] − δ[q][o]↑) for every q, o, with
    δ = float32.attention_only_deltas (Lemma G) rounded up.  The rule reads the first for
    the output o and the second for the max m, so Σ_i w_i x_i(o) becomes
    Σ_i w_i ((ℓ_o − ℓ_m) + δ[q][o] + δ[q][m]) (Σ_i w_i > 0): < 0 only when the real margin
    ℓ_m − ℓ_o exceeds δ[q][o] + δ[q][m], and then every float32 execution has
    ℓ̃_m − ℓ̃_o ≥ ℓ_m − ℓ_o − δ[q][m] − δ[q][o] > 0.  Charges δ's own operations
    (float32.delta_work) and 2v² for the shifted tables."""
    from .. import float32

    v = dims.d_vocab
    charge(float32.delta_work(dims) + 2 * v * v)
    deltas = float32.attention_only_deltas(dims, {name: m[name] for name in FLOAT32_INPUTS})
    up = [[arith.point(float32._up_fraction(x)) for x in row] for row in deltas]
    plus = [[x + s for x, s in zip(row, shifts)] for row, shifts in zip(eu, up)]
    minus = [[x - s for x, s in zip(row, shifts)] for row, shifts in zip(eu, up)]
    worst = max(max(row) for row in deltas)
    note = f" (float32 semantics: real margin > δ_o + δ_m, δ ≤ {float(worst):.3g})"
    return plus, minus, note



def margin_cost(k: int) -> int:
    """Scalar operations of one _margin: the direct-path difference, per
    position four additions/subtractions and a product, and a sum of k terms."""
    return 1 + 5 * k + k


def work(v: int, k: int) -> int:
    """The exact number of scalar operations of the rule (spec/rules.md §proof
    length): per sequence k attention products and v − 1 margins."""
    return v ** k * (k + (v - 1) * margin_cost(k))


def _margin(ar, w, tokens, q, top, o, evou, pvou, eu_m, eu_o):
    """Enclosure of Σ_i w_i x_i(o), whose sign is that of ℓ_o − ℓ_m
    (margin_cost(k) operations); eu_m and eu_o are EU, or under float32 EU − δ and EU + δ."""
    direct = eu_o[q][o] - eu_m[q][top]
    return ar.fsum(w_i * (direct + evou[t][o] - evou[t][top] + pvou[i][o] - pvou[i][top])
                   for i, (w_i, t) in enumerate(zip(w, tokens)))


def dimensionality(dims, hints=None) -> int:
    """Unexplained dimensionality (spec/rules.md §proof length): the logits of
    every sequence, a black box {0..v−1}^k → ℝ^v: v^(k+1)."""
    return dims.d_vocab ** (dims.n_ctx + 1)
