"""Adversarial audit of the deep and gated families (issue 21): random and hostile models with
2-3 layers (or one layer with a gated MLP), every strategy, every accepted claim re-checked.

Each model draws a family at random (normalisation none/LN/LNPre/RMS/RMSPre, 1-2 heads, an
MLP or not — gated or not, any supported activation —, learned or rotary positions, parallel
or sequential residual) and a hostile variant (scaled 1e-3..30, large biases, two equal
unembedding columns: exact ties).  It is saved with its TransformerLens config, every strategy
of generator.certify.strategies runs on it (the decomposition strategies must say "not
applicable"), each certificate is checked (`--model` bound; also under Arb when python-flint
is installed, a different verdict is a finding), and an accepted claim is compared with an
independent forward pass written here from spec/theorem.md §2b, in mpmath at 256 bits, every
position of every layer (causal).  Mutants: the claim +1 and +3 (accepted only if still true),
and the header's family with one layer fewer or the gate dropped (must be refused: the
weights digest names the family).  A claim above the confirmed count, or an accepted family
edit, is a FALSE THEOREM.  With --overwhelm N, each model with n_layers >= 2 also gets N
random free overwhelm claims (rule overwhelm_family on several layers): an accepted claim
false on some completion (256-bit oracle) is a FALSE THEOREM, and so is an accepted mutant
(another output, a box hint narrowed, a diff hint lowered) whose claim is false.

    python benchmarks/fuzz_deep.py --models 40 --seed 2026
    python benchmarks/fuzz_deep.py --models 40 --seed 2026 --overwhelm 3   # + overwhelm claims
    python benchmarks/fuzz_audit.py --deep 40            # the same, from the red team's entry
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import mpmath
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import fuzz_audit  # noqa: E402

from checker import arith  # noqa: E402
from checker.checkfile import check_file  # noqa: E402
from checker.errors import Malformed, Rejected  # noqa: E402
from checker.limits import Limits  # noqa: E402
from checker.modelspec import ACTIVATIONS, Dims, Family, parameter_table  # noqa: E402
from generator.certify.strategies import STRATEGIES, NotApplicable  # noqa: E402
from generator.cli import generate  # noqa: E402
from generator.model import FamilyWeights  # noqa: E402
from generator.modelfile import save_model  # noqa: E402

PRECISION = 256
UNDECIDED_BITS = 190
VARIANTS = ("random", "scaled", "biased", "tie")


def make_model(rng) -> tuple[FamilyWeights, str]:
    """A random deep or gated family model and its variant's name."""
    h = int(rng.choice([2, 4]))
    rotary = bool(rng.random() < 0.4)
    d_mlp = int(rng.integers(2, 7)) if rng.random() < 0.7 else 0
    gated = bool(d_mlp and rng.random() < 0.5)
    layers = int(rng.integers(2, 4)) if not gated or rng.random() < 0.7 else 1
    norm = [None, "LN", "LNPre", "RMS", "RMSPre"][int(rng.integers(5))]
    k = int(rng.integers(2, 4))
    family = Family(normalization=norm, n_heads=int(rng.integers(1, 3)), d_mlp=d_mlp,
                    act_fn=str(rng.choice(ACTIVATIONS)) if d_mlp else "relu",
                    positional="rotary" if rotary else "standard", n_ctx=k if rotary else 0,
                    rotary_dim=h if rotary else 0, rotary_base=10000 if rotary else 0,
                    ln_eps=float(10 ** rng.uniform(-6, -1)) if norm else 0.0,
                    parallel=bool(d_mlp and rng.random() < 0.3), n_layers=layers,
                    gated_mlp=gated)
    dims = Dims(int(rng.integers(2, 5)), k, int(rng.integers(2, 6)), h, family)
    variant = VARIANTS[int(rng.integers(len(VARIANTS)))]
    scale = 10 ** rng.uniform(-3, 1.5) if variant == "scaled" else 1.0
    params = {}
    for p in parameter_table(family):
        shape = dims.shape_of(p.key)
        if p.short.endswith(".w"):
            a = 1 + 0.3 * rng.standard_normal(shape)
        elif p.short.endswith(".b") or p.short.split(".")[-1].startswith("b_"):
            a = rng.standard_normal(shape) * (3.0 if variant == "biased" else 0.0)
        else:
            a = rng.standard_normal(shape) * 2.5 / math.sqrt(dims.d_model) * scale
        params[p.key] = a
    if variant == "tie":  # two equal output columns: those logits tie exactly
        u = params["unembed.W_U"]
        a, b = rng.choice(dims.d_vocab, 2, replace=False)
        u[:, a] = u[:, b]
        params["unembed.b_U"][a] = params["unembed.b_U"][b]
    return FamilyWeights(dims=dims, params={k: np.asarray(v, np.float32)
                                            for k, v in params.items()}), variant


