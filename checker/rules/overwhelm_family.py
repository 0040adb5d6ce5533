"""Rule overwhelm_family: the paper's Algorithm 1 on every model family
(LayerNorm / LNPre, ReLU MLP, RoPE, several heads, parallel residual);
spec/rules.md §overwhelm_family, the theorem in spec/overwhelm.md §1, §5b.
This module is the one-layer rule; a model with n_layers >= 2 is checked layer after
layer by its part overwhelm_deep.py (spec/overwhelm.md §5c, its own hints).

Claim: as rule overwhelm_free (prefix s, query q, output o, free strings over
an alphabet A, lengths L), or as rule overwhelm_perm (every ordering of a
multiset X): then each Lemma R bound below bounds the free positions' part by
dual potentials of the assignment problem (Lemma R-perm, hints perm_u).
For each query position p = |s| + n, n ∈ L, the rule proves ℓ_m − ℓ_o < 0 for
every m ≠ o and every admissible t.  Notation: c(x) = x − mean(x) (the
identity without LayerNorm; LayerNorm reads only c(r)); z_j = Σ_i a_ji vo_j(i, t_i)
with vo_j(i, u) = val_j(i, u)·c(W_O[j]) (rows of W_O centred: c is linear);
r_c = c(x_p + b_O) + Σ_j z_j is the query position's centred residual after
attention.  Every quantity below is a linear functional r_c·a plus known terms.

 1. tables: per-token LayerNorm makes LN1(x_i) a function of (i, u), so keys,
    values and the query are tables (forward_model._Model: rigorous sqrt; RoPE by the
    enclosed exact angles; key at i rotated by i, query by p).
 2. attention weights w_j(i, u) = exp(s_j(i, u) − c_j) > 0 for any real c_j.
 3. Lemma R (ratio): Σ_i a_ji y(i, t_i) = Σ w y / Σ w ≤ λ for EVERY admissible t if
        Σ_{fixed i} w(i,t_i)(y(i,t_i) − λ) + Σ_{free i} max_{u∈A} w(i,u)(y(i,u) − λ) ≤ 0
    (w > 0; the left side's maximum over t is the sum of per-position maxima).
    λ is a hint; lower bounds by λ on −y.  Exact for one functional (Dinkelbach).
    Bounds of r_c·a:  base·a + Σ_j [λ_lo(j, a), λ_hi(j, a)],  base = c(x_p + b_O).
 4. the box of r_c: a = the unit vectors (hints box).
 5. Lemma LN (scale): σ = sqrt(|c|²/d + ε) for c in a box and with c·e ≥ L > 0
    (e a hinted direction) lies in [sqrt(max(Σ_k min c_k², L²/|e|²)/d + ε),
    sqrt(Σ_k max c_k²/d + ε)] (Cauchy–Schwarz for the second lower bound).
    MLP (sequential): pre-activation k is (r_c·a_k)/σ_2 + b_2·W_in[:,k] + b_in[k],
    a_k = w_2 ∘ W_in[:,k], bounded by Lemma R (hints pre) — no box matmul;
    hidden = the activation over the pre-activation box (ReLU exactly on the endpoints,
    the smooth ones by elementary.activation_interval).  Parallel: the MLP of x_p.
 6. each logit difference directly (D_m = U[:,m] − U[:,o], g_m = w_f ∘ D_m):
        ℓ_m − ℓ_o = (r'_c·g_m)/σ_f + b_f·D_m + b_U[m] − b_U[o],
    r'_c = r_c + hidden·c(W_out) + c(b_out); r_c·g_m by Lemma R (hints diff),
    the MLP part over the hidden box; σ_f by Lemma LN on the box of r'_c with
    direction e_f (r'_c·e_f bounded as r'_c·g_m is).
Hints {"bounds": [[p, box, pre, diff, dir, dir_lo], ...]}, one per query position in
order; base64 f64 arrays: box (n_heads, d, 2), pre (n_heads, d_mlp, 2), diff
(n_heads, v) (entry o unused), dir (2, d) = (e_2, e_f) (zero: unused), dir_lo
(n_heads, 2) the lower λ of z_j·e_2, z_j·e_f; for a permutation claim also perm_u
(n_heads, n_functionals, |X|), potentials per Lemma R bound (index: `key`).
Cost per p: n_heads·(2d + 2·d_mlp + v + 2)·(p + 1)·|A| upper-bound products
(permutations: ·|X| more); tables n_heads·3·v·k·d·h once.
Memory: the tables, the hints and the largest query position's structures
(`table_elements`, `hint_elements`, `query_elements`) are charged to the memory limit
before any is built; the clock is checked at every table row, product element, query
position and bound of Lemma R.
Under `--arith arb` the one-layer path builds the same tables by batched exact products and,
for a free claim, computes Lemma R's sums with Arb (overwhelm_family_arb.py; the inputs stay
mpmath intervals, INPUT_ARITHMETIC); LayerNorm, RoPE, the weights and the per-query products
there are this module's operations bit for bit, faster (Tables.matmul, AtQuery.logit_const are
its hooks); Lemma R-perm and several layers run in mpmath.
"""

