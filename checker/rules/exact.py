"""Rule exact: the cubic cover in closed form plus the residue, sequence by
sequence (spec/rules.md §exact, with the proof that the two partition all
v^k sequences).

Every sequence t has a class (q, m, c): its query token q = t[k−1], its max m
and the number c of non-query positions holding a token < m.  The hints are
those of rule cubic (good sets G_{q,m,c}); the cubic rule's own code confirms
them, and its count is the *cover*: the sequences whose c non-max non-query
tokens all lie in G_{q,m,c}.  Every other sequence is the *residue*: a class
with a token outside G (a class without a claim has G = ∅).  The checker
enumerates the residue itself and decides each sequence with the theorem of
rule brute_force: t is correct iff Σ_i w_i x_i(o) < 0 for every o != m, with
w_i = exp(EQKE[q, t_i])·exp(EQKP[q, i]) and
x_i(o) = EU[q,o] − EU[q,m] + EVOU[t_i,o] − EVOU[t_i,m] + PVOU[i,o] − PVOU[i,m].

Arithmetic: upper-bound arithmetic with no rounding at all.  The recorded
endpoints are dyadic numbers, so at a common exponent they are integers, and
  x̄_i(o) = EU⁺[q,o] − EU⁻[q,m] + EVOU⁺[t_i,o] − EVOU⁻[t_i,m] + PVOU⁺[i,o] − PVOU⁻[i,m] >= x_i(o),
  term_i(o) = w⁺_i·x̄_i(o) if x̄_i(o) >= 0 else w⁻_i·x̄_i(o) >= w_i x_i(o)   (w⁻_i >= 0),
with w^± = exp(EQKE)^±·exp(EQKP)^±, are exact integers, and t is certified
when Σ_i term_i(o) < 0 for every o != m.

Sharing: term_i depends only on (q, m, i, t_i), so for each (q, m) the rows
term[i][t] (a vector over o != m) are computed once; a sequence then costs
one vector addition and a maximum (its prefix sums are shared too).
Cost: O(Σ_{(q,m) with residue} k·v²) for the rows plus O(v) per residue
sequence; the cover costs what rule cubic costs.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import chain, combinations, repeat
from math import comb, isfinite
from operator import add, floordiv, itemgetter, mul

from ..arith import MPMATH
from ..errors import Malformed, Rejected
from ..rules import ATTN_ONLY_WEIGHTS
from . import cubic, pool

INPUTS = cubic.INPUTS
# The cover (rule cubic's code) runs in the selected back-end; the residue is exact
# integer arithmetic on the *recorded* binary64 endpoints (RECORDED: certificate.py
# passes them), so its verdicts are the same in every back-end, bit for bit.
ARITHMETICS = ("mpmath", "arb")
RECORDED = True
SEMANTICS = ("real", "float32")  # float32: on EU widened by Lemma G's δ (certificate.py)
FLOAT32_WIDENS_EU = True  # spec/rules.md §float32 by widening EU
FLOAT32_INPUTS = ATTN_ONLY_WEIGHTS  # the weights, read for δ only
NOTE_WEIGHTS = True  # a real check's note gets them too, for δ (certificate.py: note_weights)
# Work units charged per entry of a row term[i][t] (two additions, a product)
ROW_COST = 3


class _Tally:
    """`charge`, adding up the work charged through it (the cover's, for the note); its
    tables are held through `charge` too (certificate.hold)."""

    def __init__(self, charge):
        self.charge, self.work = charge, 0

    def __call__(self, work):
        self.work += work
        self.charge(work)

    def hold(self, count, what):
        from ..certificate import hold

        hold(self.charge, count, what)


def check(dims, mats, hints, charge, jobs=1, arith=MPMATH, recorded=None, note_weights=None):
    """recorded: {name: rows of (lo, hi) recorded binary64 pairs} (certificate.py); the
    integer tables are built from them (from `mats`, which must then be mpmath
    intervals, when absent).  note_weights (a real certificate's check, with recorded): the
    distance-to-float32 note (the cover's margin_note and the residue's smallest margin)."""
    from ..certificate import hold

    v, k = dims.d_vocab, dims.n_ctx
    if v < 2:
        raise Malformed("rule exact needs d_vocab >= 2")
    good = cubic.parse_hints(hints, v, k)
    cover_charge = _Tally(charge)
    # Rejected unless confirmed
    cover, _ = cubic.check(dims, mats, hints, cover_charge, jobs, arith, recorded)
    plan = Plan(good, v, k, charge)
    if cover != plan.cover or plan.cover + plan.residue != v ** k:
        raise AssertionError("exact: the classes do not partition the sequences")  # exit 2
    charge(plan.work)
    hold(charge, IntegerTables.elements(v, k) + max(jobs, 1) * plan.largest_rows,
         "integer tables and rows")  # the rows: in each process
    tables = IntegerTables(recorded if recorded is not None else mats, v, k)
    order = sorted(range(v), key=lambda q: -plan.work_of_query[q])
    track = note_weights is not None and recorded is not None
    results = _map(jobs, (tables, plan, charge), order, track)
    seen = sum(size for size, _, _, _ in results)
    certified = sum(ok for _, ok, _, _ in results)
    if seen != plan.residue:
        raise AssertionError("exact: enumerated residue differs from its closed form")
    performed = sum(ops for _, _, ops, _ in results)
    if performed != plan.work:  # fail closed: the reported proof length must be exact
        raise Malformed(f"internal error: exact counted {performed} residue operations, "
                        f"charged {plan.work}")
    proven = cover + certified
    note = (f"{proven} sequences certified: {cover} in closed form by the cubic good sets "
            f"(work {cover_charge.work}), {certified} of the {plan.residue} residue sequences "
            f"evaluated one by one (work {plan.work})")
    if track:
        note += _margin_text(dims, recorded, good, [b for *_, b in results if b],
                             note_weights, arith, charge)
    return proven, note


def _margin_text(dims, recorded, good, residue_best, note_weights, arith, charge) -> str:
    """The distance-to-float32 note (spec/rules.md §distance to float32): the smaller of the
    cover's margin (cubic.margin_note, at a class (q, m, c)) and the residue's (at a sequence
    t: −max_o T(o) / Σ_i w⁺_i, Lemma E2's bound over the upper weights, the largest of
    T/Σw⁺ selected exactly among the certified residue sequences (each worker's exact
    integers, in one unit per query: T in 2^(x + e_q + β_q), Σw⁺ in 2^(e_q + β_q)), then
    recomputed in binary64 from the recorded ends at that t); reports only, computed inside
    notes.attempt (a failure named, the clock looked at, the time limit standing)."""
    from .. import float32  # Lemma G's δ for the note (a real certificate's)
    from . import notes

    v, k = dims.d_vocab, dims.n_ctx

    def compute(clock):
        cover = cubic.margin_note(recorded, good, v, k, clock)
        residue = None
        if residue_best:
            value, weight, tokens = max(residue_best, key=lambda b: Fraction(b[0], b[1]))
            residue = _float_margin(recorded, tokens, v, k) + (tokens,)
        if cover is None and residue is None:
            return ""
        if residue is None or (cover is not None and cover[0] <= residue[0]):
            margin, q, m, c = cover
            where, o = f"(q={q}, m={m}, c={c}) (ℓ_m − ℓ_o ≥ it for every o ≠ m and every " \
                "covered sequence of the class)", None
        else:
            margin, o, tokens = residue
            q, m = tokens[-1], max(tokens)
            where = (f"{list(tokens)} (a residue sequence: ℓ_m − ℓ_o ≥ it there, smallest at "
                     f"o = {o})")
        return (f"; smallest certified margin {margin:.3g} at {where}, "
                + float32.distance_note(dims, note_weights, q, m, o, arith.int_matmul, clock))

    return notes.attempt(charge, compute, "; smallest certified margin unavailable",
                         detail=False)


def _float_margin(recorded, tokens, v, k) -> tuple:
    """(−max_o T(o) / Σ_i w⁺_i, the o attaining it) at the residue sequence `tokens`, in
    binary64 from the recorded ends (Lemma E2's T; reports only)."""
    q, m = tokens[-1], max(tokens)
    eu, ev, pv = recorded["EU"], recorded["EVOU"], recorded["PVOU"]
    e, b = recorded["EXP_EQKE"], recorded["EXP_EQKP"]
    weights = [(e[q][t][0] * b[q][i][0], e[q][t][1] * b[q][i][1]) for i, t in enumerate(tokens)]
    worst = None
    for o in range(v):
        if o == m:
            continue
        total = 0.0
        for i, t in enumerate(tokens):
            x = (eu[q][o][1] - eu[q][m][0] + ev[t][o][1] - ev[t][m][0]
                 + pv[i][o][1] - pv[i][m][0])
            total += (weights[i][1] if x >= 0 else weights[i][0]) * x
        if worst is None or total > worst[0]:
            worst = (total, o)
    return -worst[0] / sum(w for _, w in weights), worst[1]


def residue_verdicts(dims, mats, hints):
    """Every residue sequence with its verdict, [(tokens, certified)], in one
    process, by the same code as check() (for tests: the cover is the
    complement).  Confirms the good sets first, as check() does."""
    v, k = dims.d_vocab, dims.n_ctx
    cubic.check(dims, mats, hints, lambda work: None, 1)
    plan = Plan(cubic.parse_hints(hints, v, k), v, k)
    tables = IntegerTables(mats, v, k)
    record = []
    for q in range(v):
        _residue_q(tables, plan, lambda work: None, q, record)
    return record


# --- the partition, in closed form ------------------------------------------

class Plan:
    """The classes (q, m, c) and their sizes, from the parsed cubic hints.

    classes[q] = [(m, c, bad tokens)] for every class with a non-empty residue
    (bad = the tokens < m outside G_{q,m,c}; for c = 0, [] and the single
    sequence (m, …, m, q) is residue); tokens[(q, m)] the tokens whose rows
    the residue of (q, m) reads.  Sizes: the class (q, m, c) has
    C(k−1, c)·m^c sequences (c >= 1) or 1 (c = 0); its cover C(k−1, c)·g^c or
    z_{q,m}; its residue the difference.  Work: what _residue_q does, per q.
    Memory: each class is charged to the memory limit (through `charge`,
    certificate.hold) before its bad tokens are listed, and the clock is checked at
    every class; largest_rows bounds the rows and the search stack one (q, m) of the
    residue needs."""

    def __init__(self, good, v, k, charge=lambda work: None):
        from ..certificate import hold

        self.cover = self.residue = self.work = 0
        self.classes = {q: [] for q in range(v)}
        self.work_of_query = [0] * v
        self.tokens = {}  # (q, m) -> the tokens whose rows the residue reads
        self.largest_rows = 0
        for q in range(v):
            for m in range(q, v):
                max_c = k - 1 if q == m else k - 2
                tokens = set()  # tokens whose rows term[i][t] the residue of (q, m) reads
                for c in range(max_c + 1):
                    mask = good.get((m, q, c), (0, 0))[0]
                    n_bad = 0 if c == 0 else m - mask.bit_count()  # mask < 2^m (parse_hints)
                    hold(charge, 3 + n_bad, "residue classes")  # (m, c, bad); the clock too
                    bad = [] if c == 0 else [u for u in range(m) if not mask >> u & 1]
                    size = comb(k - 1, c) * m ** c  # 1 for c = 0
                    residue = (1 - bool(mask)) if c == 0 else _class_residue_size(k, m, c, bad)
                    self.cover += size - residue
                    if not residue:
                        continue
                    self.residue += residue
                    self.classes[q].append((m, c, bad))
                    self.work_of_query[q] += _class_work(v, k, m, c, residue)
                    # m fills the positions outside a placement; c = 1 reads only
                    # the bad token, c >= 2 any token < m
                    tokens |= {m} | set(bad if c == 1 else range(m) if c else ())
                if tokens:  # the k base rows, then (k−1)·|tokens| + 1 rows of terms,
                    hold(charge, len(tokens), "residue classes")
                    self.tokens[(q, m)] = sorted(tokens)  # each with its weight's two ends
                    terms = (k - 1) * len(tokens) + 1
                    self.work_of_query[q] += ROW_COST * (v - 1) * (k + terms) + 2 * terms
                    # the rows and the search stack of _class_residue (k·m partial sums)
                    self.largest_rows = max(self.largest_rows, (k + terms + k * m) * (v - 1))
            self.work += self.work_of_query[q]


def _class_residue_size(k, m, c, bad):
    """C(k−1, c)·(m^c − g^c), g = m − |bad|: placements times fillings of the
    placement with tokens < m, not all good (c >= 1)."""
    return comb(k - 1, c) * (m ** c - (m - len(bad)) ** c)


def _class_work(v, k, m, c, residue):
    """Vector operations of _class_residue for one class, each v − 1 integer
    operations: per placement a base sum (k−1−c additions), one partial sum
    per prefix of length 1..c−1 (m^d of them), and per residue sequence an
    addition and a maximum (c = 0: the maximum only)."""
    placements = comb(k - 1, c)
    per_placement = (k - 1 - c) + sum(m ** d for d in range(1, c))
    per_sequence = 2 if c else 1  # c = 0: the base sum is the sequence's; only its maximum
    return (v - 1) * (placements * per_placement + per_sequence * residue)


# --- exact integer tables ------------------------------------------------------

class IntegerTables:
    """The recorded enclosures as exact integers: every endpoint is a dyadic
    number n·2^e, so with a common exponent E per group it is an integer
    times 2^E, exactly.  x-quantities (EU, EVOU, PVOU) share one exponent;
    each row q of exp(EQKE) and of exp(EQKP) has its own (a sum of terms
    only ever mixes weights of one query q).  O(v²)."""

    @staticmethod
    def elements(v: int, k: int) -> int:
        """The integers held: both ends of EU, EVOU, exp(EQKE) (v² each), PVOU, exp(EQKP)
        (kv each)."""
        return 2 * (3 * v * v + 2 * k * v)

    def __init__(self, mats, v, k):
        self.v, self.k = v, k
        if _binary64_tables(self, mats, v, k):  # recorded pairs, in bulk: the same integers
            return
        mats = {name: _raw_matrix(mats[name]) for name in cubic.INPUTS}  # each end once
        x_exp = _common_exponent(mats["EU"] + mats["EVOU"] + mats["PVOU"])
        self.eu_lo, self.eu_hi = _integer_matrix(mats["EU"], [x_exp] * v)
        self.evou_lo, self.evou_hi = _integer_matrix(mats["EVOU"], [x_exp] * v)
        self.pvou_lo, self.pvou_hi = _integer_matrix(mats["PVOU"], [x_exp] * k)
        e, beta = mats["EXP_EQKE"], mats["EXP_EQKP"]
        self.e_lo, self.e_hi = _integer_matrix(e, [_common_exponent([r]) for r in e])
        self.b_lo, self.b_hi = _integer_matrix(beta, [_common_exponent([r]) for r in beta])
        _weights_nonnegative(self)

    def rows(self, q, m, tokens):
        """term[i][t] for every position i < k−1 and t in tokens, and the query
        row: vectors over the outputs o != m (in increasing order) of exact
        upper bounds of w_i·x_i(o), all in one unit (2^(x + e_q + β_q exponents));
        and the operations performed (ROW_COST per entry of every row)."""
        v, k = self.v, self.k
        outputs = [o for o in range(v) if o != m]
        eu_hi, eu_m = self.eu_hi[q], self.eu_lo[q][m]
        # base[i][o] >= EU[q,o] − EU[q,m] + PVOU[i,o] − PVOU[i,m]
        base = [[eu_hi[o] - eu_m + self.pvou_hi[i][o] - self.pvou_lo[i][m] for o in outputs]
                for i in range(k)]

        def row(i, t):
            w_lo, w_hi = self.e_lo[q][t] * self.b_lo[q][i], self.e_hi[q][t] * self.b_hi[q][i]
            evou_hi, evou_m = self.evou_hi[t], self.evou_lo[t][m]
            return [w_hi * x if x >= 0 else w_lo * x
                    for x in map(add, base[i], [evou_hi[o] - evou_m for o in outputs])]

        table = [{t: row(i, t) for t in tokens} for i in range(k - 1)]
        query_row = row(k - 1, q)
        terms = sum(len(r) for r in table) + 1  # rows of terms, each with 2 weight products
        return table, query_row, ROW_COST * len(outputs) * (len(base) + terms) + 2 * terms



def _weights_nonnegative(tables) -> None:
    """Rejected unless every recorded lower end of exp(EQKE) and exp(EQKP) is >= 0."""
    if any(x < 0 for row in tables.e_lo + tables.b_lo for x in row):
        raise Rejected("exact: an attention weight exp(EQKE) or exp(EQKP) has a recorded "
                       "enclosure reaching below 0")


def _binary64_tables(tables, mats, v, k) -> bool:
    """IntegerTables.__init__ for recorded (lo, hi) binary64 pairs, in bulk (C-level maps):
    sets the same exponents and integers as the general path, or returns False (mpmath
    intervals, or a group whose endpoints are all integers: the general path decides).

    Lemma: a finite binary64 x is n/d in lowest terms with d = 2^j (float.as_integer_ratio);
    its least exponent (odd mantissa, _raw_float) is −j when j > 0, and >= 0 when j = 0.  So
    for a group whose largest denominator D = 2^J has J > 0, the least exponent of its
    non-zero endpoints is E = −J (_common_exponent; a zero endpoint has none, and is the
    integer 0 at any exponent), and every endpoint is x = n·(D/d)·2^E: the integer
    n·(D/d), exactly (D/d a power of two)."""
    if any(type(x) is not tuple for name in cubic.INPUTS for x in mats[name][0][:1]):
        return False
    groups = [("EU", "EVOU", "PVOU")] + [(("EXP_EQKE", q),) for q in range(v)] \
        + [(("EXP_EQKP", q),) for q in range(v)]
    out = {}
    for group in groups:
        flats = []
        for name in group:
            rows = mats[name] if isinstance(name, str) else [mats[name[0]][name[1]]]
            try:
                ratios = list(map(float.as_integer_ratio,
                                  chain.from_iterable(chain.from_iterable(rows))))
            except (OverflowError, ValueError):
                raise Malformed("exact: a non-finite enclosure") from None
            flats.append((name, len(rows[0]), ratios))
        big = max(max(map(itemgetter(1), ratios), default=1) for _, _, ratios in flats)
        if big == 1:
            return False
        for name, cols, ratios in flats:
            ints = list(map(mul, map(itemgetter(0), ratios),
                            map(floordiv, repeat(big), map(itemgetter(1), ratios))))
            lo, hi = ints[0::2], ints[1::2]
            out[name] = ([lo[i:i + cols] for i in range(0, len(lo), cols)],
                         [hi[i:i + cols] for i in range(0, len(hi), cols)])
    tables.eu_lo, tables.eu_hi = out["EU"]
    tables.evou_lo, tables.evou_hi = out["EVOU"]
    tables.pvou_lo, tables.pvou_hi = out["PVOU"]
    for name, lo_name, hi_name in (("EXP_EQKE", "e_lo", "e_hi"), ("EXP_EQKP", "b_lo", "b_hi")):
        setattr(tables, lo_name, [out[(name, q)][0][0] for q in range(v)])
        setattr(tables, hi_name, [out[(name, q)][1][0] for q in range(v)])
    _weights_nonnegative(tables)
    return True

def _raw_matrix(matrix):
    """The matrix with each entry replaced by its two raw endpoints (_raw_endpoints)."""
    return [[_Raw(_raw_endpoints(x)) for x in row] for row in matrix]


class _Raw:
    """An entry already converted: its raw endpoints, where an mpmath interval has them."""

    __slots__ = ("_mpi_",)

    def __init__(self, ends):
        self._mpi_ = ends


def _raw_endpoints(x):
    """The endpoints of interval x as raw mpmath numbers (sign, man, exp, bc),
    value (−1)^sign·man·2^exp.  x is an mpmath interval or a recorded (lo, hi) pair of
    binary64 numbers (converted exactly by mpmath's own from_float: the same raw
    numbers as the interval iv.mpf((lo, hi)) holds)."""
    ends = tuple(map(_raw_float, x)) if type(x) is tuple else x._mpi_
    for _, man, exp, _ in ends:
        if man == 0 and exp != 0:
            raise Malformed("exact: a non-finite enclosure")
    return ends


def _raw_float(x: float):
    """A finite binary64 number as mpmath's raw number (sign, man, exp, bc), exactly and
    normalised as mpmath normalises (odd mantissa; zero is (0, 0, 0, 0)): the tuple
    mpmath.libmp.from_float(x) returns (tests/test_bulk_arith.py compares them)."""
    if not isfinite(x):
        raise Malformed("exact: a non-finite enclosure")
    n, d = x.as_integer_ratio()  # exact: d is a power of two
    if not n:
        return (0, 0, 0, 0)
    sign = n < 0
    n = -n if sign else n
    if d > 1:  # n/d in lowest terms: n is odd
        return (int(sign), n, 1 - d.bit_length(), n.bit_length())
    zeros = (n & -n).bit_length() - 1
    n >>= zeros
    return (int(sign), n, zeros, n.bit_length())


def _common_exponent(rows):
    """The least exponent of the non-zero endpoints in rows (0 if none): every
    endpoint is an integer times 2^that."""
    exps = [exp for row in rows for x in row for _, man, exp, _ in _raw_endpoints(x) if man]
    return min(exps, default=0)


def _integer(raw, exponent):
    """The raw mpmath number divided by 2^exponent: an integer, exactly."""
    sign, man, exp, _ = raw
    if not man:  # zero (mpmath's zero has exponent 0, which may lie below `exponent`)
        return 0
    return (-man if sign else man) << (exp - exponent)


def _integer_matrix(matrix, exponents):
    """(lower ends, upper ends) of each row r as integers times 2^exponents[r]."""
    lo, hi = [], []
    for row, exponent in zip(matrix, exponents):
        ends = [_raw_endpoints(x) for x in row]
        lo.append([_integer(a, exponent) for a, _ in ends])
        hi.append([_integer(b, exponent) for _, b in ends])
    return lo, hi


# --- the residue, sequence by sequence --------------------------------------

def _residue_q(t: IntegerTables, plan: Plan, charge, q, record=None, track=False):
    """(residue sequences with query q, how many are certified, the operations
    performed, the note's best).  record: a list to append (tokens, certified) to, for every
    sequence.  track (the note): best = [T, W, tokens] of the certified sequence with the
    largest T/W, T = max_o T(o) and W = Σ_i w⁺_i as exact integers (units fixed by q), or
    [] (none, or not tracked); no operation is counted for it."""
    size = certified = performed = 0
    best = [] if track else None
    weights = ([[t.e_hi[q][u] * t.b_hi[q][i] for u in range(t.v)] for i in range(t.k)]
               if track else None)
    by_m = {}
    for m, c, bad in plan.classes[q]:
        by_m.setdefault(m, []).append((c, bad))
    for m, classes in by_m.items():
        charge(0)  # enforces the time limit
        table, query_row, ops = t.rows(q, m, plan.tokens[(q, m)])
        performed += ops
        for c, bad in classes:
            n, ok, ops = _class_residue(t.k, q, m, c, bad, table, query_row, record, charge,
                                        best, weights)
            size, certified, performed = size + n, certified + ok, performed + ops
    return size, certified, performed, best or []


def _class_residue(k, q, m, c, bad, table, query_row, record, charge, best=None,
                   weights=None):
    """Enumerate the residue of class (q, m, c): every placement P of c
    non-query positions and every filling of P with tokens < m, at least one
    of them in `bad`; m on the other non-query positions, q at position k−1.
    Returns (sequences, certified, operations: one per entry of a vector addition
    or maximum).  best, weights: the note's tracking (_residue_q)."""
    size = certified = ops = 0
    everything = list(range(m))
    width = len(query_row)  # the outputs o != m
    for placement in combinations(range(k - 1), c):
        charge(0)  # enforces the time limit
        base = query_row
        for i in range(k - 1):
            if i not in placement:
                base = list(map(add, base, table[i][m]))
                ops += width
        if c == 0:
            size += 1
            value = max(base)
            ok = value < 0
            ops += width
            certified += ok
            if record is not None:
                record.append(((m,) * (k - 1) + (q,), ok))
            if ok and best is not None:
                _keep(best, value, (m,) * (k - 1) + (q,), weights)
            continue
        stack = [(0, base, False, ())]  # (depth, partial sum, a bad token so far, tokens)
        bad_set = set(bad)
        while stack:
            charge(0)  # the clock: a pop pushes or decides up to m vectors of v − 1 entries
            depth, partial, has_bad, chosen = stack.pop()
            rows = table[placement[depth]]
            if depth == c - 1:  # the last position: leaves
                for u in (everything if has_bad else bad):
                    value = max(map(add, partial, rows[u]))
                    ok = value < 0
                    ops += 2 * width
                    size += 1
                    certified += ok
                    if record is not None:
                        record.append((_sequence(k, q, m, placement, chosen + (u,)), ok))
                    if ok and best is not None:
                        _keep(best, value, _sequence(k, q, m, placement, chosen + (u,)),
                              weights)
                continue
            for u in everything:
                stack.append((depth + 1, list(map(add, partial, rows[u])),
                              has_bad or u in bad_set, chosen + (u,)))
            ops += width * len(everything)
    return size, certified, ops


def _keep(best, value, tokens, weights) -> None:
    """best = [T, W, tokens] if T/W is above best's (W = Σ_i w⁺_i > 0, exact integers)."""
    weight = sum(weights[i][u] for i, u in enumerate(tokens))
    if not best or value * best[1] > best[0] * weight:
        best[:] = [value, weight, tokens]


def _sequence(k, q, m, placement, tokens):
    seq = [m] * (k - 1) + [q]
    for i, u in zip(placement, tokens):
        seq[i] = u
    return tuple(seq)


# --- parallel map (as rule cubic: forked workers inherit the tables) ----------

_SHARED = {}


def _map(jobs, args, queries, track=False):
    """[_residue_q(*args, q) for q in queries], in `jobs` forked processes.  A
    worker's exception propagates; a dead worker raises BrokenProcessPool
    (exit 2): never a pass."""
    if jobs <= 1 or not pool.can_fork():
        return [_residue_q(*args, q, None, track) for q in queries]
    _SHARED["args"], _SHARED["track"] = args, track
    try:
        return pool.map_in_order(jobs, _residue_q_shared, queries, tick=lambda: args[2](0))
    finally:
        _SHARED.clear()


def _residue_q_shared(q):
    return _residue_q(*_SHARED["args"], q, None, _SHARED["track"])
