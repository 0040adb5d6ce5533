"""The distance-to-float32 notes of the attention-only Max-of-K rules (issue 24; spec/rules.md
§distance to float32): for a real certificate, check-cert prints the smallest certified margin
and the float32 error bound δ (Lemma G) at its place.

- cubic: the printed margin and class equal an independent numpy recomputation of the
  formula (the rule's bounds (I), (II), (II′) per placement extreme over the class's weight
  bound), and every covered sequence's float64 margin is at least its class's bound.
- exact: the printed margin and place equal the smaller of that cover formula and the residue
  formula −max_o T(o)/Σ_i w⁺_i (recomputed in numpy), on a model whose residue holds it.
- subcubic_gap: every covered sequence's float64 margin is at least the printed margin, and the
  printed class has a covered sequence.
- brute_force and all of the above: the printed float32 error equals
  float32.attention_only_deltas (the whole table, recomputed here) at the printed place;
  mpmath and arb print the same note; --json's float32_distance carries the numbers.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from checker import cli

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "generator" / "models"
CERTS = ROOT / "certs"
V8 = MODELS / "max3_v8_seed0.pt"
NUMBER = r"([-+]?\d[\d.]*(?:e[-+]?\d+)?)"


def _summary(capsys, cert: Path, model: Path, arith: str = "mpmath") -> dict:
    code = cli.main([str(cert), "--model", str(model), "--json", "--float32-distance",
                     "--arith", arith])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def _note(summary: dict) -> str:
    (note,) = [n for n in summary["rules"]]
    return note


def _printed(note: str) -> tuple[float, str, float]:
    found = re.search(r"smallest certified margin " + NUMBER + r" at (\([^)]*\)|\[[^\]]*\])",
                      note)
    error = re.search(r"float32 error " + NUMBER, note)
    assert found and error, note
    return float(found.group(1)), found.group(2), float(error.group(1))


def _class(at: str) -> tuple[int, int, int]:
    found = re.fullmatch(r"\(q=(\d+), m=(\d+), c=(\d+)\)", at)
    assert found, at
    return tuple(int(x) for x in found.groups())


def _rule_line(cert: Path) -> tuple[dict, dict]:
    """(the rule line, {line id: line}) of a certificate file."""
    lines = {}
    for text in cert.read_text().splitlines():
        obj = json.loads(text)
        lines[obj["id"]] = obj
    rule = next(o for o in lines.values() if o["kind"] == "rule")
    return rule, lines


def _recorded(cert: Path) -> dict:
    """{input name: (lo, hi)} numpy float64 arrays of the rule line's recorded inputs."""
    rule, lines = _rule_line(cert)
    out = {}
    for name, ref in rule["inputs"].items():
        line = lines[ref]
        shape = tuple(line["shape"])
        out[name] = tuple(np.frombuffer(base64.b64decode(line[end]), dtype="<f8").reshape(shape)
                          for end in ("lo", "hi"))
    return out


def _weights(model: Path):
    from generator.modelfile import load_model

    return load_model(str(model)).weights


def _true_margins(model: Path) -> dict:
    """{sequence: ℓ_m − max_{o≠m} ℓ_o} by the independent float64 forward pass."""
    from generator.model import logits_float64

    w = _weights(model)
    v, k = w.dims.d_vocab, w.dims.n_ctx
    tokens = np.array(list(itertools.product(range(v), repeat=k)))
    logits = logits_float64(w, tokens)
    rows = np.arange(len(tokens))
    top = tokens.max(axis=1)
    best = logits[rows, top].copy()
    logits[rows, top] = -np.inf
    return dict(zip(map(tuple, tokens.tolist()), best - logits.max(axis=1)))