# ---- the independent forward pass (spec/theorem.md §2b) -------------------------------------

def _act(name, x):
    if name == "relu":
        return max(x, 0)
    if name == "gelu":
        return x * (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2
    if name == "silu":
        return x / (1 + mpmath.exp(-x))
    c = mpmath.sqrt(2 / mpmath.pi) if name == "gelu_new" else mpmath.mpf(7978845608) / 10**10
    return x * (1 + mpmath.tanh(c * (x + mpmath.mpf(44715) / 10**6 * x ** 3))) / 2


def oracle_logits(fw: FamilyWeights, seq) -> list:
    """The logits at the last position of seq, at PRECISION bits."""
    dims, f = fw.dims, fw.dims.family
    mpmath.mp.prec = PRECISION
    P = {key: np.asarray(a, np.float64) for key, a in fw.params.items()}

    def vec(a):
        return [mpmath.mpf(float(x)) for x in np.ravel(a)]

    def vm(x, m):
        return [mpmath.fsum(x[r] * mpmath.mpf(float(m[r, c])) for r in range(len(x)))
                for c in range(m.shape[1])]

    def add(*xs):
        return [mpmath.fsum(t) for t in zip(*xs)]

    def norm(x, which):
        if f.normalization is None:
            return x
        mu = mpmath.fsum(x) / len(x) if f.normalization in ("LN", "LNPre") else 0
        c = [a - mu for a in x]
        s = mpmath.sqrt(mpmath.fsum(a * a for a in c) / len(x) + mpmath.mpf(f.ln_eps))
        y = [a / s for a in c]
        if f.normalization in ("LNPre", "RMSPre"):
            return y
        y = [a * w for a, w in zip(y, vec(P[which + ".w"]))]
        return add(y, vec(P[which + ".b"])) if f.normalization == "LN" else y

    def rot(x, i):
        if f.positional != "rotary":
            return x
        half, out = f.rotary_dim // 2, list(x)
        for j in range(half):
            ang = i * mpmath.power(f.rotary_base, mpmath.mpf(-2 * j) / f.rotary_dim)
            c, s = mpmath.cos(ang), mpmath.sin(ang)
            out[j], out[j + half] = x[j] * c - x[j + half] * s, x[j + half] * c + x[j] * s
        return out

    n = len(seq)
    xs = [add(vec(P["embed.W_E"][t]), vec(P["pos_embed.W_pos"][i]))
          if f.positional == "standard" else vec(P["embed.W_E"][t]) for i, t in enumerate(seq)]
    for layer in range(f.n_layers):
        b = f"blocks.{layer}."
        u = [norm(x, b + "ln1") for x in xs]
        outs = [vec(P[b + "attn.b_O"]) for _ in range(n)]
        for j in range(f.n_heads):
            q, key, val = ([add(vm(u[i], P[b + "attn.W_" + c][j]), vec(P[b + "attn.b_" + c][j]))
                            for i in range(n)] for c in "QKV")
            q = [rot(x, i) for i, x in enumerate(q)]
            key = [rot(x, i) for i, x in enumerate(key)]
            for p in range(n):
                e = [mpmath.exp(mpmath.fsum(a * c for a, c in zip(q[p], key[i]))
                                / mpmath.sqrt(dims.d_head)) for i in range(p + 1)]
                tot = mpmath.fsum(e)
                z = [mpmath.fsum(e[i] * val[i][c] for i in range(p + 1)) / tot
                     for c in range(dims.d_head)]
                outs[p] = add(outs[p], vm(z, P[b + "attn.W_O"][j]))
        new = []
        for p in range(n):
            r = add(xs[p], outs[p])
            if f.d_mlp:
                y = norm(xs[p] if f.parallel else r, b + "ln2")
                m = b + "mlp."
                if f.gated_mlp:
                    hid = add([_act(f.act_fn, g) * li for g, li in
                               zip(vm(y, P[m + "W_gate"]), vm(y, P[m + "W_in"]))],
                              vec(P[m + "b_in"]))
                else:
                    hid = [_act(f.act_fn, a) for a in add(vm(y, P[m + "W_in"]),
                                                          vec(P[m + "b_in"]))]
                r = add(r, vm(hid, P[m + "W_out"]), vec(P[m + "b_out"]))
            new.append(r)
        xs = new
    return add(vm(norm(xs[-1], "ln_final"), P["unembed.W_U"]), vec(P["unembed.b_U"]))


def verdicts_of(fw: FamilyWeights) -> dict:
    out = {}
    for seq in itertools.product(range(fw.dims.d_vocab), repeat=fw.dims.n_ctx):
        logits, top = oracle_logits(fw, seq), max(seq)
        margin = logits[top] - max(x for o, x in enumerate(logits) if o != top)
        size = max(abs(x) for x in logits) + 1
        out[seq] = ("undecided" if abs(margin) <= size * mpmath.ldexp(1, -UNDECIDED_BITS)
                    else "correct" if margin > 0 else "wrong")
    return out


# ---- the audit --------------------------------------------------------------------------------

def family_mutants(lines, dims: Dims):
    """The header's family with one layer fewer, or its gate dropped (another model)."""
    objs = [json.loads(x) for x in lines]
    fam = dict(objs[0]["family"])
    edits = []
    if fam.get("n_layers", 1) > 1:
        edits.append(("family layer-1", {**fam, "n_layers": fam["n_layers"] - 1}))
    if fam.get("gated_mlp"):
        edits.append(("family gate dropped", {k: v for k, v in fam.items() if k != "gated_mlp"}))
    for kind, new in edits:
        header = dict(objs[0], family={k: v for k, v in new.items()
                                       if not (k == "n_layers" and v == 1)})
        yield kind, fuzz_audit._dump(objs, 0, header)


def audit_model(fw, tag, work, tally, rng):
    tally.models += 1
    path = work / f"{tag}.pt"
    save_model(path, fw, None)
    verdicts = None
    for name in sorted(STRATEGIES):
        try:
            lines, _ = generate(str(path), name, float_shadow=bool(rng.random() < 0.5))
        except NotApplicable:
            tally.certificates[name, "not applicable"] += 1
            continue
        except Exception as err:  # noqa: BLE001 -- a generator crash is a finding
            tally.certificates[name, "generator error"] += 1
            tally.generator_errors.append(f"{tag} {name}: {type(err).__name__}: {err}"[:300])
            continue
        cert = work / f"{tag}.{name}.jsonl"
        cert.write_text("\n".join(lines) + "\n")
        try:
            report = fuzz_audit.check_both(cert, path, tally, f"{tag} {name}")
        except (Rejected, Malformed) as err:
            tally.certificates[name, type(err).__name__.lower()] += 1
            tally.generator_errors.append(f"{tag} {name}: checker refused: {err}"[:300])
            continue
        tally.certificates[name, "accepted"] += 1
        claim = report.facts.correct
        tally.claimed += claim
        if verdicts is None:
            verdicts = verdicts_of(fw)
        fuzz_audit._verify(f"{tag} {name}", lines, claim, verdicts, fw.dims, tally)
        objs = [json.loads(x) for x in lines]
        i = next(n for n, o in enumerate(objs) if o.get("kind") == "rule")
        claims = [(f"claim+{e}", fuzz_audit._dump(objs, i, dict(objs[i], claim=claim + e)))
                  for e in (1, 3)]
        for kind, mutated in claims + list(family_mutants(lines, fw.dims)):
            cert.write_text("\n".join(mutated) + "\n")
            tally.mutants[kind] += 1
            try:
                rep = fuzz_audit.check_both(cert, path, tally, f"{tag} {name} mutant {kind}")
            except (Rejected, Malformed):
                continue
            tally.mutants[kind + " accepted"] += 1
            if kind.startswith("family"):
                tally.false_theorems.append(f"{tag} {name}: mutant {kind} accepted")
            else:
                fuzz_audit._verify(f"{tag} {name} mutant {kind}", mutated, rep.facts.correct,
                                   verdicts, fw.dims, tally)


# ---- family_gap under the float32 semantics on deep models -------------------------------------

def float32_logits(fw: FamilyWeights, tokens: np.ndarray) -> np.ndarray:
    """One float32 execution (torch, FamilyTransformer in float32): logits at the last
    position, (n, v)."""
    import torch

    from generator.model import FamilyTransformer

    model = FamilyTransformer(fw.dims)
    model.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32))
                           for k, v in fw.params.items()}, strict=True)
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(tokens, dtype=np.int64))).numpy()


