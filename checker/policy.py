"""Audit policies: which certificates a repository keeps, and what each must prove
(spec/policy.md).

A policy is a text file, one entry per line:

    # comment
    CERTIFICATE  MODEL_FILE  STATEMENT

Paths are relative to the policy's own directory (or absolute) and contain no
whitespace; STATEMENT is the rest of the line, in the language of
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
from .errors import Malformed

MAX_POLICY_BYTES = 1 << 20  # a policy is a short list; anything larger is refused
HEADER = ("# check-cert audit policy (spec/policy.md): CERTIFICATE  MODEL_FILE  STATEMENT\n"
          "# Paths are relative to this file's directory.\n")


@dataclass(frozen=True)
class Entry:
    """One policy line: certificate and model file (as written) and the statement."""

    certificate: str
    model: str
    require: str
    lineno: int  # 1-based line of the policy file


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

    Postcondition: the statement parses (spec/statements.md).
    """
    fields = line.split(None, 2)
    if len(fields) < 3:
        raise Malformed(f"{where}:{lineno}: expected 'CERTIFICATE MODEL_FILE STATEMENT', "
                        f"got {line.strip()!r}")
    cert, model, require = fields[0], fields[1], fields[2].strip()
    statement.parse(require, f"{where}:{lineno}")
    return Entry(cert, model, require, lineno)


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
    (same path once normalized), otherwise appended; every other line is kept.
    A missing policy file is created.  The file is replaced atomically.
    Returns "added" or "updated".
    """
    p = Path(policy_path)
    text = _read_text(p) if p.exists() else HEADER
    parse(text, str(p))  # refuse to edit a malformed policy
    statement.parse(require, "pinned statement")
    cert, mdl = _relative(certificate, p.parent), _relative(model, p.parent)
    new_line = f"{cert}  {mdl}  {require}"
    lines = text.splitlines()
    action = "added"
    for i, line in enumerate(lines):
        if not _is_comment(line) and _same_certificate(line.split()[0], cert, p.parent):
            lines[i], action = new_line, "updated"
            break
    else:
        lines.append(new_line)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return action