def _deltas(model: Path) -> list:
    """float32.attention_only_deltas over the model's weights (the whole table)."""
    from checker import float32
    from checker.modelspec import Dims
    from checker.rules import ATTN_ONLY_WEIGHTS

    w = _weights(model)
    d = w.dims
    rows = {}
    for name in ATTN_ONLY_WEIGHTS:
        a = np.asarray(getattr(w, name), dtype=np.float32).astype(np.float64)
        rows[name] = (a.reshape(1, -1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])).tolist()
    return float32.attention_only_deltas(Dims(d.d_vocab, d.n_ctx, d.d_model, d.d_head), rows)


def _delta_all(deltas, q, m) -> float:
    return deltas[q][m] + max(x for o, x in enumerate(deltas[q]) if o != m)


# --- the cubic cover formula, recomputed ---------------------------------------------------

def _up(lo, hi, x):
    """≥ W·X for W ∈ [lo, hi] ⊂ [0, ∞), X ≤ x."""
    return np.where(x >= 0, hi * x, lo * x)


def _good(cert: Path) -> dict:
    rule, _ = _rule_line(cert)
    return {(e[0], e[1], e[2]): (e[3], e[4] if len(e) == 5 else 0) for e in rule["hints"]["good"]}


def cubic_class_margins(rec: dict, good: dict, v: int, k: int) -> dict:
    """{(q, m, c): the class's margin bound} (spec/rules.md §distance to float32, cubic),
    straight from Lemmas 1–4 in numpy: min over the placement extremes S of −V_S / W_S."""
    eu_lo, eu_hi = rec["EU"]
    ev_lo, ev_hi = rec["EVOU"]
    pv_lo, pv_hi = rec["PVOU"]
    e_lo, e_hi = rec["EXP_EQKE"]
    b_lo, b_hi = rec["EXP_EQKP"]
    out = {}
    for (m, q, c), (mask, joint) in good.items():
        d_eu = eu_hi[q] - eu_lo[q, m]
        dd = d_eu + (pv_hi[:k - 1] - pv_lo[:k - 1, m][:, None]).max(axis=0)
        x_m = dd + ev_hi[m] - ev_lo[m, m]
        y_q = d_eu + pv_hi[k - 1] - pv_lo[k - 1, m] + ev_hi[q] - ev_lo[q, m]
        p = _up(e_lo[q, m], e_hi[q, m], x_m)
        qv = _up(b_lo[q, k - 1] * e_lo[q, q], b_hi[q, k - 1] * e_hi[q, q], y_q)
        big_lo, big_hi = b_lo[q, :k - 1].sum(), b_hi[q, :k - 1].sum()
        wq = b_hi[q, k - 1] * e_hi[q, q]
        others = [o for o in range(v) if o != m]
        if c == 0:
            if mask:
                value = (_up(big_lo, big_hi, p) + qv)[others].max()
                out[(q, m, 0)] = -value / (wq + big_hi * e_hi[q, m])
            continue
        tokens = [u for u in range(m) if mask >> u & 1]
        if not tokens:
            continue
        if c == k - 1:
            extremes = [(big_lo, big_hi, None)]
        else:
            s_lo = np.sort(b_lo[q, :k - 1])[:c].sum()
            s_hi = np.sort(b_hi[q, :k - 1])[::-1][:c].sum()
            extremes = [(s, s, (big_lo - s, big_hi - s)) for s in (s_lo, s_hi)]
        margins = []
        for lo, hi, rest in extremes:
            a = qv if rest is None else _up(rest[0], rest[1], p) + qv
            value = -np.inf
            for u in tokens:
                x_u = dd + ev_hi[u] - ev_lo[u, m]
                se = (lo * e_lo[q, u], hi * e_hi[q, u])
                value = max(value, _up(*se, x_u[u]) + a[u])  # (I)
                rest_o = [o for o in range(v) if o not in (m, u)]
                if not rest_o:
                    continue
                if joint >> u & 1:  # (II′)
                    value = max(value, (_up(*se, x_u[rest_o]) + a[rest_o]).max())
                else:  # (II)
                    split = dd[rest_o].max() + ev_hi[u, rest_o].max() - ev_lo[u, m]
                    value = max(value, _up(*se, split) + a[rest_o].max())
            weight = wq + (0.0 if rest is None else rest[1] * e_hi[q, m]) \
                + hi * max(e_hi[q, u] for u in tokens)
            margins.append(-value / weight)
        out[(q, m, c)] = min(margins)
    return out


