"""What reaches a person: every string that came from data (a ledger name, a file path,
a vally eval or variant, a value a query returns, a log field) is shown through
``shown``, and every error line through ``message``: control characters escaped, so
an escape sequence in a name clears no screen and a line break forges no line, and
(``message``) every password libpq's forms can carry replaced by ``***``.

Escaped: C0 controls (but a tab), DEL, C1 controls, the Unicode line and paragraph
separators, the bidirectional overrides and isolates (text that reads one way and
runs another), and lone surrogates. Standard library only, and importable by every
package."""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROL_IN_STREAM = re.compile(  # a CR that ends a line (CSV's \r\n) stays too
    r"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def shown(value: Any, limit: int | None = None) -> str:
    """``value`` as text fit for a terminal or a log line: one line, controls escaped
    (``\\x1b``, ``\\x0a``, ``\\u202e``), at most ``limit`` characters (cut with ``…``)."""
    text = _CONTROL.sub(_escape, value if isinstance(value, str) else str(value))
    if limit is not None and len(text) > limit:
        return text[:limit - 1] + "…"
    return text


def shown_lines(value: Any, limit: int | None = None) -> str:
    """``shown``, but the line breaks a multi-line text is meant to have stay (a parser's
    message, a traceback)."""
    text = _CONTROL_BUT_NEWLINE.sub(_escape, value if isinstance(value, str) else str(value))
    if limit is not None and len(text) > limit:
        return text[:limit - 1] + "…"
    return text


def message(text: str, url: str | None = None) -> str:
    """An error or usage line for stderr: scrubbed of passwords (``redact.scrub``: those of
    ``url`` wherever they stand, and any URL or keyword/value password) and escaped as
    ``shown_lines`` escapes (a message may hold a line break of its own)."""
    from .redact import scrub

    return shown_lines(scrub(text, url))


class Escaping:
    """A text stream that escapes, as ``shown_lines`` does, whatever is written to it (a CR
    before a line break stays: CSV ends its rows so): the
    command line's standard output, so that nothing a command prints from data (a table
    cell, a vally variant, a path in a report line) reaches a terminal raw, whichever code
    printed it. Line breaks and tabs stay; an export, whose bytes are the ledger's, is
    written to the stream underneath (``raw``)."""

    def __init__(self, raw) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(_CONTROL_IN_STREAM.sub(_escape, text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)
