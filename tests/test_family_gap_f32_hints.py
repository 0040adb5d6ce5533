"""binary32 hints (spec/format.md §hint encodings, spec/rules.md §overwhelm_family "hint
precision"): a family_gap / one-layer overwhelm_family hint array of n values may be base64 of
n binary32 values (4n bytes) instead of n binary64 (8n bytes), read exactly; every other length,
NaN and infinity are malformed.  Strategy family-gap's option `hints=f32` rounds every hint
outward to binary32 inside its own float64 search and writes binary32.

Soundness by enumeration: every sequence of every class and box the checker accepts from a
hints=f32 certificate is correct by the independent 200-bit forward pass; the claim equals the
binary64 certificate's (confirm=off: a hint rounded the wrong way would make the checker
reject the certificate, not shrink it) and the hint bytes halve."""

from __future__ import annotations

import base64
import functools
import itertools
import json
import struct

import numpy as np
import pytest
from family_gap_models import correct, model, replay, rule_line

from checker.errors import Malformed, Rejected
from checker.rules import family_gap as rule
from checker.rules import overwhelm_family as family
from checker.rules.overwhelm_family_bounds import decode_hint
from generator.certify.strategies import family_gap as strategy
from generator.certify.trace import Trace
from generator.ground_truth import count_correct


def _b64(values, code: str) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}{code}", *values)).decode("ascii")


# -- the decoding ------------------------------------------------------------------------------

VALUES = [0.5, -1.25, 3.0, 1e-3, -7e5, 0.0]  # 1e-3 is not a binary32: read as its binary32
F32 = [struct.unpack("<f", struct.pack("<f", x))[0] for x in VALUES]


def test_both_widths_decode_to_the_exact_values():
    shape = (3, 2)
    as_f64 = decode_hint(_b64(VALUES, "d"), shape, "t")
    as_f32 = decode_hint(_b64(VALUES, "f"), shape, "t")
    assert as_f64 == [VALUES[0:2], VALUES[2:4], VALUES[4:6]]
    assert as_f32 == [F32[0:2], F32[2:4], F32[4:6]]
    assert as_f32[1][1] != 1e-3  # the binary32 value, not its decimal neighbour
    assert as_f32[1][1] == float(np.float32(1e-3))
    assert decode_hint(_b64(F32, "d"), shape, "t") == as_f32  # the same reals either way
    assert decode_hint("", (0, 2), "t") == []


@pytest.mark.parametrize("size", [0, 4, 20, 28, 44, 52, 36, 12 * 6, 2 * 6])
def test_every_other_length_is_malformed(size):
    """n = 6 values: only 24 (binary32) and 48 (binary64) bytes are read."""
    text = base64.b64encode(bytes(range(1, size + 1))).decode("ascii")
    with pytest.raises(Malformed, match="bytes"):
        decode_hint(text, (3, 2), "hint pre")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("code", ["f", "d"])
def test_non_finite_values_are_malformed(bad, code):
    with pytest.raises(Malformed, match="NaN or infinity"):
        decode_hint(_b64([1.0, bad], code), (2,), "t")


@pytest.mark.parametrize("text", [None, 7, "AAAA=", "A===", "AAAAAAAA AAAAAAAA",
                                  "AAAAAAAAAAA/", "AAAAAAAAAAB="])
def test_bad_base64_and_types_are_malformed(text):
    """Not a string, bad padding, a space, and non-canonical base64 (the last: the same 8
    bytes as 'AAAAAAAAAAA=' with a nonzero padding bit) are refused as before."""
    with pytest.raises(Malformed):
        decode_hint(text, (2,), "t")


