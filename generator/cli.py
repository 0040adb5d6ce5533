"""gen-cert: run a proof strategy on a model and write a certificate.

examples:
  gen-cert model.pt -o cert.jsonl                   # default strategy (cubic, or
                                                    #   forward-brute-force for families)
  gen-cert model.pt --strategy brute-force > cert.jsonl
  gen-cert HF_DIR --strategy forward-brute-force -o cert.jsonl   # save_pretrained directory
  gen-cert model.pt -o certs/m.jsonl --pin certs/POLICY --floor 0.998
  gen-cert --strategy subcubic --list               # the option grid of a strategy
  gen-cert generator/models/max4_v64_seed0.pt -o cert.jsonl      # the shipped model
  gen-cert modadd.pt --task modular_addition:p=113 -o cert.jsonl # another task
  gen-cert model.pt --dataset test.txt -o cert.jsonl             # a labelled dataset
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from checker import HelpFormatter, add_version_option, policy, statement
from checker.errors import Malformed

from .progress import pipe_safe, stdout_closed, unwritable

try:
    from . import overwhelm
    from .certify.strategies import STRATEGIES, NotApplicable, listing, resolve
    from .certify.trace import Trace
    from .modelfile import load_model
except ImportError as missing:  # installed without the generator extra
    sys.exit(f"gen-cert needs numpy and torch ({missing}); install them with\n"
             "  pip install torch==2.13.0 'maxk-certify[generator]'")

SHIPPED = Path(__file__).with_name("models")


def make_task(spec: str | None, dataset: str | None, dims):
    """The checker's Task for `--task NAME[:param=value,...]` / `--dataset FILE` (None:
    max_of_k, today's theorem).  Malformed if it does not fit the model."""
    from checker import tasks

    if spec is None and dataset is None:
        return None
    if dataset is not None:
        if spec not in (None, "dataset"):
            raise Malformed("--dataset scores the file's rows: give no other --task")
        try:
            text = Path(dataset).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as err:
            raise Malformed(f"cannot read --dataset {dataset}: {err}") from None
        digest = hashlib.sha256(text.encode("ascii")).hexdigest()
        return tasks.make_task("dataset", {"dataset": digest}, dims.d_vocab, dims.n_ctx, text)
    name, _, rest = spec.partition(":")
    params = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not value.isdigit():
            raise Malformed(f"--task {spec}: write NAME:param=INTEGER,... (e.g. "
                            "modular_addition:p=113)")
        params[key] = int(value)
    return tasks.make_task(name, params, dims.d_vocab, dims.n_ctx)


# the strategies proving semantics == float32 (spec/theorem.md §2c, spec/rules.md)
FLOAT32_STRATEGIES = ("forward-brute-force", "brute-force", "cubic", "cubic-mix", "exact",
                      "subcubic", "family-gap")