def _class_of(seq) -> tuple[int, int, int]:
    q, m = seq[-1], max(seq)
    return q, m, sum(t < m for t in seq[:-1])


def _covered_by_cubic(seq, good) -> bool:
    q, m, c = _class_of(seq)
    mask = good.get((m, q, c), (0, 0))[0]
    lower = [t for t in seq[:-1] if t < m]
    return bool(mask) and all(mask >> t & 1 for t in lower)


# --- cubic ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["max3_v8_seed0", "max5_v16_seed0"])
def test_cubic_margin_equals_recomputation(capsys, name):
    cert, model = CERTS / f"{name}.cubic.jsonl", MODELS / f"{name}.pt"
    summary = _summary(capsys, cert, model)
    margin, at, error = _printed(_note(summary))
    w = _weights(model)
    v, k = w.dims.d_vocab, w.dims.n_ctx
    margins = cubic_class_margins(_recorded(cert), _good(cert), v, k)
    place = min(margins, key=margins.get)
    assert _class(at) == place
    assert margin == pytest.approx(margins[place], rel=5e-3)  # printed with 3 digits
    q, m, _ = place
    assert error == pytest.approx(_delta_all(_deltas(model), q, m), rel=5e-3)
    (row,) = summary["float32_distance"]
    assert row == {"rule": "cubic", "smallest_margin": margin, "at": at,
                   "float32_error": error}


def test_cubic_class_bound_is_below_every_covered_margin():
    """The formula is a lower bound of ℓ_m − ℓ_o on every covered sequence of its class (so
    the printed number, its minimum, is a certified margin); and the smallest class bound is
    attained within a factor of the class's own smallest true margin."""
    cert = CERTS / "max3_v8_seed0.cubic.jsonl"
    good = _good(cert)
    margins = cubic_class_margins(_recorded(cert), good, 8, 3)
    truth = _true_margins(V8)
    covered = [s for s in truth if _covered_by_cubic(s, good)]
    assert len(covered) == 511
    for seq in covered:
        assert truth[seq] >= margins[_class_of(seq)] - 1e-9, seq
    place = min(margins, key=margins.get)
    in_place = [truth[s] for s in covered if _class_of(s) == place]
    assert in_place and margins[place] <= min(in_place) <= 10 * margins[place]


@pytest.mark.parametrize("cert", ["max3_v8_seed0.cubic.jsonl", "max3_v8_seed0.subcubic.jsonl",
                                  "max3_v8_seed0.brute-force.jsonl",
                                  "max5_v16_seed0.exact.jsonl"])
def test_mpmath_and_arb_print_the_same_note(capsys, cert):
    model = MODELS / (cert.split(".")[0] + ".pt")
    notes = [re.sub(r" \(\d+\.\d s\)$", "", _note(_summary(capsys, CERTS / cert, model, a)))
             for a in ("mpmath", "arb")]
    assert "smallest certified margin" in notes[0] and "float32 error" in notes[0]
    assert notes[0] == notes[1]


# --- exact ------------------------------------------------------------------------------------