def family_gap_members(lines, dims: Dims) -> list:
    """Every sequence a family_gap rule line counts: its classes' and its residue."""
    from checker.rules import family_gap as gap_rule

    hints = next(json.loads(x) for x in lines if '"kind":"rule"' in x)["hints"]
    out = []
    for q, m, s, g, *_ in hints["classes"]:
        fixed = s["first"] if isinstance(s, dict) else tuple(s)
        out += list(itertools.product(*gap_rule.slots(dims, q, m, fixed, g)))
    for q, m, sets, *_ in hints.get("boxes", []):
        box = gap_rule.Box(tuple(x) for x in sets)
        out += list(itertools.product(*gap_rule.slots(dims, q, m, box, 0)))
    return out + [tuple(t) for t in hints.get("residue", [])]


def audit_family_gap_variant(fw, path: Path, tag: str, work: Path, tally, name: str,
                             strategy: str, semantics: str, check, wrong) -> None:
    """Certify with `strategy` under `semantics` and check with `check(cert, what)`; an
    accepted certificate's counted sequences (family_gap_members) must be distinct and as
    many as its claim, `wrong(seqs)` must name none of them, and its claim + 1 is refused."""
    try:
        lines, _ = generate(str(path), strategy, float_shadow=False, semantics=semantics)
    except NotApplicable:
        tally.certificates[name, "not applicable"] += 1
        return
    except Exception as err:  # noqa: BLE001 -- a generator crash is a finding
        tally.certificates[name, "generator error"] += 1
        tally.generator_errors.append(f"{tag} {name}: {type(err).__name__}: {err}"[:300])
        return
    cert = work / f"{tag}.{name.replace(' ', '-')}.jsonl"
    cert.write_text("\n".join(lines) + "\n")
    try:
        report = check(cert, f"{tag} {name}")
    except (Rejected, Malformed) as err:
        tally.certificates[name, type(err).__name__.lower()] += 1
        tally.generator_errors.append(f"{tag} {name}: checker refused: {err}"[:300])
        return
    tally.certificates[name, "accepted"] += 1
    claim = report.facts.correct
    tally.claimed += claim
    seqs = family_gap_members(lines, fw.dims)
    if len(seqs) != claim or len(set(seqs)) != len(seqs):
        tally.false_theorems.append(f"{tag} {name}: claims {claim}, counts {len(seqs)} "
                                    f"({len(set(seqs))} distinct)")
    tally.sequences_rechecked += len(seqs)
    for t, why in wrong(seqs):
        tally.false_theorems.append(f"{tag} {name}: counts {t}, {why}")
    objs = [json.loads(x) for x in lines]
    i = next(n for n, o in enumerate(objs) if o.get("kind") == "rule")
    cert.write_text("\n".join(fuzz_audit._dump(objs, i, dict(objs[i], claim=claim + 1))) + "\n")
    tally.mutants[f"{name.split()[-1]} claim+1"] += 1
    try:
        check(cert, f"{tag} {name} mutant claim+1")
    except (Rejected, Malformed):
        return
    tally.false_theorems.append(f"{tag} {name}: mutant claim+1 accepted")