def generate(model_path: str, strategy: str | None, float_shadow: bool = True,
             progress: bool = False, n_ctx: int | None = None, task: str | None = None,
             dataset: str | None = None, checker_max_work: int | None = None,
             semantics: str = "real") -> tuple[list[str], dict]:
    """Certificate lines for the model at `model_path` on sequences of length `n_ctx`
    (default: the model's position capacity), and a summary; `task`/`dataset` as
    make_task (default max_of_k)."""
    started = time.monotonic()
    loaded = load_model(model_path, n_ctx)
    scored = make_task(task, dataset, loaded.weights.dims)
    trace = Trace(loaded.weights, float_shadow=float_shadow)
    other_task = scored is not None and scored.name != "max_of_k"
    if strategy is None:  # the decomposition rules apply only to the attention-only family
        strategy = (default_strategy() if loaded.weights.dims.family.is_attn_only
                    and not other_task else "forward-brute-force")
    module, options = resolve(strategy)
    if semantics != "real":
        if module.NAME not in FLOAT32_STRATEGIES:
            raise NotApplicable(f"strategy {strategy} proves the real semantics only; "
                                f"--semantics {semantics} needs --strategy "
                                f"{', '.join(FLOAT32_STRATEGIES)} (spec/theorem.md §2c)")
        options["semantics"] = semantics
    if other_task:
        if module.NAME != "forward-brute-force":
            raise NotApplicable(f"strategy {strategy} proves max_of_k only; task "
                                f"{scored.name} needs --strategy forward-brute-force")
        options = {"task": scored, **options}
        if checker_max_work is not None:
            options["max_work"] = checker_max_work
    try:
        by, claim, notes = module.certify(trace, progress=progress, **options)
    except NotApplicable as err:  # name the strategy actually chosen (the default depends)
        raise NotApplicable(f"strategy {strategy} does not apply: {err}") from None
    strategy = options["options"].name() if "options" in options else strategy
    binding = {"file_sha256": loaded.file_sha256, "file_name": Path(model_path).name}
    info = {"program": "gen-cert", "strategy_notes": notes}
    d = loaded.weights.dims
    theorem = None
    if other_task or semantics != "real":
        described = scored.describe() if other_task else "task == max_of_k"
        theorem = (f"{described} and d_vocab == {d.d_vocab} and n_ctx == {d.n_ctx} "
                   f"and d_model == {d.d_model} and d_head == {d.d_head} "
                   f"and weights == sha256:{trace.weights_sha256} and correct >= {claim}"
                   + ("" if semantics == "real" else f" and semantics == {semantics}"))
    lines = trace.lines(strategy, by, claim, binding, info, theorem)
    total = scored.pairs() if other_task else d.d_vocab ** d.n_ctx
    summary = {"strategy": strategy, "claim": claim, "total": total,
               "lines": len(lines), "bytes": sum(len(s) + 1 for s in lines),
               "seconds": time.monotonic() - started, **notes}
    return lines, summary


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gen-cert", formatter_class=HelpFormatter,
                                description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[2:]))
    add_version_option(p)
    p.add_argument("model", nargs="?",
                   help="model: a .pt/.safetensors file (a TransformerLens state dict, with its "
                        "config) or a Hugging Face save_pretrained directory (config.json and "
                        "model.safetensors); e.g. the shipped "
                        "generator/models/max4_v64_seed0.pt")
    p.add_argument("--strategy", default=None,
                   help=f"one of {', '.join(sorted(STRATEGIES))}, optionally with options, "
                        "e.g. subcubic:direct=mean+diff,near=4 (see --list); default: "
                        f"{default_strategy()} (forward-brute-force for models with LayerNorm, "
                        "an MLP, RoPE or several heads)")
    p.add_argument("--list", action="store_true",
                   help="print the strategy's named option combinations and exit")
    p.add_argument("-o", "--output", help="write the certificate here instead of stdout "
                   "(stdout must then not be a terminal)")
    p.add_argument("--no-float-shadow", action="store_true",
                   help="omit the generator's float32 values (used only to report the "
                        "float-to-real gap)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress and no summary")
    p.add_argument("--pin", metavar="POLICY", help="add or update this certificate's entry in "
                   "the audit policy POLICY (spec/policy.md); needs -o and --floor")
    p.add_argument("--floor", metavar="ACCURACY", help="with --pin: the accuracy the policy "
                   "requires, e.g. 0.998 or 4087/4096")
    p.add_argument("--n-ctx", type=int, metavar="K", help="certify sequences of length K "
                   "(default: the model's n_ctx, e.g. all 1024 positions of a GPT-2 table); "
                   "K may be below the model's position capacity (spec/theorem.md §1)")
    p.add_argument("--task", metavar="NAME[:PARAM=VALUE,...]",
                   help="the accuracy theorem's task (spec/theorem.md §3): max_of_k (default), "
                        "min_of_k, sort, modular_addition:p=P, modular_multiplication:p=P, "
                        "parity, cyclic:n=N, flipflop; any task but max_of_k needs "
                        "--strategy forward-brute-force (the default then)")
    p.add_argument("--dataset", metavar="FILE",
                   help="score exactly the rows of this labelled dataset (spec/format.md "
                        "§dataset: one row per line, 'tokens... position label'); the theorem "
                        "names its SHA-256")
    p.add_argument("--checker-max-work", type=int, metavar="N",
                   help="with --task/--dataset: allow a certificate whose check needs up to N "
                        "interval operations (default 40000000, below check-cert's --max-work "
                        "default; check it with check-cert --max-work N)")
    p.add_argument("--semantics", choices=("real", "float32"), default="real",
                   help="what the theorem is about (spec/theorem.md §2c): the real-valued model "
                        "(default) or every IEEE-754 float32 evaluation of it (any summation "
                        "order, FMA or not); float32 works with the default strategy and with "
                        "forward-brute-force, brute-force, cubic, exact, subcubic (not its "
                        "low-rank EU variants), and with --property overwhelm (rules "
                        "overwhelm_free, overwhelm_perm; overwhelm_family on one layer, free "
                        "claims)")
    p.add_argument("--property", choices=("accuracy", "overwhelm"), default="accuracy",
                   help="the theorem: accuracy (default) or overwhelm (spec/overwhelm.md)")
    overwhelm.add_arguments(p)
    return p


