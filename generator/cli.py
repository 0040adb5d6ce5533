"""gen-cert: run a proof strategy on a model and write a certificate.

    gen-cert model.pt > cert.jsonl
    gen-cert model.pt --strategy brute-force -o cert.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

from checker.errors import Malformed

try:
    from .certify.strategies import STRATEGIES, NotApplicable, listing, resolve
    from .certify.trace import Trace
    from .modelfile import load_model
except ImportError as missing:  # installed without the generator extra
    sys.exit(f"gen-cert needs numpy and torch ({missing}); install them with\n"
             "  pip install torch==2.13.0 'maxk-certify[generator]'")

SHIPPED = Path(__file__).with_name("models")


def generate(model_path: str, strategy: str, float_shadow: bool = True,
             progress: bool = False) -> tuple[list[str], dict]:
    """Certificate lines for the model at `model_path`, and a summary."""
    started = time.monotonic()
    loaded = load_model(model_path)
    trace = Trace(loaded.weights, float_shadow=float_shadow)
    module, options = resolve(strategy)
    by, claim, notes = module.certify(trace, progress=progress, **options)
    strategy = options["options"].name() if options else strategy
    binding = {"file_sha256": loaded.file_sha256, "file_name": Path(model_path).name}
    info = {"program": "gen-cert", "strategy_notes": notes}
    lines = trace.lines(strategy, by, claim, binding, info)
    d = loaded.weights.dims
    summary = {"claim": claim, "total": d.d_vocab ** d.n_ctx, "lines": len(lines),
               "bytes": sum(len(s) + 1 for s in lines),
               "seconds": time.monotonic() - started, **notes}
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gen-cert", description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default=str(SHIPPED / "max4_v64_seed0.pt"),
                   help="model file (.pt / .safetensors, TransformerLens state dict); "
                        "default: the shipped Max-of-4 model")
    p.add_argument("--strategy", default=default_strategy(),
                   help=f"one of {', '.join(sorted(STRATEGIES))}, optionally with options, "
                        "e.g. subcubic:direct=mean+diff,near=4 (see --list)")
    p.add_argument("--list", action="store_true",
                   help="print the strategy's named option combinations and exit")
    p.add_argument("-o", "--output", help="write here instead of stdout")
    p.add_argument("--no-float-shadow", action="store_true",
                   help="omit the generator's float32 values (used only to report the "
                        "float-to-real gap)")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        if args.list:
            print("\n".join(listing(args.strategy)))
            return 0
        resolve(args.strategy)
    except ValueError as err:
        print(f"gen-cert: {err}", file=sys.stderr)
        return 2
    try:
        lines, summary = generate(args.model, args.strategy, not args.no_float_shadow,
                                  progress=not args.quiet)
    except Malformed as err:
        print(f"gen-cert: {err}", file=sys.stderr)
        return 2
    except NotApplicable as err:
        print(f"gen-cert: strategy {args.strategy} does not apply: {err}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:  # the reader stopped early: the certificate is incomplete
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print("gen-cert: output closed early; the certificate written is truncated",
                  file=sys.stderr)
            return 2
    if not args.quiet:
        acc = summary["claim"] / summary["total"]
        print(f"gen-cert: {args.strategy}: claims {summary['claim']} / {summary['total']} "
              f"correct (accuracy >= {acc:.6f}); {summary['lines']} lines, "
              f"{summary['bytes'] / 1e6:.2f} MB, {summary['seconds']:.1f} s; sha256 of "
              f"certificate {hashlib.sha256(text.encode()).hexdigest()[:16]}...",
              file=sys.stderr)
    return 0


def default_strategy() -> str:
    return "cubic" if "cubic" in STRATEGIES else "brute-force"


if __name__ == "__main__":
    sys.exit(main())
