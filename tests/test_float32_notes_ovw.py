"""The overwhelm rules' "distance to float32" notes on REAL certificates (issue 24;
spec/rules.md §distance to float32): overwhelm_free and overwhelm_perm print their smallest
certified margin, its (query position p, logit m) and the float32 error δ_p[q][o] +
δ_p[q][m] there (Lemma G@p, from the weight lines the kernel finds by their canonical term);
overwhelm_family on one layer its smallest slack and E(g_t)/upper(σ) there (Lemma
W-family's widening over the real tables); on several layers its smallest slack alone.

For each: the printed margin lies below the margin of every completion (enumerated, float64
for the attention-only models, 200 bits for the deep one) and equals an independent
recomputation; the printed float32 error equals an independent recomputation at the printed
place (the full attention_only_deltas at that position; numpy's E(g_t) from the weights);
every float32 evaluation there keeps margin − error; mpmath and arb print the same; --json's
float32_distance carries the numbers; the notes change no verdict, count or proof length, and
a failure while computing one is named, the time limit standing.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
from overwhelm_fixtures import MODELS, SMALL_MAXANY, check_lines, shipped
from test_float32_margin_notes import _overwhelm_margin
from test_float32_overwhelm import completions, float32_evaluations, interval_weights

from checker import cli
from checker import float32 as fp
from checker.errors import Malformed
from checker.statement import Overwhelm
from generator.overwhelm import certify
from generator.tasks.causal import logits_at

FREE = Overwhelm((7,), 5, 7, free_cmp="<=", free=3)  # 585 completions
PERM = Overwhelm((6,), 3, 6, free_perm=(0, 1, 2, 5))  # 24 permutations
NUMBER = r"([-+]?\d[\d.]*(?:e[-+]?\d+)?)"
PLACE = r"at \(query position (\d+), logit (\d+)\)"
REL = 5e-3  # printed with 3 significant digits


def _flint():
    try:
        import flint  # noqa: F401
    except ImportError:
        return False
    return True


ARITHS = ("mpmath", "arb") if _flint() else ("mpmath",)


def _note(report, rule: str) -> str:
    return next(n for n in report.rule_notes if n.startswith(rule + ":"))


def _untimed(note: str) -> str:
    return re.sub(r" \(\d+\.\d s\)$", "", note)


def _parsed(note: str, kind: str = "margin"):
    found = re.search(rf"smallest certified {kind} {NUMBER} {PLACE}", note)
    assert found, note
    error = re.search(r"float32 error " + NUMBER, note)
    return (float(found.group(1)), int(found.group(2)), int(found.group(3)),
            float(error.group(1)) if error else None)


@pytest.fixture(scope="module")
def real_lines():
    loaded = shipped(SMALL_MAXANY)
    out = {}
    for name, claim in (("free", FREE), ("perm", PERM)):
        verdict = certify(loaded, claim, float_shadow=False)
        assert verdict.verdict == "proved"
        out[name] = verdict.lines
    return out


def _delta(w, p: int, q: int, o: int, m: int) -> float:
    """δ_p[q][o] + δ_p[q][m] from the FULL attention_only_deltas at position p (not the rows
    function the note calls), from the model's weights (not the certificate's lines)."""
    deltas = fp.attention_only_deltas(w.dims, interval_weights(w), query_pos=p)
    return float(deltas[q][o]) + float(deltas[q][m])


def _check_attention_only_note(w, claim, note, recomputed_margin):
    """The shared assertions of overwhelm_free and overwhelm_perm: the margin and its place
    equal `recomputed_margin` (margin, p, m), it lies below every completion's float64
    margin (and ℓ_o − ℓ_m at the printed place), the error equals δ_p[q][o] + δ_p[q][m]
    recomputed, and every float32 evaluation there keeps ℓ̃_o − ℓ̃_m ≥ margin − error."""
    margin, p, m, error = _parsed(note)
    assert (p, m) == recomputed_margin[1:]
    assert margin == pytest.approx(recomputed_margin[0], rel=REL)
    o = claim.output
    for tokens in completions(claim, w.dims.d_vocab):
        logits = logits_at(w, tokens)
        others = np.delete(logits, o, axis=1).max(axis=1)
        assert (logits[:, o] - others >= margin * (1 - REL) - 1e-9).all()
        if tokens.shape[1] == p + 1:
            assert (logits[:, o] - logits[:, m] >= margin * (1 - REL) - 1e-9).all()
            for f in float32_evaluations(w, tokens):
                assert (f[:, o] - f[:, m] >= (margin - error) * (1 - REL) - 1e-9).all()
    assert error is not None and error == pytest.approx(_delta(w, p, claim.query, o, m),
                                                        rel=REL)
    # the test can tell the error at the printed place from its neighbours' and from δ[o]
    # alone (so a note computed at another position or dropping δ_p[q][m] fails above)
    deltas = fp.attention_only_deltas(w.dims, interval_weights(w), query_pos=p)
    assert abs(float(deltas[claim.query][o]) - error) > 3 * REL * error
    for p2 in (p - 1, p + 1):
        if 0 <= p2 < w.dims.n_ctx:
            assert abs(_delta(w, p2, claim.query, o, m) - error) > 3 * REL * error
    return margin, p, m, error


# --- overwhelm_free ------------------------------------------------------------------------

def test_overwhelm_free_note(real_lines):
    w = shipped(SMALL_MAXANY).weights
    notes = {a: _note(check_lines(real_lines["free"], arith=a, distance=True), "overwhelm_free")
             for a in ARITHS}
    note = notes["mpmath"]
    recomputed = _overwhelm_margin(w, FREE.prefix, FREE.query, FREE.output, FREE.free)
    _check_attention_only_note(w, FREE, note, recomputed)
    assert len({_untimed(n) for n in notes.values()}) == 1, notes  # mpmath and arb alike


# --- overwhelm_perm ------------------------------------------------------------------------

def _perm_margin(w, claim):
    """spec/rules.md §distance to float32 for overwhelm_perm, in float64 numpy from the
    weights: per m ≠ o, −(Σ_fixed w y + max over the permutations of the free part) / W,
    W = the fixed weights + the β_j and e[x] paired in sorted order (rearrangement); the
    smallest, with (p, m)."""
    def f64(name):
        return np.asarray(getattr(w, name), dtype=np.float64)
    E, P = f64("W_E"), f64("W_pos")
    WQ, WK, WV, WO, WU = (f64(n) for n in ("W_Q", "W_K", "W_V", "W_O", "W_U"))
    bQ, bK, bV, bO, bU = (f64(n) for n in ("b_Q", "b_K", "b_V", "b_O", "b_U"))
    p_bar = P.mean(axis=0)
    e_bar, p_hat = E + p_bar, P - p_bar
    evou, pvou = ((e_bar @ WV + bV) @ WO) @ WU, ((p_hat @ WV) @ WO) @ WU
    s, items, o, q = len(claim.prefix), claim.free_perm, claim.output, claim.query
    p = s + len(items)
    qv = (E[q] + P[p]) @ WQ + bQ
    e = np.exp(qv @ (e_bar @ WK + bK).T / np.sqrt(WQ.shape[1]))
    beta = np.exp(qv @ (p_hat @ WK).T / np.sqrt(WQ.shape[1]))
    eu = (E[q] + P[p] + bO) @ WU + bU
    weight = e[q] * beta[p] + sum(e[u] * beta[i] for i, u in enumerate(claim.prefix))
    weight += sum(b * x for b, x in zip(sorted(beta[s:p]), sorted(e[list(items)])))
    best = None
    for m in range(E.shape[0]):
        if m == o:
            continue

        def term(i, u, m=m):
            return e[u] * beta[i] * ((eu[m] - eu[o]) + (evou[u, m] - evou[u, o])
                                     + (pvou[i, m] - pvou[i, o]))
        total = term(p, q) + sum(term(i, u) for i, u in enumerate(claim.prefix))
        total += max(sum(term(s + j, x) for j, x in enumerate(perm))
                     for perm in set(itertools.permutations(items)))
        if best is None or -total / weight < best[0]:
            best = (-total / weight, p, m)
    return best


def test_overwhelm_perm_note(real_lines):
    w = shipped(SMALL_MAXANY).weights
    notes = {a: _note(check_lines(real_lines["perm"], arith=a, distance=True), "overwhelm_perm")
             for a in ARITHS}
    _check_attention_only_note(w, PERM, notes["mpmath"], _perm_margin(w, PERM))
    assert len({_untimed(n) for n in notes.values()}) == 1, notes


def test_shipped_perm_certificate_json(capsys):
    """The shipped permutation certificate (v = 64, 6720 permutations): --json's
    float32_distance carries the printed margin, place and error; the margin lies below
    every permutation's float64 margin and equals the recomputation."""
    w = shipped(MODELS / "maxany_v64_k10_seed0.pt").weights
    claim = Overwhelm((40,), 5, 40, free_perm=(0, 1, 2, 3, 38, 39, 39, 39))
    cert = MODELS.parent.parent / "certs" / "maxany_v64_k10_seed0.overwhelm-perm.jsonl"
    assert cli.main([str(cert), "--model", str(MODELS / "maxany_v64_k10_seed0.pt"),
                     "--json", "--float32-distance"]) == 0
    summary = json.loads(capsys.readouterr().out)
    note = next(n for n in summary["rules"] if n.startswith("overwhelm_perm:"))
    margin, p, m, error = _parsed(note)
    assert summary["float32_distance"] == [
        {"rule": "overwhelm_perm", "smallest_margin": margin,
         "at": f"(query position {p}, logit {m})", "float32_error": error}]
    (tokens,) = completions(claim, 64)
    logits = logits_at(w, tokens)
    assert (logits[:, 40] - np.delete(logits, 40, axis=1).max(axis=1) >= margin).all()
    assert error == pytest.approx(_delta(w, p, 5, 40, m), rel=REL)