def _residue_margins(rec: dict, good: dict, v: int, k: int) -> dict:
    """{residue sequence: −max_o T(o)/Σ_i w⁺_i} over the residue sequences with T < 0
    (Lemma E2 in numpy), and the o attaining it."""
    eu_lo, eu_hi = rec["EU"]
    ev_lo, ev_hi = rec["EVOU"]
    pv_lo, pv_hi = rec["PVOU"]
    e_lo, e_hi = rec["EXP_EQKE"]
    b_lo, b_hi = rec["EXP_EQKP"]
    out = {}
    for seq in itertools.product(range(v), repeat=k):
        if _covered_by_cubic(seq, good):
            continue
        q, m = seq[-1], max(seq)
        total, weight = np.zeros(v), 0.0
        for i, t in enumerate(seq):
            x = eu_hi[q] - eu_lo[q, m] + ev_hi[t] - ev_lo[t, m] + pv_hi[i] - pv_lo[i, m]
            total += _up(e_lo[q, t] * b_lo[q, i], e_hi[q, t] * b_hi[q, i], x)
            weight += e_hi[q, t] * b_hi[q, i]
        total[m] = -np.inf
        if total.max() < 0:
            out[seq] = (-total.max() / weight, int(total.argmax()))
    return out


def test_exact_margin_equals_recomputation(capsys, tmp_path):
    """A random model (weak cubic cover): the smallest margin is a residue sequence's."""
    from tests.soundness_helpers import certify, random_weights

    weights = random_weights(6, 3, 8, seed=5)
    model, cert, _ = certify(weights, tmp_path, "exact")
    summary = _summary(capsys, cert, model)
    margin, at, error = _printed(_note(summary))
    rec, good = _recorded(cert), _good(cert)
    cover = cubic_class_margins(rec, good, 6, 3)
    residue = _residue_margins(rec, good, 6, 3)
    assert summary["correct"] == len(residue) + sum(_covered_by_cubic(s, good) for s in
                                                    itertools.product(range(6), repeat=3))
    seq = min(residue, key=lambda s: residue[s][0])
    assert not cover or residue[seq][0] < min(cover.values())  # the residue holds it here
    assert at == str(list(seq))
    assert margin == pytest.approx(residue[seq][0], rel=5e-3)
    o = residue[seq][1]
    assert f"at o = {o}" in _note(summary)
    deltas = _deltas(model)
    assert error == pytest.approx(deltas[seq[-1]][o] + deltas[seq[-1]][max(seq)], rel=5e-3)
    truth = _true_margins(model)
    assert all(truth[s] >= residue[s][0] - 1e-9 for s in residue)  # a certified margin
    (row,) = summary["float32_distance"]
    assert row["rule"] == "exact" and row["smallest_margin"] == margin and row["at"] == at


def test_exact_cover_margin_when_the_cover_holds_it(capsys, tmp_path):
    """max3_v8's cubic hints as an exact line: 511 of 512 in the cover, no residue sequence
    certified, so the cover's class is printed."""
    cert = CERTS / "max3_v8_seed0.cubic.jsonl"
    lines = cert.read_text().splitlines()
    rule = json.loads(lines[-2])
    rule["rule"] = "exact"
    path = tmp_path / "exact.jsonl"
    path.write_text("\n".join(lines[:-2] + [json.dumps(rule), lines[-1]]) + "\n")
    margin, at, error = _printed(_note(_summary(capsys, path, V8)))
    margins = cubic_class_margins(_recorded(cert), _good(cert), 8, 3)
    place = min(margins, key=margins.get)
    assert _class(at) == place and margin == pytest.approx(margins[place], rel=5e-3)
    assert error == pytest.approx(_delta_all(_deltas(V8), *place[:2]), rel=5e-3)


# --- subcubic_gap -------------------------------------------------------------------------------

def _gaps(cert: Path) -> tuple[str, dict]:
    rule, _ = _rule_line(cert)
    return rule["hints"]["direct"], {(e[0], e[1], e[2]): tuple(e[3:]) for e in
                                     rule["hints"]["gaps"]}


def _row_gap(hi, lo, m):
    """max_{o≠m} hi[o] − lo[m]."""
    return np.delete(hi, m).max() - lo[m]


