"""Adversarial audit: random and hostile small models, every strategy, every claim re-checked.

For each model (families below: random, scaled 1e-30..1e3, biased, strong positional
attention, near-ties, planted max circuits, d_vocab 2), run every strategy in
generator.certify.strategies.STRATEGIES (new ones are covered automatically), check each
certificate with the checker (`--model` binding included), and re-check what an accepted
certificate claims with an independent forward pass in mpmath at PRECISION bits, written here
from spec/theorem.md §2 (not the generator's or the checker's code):

* every strategy: the claim N must be at most the number of sequences the forward pass
  confirms correct (all d_vocab^n_ctx sequences are evaluated);
* rule cubic: every sequence its good sets cover (spec/rules.md, theorem cubic) must be
  confirmed correct individually.

A claim above the confirmed count, or a covered sequence that is wrong, is a FALSE THEOREM.
A margin within the forward pass's rounding is "undecided" and counts against the claim.

    python benchmarks/fuzz_audit.py                  # the full run recorded in RESULTS.md
    python benchmarks/fuzz_audit.py --models 20 --seed 5
    python benchmarks/fuzz_audit.py --configs 300 --seed 0  # config fuzz (issue 18)
    python benchmarks/fuzz_audit.py --streams                # hostile streams (issue 18)
    python benchmarks/fuzz_audit.py --deep 40 --seed 2026    # deep and gated families (issue 21)
    python benchmarks/fuzz_audit.py --tasks 40 --seed 2026   # tasks and datasets (issue 20)

The CI slice is tests/test_fuzz_audit.py.  Not a timed test: it prints counts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import mpmath
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # the sibling fuzz families

from checker import arith  # noqa: E402
from checker.certificate import Limits  # noqa: E402
from checker.cli import check_file  # noqa: E402
from checker.errors import Malformed, Rejected  # noqa: E402
from checker.modelspec import Dims  # noqa: E402
from generator.certify.strategies import STRATEGIES, NotApplicable  # noqa: E402
from generator.cli import generate  # noqa: E402
from generator.model import ModelWeights, canonical_shape  # noqa: E402
from generator.modelfile import save_model  # noqa: E402

PRECISION = 256  # bits of the independent forward pass
UNDECIDED_BITS = 190  # |margin| <= 2^-190 · (size of the terms): rounding could flip it
FAMILIES = ("random", "scaled", "biased", "positional", "near_tie", "planted", "vocab2")
BIASES = ("b_Q", "b_K", "b_V", "b_O", "b_U")


# ---- models ---------------------------------------------------------------------------------

def _dims(rng, family: str) -> Dims:
    v = 2 if family == "vocab2" else int(rng.integers(2, 7))
    k = int(rng.integers(2, 5))
    if family == "planted":  # copying needs d = h = v
        return Dims(v, k, v, v)
    return Dims(v, k, int(rng.integers(2, 7)), int(rng.integers(2, 7)))


def _random(rng, dims: Dims) -> dict:
    return {n: rng.standard_normal(canonical_shape(n, dims)) / np.sqrt(dims.d_model)
            for n in ModelWeights.names() if n not in BIASES}


def _planted(rng, dims: Dims) -> dict:
    """A hand-built max circuit with noise: query·key = α·t (attend to the largest token),
    OV copies the attended token with gain γ over the direct path (d = h = v)."""
    v, h = dims.d_vocab, dims.d_head
    alpha, gamma, noise = rng.uniform(1, 20), rng.uniform(2, 20), 10 ** rng.uniform(-4, -1)
    w_q = np.zeros((v, h))
    w_q[:, 0] = 1.0
    w_k = np.zeros((v, h))
    w_k[:, 0] = alpha * np.arange(v) * np.sqrt(h)
    w = {"W_E": np.eye(v), "W_pos": np.zeros((dims.n_ctx, v)), "W_Q": w_q, "W_K": w_k,
         "W_V": np.eye(v), "W_O": gamma * np.eye(v), "W_U": np.eye(v)}
    return {n: a + noise * rng.standard_normal(a.shape) for n, a in w.items()}


def make_model(rng, family: str) -> ModelWeights:
    """One model of `family` (see the module docstring)."""
    dims = _dims(rng, family)
    base = "planted" if family == "planted" or rng.random() < 0.3 else "random"
    arrays = _planted(rng, Dims(dims.d_vocab, dims.n_ctx, dims.d_vocab, dims.d_vocab)) \
        if base == "planted" else _random(rng, dims)
    if base == "planted":
        dims = Dims(dims.d_vocab, dims.n_ctx, dims.d_vocab, dims.d_vocab)
    if family == "scaled":
        if rng.random() < 0.5:
            scale = 10 ** rng.uniform(-30, 3)
            arrays = {n: a * scale for n, a in arrays.items()}
        else:
            arrays = {n: a * 10 ** rng.uniform(-30, 3) for n, a in arrays.items()}
    if family == "biased" or rng.random() < 0.2:
        for n in BIASES:
            arrays[n] = rng.standard_normal(canonical_shape(n, dims)) * 10 ** rng.uniform(-2, 1)
    if family == "positional":  # W_pos up to 200× (placements matter; exp may overflow)
        arrays["W_pos"] = arrays["W_pos"] * 10 ** rng.uniform(0, 2.3)
        arrays["W_E"] = arrays["W_E"] * rng.uniform(0.5, 3)
    if family == "near_tie":
        arrays = _near_tie(rng, arrays, dims)
    weights = ModelWeights.zeros(dims)
    return weights.replace(**{n: np.asarray(a, dtype=np.float32) for n, a in arrays.items()})


def _near_tie(rng, arrays: dict, dims: Dims) -> dict:
    """Two unembedding columns equal (exact ties) or 1e-7 apart, or everything ~1e-30."""
    choice = int(rng.integers(3))
    u = np.array(arrays["W_U"], dtype=np.float64)
    a, b = rng.choice(dims.d_vocab, 2, replace=False)
    if choice == 0:
        u[:, a] = u[:, b]
    elif choice == 1:
        u[:, a] = u[:, b] * (1 + 1e-7 * rng.standard_normal(dims.d_model))
    else:
        return {n: x * 1e-30 for n, x in arrays.items()}
    return arrays | {"W_U": u}


# ---- the independent forward pass -----------------------------------------------------------

class Oracle:
    """The real model of spec/theorem.md §2 in mpmath at PRECISION bits: every float32 weight
    is converted exactly; only exp, sqrt and the arithmetic round (at 256 bits)."""

    def __init__(self, weights: ModelWeights):
        mpmath.mp.prec = PRECISION
        d = weights.dims
        self.v, self.k = d.d_vocab, d.n_ctx
        w = {n: [[mpmath.mpf(float(x)) for x in row]
                 for row in np.atleast_2d(np.asarray(getattr(weights, n), np.float64))]
             for n in ModelWeights.names()}
        inv_sqrt_h = 1 / mpmath.sqrt(d.d_head)
        x = {(t, i): [e + p for e, p in zip(w["W_E"][t], w["W_pos"][i])]
             for t in range(self.v) for i in range(self.k)}
        self.key = {ti: _add(_vecmat(xi, w["W_K"]), w["b_K"][0]) for ti, xi in x.items()}
        value = {ti: _add(_vecmat(xi, w["W_V"]), w["b_V"][0]) for ti, xi in x.items()}
        self.vou = {ti: _vecmat(_vecmat(vi, w["W_O"]), w["W_U"]) for ti, vi in value.items()}
        last = self.k - 1
        self.query = {t: [q * inv_sqrt_h for q in _add(_vecmat(x[t, last], w["W_Q"]),
                                                         w["b_Q"][0])] for t in range(self.v)}
        self.direct = {t: _add(_vecmat(_add(x[t, last], w["b_O"][0]), w["W_U"]), w["b_U"][0])
                       for t in range(self.v)}

    def margin(self, seq) -> tuple:
        """(ℓ_max − max_{o≠max} ℓ_o, the size of the terms) for one sequence."""
        q, top = seq[-1], max(seq)
        scores = [mpmath.fsum(a * b for a, b in zip(self.query[q], self.key[t, i]))
                  for i, t in enumerate(seq)]
        shift = max(scores)
        weights = [mpmath.exp(s - shift) for s in scores]
        total = mpmath.fsum(weights)
        logits = [self.direct[q][o] + mpmath.fsum(wi * self.vou[t, i][o] for i, (wi, t)
                                                  in enumerate(zip(weights, seq))) / total
                  for o in range(self.v)]
        size = max(abs(x) for x in self.direct[q]) + max(
            abs(x) for i, t in enumerate(seq) for x in self.vou[t, i])
        return logits[top] - max(x for o, x in enumerate(logits) if o != top), size

    def verdict(self, seq) -> str:
        """'correct', 'wrong' or 'undecided' (|margin| within rounding)."""
        m, size = self.margin(seq)
        if abs(m) <= size * mpmath.ldexp(1, -UNDECIDED_BITS) or (m == 0):
            return "undecided"
        return "correct" if m > 0 else "wrong"


def _vecmat(x, m):
    return [mpmath.fsum(x[r] * m[r][c] for r in range(len(x))) for c in range(len(m[0]))]


def _add(x, y):
    return [a + b for a, b in zip(x, y)]


# ---- one model, every strategy ---------------------------------------------------------------

@dataclass
class Tally:
    models: int = 0
    certificates: Counter = field(default_factory=Counter)  # (strategy, outcome) -> n
    sequences_rechecked: int = 0  # forward passes on sequences of accepted certificates
    covered_confirmed: int = 0  # cubic-covered sequences confirmed one by one
    claimed: int = 0  # sum of accepted claims
    false_theorems: list = field(default_factory=list)
    generator_errors: list = field(default_factory=list)
    mutants: Counter = field(default_factory=Counter)  # kind (+ " accepted") -> n
    backend_disagreements: list = field(default_factory=list)  # mpmath vs Arb verdicts
    backend_checks: int = 0  # certificates checked by both back-ends

    def summary(self) -> dict:
        return {"models": self.models,
                "certificates": {f"{s}:{o}": n for (s, o), n in sorted(self.certificates.items())},
                "accepted": sum(n for (_, o), n in self.certificates.items() if o == "accepted"),
                "sequences_rechecked": self.sequences_rechecked,
                "covered_sequences_confirmed": self.covered_confirmed,
                "claimed_total": self.claimed,
                "mutants": dict(sorted(self.mutants.items())),
                "false_theorems": len(self.false_theorems),
                "generator_errors": len(self.generator_errors),
                "checked_by_both_backends": self.backend_checks,
                "backend_disagreements": len(self.backend_disagreements)}


def _second_backend():
    """Arb, when python-flint is installed: every certificate is checked by both back-ends
    and any difference in verdict or count is a finding (spec/arithmetic.md)."""
    try:
        return arith.get("arb")
    except arith.Unavailable:
        return None


SECOND_BACKEND = _second_backend()


def check_both(cert: Path, model_path: Path, tally: Tally, what: str):
    """check_file with the reference back-end (its outcome is returned or raised), and
    again with Arb when available; a different outcome is recorded in the tally."""
    outcomes = []
    for ar in (arith.MPMATH, SECOND_BACKEND):
        if ar is None:
            continue
        try:
            report = check_file(str(cert), Limits(), str(model_path), jobs=1, arith=ar)
            outcomes.append(("accepted", report.facts.correct, report))
        except (Rejected, Malformed) as err:
            outcomes.append((type(err).__name__, None, err))
    if len(outcomes) == 2:
        tally.backend_checks += 1
        if outcomes[0][:2] != outcomes[1][:2]:
            message = f"{what}: mpmath {outcomes[0][:2]} vs arb {outcomes[1][:2]}"
            tally.backend_disagreements.append(f"{message}: {outcomes[1][2]}"[:300])
    kind, _, result = outcomes[0]
    if kind != "accepted":
        raise result
    return result


def audit_model(weights: ModelWeights, tag: str, workdir: Path, tally: Tally, rng,
                mutants_per_cert: int = 2) -> None:
    tally.models += 1
    model_path = workdir / f"{tag}.pt"
    save_model(model_path, weights, None)
    oracle, verdicts = None, None
    for name in sorted(STRATEGIES):
        try:
            lines, _ = generate(str(model_path), name, float_shadow=bool(rng.random() < 0.5))
        except NotApplicable:
            tally.certificates[name, "not applicable"] += 1
            continue
        except Exception as err:  # noqa: BLE001 -- a generator crash is a finding, not a stop
            tally.certificates[name, "generator error"] += 1
            tally.generator_errors.append(f"{tag} {name}: {type(err).__name__}: {err}"[:300])
            continue
        cert = workdir / f"{tag}.{name}.jsonl"
        cert.write_text("\n".join(lines) + "\n")
        try:
            report = check_both(cert, model_path, tally, f"{tag} {name}")
        except Rejected as err:
            tally.certificates[name, "rejected"] += 1
            tally.generator_errors.append(f"{tag} {name}: checker rejected: {err}"[:300])
            continue
        except Malformed as err:
            tally.certificates[name, "malformed"] += 1
            tally.generator_errors.append(f"{tag} {name}: checker malformed: {err}"[:300])
            continue
        tally.certificates[name, "accepted"] += 1
        claim = report.facts.correct
        tally.claimed += claim
        if oracle is None:
            oracle = Oracle(weights)
            d = weights.dims
            verdicts = {s: oracle.verdict(s)
                        for s in itertools.product(range(d.d_vocab), repeat=d.n_ctx)}
        _verify(f"{tag} {name}", lines, claim, verdicts, weights.dims, tally)
        for kind, mutated in mutants(lines, rng, weights.dims, mutants_per_cert, verdicts):
            cert.write_text("\n".join(mutated) + "\n")
            tally.mutants[kind] += 1
            try:
                report = check_both(cert, model_path, tally, f"{tag} {name} mutant {kind}")
            except (Rejected, Malformed):
                continue
            tally.mutants[kind + " accepted"] += 1
            _verify(f"{tag} {name} mutant {kind}", mutated, report.facts.correct, verdicts,
                    weights.dims, tally)


def _verify(what: str, lines, claim: int, verdicts: dict, dims: Dims, tally: Tally) -> None:
    """An accepted certificate's claim against the forward pass: by count, and (cubic) every
    covered sequence one by one."""
    tally.sequences_rechecked += len(verdicts)
    confirmed = sum(v == "correct" for v in verdicts.values())
    if claim > confirmed:
        tally.false_theorems.append(f"{what}: claims {claim} correct, the forward pass "
                                    f"confirms {confirmed} ({Counter(verdicts.values())})")
    for seq in covered_sequences(lines, dims):
        tally.covered_confirmed += 1
        if verdicts[seq] != "correct":
            tally.false_theorems.append(f"{what}: covers {seq}, which is {verdicts[seq]}")


def mutants(lines, rng, dims: Dims, per_cert: int = 2, verdicts: dict | None = None):
    """Adversarial edits of an accepted certificate: the rule line claims one more sequence;
    for rule cubic, up to `per_cert` edits that each claim one more token good for some
    (m, q, c) (its check (II) split or joint at random), false claims first.  The checker
    must refuse each unless it is still true."""
    objs = [json.loads(text) for text in lines]
    i = next(n for n, o in enumerate(objs) if o.get("kind") == "rule")
    rule = objs[i]
    more = dict(rule, claim=rule["claim"] + 1)
    yield "claim+1", _dump(objs, i, more)
    if rule["rule"] != "cubic":
        return
    v, k = dims.d_vocab, dims.n_ctx
    good = {(m, q, c): rest for m, q, c, *rest in rule["hints"]["good"]}
    options = [(m, q, c, u) for m in range(1, v) for q in range(m + 1)
               for c in range(1, (k - 1 if q == m else k - 2) + 1) for u in range(m)
               if not good.get((m, q, c), [0])[0] >> u & 1]
    if not options:
        return
    # options that would cover a sequence the forward pass finds not correct come first: a
    # sound checker must refuse them, and a checker with a broken proof step may not
    false = [o for o in options if verdicts is not None and _covers_a_bad_one(o, good, verdicts)]
    true = [o for o in options if o not in false]
    ranked = [false[j] for j in rng.permutation(len(false))] + \
        [true[j] for j in rng.permutation(len(true))]
    for m, q, c, u in ranked[:per_cert]:
        mask, *joint = good.get((m, q, c), [0])
        joint = (joint[0] if joint else 0) | ((1 << u) if rng.random() < 0.5 else 0)
        edited = good | {(m, q, c): [mask | 1 << u] + ([joint] if joint else [])}
        hints = {"good": [[*key, *val] for key, val in sorted(edited.items())]}
        yield "cubic token+1", _dump(objs, i, dict(rule, hints=hints))


def _covers_a_bad_one(option, good, verdicts) -> bool:
    """Whether claiming token u good for (m, q, c) covers a sequence that is not correct."""
    m, q, c, u = option
    mask = good.get((m, q, c), [0])[0] | 1 << u
    for seq, verdict in verdicts.items():
        lower = [t for t in seq[:-1] if t < m]
        if verdict != "correct" and seq[-1] == q and max(seq) == m and len(lower) == c \
                and u in lower and all(mask >> t & 1 for t in lower):
            return True
    return False


def _dump(objs, i, line):
    return [json.dumps(line if n == i else o, separators=(",", ":")) for n, o in enumerate(objs)]


def covered_sequences(lines, dims: Dims):
    """The sequences a certificate's cubic rule line covers (spec/rules.md theorem cubic);
    nothing for other rules, whose claims are checked by count."""
    for text in lines:
        obj = json.loads(text)
        if obj.get("kind") == "rule" and obj.get("rule") == "cubic":
            good = {(m, q, c): mask for m, q, c, mask, *_ in obj["hints"]["good"]}
            for seq in itertools.product(range(dims.d_vocab), repeat=dims.n_ctx):
                q, m = seq[-1], max(seq)
                lower = [t for t in seq[:-1] if t < m]
                mask = good.get((m, q, len(lower)), 0)
                if (not lower and mask) or (lower and all(mask >> t & 1 for t in lower)):
                    yield seq


def run(models: int, seed: int, workdir: Path | None = None, progress: bool = False,
        mutants_per_cert: int = 2) -> Tally:
    """Audit `models` models, families in turn, deterministically from `seed`."""
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="maxk-fuzz-") as tmp:
        work = workdir or Path(tmp)
        for n in range(models):
            rng = np.random.default_rng([seed, n])
            family = FAMILIES[n % len(FAMILIES)]
            weights = make_model(rng, family)
            audit_model(weights, f"s{seed}_{n}_{family}", work, tally, rng, mutants_per_cert)
            if progress and (n + 1) % 10 == 0:
                print(f"  {n + 1}/{models} models, {len(tally.false_theorems)} false theorems",
                      file=sys.stderr)
    return tally


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=350)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--mutants", type=int, default=10, help="cubic token mutants per certificate")
    p.add_argument("--configs", type=int, metavar="N", help="instead: the config-fuzz family, "
                   "N random TransformerLens configs judged by TransformerLens (fuzz_configs.py)")
    p.add_argument("--streams", action="store_true",
                   help="instead: the hostile-stream cases (fuzz_streams.py)")
    p.add_argument("--deep", type=int, metavar="N", help="instead: N random deep and gated "
                   "family models (issue 21; fuzz_deep.py)")
    p.add_argument("--tasks", type=int, metavar="N", help="instead: N random models x random "
                   "built-in tasks and datasets (issue 20; fuzz_tasks.py)")
    args = p.parse_args(argv)
    if args.tasks is not None:
        import fuzz_tasks

        return fuzz_tasks.main(["--models", str(args.tasks), "--seed", str(args.seed)])
    if args.deep is not None:
        import fuzz_deep

        return fuzz_deep.main(["--models", str(args.deep), "--seed", str(args.seed)])
    if args.configs is not None:
        import fuzz_configs

        return fuzz_configs.main(["--cases", str(args.configs), "--seed", str(args.seed)])
    if args.streams:
        import fuzz_streams

        return fuzz_streams.main()
    started = time.monotonic()
    tally = run(args.models, args.seed, progress=True, mutants_per_cert=args.mutants)
    print(json.dumps(tally.summary(), indent=1))
    for line in tally.false_theorems + tally.generator_errors:
        print(line)
    print(f"strategies: {', '.join(sorted(STRATEGIES))}; {time.monotonic() - started:.0f} s")
    return 1 if tally.false_theorems else 0


if __name__ == "__main__":
    sys.exit(main())
