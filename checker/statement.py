"""Theorems and CI policies in one small language (grammar: statement.lark).

A theorem is what a certificate claims; a policy is what CI requires.  Both
are conjunctions of atoms `field op value`.  The checker parses the claimed
theorem, confirms each atom against what it verified itself, and accepts a
policy only if the verified theorem implies every one of its atoms.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from .errors import Malformed
from .tasks import PARAM_FIELDS, TASK_NAMES, Task, max_of_k

# The statement parser, made on first use.  When statement_tables.py holds lark's tables of
# this very grammar file (its SHA-256; tests/test_statement_tables.py: they are a fresh lark
# build's, up to lark's numbering of states), lalr.py runs them and lark is not imported at
# all (~0.02 s of every check, issue 22); else lark builds the parser from the grammar.  No
# cache on disk is read.
_LARK: dict = {}


def _lark() -> dict:
    """{"parse": text -> atoms, "error": the parse errors (a tuple)}, made once."""
    if not _LARK:
        from . import statement_tables as stored

        grammar = Path(__file__).with_name("statement.lark").read_bytes()
        if stored.GRAMMAR_SHA256 == hashlib.sha256(grammar).hexdigest():
            from .lalr import ParseError, Parser

            parser = Parser(stored.DATA, stored.MEMO)
            _LARK["parse"] = lambda text: parser.parse(text, _AtomRules())
            # a rule's own conversion error (int() of 5,000 digits) too: lark wraps those
            _LARK["error"], _LARK["by"] = (ParseError, ValueError, ArithmeticError), "tables"
        else:
            from lark import Lark, LarkError, Transformer

            built = Lark(grammar.decode("utf-8"), parser="lalr")
            rules = type("_ToAtoms", (_AtomRules, Transformer), {})
            _LARK["parse"] = lambda text: rules().transform(built.parse(text))
            _LARK["error"], _LARK["by"] = (LarkError,), "lark"
    return _LARK


INT_FIELDS = ("d_vocab", "n_ctx", "d_model", "d_head")
HASH_FIELDS = ("weights", "model_file", "certificate")
# field -> (allowed comparison, allowed value kinds)
FIELD_TYPES = {
    "task": ("==", ("word",)),
    **{f: ("==", ("integer",)) for f in INT_FIELDS},
    **{f: ("==", ("hash",)) for f in HASH_FIELDS},
    "correct": (">=", ("integer",)),
    "accuracy": (">=", ("fraction", "decimal", "integer")),
    # the overwhelm property (spec/overwhelm.md)
    "property": ("==", ("word",)),
    "prefix": ("==", ("tokens",)),
    "query": ("==", ("integer",)),
    "output": ("==", ("integer",)),
    "free": (("<=", "=="), ("integer",)),
    "free_perm": ("==", ("tokens",)),
    # task parameters (spec/theorem.md §3)
    "p": ("==", ("integer",)),
    "n": ("==", ("integer",)),
    "dataset": ("==", ("hash",)),
    # the semantics of the forward pass (spec/theorem.md §2, §2c); absent: real
    "semantics": ("==", ("word",)),
}
SEMANTICS = ("real", "float32")
TASKS = TASK_NAMES
PROPERTIES = ("accuracy", "overwhelm")
# meaningful for the accuracy property only
ACCURACY_FIELDS = ("task", "correct", "accuracy", *PARAM_FIELDS)
OVERWHELM_FIELDS = ("prefix", "query", "output", "free", "free_perm")
MAX_TOKENS = 4096  # longest token list a statement may hold


@dataclass(frozen=True)
class Atom:
    field: str
    cmp: str
    kind: str  # "word", "integer", "hash", "fraction", "decimal" or "tokens"
    value: object  # str, int, Fraction or tuple of ints
    over: tuple | None = None  # `free <= n over [..]`: the free tokens' alphabet

    def __str__(self) -> str:
        over = "" if self.over is None else f" over {_show_tokens(self.over)}"
        if self.kind == "tokens":
            shown = _show_tokens(self.value)
        elif self.kind == "hash":
            shown = f"sha256:{self.value}"
        elif self.kind == "fraction":
            shown = f"{self.value.numerator}/{self.value.denominator}"
        elif self.kind == "decimal":
            shown = self.text
        else:
            shown = str(self.value)
        return f"{self.field} {self.cmp} {shown}{over}"

    @property
    def text(self) -> str:
        return getattr(self, "_text", str(self.value))


class _AtomRules:
    """The parser's rules: a method per rule or alias of statement.lark, called with its
    children (lalr.Parser; or mixed into lark's Transformer by _lark)."""

    def start(self, atoms):
        return atoms

    def atom(self, items):
        field, cmp, (kind, value, text) = str(items[0]), str(items[1]), items[2]
        want_cmp, want_kinds = FIELD_TYPES[field]
        cmps = want_cmp if isinstance(want_cmp, tuple) else (want_cmp,)
        if cmp not in cmps or kind not in want_kinds:
            raise Malformed(f"'{field} {cmp} {text}' is not allowed; "
                            f"write '{field} {'|'.join(cmps)} <{'|'.join(want_kinds)}>'")
        if field == "task" and value not in TASKS:
            raise Malformed(f"unknown task {value!r}; known: {', '.join(TASKS)}")
        if field == "semantics" and value not in SEMANTICS:
            raise Malformed(f"unknown semantics {value!r}; known: {', '.join(SEMANTICS)}")
        if field == "property" and value not in PROPERTIES:
            raise Malformed(f"unknown property {value!r}; known: {', '.join(PROPERTIES)}")
        over = None
        if len(items) == 4:
            if field != "free":
                raise Malformed(f"'over [..]' qualifies only 'free', not '{field}'")
            over = items[3][1]
            if not over or len(set(over)) != len(over):
                raise Malformed("'over [..]' needs distinct tokens, at least one")
        atom = Atom(field, cmp, kind, value, over)
        object.__setattr__(atom, "_text", text)
        return atom

    def tokens(self, tok):
        if len(tok) > MAX_TOKENS:
            raise Malformed(f"a token list longer than {MAX_TOKENS}")
        values = tuple(int(t) for t in tok)
        return ("tokens", values, _show_tokens(values))

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
    lark = _lark()
    try:
        atoms = lark["parse"](text)
    except Malformed as err:  # a rule's own check (lalr.Parser calls the rules directly)
        raise Malformed(f"{what}: {err}") from None
    except lark["error"] as err:
        cause = getattr(err, "orig_exc", None)  # lark wraps the transformer's errors
        if isinstance(cause, Malformed):
            raise Malformed(f"{what}: {cause}") from None
        detail = str(err).strip().splitlines()[0]
        raise Malformed(f"{what}: cannot parse {text!r}: {_unknown_field(text) or detail}") \
            from None
    seen = set()
    for atom in atoms:
        if atom.field in seen:
            raise Malformed(f"{what}: field '{atom.field}' appears twice")
        seen.add(atom.field)
    return atoms


FIELDS = ("task", "d_vocab", "n_ctx", "d_model", "d_head", "weights", "model_file",
          "certificate", "correct", "accuracy", "property", "prefix", "query", "output",
          "free_perm", "free", "dataset", "p", "n", "semantics")


def _unknown_field(text: str) -> str | None:
    """A readable message when an atom starts with a word that is not a field (the common
    mistake: a misspelt field), naming the nearest field and listing them all."""
    import difflib
    import re

    for word in re.findall(r"(?:^|\band\s+)\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:>=|<=|==)", text):
        if word not in FIELDS:
            near = difflib.get_close_matches(word, FIELDS, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            return f"unknown field '{word}'{hint}; fields: {', '.join(FIELDS)}"
    return None


def _show_tokens(tokens) -> str:
    return "[" + ", ".join(str(t) for t in tokens) + "]"


@dataclass(frozen=True)
class Overwhelm:
    """A verified overwhelm fact (spec/overwhelm.md): for every admissible free
    string t, the logit of `output` at the query position of prefix + t + [query]
    is strictly greater than every other logit.  Admissible: either (free form)
    t over `over` (None: every token) with len(t) <= free (free_cmp "<=") or
    len(t) == free (free_cmp "=="), or (permutation form) t a permutation of
    the multiset `free_perm` (kept sorted)."""

    prefix: tuple
    query: int
    output: int
    free_cmp: str | None = None
    free: int | None = None
    over: tuple | None = None
    free_perm: tuple | None = None

    def lengths(self) -> range:
        """The admissible lengths of the free string."""
        if self.free_perm is not None:
            return range(len(self.free_perm), len(self.free_perm) + 1)
        return range(0 if self.free_cmp == "<=" else self.free, self.free + 1)


@dataclass(frozen=True)
class Facts:
    """What the checker itself established about a certificate."""

    dims: dict  # d_vocab, n_ctx, d_model, d_head -> int
    weights_sha256: str
    correct: int | None  # proven lower bound on the number of correct sequences (accuracy)
    model_file_sha256: str | None = None  # only when --model was read and matched
    overwhelm: Overwhelm | None = None  # the overwhelm property, when that is what was proven
    # SHA-256 of the certificate's bytes as the checker read them (cli.check_file); None
    # while they are still being read, so a theorem can never claim its own file's digest
    certificate_sha256: str | None = None
    # what the accuracy theorem scores (checker/tasks.py); None: max_of_k, as before tasks
    task: Task | None = None
    # the semantics the rules proved it under (spec/theorem.md §2c): "real" or "float32"
    semantics: str = "real"

    @property
    def scored(self) -> Task:
        return self.task or max_of_k(self.dims["d_vocab"], self.dims["n_ctx"])

    @property
    def total(self) -> int:
        """The scored (input, position) pairs: accuracy = correct / total."""
        return self.scored.pairs()


def holds(atom: Atom, facts: Facts) -> bool:
    """Does the verified fact set imply `atom`?"""
    if atom.field == "property":
        return atom.value == ("accuracy" if facts.overwhelm is None else "overwhelm")
    if atom.field == "semantics":  # neither semantics implies the other (theorem.md §2c)
        return atom.value == facts.semantics
    if atom.field in ACCURACY_FIELDS and facts.overwhelm is not None:
        return False  # an overwhelm certificate says nothing about accuracy
    if atom.field in OVERWHELM_FIELDS:
        return facts.overwhelm is not None and _overwhelm_holds(atom, facts)
    if atom.field == "task":
        return atom.value == facts.scored.name
    if atom.field in PARAM_FIELDS:
        return dict(facts.scored.params).get(atom.field) == atom.value
    if atom.field in INT_FIELDS:
        return facts.dims[atom.field] == atom.value
    if atom.field == "weights":
        return facts.weights_sha256 == atom.value
    if atom.field == "model_file":
        return facts.model_file_sha256 is not None and facts.model_file_sha256 == atom.value
    if atom.field == "certificate":
        return facts.certificate_sha256 is not None and facts.certificate_sha256 == atom.value
    if atom.field == "correct":
        return facts.correct >= atom.value
    if atom.field == "accuracy":
        return Fraction(facts.correct, facts.total) >= atom.value
    raise Malformed(f"unknown field {atom.field!r}")


def _overwhelm_holds(atom: Atom, facts: Facts) -> bool:
    """The overwhelm atoms: each claims the output for a set of free strings;
    it follows when that set lies inside the verified one."""
    w, v = facts.overwhelm, facts.dims["d_vocab"]
    if atom.field == "prefix":
        return w.prefix == atom.value
    if atom.field in ("query", "output"):
        return getattr(w, atom.field) == atom.value
    verified_alphabet = set(range(v)) if w.over is None else set(w.over)
    if atom.field == "free_perm":  # a multiset of size n over the alphabet is a string of length n
        return (w.free_perm == tuple(sorted(atom.value))
                or (w.free_perm is None and len(atom.value) in w.lengths()
                    and set(atom.value) <= verified_alphabet))
    if w.free is None:  # field free, but a permutation was verified
        return False
    claimed_alphabet = set(range(v)) if atom.over is None else set(atom.over)
    claimed_lengths = range(0 if atom.cmp == "<=" else atom.value, atom.value + 1)
    return (claimed_alphabet <= verified_alphabet
            and all(n in w.lengths() for n in claimed_lengths))


def overwhelm_text(w: Overwhelm) -> str:
    """The overwhelm atoms of a verified fact, as statement text."""
    if w.free_perm is not None:
        free = f"free_perm == {_show_tokens(w.free_perm)}"
    else:
        over = "" if w.over is None else f" over {_show_tokens(w.over)}"
        free = f"free {w.free_cmp} {w.free}{over}"
    return (f"prefix == {_show_tokens(w.prefix)} and query == {w.query} and {free} "
            f"and output == {w.output}")


def theorem_text(facts: Facts) -> str:
    """The canonical theorem statement for a set of facts."""
    d = facts.dims
    semantics = "" if facts.semantics == "real" else f" and semantics == {facts.semantics}"
    if facts.overwhelm is not None:
        return (f"property == overwhelm and d_vocab == {d['d_vocab']} and n_ctx == {d['n_ctx']} "
                f"and d_model == {d['d_model']} and d_head == {d['d_head']} "
                f"and weights == sha256:{facts.weights_sha256} and "
                + overwhelm_text(facts.overwhelm) + semantics)
    return (f"{facts.scored.describe()} and d_vocab == {d['d_vocab']} and n_ctx == {d['n_ctx']} "
            f"and d_model == {d['d_model']} and d_head == {d['d_head']} "
            f"and weights == sha256:{facts.weights_sha256} and correct >= {facts.correct}"
            + semantics)