from __future__ import annotations

from ..errors import Malformed
from ..statement import Overwhelm
from . import forward_model
from .overwhelm import parse_claim as _parse_claim
from .overwhelm import positions

# Algorithm 1's bounds (the hints, Tables, Head, Lemma LN, Functionals, AtQuery, the charged
# work and memory) are overwhelm_family_bounds.py, which the parts overwhelm_family_arb.py,
# overwhelm_family_float32.py and overwhelm_deep*.py import as well (no import cycle); their
# names stay reachable here (overwhelm_family.X) for family_gap, the generator and the tests.
# A monkeypatch must patch overwhelm_family_bounds, where the code that uses them lives.
from .overwhelm_family_bounds import (  # noqa: F401
    HINT_FIELDS,
    AtQuery,
    Functionals,
    Head,
    Tables,
    _cost,
    _nest,
    _upper_ratio,
    alphabet,
    centred,
    centred_rows,
    dot,
    hint_elements,
    hint_fields,
    hint_shapes,
    key,
    ln_params,
    ln_scale,
    n_functionals,
    parse_hints,
    query_elements,
    table_elements,
)

PROPERTY = "overwhelm"
ARITHMETICS = ("mpmath", "arb")  # arb: Lemma R's sums only (overwhelm_family_arb.py)
INPUT_ARITHMETIC = "mpmath"  # certificate.py: the inputs are mpmath intervals whatever arith
FORM = "any"  # free and permutation claims
ANY_FAMILY = True  # certificate.py: applies to every model family
SEMANTICS = ("real", "float32")  # float32: one layer, Lemma W-family (spec/rules.md)
NOTE_DISTANCE = True  # certificate.py: `distance` under --float32-distance (several layers)


# -- the claim, its inputs, the check ----------------------------------------------------

def parse_claim(obj, dims, form: str = FORM) -> Overwhelm:
    """A free or permutation claim (checker/rules/overwhelm.parse_claim)."""
    perm = isinstance(obj, dict) and "free_perm" in obj
    return _parse_claim(obj, dims, "perm" if perm else "free")


def inputs(dims, claim: Overwhelm) -> dict[str, tuple]:
    """Every weight of the family (and the RoPE tables): the rule runs the model."""
    from ..definitions import model_terms

    terms = model_terms(dims)
    return {name: terms[name] for name in forward_model.inputs(dims)}


