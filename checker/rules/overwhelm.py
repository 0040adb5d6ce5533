"""Rule overwhelm_free: a fixed prompt forces the output for every free string
(spec/rules.md §overwhelm_free; the theorem in spec/overwhelm.md).

Claim: prefix s, query token q, output o, free strings t over an alphabet A
(all tokens by default) of every length in L (0..n for `free <= n`, {n} for
`free == n`).  For the sequence s + t + [q], the query sits at p = |s| + |t|
and attends to positions 0..p.  With w_i = EXP_EQKE_Q@p[t_i]·EXP_EQKP_Q@p[i] > 0
and, for a competitor m ≠ o,

    y_i(m) = (EU_Q@p[m] − EU_Q@p[o]) + (EVOU[t_i, m] − EVOU[t_i, o]) + (PVOU[i, m] − PVOU[i, o]),

ℓ_m − ℓ_o = Σ_{i≤p} w_i y_i(m) / Σ_{i≤p} w_i (the sign form, spec/theorem.md §5,
at position p).  Each free position's term depends on its own token only, so

    max_t Σ_i w_i y_i(m) = Σ_{fixed i} w_i y_i(m) + Σ_{free j} max_{u∈A} w_j(u) y_j(u, m)

exactly.  The rule confirms, for every length in L and every m ≠ o, that an
upper bound of the right side is < 0 (upper-bound arithmetic, checker/arith).
No hints.  Cost O(|L|·v·(|s| + 1 + n·|A|)) upper-bound operations, i.e.
O(n²·v·|A|) for free <= n.

Written against the arithmetic back-end interface (checker/arith): `ar` is
mpmath or Arb; every check is an exact comparison of an upper bound with 0.
"""

from __future__ import annotations

from ..arith import MPMATH
from ..definitions import query_terms
from ..errors import Malformed, Rejected
from ..rules import ATTN_ONLY_WEIGHTS
from ..statement import Overwhelm
from . import notes

PROPERTY = "overwhelm"
ARITHMETICS = ("mpmath", "arb")  # back-ends this rule is written against
FORM = "free"  # the claim form this rule proves (parse_claim)
SHARED_INPUTS = ("EVOU", "PVOU")  # position-independent: the canonical full matrices
QUERY_INPUTS = ("EXP_EQKE_Q", "EXP_EQKP_Q", "EU_Q")  # one set per query position, "NAME@p"
# float32: the rule runs unchanged on every EU_Q@p widened by Lemma G@p's δ_p[q][o]
# (certificate.py; spec/rules.md §float32 for the overwhelm rules)
SEMANTICS = ("real", "float32")
FLOAT32_WIDENS_EU = True
FLOAT32_INPUTS = ATTN_ONLY_WEIGHTS  # the weights, read for δ only


# -- the claim ----------------------------------------------------------------

def _tokens(x, what, v, limit):
    if not (isinstance(x, list) and len(x) <= limit and all(type(t) is int for t in x)):
        raise Malformed(f"rule overwhelm: {what} must be a list of at most {limit} integers")
    if any(not 0 <= t < v for t in x):
        raise Malformed(f"rule overwhelm: {what} holds a token outside 0..{v - 1}")
    return tuple(x)


def _token(x, what, v):
    if type(x) is not int or not 0 <= x < v:
        raise Malformed(f"rule overwhelm: {what} must be a token in 0..{v - 1}")
    return x


def parse_claim(obj, dims, form: str) -> Overwhelm:
    """The rule line's claim object -> Overwhelm, validated against the model.

    form "free":  {"prefix": [..], "query": q, "output": o, "free": n,
                   "free_cmp": "<=" | "==", "over": [..] | null}
    form "perm":  {"prefix": [..], "query": q, "output": o, "free_perm": [..]}
    The whole sequence must fit: |prefix| + (longest free string) + 1 <= n_ctx.
    """
    v, k = dims.d_vocab, dims.n_ctx
    keys = ({"prefix", "query", "output", "free", "free_cmp", "over"} if form == "free"
            else {"prefix", "query", "output", "free_perm"})
    if not isinstance(obj, dict) or set(obj) != keys:
        raise Malformed(f"rule overwhelm: the claim must be an object with keys {sorted(keys)}")
    prefix = _tokens(obj["prefix"], "prefix", v, k)
    query, output = _token(obj["query"], "query", v), _token(obj["output"], "output", v)
    if form == "free":
        n = obj["free"]
        if type(n) is not int or not 0 <= n <= k or obj["free_cmp"] not in ("<=", "=="):
            raise Malformed('rule overwhelm: "free" must be an integer and "free_cmp" "<=" or "=="')
        over = None
        if obj["over"] is not None:
            over = _tokens(obj["over"], "over", v, v)
            if not over or len(set(over)) != len(over) or list(over) != sorted(over):
                raise Malformed("rule overwhelm: 'over' must list distinct tokens, ascending")
        claim = Overwhelm(prefix, query, output, free_cmp=obj["free_cmp"], free=n, over=over)
    else:
        perm = _tokens(obj["free_perm"], "free_perm", v, k)
        if list(perm) != sorted(perm):
            raise Malformed("rule overwhelm: free_perm must be listed in ascending order")
        claim = Overwhelm(prefix, query, output, free_perm=perm)
    if len(prefix) + claim.lengths()[-1] + 1 > k:
        raise Rejected(f"rule overwhelm: prefix + free string + query is longer than "
                       f"n_ctx = {k}; the model is not defined there")
    return claim