def test_overwhelm_family_reads_binary32_hints():
    """rule overwhelm_family's parse_hints (one layer) reads each array in either width."""
    from checker.modelspec import Dims, Family
    from checker.statement import Overwhelm

    fam = Family(normalization="LN", n_heads=2, d_mlp=3)
    dims = Dims(d_vocab=4, n_ctx=3, d_model=2, d_head=1, family=fam)
    claim = Overwhelm(prefix=(3,), query=1, output=3, free_cmp="==", free=1)
    (p,) = family.positions(claim)
    fields = family.hint_fields(claim)
    shapes = family.hint_shapes(dims, claim)
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal(int(np.prod(shapes[name]))).astype(np.float32)
              for name in fields}
    for widths in (("f",) * len(fields), ("d", "f", "d", "f", "d")):
        entry = [p] + [_b64(arrays[name].tolist(), c) for name, c in zip(fields, widths)]
        parsed = family.parse_hints({"bounds": [entry]}, dims, claim, lambda work: None)[p]
        for name in fields:
            flat = np.array(parsed[name], dtype=np.float64).ravel()
            assert np.array_equal(flat, arrays[name].astype(np.float64)), name
    bad = [p] + [_b64(arrays[name].tolist(), "f") for name in fields]
    short = base64.b64decode(bad[2])[:-4]  # pre: one binary32 short
    bad[2] = base64.b64encode(short).decode("ascii")
    with pytest.raises(Malformed, match=f"hint pre at {p}"):
        family.parse_hints({"bounds": [bad]}, dims, claim, lambda work: None)


# -- the generator's option --------------------------------------------------------------------

def test_option_round_trips_and_default_keeps_the_name():
    o = strategy.Options.parse("family-gap:hints=f32")
    assert o.hints == "f32" and o.name() == "family-gap:hints=f32"
    assert strategy.Options.parse(o.name()) == o
    assert strategy.Options.parse("family-gap:hints=f64") == strategy.Options()
    assert strategy.Options().name() == "family-gap"
    full = "family-gap:merge=always,budget=2100000000,confirm=off,boxes=on,min_size=150," \
           "hints=f32"
    assert strategy.Options.parse(full).name() == full
    for bad in ("family-gap:hints=f16", "family-gap:hints=", "family-gap:hints=F32"):
        with pytest.raises(ValueError, match="hints"):
            strategy.Options.parse(bad)


def _up(x):
    f = np.float32(x)
    return float(f) if float(f) >= x else float(np.nextafter(f, np.float32(np.inf)))


def _down(x):
    f = np.float32(x)
    return float(f) if float(f) <= x else float(np.nextafter(f, np.float32(-np.inf)))


@pytest.mark.parametrize("name", ["ln_mlp_rope_2heads_k4", "mlp_no_norm_k3"])
def test_hints_are_rounded_outward_to_binary32(name):
    """box, pre and diff depend on no other hint: with hints=f32 each lower bound is the
    largest binary32 below the binary64 one, each upper bound the smallest above; dir and
    dir_lo are binary32 values (dir_lo bounded for the rounded direction)."""
    fw = model(name)
    tab = strategy.Tables(fw)
    d = tab.dims
    checked = 0
    for q, m, fixed in itertools.islice(strategy.class_keys(d.d_vocab, d.n_ctx), 0, None, 7):
        if rule.signature(d, q, m, fixed, 1) is not None:
            continue
        slots = rule.slots(d, q, m, fixed, 1)
        a = strategy._ClassQuery(tab, q, m, slots)
        b = strategy._ClassQuery(tab, q, m, slots, "f32")
        with np.errstate(all="ignore"):
            a.margins()
            b.margins()
        for field in ("box", "pre"):
            if d.family.d_mlp == 0 and field == "pre":
                continue
            lo64, hi64 = a.hint[field][..., 0].ravel(), a.hint[field][..., 1].ravel()
            lo32, hi32 = b.hint[field][..., 0].ravel(), b.hint[field][..., 1].ravel()
            assert list(lo32) == [_down(x) for x in lo64], field
            assert list(hi32) == [_up(x) for x in hi64], field
        assert list(b.hint["diff"].ravel()) == [_up(x) for x in a.hint["diff"].ravel()]
        for field in rule.HINT_FIELDS:
            x = b.hint[field]
            assert np.array_equal(x.astype(np.float32).astype(np.float64), x), field
        # the search's own box is the one the rounded hints give (base + Σ_j per_j), wider
        eye = np.eye(d.d_model)
        lo64, hi64, _ = a.bounds(eye)
        lo32, hi32, per = b.bounds(eye)
        want_lo, want_hi = b.base @ eye, b.base @ eye
        for j in range(per.shape[0]):
            want_lo, want_hi = want_lo + per[j, :, 0], want_hi + per[j, :, 1]
        assert np.array_equal(lo32, want_lo) and np.array_equal(hi32, want_hi)
        assert (lo32 <= lo64).all() and (hi32 >= hi64).all()
        checked += 1
    assert checked > 3