def check(dims, mats, claim: Overwhelm, hints, charge, arith=None, semantics="real",
          distance=False) -> str:
    """Confirm the claim at every query position; raise Rejected otherwise.  semantics
    float32: every float32 evaluation (overwhelm_family_float32.py, Lemma W-family).
    distance (a real check under --float32-distance): on several layers the note's float32
    error too (overwhelm_deep_float32.distance_note: the float32 rule run again, reports only)."""
    from ..certificate import hold

    if dims.family.normalization in ("RMS", "RMSPre"):  # Lemma LN assumes centring
        raise Malformed("overwhelm_family does not support RMS normalization yet "
                        "(forward_brute_force does)")
    if semantics == "float32":
        from . import overwhelm_family_float32

        return overwhelm_family_float32.check(dims, mats, claim, hints, charge)
    if semantics != "real":
        raise Malformed(f"rule overwhelm_family: unknown semantics {semantics!r}")
    if dims.family.n_layers > 1:  # Algorithm 1 layer after layer (overwhelm_deep.py)
        from . import overwhelm_deep

        note = None
        if distance:  # the float32 rule again, for the note only (reports, never a verdict)
            from . import overwhelm_deep_float32

            def note(smallest):
                return overwhelm_deep_float32.distance_note(dims, mats, claim, hints, charge,
                                                            smallest)
        return overwhelm_deep.check(dims, mats, claim, hints, charge, distance=note)
    if dims.family.gated_mlp:  # the one-layer path bounds an ungated MLP's pre-activations
        raise Malformed("overwhelm_family supports a gated MLP only with n_layers >= 2, not "
                        "on one layer (forward_brute_force does)")
    free = alphabet(dims, claim)
    bounds = parse_hints(hints, dims, claim, charge)
    charge(_cost(dims, claim, len(claim.free_perm) if claim.free_perm is not None else len(free)))
    hold(charge, table_elements(dims) + max(query_elements(dims, claim, p)
                                            for p in positions(claim)), "tables")
    make_tables, at_query = Tables, AtQuery
    if arith is not None and arith.name == "arb":  # the same tables, Lemma R with Arb
        from . import overwhelm_family_arb

        make_tables = overwhelm_family_arb.BatchedTables
        at_query = overwhelm_family_arb.query_checker(claim)
    tables = make_tables(dims, mats, charge)
    fun = Functionals(tables, claim.output)
    smallest = None  # (slack, query position, logit t): the note's, decides nothing
    for p in positions(claim):
        charge(0)  # enforces the time limit
        query = at_query(tables, fun, claim, p, bounds[p])
        query.check()
        if query.slack is not None and (smallest is None or query.slack < smallest[0]):
            smallest = (query.slack, p, query.worst, query.sigma)
    kind = ("every permutation (assignment duals)" if claim.free_perm is not None
            else f"{len(free)} free token(s)")
    return (f"output {claim.output} forced at {len(positions(claim))} length(s), {kind}, "
            f"{dims.family.n_heads} head(s) (LayerNorm/MLP/RoPE bounds)"
            f"{distance_note(tables, fun, claim, bounds, smallest, charge)}")


def distance_note(tables: Tables, fun: Functionals, claim: Overwhelm, bounds: dict, smallest,
                  charge) -> str:
    """The note's distance to float32 (spec/rules.md §distance to float32; reports only,
    decides nothing, charges no work): the smallest slack s = −(the bound on ℓ_t − ℓ_o) over
    the query positions p and logits t (`AtQuery.check` keeps it), its (p, t), and the float32
    error E(g_t)/upper(σ) there (overwhelm_family_float32.note_error: Lemma W-family's widening
    of c(r̃)·g_t at p over the real tables, as for family_gap)."""
    if smallest is None:
        return ""
    slack, p, t, sigma = smallest
    from . import overwhelm_family_float32 as f32

    text = f32.note_error(charge, tables, lambda: (
        f32.AtQuery(tables, fun, claim, p, bounds[p]), fun.g[t], fun.y_g, t), sigma)
    return (f"; smallest certified slack {slack:.3g} at (query position {p}, logit {t}) (ℓ_o − "
            f"ℓ_t ≥ it for every completion there), {text}; the float32 variant also widens "
            "the box, LayerNorms, MLP and unembedding (spec/rules.md §distance to float32)")