def audit_family_gap_boxes(fw, path: Path, tag: str, work: Path, tally) -> None:
    """`--strategy family-gap:merge=always,boxes=on` (classes, box classes and a residue on
    several layers), checked by both back-ends: every counted sequence correct by the 256-bit
    oracle."""
    def wrong(seqs):
        verdicts = verdicts_of(fw)
        return [(t, verdicts[t]) for t in map(tuple, seqs) if verdicts[t] != "correct"]

    audit_family_gap_variant(fw, path, tag, work, tally, "family-gap boxes",
                             "family-gap:merge=always,boxes=on", "real",
                             lambda cert, what: fuzz_audit.check_both(cert, path, tally, what),
                             wrong)


def audit_float32_family_gap(fw, path: Path, tag: str, work: Path, tally) -> None:
    """`gen-cert --strategy family-gap:merge=always,boxes=on --semantics float32`, checked with
    mpmath (a float32 theorem's arithmetic): every counted sequence (classes, box classes,
    residue) has output max(t), strictly, in a float32 execution (torch)."""
    def wrong(seqs):
        if not seqs:
            return []
        tokens = np.array(seqs, dtype=np.int64).reshape(-1, fw.dims.n_ctx)
        logits = float32_logits(fw, tokens)
        top, rows = tokens.max(axis=1), np.arange(len(tokens))
        best = logits[rows, top].copy()
        logits[rows, top] = -np.inf
        return [(tuple(t), "wrong in float32") for t in tokens[~(logits.max(axis=1) < best)]]

    audit_family_gap_variant(fw, path, tag, work, tally, "family-gap float32",
                             "family-gap:merge=always,boxes=on", "float32",
                             lambda cert, what: check_file(str(cert), Limits(), str(path),
                                                           jobs=1, arith=arith.MPMATH),
                             wrong)


