"""Theorems and CI policies in one small language (grammar: statement.lark).

A theorem is what a certificate claims; a policy is what CI requires.  Both
are conjunctions of atoms `field op value`.  The checker parses the claimed
theorem, confirms each atom against what it verified itself, and accepts a
policy only if the verified theorem implies every one of its atoms.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from lark import Lark, LarkError, Transformer

from .errors import Malformed

_PARSER = Lark(Path(__file__).with_name("statement.lark").read_text(), parser="lalr")

INT_FIELDS = ("d_vocab", "n_ctx", "d_model", "d_head")
HASH_FIELDS = ("weights", "model_file")
# field -> (allowed comparison, allowed value kinds)
FIELD_TYPES = {
    "task": ("==", ("word",)),
    **{f: ("==", ("integer",)) for f in INT_FIELDS},
    **{f: ("==", ("hash",)) for f in HASH_FIELDS},
    "correct": (">=", ("integer",)),
    "accuracy": (">=", ("fraction", "decimal", "integer")),
}
TASKS = ("max_of_k",)


@dataclass(frozen=True)
class Atom:
    field: str
    cmp: str
    kind: str  # "word", "integer", "hash", "fraction" or "decimal"
    value: object  # str, int or Fraction

    def __str__(self) -> str:
        if self.kind == "hash":
            shown = f"sha256:{self.value}"
        elif self.kind == "fraction":
            shown = f"{self.value.numerator}/{self.value.denominator}"
        elif self.kind == "decimal":
            shown = self.text
        else:
            shown = str(self.value)
        return f"{self.field} {self.cmp} {shown}"

    @property
    def text(self) -> str:
        return getattr(self, "_text", str(self.value))


class _ToAtoms(Transformer):
    def start(self, atoms):
        return atoms

    def atom(self, items):
        field, cmp, (kind, value, text) = str(items[0]), str(items[1]), items[2]
        want_cmp, want_kinds = FIELD_TYPES[field]
        if cmp != want_cmp or kind not in want_kinds:
            raise Malformed(f"'{field} {cmp} {text}' is not allowed; "
                            f"write '{field} {want_cmp} <{'|'.join(want_kinds)}>'")
        if field == "task" and value not in TASKS:
            raise Malformed(f"unknown task {value!r}; known: {', '.join(TASKS)}")
        atom = Atom(field, cmp, kind, value)
        object.__setattr__(atom, "_text", text)
        return atom

    def hash(self, tok):
        return ("hash", str(tok[0])[len("sha256:"):], str(tok[0]))

    def fraction(self, tok):
        num, den = str(tok[0]).split("/")
        if int(den) == 0:
            raise Malformed("fraction with zero denominator")
        return ("fraction", Fraction(int(num), int(den)), str(tok[0]))

    def decimal(self, tok):
        return ("decimal", Fraction(str(tok[0])), str(tok[0]))

    def integer(self, tok):
        return ("integer", int(tok[0]), str(tok[0]))

    def word(self, tok):
        return ("word", str(tok[0]), str(tok[0]))


def parse(text: object, what: str = "statement") -> list[Atom]:
    """Parse a statement into its atoms; Malformed with the position on error."""
    if not isinstance(text, str) or len(text) > 10_000:
        raise Malformed(f"{what}: expected a statement string of at most 10000 characters")
    try:
        atoms = _ToAtoms().transform(_PARSER.parse(text))
    except LarkError as err:
        cause = getattr(err, "orig_exc", None)  # lark wraps the transformer's errors
        if isinstance(cause, Malformed):
            raise Malformed(f"{what}: {cause}") from None
        detail = str(err).strip().splitlines()[0]
        raise Malformed(f"{what}: cannot parse {text!r}: {detail}") from None
    seen = set()
    for atom in atoms:
        if atom.field in seen:
            raise Malformed(f"{what}: field '{atom.field}' appears twice")
        seen.add(atom.field)
    return atoms


@dataclass(frozen=True)
class Facts:
    """What the checker itself established about a certificate."""

    dims: dict  # d_vocab, n_ctx, d_model, d_head -> int
    weights_sha256: str
    correct: int  # proven lower bound on the number of correct sequences
    model_file_sha256: str | None = None  # only when --model was read and matched

    @property
    def total(self) -> int:
        return self.dims["d_vocab"] ** self.dims["n_ctx"]


def holds(atom: Atom, facts: Facts) -> bool:
    """Does the verified fact set imply `atom`?"""
    if atom.field == "task":
        return atom.value == "max_of_k"
    if atom.field in INT_FIELDS:
        return facts.dims[atom.field] == atom.value
    if atom.field == "weights":
        return facts.weights_sha256 == atom.value
    if atom.field == "model_file":
        return facts.model_file_sha256 is not None and facts.model_file_sha256 == atom.value
    if atom.field == "correct":
        return facts.correct >= atom.value
    if atom.field == "accuracy":
        return Fraction(facts.correct, facts.total) >= atom.value
    raise Malformed(f"unknown field {atom.field!r}")


def theorem_text(facts: Facts) -> str:
    """The canonical theorem statement for a set of facts."""
    d = facts.dims
    return (f"task == max_of_k and d_vocab == {d['d_vocab']} and n_ctx == {d['n_ctx']} "
            f"and d_model == {d['d_model']} and d_head == {d['d_head']} "
            f"and weights == sha256:{facts.weights_sha256} and correct >= {facts.correct}")