def subcubic_entry_margins(rec: dict, direct: str, gaps: dict, v: int, k: int) -> dict:
    """{(q, m, c): the entry's margin bound} (spec/rules.md §distance to float32,
    subcubic_gap), from Lemmas 5–7 and 6b in numpy: min over the placement extremes S of
    −f(S) / (β_{k−1}e_q + (B − S)e_m + S·max_{t≤m−g} e_t), upper ends."""
    eu_lo, eu_hi = rec["EU"]
    ev_lo, ev_hi = rec["EVOU"]
    pv_lo, pv_hi = rec["PVOU"]
    b_lo, b_hi = rec["EXP_EQKP"]
    e_lo, e_hi = (np.exp(x) for x in rec["EQKE"])
    rho = np.array([[_row_gap(ev_hi[t], ev_lo[t], m) for m in range(v)] for t in range(v)])
    pos = np.array([[_row_gap(pv_hi[i], pv_lo[i], m) for m in range(v)] for i in range(k)])
    p_q, p_n = pos[k - 1], pos[:k - 1].max(axis=0)
    rho_pre = np.maximum.accumulate(rho, axis=0)
    mean_lo, mean_hi = eu_lo.mean(axis=0), eu_hi.mean(axis=0)

    def alphas(q, m):
        out = []
        if direct in ("max_diff", "min"):
            u = _row_gap(eu_hi[q], eu_lo[q], m)
            out.append((u + rho[m, m] + p_n[m], u + rho[q, m] + p_q[m], u + p_n[m]))
        if direct in ("mean+diff", "min"):
            n = _row_gap(eu_hi[q] - mean_lo, eu_lo[q] - mean_hi, m)
            e_bar = _row_gap(mean_hi, mean_lo, m)
            c_m = _row_gap(mean_hi + ev_hi[m], mean_lo + ev_lo[m], m)
            own = c_m if q == m else e_bar + rho[q, m]
            out.append((c_m + n + p_n[m], own + n + p_q[m], e_bar + n + p_n[m]))
        return [min(x) for x in zip(*out)]

    def mu(q, m, g, h, a_p):
        values = [_up(e_lo[q, u], e_hi[q, u], a_p + rho[u, m])
                  for u in range(max(0, m - h + 1), m - g + 1)]
        if m - h >= 0:
            a = a_p + rho_pre[m - h, m]
            values.append(_up(e_lo[q, :m - h + 1].min(), e_hi[q, :m - h + 1].max(), a))
        return max(values)

    out = {}
    for (m, q, c), gh in gaps.items():
        a_m, a_q, a_p = alphas(q, m)
        term_q = _up(b_lo[q, k - 1] * e_lo[q, q], b_hi[q, k - 1] * e_hi[q, q], a_q)
        term_m = _up(e_lo[q, m], e_hi[q, m], a_m)
        wq = b_hi[q, k - 1] * e_hi[q, q]
        big_lo, big_hi = b_lo[q, :k - 1].sum(), b_hi[q, :k - 1].sum()
        if c == 0:
            f = _up(big_lo, big_hi, term_m) + term_q
            out[(q, m, 0)] = -f / (wq + big_hi * e_hi[q, m])
            continue
        g = gh[0]
        e_gap = e_hi[q, :m - g + 1].max()
        mu1 = mu(q, m, gh[0], gh[1], a_p)
        extra, mu_s = 0.0, mu1
        if len(gh) == 4:  # two gaps (Lemma 6b)
            mu_s = mu(q, m, gh[2], gh[3], a_p)
            d_bar = mu1 - mu_s
            extra = (b_hi[q, :k - 1].max() if d_bar >= 0 else b_lo[q, :k - 1].min()) * d_bar
        if c == k - 1:
            f = term_q + _up(big_lo, big_hi, mu_s) + extra
            out[(q, m, c)] = -f / (wq + big_hi * e_gap)
            continue
        margins = []
        for s in (np.sort(b_lo[q, :k - 1])[:c].sum(), np.sort(b_hi[q, :k - 1])[::-1][:c].sum()):
            f = term_q + s * mu_s + _up(big_lo - s, big_hi - s, term_m) + extra
            margins.append(-f / (wq + (big_hi - s) * e_hi[q, m] + s * e_gap))
        out[(q, m, c)] = min(margins)
    return out