# ---- overwhelm claims on deep models (rule overwhelm_family on several layers) ------------------

def overwhelm_truth(fw: FamilyWeights, claim) -> bool:
    """Every admissible completion's output is claim.output, strictly (margin above the
    256-bit oracle's resolution: an undecided margin counts as false)."""
    from generator.overwhelm import completions

    for t in completions(claim, fw.dims.d_vocab):
        logits = oracle_logits(fw, claim.prefix + tuple(t) + (claim.query,))
        margin = logits[claim.output] - max(x for o, x in enumerate(logits) if o != claim.output)
        size = max(abs(x) for x in logits) + 1
        if margin <= size * mpmath.ldexp(1, -UNDECIDED_BITS):
            return False
    return True


def _hint_mutant(objs, rule_index: int, rng, kind: str):
    """A box end moved inward by half its width, or one diff bound lowered."""
    import base64

    rule = json.loads(json.dumps(objs[rule_index]))
    entries = rule["hints"]["boxes" if kind == "box narrowed" else "diff"]
    entry = entries[int(rng.integers(len(entries)))]
    arr = np.frombuffer(base64.b64decode(entry[-1]), dtype="<f8").copy()
    if kind == "box narrowed":
        box = arr.reshape(-1, 2)
        k, side = int(rng.integers(len(box))), int(rng.integers(2))
        width = box[k, 1] - box[k, 0]
        box[k, side] += (1 if side == 0 else -1) * (width / 2 + 1e-6 * (abs(box[k, side]) + 1))
    else:
        k = int(rng.integers(arr.size))
        arr[k] -= abs(arr[k]) / 2 + 1e-6
    entry[-1] = base64.b64encode(arr.astype("<f8").tobytes()).decode()
    return fuzz_audit._dump(objs, rule_index, rule)


