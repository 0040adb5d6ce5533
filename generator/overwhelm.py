"""gen-cert --property overwhelm: certificates that a fixed prompt forces the
output for every free completion (spec/overwhelm.md), and a scan over
candidate prefixes.

    gen-cert MODEL --property overwhelm --prefix 63 --query 5 --free 8 -o c.jsonl
    gen-cert MODEL --property overwhelm --prefix 63 --query 5 --free 8 --target 63
    gen-cert MODEL --property overwhelm --prefix 1 --query 4 --free 40 --over 2,3
    gen-cert MODEL --property overwhelm --prefix 1 --query 4 --free-perm 2,2,3,3
    gen-cert MODEL --property overwhelm --scan prefixes.txt --query 4 --free 8 --out-dir D
    gen-cert MODEL --property overwhelm --scan-all 1 --query 5 --free 2 --out-dir D

Each candidate gets one verdict line on stdout:
  proved      a certificate was written (check it with check-cert)
  refuted     a completion was found on which the float64 model does not output o
  not proved  neither (a bound within rounding of 0)
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from checker.errors import Malformed, Rejected
from checker.rules import overwhelm as free_rule
from checker.statement import Facts, Overwhelm, theorem_text

from .certify.strategies import overwhelm as strategy
from .certify.strategies import overwhelm_deep
from .certify.strategies import overwhelm_family as family_strategy
from .certify.trace import Trace
from .modelfile import load_model
from .progress import progress_bar
from .tasks.causal import logits_at

MAX_SCAN = 100_000  # candidate prefixes a --scan-all may enumerate


@dataclass
class Verdict:
    """The outcome for one candidate claim."""

    claim: Overwhelm
    verdict: str  # "proved", "refuted", "not proved"
    margin: strategy.Margin
    lines: list | None = None
    counterexample: tuple | None = None  # the free string
    counter_output: int | None = None
    seconds: float = 0.0

    def text(self, path: str | None = None) -> str:
        c = self.claim
        head = f"{self.verdict:<10}  prefix={list(c.prefix)} query={c.query} output={c.output}"
        if self.verdict == "proved":
            return head + (f"  certificate {path}" if path else "")
        if self.verdict == "refuted":
            return head + (f"  counterexample free={list(self.counterexample)} -> output "
                           f"{self.counter_output}")
        why = ("bounds too loose (boxes)" if isinstance(self.margin, family_strategy.FamilyMargin)
               else "within rounding of 0")
        return head + (f"  worst bound {self.margin.worst:.3g} (logit {self.margin.competitor})"
                       f" (scale {self.margin.scale:.3g}): {why}")


def parse_tokens(text: str | None) -> tuple | None:
    if text is None:
        return None
    text = text.strip().strip("[]")
    return tuple(int(t) for t in text.replace(",", " ").split()) if text else ()


def claim_from_args(args, prefix: tuple) -> Overwhelm:
    """The claim the options describe (output filled in later if not given)."""
    output = args.target if args.target is not None else -1
    if args.free_perm is not None:
        return Overwhelm(prefix, args.query, output,
                         free_perm=tuple(sorted(parse_tokens(args.free_perm))))
    over = parse_tokens(args.over)
    return Overwhelm(prefix, args.query, output, free_cmp="==" if args.exact_length else "<=",
                     free=args.free, over=tuple(sorted(set(over))) if over else None)


def claim_json(c: Overwhelm) -> dict:
    """The rule line's claim object (checker/rules/overwhelm.py parse_claim)."""
    base = {"prefix": list(c.prefix), "query": c.query, "output": c.output}
    if c.free_perm is not None:
        return {**base, "free_perm": list(c.free_perm)}
    return {**base, "free": c.free, "free_cmp": c.free_cmp,
            "over": None if c.over is None else list(c.over)}


def witness(c: Overwhelm, v: int) -> tuple:
    """Some admissible free string (for the default output)."""
    if c.free_perm is not None:
        return c.free_perm
    return ((c.over or (0,))[0],) * c.free


def any_logits(weights, tokens) -> np.ndarray:
    """The independent float64 forward at the last position, for any family."""
    from .model import FamilyWeights
    from .tasks.family import family_logits_at

    if isinstance(weights, FamilyWeights) and weights.dims.family.n_layers > 1:
        from .tasks.builtin import prefix_logits_float64

        return prefix_logits_float64(weights, tokens)
    if isinstance(weights, FamilyWeights):
        return family_logits_at(weights, tokens)
    return logits_at(weights, tokens)


def uses_family_rule(weights, family_rule: bool) -> bool:
    """Rule overwhelm_family for every family but attention-only (or when asked)."""
    return family_rule or not weights.dims.family.is_attn_only