def positions(claim: Overwhelm) -> list[int]:
    """The query positions p = |s| + |t| over the admissible lengths |t|."""
    return [len(claim.prefix) + n for n in claim.lengths()]


def inputs(dims, claim: Overwhelm) -> dict[str, tuple]:
    """Input name -> the term it must be: EVOU, PVOU and, per query position p,
    EXP_EQKE_Q@p, EXP_EQKP_Q@p, EU_Q@p (checker/definitions.py)."""
    from ..definitions import model_terms

    full = model_terms(dims)
    out = {name: full[name] for name in SHARED_INPUTS}
    for p in positions(claim):
        for name, term in query_terms(dims, claim.query, p).items():
            out[f"{name}@{p}"] = term
    return out


# -- shared bounds --------------------------------------------------------------

class Bounds:
    """Upper bounds of the output differences for output o, shared by all query
    positions:  dv[u][m] >= EVOU[u, m] − EVOU[u, o],  dp[i][m] >= PVOU[i, m] − PVOU[i, o]."""

    def __init__(self, mats, o, ar, charge=lambda work: None):
        evou, pvou = mats["EVOU"], mats["PVOU"]
        self.o, self.ar = o, ar
        self.dv = [[ar.up_diff(row[m], row[o]) for m in range(len(row))]
                   for row in _ticking(evou, charge)]
        self.dp = [[ar.up_diff(row[m], row[o]) for m in range(len(row))]
                   for row in _ticking(pvou, charge)]


def _ticking(rows, charge):
    """The rows, with a look at the clock (charge(0)) before each."""
    for row in rows:
        charge(0)
        yield row


class AtPosition:
    """The quantities of one query position p: weights and direct-path differences."""

    def __init__(self, mats, bounds: Bounds, p: int):
        self.p = p
        self.e = mats[f"EXP_EQKE_Q@{p}"][0]  # (v,): exp(EQKE_Q@p[u])
        self.beta = mats[f"EXP_EQKP_Q@{p}"][0]  # (k,): exp(EQKP_Q@p[i])
        eu = mats[f"EU_Q@{p}"][0]
        self.de = [bounds.ar.up_diff(eu[m], eu[bounds.o]) for m in range(len(eu))]
        self.bounds = bounds  # de[m] >= EU_Q@p[m] − EU_Q@p[o]

    def term(self, i: int, u: int, m: int):
        """Upper bound of w_i(u)·y_i(u, m): token u at position i, competitor m."""
        b, ar = self.bounds, self.bounds.ar
        y = ar.up_add(ar.up_add(self.de[m], b.dv[u][m]), b.dp[i][m])
        return ar.up_mul(self.e[u] * self.beta[i], y)

    def fixed_part(self, prefix, query: int, m: int):
        """Upper bound of Σ over the prefix positions and the query position."""
        total = self.term(self.p, query, m)
        for i, u in enumerate(prefix):
            total = self.bounds.ar.up_add(total, self.term(i, u, m))
        return total




# -- the rule -------------------------------------------------------------------

def table_elements(dims, n_alpha: int) -> int:
    """The elements the rule builds: Bounds (dv v × v, dp k × v), one query position's
    de (v) and the terms of one free position (|A|)."""
    v, k = dims.d_vocab, dims.n_ctx
    return v * v + k * v + v + n_alpha


