"""Red team, float32 mode, for rule overwhelm_family (issue 24): random and hostile small
family models, random overwhelm claims under `semantics == float32`, every accepted claim
confirmed by float32 evaluation in several orders.

Models: fuzz_deep.make_model's deep models (2-3 layers; normalisation none / LN / LNPre /
RMS (refused), 1-2 heads, MLP or not — gated or not, any activation —, learned or rotary
positions, parallel or sequential; variants random, scaled 1e-3..30, large biases, exact
unembedding ties) and one-layer models (LN, LNPre or none; ungated sequential or parallel
MLP or none; RoPE or not) for free and permutation claims.  Per model, N random claims:
gen-cert --semantics float32 (forced when not proved), checked in-process under mpmath and
arb; mutants: another output, the real certificate relabelled float32, and on several
layers a box hint narrowed and a diff hint lowered (fuzz_deep._hint_mutant).  Every
accepted claim is evaluated on every completion in five float32 evaluations
(tests/test_float32_overwhelm_deep.deep_float32_evaluations: torch in three residual
orders, a numpy pass of every layer left to right and reversed); a completion whose
claimed logit is not strictly above every other in one of them makes the acceptance a
FALSE THEOREM.  Exit 1 on any false theorem or a disagreement between the back-ends.

    python benchmarks/fuzz_f32_overwhelm.py --models 30 --claims 3 --seed 2026
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "benchmarks", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import fuzz_deep  # noqa: E402
from overwhelm_fixtures import Loaded, check_lines  # noqa: E402
from test_float32_overwhelm_deep import deep_float32_evaluations  # noqa: E402

from checker.errors import Malformed, Rejected  # noqa: E402
from checker.modelspec import Dims, Family, parameter_table  # noqa: E402
from checker.statement import Overwhelm  # noqa: E402
from generator.model import FamilyWeights  # noqa: E402
from generator.overwhelm import certify, completions  # noqa: E402


def one_layer_model(rng) -> FamilyWeights:
    """A random one-layer model of the one-layer float32 scope (LN, LNPre or none;
    sequential or parallel ungated MLP or none; RoPE or not), peaky attention."""
    h = int(rng.choice([2, 4]))
    rotary = bool(rng.random() < 0.4)
    k = int(rng.integers(3, 5))
    d_mlp = int(rng.integers(2, 7)) if rng.random() < 0.7 else 0
    norm = [None, "LN", "LNPre"][int(rng.integers(3))]
    family = Family(normalization=norm, n_heads=int(rng.integers(1, 3)), d_mlp=d_mlp,
                    act_fn=str(rng.choice(["relu", "gelu", "silu"])) if d_mlp else "relu",
                    positional="rotary" if rotary else "standard", n_ctx=k if rotary else 0,
                    rotary_dim=h if rotary else 0, rotary_base=10000 if rotary else 0,
                    ln_eps=1e-5 if norm else 0.0,
                    parallel=bool(d_mlp and rng.random() < 0.4))
    dims = Dims(int(rng.integers(3, 6)), k, int(rng.integers(4, 9)), h, family)
    params = {}
    for p in parameter_table(family):
        shape = dims.shape_of(p.key)
        if p.short.endswith(".w"):
            a = 1 + 0.2 * rng.standard_normal(shape)
        elif p.short.startswith("b") or p.short.endswith(".b"):
            a = 0.1 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(max(shape[-2] if len(shape) > 1 else 1, 1))
            if p.short == "W_Q":
                a = a * 4
        params[p.key] = np.asarray(a, np.float32)
    return FamilyWeights(dims=dims, params=params)


def float32_truth(fw: FamilyWeights, claim: Overwhelm) -> bool:
    """Every completion strictly outputs claim.output in every float32 evaluation."""
    for t in completions_grouped(claim, fw.dims.d_vocab):
        for logits in deep_float32_evaluations(fw, t):
            top = logits[:, claim.output]
            if not (np.delete(logits, claim.output, axis=1) < top[:, None]).all():
                return False
    return True


def completions_grouped(claim: Overwhelm, v: int):
    by_len = collections.defaultdict(list)
    for t in completions(claim, v):
        by_len[len(t)].append(claim.prefix + tuple(t) + (claim.query,))
    for seqs in by_len.values():
        yield np.array(seqs, dtype=np.int64)


def relabelled(lines: list) -> list:
    out = [json.loads(s) for s in lines]
    out[0]["theorem"] = out[0]["theorem"].replace(" and semantics == float32", "") \
        + " and semantics == float32"
    return [json.dumps(o) for o in out]


def random_claim(rng, dims: Dims, perm: bool) -> Overwhelm:
    v, k = dims.d_vocab, dims.n_ctx
    prefix = (int(rng.integers(v)),)
    query = int(rng.integers(v))
    if perm:
        n = int(rng.integers(1, k - 1))
        return Overwhelm(prefix, query, -1, free_perm=tuple(sorted(
            int(x) for x in rng.integers(v, size=n))))
    size = int(rng.integers(1, v + 1))
    over = tuple(sorted(int(x) for x in rng.choice(v, size, replace=False)))
    return Overwhelm(prefix, query, -1, free_cmp=str(rng.choice(["<=", "=="])),
                     free=int(rng.integers(0, k - 1)), over=over)


class Tally:
    def __init__(self):
        self.counts = collections.Counter()
        self.false_theorems: list[str] = []
        self.disagreements: list[str] = []
        self.generator_errors: list[str] = []


def judge(tally: Tally, fw, lines, name: str, kind: str) -> None:
    """Check `lines` under both back-ends; an acceptance must be float32-true."""
    verdicts = []
    for arith in ("mpmath", "arb"):
        try:
            report = check_lines(lines, arith=arith)
            verdicts.append(("accepted", report))
        except (Rejected, Malformed) as err:
            verdicts.append((type(err).__name__, None))
    if verdicts[0][0] != verdicts[1][0]:
        tally.disagreements.append(f"{name} {kind}: mpmath {verdicts[0][0]}, arb {verdicts[1][0]}")
    tally.counts[f"{kind} {verdicts[0][0]}"] += 1
    report = verdicts[0][1] or verdicts[1][1]
    if report is None:
        return
    if report.facts.semantics != "float32":
        tally.false_theorems.append(f"{name} {kind}: accepted with semantics "
                                    f"{report.facts.semantics}")
    claim = report.facts.overwhelm
    if not float32_truth(fw, claim):
        tally.false_theorems.append(f"{name} {kind}: ACCEPTED but false in float32: {claim}")


def audit(fw: FamilyWeights, tag: str, tally: Tally, rng, claims: int) -> None:
    loaded = Loaded(fw)
    deep = fw.dims.family.n_layers > 1
    for c in range(claims):
        perm = not deep and fw.dims.n_ctx >= 3 and rng.random() < 0.4
        claim = random_claim(rng, fw.dims, perm)
        name = f"{tag} claim {c}"
        try:
            real = certify(loaded, claim, float_shadow=False)
            claim = real.claim
            f32 = certify(loaded, claim, float_shadow=False, semantics="float32", force=True)
        except Malformed as err:
            tally.counts["refused by name"] += 1
            if not any(w in str(err) for w in ("RMS", "gated", "permutation", "free_perm",
                                                 "free-perm")):
                tally.generator_errors.append(f"{name}: {err}"[:300])
            continue
        tally.counts[f"claims: real {real.verdict}, float32 {f32.verdict}"] += 1
        if f32.verdict == "proved":
            judge(tally, fw, f32.lines, name, "float32 proved")
        elif f32.lines:
            judge(tally, fw, f32.lines, name, "float32 forced")
        if real.lines:
            judge(tally, fw, relabelled(real.lines), name, "real relabelled")
        if not f32.lines:
            continue
        objs = [json.loads(x) for x in f32.lines]
        i = next(n for n, o in enumerate(objs) if o.get("kind") == "rule")
        v = fw.dims.d_vocab
        other = (claim.output + 1 + int(rng.integers(v - 1))) % v
        mutants = [("mutant output", fuzz_deep.fuzz_audit._dump(objs, i, dict(objs[i], claim={
            **objs[i]["claim"], "output": other})))]
        if deep:
            mutants += [(f"mutant {kind}", fuzz_deep._hint_mutant(objs, i, rng, kind))
                        for kind in ("box narrowed", "diff lowered")]
        for kind, lines in mutants:
            judge(tally, fw, lines, name, kind)


def run(models: int, claims: int, seed: int, progress: bool = False) -> Tally:
    rng = np.random.default_rng(seed)
    tally = Tally()
    for n in range(models):
        if n % 3 == 2:
            fw, variant = one_layer_model(rng), "one-layer"
        else:
            fw, variant = fuzz_deep.make_model(rng)  # (a one-layer gated one: refused)
        tag = f"model {n} ({variant}, {fw.dims.family.n_layers} layer(s))"
        tally.counts["models"] += 1
        started = time.monotonic()
        audit(fw, tag, tally, rng, claims)
        if progress:
            print(f"{tag}: {time.monotonic() - started:.1f} s, false theorems so far "
                  f"{len(tally.false_theorems)}", file=sys.stderr, flush=True)
    return tally


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", type=int, default=20)
    p.add_argument("--claims", type=int, default=3)
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args(argv)
    started = time.monotonic()
    tally = run(args.models, args.claims, args.seed, progress=True)
    for key, count in sorted(tally.counts.items()):
        print(f"{key}: {count}")
    print(f"generator errors: {len(tally.generator_errors)}")
    for e in tally.generator_errors[:10]:
        print("  " + e)
    print(f"back-end disagreements: {len(tally.disagreements)}")
    for e in tally.disagreements[:10]:
        print("  " + e)
    print(f"FALSE THEOREMS: {len(tally.false_theorems)}")
    for e in tally.false_theorems:
        print("  " + e)
    print(f"({time.monotonic() - started:.0f} s)")
    return 1 if tally.false_theorems or tally.disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