def model_output(weights, sequence) -> tuple[int, bool]:
    """(argmax, strictly greater than all others) of the float64 model at the end."""
    logits = any_logits(weights, np.array([sequence]))[0]
    top = int(np.argmax(logits))
    return top, bool((np.delete(logits, top) < logits[top]).all())


def certify(loaded, claim: Overwhelm, float_shadow: bool = True,
            force: bool = False, family_rule: bool = False,
            semantics: str = "real") -> Verdict:
    """Decide one claim; on success the certificate's lines are in the verdict.
    `force` writes the lines even when the claim is not proved (tests use it to
    forge certificates of false claims, which the checker must reject)."""
    started = time.monotonic()
    weights, v = loaded.weights, loaded.weights.dims.d_vocab
    free_rule.parse_claim(claim_json(replace(claim, output=max(claim.output, 0))),
                          weights.dims, "free" if claim.free_perm is None else "perm")
    if claim.output < 0:
        claim = replace(claim, output=model_output(
            weights, claim.prefix + witness(claim, v) + (claim.query,))[0])
    trace = Trace(weights, float_shadow=float_shadow)
    if uses_family_rule(weights, family_rule):
        if semantics != "real":
            return _certify_family_float32(loaded, claim, force, started, float_shadow)
        return _certify_family(loaded, claim, trace, force, started)
    ids = strategy.emit_inputs(trace, claim)
    mats = strategy.mid_values(trace, ids)
    if semantics == "float32":  # mirrors the checker's widening of every EU_Q@p
        strategy.float32_widen(trace, mats, ids, claim)
    perm = claim.free_perm is not None
    margin = (strategy.perm_margins if perm else strategy.free_margins)(mats, claim, v)
    verdict = Verdict(claim, "not proved", margin)
    if margin.proved or force:
        hints = None
        if perm:
            from .certify.trace import b64

            hints = {"potentials": [[m, b64(u, "<f8")] for m, u in
                                    sorted(margin.potentials.items())]}
        line = {"kind": "rule", "rule": "overwhelm_perm" if perm else "overwhelm_free",
                "inputs": ids, "claim": claim_json(claim)}
        if hints is not None:
            line["hints"] = hints
        by = trace._append(line)
        facts = Facts(dims={"d_vocab": v, "n_ctx": weights.dims.n_ctx,
                            "d_model": weights.dims.d_model, "d_head": weights.dims.d_head},
                      weights_sha256=trace.weights_sha256, correct=None, overwhelm=claim,
                      semantics=semantics)
        binding = {"file_sha256": loaded.file_sha256}
        verdict.lines = trace.lines("overwhelm", by, 1, binding,
                                    {"program": "gen-cert", "worst_margin": margin.worst},
                                    theorem=theorem_text(facts))
        verdict.verdict = "proved" if margin.proved else "forced"
    if not margin.proved:
        sequence = claim.prefix + margin.completion + (claim.query,)
        top, strict = model_output(weights, sequence)
        if top != claim.output or not strict:
            verdict.verdict = "refuted"
            verdict.counterexample, verdict.counter_output = margin.completion, top
    verdict.seconds = time.monotonic() - started
    return verdict


def _certify_family_float32(loaded, claim: Overwhelm, force: bool, started: float,
                            float_shadow: bool) -> Verdict:
    """Rule overwhelm_family under semantics == float32 (one layer; spec/rules.md
    §overwhelm_family, float32): the real rule's hints with the larger slacks F32_SLACKS in
    turn, each certificate replayed by the checker's float32 rule (untrusted use: the
    generator keeps the first one it accepts).  Not proved: with force, the lines of the
    smallest slack."""
    from checker.certificate import CertificateChecker
    from checker.rules import overwhelm_family as family_rule
    from checker.rules import overwhelm_family_float32 as f32_rule

    weights = loaded.weights
    try:
        f32_rule.scope(weights.dims, claim)
    except Rejected as e:
        raise Malformed(str(e)) from None
    verdict, first = None, None
    for rel in family_strategy.F32_SLACKS:
        trace = Trace(weights, float_shadow=float_shadow)
        margin = overwhelm_deep.margins(weights, claim, rel)  # any depth
        verdict = Verdict(claim, "not proved", margin)
        if not margin.proved and not force:
            break  # the real mirror already fails: no slack helps
        ids = {name: trace.emit(term)
               for name, term in family_rule.inputs(trace.dims, claim).items()}
        verdict.lines = _finish(loaded, trace, claim, "overwhelm_family", ids, margin.hints,
                                margin, {"worst_margin": margin.worst}, semantics="float32")
        first = first or verdict.lines
        if not margin.proved:
            break
        checker = CertificateChecker()
        try:
            for line in verdict.lines:
                checker.feed(line)
            checker.finish()
        except Rejected:
            continue
        verdict.verdict = "proved"
        break
    if verdict.verdict != "proved":  # forced: the smallest slack's lines
        verdict.verdict = "forced" if force and first else "not proved"
        verdict.lines = first if force else None
    verdict.seconds = time.monotonic() - started
    return verdict


