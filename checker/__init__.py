"""The trusted checker of Max-of-K accuracy certificates.

Imports only the Python standard library, mpmath and lark.  Never searches;
fails closed (exit 0 only on full acceptance).  See spec/ for the contract.

Reading order for an audit:
  cli.py          exit codes, limits, policies (--require)
  certificate.py  line-by-line replay: header, weights, ops, rules, qed
  numbers.py      exact decoding; interval helpers; upper-bound arithmetic;
                  the checker's own rigorous exp and 1/sqrt
  ops.py          the matrix ops and their shapes
  definitions.py  what EQKE, EQKP, EVOU, PVOU, EU (and their exps) are, as terms
  rules/          brute_force.py, cubic.py: each rule's theorem in its docstring
  statement.py    the theorem/policy language (grammar: statement.lark)
  modelspec.py, modelfile.py   the model class; reading .pt/.safetensors safely
  policy.py, audit.py   `check-cert audit POLICY`: many checks, one policy (spec/policy.md)
  progress.py     the progress line on a terminal (stderr; never part of a verdict)
"""

import argparse

# The version when the package metadata is absent (e.g. run from a source tree
# that was never installed); keep it equal to pyproject.toml's.
__version__ = "0.1.0"


def version() -> str:
    """The installed package's version (importlib.metadata), else __version__:
    every command's --version, check-cert --json and the audit's JUnit report
    name the same one.  (The lookup scans the installed distributions, tens of
    milliseconds: done only when a version is printed.)"""
    from importlib import metadata

    try:
        return metadata.version("maxk-certify")
    except metadata.PackageNotFoundError:
        return __version__


class _VersionAction(argparse.Action):
    """argparse's "version" action, with the version looked up only when asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0,
                         help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        import sys

        parser._print_message(f"{parser.prog} {version()}\n", sys.stdout)
        parser.exit()


def add_version_option(parser) -> None:
    """`--version`, printing '<prog> <version>', on an argparse parser."""
    parser.add_argument("--version", action=_VersionAction)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help of every command: text with its own line breaks (epilog examples) kept
    as written, a one-paragraph text wrapped; each option's default shown, except
    empty ones (None, False, []) that would only add noise."""

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return super()._fill_text(text, width, indent)
        return argparse.HelpFormatter._fill_text(self, text, width, indent)

    def _get_help_string(self, action):
        default = action.default
        if default is None or default is False or default == [] or "default" in (
                action.help or ""):
            return action.help
        return super()._get_help_string(action)
