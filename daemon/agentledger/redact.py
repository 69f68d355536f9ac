"""Passwords out of everything people see: URLs shown or used as keys, errors, log
lines. libpq repeats a malformed URL whole in its error, or quotes a piece of it,
so a message is scrubbed of the URL's own password wherever it stands, and of any
URL password or ``password=`` value in general (``scrub``)."""

from __future__ import annotations

import re
from urllib.parse import unquote

_USERINFO_PASSWORD = r"^([a-z][a-z0-9+.-]*://[^/@:?#]*):[^@/?#]*@"
_PASSWORD_PARAM = r"([?&])password=[^&#]*&?"
# a password as a URL parameter (?password=…) or in libpq's keyword/value form
# (password=S3cret, password = 'se cret', password='it\'s'): the value as written
_KEYWORD_PASSWORD = r"(?:^|[?&\s])password\s*=\s*('(?:[^'\\]|\\.)*'?|[^&#\s]*)"


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    url = re.sub(_USERINFO_PASSWORD, r"\1:***@", url, flags=re.I)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url, flags=re.I)


def strip_password(url: str) -> str:
    """``url`` with no password at all (user info and ``password=`` parameter)."""
    url = re.sub(_USERINFO_PASSWORD, r"\1@", url, flags=re.I)
    url = re.sub(_PASSWORD_PARAM, r"\1", url, flags=re.I)
    return url[:-1] if url.endswith(("?", "&")) else url


def url_secrets(url: str) -> list[str]:
    """The passwords ``url`` carries (user info, ``password=``), as written and
    percent-decoded, longest first; found even in a URL too malformed to parse."""
    found = []
    m = re.match(r"^[a-z][a-z0-9+.-]*://([^@/?#]*)@", url, flags=re.I) or re.match(r"^[^@]*?://([^@]*)@", url)
    if m and ":" in m.group(1):
        found.append(m.group(1).split(":", 1)[1])
    for value in re.findall(_KEYWORD_PASSWORD, url, flags=re.I):
        if value.startswith("'"):  # keyword/value form, quoted: \' and \\ escaped inside
            found += [value, value[1:-1] if value.endswith("'") and len(value) > 1 else value[1:]]
            value = re.sub(r"\\(.)", r"\1", found[-1])
        found.append(value)
    out = {v for f in found if f for v in (f, unquote(f))}
    return sorted(out, key=len, reverse=True)


def scrub(text: str, url: str | None = None) -> str:
    """``text`` (an error, a log line) with every password in it replaced by ``***``:
    those of ``url`` wherever they stand, including a fragment of four or more of
    their characters quoted by libpq ("invalid percent-encoded token"), and any URL
    user-info password or ``password=`` value whatever URL it belongs to."""
    if not text:
        return text
    for secret in url_secrets(url) if url else []:
        text = text.replace(secret, "***")
        if len(secret) >= 4:
            def hide(m: re.Match, secret: str = secret) -> str:
                inner = m.group(0)[1:-1]
                shares = any(inner[i:i + 4] in secret for i in range(max(0, len(inner) - 3)))
                return m.group(0)[0] + "***" + m.group(0)[-1] if shares else m.group(0)
            text = re.sub(r'"[^"\n]*"|\'[^\'\n]*\'', hide, text)
    text = re.sub(r"([a-z][a-z0-9+.-]*://[^/@:?#\s\"']*):[^@\s\"']*@", r"\1:***@", text, flags=re.I)
    # a quoted value ends at a quote that ends a word: an escaped quote inside it (\'),
    # even one whose backslash a repr() doubled, hides no part of the password
    return re.sub(r"(password\s*=\s*)('(?:[^'\n]|'(?![\s\"&]|$))*'?|[^&\s']+)", r"\1***", text, flags=re.I)