def _finish(loaded, trace, claim, rule_name, ids, hints, margin, info,
            semantics: str = "real") -> list:
    """The certificate's lines for a rule line proving `claim`."""
    weights, v = loaded.weights, loaded.weights.dims.d_vocab
    line = {"kind": "rule", "rule": rule_name, "inputs": ids, "claim": claim_json(claim)}
    if hints is not None:
        line["hints"] = hints
    by = trace._append(line)
    facts = Facts(dims={"d_vocab": v, "n_ctx": weights.dims.n_ctx,
                        "d_model": weights.dims.d_model, "d_head": weights.dims.d_head},
                  weights_sha256=trace.weights_sha256, correct=None, overwhelm=claim,
                  semantics=semantics)
    return trace.lines("overwhelm", by, 1, {"file_sha256": loaded.file_sha256},
                       {"program": "gen-cert", **info}, theorem=theorem_text(facts))


def _certify_family(loaded, claim: Overwhelm, trace, force: bool, started: float) -> Verdict:
    """Rule overwhelm_family (Algorithm 1 on any family): hints from the float64
    mirror; when not proved, the maximising strings of each diff functional are
    tried as counterexamples with the independent forward pass."""
    from checker.rules import overwhelm_family as family_rule

    weights = loaded.weights
    deep = weights.dims.family.n_layers > 1
    if weights.dims.family.gated_mlp and not deep:
        raise Malformed("overwhelm on a one-layer model with a gated MLP is not supported yet "
                        "(rule overwhelm_family bounds an ungated MLP there); use accuracy "
                        "with --strategy forward-brute-force")
    if deep and claim.free_perm is not None:
        raise Malformed("overwhelm --free-perm on a model with several layers is not "
                        "supported (rule overwhelm_family's layer boxes do not track the "
                        "multiset); claim --free instead")
    if weights.dims.family.normalization in ("RMS", "RMSPre"):
        raise Malformed("overwhelm on an RMS-normalised model is not supported yet (rule "
                        "overwhelm_family's Lemma LN assumes centring); use accuracy with "
                        "--strategy forward-brute-force")
    margin = overwhelm_deep.margins(weights, claim)  # one layer, or several
    verdict = Verdict(claim, "not proved", margin)
    if margin.proved or force:
        ids = {name: trace.emit(term)
               for name, term in family_rule.inputs(trace.dims, claim).items()}
        verdict.lines = _finish(loaded, trace, claim, "overwhelm_family", ids, margin.hints,
                                margin, {"worst_margin": margin.worst})
        verdict.verdict = "proved" if margin.proved else "forced"
    if not margin.proved:
        for t in dict.fromkeys(margin.candidates):
            if claim.free_perm is not None and tuple(sorted(t)) != claim.free_perm:
                continue
            top, strict = model_output(weights, claim.prefix + t + (claim.query,))
            if top != claim.output or not strict:
                verdict.verdict = "refuted"
                verdict.counterexample, verdict.counter_output = t, top
                break
    verdict.seconds = time.monotonic() - started
    return verdict


def completions(claim: Overwhelm, v: int):
    """Every admissible free string of the claim (for brute force on small settings)."""
    if claim.free_perm is not None:
        yield from sorted(set(itertools.permutations(claim.free_perm)))
        return
    alphabet = claim.over if claim.over is not None else range(v)
    for n in claim.lengths():
        yield from itertools.product(alphabet, repeat=n)


def brute_force(weights, claim: Overwhelm):
    """(does every completion output claim.output strictly, a worst completion,
    the smallest margin ℓ_o − max_{m≠o} ℓ_m) by enumeration with the independent
    float64 forward pass (generator.tasks.causal.logits_at), batched per length."""
    by_length: dict[int, list] = {}
    for t in completions(claim, weights.dims.d_vocab):
        by_length.setdefault(len(t), []).append(claim.prefix + tuple(t) + (claim.query,))
    worst, counter = np.inf, None
    for seqs in by_length.values():
        logits = any_logits(weights, np.array(seqs))
        margin = logits[:, claim.output] - np.delete(logits, claim.output, axis=1).max(axis=1)
        i = int(np.argmin(margin))
        if margin[i] < worst:
            worst, counter = float(margin[i]), seqs[i][len(claim.prefix):-1]
    return worst > 0, counter, worst