# --- overwhelm_family, one layer --------------------------------------------------------------

def _family_widening(fw, claim, p: int, t: int) -> float:
    """E(g_t) of Lemma W-family at query position p (spec/rules.md §overwhelm_family,
    float32), recomputed in float64 numpy from the weights: Σ_j [spread·M_j + Rz_j·
    |c_rows(W_O[j])||g_t|] + Rr·|c(g_t)| over the claim's slots at p, with the values
    val_j(i, u) = LN1(E[u] (+ P[i]))·W_V[j] + b_V[j] of the real model."""
    f, d = fw.dims.family, fw.dims.d_model
    P = {k: np.asarray(a, dtype=np.float64) for k, a in fw.params.items()}
    centre = f.normalization is not None

    def ln(x, which):
        c = x - x.mean()
        return c / np.sqrt((c * c).mean() + f.ln_eps) * P[which + ".w"] + P[which + ".b"]

    def resid(i, u):
        x = P["embed.W_E"][u]
        return x if f.positional == "rotary" else x + P["pos_embed.W_pos"][i]

    s, alphabet = len(claim.prefix), range(fw.dims.d_vocab) if claim.over is None else claim.over
    slots = [(i, u) for i, u in enumerate(claim.prefix)]
    slots += [(i, u) for i in range(s, p) for u in alphabet] + [(p, claim.query)]
    normed = np.array([ln(resid(i, u), "blocks.0.ln1") for i, u in slots])
    a = (P["unembed.W_U"][:, t] - P["unembed.W_U"][:, claim.output]) * P["ln_final.w"]
    ca = a - a.mean() if centre else a
    n, u, eta = p + 1, 2.0 ** -24, 2.0 ** -149

    def gamma(k):
        return k * u / (1 - k * u)
    spread = gamma(n + 1) + n * (32 * n + 32) * eta
    w_o = P["blocks.0.attn.W_O"]
    sums = np.abs(resid(p, claim.query)) + np.abs(P["blocks.0.attn.b_O"])
    head_terms = 0.0
    for j in range(f.n_heads):
        vals = normed @ P["blocks.0.attn.W_V"][j] + P["blocks.0.attn.b_V"][j]
        wo_c = w_o[j] - w_o[j].mean(axis=1, keepdims=True) if centre else w_o[j]
        v_mag = np.abs(vals).max(axis=0)
        rz = gamma(n) * v_mag * (1 + spread) + n * eta
        sums = sums + (v_mag * (1 + spread) + rz) @ np.abs(w_o[j])
        m_j = np.abs(vals @ wo_c @ a).max()
        head_terms += spread * m_j + rz @ (np.abs(wo_c) @ np.abs(a))
    k = f.n_heads * fw.dims.d_head + 2
    rr = gamma(k) * sums + k * eta
    assert len(rr) == d
    return float(rr @ np.abs(ca) + head_terms)