def audit_overwhelm(fw, path: Path, tag: str, work: Path, tally, rng, claims: int = 3):
    """Random free claims on a model with n_layers >= 2: the generator's certificate (or a
    forced one when it does not prove the claim), checked by both back-ends; an accepted
    claim is re-checked on every completion by the 256-bit oracle; mutants (another output,
    a box narrowed, a diff bound lowered) accepted only if still true."""
    from checker.statement import Overwhelm
    from generator.modelfile import load_model
    from generator.overwhelm import certify

    dims = fw.dims
    if dims.family.n_layers < 2:
        return
    loaded = load_model(path)
    for c in range(claims):
        v, k = dims.d_vocab, dims.n_ctx
        size = int(rng.integers(1, v + 1))
        over = tuple(sorted(int(x) for x in rng.choice(v, size, replace=False)))
        claim = Overwhelm((int(rng.integers(v)),), int(rng.integers(v)), -1, free_cmp="<=",
                          free=int(rng.integers(0, k - 1)), over=over)
        name = f"{tag} overwhelm {c}"
        try:
            verdict = certify(loaded, claim, float_shadow=False)
            if verdict.verdict != "proved":
                verdict = certify(loaded, verdict.claim, float_shadow=False, force=True)
        except Malformed as err:  # RMS: refused by name
            tally.certificates["overwhelm", "refused"] += 1
            if "RMS" not in str(err):
                tally.generator_errors.append(f"{name}: {err}"[:300])
            continue
        claim, lines = verdict.claim, verdict.lines
        cert = work / f"{tag}.overwhelm{c}.jsonl"
        cert.write_text("\n".join(lines) + "\n")
        try:
            fuzz_audit.check_both(cert, path, tally, name)
        except (Rejected, Malformed) as err:
            outcome = type(err).__name__.lower()
            tally.certificates["overwhelm", f"{verdict.verdict} {outcome}"] += 1
            if verdict.verdict == "proved":
                tally.generator_errors.append(f"{name}: proof refused: {err}"[:300])
            continue
        tally.certificates["overwhelm", f"{verdict.verdict} accepted"] += 1
        if not overwhelm_truth(fw, claim):
            tally.false_theorems.append(f"{name}: ACCEPTED but false: {claim}")
        objs = [json.loads(x) for x in lines]
        i = next(n for n, o in enumerate(objs) if o.get("kind") == "rule")
        other = (claim.output + 1 + int(rng.integers(v - 1))) % v if v > 1 else claim.output
        mutants = [("output changed", fuzz_audit._dump(objs, i, dict(objs[i], claim={
            **objs[i]["claim"], "output": other})))]
        mutants += [(kind, _hint_mutant(objs, i, rng, kind))
                    for kind in ("box narrowed", "diff lowered")]
        for kind, mutated in mutants:
            cert.write_text("\n".join(mutated) + "\n")
            tally.mutants["overwhelm " + kind] += 1
            try:
                rep = fuzz_audit.check_both(cert, path, tally, f"{name} mutant {kind}")
            except (Rejected, Malformed):
                continue
            tally.mutants["overwhelm " + kind + " accepted"] += 1
            if not overwhelm_truth(fw, rep.facts.overwhelm):
                tally.false_theorems.append(f"{name}: mutant {kind} ACCEPTED but false")


def run(models: int, seed: int, progress: bool = False,
        overwhelm: int = 0, float32: bool = False) -> fuzz_audit.Tally:
    tally = fuzz_audit.Tally()
    with tempfile.TemporaryDirectory(prefix="maxk-fuzz-deep-") as tmp:
        for n in range(models):
            rng = np.random.default_rng([seed, n, 21])
            fw, variant = make_model(rng)
            f = fw.dims.family
            tag = f"s{seed}_{n}_L{f.n_layers}{'g' if f.gated_mlp else ''}_{variant}"
            try:
                audit_model(fw, tag, Path(tmp), tally, rng)
                if f.n_layers > 1:  # family_gap's box classes on several layers
                    audit_family_gap_boxes(fw, Path(tmp) / f"{tag}.pt", tag, Path(tmp), tally)
                if float32:
                    audit_float32_family_gap(fw, Path(tmp) / f"{tag}.pt", tag, Path(tmp), tally)
            except ArithmeticError as err:  # the CLI's "internal error" (fail closed): a finding
                tally.generator_errors.append(f"{tag}: checker internal error: {err}"[:300])
            if overwhelm:
                audit_overwhelm(fw, Path(tmp) / f"{tag}.pt", tag, Path(tmp), tally, rng,
                                overwhelm)
            if progress and (n + 1) % 5 == 0:
                print(f"  {n + 1}/{models} models, {len(tally.false_theorems)} false theorems",
                      file=sys.stderr)
    return tally


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=40)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--overwhelm", type=int, default=0, metavar="N",
                   help="also N random overwhelm claims per model with n_layers >= 2 "
                        "(rule overwhelm_family on several layers), with hint mutants")
    p.add_argument("--float32", action="store_true",
                   help="also a family-gap certificate under --semantics float32 per model, "
                        "every counted sequence re-run in float32 (torch)")
    args = p.parse_args(argv)
    started = time.monotonic()
    tally = run(args.models, args.seed, progress=True, overwhelm=args.overwhelm,
                float32=args.float32)
    print(json.dumps(tally.summary(), indent=1))
    for line in tally.false_theorems + tally.generator_errors:
        print(line)
    print(f"{time.monotonic() - started:.0f} s")
    return 1 if tally.false_theorems else 0


if __name__ == "__main__":
    sys.exit(main())