def candidates(args, v: int):
    """The prefixes to try: --prefix, the lines of --scan FILE, or all of --scan-all L."""
    if args.scan:
        for line in Path(args.scan).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                yield parse_tokens(line)
    elif args.scan_all is not None:
        if v ** args.scan_all > MAX_SCAN:
            raise Malformed(f"--scan-all {args.scan_all} would try {v ** args.scan_all} "
                            f"prefixes (limit {MAX_SCAN})")
        yield from itertools.product(range(v), repeat=args.scan_all)
    else:
        yield parse_tokens(args.prefix) or ()


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("overwhelm (with --property overwhelm; spec/overwhelm.md)")
    g.add_argument("--prefix", help="the fixed prefix s, e.g. 3,1,4")
    g.add_argument("--query", type=int, help="the query token q (last position)")
    g.add_argument("--target", type=int, help="the forced output o (default: the model's "
                                              "output on one admissible completion)")
    g.add_argument("--free", type=int, help="free strings of length <= N (== N with "
                                            "--exact-length)")
    g.add_argument("--exact-length", action="store_true")
    g.add_argument("--over", help="alphabet of the free tokens, e.g. 2,3 (default: all)")
    g.add_argument("--free-perm", help="free string = any permutation of this multiset")
    g.add_argument("--scan", help="file of candidate prefixes, one per line")
    g.add_argument("--scan-all", type=int, metavar="L", help="try every prefix of length L")
    g.add_argument("--out-dir", help="with --scan/--scan-all: one certificate per proven "
                                     "prefix is written here")
    g.add_argument("--family-rule", action="store_true",
                   help="use rule overwhelm_family (Algorithm 1 with LayerNorm/MLP bounds) even "
                        "on an attention-only model (always used on other families)")


def pin(args, lines: list[str]) -> None:
    """Pin the overwhelm certificate just written in the policy `args.pin`: its
    theorem (all atoms), the model file's digest and the certificate file's own
    digest (spec/policy.md)."""
    from checker import policy

    header = json.loads(lines[0])
    require = (f"{header['theorem']} and model_file == sha256:{header['model']['file_sha256']}"
               f" and certificate == sha256:{policy.file_sha256(args.output)}")
    action = policy.pin(args.pin, args.output, args.model, require)
    if not args.quiet:
        print(f"gen-cert: {action} {args.output} in {args.pin}", file=sys.stderr)


def run(args) -> int:
    """The overwhelm mode of gen-cert; exit 0 if every candidate was proved,
    1 if some were not, 2 on bad options."""
    if args.query is None or (args.free is None) == (args.free_perm is None):
        print("gen-cert: --property overwhelm needs --query and exactly one of --free, "
              "--free-perm", file=sys.stderr)
        return 2
    scanning = args.scan or args.scan_all is not None
    if scanning and not args.out_dir:
        print("gen-cert: --scan/--scan-all need --out-dir", file=sys.stderr)
        return 2
    try:
        loaded = load_model(args.model)
        v = loaded.weights.dims.d_vocab
        prefixes = list(candidates(args, v))
        counts = {"proved": 0, "refuted": 0, "not proved": 0}
        for prefix in progress_bar(prefixes, "overwhelm candidates",
                                   enabled=not args.quiet and scanning):
            claim = claim_from_args(args, tuple(prefix))
            verdict = certify(loaded, claim, not args.no_float_shadow,
                              family_rule=args.family_rule,
                              semantics=getattr(args, "semantics", "real"))
            counts[verdict.verdict] += 1
            path = None
            if verdict.lines is not None:
                text = "\n".join(verdict.lines) + "\n"
                if scanning:
                    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
                    path = str(Path(args.out_dir) / f"overwhelm-{'_'.join(map(str, prefix))}"
                               f"-q{claim.query}.jsonl")
                    Path(path).write_text(text)
                elif args.output:
                    path = args.output
                    Path(path).write_text(text)
                    if getattr(args, "pin", None):
                        pin(args, verdict.lines)
                else:
                    sys.stdout.write(text)
            line = verdict.text(path)
            print(line, file=sys.stderr if not (scanning or args.output) else sys.stdout)
    except (Malformed, Rejected, ValueError, OSError) as err:
        print(f"gen-cert: {err}", file=sys.stderr)
        return 2
    if scanning:
        print(json.dumps(counts))
    return 0 if counts["proved"] == len(prefixes) else 1