def test_overwhelm_family_float32_error_equals_recomputation(monkeypatch):
    """The shipped LN+MLP+RoPE claim: the printed float32 error equals E(g_t)/upper(σ)
    with E recomputed in numpy at the printed (p, t) and σ the rule's own final LayerNorm
    scale at p (spied); both back-ends print the same note.  (The printed slack lies below
    every completion's 200-bit margin: tests/test_float32_margin_notes.py.)"""
    from checker.rules import overwhelm_family

    fw = shipped(MODELS / "maxany_v6_k6_ln_mlp_rope_seed0.pt").weights
    cert = MODELS.parent.parent / "certs" / "maxany_v6_k6_ln_mlp_rope_seed0.overwhelm-5-free3.jsonl"
    lines = cert.read_text().splitlines()
    sigmas, real_check = {}, overwhelm_family.AtQuery.check

    def spy(self):
        real_check(self)
        sigmas[self.p] = float(self.sigma.b)

    monkeypatch.setattr(overwhelm_family.AtQuery, "check", spy)
    reports = {a: check_lines(lines, arith=a, distance=True) for a in ARITHS}
    notes = {a: _note(r, "overwhelm_family") for a, r in reports.items()}
    assert len({_untimed(n) for n in notes.values()}) == 1, notes
    slack, p, t, error = _parsed(notes["mpmath"], "slack")
    claim = reports["mpmath"].facts.overwhelm
    assert error == pytest.approx(_family_widening(fw, claim, p, t) / sigmas[p], rel=REL)
    # the recomputation tells the printed place from the others
    for p2, t2 in [(p - 1, t), (p, (t + 1) % 6 if (t + 1) % 6 != 5 else (t + 2) % 6)]:
        if p2 in sigmas:
            other = _family_widening(fw, claim, p2, t2) / sigmas[p2]
            assert abs(other - error) > 3 * REL * error, (p2, t2)
    (entry,) = cli.float32_distance([notes["mpmath"]])
    assert (entry["smallest_margin"], entry["float32_error"]) == (slack, error)