@functools.cache
def _certificates(name: str, boxes: str) -> dict:
    """hints f64 and f32, both confirm=off (every float64-proved class claimed: a hint
    the checker cannot confirm rejects the whole certificate)."""
    out = {}
    for hints in ("f64", "f32"):
        trace = Trace(model(name), float_shadow=False)
        options = strategy.Options(confirm="off", boxes=boxes, hints=hints)
        by, claim, _ = strategy.certify(trace, options=options)
        out[hints] = tuple(trace.lines(options.name(), by, claim, {}, {}))
    return out


def _hint_strings(line: dict) -> list:
    return [x for key in ("classes", "boxes") for c in line["hints"].get(key, [])
            for x in c if isinstance(x, str)]


# the first two in the fast tier, the others slow (make test runs them all)
CASES = [("ln_mlp_rope_2heads_k4", "off"), ("ln_mlp_k4_well_trained", "on")] + [
    pytest.param(name, boxes, marks=pytest.mark.slow)
    for name, boxes in (("negative_ln_gains", "on"), ("mlp_no_norm_k3", "off"),
                        ("rare_mlp_unit", "off"), ("lnpre_parallel_mlp_k3", "on"))]


@pytest.mark.parametrize("name,boxes", CASES)
def test_f32_certificate_verifies_with_the_same_claim_and_half_the_hint_bytes(name, boxes):
    certs = _certificates(name, boxes)
    f64, f32 = rule_line(certs["f64"]), rule_line(certs["f32"])
    assert f32["claim"] == f64["claim"] > 0
    assert replay(certs["f32"]).facts.correct == f32["claim"]
    assert replay(certs["f32"], "arb").facts.correct == f32["claim"]
    s64, s32 = _hint_strings(f64), _hint_strings(f32)
    assert len(s64) == len(s32) > 0
    raw64 = sum(len(base64.b64decode(s)) for s in s64)
    raw32 = sum(len(base64.b64decode(s)) for s in s32)
    assert 2 * raw32 == raw64


@pytest.mark.parametrize("name,boxes", CASES)
def test_every_sequence_of_an_f32_certificate_is_correct(name, boxes):
    """Enumeration: every sequence of every class and box of the accepted hints=f32
    certificate, and every residue sequence, by the 200-bit reference; disjoint; at most
    the exact count."""
    fw = model(name)
    dims = fw.dims
    lines = _certificates(name, boxes)["f32"]
    line = rule_line(lines)
    report = replay(lines)
    seen = set()
    members = [(q, m, tuple(f) if isinstance(f, list) else f["first"], g)
               for q, m, f, g, *_ in line["hints"]["classes"]]
    members += [(q, m, rule.Box(tuple(x) for x in sets), 0)
                for q, m, sets, *_ in line["hints"].get("boxes", [])]
    for q, m, fixed, g in members:
        for t in itertools.product(*rule.slots(dims, q, m, fixed, g)):
            assert t not in seen
            seen.add(t)
            assert max(t) == m and t[-1] == q
            assert correct(fw, t), f"{name}: ACCEPTED but wrong: {t}"
    for t in line["hints"].get("residue", []):
        t = tuple(t)
        assert t not in seen
        seen.add(t)
        assert correct(fw, t)
    assert report.facts.correct == len(seen) == line["claim"]
    assert len(seen) <= count_correct(fw, progress=False).correct


def _edit_first_class(lines, field: str, edit):
    """The certificate with hint `field` of class 0 decoded as binary32, edited, re-encoded."""
    out = []
    for x in lines:
        obj = json.loads(x)
        if obj["kind"] == "rule":
            entry = obj["hints"]["classes"][0]
            i = 4 + rule.HINT_FIELDS.index(field)
            raw = base64.b64decode(entry[i])
            vals = np.frombuffer(raw, dtype="<f4").copy()
            entry[i] = base64.b64encode(edit(vals).astype("<f4").tobytes()).decode()
        out.append(json.dumps(obj, separators=(",", ":")))
    return out


@pytest.mark.parametrize("field,side", [("diff", None), ("box", 1), ("box", 0), ("pre", 1),
                                        ("pre", 0)])
