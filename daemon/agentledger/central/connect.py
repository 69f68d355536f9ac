"""Connections to the team ledger, and what their failures mean to a person.

Credentials come from the URL, the ``PG*`` environment variables or a password
file (libpq reads those itself); they are never logged: every message names the
server by its URL with the password replaced (``config.redact_url``).
"""

from __future__ import annotations

from ..config import redact_url

CONNECT_TIMEOUT = 10  # seconds, unless the URL says otherwise


class CentralError(RuntimeError):
    """A team-ledger failure, worded for one line: the server, and what went wrong."""


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("psycopg") is not None


def connect(url: str, *, autocommit: bool = False, application: str = "agentledger"):
    """A psycopg connection, or a CentralError saying why not (unreachable, refused,
    wrong password, no such database) without the password."""
    if not available():
        raise CentralError("the team ledger needs psycopg: pip install 'agentledger[central]'")
    import psycopg

    kwargs = {"autocommit": autocommit, "application_name": application}
    if "connect_timeout" not in url:
        kwargs["connect_timeout"] = CONNECT_TIMEOUT
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        raise CentralError(f"{redact_url(url)}: {describe(exc)}") from None


def describe(exc: BaseException) -> str:
    """The useful line of a psycopg error: the server's message, or libpq's reason
    ("Connection refused", "password authentication failed for user …"), without the
    hints and without repeating connection parameters."""
    lines = [t.strip() for t in str(exc).strip().splitlines() if t.strip()]
    line = next((t for t in lines if not t.startswith(("DETAIL", "HINT", "Is the server"))), type(exc).__name__)
    line = line.split("FATAL:", 1)[-1].strip()
    if "failed:" in line:  # "connection failed: connection to server at …, port 5432 failed: Connection refused"
        line = line.rsplit("failed:", 1)[-1].strip() or line
    return line