# --- overwhelm_family, several layers -----------------------------------------------------

def test_overwhelm_deep_slack(monkeypatch):
    """The two-layer demo claim (73 completions): the printed slack and its (p, t) are the
    smallest −bound over the last step's checks (spied at below_zero in check_logits), and
    lie below the 200-bit margin of every completion; without --float32-distance no float32
    error is printed."""
    import sys

    from mpmath.libmp import to_float
    from test_depth import reference_logits_all
    from test_overwhelm_deep import DEEP_DEMO, PROVED

    from checker.rules import overwhelm_deep

    seen, real_below = [], overwhelm_deep.below_zero

    def spy(x):
        frame = sys._getframe(1)
        if frame.f_code.co_name == "check_logits":
            seen.append((-to_float(x), frame.f_locals["p"], frame.f_locals["t"]))
        return real_below(x)

    monkeypatch.setattr(overwhelm_deep, "below_zero", spy)
    loaded = shipped(DEEP_DEMO)
    verdict = certify(loaded, PROVED, float_shadow=False)
    note = _note(check_lines(verdict.lines), "overwhelm_family")
    slack, p, t, error = _parsed(note, "slack")
    assert error is None and "check-cert --float32-distance runs the float32 rule" in note
    assert len(seen) == 3 * 63  # 3 query positions, 63 logits each
    best = min(seen)
    assert (p, t) == best[1:] and slack == pytest.approx(best[0], rel=REL)
    o = PROVED.output
    for n in range(PROVED.free + 1):
        for free in itertools.product(PROVED.over, repeat=n):
            last = reference_logits_all(loaded.weights, [*PROVED.prefix, *free, PROVED.query])[-1]
            assert min(last[o] - x for u, x in enumerate(last) if u != o) >= slack * (1 - REL)
    (entry,) = cli.float32_distance([note])
    assert entry == {"rule": "overwhelm_family", "smallest_margin": slack,
                     "at": f"(query position {p}, logit {t})", "float32_error": None}


