"""check-cert audit shows per-certificate progress on a terminal (issue 19 item 6): a status
line on stderr between verdicts, erased before each verdict and at the end; nothing of it
off a terminal."""

from __future__ import annotations

import io

from checker import audit


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_line_between_verdicts(capsys, monkeypatch):
    shown = audit._Shown(3, started=0.0)
    term = _Terminal()
    shown.status.stream, shown.status.enabled = term, True
    result = {"verdict": "verified", "certificate": "a.jsonl", "message": "ok"}
    shown(result)
    assert "audit: 1 of 3 certificates checked" in term.getvalue()
    shown(result)
    shown.close()
    assert term.getvalue().endswith("\r")  # erased: nothing stays on the terminal
    assert capsys.readouterr().out.count("VERIFIED") == 2


def test_no_status_line_off_a_terminal(capsys):
    shown = audit._Shown(2, started=0.0)
    assert not shown.status.enabled or not shown.status.stream.isatty()
