"""Audit policies: which certificates a repository keeps, and what each must prove
(spec/policy.md).

A policy is a text file, one entry per line:

    # comment
    CERTIFICATE  MODEL_FILE  [--OPTION=VALUE ...]  STATEMENT

Paths are relative to the policy's own directory (or absolute) and contain no
whitespace; the options are check-cert's `--arith` and `--max-*` limits for this
entry alone; STATEMENT is the rest of the line, in the language of
spec/statements.md.  Blank lines and lines starting with '#' are ignored.
`load` reads and validates a policy; `pin` adds or updates one entry (used by
`gen-cert --pin`), keeping every other line of the file as it was.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from . import statement
from .arith import NAMES as ARITH_NAMES
from .errors import Malformed
from .limits import Limits

MAX_POLICY_BYTES = 1 << 20  # a policy is a short list; anything larger is refused
HEADER = ("# check-cert audit policy (spec/policy.md): CERTIFICATE  MODEL_FILE  STATEMENT\n"
          "# Paths are relative to this file's directory.\n")
# An entry's options: check-cert's own names, each parsed as check-cert parses it.
LIMIT_OPTIONS = {"--" + name.replace("_", "-"): name for name in Limits.__dataclass_fields__}


@dataclass(frozen=True)
class Entry:
    """One policy line: certificate and model file (as written), the entry's own
    options (as written: `--arith=arb`, `--max-work=5000000000`) and the statement."""

    certificate: str
    model: str
    require: str
    lineno: int  # 1-based line of the policy file
    options: tuple[str, ...] = ()

    @property
    def arith(self) -> str | None:
        """The back-end this entry asks for (`--arith=NAME`), if any."""
        return _parse_options(self.options, "")[0]

    @property
    def limits(self) -> dict:
        """The Limits fields this entry sets (`--max-work=N` -> {"max_work": N})."""
        return _parse_options(self.options, "")[1]


def _parse_options(options: tuple[str, ...], where: str) -> tuple[str | None, dict]:
    """`--arith=NAME` and `--max-*=N` tokens -> (arith or None, {Limits field: value}).

    Every token must be one of these, once, with a valid value (a limit is a positive
    number of the field's type); anything else is Malformed: an option the audit does not
    understand is refused, never ignored.
    """
    arith, limits = None, {}
    for token in options:
        name, eq, value = token.partition("=")
        if not eq or not value:
            raise Malformed(f"{where}expected --OPTION=VALUE, got {token!r}")
        if name == "--arith":
            if arith is not None:
                raise Malformed(f"{where}--arith is given twice")
            if value not in ARITH_NAMES:
                raise Malformed(f"{where}unknown arithmetic {value!r} (choose from "
                                f"{', '.join(ARITH_NAMES)})")
            arith = value
        elif name in LIMIT_OPTIONS:
            field = LIMIT_OPTIONS[name]
            if field in limits:
                raise Malformed(f"{where}{name} is given twice")
            limits[field] = _positive(name, value, type(getattr(Limits, field)), where)
        else:
            known = ", ".join(["--arith", *LIMIT_OPTIONS])
            raise Malformed(f"{where}unknown option {name!r} (known: {known})")
    return arith, limits


def _positive(name: str, value: str, kind: type, where: str):
    """`value` as check-cert's argparse would read it (int or float), refused unless it is
    a positive finite number."""
    try:
        number = kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise Malformed(f"{where}{name}={value!r} is not {what}") from None
    if not 0 < number < float("inf"):
        raise Malformed(f"{where}{name}={value!r} must be positive")
    return number


def pinned_model_sha256(atoms: list[statement.Atom]) -> str | None:
    """The `model_file == sha256:...` digest a statement pins, if any."""
    return next((a.value for a in atoms if a.field == "model_file"), None)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes as they are now: what `gen-cert --pin` pins as
    `certificate == sha256:...` for the certificate it has just written."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def pinned_certificate_sha256(atoms: list[statement.Atom]) -> str | None:
    """The `certificate == sha256:...` digest a statement pins, if any."""
    return next((a.value for a in atoms if a.field == "certificate"), None)


@dataclass(frozen=True)
class Policy:
    path: Path
    entries: tuple[Entry, ...]

    @property
    def base(self) -> Path:
        """The directory relative paths are resolved from."""
        return self.path.parent

    def resolve(self, relative: str) -> Path:
        return self.base / relative

    def entries_for(self, files: list[str]) -> tuple[Entry, ...]:
        """The entries a change to `files` (paths as given, e.g. by pre-commit) concerns:
        those whose certificate or model file is among them, or whose save_pretrained
        directory holds one, compared after resolving '..' and symbolic links; every
        entry if the policy itself is among them (any line may have changed)."""
        changed = {_real(Path(f)) for f in files}
        if _real(self.path) in changed:
            return self.entries

        def concerned(entry: Entry) -> bool:
            model = _real(self.resolve(entry.model))
            return (_real(self.resolve(entry.certificate)) in changed
                    or any(f == model or model in f.parents for f in changed))

        return tuple(e for e in self.entries if concerned(e))


def _is_comment(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


def parse_line(line: str, lineno: int, where: str) -> Entry:
    """One non-comment line -> Entry; Malformed naming the line on any problem.

    Postconditions: the options are valid (`_parse_options`); an entry that sets a limit
    pins `certificate == sha256:...`; the statement parses (spec/statements.md).
    """
    fields = line.split(None, 2)
    if len(fields) < 3:
        raise Malformed(f"{where}:{lineno}: expected 'CERTIFICATE MODEL_FILE STATEMENT', "
                        f"got {line.strip()!r}")
    cert, model, rest = fields[0], fields[1], fields[2].strip()
    options = []
    while rest.startswith("--"):  # no statement starts with '-': the options end there
        token, *tail = rest.split(None, 1)
        options.append(token)
        rest = tail[0] if tail else ""
    if not rest:
        raise Malformed(f"{where}:{lineno}: expected a statement after the options, "
                        f"got {line.strip()!r}")
    _, limits = _parse_options(tuple(options), f"{where}:{lineno}: ")
    atoms = statement.parse(rest, f"{where}:{lineno}")
    if limits and pinned_certificate_sha256(atoms) is None:
        # raised limits are for the bytes they were measured on: a certificate replaced
        # in a pull request is then `modified` before it is checked, never run under them
        raise Malformed(f"{where}:{lineno}: an entry that sets a limit must pin its "
                        "certificate (certificate == sha256:...)")
    return Entry(cert, model, rest, lineno, tuple(options))


def parse(text: str, where: str) -> list[Entry]:
    """All entries of a policy's text.  A certificate named twice is malformed.

    Complexity: linear in the text (each statement parsed once, LALR).
    """
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if _is_comment(line):
            continue
        entry = parse_line(line, lineno, where)
        key = os.path.normpath(entry.certificate)
        if key in seen:
            raise Malformed(f"{where}:{lineno}: certificate {entry.certificate} is already "
                            f"named on line {seen[key]}")
        seen[key] = lineno
        entries.append(entry)
    return entries


def _read_text(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_POLICY_BYTES + 1)
    except OSError as err:
        raise Malformed(f"cannot read policy {path}: {err.strerror}") from None
    if len(data) > MAX_POLICY_BYTES:
        raise Malformed(f"policy {path} is larger than {MAX_POLICY_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"policy {path} is not UTF-8 text") from None


def load(path: str | os.PathLike) -> Policy:
    """Read and validate the policy at `path`.  Raises Malformed (exit 2)."""
    p = Path(path)
    entries = tuple(parse(_read_text(p), str(p)))
    _refuse_same_file_twice(entries, p)
    return Policy(p, entries)


def _refuse_same_file_twice(entries: tuple[Entry, ...], path: Path) -> None:
    """A certificate is named at most once however it is spelled: `a.jsonl`,
    `../certs/a.jsonl`, an absolute path and a symbolic link to it are one file
    (compared after resolving '..' and links), else one certificate could be held to
    the weaker of two statements or counted twice."""
    seen: dict[Path, Entry] = {}
    for entry in entries:
        key = _real(path.parent / entry.certificate)
        if key in seen:
            first = seen[key]
            raise Malformed(f"{path}:{entry.lineno}: certificate {entry.certificate} is the "
                            f"same file as {first.certificate}, already named on line "
                            f"{first.lineno}")
        seen[key] = entry


def _real(path: Path) -> Path:
    """`path` with '..' and symbolic links resolved (as far as they exist)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: the check reports the file itself
        return Path(os.path.abspath(path))


def _relative(path: str | os.PathLike, base: Path) -> str:
    """`path` as written in a policy whose directory is `base` (directories' symbolic
    links resolved, so that the OS, walking from the real `base`, finds `path`)."""
    path = Path(path)
    rel = os.path.relpath(os.path.join(os.path.realpath(path.parent), path.name),
                          os.path.realpath(base))
    if any(c.isspace() for c in rel) or not rel:
        raise Malformed(f"path {rel!r} cannot be written in a policy (it contains whitespace)")
    return rel.replace(os.sep, "/")


def _same_certificate(a: str, b: str, base: Path) -> bool:
    """Whether two certificate paths of a policy in `base` name the same file."""
    return os.path.normpath(a) == os.path.normpath(b) or _real(base / a) == _real(base / b)


def pin(policy_path: str | os.PathLike, certificate: str | os.PathLike,
        model: str | os.PathLike, require: str) -> str:
    """Add or update the entry for `certificate` in the policy at `policy_path`.

    The entry's line is replaced in place if the certificate is already named
    (same path once normalized), keeping its options (`--arith=arb`, limits: the
    auditor's, not the generator's), otherwise appended; every other line is kept.
    A missing policy file is created.  The file is replaced atomically.
    Returns "added" or "updated".
    """
    p = Path(policy_path)
    text = _read_text(p) if p.exists() else HEADER
    parse(text, str(p))  # refuse to edit a malformed policy
    statement.parse(require, "pinned statement")
    cert, mdl = _relative(certificate, p.parent), _relative(model, p.parent)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not _is_comment(line) and _same_certificate(line.split()[0], cert, p.parent):
            old = parse_line(line, i + 1, str(p))
            lines[i] = _line(cert, mdl, old.options, require)
            parse_line(lines[i], i + 1, "pinned entry")  # e.g. limits without a pin
            action = "updated"
            break
    else:
        lines.append(_line(cert, mdl, (), require))
        action = "added"
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return action


def _line(cert: str, model: str, options: tuple[str, ...], require: str) -> str:
    return "  ".join([cert, model, *options, require])