def test_overwhelm_deep_float32_error(monkeypatch):
    """--float32-distance on several layers: the float32 rule is run with every Lemma R bound
    derived afresh (the real hints are too tight for its wider float32 boxes).  The printed
    error is its bound minus the real one at the slack's place; that bound is at least as
    tight as the one the generator's own float32 certificate of the claim proves there; and
    every completion's float32 logits (five evaluation orders) keep ℓ̃_o − ℓ̃_t >= slack − error
    at that query position.  The verdict, count and work are those of the plain check."""
    from test_float32_overwhelm_deep import deep_float32_evaluations
    from test_overwhelm_deep import DEEP_DEMO, PROVED

    from checker.rules import overwhelm_deep_float32 as deep32

    loaded = shipped(DEEP_DEMO)
    real = certify(loaded, PROVED, float_shadow=False)
    plain, noted = check_lines(real.lines), check_lines(real.lines, distance=True)
    assert (plain.theorem, plain.work) == (noted.theorem, noted.work)
    note = _note(noted, "overwhelm_family")
    slack, p, t, error = _parsed(note, "slack")
    assert error is not None and 0 < error < slack
    assert (slack, p, t) == _parsed(_note(plain, "overwhelm_family"), "slack")[:3]

    # the generator's float32 certificate: its bound at (p, t), read from the rule's record
    captured, real_logits = {}, deep32.check_logits

    def spy(*args, **kwargs):
        if args[4] == p:  # query position
            kwargs["record"] = captured
            args = args[:12]
        return real_logits(*args, **kwargs)

    monkeypatch.setattr(deep32, "check_logits", spy)
    f32 = certify(loaded, PROVED, float_shadow=False, semantics="float32")
    assert check_lines(f32.lines).facts.semantics == "float32"
    monkeypatch.undo()
    generator_bound = captured["parts"][t]["bound"]
    noted_bound = error - slack
    assert noted_bound <= generator_bound + 1e-9 * (1 + abs(generator_bound))

    o = PROVED.output
    tokens = [np.array([[*PROVED.prefix, *free, PROVED.query]])
              for n in range(p - len(PROVED.prefix) + 1)
              for free in itertools.product(PROVED.over, repeat=n)
              if len(PROVED.prefix) + n == p]
    assert tokens
    for batch in tokens:
        for logits in deep_float32_evaluations(loaded.weights, batch):
            assert float(logits[0, o] - logits[0, t]) >= slack - error - 1e-6


def test_tightest_is_confirmed_and_near_the_root():
    """overwhelm_deep.tightest on random interval tables (and on a failing start far below):
    the λ it returns is confirmed by ratio_below, and a slightly smaller one is not (it is
    the root up to a relative 1e-6), for upper (sign 1) and lower (sign −1) bounds."""
    from mpmath import iv

    from checker.rules import overwhelm_deep as deep

    g = np.random.default_rng(5)
    for trial in range(40):
        slots = [list(range(int(g.integers(1, 4)))) for _ in range(int(g.integers(1, 5)))]
        w = {(i, u): iv.mpf(sorted(g.uniform(0.1, 3.0, 2))) for i, toks in enumerate(slots)
             for u in toks}
        ys = {(i, u): iv.mpf(sorted(g.normal(0, 5, 2))) for i, toks in enumerate(slots)
              for u in toks}

        def y(i, u, ys=ys):
            return ys[(i, u)]

        for sign in (1, -1):
            start = -100.0
            lam = deep.tightest(w, y, slots, start, sign)
            assert deep.ratio_below(w, y, slots, lam, sign)
            below = lam - 1e-6 * (1 + abs(lam))
            assert not deep.ratio_below(w, y, slots, below, sign), (trial, sign, lam)
        # derive: a confirmed hint is kept; an unconfirmed end is replaced by a confirmed one
        hi = deep.tightest(w, y, slots, -100.0, 1)
        lo = -deep.tightest(w, y, slots, -100.0, -1)
        assert deep.derive(w, y, slots, lo - 1, hi + 1, "x") == iv.mpf((lo - 1, hi + 1))
        box = deep.derive(w, y, slots, hi - 1, lo + 1, "x")  # both ends too tight
        assert deep.ratio_below(w, y, slots, float(box.b), 1)
        assert deep.ratio_below(w, y, slots, -float(box.a), -1)
        assert deep.derive(w, y, slots, None, hi - 1, "x") >= hi - 1e-6 * (1 + abs(hi))


# --- the notes decide nothing -----------------------------------------------------------------

def test_notes_change_no_verdict_count_or_work(real_lines, monkeypatch):
    """With every distance note switched off, the same certificates give the same verdict,
    theorem and proof length (work): the notes charge nothing."""
    from checker.rules import overwhelm, overwhelm_perm

    reports = {k: check_lines(v, distance=True) for k, v in real_lines.items()}
    monkeypatch.setattr(overwhelm, "distance_note", lambda *a: "")
    monkeypatch.setattr(overwhelm_perm, "distance_note", lambda *a: "")
    for k, v in real_lines.items():
        plain = check_lines(v, distance=True)
        assert plain.work == reports[k].work and plain.facts == reports[k].facts
        assert "float32 error" in _note(reports[k], "overwhelm_" + k)
        assert "float32 error" not in plain.rule_notes[0]
    monkeypatch.undo()
    for k, v in real_lines.items():  # not asked for (check-cert without --float32-distance)
        unasked = check_lines(v)
        assert unasked.work == reports[k].work and unasked.facts == reports[k].facts
        assert "float32 error" not in _note(unasked, "overwhelm_" + k)
        assert "--float32-distance prints it" in _note(unasked, "overwhelm_" + k)