@pytest.mark.parametrize("name", ["max3_v8_seed0", "max3_v32_seed0"])
def test_subcubic_margin_equals_recomputation(capsys, name):
    cert, model = CERTS / f"{name}.subcubic.jsonl", MODELS / f"{name}.pt"
    summary = _summary(capsys, cert, model)
    margin, at, error = _printed(_note(summary))
    direct, gaps = _gaps(cert)
    w = _weights(model)
    v, k = w.dims.d_vocab, w.dims.n_ctx
    margins = subcubic_entry_margins(_recorded(cert), direct, gaps, v, k)
    place = min(margins, key=margins.get)
    assert _class(at) == place
    assert margin == pytest.approx(margins[place], rel=5e-3)
    assert error == pytest.approx(_delta_all(_deltas(model), *place[:2]), rel=5e-3)
    (row,) = summary["float32_distance"]
    assert row == {"rule": "subcubic_gap", "smallest_margin": margin, "at": at,
                   "float32_error": error}


@pytest.mark.parametrize("name", ["max3_v8_seed0", "max3_v32_seed0"])
def test_subcubic_entry_bound_is_below_every_covered_margin(name):
    """Each entry's bound is a lower bound of ℓ_m − ℓ_o on every sequence it covers (so the
    printed minimum is a certified margin)."""
    from tests.soundness_helpers import subcubic_covered

    cert, model = CERTS / f"{name}.subcubic.jsonl", MODELS / f"{name}.pt"
    direct, gaps = _gaps(cert)
    w = _weights(model)
    v, k = w.dims.d_vocab, w.dims.n_ctx
    margins = subcubic_entry_margins(_recorded(cert), direct, gaps, v, k)
    truth = _true_margins(model)
    covered = subcubic_covered(gaps, v, k)
    assert covered
    for seq in covered:
        assert truth[seq] >= margins[_class_of(seq)] - 1e-9, seq


# --- brute_force's δ ---------------------------------------------------------------------------

def test_brute_force_delta_at_the_smallest_margin(capsys):
    summary = _summary(capsys, CERTS / "max3_v8_seed0.brute-force.jsonl", V8)
    note = _note(summary)
    margin, at, error = _printed(note)
    seq = tuple(int(x) for x in at.strip("[]").split(","))
    o = int(re.search(r"smallest at o = (\d+)", note).group(1))
    q, m = seq[-1], max(seq)
    # o is the output attaining the smallest margin at seq (float64 forward pass)
    from generator.model import logits_float64

    logits = logits_float64(_weights(V8), np.array([seq]))[0]
    assert o == max((x for x in range(8) if x != m), key=lambda x: logits[x])
    deltas = _deltas(V8)
    assert error == pytest.approx(deltas[q][o] + deltas[q][m], rel=5e-3)
    (row,) = summary["float32_distance"]
    assert row["float32_error"] == error and row["smallest_margin"] == margin