@pipe_safe
def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.list:
        return _list(args.strategy)
    if args.model is None:
        p.error("give a model file or Hugging Face directory, e.g. gen-cert "
                "generator/models/max4_v64_seed0.pt -o cert.jsonl")
    refusal = _output_refusal(args)
    if refusal:
        print(f"gen-cert: {refusal}", file=sys.stderr)
        return 2
    if args.property == "overwhelm":
        if args.floor or (args.pin and not args.output):
            p.error("with --property overwhelm, --pin needs -o and takes no --floor")
        return overwhelm.run(args)
    if (args.pin is None) != (args.floor is None) or (args.pin and not args.output):
        p.error("--pin needs -o/--output and --floor (and --floor needs --pin)")
    try:
        if args.pin:
            floor_atom(args.floor)
    except Malformed as err:
        p.error(str(err))
    try:
        if args.strategy is not None:
            resolve(args.strategy)
    except ValueError as err:
        print(f"gen-cert: {err}", file=sys.stderr)
        return 2
    try:
        lines, summary = generate(args.model, args.strategy, not args.no_float_shadow,
                                  progress=not args.quiet, n_ctx=args.n_ctx, task=args.task,
                                  dataset=args.dataset, checker_max_work=args.checker_max_work,
                                  semantics=args.semantics)
    except Malformed as err:
        print(f"gen-cert: {err}", file=sys.stderr)
        return 2
    except NotApplicable as err:
        print(f"gen-cert: {err}", file=sys.stderr)
        return 2
    if args.pin and floor_refused(args, summary):  # before -o is written: nothing left behind
        return 1
    text = "\n".join(lines) + "\n"
    code = _write(text, args.output)
    if code:
        return code
    if not args.quiet:
        acc = summary["claim"] / summary["total"]
        print(f"gen-cert: {summary['strategy']}: claims {summary['claim']} / {summary['total']} "
              f"correct (accuracy >= {acc:.6f}); {summary['lines']} lines, "
              f"{summary['bytes'] / 1e6:.2f} MB, {summary['seconds']:.1f} s; sha256 of "
              f"certificate {hashlib.sha256(text.encode()).hexdigest()[:16]}...",
              file=sys.stderr)
    return pin(args, lines, summary) if args.pin else 0


def _list(strategy: str | None) -> int:
    """--list: the option grid; a reader that stops early (`| head`) is not an error."""
    try:
        text = "\n".join(listing(strategy or default_strategy()))
    except ValueError as err:
        print(f"gen-cert: {err}", file=sys.stderr)
        return 2
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_closed()
    return 0


def _output_refusal(args) -> str | None:
    """Why the certificate cannot go where it is asked to, checked before any work:
    an unwritable -o or --pin file, or a terminal (megabytes of JSON on a screen)."""
    for option, path in (("-o", args.output), ("--pin", args.pin)):
        why = path and unwritable(path)
        if why:
            return f"cannot write {option} {path}: {why}"
    scanning = args.property == "overwhelm" and (args.scan or args.scan_all is not None)
    if not args.output and not scanning and sys.stdout.isatty():
        return ("refusing to write a certificate to the terminal: use -o FILE or redirect "
                "(gen-cert MODEL > cert.jsonl)")
    return None


def _write(text: str, output: str | None) -> int:
    """Write the certificate to `output` or stdout: 0, or 2 with a one-line reason."""
    if output:
        try:
            Path(output).write_text(text)
        except OSError as err:
            print(f"gen-cert: cannot write -o {output}: {err.strerror or err}", file=sys.stderr)
            return 2
        return 0
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early: the certificate is incomplete
        stdout_closed()
        print("gen-cert: output closed early; the certificate written is truncated",
              file=sys.stderr)
        return 2
    return 0


def pin(args, lines: list[str], summary: dict) -> int:
    """Pin the certificate just written in the policy `args.pin`: its weights digest, model
    file digest, the accuracy floor `args.floor` (checked by floor_refused) and the digest
    of the certificate file itself, so the audit sees any later edit of it."""
    header = json.loads(lines[0])
    weights = next(a for a in statement.parse(header["theorem"]) if a.field == "weights")
    try:
        atoms = statement.parse(header["theorem"])
        task = "".join(f"{a} and " for a in atoms
                       if a.field in ("task", "p", "n", "dataset", "semantics")
                       and not (a.field == "task" and a.value == "max_of_k"))
        require = (f"{task}accuracy >= {args.floor} and {weights} and "
                   f"model_file == sha256:{header['model']['file_sha256']} and "
                   f"certificate == sha256:{policy.file_sha256(args.output)}")
        action = policy.pin(args.pin, args.output, args.model, require)
    except (Malformed, OSError) as err:
        print(f"gen-cert: cannot pin in {args.pin}: {err}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"gen-cert: {action} {args.output} in {args.pin}: {require}", file=sys.stderr)
    return 0


def floor_refused(args, summary: dict) -> bool:
    """Whether --floor exceeds the accuracy the certificate claims (the audit would fail);
    says so.  Checked before the certificate is written, so a refusal leaves no file."""
    if floor_atom(args.floor).value * summary["total"] <= summary["claim"]:
        return False
    print(f"gen-cert: --floor {args.floor} is above the claimed accuracy "
          f"{summary['claim']}/{summary['total']}; {args.output} not written, {args.pin} not "
          "updated", file=sys.stderr)
    return True


def floor_atom(floor: str) -> statement.Atom:
    """The policy atom `accuracy >= FLOOR`; Malformed unless FLOOR is one number."""
    atoms = statement.parse(f"accuracy >= {floor}", "--floor")
    if len(atoms) != 1:
        raise Malformed(f"--floor: expected a decimal or a fraction, not {floor!r}")
    return atoms[0]


def default_strategy() -> str:
    return "cubic" if "cubic" in STRATEGIES else "brute-force"


if __name__ == "__main__":
    sys.exit(main())