def test_a_failing_note_is_named_and_the_check_passes(real_lines, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("planted")

    monkeypatch.setattr(fp, "attention_only_delta_rows", broken)
    note = _note(check_lines(real_lines["free"], distance=True), "overwhelm_free")
    assert "no float32 error estimate (ValueError: planted)" in note
    assert cli.float32_distance([note])[0]["float32_error"] is None


def test_the_weight_lines_the_note_reads(real_lines):
    """certificate._note_weights_overwhelm: the twelve weights by their canonical term, the
    certificate's exact float32 values; {} when one has width or is missing."""
    from checker.certificate import CertificateChecker, Value, _note_weights_overwhelm
    from checker.rules import overwhelm

    checker = CertificateChecker()
    for line in real_lines["free"]:
        checker.feed(line)
    found = _note_weights_overwhelm(checker.values, checker.canonical, overwhelm)
    w = shipped(SMALL_MAXANY).weights
    assert sorted(found) == sorted(overwhelm.FLOAT32_INPUTS)
    for name in found:
        assert np.array_equal(np.array(found[name], dtype=np.float64),
                              np.atleast_2d(np.asarray(getattr(w, name), dtype=np.float64)))
    lineno = next(n for n, v in checker.values.items() if v.term == checker.canonical["W_Q"])
    v = checker.values[lineno]
    wide = dict(checker.values)
    wide[lineno] = Value(v.term, v.lo, tuple(x + 1 for x in v.hi), v.shape)
    assert _note_weights_overwhelm(wide, checker.canonical, overwhelm) == {}
    del wide[lineno]
    assert _note_weights_overwhelm(wide, checker.canonical, overwhelm) == {}
    text = overwhelm.distance_note(w.dims, FREE, (1.0, 4, 2), {}, None, lambda work: None,
                                   "free string")
    assert "float32 error unavailable" in text
    assert cli.float32_distance([f"overwhelm_free: x{text}"])[0]["float32_error"] is None


def test_attempt_names_a_failure_but_the_time_limit_stands():
    from checker.rules import notes

    def fails(clock):
        clock(10 ** 9)
        raise ZeroDivisionError("x")

    calls = []
    assert notes.attempt(lambda work: calls.append(work), fails, "none") == \
        "none (ZeroDivisionError: x)"
    assert calls and set(calls) == {0}  # the clock charges no work

    def late(work):
        raise Malformed("checking took longer than 1 s")

    with pytest.raises(Malformed, match="longer"):
        notes.attempt(late, fails, "none")
    assert notes.attempt(lambda work: None, lambda clock: "ok", "none") == "ok"


def test_float32_distance_parses_the_overwhelm_forms():
    notes = [
        "overwhelm_free: output 0 forced ...; smallest certified margin 3.08 at (query position "
        "62, logit 1) (ℓ_o − ℓ_m ≥ it for every free string there), float32 error 0.00464 there "
        "(δ_p[q][o] + δ_p[q][m], Lemma G@p: ...); spec/rules.md (0.1 s)",
        "overwhelm_perm: output 40 forced ...; smallest certified margin 5.94 at (query position "
        "9, logit 52) (ℓ_o − ℓ_m ≥ it for every permutation there), float32 error unavailable "
        "(a weight line is absent or has width; spec/rules.md §distance to float32) (0.1 s)",
        "overwhelm_family: output 63 ...; smallest certified slack 8.25 at (query position 2, "
        "logit 47) (ℓ_o − ℓ_t ≥ it for every completion there); its float32 error is not "
        "estimated on several layers (...) (10.3 s)",
    ]
    got = [(g["rule"], g["smallest_margin"], g["at"], g["float32_error"])
           for g in cli.float32_distance(notes)]
    assert got == [("overwhelm_free", 3.08, "(query position 62, logit 1)", 0.00464),
                   ("overwhelm_perm", 5.94, "(query position 9, logit 52)", None),
                   ("overwhelm_family", 8.25, "(query position 2, logit 47)", None)]