def test_the_kernel_finds_the_weights_by_their_term_and_refuses_width():
    """A real line's inputs are unchanged (the weights are found by their canonical term, not
    listed); a weight line with width, or no weights, gives 'float32 error unavailable'."""
    from checker import certificate, float32
    from checker.limits import Limits
    from checker.rules import ATTN_ONLY_WEIGHTS

    lines = (CERTS / "max3_v8_seed0.brute-force.jsonl").read_text().splitlines()
    rule = json.loads(lines[-2])
    assert set(rule["inputs"]) == {"EXP_EQKE", "EXP_EQKP", "EVOU", "PVOU", "EU"}
    checker = certificate.CertificateChecker(Limits())
    for text in lines[:-2]:
        checker.feed(text)
    found = checker._note_weights(ATTN_ONLY_WEIGHTS)
    assert set(found) == set(ATTN_ONLY_WEIGHTS)
    w = _weights(V8)
    assert np.array_equal(np.array(found["W_E"]), w.W_E.astype(np.float64))
    value = checker.values[1]  # W_E, with width
    checker.values[1] = certificate.Value(value.term, value.lo,
                                          tuple(x + 1.0 for x in value.hi), value.shape)
    assert checker._note_weights(ATTN_ONLY_WEIGHTS) is None
    dims = checker.dims
    assert float32.distance_note(dims, lambda: None, 0, 1).startswith(
        "float32 error unavailable")
    assert float32.distance_note(dims, None, 0, 1).startswith(  # not asked for
        "float32 error: check-cert --float32-distance computes it")
    bad = float32.distance_note(dims, lambda: {"W_E": [[0.5]]}, 0, 1)  # Lemma G fails
    assert bad.startswith("float32 error unavailable (")
    assert cli.float32_distance([f"brute_force: smallest certified margin 1.5 at [1, 0], {bad}"]) \
        == [{"rule": "brute_force", "smallest_margin": 1.5, "at": "[1, 0]",
             "float32_error": None}]


# --- cubic_mix -----------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["cubic-mix", "cubic-mix:placements=each"])
@pytest.mark.parametrize("name", ["max3_v8_seed0", "v6k4-random"])
def test_cubic_mix_margin_equals_recomputation(capsys, tmp_path, strategy, name):
    """σ = the largest counted Σ Ψ of each class (from the rule's recorded exact columns, by
    enumerating the tuples), W̄ from the recorded weights, −(σ/c)/W̄ minimised over the
    classes; and every counted sequence's float64 margin is at least its class's bound."""
    from fractions import Fraction

    from checker.rules import cubic_mix
    from tests.soundness_helpers import accepted_inputs, certify, random_weights

    weights = random_weights(6, 4, 4, 7) if name == "v6k4-random" else \
        _weights(MODELS / f"{name}.pt")
    v, k = weights.dims.d_vocab, weights.dims.n_ctx
    model, cert, lines = certify(weights, tmp_path, strategy)
    summary = _summary(capsys, cert, model)
    margin, at, error = _printed(_note(summary))
    dims, mats, hints = accepted_inputs(lines)
    record = []
    cubic_mix.check(dims, mats, hints, lambda work: None, record=record)
    rec = _recorded(cert)
    e_hi, (b_lo, b_hi) = rec["EXP_EQKE"][1], rec["EXP_EQKP"]
    bounded = hints.get("placements") == "bounds"
    margins, by_sequence = {}, {}
    zero = {(m, q, 0): (1, 0) for q, m, placement, columns, counted in record
            if columns is None and counted}
    margins.update(cubic_class_margins(rec, zero, v, k))
    for q, m, placement, columns, counted in record:
        if columns is None or not counted:
            continue
        c = len(placement)
        values = [[Fraction(man) * Fraction(2) ** e for man, e in col] for col in columns]
        sums = {tokens: sum(values[j][t] for j, t in enumerate(tokens))
                for tokens in itertools.product(range(m), repeat=c)}
        sigma = max(x for x in sums.values() if x < 0)
        s_lo = np.sort(b_lo[q, :k - 1])[:c].sum()
        rest = (0.0 if c == k - 1 else b_hi[q, :k - 1].sum() - s_lo) if bounded else \
            sum(b_hi[q, i] for i in range(k - 1) if i not in placement)
        spread = c * b_hi[q, :k - 1].max() if bounded else b_hi[q, list(placement)].sum()
        weight = b_hi[q, k - 1] * e_hi[q, q] + rest * e_hi[q, m] + spread * e_hi[q, :m].max()
        bound = -float(sigma / c) / weight
        margins[(q, m, c)] = min(bound, margins.get((q, m, c), np.inf))
        for tokens, x in sums.items():
            if x < 0:
                seq = [m] * (k - 1) + [q]
                for i, t in zip(placement, tokens):
                    seq[i] = t
                by_sequence[tuple(seq)] = -float(x / c) / weight
    place = min(margins, key=margins.get)
    assert _class(at) == place
    assert margin == pytest.approx(margins[place], rel=5e-3)
    assert error == pytest.approx(_delta_all(_deltas(model), *place[:2]), rel=5e-3)
    if v ** k <= 4096:
        truth = _true_margins(model)
        for seq, bound in by_sequence.items():
            assert truth[seq] >= bound - 1e-9, seq
    (row,) = summary["float32_distance"]
    assert row == {"rule": "cubic_mix", "smallest_margin": margin, "at": at,
                   "float32_error": error}