def test_a_hint_rounded_the_wrong_way_is_rejected(field, side):
    """Moving a confirmed binary32 bound inward (an upper bound down, a lower bound up) by
    a relative 1e-3 makes the checker reject: never a false acceptance."""
    lines = _certificates("ln_mlp_rope_2heads_k4", "off")["f32"]

    def inward(vals):
        v = vals.reshape(-1, 2) if side is not None else vals.reshape(-1, 1)
        col = v[:, side if side is not None else 0]
        sign = -1.0 if side in (None, 1) else 1.0
        col += sign * np.float32(1e-3) * (np.abs(col) + np.float32(1.0))
        return v.ravel()

    with pytest.raises(Rejected):
        replay(_edit_first_class(lines, field, inward))


def test_truncated_binary32_hint_is_malformed():
    lines = _certificates("ln_mlp_rope_2heads_k4", "off")["f32"]
    with pytest.raises(Malformed, match="binary32"):
        replay(_edit_first_class(lines, "dir", lambda v: v[:-1]))


def test_f32_strings_hold_exactly_4n_bytes():
    """Every hint array of a hints=f32 certificate is n binary32 values (4n bytes)."""
    lines = _certificates("ln_mlp_rope_2heads_k4", "off")["f32"]
    shapes = family.hint_shapes(model("ln_mlp_rope_2heads_k4").dims)
    for entry in rule_line(lines)["hints"]["classes"]:
        for name, text in zip(rule.HINT_FIELDS, entry[4:]):
            assert len(base64.b64decode(text)) == 4 * int(np.prod(shapes[name]))


def test_default_options_regenerate_the_shipped_certificate(tmp_path):
    """hints=f64 (the default) writes what it wrote before binary32 hints: the shipped
    family-gap certificate regenerates with the same weights lines, the same classes, gaps,
    residue and claim, and binary64 hints (8 bytes a value) equal to the shipped ones up to
    their last bits (the header's strategy_notes aside: they have gained fields since it was
    made, and name no hint).  Not byte for byte: numpy's float64 kernels change their last
    bits between versions (numpy 2.4.6 moves 10,894 of the 27,572 hint values, by at most
    8.3e-13 relative), and a hint is only a claimed bound the checker confirms."""
    from pathlib import Path

    from generator.cli import main as gen_cert

    root = Path(__file__).resolve().parent.parent
    shipped = (root / "certs" / "max3_v8_ln_mlp_rope_seed0.family-gap.jsonl").read_text()
    out = tmp_path / "c.jsonl"
    assert gen_cert([str(root / "generator" / "models" / "max3_v8_ln_mlp_rope_seed0.pt"),
                     "--strategy", "family-gap", "-q", "-o", str(out)]) == 0
    new, old = out.read_text().splitlines(), shipped.splitlines()
    assert len(new) == len(old) > 3
    a_rule, b_rule = rule_line(new), rule_line(old)
    assert new[1:] == old[1:] or _same_proof(a_rule, b_rule)
    assert [x for x in new[1:] if '"rule"' not in x] == [x for x in old[1:] if '"rule"' not in x]
    a, b = json.loads(new[0]), json.loads(old[0])
    a["generator"].pop("strategy_notes"), b["generator"].pop("strategy_notes")
    assert a == b


def _same_proof(a: dict, b: dict) -> bool:
    """The same rule line up to the hints' last bits: every field but the hint arrays equal,
    and every hint array binary64 of the same length with values within 1e-9 relative."""
    ha, hb = a.pop("hints"), b.pop("hints")
    assert a == b  # inputs, claim
    assert ha.keys() == hb.keys() and ha.get("residue") == hb.get("residue")
    assert [c[:4] for c in ha["classes"]] == [c[:4] for c in hb["classes"]]
    for ca, cb in zip(ha["classes"], hb["classes"]):
        for xa, xb in zip(ca[4:], cb[4:]):
            va, vb = base64.b64decode(xa), base64.b64decode(xb)
            assert len(va) == len(vb) and len(va) % 8 == 0  # binary64, not binary32
            na, nb = np.frombuffer(va, "<f8"), np.frombuffer(vb, "<f8")
            assert np.allclose(na, nb, rtol=1e-9, atol=0), (ca[:4], np.abs(na - nb).max())
    return True
