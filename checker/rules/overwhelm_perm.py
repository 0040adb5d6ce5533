"""Rule overwhelm_perm: the free string is any permutation of a fixed multiset
X = (x_1..x_n) (the paper's Algorithm 2; spec/rules.md §overwhelm_perm).

Setting and notation as in rule overwhelm_free, with one length n, query
position p = |s| + n and free positions J = |s|..p−1.  For a competitor m ≠ o
let c[j][a] = w_j(x_a)·y_j(x_a, m).  A permutation is a bijection σ: J → {1..n}
and its free part is Σ_j c[j][σ(j)].  For ANY reals u_j (hints) set
v_a := max_j (c[j][a] − u_j); then u_j + v_a >= c[j][a] for all j, a, so

    Σ_j c[j][σ(j)] <= Σ_j (u_j + v_σ(j)) = Σ_j u_j + Σ_a v_a      for every σ

(weak duality of the assignment LP, by summation: no LP solver is needed).
The rule confirms Σ_fixed + Σu + Σv < 0 for every m ≠ o, in upper-bound
arithmetic.  Optimal u (the LP duals) make the bound equal to the maximum over
permutations (the assignment polytope is integral).  Hints:
{"potentials": [[m, "<base64 f64 × n>"], ...]}, exactly one entry for every
m ≠ o.  Cost O(v·n²) upper-bound operations.  Written against checker/arith
(mpmath or Arb), like overwhelm_free.
"""

from __future__ import annotations

from ..arith import MPMATH
from ..errors import Malformed, Rejected
from ..numbers import decode_floats
from ..statement import Overwhelm
from .overwhelm import (  # float32 as overwhelm_free (spec/rules.md)
    ARITHMETICS,
    FLOAT32_INPUTS,
    FLOAT32_WIDENS_EU,
    PROPERTY,
    SEMANTICS,
    AtPosition,
    Bounds,
    _ticking,
    distance_note,
    inputs,
    parse_claim,
    positions,
)

__all__ = ["ARITHMETICS", "PROPERTY", "SEMANTICS", "FLOAT32_WIDENS_EU", "FLOAT32_INPUTS",
           "FORM", "inputs", "parse_claim", "check", "dual_bound"]
FORM = "perm"


def parse_potentials(hints, v: int, o: int, n: int) -> dict[int, list]:
    """{"potentials": [[m, b64], ...]} -> {m: [u_j as exact binary64]} for every m ≠ o."""
    if not isinstance(hints, dict) or set(hints) != {"potentials"} \
            or not isinstance(hints["potentials"], list):
        raise Malformed('rule overwhelm_perm: hints must be {"potentials": [[m, base64], ...]}')
    out = {}
    for entry in hints["potentials"]:
        if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int
                and 0 <= entry[0] < v and entry[0] != o and entry[0] not in out):
            raise Malformed(f"rule overwhelm_perm: bad potentials entry {str(entry)[:60]}")
        values = decode_floats(entry[1], n, "f64", f"potentials for {entry[0]}")
        out[entry[0]] = values
    if len(out) != v - 1:
        raise Malformed("rule overwhelm_perm: need potentials for every output other than "
                        f"{o} ({v - 1} entries)")
    return out


def dual_bound(ar, cost, u):
    """Upper bound of max over bijections σ of Σ_j cost[j][σ(j)], given upper
    bounds cost[j][a] and any exact reals u_j (floats):  Σu + Σ_a max_j (cost − u)."""
    u_points = [ar.point(x) for x in u]
    total = None
    for a in range(len(cost[0]) if cost else 0):
        v_a = ar.up_max([ar.up_minus(cost[j][a], u_points[j]) for j in range(len(cost))])
        total = v_a if total is None else ar.up_add(total, v_a)
    for u_j in u_points:
        total = ar.upper(u_j) if total is None else ar.up_add(total, ar.upper(u_j))
    return total


def check(dims, mats, claim: Overwhelm, hints, charge, arith=MPMATH, note_weights=None) -> str:
    """Confirm the claim (form "perm"); raise Rejected if a bound is not < 0.  note_weights:
    as overwhelm_free's (the note's δ only, never the proof's)."""
    from ..certificate import hold

    ar = arith
    v, k = dims.d_vocab, dims.n_ctx
    (p,) = positions(claim)
    s, items = len(claim.prefix), claim.free_perm
    n = len(items)
    # the potentials ((v − 1)·n), Bounds (v² + kv), de (v), one cost matrix (n²)
    hold(charge, (v - 1) * n + v * v + k * v + v + n * n, "hints and tables")
    potentials = parse_potentials(hints, v, claim.output, n)
    charge(v * (s + 2 + 3 * n * n) * 6)
    at = AtPosition(mats, Bounds(mats, claim.output, ar, charge), p)
    weight, smallest = _weight_estimate(ar, at, claim, p), None  # the note's, decide nothing
    for m in range(v):
        if m == claim.output:
            continue
        charge(0)  # enforces the time limit
        total = at.fixed_part(claim.prefix, claim.query, m)
        if n:
            cost = [[at.term(j, x, m) for x in items] for j in _ticking(range(s, p), charge)]
            total = ar.up_add(total, dual_bound(ar, cost, potentials[m]))
        if not ar.below_zero(total):
            raise Rejected(f"overwhelm_perm: the bound on logit {m} − logit {claim.output} over "
                           "all permutations is not negative")
        margin = -ar.float_bounds(ar.bound_point(total))[1] / weight
        if smallest is None or margin < smallest[0]:
            smallest = (margin, p, m)
    return (f"output {claim.output} forced for every permutation of {n} free token(s)"
            f"{distance_note(dims, claim, smallest, note_weights, ar, charge, 'permutation')}")


def _weight_estimate(ar, at: AtPosition, claim: Overwhelm, p: int) -> float:
    """The note's W ≥ Σ_i w_i for every permutation at query position p (binary64, reports
    only): the prefix and query weights plus max_σ Σ_j β_j·e[x_σ(j)] over the free positions,
    which pairs the β_j and the e[x_a] both sorted (the rearrangement inequality, all > 0).
    With Σ_i w_i y_i ≤ total < 0, ℓ_o − ℓ_m ≥ −total/Σ_i w_i ≥ −total/W."""
    def hi(x):
        return ar.float_bounds(x)[1]

    s = len(claim.prefix)
    total = hi(at.e[claim.query]) * hi(at.beta[p])
    total += sum(hi(at.e[u]) * hi(at.beta[i]) for i, u in enumerate(claim.prefix))
    betas = sorted(hi(at.beta[i]) for i in range(s, p))
    return total + sum(b * e for b, e in zip(betas, sorted(hi(at.e[x]) for x in claim.free_perm)))