@pytest.mark.parametrize("rule", ["cubic", "exact"])
def test_a_failing_note_never_fails_the_check(capsys, monkeypatch, tmp_path, rule):
    """The note's computation raising (here: cubic.margin_note) is named in the note; the
    verdict and the count stand."""
    from checker.rules import cubic

    def broken(*args):
        raise ZeroDivisionError("planted")
    monkeypatch.setattr(cubic, "margin_note", broken)
    cert = CERTS / "max3_v8_seed0.cubic.jsonl"
    if rule == "exact":
        lines = cert.read_text().splitlines()
        line = json.loads(lines[-2])
        line["rule"] = "exact"
        cert = tmp_path / "exact.jsonl"
        cert.write_text("\n".join(lines[:-2] + [json.dumps(line), lines[-1]]) + "\n")
    summary = _summary(capsys, cert, V8)
    assert summary["correct"] == 511
    assert "smallest certified margin unavailable (ZeroDivisionError)" in _note(summary)
    assert summary["float32_distance"] == []


def test_largest_below_matches_enumeration():
    """cubic_mix's σ when not every tuple counts: the largest tuple sum below the limit."""
    import random

    from checker.rules.cubic_mix import _largest_below

    rng = random.Random(3)
    for _ in range(300):
        c = rng.randint(1, 3)
        columns = [sorted(rng.randint(-50, 40) for _ in range(rng.randint(1, 6)))
                   for _ in range(c)]
        limit = rng.randint(-30, 10)
        sums = [sum(t) for t in itertools.product(*columns) if sum(t) < limit]
        assert _largest_below(columns, limit) == (max(sums) if sums else None)


def test_costly_notes_only_on_request(capsys):
    """Without --float32-distance a real check computes neither the compact rules' margins
    nor Lemma G's δ (they cost up to ~1.5x the check: issue 22's speed); the verdict, count
    and work are the same either way, and the request adds the numbers."""
    model = MODELS / "max4_v64_seed0.pt"
    cert = CERTS / "max4_v64_seed0.cubic.jsonl"
    runs = {}
    for flag in ([], ["--float32-distance"]):
        assert cli.main([str(cert), "--model", str(model), "--json", "--arith", "arb",
                         *flag]) == 0
        runs[bool(flag)] = json.loads(capsys.readouterr().out)
    plain, asked = runs[False], runs[True]
    assert (plain["correct"], plain["work"]) == (asked["correct"], asked["work"])
    assert plain["float32_distance"] == []
    assert not any("smallest certified margin" in n for n in plain["rules"])
    (entry,) = asked["float32_distance"]
    assert entry["rule"] == "cubic" and 0 < entry["smallest_margin"] < entry["float32_error"]
    brute = CERTS / "max3_v8_seed0.brute-force.jsonl"
    assert cli.main([str(brute), "--model", str(V8), "--json"]) == 0
    (note,) = [n for n in json.loads(capsys.readouterr().out)["rules"]
               if n.startswith("brute_force")]
    assert "smallest certified margin" in note and "--float32-distance computes it" in note