def check(dims, mats, claim: Overwhelm, hints, charge, arith=MPMATH, note_weights=None) -> str:
    """Confirm the claim (form "free"); raise Rejected if a bound is not < 0.  note_weights
    (a real certificate's weights, certificate.py; {}: unavailable): read by the note's δ
    only (`distance_note`), never by the proof."""
    from ..certificate import hold

    ar = arith
    if hints is not None:
        raise Malformed("rule overwhelm_free takes no hints")
    v = dims.d_vocab
    alphabet = claim.over if claim.over is not None else tuple(range(v))
    s = len(claim.prefix)
    charge(sum(v * (s + 2 + (p - s) * len(alphabet)) * 6 for p in positions(claim)))
    hold(charge, table_elements(dims, len(alphabet)), "tables")
    bounds = Bounds(mats, claim.output, ar, charge)
    smallest = None  # (margin estimate, p, m): the note's, decides nothing
    for p in positions(claim):
        charge(0)  # enforces the time limit
        at = AtPosition(mats, bounds, p)
        weight = _weight_estimate(ar, at, claim, p, alphabet)
        for m in range(v):
            if m == claim.output:
                continue
            total = at.fixed_part(claim.prefix, claim.query, m)
            for j in range(s, p):  # the free positions
                charge(0)  # the clock: |A| terms per free position
                total = ar.up_add(total, ar.up_max([at.term(j, u, m) for u in alphabet]))
            if not ar.below_zero(total):
                raise Rejected(f"overwhelm_free: with {p - s} free tokens (query at position "
                               f"{p}), the bound on logit {m} − logit {claim.output} is not "
                               "negative")
            margin = -ar.float_bounds(ar.bound_point(total))[1] / weight
            if smallest is None or margin < smallest[0]:
                smallest = (margin, p, m)
    n = len(positions(claim))
    return (f"output {claim.output} forced for every free string at {n} length(s), "
            f"{len(alphabet)} free token(s)"
            f"{distance_note(dims, claim, smallest, note_weights, ar, charge, 'free string')}")


def distance_note(dims, claim: Overwhelm, smallest, weights, ar, charge, what: str) -> str:
    """The note's distance to float32 (spec/rules.md §distance to float32; reports only,
    decides nothing, charges no work): the smallest margin estimate −total/W over the query
    positions p and logits m, its (p, m), and the float32 error δ_p[q][o] + δ_p[q][m] there
    (Lemma G@p, float32.attention_only_delta_rows) from `weights`, a real certificate's
    weights ({}: a weight line unavailable; None: not given, as under a float32 theorem, whose
    rule runs on EU_Q@p widened by δ_p already: the margin printed is the one beyond it)."""
    if smallest is None:
        return ""
    margin, p, m = smallest
    text = (f"; smallest certified margin {margin:.3g} at (query position {p}, logit {m}) "
            f"(ℓ_o − ℓ_m ≥ it for every {what} there)")
    if weights is None:  # a float32 theorem, a check without --float32-distance, a direct call
        return text + ("; the float32 variant needs margins above δ_p[q][o] + δ_p[q][m] "
                       "(Lemma G@p; check-cert --float32-distance prints it for a real "
                       "certificate; under a float32 theorem EU_Q@p is widened by it already: "
                       "spec/rules.md §distance to float32)")
    if not weights:
        return text + (", float32 error unavailable (a weight line is absent or has width; "
                       "spec/rules.md §distance to float32)")

    def compute(clock):
        from .. import float32  # the note's δ only (spec/trust.md)

        clock()
        row = float32.attention_only_delta_rows(dims, weights, claim.query, [p],
                                                ar.int_matmul)[p]
        return (f", float32 error {float(row[claim.output]) + float(row[m]):.3g} there "
                "(δ_p[q][o] + δ_p[q][m], Lemma G@p: every binary32 execution has ℓ̃_o − ℓ̃_m ≥ "
                "the margin minus it there)")

    return text + notes.attempt(charge, compute, "; no float32 error estimate") + (
        "; spec/rules.md §distance to float32")


def _weight_estimate(ar, at: AtPosition, claim: Overwhelm, p: int, alphabet) -> float:
    """The note's W ≥ Σ_i w_i for every admissible string at query position p (binary64,
    reports only): the prefix and query weights plus β_i·max_{u∈A} e[u] per free position.
    With Σ_i w_i y_i ≤ total < 0, ℓ_o − ℓ_m ≥ −total/Σ_i w_i ≥ −total/W."""
    def hi(x):
        return ar.float_bounds(x)[1]

    s = len(claim.prefix)
    e_max = max(hi(at.e[u]) for u in alphabet)
    total = hi(at.e[claim.query]) * hi(at.beta[p])
    total += sum(hi(at.e[u]) * hi(at.beta[i]) for i, u in enumerate(claim.prefix))
    return total + e_max * sum(hi(at.beta[i]) for i in range(s, p))
